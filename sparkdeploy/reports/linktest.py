"""
The link test's report: one table per size (algorithm and bus bandwidth of all-gather and
all-reduce, as nccl-tests computes them), the network NCCL used, each rail's link speed
against the 200 Gb/s a Spark's QSFP port gives, the verdict; and the status table's row for
the last stored result.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sparkdeploy.config.invocation import command
from sparkdeploy.facts.linktest import EXPECTED_SPEED, SWITCH_SPEED, LinkResult, RunOutput
from sparkdeploy.render import aligned
from sparkdeploy.reports.linkchart import human, terminal_chart

OK, WARN, FAIL, NONE = "ok", "WARN", "FAIL", "-"
GIB = 1024**3


def rail_speed(interface: str, text: str, sysfs_root: str = "/sys") -> tuple[str, str]:
    """(state, detail) of one rail's link speed, as sysfs gives it in Mb/s: 200000 is a
    Spark's QSFP port (NVIDIA's cluster script requires it); 100000 is what a switch may
    negotiate (a warning: half the bandwidth); anything else, or none, fails."""
    where = f"{sysfs_root.rstrip('/')}/class/net/{interface}/speed"
    value = text.strip()
    if not value.lstrip("-").isdigit():
        return FAIL, f"{interface}: no link speed ({where}: {value or 'empty'}; is the link up?)"
    speed = int(value)
    shown = f"{interface}: {speed} Mb/s"
    if speed == EXPECTED_SPEED:
        return OK, f"{shown} (expected {EXPECTED_SPEED})"
    if speed == SWITCH_SPEED:
        return WARN, (
            f"{shown}, not {EXPECTED_SPEED}: what a switch port may negotiate; half the "
            "bandwidth of the QSFP port"
        )
    if speed <= 0:
        return FAIL, f"{shown}: the link is down"
    return (
        FAIL,
        f"{shown}, not {EXPECTED_SPEED} (NVIDIA's cluster script requires {EXPECTED_SPEED})",
    )


def size_table(result: LinkResult) -> str:
    """One line per size: all-gather and all-reduce time, algbw and busbw."""
    rows: dict[int, dict[str, dict[str, Any]]] = {}
    for row in result.rows:
        rows.setdefault(int(row["size"]), {})[str(row["op"])] = row
    table: list[tuple[str, ...]] = [
        ("SIZE", "ALL_GATHER us", "ALGBW", "BUSBW", "ALL_REDUCE us", "ALGBW", "BUSBW"),
    ]
    for size in sorted(rows):
        cells: list[str] = [human(size)]
        for op in ("all_gather", "all_reduce"):
            found = rows[size].get(op)
            if found is None:
                cells += ["-", "-", "-"]
            else:
                cells += [
                    f"{float(found['time_us']):.1f}",
                    f"{float(found['algbw']):.2f}",
                    f"{float(found['busbw']):.2f}",
                ]
        table.append(tuple(cells))
    for size in result.skipped:
        table.append((human(size), "skipped (memory)", "", "", "", "", ""))
    return aligned(table, indent="    ") + "\n    (bandwidths in GB/s, 1e9 bytes/s, as nccl-tests)"


@dataclass(frozen=True)
class SparkRun:
    """What the link test gave on one Spark, for the report."""

    name: str
    rank: int
    run: RunOutput | None  # None when it did not run
    refusal: str  # why it did not run ("" when it ran)
    speeds: tuple[tuple[str, str, str], ...]  # (interface, state, detail) per rail


def spark_failure(spark: SparkRun) -> str:
    """Why the link test failed on one Spark ("" when it ran, passed and no rail speed
    failed): its refusal, no result, its verdict, or a rail's speed."""
    if spark.refusal:
        return f"{spark.name}: {spark.refusal}"
    if spark.run is None or spark.run.result is None:
        status = spark.run.status if spark.run else -1
        why = "stopped by the timeout" if status == 124 else f"exit status {status}"
        return f"{spark.name}: no result from the link test ({why}; output above)"
    if not spark.run.result.passed:
        return f"{spark.name}: {spark.run.result.verdict}"
    failing = [detail for _, state, detail in spark.speeds if state == FAIL]
    return f"{spark.name}: {failing[0]}" if failing else ""


def judge(runs: list[SparkRun]) -> tuple[bool, str]:
    """The command's verdict: passed when every Spark ran, agrees it passed, and no rail
    speed failed; else the first failing Spark's failure."""
    failures = [spark_failure(spark) for spark in runs]
    first = next((failure for failure in failures if failure), "")
    if first:
        return False, first
    head = min(runs, key=lambda spark: spark.rank)
    assert head.run is not None and head.run.result is not None
    return True, head.run.result.verdict


def verdict_line(runs: list[SparkRun]) -> str:
    """The report's last line: PASS, or FAIL naming every Spark it failed on, and what
    explains it."""
    passed, verdict = judge(runs)
    if passed:
        return f"    PASS: {verdict}"
    names = [spark.name for spark in runs if spark_failure(spark)]
    return (
        f"    FAIL on {', '.join(names)}: {verdict}\n"
        f"    explained by: the table above (NCCL network, rail speeds), and "
        f"{command('status')} (rails, RoCE GIDs)"
    )


def format_report(runs: list[SparkRun], image: str, master: str) -> str:
    """The link test's output: the head's table (every rank reports the same averaged
    times), the network each Spark's NCCL used, the rails' speeds and the verdict."""
    runs = sorted(runs, key=lambda spark: spark.rank)
    lines = [
        f"--> Link test: all_gather and all_reduce through torch.distributed (nccl) in {image}, "
        f"{len(runs)} Sparks, rendezvous at {master}:"
    ]
    shown = next((s for s in runs if s.run is not None and s.run.result is not None), None)
    if shown is not None and shown.run is not None and shown.run.result is not None:
        lines.append(size_table(shown.run.result))
        lines += terminal_chart(shown.run.result)
    table = [("SPARK", "RANK", "NCCL NETWORK", "RAIL SPEEDS")]
    for spark in runs:
        if spark.refusal:
            network = f"not run: {spark.refusal}"
        elif spark.run is None:
            network = "not run"
        else:
            network = ", ".join(f"NET/{net}" for net in spark.run.networks) or "not logged"
        speeds = "; ".join(f"{state} {detail}" for _, state, detail in spark.speeds) or "no rails"
        table.append((spark.name, str(spark.rank), network, speeds))
    lines.append(aligned(table, indent="    "))
    if any("Socket" in s.run.networks for s in runs if s.run is not None):
        lines.append(
            "    NCCL used TCP sockets, not RDMA (NET/IB): the engine containers lack the RDMA "
            "devices or locked memory"
        )
    lines.append(verdict_line(runs))
    return "\n".join(lines)


def status_detail(result: LinkResult | None) -> tuple[str, str]:
    """(state, detail) of the status table's link-test row: when the last run was, its
    all-gather bus bandwidth at the largest size, pass or fail."""
    if result is None:
        return NONE, f"never run ({command('linktest')})"
    row = result.largest
    measured = (
        f"all-gather busbw {float(row['busbw']):.2f} GB/s at {human(int(row['size']))}"
        if row is not None
        else "no size run"
    )
    verdict = "passed" if result.passed else "FAILED"
    detail = (
        f"{verdict} {result.when}: {measured} (threshold {result.min_busbw:g} GB/s, "
        f"{result.nodes} Sparks)"
    )
    if not result.passed and row is None:
        detail += f": {result.verdict}"
    return (OK if result.passed else FAIL), detail
