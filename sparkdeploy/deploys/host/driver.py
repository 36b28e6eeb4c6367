"""
The NVIDIA driver: a Spark must stay on the 580 branch (590 deadlocks CUDA graphs on GB10).
The installed package is held so an upgrade cannot move it; a host on another branch is
refused before anything is changed.
"""

from __future__ import annotations

import re
from typing import Protocol

from pyinfra import host
from pyinfra.api import deploy, operation

from sparkdeploy.config.spark import SparkSettings
from sparkdeploy.deploys.refuse import refuse
from sparkdeploy.facts.host_state import host_state
from sparkdeploy.facts.preflight import Preflight, preflight

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


@operation()
def held(packages: list[str]):
    """
    Hold packages with apt-mark so an upgrade cannot replace them.

    + packages: names of installed packages to hold

    **Example:**

    .. code:: python

        driver.held(packages=["nvidia-driver-580-open"])
    """
    holds = host_state().holds
    missing = [name for name in packages if name not in holds]
    if not missing:
        host.noop(f"already held: {', '.join(packages)}")
        return
    yield f"apt-mark hold {' '.join(missing)}"


@deploy("Hold the NVIDIA driver branch")
def hold_driver() -> None:
    spark: SparkSettings = host.data.spark
    state = host_state()
    problems = driver_refusals(state, preflight(), spark)
    if problems:
        refuse(problems[:1])
    held(
        name=f"Hold the {spark.driver_branch} driver packages",
        packages=sorted(driver_packages(state)),
    )
