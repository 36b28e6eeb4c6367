"""
What the operator must read at the end of a run, printed after pyinfra's results, so it is
the last thing on the screen: per-host notices (a pending reboot, a diagnosis) and whole
reports over every host (the status table).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from pyinfra import logger, state
from pyinfra.api import Host, State
from pyinfra.api.state import BaseStateCallback, StateStage

from sparkdeploy.facts.store import run_store
from sparkdeploy.reports.failures import format_failures, take_failures


def add(host_name: str, message: str, level: int = logging.WARNING) -> None:
    """Record a notice for a host, to be printed once (at ``level``) when the run ends."""
    messages = run_store(state).notices.setdefault(host_name, [])
    if (level, message) not in messages:
        messages.append((level, message))


def at_end(key: str, report: Callable[[], str]) -> None:
    """Print what ``report()`` returns once, when the run ends; it is called then, so it
    sees every host's data. Registering the same key again (once per host) keeps one."""
    run_store(state).reports.setdefault(key, report)


class NoticePrinter(BaseStateCallback):
    """Prints the reports, and a host's notices, when hosts disconnect at the end of the run;
    after the reports, the failures of the run (reports/failures.py), also when it stops
    because every Spark failed (pyinfra then prints no results). A read-only run
    (``final_only=False``) prints them whenever it ends, even after ``--dry`` or a declined
    confirmation, and a failed Spark's notices too; a deploy only at the end of a real run,
    since hosts also disconnect mid-run (a reboot)."""

    def __init__(self, final_only: bool = True):
        self.final_only = final_only

    # pyinfra declares the callbacks static, but State.trigger_callbacks calls them on the
    # handler instance; this one reads self.final_only.
    def host_disconnect(self, state: State, host: Host) -> None:  # type: ignore[override]
        final = not self.final_only or state.current_stage == StateStage.Disconnect
        store = run_store(state)
        while final and store.reports:  # at the first host's disconnect: every host's data is in
            text = store.reports.pop(next(iter(store.reports)))()
            if text:  # a report may print itself (the status as JSON, on stdout)
                logger.info(text)
        # the run ended, or stopped as every Spark failed (no active host, no results)
        failed = format_failures(take_failures(state) if final or not state.active_hosts else [])
        if failed:
            logger.error(failed)
        if not final or (self.final_only and host in state.failed_hosts):
            return  # a read-only run says what it read of a failed Spark too
        for level, message in store.notices.pop(host.name, []):
            logger.log(level, f"[{host.name}] {message}")


def install(final_only: bool = True) -> None:
    """Print the notices at the end of this run (safe to call once per host)."""
    if not any(isinstance(handler, NoticePrinter) for handler in state.callback_handlers):
        state.add_callback_handler(NoticePrinter(final_only))
