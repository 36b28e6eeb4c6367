"""
GB10 profiles: the engine's effective flags and environment on a Spark.

The working defaults live in ``knowledge/profiles.yaml`` (with the field report behind
each); this module layers them (managed < profile < optional-if-catalogued < speculative < multi-node
< the operator's ``engine.args`` / ``engine.env``) and checks the result against the
pinned release's catalogue, so a flag the engine does not know is never emitted.
"""

from __future__ import annotations

import copy
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sparkdeploy.config.engine import EngineSettings
from sparkdeploy.knowledge.flags import Catalogue, check_flags, json_object, load_catalogue
from sparkdeploy.knowledge.profiles import (
    PLACED,
    PLACEHOLDER,
    managed_placeholders,
    placeholder_meanings,
    profile,
    scoped,
    spellings,
)


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


# The flags that choose a speculative method (vLLM's JSON, SGLang's algorithm).
SPECULATIVE_FLAGS = frozenset({"--speculative-config", "--speculative-algorithm"})


def configures_speculation(settings: EngineSettings) -> bool:
    """Whether engine.args choose a speculative method, in any spelling the release reads
    (`--speculative_config.method`, SGLang's `--speculative-algo`)."""
    catalogue = load_catalogue(settings.name, settings.version)
    readings = (catalogue.read(flag) for flag, value in settings.args.items() if value)
    return any(reading is not None and reading.flag in SPECULATIVE_FLAGS for reading in readings)


def speculative_on(settings: EngineSettings, draft_folder: str | None) -> bool:
    """Speculative decoding: as ``engine.speculative`` says; unset, on with a draft model or
    when engine.args configure it themselves (MTP, n-gram and DFlash need no draft folder)."""
    if settings.speculative is not None:
        return settings.speculative
    return draft_folder is not None or configures_speculation(settings)


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
        "context_length": settings.context_length,  # unset: the engine's own default
    }
    if multinode is not None:
        values |= {
            "nodes": multinode.nodes,
            "rank": multinode.rank,
            "head": multinode.head,
            "dist_port": multinode.port or engine["multinode"]["port"],
            "interface": multinode.interface,
            "address": multinode.address,  # this Spark's own fabric address (host-IP variables)
        }
    return values


def _set(args: dict[str, Any], catalogue: Catalogue, flag: str, value: Any) -> None:
    """
    Set (or with None remove) a flag as the release reads it: under its canonical name,
    replacing its other spellings and its negation; a dotted spelling sets (or removes) one
    key inside the JSON flag's object.
    """
    reading = catalogue.read(flag)
    if reading is None:  # not a flag of this release: kept as written for check_flags
        if value is None:
            args.pop(flag, None)
        else:
            args[flag] = value
        return
    if reading.path:
        _set_key(args, reading.flag, reading.path, value)
        return
    canonical = reading.flag
    spec = catalogue.spec(canonical)
    base = spec.negates if spec is not None and spec.negates else canonical
    for name in [*spellings(catalogue, base), "--no-" + base[2:]]:
        args.pop(name, None)
    if value is not None:
        args[canonical] = value


def _set_key(args: dict[str, Any], flag: str, path: tuple[str, ...], value: Any) -> None:
    """Set one key (``path``) inside the JSON object of ``flag``; None removes it."""
    root: dict[str, Any] = copy.deepcopy(json_object(args.get(flag)) or {})
    node = root
    for key in path[:-1]:
        child = node.get(key)
        node[key] = child = dict(child) if isinstance(child, dict) else {}
        node = child
    if value is None:
        node.pop(path[-1], None)
    else:
        node[path[-1]] = value
    args[flag] = root


def effective_args(
    settings: EngineSettings,
    model_folder: str,
    draft_folder: str | None = None,
    multinode: MultiNode | None = None,
    model: object | None = None,
) -> dict[str, Any]:
    """
    The flags the engine is started with on this Spark, checked against its catalogue.

    ``model`` is the model's class (from its config.json) for profile entries scoped to one;
    unknown, such entries are left out and the engine picks. Raises ``EngineConfigError``
    listing every problem (speculative decoding without a draft model, a flag or value the
    pinned release does not accept).
    """
    catalogue = load_catalogue(settings.name, settings.version)
    engine = profile(settings.name)
    version = settings.version
    speculative = speculative_on(settings, draft_folder)
    problems: list[str] = []
    if speculative and draft_folder is None and not configures_speculation(settings):
        problems.append(
            "speculative decoding is on but no draft model is configured: set "
            "draft_model_repo, or give the method in engine.args (--speculative-config / "
            "--speculative-algorithm) for one that needs no draft model (MTP, n-gram)"
        )
    values = _placeholders(settings, model_folder, draft_folder, multinode)
    problems += _placed_problems(settings, catalogue, values, multinode)

    layers: list[Mapping[str, Any]] = [
        scoped(engine["managed"], version, model),
        scoped(engine["args"], version, model),
    ]
    optional = scoped(engine["if_supported"], version, model)
    layers.append({f: v for f, v in optional.items() if catalogue.accepts(f, v)})
    if speculative and draft_folder is not None:
        layers.append(scoped(engine["speculative"]["args"], version, model))
    if settings.alerts:
        layers.append(scoped(engine["metrics"]["args"], version, model))
    if multinode is not None:
        layers.append(scoped(engine["multinode"]["args"], version, model))
        if multinode.rank > 0:
            layers.append(scoped(engine["multinode"]["worker_args"], version, model))
    args: dict[str, Any] = {}
    for layer in layers:
        for flag, value in layer.items():
            _set(args, catalogue, flag, _render(value, values))
    for flag, value in settings.args.items():
        _set(args, catalogue, flag, value)
    # Keys of a JSON flag the deploy manages (the draft folder in --speculative-config) stay
    # the deploy's when engine.args gives the rest of that flag.
    for layer in layers:
        for flag, value in layer.items():
            canonical = catalogue.canonical(flag)
            if not isinstance(value, dict) or canonical not in args:
                continue
            for key, item in value.items():
                if PLACEHOLDER.search(str(item)):
                    _set_key(args, canonical, (key,), _render(item, values))

    problems += check_flags(settings.name, settings.version, args)
    if problems:
        raise EngineConfigError(problems)
    return args


def _placed_problems(
    settings: EngineSettings,
    catalogue: Catalogue,
    values: Mapping[str, Any],
    multinode: MultiNode | None,
) -> list[str]:
    """
    Flags in engine.args that the deploy sets from the Spark's place or the draft model
    (``PLACED``): fine when they say what the deploy would (`-tp 1` on one Spark, the draft
    model's repository inside --speculative-config, which the deploy turns into its folder),
    refused otherwise, naming the setting.
    """
    meaning = placeholder_meanings()
    placed = {
        key: name
        for key, name in managed_placeholders(settings.name, settings.version).items()
        if name in PLACED
    }
    problems = []
    for flag, given in settings.args.items():
        reading = catalogue.read(flag)
        if reading is None or given is None:
            continue
        given = json_object(given) or given
        found = [(reading.key, given)]
        if not reading.path and isinstance(given, dict):
            found += [(f"{reading.flag}.{key}", item) for key, item in given.items()]
        for key, value in found:
            name = placed.get(key)
            if name is None or _agrees(name, value, values, multinode):
                continue
            where = key if key == reading.key else f"{flag} key {key.split('.', 1)[1]!r}"
            if name == "draft":
                problems.append(
                    f"{where}: the draft model comes from draft_model_repo (the deploy downloads "
                    f"it and mounts its folder); set draft_model_repo to {value!s} and leave "
                    "this out, or make them agree"
                )
            elif multinode is None:
                problems.append(
                    f"{where}: set by the deploy from {meaning[name]} on a pair of Sparks; one "
                    f"Spark has one GPU, so leave it out (or write what one Spark means)"
                )
            else:
                problems.append(
                    f"{where}: set by the deploy from {meaning[name]} ({values[name]} here); "
                    "leave it out"
                )
    return problems


def _agrees(name: str, value: Any, values: Mapping[str, Any], multinode: MultiNode | None) -> bool:
    """Whether an operator's value says what the deploy sets for placeholder ``name``."""
    if name == "draft":
        draft = values.get("draft")
        return (
            isinstance(value, str)
            and draft is not None
            and posixpath.basename(value.rstrip("/")) == posixpath.basename(draft.rstrip("/"))
        )
    alone = {"nodes": 1, "rank": 0}
    expected = values[name] if multinode is not None else alone.get(name)
    if expected is None:
        return False
    try:
        return float(value) == float(expected)
    except (TypeError, ValueError):
        return str(value) == str(expected)


def effective_env(
    settings: EngineSettings,
    draft_folder: str | None = None,
    multinode: MultiNode | None = None,
    model: object | None = None,
) -> dict[str, str]:
    """The engine's environment: profile < speculative < multi-node < ``engine.env``."""
    engine = profile(settings.name)
    version = settings.version
    values = _placeholders(settings, "", draft_folder, multinode)
    env: dict[str, Any] = scoped(engine["env"], version, model)
    if speculative_on(settings, draft_folder):
        env |= scoped(engine["speculative"]["env"], version, model)
    if multinode is not None:
        env |= scoped(engine["multinode"]["env"], version, model)
    # A value that is only a placeholder without a value here (no fabric address) is left
    # out rather than set empty: an empty host-IP variable would still be read.
    env = {
        name: str(rendered)
        for name, value in env.items()
        if (rendered := _render(value, values)) is not None and rendered != ""
    }
    for name, value in settings.env.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env
