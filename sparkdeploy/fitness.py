"""
Is a Spark fit for the deploy: pure judgements over facts and settings, shared by the deploy
(which refuses an unfit Spark before changing anything) and the status table (which shows
the same verdict read-only).
"""

from __future__ import annotations

import re
from typing import Protocol

from sparkdeploy.config.spark import SparkSettings
from sparkdeploy.facts.preflight import Preflight

GB10 = "GB10"


def gpu_refusals(facts: Preflight, spark: SparkSettings) -> list[str]:
    """Why this host may not be deployed to (empty when it may)."""
    if spark.allow_non_gb10:
        return []
    if not facts.gpu:
        return [
            "no NVIDIA GPU answered `nvidia-smi -L` (driver missing or not loaded); "
            "a DGX Spark always has one"
        ]
    if GB10 not in facts.gpu_name.split():
        return [
            f"its GPU is '{facts.gpu_name}', not an NVIDIA {GB10}; this deploy prepares "
            "DGX Spark (GB10) hosts"
        ]
    return []


TOOLKIT_FIX = (
    "sudo apt-get install -y nvidia-container-toolkit && "
    "sudo nvidia-ctk runtime configure --runtime=docker && sudo systemctl restart docker"
)


def runtime_refusals(facts: Preflight) -> list[str]:
    """
    Why this Spark cannot run an engine container (empty when it can). `--gpus all` works
    when dockerd finds the NVIDIA Container Toolkit's hook (moby daemon/nvidia_linux.go
    registers its GPU driver only when nvidia-container-runtime-hook is on its PATH), when
    an `nvidia` runtime is configured, or through a CDI spec for nvidia.com/gpu; NVIDIA's
    playbooks list Docker and the toolkit as prerequisites (field-2026-11.md section 4).
    """
    if not facts.docker:
        return [
            "docker is not installed; the engine runs in a container. Install Docker Engine "
            f"(https://docs.docker.com/engine/install/ubuntu/), then: {TOOLKIT_FIX}"
        ]
    if not facts.docker_server:
        return [
            f"the Docker daemon does not answer ({facts.docker_error or 'no answer'}): "
            "run `sudo systemctl enable --now docker` and run the deploy again"
        ]
    if not (facts.gpu_hook or "nvidia" in facts.docker_runtimes or facts.gpu_cdi):
        return [
            "docker cannot give a container the GPU (`--gpus all`): there is neither the "
            "NVIDIA Container Toolkit's nvidia-container-runtime-hook, nor an `nvidia` runtime, "
            f"nor a CDI spec for nvidia.com/gpu. Run: {TOOLKIT_FIX}"
        ]
    return []


DRIVER_PACKAGE = re.compile(r"^nvidia-driver-(\d+)(-open|-server|-server-open)?$")


class InstalledPackages(Protocol):
    """What the driver checks read: installed package -> version (HostState, SparkStatus)."""

    @property
    def packages(self) -> dict[str, str]: ...


def driver_packages(state: InstalledPackages) -> dict[str, int]:
    """Installed driver metapackages -> branch."""
    return {
        name: int(match.group(1))
        for name in state.packages
        if (match := DRIVER_PACKAGE.match(name))
    }


def driver_refusals(state: InstalledPackages, facts: Preflight, spark: SparkSettings) -> list[str]:
    """Why this host's driver is not fit (empty when it is)."""
    wanted = spark.driver_branch
    installed = driver_packages(state)
    listing = ", ".join(f"{name} {state.packages[name]}" for name in sorted(installed)) or "none"
    loaded = facts.driver.split(".")[0]
    problems = []
    others = sorted(name for name, branch in installed.items() if branch != wanted)
    if others or (loaded.isdigit() and int(loaded) != wanted):
        problems.append(
            f"driver branch {wanted} is required (590 deadlocks CUDA graphs on GB10), but "
            f"installed packages are: {listing}; loaded driver: {facts.driver or 'none'}. "
            f"Purge the other branch, install nvidia-driver-{wanted}-open, reboot, and run "
            "the deploy again"
        )
    elif not installed:
        problems.append(
            f"no nvidia-driver-{wanted}* package is installed (installed: {listing}). "
            f"Install nvidia-driver-{wanted}-open (what DGX OS ships), reboot, and run again"
        )
    return problems
