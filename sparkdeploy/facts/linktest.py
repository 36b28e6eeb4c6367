"""
The link test's facts: what a Spark must show before the test may start (``LinkTestReady``:
its engine units' state, each rail's link speed, the image, the script, MemAvailable), the
run itself (``LinkTestRun``: the `docker run` of the test, its output, and the result
written to LINK_TEST_RESULT), and the last stored result as the status fact reads it.

``LinkTestRun`` is a fact so that every Spark runs it at once: pyinfra loads the hosts of a
deploy file in parallel greenlets, and each asks for its own run.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from pyinfra.api import FactBase

from sparkdeploy.config.paths import LINK_TEST, LINK_TEST_RESULT
from sparkdeploy.engine_plan.linktest import CONTAINER
from sparkdeploy.escape import shell
from sparkdeploy.facts.network import captured, parse_captured

RESULT_PREFIX = "spark-link-test-result "  # files/spark-link-test's last line
CHANNEL = re.compile(r"NCCL INFO Channel .* via NET/(?P<net>[A-Za-z]+)")
# The rails' speed in Mb/s as ethtool shows it (sysfs class/net/<if>/speed).
EXPECTED_SPEED = 200_000  # PB spark_cluster_setup.py check_interface_link_speed: 200000Mb/s
SWITCH_SPEED = 100_000  # through a switch auto-negotiation may give 100000Mb/s (field notes §4)


@dataclass(frozen=True)
class LinkResult:
    """One run's result as files/spark-link-test writes it (one JSON object)."""

    when: str
    passed: bool
    verdict: str
    nodes: int
    rank: int
    min_busbw: float
    rows: tuple[dict[str, Any], ...]  # op, size, bytes, time_us, algbw, busbw
    skipped: tuple[int, ...]

    @property
    def largest(self) -> dict[str, Any] | None:
        """The all-gather row of the largest size run (the one judged)."""
        gathers = [row for row in self.rows if row.get("op") == "all_gather"]
        return max(gathers, key=lambda row: int(row.get("size", 0)), default=None)


def parse_result(text: str) -> LinkResult | None:
    """A stored or printed result (with or without RESULT_PREFIX); None when it is not one."""
    text = text.strip().removeprefix(RESULT_PREFIX.strip()).strip()
    if not text:
        return None
    try:
        data = json.loads(text)
        return LinkResult(
            when=str(data["when"]),
            passed=bool(data["passed"]),
            verdict=str(data.get("verdict", "")),
            nodes=int(data.get("nodes", 0)),
            rank=int(data.get("rank", -1)),
            min_busbw=float(data.get("min_busbw", 0.0)),
            rows=tuple(row for row in data.get("results", []) if isinstance(row, dict)),
            skipped=tuple(int(size) for size in data.get("skipped", [])),
        )
    except (ValueError, KeyError, TypeError):
        return None


def result_line() -> str:
    """The shell line printing the last stored result (``linktest=<json>``; empty when none):
    the file is 0644, so no sudo is needed."""
    return (
        f"printf 'linktest=%s\\n' \"$(head -c 65536 {LINK_TEST_RESULT} 2>/dev/null | tr -d '\\n')\""
    )


@dataclass(frozen=True)
class Readiness:
    active: dict[str, str]  # engine unit -> `systemctl is-active`
    speeds: dict[str, str]  # interface -> sysfs speed file content (or the error)
    image: tuple[int, str]  # `docker image inspect` exit status, ID or error
    script: bool  # LINK_TEST is installed
    mem_available_kb: int


class LinkTestReady(FactBase):
    """
    Returns what a Spark shows before the link test: each engine unit's `systemctl
    is-active`, each rail's link speed from sysfs, whether the engine image is there, whether
    the test script is installed, and MemAvailable.

    Sample output of the command::

        active.spark-engine-sglang.service=inactive
        speed.enp1s0f0np0=200000
        speed.enP2p1s0f0np0=cat: /sys/class/net/enP2p1s0f0np0/speed: Invalid argument
        image=0 sha256:5b2e0c3a8f41
        script=1
        mem_available_kb=119203140
    """

    def command(self, units: list[str], interfaces: list[str], sysfs_root: str, image: str) -> str:
        q = shell
        root = sysfs_root.rstrip("/")
        lines = [
            *(
                f"printf 'active.%s=%s\\n' {q(unit)} \"$(systemctl is-active {q(unit)} 2>&1)\""
                for unit in units
            ),
            *(
                f"printf 'speed.%s=%s\\n' {q(name)} "
                f'"$(cat {q(f"{root}/class/net/{name}/speed")} 2>&1 | head -n1)"'
                for name in interfaces
            ),
            *captured("image", f"docker image inspect -f '{{{{.Id}}}}' {q(image)}"),
            f"if [ -x {LINK_TEST} ]; then echo script=1; else echo script=0; fi",
            "awk '/^MemAvailable:/ {print \"mem_available_kb=\" $2}' /proc/meminfo",
        ]
        return "\n".join(lines)

    def process(self, output: list[str]) -> Readiness:
        active: dict[str, str] = {}
        speeds: dict[str, str] = {}
        values: dict[str, str] = {}
        for line in output:
            key, _, value = line.partition("=")
            kind, _, name = key.partition(".")
            if kind == "active" and name:
                active[name] = value.strip()
            elif kind == "speed" and name:
                speeds[name] = value.strip()
            else:
                values.setdefault(key, value)
        mem = values.get("mem_available_kb", "").strip()
        return Readiness(
            active=active,
            speeds=speeds,
            image=parse_captured(values.get("image", "-1 not asked")),
            script=values.get("script", "").strip() == "1",
            mem_available_kb=int(mem) if mem.isdigit() else 0,
        )


@dataclass(frozen=True)
class RunOutput:
    status: int  # docker run's exit status (124: stopped by the timeout)
    lines: tuple[str, ...]  # its output, stdout and stderr
    result: LinkResult | None
    stored: bool  # the result was written to LINK_TEST_RESULT

    @property
    def networks(self) -> tuple[str, ...]:
        """The networks NCCL's channel lines name (IB, Socket), in order, each once."""
        found = [m["net"] for line in self.lines if (m := CHANNEL.search(line))]
        return tuple(dict.fromkeys(found))


def store_lines(path: str = LINK_TEST_RESULT) -> list[str]:
    """Shell lines writing the result line in $out to ``path``: root-owned 0644, through a
    temporary file in the same folder renamed over it (atomic)."""
    folder = path.rsplit("/", 1)[0]
    q = shell
    return [
        f"line=$(printf '%s\\n' \"$out\" | sed -n {q('s/^' + RESULT_PREFIX + '//p')} | tail -n1)",
        'if [ -n "$line" ]; then',
        f"  mkdir -p {q(folder)} && tmp=$(mktemp {q(folder + '/.linktest.XXXXXX')}) &&"
        f' printf \'%s\\n\' "$line" > "$tmp" && chmod 0644 "$tmp" && mv -f "$tmp" {q(path)}'
        " && echo stored=1",
        "fi",
    ]


class LinkTestRun(FactBase):
    """
    Runs the link test on a Spark (run with sudo: docker, and the result file) and returns
    its output: ``out=`` lines, the exit status, and whether the result was stored.

    Sample output of the command::

        out=rank 0 of 2: rendezvous at 192.168.100.1:29500 (nccl)
        out=spark-1:4242:4242 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0
        out=spark-link-test-result {"when": "2026-11-23T10:00:00Z", "passed": true, ...}
        status=0
        stored=1
    """

    def command(self, words: list[str], timeout: int) -> str:
        run = " ".join(shell(word) for word in words)
        return "\n".join(
            [
                f"out=$(timeout {int(timeout)} {run} 2>&1)",
                "status=$?",
                "printf '%s\\n' \"$out\" | sed 's/^/out=/'",
                'echo "status=$status"',
                # timeout stops the docker client only: the container goes on without it.
                f'if [ "$status" = 124 ]; then docker rm -f {CONTAINER} >/dev/null 2>&1; fi',
                *store_lines(),
            ]
        )

    def process(self, output: list[str]) -> RunOutput:
        lines = []
        status, stored = -1, False
        for line in output:
            if line.startswith("out="):
                lines.append(line[4:])
            elif line.startswith("status="):
                value = line[7:].strip()
                status = int(value) if value.isdigit() else -1
            elif line.strip() == "stored=1":
                stored = True
        found = [parse_result(line) for line in lines if line.startswith(RESULT_PREFIX)]
        return RunOutput(status, tuple(lines), found[-1] if found else None, stored)
