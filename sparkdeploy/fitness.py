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
