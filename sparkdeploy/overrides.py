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
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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
