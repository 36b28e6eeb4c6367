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
    found: list[KeyProblem] = []
    for name, own in sparks_raw.items():
        if (spark := _spark_settings(path, name, own, defaults, problems, found)) is not None:
            sparks[name] = spark
    problems += key_messages(path, found)
    problems += _settings_problems(path, sparks)
    problems += _endpoint_problems(path, sparks)
    problems += rail_problems(path, sparks, listed=len(sparks_raw))
    problems += _rails_clear_of_ssh(path, sparks)
    return sparks, problems


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
    path: str,
    name: Any,
    own: Any,
    defaults: dict[str, Any],
    problems: list[str],
    found: list[KeyProblem],
) -> SparkSettings | None:
    """One Spark's settings (its own keys over the defaults), or None with its problems:
    the name's and the mapping's in ``problems``, its keys' in ``found`` (said once per
    ``defaults`` key by ``key_messages``)."""
    if not isinstance(name, str) or not HOST_NAME.fullmatch(name):
        problems.append(
            f"{path}: host {name_of(name)}: name must be lower-case letters, digits and '-' "
            "(like spark-1)"
        )
        return None
    own = _check_mapping(path, f"host {name_of(name)}", own, problems)
    try:
        return SparkSettings(**{**defaults, **own})
    except ValidationError as error:
        for item in error.errors():
            key = str(item["loc"][0]) if item["loc"] else "?"
            inherited = key in defaults and key not in own
            found.append(KeyProblem(name, tuple(item["loc"]), inherited, describe(item)))
        return None


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
    except RecursionError:
        raise InventoryError(path, [f"{path}: nested too deep to be an inventory"]) from None
    except UnicodeDecodeError as error:
        raise InventoryError(path, [f"{path}: not UTF-8 text ({error.reason})"]) from None
