"""
pyinfra's command-line overrides of host data, against the inventory. ``--data key=value``
(and ``--ssh-user``, ``--ssh-port``, ``--ssh-key``, which pyinfra turns into the same
override) beats every host's data for the whole run. The deploy never reads a raw key: it
reads each Spark's validated settings (``spark``), its place (``place``) and its engine plan
(``engine_plan``), made from the inventory file before pyinfra starts. So an override of an
inventory key would be ignored (``--data engine=...``), would make the deploy and its
connection disagree (``--ssh-port``: the firewall keeps the inventory's port open), or would
replace a validated object with a string (``--data spark=...``).

Such overrides are refused before any host is contacted, naming the key and the file to set
it in. Other keys pass to pyinfra as usual (its own connection and sudo settings, such as
``--data ssh_password=...``); the deploy itself reads none of them.

``--limit`` (and ``--exclude``) on the link test: the test runs on every Spark of the
inventory at once (the pair or cluster meets at one rendezvous), so a run that leaves one
out is refused here too, naming the Sparks it leaves out and the command that tests them
all, instead of failing after connecting.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Mapping, Sequence
from fnmatch import fnmatch
from typing import Any

import click

from sparkdeploy.config.spark import SparkSettings

# Host data the inventory derives for each Spark (sparkdeploy/inventory.py pyinfra_hosts).
DERIVED = ("spark", "place", "engine_plan", "ssh_hostname")
# pyinfra's options that become host-data overrides of inventory keys: key -> option.
OPTIONS = {"ssh_user": "--ssh-user", "ssh_port": "--ssh-port", "ssh_key": "--ssh-key"}


def owned_keys() -> frozenset[str]:
    """The host-data keys the inventory owns: every Spark key and the derived ones."""
    return frozenset(SparkSettings.model_fields) | frozenset(DERIVED)


def override_problems(path: str, data: Sequence[str], options: Mapping[str, Any]) -> list[str]:
    """A problem per override of a key the inventory owns: ``data`` are ``--data`` values
    (``key=value``), ``options`` pyinfra's ``ssh_*`` options by key (unset: None). No value
    is shown: an override may be a password."""
    keys = [item.partition("=")[0].strip() for item in data]
    given = [(key, f"--data {key}=...") for key in keys if key in owned_keys()]
    given += [(key, option) for key, option in OPTIONS.items() if options.get(key)]
    return [_refusal(path, key, said) for key, said in given]


def _refusal(path: str, key: str, said: str) -> str:
    """Why one override is refused, and where to set the key instead."""
    if key in DERIVED:
        return (
            f"pyinfra {said}: refused: '{key}' is host data the inventory makes from {path} "
            "(validated settings and plan); change the inventory keys it comes from instead"
        )
    return (
        f"pyinfra {said}: refused: '{key}' is an inventory key, validated and planned from "
        f"{path} before pyinfra starts (an override would bypass that); set {key} there, "
        "under defaults: or a Spark, or point SPARK_INVENTORY at another file"
    )


def cli_overrides() -> tuple[tuple[str, ...], dict[str, Any]]:
    """The ``--data`` values and ``ssh_*`` options of the running pyinfra command, as
    pyinfra's own command line parsed them; none when not run by pyinfra's command."""
    context = click.get_current_context(silent=True)
    if context is None or "data" not in context.params:
        return (), {}
    params = context.params
    return tuple(params.get("data") or ()), {key: params.get(key) for key in OPTIONS}


def cli_selection() -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """The operation files, ``--limit`` and ``--exclude`` patterns of the running pyinfra
    command; none when not run by pyinfra's command."""
    context = click.get_current_context(silent=True)
    if context is None or "operations" not in context.params:
        return (), (), ()
    params = context.params
    return tuple(tuple(params.get(key) or ()) for key in ("operations", "limit", "exclude"))  # type: ignore[return-value]


def matching(names: Iterable[str], patterns: Sequence[str]) -> set[str]:
    """The Sparks ``patterns`` select as pyinfra's --limit does (a name or a glob)."""
    return {name for name in names if any(fnmatch(name, pattern) for pattern in patterns)}


def link_test_limit_problems(
    path: str,
    operations: Sequence[str],
    limit: Sequence[str],
    exclude: Sequence[str],
    names: Sequence[str],
) -> list[str]:
    """Why a link test run (an operation file named linktest.py) limited by ``limit`` and
    ``exclude`` to some of the inventory's Sparks ``names`` cannot run: the Sparks it
    leaves out, and the command that tests them all. None when it takes them all, selects
    none (pyinfra says so), or the inventory has one Spark (the test refuses that itself)."""
    if len(names) < 2 or not any(posixpath.basename(op) == "linktest.py" for op in operations):
        return []
    chosen = (matching(names, limit) if limit else set(names)) - matching(names, exclude)
    missing = [name for name in names if name not in chosen]
    if not chosen or not missing:
        return []
    said = " ".join([*(f"--limit {p}" for p in limit), *(f"--exclude {p}" for p in exclude)])
    return [
        f"pyinfra {said}: refused: the link test runs on every Spark of {path} at once "
        f"({len(names)}: {', '.join(names)}) and this run leaves out {', '.join(missing)}. "
        f"Test them all: spark-deploy linktest {path} (no --limit), or "
        f"SPARK_INVENTORY={path} pyinfra -y inventory.py linktest.py"
    ]
