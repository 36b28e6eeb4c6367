"""
The link test of a pair or cluster, planned before any host is touched: the `docker run`
command line each Spark runs at the same moment (its engine image, the engine's environment
files and RDMA options, the rendezvous at the head's fabric address, the sizes), and the
refusals that stop it before anything runs.

The test itself is files/spark-link-test: torch.distributed all_gather and all_reduce with
the "nccl" backend, bus bandwidth as nccl-tests computes it (NVIDIA/nccl-tests
doc/PERFORMANCE.md), judged against ``link_test_min_busbw`` at the largest size.
"""

from __future__ import annotations

from dataclasses import dataclass

from sparkdeploy.config.paths import CONTAINER_ENV, HF_ENV_FILE, LINK_TEST, NCCL_ENV
from sparkdeploy.config.spark import SparkSettings
from sparkdeploy.config.topology import Place
from sparkdeploy.engine_plan.plan import EnginePlan, gpu_container

CONTAINER = "spark-link-test"  # one name: a second run on the same Spark is refused by docker
# What a multi-node engine container needs for NCCL to use the ConnectX-7 RDMA devices: the
# devices and unlimited locked memory (NCCL registers its buffers with the RDMA device; NVIDIA
# cluster script and NCCL playbook run nccl-tests on the host, where both are given). Used
# until the engine plan carries the options decided for its containers (``rdma_args``).
DEFAULT_RDMA_OPTIONS = ("--device=/dev/infiniband", "--ulimit=memlock=-1:-1")
# NCCL's INFO lines name the network each channel uses ("via NET/IB/0" or "via NET/Socket/0"):
# the report says which one the test ran over (NCCL docs: NCCL_DEBUG, NCCL_DEBUG_SUBSYS).
NCCL_DEBUG_ENV = (("NCCL_DEBUG", "INFO"), ("NCCL_DEBUG_SUBSYS", "INIT,NET"))


def rdma_options(plan: EnginePlan) -> tuple[str, ...]:
    """The RDMA docker options of the engine's containers: the plan's own when it carries
    them (``rdma_args``, decided for multi-node engines), else DEFAULT_RDMA_OPTIONS. The one
    place the link test takes them from."""
    decided = getattr(plan, "rdma_args", None)
    return tuple(decided) if decided else DEFAULT_RDMA_OPTIONS


def env_files(plan: EnginePlan, place: Place) -> list[str]:
    """The engine container's --env-file list, as its unit has them (units.unit_text)."""
    return [
        HF_ENV_FILE,
        *([NCCL_ENV] if place.nodes > 1 else []),
        CONTAINER_ENV.format(name=plan.name),
    ]


# The all-gather threshold of a ring when link_test_min_busbw is not given: NVIDIA's cluster
# script judges a ring by MIN_NCCL_TEST_BW_RING = 10 (80 Gb/s; dgx-spark-playbooks
# spark_cluster_setup.py), not by the 21.875 of a pair or switch.
RING_MIN_BUSBW = 10.0


def min_busbw(spark: SparkSettings, place: Place) -> float:
    """The link test's threshold: link_test_min_busbw as given, else the ring's or the
    setting's default."""
    if place.ringed and "link_test_min_busbw" not in spark.model_fields_set:
        return RING_MIN_BUSBW
    return spark.link_test_min_busbw


@dataclass(frozen=True)
class LinkTestRun:
    """What one Spark runs for the link test."""

    words: tuple[str, ...]  # the docker run command line
    rank: int
    nodes: int
    master: str  # head fabric address:port


def link_test_run(plan: EnginePlan, place: Place, spark: SparkSettings) -> LinkTestRun:
    """The `docker run` of the link test on one Spark: as the engine's container runs (GPUs,
    host network and IPC, its environment files, its RDMA options and allowed docker
    options), the script mounted read-only at its own path, python3 in place of the image's
    entrypoint, the rendezvous variables last so they win over the environment files."""
    words = ["docker", *gpu_container(CONTAINER, docker_args=plan.docker_args), "--rm"]
    for env_file in env_files(plan, place):
        words += ["--env-file", env_file]
    options = rdma_options(plan)
    words += [*options, *(arg for arg in plan.docker_args if arg not in options)]
    rendezvous = (
        ("MASTER_ADDR", place.head_ip),
        ("MASTER_PORT", str(spark.link_test_port)),
        ("RANK", str(place.rank)),
        ("WORLD_SIZE", str(place.nodes)),
        ("LOCAL_RANK", "0"),
        *NCCL_DEBUG_ENV,
    )
    for name, value in rendezvous:
        words += ["-e", f"{name}={value}"]
    words += ["-v", f"{LINK_TEST}:{LINK_TEST}:ro", "--entrypoint", "python3", plan.image]
    words += [
        LINK_TEST,
        "--sizes",
        ",".join(str(size) for size in spark.link_test_size_bytes),
        "--min-busbw",
        f"{min_busbw(spark, place):g}",
        "--memory-floor-gib",
        str(spark.link_test_memory_floor_gb),
        "--timeout",
        str(spark.link_test_timeout),
        "--label",
        place.name,
    ]
    return LinkTestRun(
        tuple(words), place.rank, place.nodes, f"{place.head_ip}:{spark.link_test_port}"
    )


def group_problems(
    places: dict[str, Place],
    plans: dict[str, EnginePlan | None],
    sparks: dict[str, SparkSettings],
    in_run: set[str],
) -> list[str]:
    """Why the Sparks cannot run the link test together (empty when they can): it needs more
    than one Spark on the fabric, every one of them in this run, each with an engine plan
    (the image and environment it runs in) and the same link-test settings."""
    problems = []
    first = next(iter(places.values()), None)
    if first is None or first.nodes < 2:
        return ["the link test needs two or more Sparks in the inventory"]
    for name, place in places.items():
        if not place.linked:
            problems.append(f"{name}: not on the QSFP fabric (no qsfp rails, or the head has none)")
        if plans.get(name) is None:
            problems.append(f"{name}: no engine in the inventory, so no image to run the test in")
        if name not in in_run:
            problems.append(
                f"{name}: not in this run (--limit); every Spark of the {first.nodes} must take "
                "part at once"
            )
    keys = (
        "link_test_port",
        "link_test_sizes",
        "link_test_min_busbw",
        "link_test_memory_floor_gb",
        "link_test_timeout",
    )
    head = sparks[first.head]
    for name, spark in sparks.items():
        differing = [key for key in keys if getattr(spark, key) != getattr(head, key)]
        if differing:
            problems.append(
                f"{name}: {', '.join(differing)} differ from the head {first.head}'s; every "
                "Spark must run the same test"
            )
    return problems
