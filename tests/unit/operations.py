"""
Operation tests in pyinfra's own style: facts in, commands (or a no-op reason) out.

``sparks(...)`` builds real pyinfra hosts from an inventory document, through the same
read -> validate -> topology -> plan steps as ``inventory.py``; ``given`` puts a fact's value
in the run store, where the operations read it (nothing connects); ``run`` calls the
operation's body (``_inner``) in the host's context and returns what it yields, each
command as text: a shell command as it would run, an upload as ``upload <dest>``, a Python
callback as ``call <name>`` (the callback itself, with its arguments, is kept in
``Outcome.callbacks``). ``run(..., limit=1)`` takes only the first command, as pyinfra's
own change check does at planning (an operation may stop there until execution).
"""

from __future__ import annotations

import io
import itertools
from dataclasses import dataclass, field, replace
from inspect import getfullargspec
from typing import Any
from unittest import mock

from gevent.event import AsyncResult
from pyinfra.api import (
    Config,
    FileUploadCommand,
    FunctionCommand,
    Host,
    State,
    StringCommand,
)
from pyinfra.api import Inventory as PyinfraInventory
from pyinfra.api.arguments_typed import PyinfraOperation
from pyinfra.context import ctx_host, ctx_state

from sparkdeploy.facts.host_state import FileState, HostState, SparkHostState
from sparkdeploy.facts.network import QsfpNetwork
from sparkdeploy.facts.preflight import Preflight, SparkPreflight
from sparkdeploy.facts.store import run_store
from sparkdeploy.inventory import build_inventory
from tests.twins import harness
from tests.unit.samples import docstring_sample

PATH = "inventory/sparks.yml"
USER = "nvidia"


def sparks(**hosts: dict[str, Any]) -> dict[str, Host]:
    """pyinfra hosts for these Sparks (name -> inventory keys; ssh_host and ssh_user are
    filled in), with the data ``inventory.py`` gives them, in one fresh run."""
    document = {
        "sparks": {
            name: {"ssh_host": f"{name}.local", "ssh_user": USER, **keys}
            for name, keys in hosts.items()
        }
    }
    planned = build_inventory(document, PATH)
    inventory = PyinfraInventory(([(name, data) for name, data in planned.pyinfra_hosts()], {}))
    State(inventory, Config())
    return {name: inventory.get_host(name) for name in hosts}


def spark(**keys: Any) -> Host:
    """One Spark alone (named spark-1)."""
    return sparks(**{"spark-1": keys})["spark-1"]


def pair(**keys: Any) -> dict[str, Host]:
    """Two Sparks cabled rail to rail, as the twins have them, with the same keys."""
    return sparks(**{f"spark-{node}": {"qsfp": harness.qsfp_plan(node), **keys} for node in (1, 2)})


def given(host: Host, fact: type, value: Any) -> None:
    """The value ``fact`` has on ``host`` in this run (as if gathered at planning)."""
    answer: AsyncResult[Any] = AsyncResult()
    answer.set(value)
    run_store(host.state).facts[(host.name, fact)] = answer


@dataclass
class Outcome:
    commands: list[str] = field(default_factory=list)
    noop: str | None = None  # the reason given to host.noop, when the operation did nothing
    uploads: dict[str, str] = field(default_factory=dict)  # dest -> content
    callbacks: list[FunctionCommand] = field(default_factory=list)  # as yielded, in order


def _text(command: Any, outcome: Outcome) -> str:
    if isinstance(command, str):
        return command
    if isinstance(command, StringCommand):
        return command.get_raw_value()
    if isinstance(command, FileUploadCommand):
        source = command.src
        outcome.uploads[command.dest] = (
            source.getvalue() if isinstance(source, io.StringIO) else str(source)
        )
        return f"upload {command.dest}"
    if isinstance(command, FunctionCommand):
        # pyinfra passes (state, host) only to a function whose first arguments are so named
        # (FunctionCommand.execute); any other would get the operation's arguments alone.
        assert getfullargspec(command.function).args[:2] == ["state", "host"], command.function
        outcome.callbacks.append(command)
        return f"call {getattr(command.function, '__name__', command.function)}"
    raise TypeError(f"unexpected command {command!r}")


def run(
    operation: PyinfraOperation[...], host: Host, limit: int | None = None, **arguments: Any
) -> Outcome:
    """What ``operation(**arguments)`` yields on ``host`` at planning, given its facts (only
    its first ``limit`` commands, when given)."""
    outcome = Outcome()
    noops: list[str] = []
    with (
        ctx_state.use(host.state),
        ctx_host.use(host),
        mock.patch.object(host, "noop", noops.append),
    ):
        yielded = itertools.islice(operation._inner(**arguments), limit)
        commands = [_text(command, outcome) for command in yielded]
    outcome.commands = commands
    outcome.noop = noops[0] if noops else None
    return outcome


# ---------------------------------------------------------------------------------------
# Facts as a prepared or a fresh Spark answers them.

HOST_STATE = SparkHostState().process(docstring_sample(SparkHostState))
PREFLIGHT = SparkPreflight().process(docstring_sample(SparkPreflight))
NETWORK = QsfpNetwork().process(docstring_sample(QsfpNetwork))


def host_state(**changes: Any) -> HostState:
    """The documented sample of the host-state fact, with ``changes``."""
    return replace(HOST_STATE, **changes)


def preflight(**changes: Any) -> Preflight:
    return replace(PREFLIGHT, **changes)


def file_state(
    content: str, mode: str = "644", user: str = "root", group: str = "root"
) -> FileState:
    from sparkdeploy.deploys.managed import digest

    return FileState(digest(content), mode, user, group)
