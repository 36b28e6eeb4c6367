"""
GB10 profiles: the engine's effective flags and environment on a Spark.

The working defaults live in ``knowledge/profiles.yaml`` (with the field report behind
each); this module layers them (managed < profile < optional-if-catalogued < speculative < multi-node
< the operator's ``engine.args`` / ``engine.env``) and checks the result against the
pinned release's catalogue, so a flag the engine does not know is never emitted.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sparkdeploy.config.engine import EngineSettings
from sparkdeploy.knowledge.flags import Catalogue, check_flags, load_catalogue
from sparkdeploy.knowledge.profiles import PLACEHOLDER, profile, spellings


class EngineConfigError(ValueError):
    """The effective engine configuration is not valid; every problem is listed."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("; ".join(problems))


@dataclass(frozen=True)
class MultiNode:
    """This Spark's place in a pair serving one model across the QSFP link."""

    nodes: int  # Sparks in the pair
    rank: int  # 0 on the head Spark
    head: str  # the head Spark's address on the QSFP link
    interface: str  # the QSFP interface name (GLOO/NCCL_SOCKET_IFNAME)
    port: int | None = None  # rendezvous port on the head; None: the profile's
    address: str = ""  # this Spark's own address on the QSFP link

    def __post_init__(self) -> None:
        if not 0 <= self.rank < self.nodes:
            raise ValueError(f"rank {self.rank} is not in 0..{self.nodes - 1}")


def _render(value: Any, values: Mapping[str, Any]) -> Any:
    """Fill ``{placeholders}``; a value that is only a placeholder keeps its type."""
    if isinstance(value, str):
        whole = PLACEHOLDER.fullmatch(value)
        if whole:
            return values[whole.group(1)]
        return PLACEHOLDER.sub(lambda m: str(values[m.group(1)]), value)
    if isinstance(value, list):
        return [_render(item, values) for item in value]
    if isinstance(value, dict):
        return {key: _render(item, values) for key, item in value.items()}
    return value


def speculative_on(settings: EngineSettings, draft_folder: str | None) -> bool:
    return settings.speculative if settings.speculative is not None else draft_folder is not None


def _placeholders(
    settings: EngineSettings,
    model_folder: str,
    draft_folder: str | None,
    multinode: MultiNode | None,
) -> dict[str, Any]:
    engine = profile(settings.name)
    values: dict[str, Any] = {
        "model": model_folder,
        "draft": draft_folder,
        "bind": settings.bind,
        "port": settings.port,
        "served_model_name": settings.served_model_name
        or posixpath.basename(model_folder.rstrip("/")),
        "context_length": settings.context_length or engine["context_length"],
    }
    if multinode is not None:
        values |= {
            "nodes": multinode.nodes,
            "rank": multinode.rank,
            "head": multinode.head,
            "dist_port": multinode.port or engine["multinode"]["port"],
            "interface": multinode.interface,
        }
    return values


def _set(args: dict[str, Any], catalogue: Catalogue, flag: str, value: Any) -> None:
    """Set (or with None remove) a flag, replacing its other spellings and its negation."""
    canonical = catalogue.canonical(flag)
    spec = catalogue.spec(canonical)
    base = spec.negates if spec is not None and spec.negates else canonical
    for name in [*spellings(catalogue, base), "--no-" + base[2:]]:
        args.pop(name, None)
    if value is not None:
        args[canonical] = value


def effective_args(
    settings: EngineSettings,
    model_folder: str,
    draft_folder: str | None = None,
    multinode: MultiNode | None = None,
) -> dict[str, Any]:
    """
    The flags the engine is started with on this Spark, checked against its catalogue.

    Raises ``EngineConfigError`` listing every problem (speculative decoding without a
    draft model, a flag or value the pinned release does not accept).
    """
    catalogue = load_catalogue(settings.name, settings.version)
    engine = profile(settings.name)
    speculative = speculative_on(settings, draft_folder)
    problems: list[str] = []
    if speculative and draft_folder is None:
        problems.append(
            "speculative decoding is on but no draft model is configured (draft_model_repo)"
        )
    values = _placeholders(settings, model_folder, draft_folder, multinode)

    layers: list[Mapping[str, Any]] = [engine["managed"], engine["args"]]
    layers.append({f: v for f, v in engine["if_supported"].items() if catalogue.accepts(f, v)})
    if speculative and draft_folder is not None:
        layers.append(engine["speculative"]["args"])
    if settings.alerts:
        layers.append(engine["metrics"]["args"])
    if multinode is not None:
        layers.append(engine["multinode"]["args"])
        if multinode.rank > 0:
            layers.append(engine["multinode"]["worker_args"])
    args: dict[str, Any] = {}
    for layer in layers:
        for flag, value in layer.items():
            _set(args, catalogue, flag, _render(value, values))
    for flag, value in settings.args.items():
        _set(args, catalogue, flag, value)

    problems += check_flags(settings.name, settings.version, args)
    if problems:
        raise EngineConfigError(problems)
    return args


def effective_env(
    settings: EngineSettings,
    draft_folder: str | None = None,
    multinode: MultiNode | None = None,
) -> dict[str, str]:
    """The engine's environment: profile < speculative < multi-node < ``engine.env``."""
    engine = profile(settings.name)
    values = _placeholders(settings, "", draft_folder, multinode)
    env: dict[str, Any] = dict(engine["env"])
    if speculative_on(settings, draft_folder) and draft_folder is not None:
        env |= engine["speculative"]["env"]
    if multinode is not None:
        env |= engine["multinode"]["env"]
    env = {name: str(_render(value, values)) for name, value in env.items()}
    for name, value in settings.env.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env
