"""
The run-scoped store: what one pyinfra run gathers and decides, kept on that run's
``State`` (never in a module global), so nothing leaks from one run into the next, or from
one test's run into another's.

- ``gathered``: a fact of a host, taken once per run. pyinfra 3 runs a fact again at every
  call, and every operation must plan from the same snapshot, taken before any change
  (operation bodies run again at execution). Hosts are planned in parallel greenlets, and
  a peer's fact may be asked for by both: the first asker gathers it, the other waits.
- ``prefetch``: start gathering facts a later step will ask for, so that independent
  round trips to one host overlap instead of following each other.
- ``results``: what a step found on a host for a later step of the same run (what the QSFP
  proof found, the status a report prints), keyed by host and name.
- ``notices`` and ``reports``: what is printed when the run ends (reports/notices.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

import gevent
from gevent.event import AsyncResult
from pyinfra import logger
from pyinfra import state as current_state
from pyinfra.api import FactBase, Host, State
from pyinfra.context import ctx_config, ctx_host

T = TypeVar("T")
ATTRIBUTE = "_sparkdeploy_store"


@dataclass
class RunStore:
    facts: dict[tuple[str, type], AsyncResult[Any]] = field(default_factory=dict)
    results: dict[tuple[str, str], Any] = field(default_factory=dict)
    notices: dict[str, list[tuple[int, str]]] = field(default_factory=dict)
    reports: dict[str, Callable[[], str]] = field(default_factory=dict)


def run_store(state: State | None = None) -> RunStore:
    """The store of this run (of ``state``, else of the run in progress)."""
    target = state if state is not None else current_state
    store = getattr(target, ATTRIBUTE, None)
    if store is None:
        store = RunStore()
        setattr(target, ATTRIBUTE, store)
    return store


def gathered(target: Host, fact: type[FactBase[T]], **arguments: Any) -> T:
    """A fact of ``target`` (the current host or its peer), gathered once per run."""
    facts = run_store(target.state).facts
    key = (target.name, fact)
    if key not in facts:
        answer: AsyncResult[T] = AsyncResult()
        facts[key] = answer
        try:
            answer.set(target.get_fact(fact, **arguments))
        except BaseException as error:
            answer.set_exception(error)
            raise
    # The value is the fact's T (None only when the fact gives None): gevent's stubs type
    # get() as T | None because a result may be set without a value, which never happens here.
    return cast(T, facts[key].get())


def prefetch(*askers: Callable[[], object]) -> None:
    """Run each asker (a call that gathers a fact, like ``lambda: host_state(host)``) in a
    greenlet of its own, in the current host's context, and return at once: the step that
    later asks for the same fact waits for this round trip instead of starting its own, and
    the askers' round trips overlap. Only for read-only facts whose arguments are known now.
    An asker's error is kept in the store by ``gathered`` and raised to that later step; one
    raised before it asks is logged for --debug."""
    context = ctx_host.get(), ctx_config.get()

    def ask(asker: Callable[[], object]) -> None:
        with ctx_host.use(context[0]), ctx_config.use(context[1]):
            try:
                asker()
            except Exception as error:
                # A fact's error is kept by gathered and raised again to the step that asks.
                # An asker that fails before it asks (a host_state that could not take
                # pyinfra's host proxy) loses only the overlap, quietly: say so with --debug
                # (the error's type only: a fact's message may hold a command's output).
                logger.debug(f"{context[0].print_prefix}prefetch failed: {type(error).__name__}")

    for asker in askers:
        gevent.spawn(ask, asker)
