"""
Notices the operator must read at the end of a run (a pending reboot, a diagnosis), printed
per host after pyinfra's results, so they are the last thing on the screen.
"""

from __future__ import annotations

import logging

from pyinfra import logger, state
from pyinfra.api.state import BaseStateCallback, StateStage

_NOTICES: dict[str, list[tuple[int, str]]] = {}


def add(host_name: str, message: str, level: int = logging.WARNING) -> None:
    """Record a notice for a host, to be printed once (at ``level``) when the run ends."""
    messages = _NOTICES.setdefault(host_name, [])
    if (level, message) not in messages:
        messages.append((level, message))


class NoticePrinter(BaseStateCallback):
    """Prints a host's notices when it disconnects at the end of the run. A read-only run
    (``final_only=False``) prints them whenever it ends, even after ``--dry`` or a declined
    confirmation; a deploy only at the end of a real run, since hosts also disconnect mid-run
    (a reboot)."""

    def __init__(self, final_only: bool = True):
        self.final_only = final_only

    def host_disconnect(self, state, host):
        if host in state.failed_hosts:
            return
        if self.final_only and state.current_stage != StateStage.Disconnect:
            return
        for level, message in _NOTICES.pop(host.name, []):
            logger.log(level, f"[{host.name}] {message}")


def install(final_only: bool = True) -> None:
    """Print the notices at the end of this run (safe to call once per host)."""
    if not any(isinstance(handler, NoticePrinter) for handler in state.callback_handlers):
        state.add_callback_handler(NoticePrinter(final_only))
