"""
Notices the operator must read at the end of a run (a pending reboot, say), printed per
host after pyinfra's results, so they are the last thing on the screen.
"""

from __future__ import annotations

from pyinfra import logger, state
from pyinfra.api.state import BaseStateCallback, StateStage

_NOTICES: dict[str, list[str]] = {}


def add(host_name: str, message: str) -> None:
    """Record a notice for a host, to be printed once when the run ends."""
    messages = _NOTICES.setdefault(host_name, [])
    if message not in messages:
        messages.append(message)


class NoticePrinter(BaseStateCallback):
    @staticmethod
    def host_disconnect(state, host):
        # Hosts also disconnect mid-run (a reboot); only the end of a real run counts.
        if state.current_stage != StateStage.Disconnect or host in state.failed_hosts:
            return
        for message in _NOTICES.pop(host.name, []):
            logger.warning(f"[{host.name}] {message}")


def install() -> None:
    """Print the notices at the end of this run (safe to call once per host)."""
    if not any(isinstance(handler, NoticePrinter) for handler in state.callback_handlers):
        state.add_callback_handler(NoticePrinter())
