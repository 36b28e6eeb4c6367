"""
A deploy that changes nothing, said in a few lines: pyinfra prints, for every operation, a
``--> Starting operation`` header and a ``[host] No changes`` line per Spark, then a results
row per operation (on a prepared pair, some 150 lines that say nothing happened). Without
``-v``, a filter on pyinfra's logger holds each header until its operation says something
else (a change, an error, a warning, output), drops the ``No changes`` lines and the results
rows of operations that changed nothing on any Spark, and the run ends with one line per
Spark: how many operations changed it and how many did not. ``-v`` shows pyinfra's own
output whole (and so do the twins, which run with ``-vv``).

Pure: ``kind`` and ``results_row_changed`` read a line, ``summary`` writes the last lines.
The filter and the end-of-run report are the thin layer (``install``).
"""

from __future__ import annotations

import logging
import re
from typing import Any

from pyinfra import state

from sparkdeploy.reports import notices

ANSI = re.compile(r"\x1b\[[0-9;]*m")
HEADER = re.compile(r"^--> Starting (?:[\w ,]+ )?operation:")
NO_CHANGES = re.compile(r"^\[[^\]]+\] No changes$")
RESULTS = "--> Results:"


def kind(text: str) -> str:
    """What one of pyinfra's log lines is: ``header`` (an operation starts), ``unchanged``
    (a Spark's No changes), ``results`` (the results table follows), else ``other``."""
    plain = ANSI.sub("", text).strip()
    if HEADER.match(plain):
        return "header"
    if NO_CHANGES.match(plain):
        return "unchanged"
    return "results" if plain == RESULTS else "other"


def results_row_changed(text: str) -> bool:
    """Whether a row of pyinfra's results table (Operation, Hosts, Success, Error, No Change;
    columns padded by 4 spaces) is kept: its header, the grand total, and any operation that
    changed or failed somewhere. A line that is not such a row is kept."""
    columns = re.split(r"\s{2,}", ANSI.sub("", text).strip())
    if len(columns) < 5 or columns[0] in ("Operation", "Grand total"):
        return True
    return not (columns[-3] == "-" and columns[-2] == "-")


def summary(counts: dict[str, tuple[int, int, int]]) -> str:
    """The run's last lines: per Spark (name -> changed, unchanged, failed operations)."""
    if not counts:
        return ""
    pad = max(len(name) for name in counts)
    lines = ["--> Operations per Spark (pyinfra's 'No changes' lines hidden; -v shows them):"]
    for name, (changed, unchanged, failed) in counts.items():
        said = "nothing changed" if not changed else f"{changed} changed"
        lines.append(
            f"    {name:<{pad}}  {said}, {unchanged} unchanged"
            + (f", {failed} failed" if failed else "")
        )
    return "\n".join(lines)


class Quiet(logging.Filter):
    """The filter on pyinfra's logger (see the module's docstring)."""

    def __init__(self, log: logging.Logger):
        super().__init__()
        self.log = log
        self.held: logging.LogRecord | None = None
        self.table = False  # after "--> Results:": the rows are judged

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        what = kind(text)
        if what in ("header", "unchanged", "results"):
            if what != "unchanged":
                self.held = record if what == "header" else None
                self.table = what == "results"
            return what == "results"
        if self.table:  # until the grand total, its last row
            self.table = not ANSI.sub("", text).strip().startswith("Grand total")
            return results_row_changed(text)
        if self.held is not None:  # the operation says something: its header first
            held, self.held = self.held, None
            for handler in self.log.handlers:
                if held.levelno >= handler.level:
                    handler.handle(held)
        return True


def counts(state: Any) -> dict[str, tuple[int, int, int]]:
    """Per Spark of the run, in the inventory's order (hosts connect in any order): its
    operations that changed it, that did not, that failed."""
    found = {}
    activated = set(state.inventory.iter_activated_hosts())
    for host in (host for host in state.inventory if host in activated):
        metas = [op.operation_meta for op in state.ops[host].values()]
        done = [meta for meta in metas if meta.is_complete()]
        succeeded = [meta for meta in done if meta.did_succeed(_raise_if_not_complete=False)]
        changed = sum(1 for meta in succeeded if meta.did_change())
        found[host.name] = (changed, len(succeeded) - changed, len(done) - len(succeeded))
    return found


def install() -> None:
    """Quiet pyinfra's per-operation lines for this run unless ``-v`` asked for them, and
    report the counts at its end (once, however many Sparks call it)."""
    log = logging.getLogger("pyinfra")
    if state.print_noop_info or any(isinstance(f, Quiet) for f in log.filters):
        return
    log.addFilter(Quiet(log))
    notices.at_end("operations", lambda: summary(counts(state)))
