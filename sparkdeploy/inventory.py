"""
The inventory as pyinfra gets it, in explicit steps before any host is contacted:

    read (YAML) -> validate (settings per Spark, then across Sparks) -> topology
    -> model class (each engine's config.json, when a reader is given) -> plan

Every problem of every step is listed at once in one ``InventoryError``; each host's data
then carries its frozen settings (``spark``), its place among the Sparks (``place``) and its
engine plan (``engine_plan``), which is all the operations read.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparkdeploy.config.engine import api_key_problems, laptop_api_key
from sparkdeploy.config.errors import InventoryError
from sparkdeploy.config.load import read_document, validate_document
from sparkdeploy.config.model_source import ModelRead, ModelReader
from sparkdeploy.config.shipped import Shipped, read_shipped
from sparkdeploy.config.spark import SparkSettings
from sparkdeploy.config.topology import Topology
from sparkdeploy.config.trust import withheld_token_warning
from sparkdeploy.engine_plan.plan import EnginePlan, plan_sparks


@dataclass(frozen=True)
class Inventory:
    """The validated and planned inventory: Spark name -> settings, in file order."""

    path: str
    sparks: dict[str, SparkSettings]
    topology: Topology
    engine_plans: dict[str, EnginePlan] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def pyinfra_hosts(self) -> list[tuple[str, dict[str, Any]]]:
        """The hosts as pyinfra wants them: (name, host data)."""
        hosts = []
        for name, spark in self.sparks.items():
            data: dict[str, Any] = {
                "ssh_hostname": spark.ssh_host,
                "ssh_port": spark.ssh_port,
                "ssh_strict_host_key_checking": spark.ssh_strict_host_key_checking,
                "spark": spark,
                "place": self.topology[name],
                "engine_plan": self.engine_plans.get(name),
            }
            optional = {
                "ssh_user": spark.ssh_user,
                "ssh_key": spark.ssh_key,
                "ssh_known_hosts_file": spark.ssh_known_hosts_file,
            }
            data.update({key: value for key, value in optional.items() if value is not None})
            hosts.append((name, data))
        return hosts


def build_inventory(
    raw: Any,
    path: str,
    read_model: ModelReader | None = None,
    environ: Mapping[str, str] | None = None,
) -> Inventory:
    """Validate and plan a parsed inventory document; raises ``InventoryError`` listing
    every problem (file, host, key and what is valid). ``read_model`` reads each engine's
    model class for the GB10 rules (``config/model_source.read_model_class``); without it
    the rules scoped to a model class warn instead of refusing. ``environ`` is the laptop's
    environment, where API keys are (engine.api_key_env; default ``os.environ``)."""
    sparks, problems = validate_document(raw, path)
    topology = Topology.of(sparks)
    models = _read_models(sparks, read_model) if read_model is not None and not problems else None
    shipped, ship_problems = _read_shipped(sparks, Path(path).parent)
    problems += [f"{path}: {problem}" for problem in ship_problems]
    keyed, key_problems = _api_keys(sparks, os.environ if environ is None else environ)
    problems += [f"{path}: {problem}" for problem in key_problems]
    plans, plan_problems, warnings = plan_sparks(sparks, topology, models, shipped, keyed)
    problems += [f"{path}: {problem}" for problem in plan_problems]
    if problems:
        raise InventoryError(path, problems)
    warnings += _trust_warnings(sparks, os.environ if environ is None else environ)
    return Inventory(path, sparks, topology, plans, [f"{path}: {w}" for w in warnings])


def _trust_warnings(sparks: dict[str, SparkSettings], environ: Mapping[str, str]) -> list[str]:
    """An HF token withheld from an endpoint the operator did not confirm, and GPU service
    images that are not pinned."""
    warnings = []
    for name, spark in sparks.items():
        withheld = withheld_token_warning(spark.hf_token_env, spark.hf_endpoint, environ)
        warnings += [f"host '{name}', {withheld}"] if withheld else []
        warnings += [
            f"host '{name}', key 'gpu_services', {service.name!r}: {warning}"
            for service in spark.gpu_services
            if (warning := service.image_warning())
        ]
    return warnings


def _read_models(sparks: dict[str, SparkSettings], read_model: ModelReader) -> dict[str, ModelRead]:
    """Each engine's model class, read once per model: the Sparks of a pair share it."""
    read: dict[tuple[object, ...], ModelRead] = {}
    models = {}
    for name, spark in sparks.items():
        if spark.engine is None:
            continue
        key = (
            spark.model_repo,
            spark.model_revision,
            spark.model_base_repo,
            spark.hf_endpoint,
            spark.hf_token_env,
        )
        if key not in read:
            read[key] = read_model(spark)
        models[name] = read[key]
    return models


def _api_keys(
    sparks: dict[str, SparkSettings], environ: Mapping[str, str]
) -> tuple[frozenset[str], list[str]]:
    """The Sparks whose engine requires the API key this laptop holds, and a problem per
    engine whose key is unusable or whose API would be open without saying so."""
    keyed: set[str] = set()
    problems: list[str] = []
    for name, spark in sparks.items():
        if spark.engine is None:
            continue
        found = api_key_problems(spark.engine, environ)
        problems += [f"host '{name}', key '{key}': {problem}" for key, problem in found]
        if not found and laptop_api_key(spark.engine, environ):
            keyed.add(name)
    return frozenset(keyed), problems


def _read_shipped(
    sparks: dict[str, SparkSettings], base: Path
) -> tuple[dict[str, tuple[Shipped, ...]], list[str]]:
    """Each engine's files and mods, read from the laptop (relative to the inventory's
    folder), and a problem per file that cannot be shipped."""
    shipped: dict[str, tuple[Shipped, ...]] = {}
    problems: list[str] = []
    for name, spark in sparks.items():
        if spark.engine is None:
            continue
        shipped[name], found = read_shipped(spark.engine, base)
        problems += [f"host '{name}', key '{key}': {problem}" for key, problem in found]
    return shipped, problems


def load_inventory(path: str, read_model: ModelReader | None = None) -> Inventory:
    """Read, validate and plan the inventory YAML at ``path``."""
    return build_inventory(read_document(path), path, read_model)
