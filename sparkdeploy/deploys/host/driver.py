"""
The NVIDIA driver: a Spark must stay on the 580 branch (590 deadlocks CUDA graphs on GB10).
The installed package is held so an upgrade cannot move it; a host on another branch is
refused before anything is changed.
"""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import deploy, operation

from sparkdeploy.config.spark import SparkSettings
from sparkdeploy.deploys.refuse import refuse
from sparkdeploy.facts.host_state import host_state
from sparkdeploy.facts.preflight import preflight
from sparkdeploy.fitness import driver_packages, driver_refusals


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
