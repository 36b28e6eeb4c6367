"""
The preflight fact: what the deploy must know about a Spark before it changes anything.
"""

from __future__ import annotations

from dataclasses import dataclass

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

    @property
    def gpu_name(self) -> str:
        """ "GPU 0: NVIDIA GB10 (UUID: GPU-...)" -> "NVIDIA GB10"."""
        name = self.gpu.split(":", 1)[1] if ":" in self.gpu else self.gpu
        return name.split("(UUID:", 1)[0].strip()


class SparkPreflight(FactBase):
    """
    Returns what the deploy must know about a Spark before it changes anything, in one
    round trip: GPU, driver, architecture, OS, kernel, memory, free disk at the model
    folder, the drm override conf and a pending reboot.

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
        )


def preflight() -> Preflight:
    """The current host's preflight fact, gathered once per run."""
    return gathered(host, SparkPreflight, model_dir=host.data.spark.model_dir)
