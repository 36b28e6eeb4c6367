"""
What the operator must read at the end of a run, printed after pyinfra's results, so it is
the last thing on the screen: per-host notices (a pending reboot, a diagnosis) and whole
reports over every host (the status table).
"""

from __future__ import annotations

import logging
from typing import Callable, Sequence

from pyinfra import logger, state
from pyinfra.api.state import BaseStateCallback, StateStage

_NOTICES: dict[str, list[tuple[int, str]]] = {}
_REPORTS: dict[str, Callable[[], str]] = {}


def add(host_name: str, message: str, level: int = logging.WARNING) -> None:
    """Record a notice for a host, to be printed once (at ``level``) when the run ends."""
    messages = _NOTICES.setdefault(host_name, [])
    if (level, message) not in messages:
        messages.append((level, message))


def at_end(key: str, report: Callable[[], str]) -> None:
    """Print what ``report()`` returns once, when the run ends; it is called then, so it
    sees every host's data. Registering the same key again (once per host) keeps one."""
    _REPORTS.setdefault(key, report)


def aligned(rows: Sequence[Sequence[str]], indent: str = "") -> str:
    """Rows as text columns, each as wide as its widest cell (the last one left ragged)."""
    if not rows:
        return ""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        indent + "  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip()
        for row in rows
    )


class NoticePrinter(BaseStateCallback):
    """Prints the reports, and a host's notices, when hosts disconnect at the end of the run.
    A read-only run (``final_only=False``) prints them whenever it ends, even after ``--dry``
    or a declined confirmation; a deploy only at the end of a real run, since hosts also
    disconnect mid-run (a reboot)."""

    def __init__(self, final_only: bool = True):
        self.final_only = final_only

    def host_disconnect(self, state, host):
        if self.final_only and state.current_stage != StateStage.Disconnect:
            return
        while _REPORTS:  # at the first host's disconnect: every host's data is in
            logger.info(_REPORTS.pop(next(iter(_REPORTS)))())
        if host in state.failed_hosts:
            return
        for level, message in _NOTICES.pop(host.name, []):
            logger.log(level, f"[{host.name}] {message}")


def install(final_only: bool = True) -> None:
    """Print the notices at the end of this run (safe to call once per host)."""
    if not any(isinstance(handler, NoticePrinter) for handler in state.callback_handlers):
        state.add_callback_handler(NoticePrinter(final_only))
