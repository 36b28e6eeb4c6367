"""
A deploy that changes nothing, in a few lines (reports/quiet.py): pyinfra's lines classified,
its results rows kept only where something changed or failed, the headers of operations that
changed nothing dropped, and the per-Spark count at the end. The lines are shaped as pyinfra
3.10 logs them (click's colours included); a run of pyinfra on @local showed the same.
"""

from __future__ import annotations

import io
import logging
from dataclasses import dataclass
from types import SimpleNamespace

import click

from sparkdeploy.reports.quiet import Quiet, counts, kind, results_row_changed, summary


def header(name: str, kinds: str = "") -> str:
    starting = click.style(f"--> Starting {kinds}operation:", fg="blue")
    return f"{starting} {click.style(name, bold=True)} "


def status(host: str, text: str, colour: str) -> str:
    return f"[{host}] {click.style(text, fg=colour)}"


def row(*columns: str) -> str:
    widths = (26, 8, 10, 8, 12)
    return "".join(column.ljust(width) for column, width in zip(columns, widths, strict=True))


def test_pyinfras_lines_are_told_apart():
    assert kind(header("Install spark-fetch")) == "header"
    assert kind(header("Fetch", "serial, run once ")) == "header"
    assert kind(status("spark-1", "No changes", "cyan")) == "unchanged"
    assert kind(status("spark-1", "Success", "green")) == "other"
    assert kind("--> Results:") == "results"
    assert kind("[spark-1] No changes, but a warning") == "other"


def test_a_results_row_is_kept_when_its_operation_changed_or_failed_somewhere():
    assert results_row_changed(row("Operation", "Hosts", "Success", "Error", "No Change"))
    assert results_row_changed(row("Install spark-fetch", "2", "1", "-", "1"))
    assert results_row_changed(row("Start the engine", "2", "-", "1", "1"))
    assert not results_row_changed(row("Reload systemd units", "2", "-", "-", "2"))
    assert results_row_changed(row("Grand total", "6", "1", "1", "4"))
    assert results_row_changed("    spark-1: the API answers on 127.0.0.1:8000")


def test_the_summary_counts_each_spark():
    assert summary({"spark-1": (0, 148, 0), "spark-10": (2, 145, 1)}).splitlines() == [
        "--> Operations per Spark (pyinfra's 'No changes' lines hidden; -v shows them):",
        "    spark-1   nothing changed, 148 unchanged",
        "    spark-10  2 changed, 145 unchanged, 1 failed",
    ]
    assert summary({}) == ""


def quiet_log(name: str) -> tuple[logging.Logger, io.StringIO]:
    out = io.StringIO()
    log = logging.getLogger(name)
    log.handlers = [logging.StreamHandler(out)]
    log.propagate, log.level, log.filters = False, logging.INFO, []
    log.addFilter(Quiet(log))
    return log, out


def test_only_what_changed_is_shown_with_its_header_and_the_results_keep_their_shape():
    log, out = quiet_log("test-quiet-run")
    for line in [
        header("Reload systemd units"),
        status("spark-1", "No changes", "cyan"),
        status("spark-2", "No changes", "cyan"),
        header("Install spark-fetch"),
        status("spark-1", "No changes", "cyan"),
        status("spark-2", "Success", "green"),
        header("Check the model folder"),
        status("spark-1", "No changes", "cyan"),
        "--> Results:",
        row("Operation", "Hosts", "Success", "Error", "No Change"),
        row("Reload systemd units", "2", "-", "-", "2"),
        row("Install spark-fetch", "2", "1", "-", "1"),
        row("Check the model folder", "1", "-", "-", "1"),
        row("Grand total", "5", "1", "-", "4"),
        row("spark-1", "OK", "-", "-", "-"),  # a report after the table: not a row
    ]:
        log.info(line)
    shown = [click.unstyle(line).strip() for line in out.getvalue().splitlines()]
    assert shown == [
        "--> Starting operation: Install spark-fetch",
        "[spark-2] Success",
        "--> Results:",
        "Operation                 Hosts   Success   Error   No Change",
        "Install spark-fetch       2       1         -       1",
        "Grand total               5       1         -       4",
        "spark-1                   OK      -         -       -",
    ]


def test_a_warning_of_an_unchanged_operation_shows_its_header_first():
    log, out = quiet_log("test-quiet-warning")
    log.info(header("Check the driver"))
    log.warning("[spark-1] the driver is older than 580")
    log.info(status("spark-1", "No changes", "cyan"))
    assert click.unstyle(out.getvalue()).splitlines() == [
        "--> Starting operation: Check the driver ",
        "[spark-1] the driver is older than 580",
    ]


def meta(complete: bool, success: bool, commands: int) -> SimpleNamespace:
    return SimpleNamespace(
        is_complete=lambda: complete,
        did_succeed=lambda _raise_if_not_complete=True: complete and success,
        did_change=lambda: success and commands > 0,
    )


@dataclass(frozen=True)
class Host:
    name: str


class Inventory(list):
    """pyinfra's inventory as the counts use it: iterated in the inventory's order, and its
    activated hosts in the order they connected."""

    def __init__(self, hosts: list, connected: list):
        super().__init__(hosts)
        self.connected = connected

    def iter_activated_hosts(self):
        return iter(self.connected)


def test_the_counts_come_from_each_sparks_operations():
    one, two = Host("spark-1"), Host("spark-2")
    ops = {
        one: {"a": meta(True, True, 2), "b": meta(True, True, 0), "c": meta(True, False, 1)},
        two: {"a": meta(True, True, 0), "b": meta(False, False, 0)},  # b: not run (failed run)
    }
    state = SimpleNamespace(
        inventory=Inventory([one, two], connected=[two, one]),  # spark-2 connected first
        ops={host: {h: SimpleNamespace(operation_meta=m) for h, m in metas.items()}
             for host, metas in ops.items()},
    )  # fmt: skip
    assert counts(state) == {"spark-1": (1, 1, 1), "spark-2": (0, 1, 0)}
    assert list(counts(state)) == ["spark-1", "spark-2"]  # the inventory's order
