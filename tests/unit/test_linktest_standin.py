"""files/spark-link-test with the twins' stand-in torch (tests/twins/standins/engine/pylib):
ranks run as local processes on 127.0.0.1, the "nccl" backend moves the bytes over TCP, the
results agree across ranks and the NCCL network lines follow the container's devices and
limits. Small sizes: the stand-in reduces in Python."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from sparkdeploy.render import FILES

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = FILES / "spark-link-test"
PYLIB = ROOT / "tests" / "twins" / "standins" / "engine" / "pylib"
PREFIX = "spark-link-test-result "
RDMA = {"SPARK_TWIN_DEVICES": "/dev/infiniband", "SPARK_TWIN_ULIMITS": "memlock=-1:-1"}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def run_ranks(
    nodes: int, *args: str, extra: dict[str, str] | None = None
) -> list[tuple[int, str, dict]]:
    """Run every rank at once; (exit status, output, result) per rank."""
    port = free_port()
    processes = []
    for rank in range(nodes):
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "PYTHONPATH": str(PYLIB),
            "PYTHONDONTWRITEBYTECODE": "1",  # nothing written beside the stand-ins
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "RANK": str(rank),
            "WORLD_SIZE": str(nodes),
            "NCCL_DEBUG": "INFO",
            **(extra or {}),
        }
        processes.append(
            subprocess.Popen(
                [sys.executable, str(SCRIPT), "--timeout", "60", *args],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    found = []
    for process in processes:
        output, _ = process.communicate(timeout=120)
        lines = [line for line in output.splitlines() if line.startswith(PREFIX)]
        found.append((process.returncode, output, json.loads(lines[-1][len(PREFIX) :])))
    return found


def test_two_ranks_measure_and_agree():
    ranks = run_ranks(
        2,
        "--sizes",
        "65536,1048576",
        "--iters",
        "3",
        "--warmup",
        "1",
        "--min-busbw",
        "0.001",
        "--memory-floor-gib",
        "0",
        extra=RDMA,
    )
    for status, output, result in ranks:
        assert status == 0, output
        assert result["passed"] and result["nodes"] == 2
        assert [(row["op"], row["size"]) for row in result["results"]] == [
            ("all_gather", 65536),
            ("all_reduce", 65536),
            ("all_gather", 1048576),
            ("all_reduce", 1048576),
        ]
        for row in result["results"]:
            assert row["busbw"] > 0
            factor = 0.5 if row["op"] == "all_gather" else 1.0  # (n-1)/n, 2(n-1)/n for n=2
            assert row["busbw"] == pytest.approx(row["algbw"] * factor, abs=0.002)
        assert "via NET/IB/0" in output and "NET/Socket" not in output
    # The times are averaged over the ranks: every rank reports the same table.
    assert ranks[0][2]["results"] == ranks[1][2]["results"]


def test_three_ranks_without_rdma_use_sockets_and_fail_a_threshold():
    ranks = run_ranks(
        3,
        "--sizes",
        "3072,98304",
        "--iters",
        "2",
        "--warmup",
        "0",
        "--min-busbw",
        "1000000",
        "--memory-floor-gib",
        "0",
    )
    for status, output, result in ranks:
        assert status == 1, output  # below the threshold; the all_reduce sums checked out
        assert not result["passed"]
        assert "< 1e+06 GB/s" in result["verdict"]
        assert "via NET/Socket/0" in output and "via NET/IB" not in output


def test_sizes_that_do_not_fit_are_skipped_on_every_rank():
    ranks = run_ranks(
        2,
        "--sizes",
        "65536",
        "--iters",
        "1",
        "--memory-floor-gib",
        "100000",  # no Spark has this much left: every size is skipped, on every rank
        "--min-busbw",
        "0.001",
    )
    for status, _output, result in ranks:
        assert status == 1
        assert result["skipped"] == [65536] and result["results"] == []
        assert result["verdict"] == "no all-gather size was run"


def test_no_rendezvous_is_reported():
    port = free_port()
    env = {
        "PYTHONPATH": str(PYLIB),
        "PYTHONDONTWRITEBYTECODE": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "RANK": "1",
        "WORLD_SIZE": "2",
    }
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--sizes", "1024", "--timeout", "1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    result = json.loads(done.stdout.splitlines()[-1][len(PREFIX) :])
    assert result["verdict"].startswith("no process group: rank 1: no rendezvous at 127.0.0.1")
