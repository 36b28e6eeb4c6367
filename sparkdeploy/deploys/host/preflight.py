"""
Preflight: make sure the host is a DGX Spark (GB10) before anything on it is changed.
"""

from __future__ import annotations

from pyinfra import host, logger
from pyinfra.api import deploy

from sparkdeploy.config.spark import SparkSettings
from sparkdeploy.deploys.refuse import refuse
from sparkdeploy.facts.host_state import host_state
from sparkdeploy.facts.network import network
from sparkdeploy.facts.preflight import Preflight, preflight
from sparkdeploy.facts.store import prefetch
from sparkdeploy.fitness import gpu_refusals, runtime_refusals

KB_PER_GB = 1000 * 1000 / 1024  # /proc/meminfo and df -k count KiB; GB are decimal


def summary(facts: Preflight) -> str:
    def gb(kb: int) -> str:
        return f"{kb / KB_PER_GB / 1000:.1f} GB"

    docker = (
        f", docker {facts.docker_server} ({facts.docker_driver}, "
        f"{gb(facts.docker_free_kb)} free at {facts.docker_root})"
        if facts.docker_server
        else ""
    )
    return (
        f"{facts.gpu_name or 'no GPU'}, driver {facts.driver or '?'}, {facts.arch}, "
        f"{facts.os}, kernel {facts.kernel}, memory {gb(facts.mem_available_kb)} available "
        f"of {gb(facts.mem_total_kb)}, {gb(facts.disk_free_kb)} free at {facts.disk_path}"
        f"{docker}"
    )


@deploy("Check the host is a DGX Spark")
def check_spark() -> None:
    """
    Refuse a host that is not a GB10 Spark, before any operation is planned for it.
    Override per host with ``allow_non_gb10: true``. A Spark that will run an engine must
    also have a container runtime that gives containers the GPU.
    """
    spark: SparkSettings = host.data.spark
    # The other facts later steps plan from are read-only and need nothing from this one:
    # their round trips run while this one does (a no-op run of the pair waited 0.17 + 0.59
    # + 0.59 s for the three one after another). The QSFP steps ask for the network fact
    # only when the inventory lists rails (configure_qsfp_network), so only then is it taken.
    prefetch(lambda: host_state(host), *([lambda: network(host)] if spark.qsfp else []))
    facts = preflight()
    problems = gpu_refusals(facts, spark)
    if problems:
        refuse(
            problems,
            fix=f"If this host is fit anyway, set allow_non_gb10: true for "
            f"{host.name} in the inventory.",
        )
    if host.data.get("engine_plan") is not None and (problems := runtime_refusals(facts)):
        refuse(problems)
    logger.info(f"{host.print_prefix}preflight: {summary(facts)}")
