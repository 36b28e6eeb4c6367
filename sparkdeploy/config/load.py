"""
Read the inventory YAML and validate it: built-in defaults < ``defaults:`` < the host's own
keys, merged and checked per Spark, then across Sparks (addresses, the pair's rails). The
result is each Spark's frozen ``SparkSettings``; planning is the next, separate step
(sparkdeploy.inventory).

The inventory file looks like::

    defaults:            # shared by every Spark; any per-host key except ssh_host
      ssh_user: nvidia
    sparks:              # one to eight Sparks: name -> keys (the first is the head)
      spark-1:
        ssh_host: 192.168.1.50
      spark-2:
        ssh_host: 192.168.1.51
        allow_reboot: true
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from sparkdeploy.config.errors import (
    KNOWN_KEYS,
    InventoryError,
    KeyProblem,
    describe,
    key_messages,
    name_of,
    valid_keys_hint,
)
from sparkdeploy.config.spark import SparkSettings
from sparkdeploy.config.topology import MAX_SPARKS, rail_problems, too_many_sparks
from sparkdeploy.config.values import SECRET_HINT, looks_like_secret, redact, shown

HOST_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")
PER_HOST_ONLY = ("ssh_host",)


def _check_mapping(path: str, where: str, value: Any, problems: list[str]) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        problems.append(f"{path}: {where}: must be a mapping of key: value (got {shown(value)})")
        return {}
    return value


def validate_document(raw: Any, path: str) -> tuple[dict[str, SparkSettings], list[str]]:
    """
    Validate a parsed inventory document: the settings of each Spark that is valid, and
    every problem found (file, host, key and what is valid), per Spark and across them.
    The caller raises ``InventoryError`` once, with the planning problems added.
    """
    _refuse_unsafe(raw, path)
    problems = _top_level_problems(raw, path)
    defaults = _defaults(raw, path, problems)
    sparks_raw = _sparks_listed(raw, path, problems)
    sparks: dict[str, SparkSettings] = {}
    found = Found(problems, [], {})
    for name, own in sparks_raw.items():
        if (spark := _spark_settings(path, name, own, defaults, found)) is not None:
            sparks[name] = spark
    problems += key_messages(path, found.keys)
    problems += _settings_problems(path, sparks)
    problems += _across_sparks(path, list(sparks_raw), sparks, found.partial)
    return sparks, problems


# Keys the address plan across Sparks reads: an invalid Spark joins that check (its other
# keys set aside) only when none of these is among its invalid keys; else its place in the
# plan is unknown, and the plan is judged as before, on the valid Sparks alone.
PLAN_KEYS = frozenset({"qsfp", "qsfp_topology", "management_interface", "management_address"})
SSH_KEYS = frozenset({"ssh_host", "ssh_port"})  # a ring meets at ssh_host too
PLACEHOLDER_HOST = "invalid.invalid"  # RFC 2606: an invalid Spark's missing ssh_host, unused


@dataclass(frozen=True)
class Partial:
    """An invalid Spark's settings without its invalid keys (``dropped``), read only by the
    checks across Sparks, so that one pass reports those problems too."""

    settings: SparkSettings
    dropped: frozenset[str]


@dataclass
class Found:
    """What validating the Sparks one by one found: messages, key problems, and the
    invalid Sparks' settings without their invalid keys."""

    problems: list[str]
    keys: list[KeyProblem]
    partial: dict[str, Partial]


def _partial(merged: dict[str, Any], problems: list[KeyProblem]) -> Partial | None:
    """``merged`` without the top-level keys of ``problems`` (and any key that fails once
    those are gone), or None when what is left is not valid either."""
    dropped = {str(problem.loc[0]) for problem in problems if problem.loc}
    for _ in range(3):
        values = {key: value for key, value in merged.items() if key not in dropped}
        if "ssh_host" in dropped or "ssh_host" not in values:
            dropped.add("ssh_host")
            values["ssh_host"] = PLACEHOLDER_HOST
        try:
            return Partial(SparkSettings(**values), frozenset(dropped))
        except ValidationError as error:
            more = {str(item["loc"][0]) for item in error.errors() if item["loc"]}
            if not more or more <= dropped:
                return None
            dropped |= more
    return None


def _across_sparks(
    path: str, listed: list[Any], sparks: dict[str, SparkSettings], partial: dict[str, Partial]
) -> list[str]:
    """The checks across Sparks, on the valid Sparks and the invalid ones' valid keys: a
    duplicated address is reported in the same pass as a typo elsewhere. A Spark whose SSH
    keys are invalid is left out of the SSH address checks; the address plan takes the
    invalid Sparks only when every listed Spark has a known place in it (no misleading
    "0 rails" for a Spark whose qsfp is what is wrong)."""
    known = {
        n: sparks[n] if n in sparks else partial[n].settings
        for n in listed
        if n in sparks or n in partial
    }
    ring = any(spark.qsfp_topology == "ring" for spark in known.values())
    plan_keys = PLAN_KEYS | (SSH_KEYS if ring else frozenset())
    placed = len(known) == len(listed) and not any(p.dropped & plan_keys for p in partial.values())
    reachable = {
        name: spark
        for name, spark in known.items()
        if name in sparks or not partial[name].dropped & SSH_KEYS
    }
    plan = rail_problems(path, known) if placed else rail_problems(path, sparks, len(listed))
    return [*_endpoint_problems(path, reachable), *plan, *_rails_clear_of_ssh(path, reachable)]


def _refuse_unsafe(raw: Any, path: str) -> None:
    """The document's shape, and no secret in it: refused alone, before anything else."""
    if not isinstance(raw, dict):
        raise InventoryError(path, [f"{path}: the file must be a mapping with `sparks:`"])
    secrets = [f"{path}: {where}: {SECRET_HINT}" for where in secret_places(raw)]
    if secrets:  # the first thing to fix, and nothing else is said, so nothing can echo it
        raise InventoryError(path, secrets)


def _top_level_problems(raw: dict[Any, Any], path: str) -> list[str]:
    return [
        f"{path}: top-level key {name_of(key)}: unknown; valid: sparks, defaults"
        for key in raw
        if key not in ("sparks", "defaults")
    ]


def _defaults(raw: dict[Any, Any], path: str, problems: list[str]) -> dict[str, Any]:
    """The keys under ``defaults:`` that may be shared; the others are problems."""
    defaults = _check_mapping(path, "defaults", raw.get("defaults"), problems)
    for key in defaults:
        if key in PER_HOST_ONLY:
            problems.append(f"{path}: defaults.{key}: per-host only; set it under each Spark")
        elif key not in KNOWN_KEYS:
            problems.append(
                f"{path}: defaults.{name_of(key).strip(chr(39))}: {valid_keys_hint(key)}"
            )
    return {k: v for k, v in defaults.items() if k in KNOWN_KEYS and k not in PER_HOST_ONLY}


def _sparks_listed(raw: dict[Any, Any], path: str, problems: list[str]) -> dict[Any, Any]:
    """The ``sparks:`` mapping, one to MAX_SPARKS of them."""
    sparks_raw = _check_mapping(path, "sparks", raw.get("sparks"), problems)
    if not sparks_raw and not problems:
        problems.append(
            f"{path}: sparks: list one to {MAX_SPARKS} Sparks (name: {{ssh_host: ...}})"
        )
    if len(sparks_raw) > MAX_SPARKS:
        problems.append(too_many_sparks(path, len(sparks_raw)))
    return sparks_raw


def _spark_settings(
    path: str, name: Any, own: Any, defaults: dict[str, Any], found: Found
) -> SparkSettings | None:
    """One Spark's settings (its own keys over the defaults), or None with its problems:
    the name's and the mapping's messages, its keys' problems (said once per ``defaults``
    key by ``key_messages``) and its settings without the invalid keys."""
    if not isinstance(name, str) or not HOST_NAME.fullmatch(name):
        found.problems.append(
            f"{path}: host {name_of(name)}: name must be lower-case letters, digits and '-' "
            "(like spark-1)"
        )
        return None
    own = _check_mapping(path, f"host {name_of(name)}", own, found.problems)
    try:
        return SparkSettings(**{**defaults, **own})
    except ValidationError as error:
        keys = [
            KeyProblem(
                name, tuple(item["loc"]), _inherited(item["loc"], own, defaults), describe(item)
            )
            for item in error.errors()
        ]
        found.keys += keys
        if (partial := _partial({**defaults, **own}, keys)) is not None:
            found.partial[name] = partial
        return None


def _inherited(loc: tuple[Any, ...], own: dict[str, Any], defaults: dict[str, Any]) -> bool:
    """Whether the key at ``loc`` comes from ``defaults:`` (the Spark does not set it)."""
    key = str(loc[0]) if loc else "?"
    return key in defaults and key not in own


def _settings_problems(path: str, sparks: dict[str, SparkSettings]) -> list[str]:
    """What one Spark's keys say together: an operator, a base repo only with a model."""
    problems = []
    for name, spark in sparks.items():
        if not spark.user:
            problems.append(
                f"{path}: host '{name}', key 'operator_user': required when ssh_user is unset "
                "(the Spark user who owns the models and the HF token)"
            )
        if spark.model_base_repo and not spark.model_repo:
            problems.append(
                f"{path}: host '{name}', key 'model_base_repo': only used with model_repo; "
                "set model_repo or remove it"
            )
    return problems


def _endpoint_problems(path: str, sparks: dict[str, SparkSettings]) -> list[str]:
    """Each Spark at its own SSH address and port."""
    problems = []
    endpoints: dict[tuple[str, int], str] = {}
    for name, spark in sparks.items():
        endpoint = (spark.ssh_host, spark.ssh_port)
        if endpoint in endpoints:
            problems.append(
                f"{path}: host '{name}', key 'ssh_host': {spark.ssh_host}:{spark.ssh_port} is "
                f"also host '{endpoints[endpoint]}'; each Spark needs its own address"
            )
        endpoints[endpoint] = name
    return problems


def secret_places(value: Any, where: tuple[str, ...] = ()) -> list[str]:
    """Where in the document a key or a value looks like a secret (a token or key), as
    "host 'spark-1', key 'engine', 'env', 'X'" (or "defaults, key ...")."""
    if len(where) > 2 and where[0] == "'sparks'":
        here = f"host {where[1]}, key {', '.join(where[2:])}"
    elif len(where) > 1 and where[0] == "'defaults'":
        here = f"defaults, key {', '.join(where[1:])}"
    else:
        here = ", ".join(where) or "the document"
    if isinstance(value, str):
        return [here] if looks_like_secret(value) else []
    found = []
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str) and looks_like_secret(key):
                found.append(f"{here}: a key")
                continue
            found += secret_places(item, (*where, name_of(key)))
    elif isinstance(value, list):
        for number, item in enumerate(value, start=1):
            found += secret_places(item, (*where, f"item {number}"))
    return found


def _rails_clear_of_ssh(path: str, sparks: dict[str, SparkSettings]) -> list[str]:
    """No rail subnet may hold the address the laptop reaches a Spark at: configuring the
    rail would take that address's route, and the SSH session with it."""
    addresses = {}
    for name, spark in sparks.items():
        try:
            addresses[name] = ipaddress.ip_address(spark.ssh_host.strip("[]"))
        except ValueError:
            continue  # a DNS name: the network fact refuses a rail carrying the session
    return [
        f"{path}: host '{name}', key 'qsfp', rail {number}, 'address': {rail.network} holds "
        f"{address}, the SSH address of host '{other}'; give the rails a subnet of their own"
        for name, spark in sparks.items()
        for number, rail in enumerate(spark.qsfp, start=1)
        for other, address in addresses.items()
        if address in rail.network
    ]


MAX_BYTES = 1 << 20  # an inventory of two Sparks is a few KB
MAX_NODES = 20_000  # values after aliases are expanded; a pair needs a few hundred
MAX_FLOW_DEPTH = 64  # [ and { inside each other; a JSON flag value needs a handful


class _NestedTooDeep(Exception):
    """A document nested past MAX_FLOW_DEPTH, refused as a RecursionError is."""


class InventoryLoader(yaml.SafeLoader):
    """PyYAML's safe loader, stricter: a key given twice in one mapping is refused (YAML
    would keep the last one silently: ``allow_reboot: false`` then ``true`` is true), and so
    is a document whose aliases expand past ``MAX_NODES`` values ("billion laughs")."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[str, int] = {}
        for key_node, _ in node.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                if key_node.value in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None,
                        f"key {name_of(key_node.value)} is given twice in this mapping (first "
                        f"on line {seen[key_node.value] + 1}); YAML would keep only the last: "
                        "keep one",
                        key_node.start_mark,
                    )  # fmt: skip
                seen[key_node.value] = key_node.start_mark.line
        return super().construct_mapping(node, deep)

    def fetch_flow_collection_start(self, TokenClass: Any) -> None:  # noqa: N803 (PyYAML's)
        """Refused at MAX_FLOW_DEPTH: PyYAML's scanner walks every open level at every token,
        so 5,000 nested brackets took seconds before the recursion limit stopped it."""
        if self.flow_level >= MAX_FLOW_DEPTH:
            raise _NestedTooDeep
        super().fetch_flow_collection_start(TokenClass)

    def get_single_node(self) -> yaml.Node | None:
        node = super().get_single_node()
        if node is not None and _expanded(node, {}) > MAX_NODES:
            raise yaml.composer.ComposerError(
                None, None,
                f"the document expands to more than {MAX_NODES} values through its aliases "
                "(&anchor / *alias); write the values out, or share them under defaults:",
                node.start_mark,
            )  # fmt: skip
        return node


def _expanded(node: yaml.Node, sizes: dict[int, int]) -> int:
    """How many values ``node`` stands for once every alias is expanded (each distinct node
    is counted once and its size reused, so a bomb is measured without expanding it)."""
    if id(node) not in sizes:
        sizes[id(node)] = 1  # a node that contains itself counts once
        if isinstance(node, yaml.MappingNode):
            sizes[id(node)] += sum(_expanded(k, sizes) + _expanded(v, sizes) for k, v in node.value)
        elif isinstance(node, yaml.SequenceNode):
            sizes[id(node)] += sum(_expanded(item, sizes) for item in node.value)
    return sizes[id(node)]


def read_document(path: str) -> Any:
    """The parsed inventory YAML at ``path``."""
    file = Path(path)
    if not file.is_file():
        raise InventoryError(
            path,
            [
                f"{path}: file not found; copy inventory/sparks.example.yml to "
                "inventory/sparks.yml and fill it in, or point SPARK_INVENTORY at your file"
            ],
        )
    if file.stat().st_size > MAX_BYTES:
        raise InventoryError(path, [f"{path}: larger than {MAX_BYTES} bytes; not an inventory"])
    try:
        return yaml.load(file.read_text(encoding="utf-8"), Loader=InventoryLoader)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else path
        problem = redact(getattr(error, "problem", None) or str(error))
        raise InventoryError(path, [f"{where}: not valid YAML: {problem}"]) from None
    except (RecursionError, _NestedTooDeep):
        raise InventoryError(path, [f"{path}: nested too deep to be an inventory"]) from None
    except UnicodeDecodeError as error:
        raise InventoryError(path, [f"{path}: not UTF-8 text ({error.reason})"]) from None
