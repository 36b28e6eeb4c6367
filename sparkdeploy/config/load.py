"""
Read the inventory YAML and validate it: built-in defaults < ``defaults:`` < the host's own
keys, merged and checked per Spark, then across Sparks (addresses, the pair's rails). The
result is each Spark's frozen ``SparkSettings``; planning is the next, separate step
(sparkdeploy.inventory).

The inventory file looks like::

    defaults:            # shared by every Spark; any per-host key except ssh_host
      ssh_user: nvidia
    sparks:              # one or two Sparks: name -> keys
      spark-1:
        ssh_host: 192.168.1.50
      spark-2:
        ssh_host: 192.168.1.51
        allow_reboot: true
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from sparkdeploy.config.errors import (
    KNOWN_KEYS,
    InventoryError,
    describe,
    location,
    name_of,
    source_of,
    valid_keys_hint,
)
from sparkdeploy.config.spark import SparkSettings
from sparkdeploy.config.topology import rail_problems
from sparkdeploy.config.values import shown

MAX_SPARKS = 2
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
    problems: list[str] = []
    if not isinstance(raw, dict):
        raise InventoryError(path, [f"{path}: the file must be a mapping with `sparks:`"])

    for key in raw:
        if key not in ("sparks", "defaults"):
            problems.append(
                f"{path}: top-level key {name_of(key)}: unknown; valid: sparks, defaults"
            )

    defaults = _check_mapping(path, "defaults", raw.get("defaults"), problems)
    for key in defaults:
        if key in PER_HOST_ONLY:
            problems.append(f"{path}: defaults.{key}: per-host only; set it under each Spark")
        elif key not in KNOWN_KEYS:
            problems.append(
                f"{path}: defaults.{name_of(key).strip(chr(39))}: {valid_keys_hint(key)}"
            )
    defaults = {k: v for k, v in defaults.items() if k in KNOWN_KEYS and k not in PER_HOST_ONLY}

    sparks_raw = _check_mapping(path, "sparks", raw.get("sparks"), problems)
    if not sparks_raw and not problems:
        problems.append(f"{path}: sparks: list one or two Sparks (name: {{ssh_host: ...}})")
    if len(sparks_raw) > MAX_SPARKS:
        problems.append(
            f"{path}: sparks: {len(sparks_raw)} hosts given; this project prepares one Spark "
            f"or a pair ({MAX_SPARKS} at most)"
        )

    sparks: dict[str, SparkSettings] = {}
    for name, own in sparks_raw.items():
        where = f"{path}: host {name_of(name)}"
        if not isinstance(name, str) or not HOST_NAME.fullmatch(name):
            problems.append(
                f"{where}: name must be lower-case letters, digits and '-' (like spark-1)"
            )
            continue
        own = _check_mapping(path, f"host {name_of(name)}", own, problems)
        merged = {**defaults, **own}
        try:
            sparks[name] = SparkSettings(**merged)
        except ValidationError as error:
            for item in error.errors():
                key = str(item["loc"][0]) if item["loc"] else "?"
                problems.append(
                    f"{where}, {location(item['loc'])}{source_of(key, own, defaults)}: "
                    f"{describe(item)}"
                )

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

    endpoints: dict[tuple[str, int], str] = {}
    for name, spark in sparks.items():
        endpoint = (spark.ssh_host, spark.ssh_port)
        if endpoint in endpoints:
            problems.append(
                f"{path}: host '{name}', key 'ssh_host': {spark.ssh_host}:{spark.ssh_port} is "
                f"also host '{endpoints[endpoint]}'; each Spark needs its own address"
            )
        endpoints[endpoint] = name
    problems += rail_problems(path, sparks)
    return sparks, problems


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
    try:
        raw = yaml.safe_load(file.read_text(encoding="utf-8"))
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else path
        problem = getattr(error, "problem", None) or str(error)
        raise InventoryError(path, [f"{where}: not valid YAML: {problem}"]) from None
    return raw
