"""
The preflight fact: what the deploy must know about a Spark before it changes anything.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pyinfra import host
from pyinfra.api import FactBase

from sparkdeploy.config.paths import DRM_OVERRIDE_CONF, REBOOT_PENDING
from sparkdeploy.escape import shell
from sparkdeploy.facts.store import gathered


@dataclass(frozen=True)
class Preflight:
    gpu: str  # the `nvidia-smi -L` line of GPU 0, "" when nvidia-smi is missing or fails
    driver: str
    arch: str
    os: str
    kernel: str
    mem_total_kb: int
    mem_available_kb: int
    disk_path: str  # the model folder, or its nearest existing parent
    disk_free_kb: int
    drm_override: bool
    reboot_pending: str  # the reason recorded when a reboot became pending, "" if none
    docker: str = ""  # the docker command's path, "" when it is not installed
    docker_server: str = ""  # the daemon's version, "" when it does not answer
    docker_error: str = ""  # why `docker info` failed (its last line)
    docker_driver: str = ""  # storage driver (overlay2)
    docker_root: str = ""  # DockerRootDir: where images are stored
    docker_free_kb: int = 0  # free space there
    docker_runtimes: tuple[str, ...] = ()  # the daemon's runtimes (runc, nvidia)
    gpu_hook: str = ""  # path of nvidia-container-runtime-hook, "" when not on PATH
    gpu_cdi: str = ""  # a CDI spec file naming nvidia.com/gpu, "" when none

    @property
    def gpu_name(self) -> str:
        """ "GPU 0: NVIDIA GB10 (UUID: GPU-...)" -> "NVIDIA GB10"."""
        name = self.gpu.split(":", 1)[1] if ":" in self.gpu else self.gpu
        return name.split("(UUID:", 1)[0].strip()


# The container runtime, as `docker info` and the toolkit's files show it. The format is
# fields every daemon since Docker 1.x has (a missing field would fail the whole template);
# CDI specs are found by their files (/etc/cdi, /var/run/cdi: the CDI spec directories).
DOCKER_LINES = (
    "printf 'docker=%s\\n' \"$(command -v docker)\"",
    "info=$(docker info --format '{{.ServerVersion}}|{{.Driver}}|{{.DockerRootDir}}|"
    "{{json .Runtimes}}' 2>&1 | tail -n1)",
    "printf 'docker_info=%s\\n' \"$info\"",
    "root=$(printf '%s' \"$info\" | cut -d'|' -f3)",
    'if [ -n "$root" ]; then while [ ! -d "$root" ]; do root=$(dirname "$root"); done;'
    ' df -Pk "$root" | awk \'NR==2{print "docker_free_kb="$4}\'; fi',
    "printf 'gpu_hook=%s\\n' \"$(command -v nvidia-container-runtime-hook)\"",
    "printf 'gpu_cdi=%s\\n' \"$(grep -ls 'nvidia.com/gpu' /etc/cdi/* /var/run/cdi/* 2>/dev/null"
    ' | head -n1)"',
)


def parse_docker_info(line: str) -> dict[str, Any]:
    """``VERSION|DRIVER|ROOT|RUNTIMES`` from `docker info`, or its error line."""
    parts = line.split("|", 3)
    if len(parts) != 4 or not parts[0]:
        return {"docker_error": line.strip()}
    try:
        runtimes = tuple(sorted(json.loads(parts[3]) or {}))
    except ValueError:
        runtimes = ()
    return {
        "docker_server": parts[0],
        "docker_driver": parts[1],
        "docker_root": parts[2],
        "docker_runtimes": runtimes,
    }


class SparkPreflight(FactBase):
    """
    Returns what the deploy must know about a Spark before it changes anything, in one
    round trip: GPU, driver, architecture, OS, kernel, memory, free disk at the model
    folder, the drm override conf and a pending reboot; and the container runtime: Docker,
    its daemon, storage driver and room, and what gives containers the GPU (the NVIDIA
    Container Toolkit's hook, an ``nvidia`` runtime, a CDI spec).

    Sample output of the command::

        gpu=GPU 0: NVIDIA GB10 (UUID: GPU-5b2e0c3a-8f41-4d7e-9a36-1c0f6e2d9b71)
        driver=580.95.05
        arch=aarch64
        kernel=6.11.0-1016-nvidia
        os=Ubuntu 24.04.3 LTS
        mem_total_kb=125513548
        mem_available_kb=119203140
        disk_path=/opt
        disk_free_kb=3401563204
        drm_override=1
        reboot_pending=
        docker=/usr/bin/docker
        docker_info=28.5.1|overlay2|/var/lib/docker|{"io.containerd.runc.v2":{"path":"runc"},"nvidia":{"path":"nvidia-container-runtime"},"runc":{"path":"runc"}}
        docker_free_kb=3401563204
        gpu_hook=/usr/bin/nvidia-container-runtime-hook
        gpu_cdi=/etc/cdi/nvidia.yaml

    .. code:: python

        Preflight(gpu="GPU 0: NVIDIA GB10 (UUID: ...)", driver="580.95.05", arch="aarch64",
                  ..., drm_override=True, reboot_pending="")
    """

    def command(self, model_dir: str) -> str:
        folder = shell(model_dir)
        return "; ".join(
            [
                "printf 'gpu=%s\\n' \"$(nvidia-smi -L 2>/dev/null | head -n1)\"",
                "printf 'driver=%s\\n' \"$(nvidia-smi --query-gpu=driver_version"
                ' --format=csv,noheader 2>/dev/null | head -n1)"',
                'printf \'arch=%s\\nkernel=%s\\n\' "$(uname -m)" "$(uname -r)"',
                'printf \'os=%s\\n\' "$(. /etc/os-release && echo "$PRETTY_NAME")"',
                'awk \'/^MemTotal:/{print "mem_total_kb="$2}'
                ' /^MemAvailable:/{print "mem_available_kb="$2}\' /proc/meminfo',
                f"d={folder}",
                'while [ ! -d "$d" ]; do d=$(dirname "$d"); done',
                "printf 'disk_path=%s\\n' \"$d\"",
                'df -Pk "$d" | awk \'NR==2{print "disk_free_kb="$4}\'',
                f"printf 'drm_override=%s\\n' \"$(test -e {DRM_OVERRIDE_CONF} && echo 1)\"",
                f"printf 'reboot_pending=%s\\n' \"$(head -n1 {REBOOT_PENDING} 2>/dev/null)\"",
                *DOCKER_LINES,
            ]
        )

    def process(self, output: list[str]) -> Preflight:
        values = dict(line.split("=", 1) for line in output if "=" in line)

        def number(key: str) -> int:
            text = values.get(key, "").strip()
            return int(text) if text.isdigit() else 0

        return Preflight(
            gpu=values.get("gpu", "").strip(),
            driver=values.get("driver", "").strip(),
            arch=values.get("arch", ""),
            os=values.get("os", ""),
            kernel=values.get("kernel", ""),
            mem_total_kb=number("mem_total_kb"),
            mem_available_kb=number("mem_available_kb"),
            disk_path=values.get("disk_path", ""),
            disk_free_kb=number("disk_free_kb"),
            drm_override=values.get("drm_override") == "1",
            reboot_pending=values.get("reboot_pending", "").strip(),
            docker=values.get("docker", "").strip(),
            docker_free_kb=number("docker_free_kb"),
            gpu_hook=values.get("gpu_hook", "").strip(),
            gpu_cdi=values.get("gpu_cdi", "").strip(),
            **parse_docker_info(values.get("docker_info", "")),
        )


def preflight() -> Preflight:
    """The current host's preflight fact, gathered once per run."""
    return gathered(host, SparkPreflight, model_dir=host.data.spark.model_dir)
