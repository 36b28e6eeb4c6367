"""
What the operator must read at the end of a run, printed after pyinfra's results, so it is
the last thing on the screen: per-host notices (a pending reboot, say) and whole reports
over every host (the status table).
"""

from __future__ import annotations

from typing import Callable, Sequence

from pyinfra import logger, state
from pyinfra.api.state import BaseStateCallback, StateStage

_NOTICES: dict[str, list[str]] = {}
_REPORTS: dict[str, Callable[[], str]] = {}


def add(host_name: str, message: str) -> None:
    """Record a notice for a host, to be printed once when the run ends."""
    messages = _NOTICES.setdefault(host_name, [])
    if message not in messages:
        messages.append(message)


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
    @staticmethod
    def host_disconnect(state, host):
        # Hosts also disconnect mid-run (a reboot); only the end of a real run counts.
        if state.current_stage != StateStage.Disconnect:
            return
        while _REPORTS:  # at the first host's disconnect: every host's data is in
            logger.info(_REPORTS.pop(next(iter(_REPORTS)))())
        if host in state.failed_hosts:
            return
        for message in _NOTICES.pop(host.name, []):
            logger.warning(f"[{host.name}] {message}")


def install() -> None:
    """Print the notices at the end of this run (safe to call once per host)."""
    if not any(isinstance(handler, NoticePrinter) for handler in state.callback_handlers):
        state.add_callback_handler(NoticePrinter())
