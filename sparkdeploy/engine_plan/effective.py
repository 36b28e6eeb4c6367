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
from sparkdeploy.config.topology import Place
from sparkdeploy.knowledge.flags import Catalogue, json_object
from sparkdeploy.knowledge.profiles import (
    LAYOUT,
    PLACED,
    PLACEHOLDER,
    multinode_section,
    placeholder_meanings,
    placeholders_of,
    profile,
    scoped,
    spellings,
)

# One model across at most this many Sparks (the bound: the clusters operators
# publish run on 2 to 8 Sparks, tests/recipes/README.md).
MAX_NODES = 8


class EngineConfigError(ValueError):
    """The effective engine configuration is not valid; every problem is listed."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("; ".join(problems))


@dataclass(frozen=True)
class MultiNode:
    """This Spark's place among the Sparks serving one model across the QSFP fabric."""

    nodes: int  # Sparks serving the model
    rank: int  # 0 on the head Spark
    head: str  # where every Spark meets the head: its QSFP address, or in a ring its management one
    interface: str  # the interface the ranks meet on (GLOO/NCCL_SOCKET_IFNAME)
    port: int | None = None  # rendezvous port on the head; None: the profile's
    address: str = ""  # this Spark's own address on that interface
    ring: bool = False  # the Sparks are cabled in a ring (qsfp_topology: ring)

    def __post_init__(self) -> None:
        if not 0 <= self.rank < self.nodes:
            raise ValueError(f"rank {self.rank} is not in 0..{self.nodes - 1}")


def multinode_of(place: Place) -> MultiNode:
    """This Spark's place among the Sparks serving one model: reached on its first rail,
    or in a ring on its management interface (``Place.meet_interface``)."""
    return MultiNode(
        nodes=place.nodes,
        rank=place.rank,
        head=place.head_ip,
        interface=place.meet_interface,
        address=place.meet_address,
        ring=place.ringed,
    )


@dataclass(frozen=True)
class Layout:
    """How the model is split across the Sparks' GPUs (one per Spark)."""

    tp: int  # tensor parallel size
    pp: int  # pipeline parallel size


def _pinned(settings: EngineSettings, catalogue: Catalogue | None) -> Catalogue:
    """The catalogue a plan passed down, else the settings' own (``EngineSettings.catalogue``),
    for a function called on its own."""
    return catalogue if catalogue is not None else settings.catalogue


def chooses_ray(settings: EngineSettings, *, catalogue: Catalogue | None = None) -> bool:
    """Whether engine.args choose Ray to run the engine across Sparks
    (``--distributed-executor-backend: ray`` in any spelling the release reads)."""
    catalogue = _pinned(settings, catalogue)
    for flag, value in settings.args.items():
        reading = catalogue.read(flag)
        if reading is not None and reading.flag == "--distributed-executor-backend":
            return str(value) == "ray"
    return False


def multinode_profile(
    settings: EngineSettings, *, catalogue: Catalogue | None = None
) -> dict[str, Any]:
    """The multi-node section these settings run with: the engine's own launcher, or Ray
    when engine.args choose it and the profile has a Ray section (vLLM)."""
    return multinode_section(settings.name, chooses_ray(settings, catalogue=catalogue))


def control_ports(
    settings: EngineSettings,
    multinode: MultiNode | None,
    *,
    catalogue: Catalogue | None = None,
) -> tuple[tuple[int, int], ...]:
    """The port ranges (first, last) the engine's processes listen on for the other Sparks
    (profiles.yaml multinode: control_span from the rendezvous port, control_ports fixed):
    none on one Spark, where the engines rendezvous on loopback."""
    if multinode is None:
        return ()
    section = multinode_profile(settings, catalogue=catalogue)
    port = multinode.port or int(section["port"])
    spans = [(port, port + int(section.get("control_span", 1)) - 1)]
    spans += [(int(first), int(last)) for first, last in section.get("control_ports", [])]
    return tuple(spans)


def _layout_flags(catalogue: Catalogue) -> dict[str, str]:
    """Placeholder (tp, pp) -> the canonical flag that carries it in this release."""
    return {
        name: flag
        for flag, name in placeholders_of(catalogue).items()
        if name in LAYOUT and "." not in flag
    }


def parallel_layout(
    settings: EngineSettings, nodes: int, *, catalogue: Catalogue | None = None
) -> tuple[Layout, list[str]]:
    """
    The tensor and pipeline parallel sizes on ``nodes`` Sparks, and the problems with the
    ones engine.args give (`-tp 1 -pp 3`, `--tensor-parallel-size 4`, SGLang's `--tp 4`).
    Pipeline parallel left out is 1; tensor parallel left out takes the Sparks the pipeline
    leaves (nodes / pp: every Spark when neither is given). A Spark has one GPU, so tp x pp
    must be the number of Sparks.
    """
    catalogue = _pinned(settings, catalogue)
    carriers = _layout_flags(catalogue)
    given: dict[str, tuple[str, Any]] = {}
    for flag, value in settings.args.items():
        reading = catalogue.read(flag)
        if reading is None or reading.path or value is None:
            continue
        for name, canonical in carriers.items():
            if reading.flag == canonical:
                given[name] = (flag, value)
    sizes: dict[str, int] = {}
    for name, (_, value) in given.items():
        try:
            sizes[name] = max(int(value), 1)
        except (TypeError, ValueError):
            return Layout(tp=nodes, pp=1), []  # check_flags names the value
    pp = sizes.get("pp", 1)
    tp = sizes.get("tp", nodes // pp if nodes % pp == 0 else nodes)
    layout = Layout(tp=tp, pp=pp)
    if tp * pp == nodes:
        return layout, []
    said = " ".join(f"{flag} {value}" for flag, value in given.values())
    if nodes == 1:
        return layout, [
            f"{said}: {tp * pp} GPUs, but one Spark has one GPU; leave it out (or write 1), or "
            "list the other Sparks with their QSFP rails to serve the model across them"
        ]
    return layout, [
        f"{said}: tensor x pipeline parallel {tp} x {pp} = {tp * pp} GPUs, but {nodes} "
        f"Sparks serve this model with one GPU each; make the product {nodes} (for example "
        f"tensor parallel {nodes}, or tensor parallel 1 and pipeline parallel {nodes}), or "
        "leave both out for tensor parallel across every Spark"
    ]


def _worker_problems(settings: EngineSettings, catalogue: Catalogue) -> list[str]:
    """Flags of the profile's worker_args (vLLM's --headless) in engine.args: the deploy
    gives them to the Sparks after the head only, which serve no API."""
    section = multinode_profile(settings, catalogue=catalogue)
    workers = {catalogue.canonical(flag) for flag in section["worker_args"]}
    problems = []
    for flag in settings.args:
        reading = catalogue.read(flag)
        if reading is not None and reading.flag in workers:
            problems.append(
                f"{flag}: set by the deploy on every Spark but the head (rank 0), which serves "
                "the API; leave it out"
            )
    return problems


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


def configures_speculation(settings: EngineSettings, *, catalogue: Catalogue | None = None) -> bool:
    """Whether engine.args choose a speculative method, in any spelling the release reads
    (`--speculative_config.method`, SGLang's `--speculative-algo`)."""
    catalogue = _pinned(settings, catalogue)
    readings = (catalogue.read(flag) for flag, value in settings.args.items() if value)
    return any(reading is not None and reading.flag in SPECULATIVE_FLAGS for reading in readings)


def speculative_on(
    settings: EngineSettings, draft_folder: str | None, *, catalogue: Catalogue | None = None
) -> bool:
    """Speculative decoding: as ``engine.speculative`` says; unset, on with a draft model or
    when engine.args configure it themselves (MTP, n-gram and DFlash need no draft folder)."""
    if settings.speculative is not None:
        return settings.speculative
    return draft_folder is not None or configures_speculation(settings, catalogue=catalogue)


def _placeholders(
    settings: EngineSettings,
    catalogue: Catalogue,
    model_folder: str,
    draft_folder: str | None,
    multinode: MultiNode | None,
) -> dict[str, Any]:
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
        layout, _ = parallel_layout(settings, multinode.nodes, catalogue=catalogue)
        values |= {
            "nodes": multinode.nodes,
            "rank": multinode.rank,
            "head": multinode.head,
            "dist_port": multinode.port or multinode_profile(settings, catalogue=catalogue)["port"],
            "interface": multinode.interface,
            "tp": layout.tp,
            "pp": layout.pp if layout.pp > 1 else None,  # 1, the engine's default: left out
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
    if value is not None:  # a value written into the name (-O3: true) is the flag's value
        args[canonical] = reading.value if reading.value is not None and value is True else value


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
    *,
    catalogue: Catalogue | None = None,
) -> dict[str, Any]:
    """
    The flags the engine is started with on this Spark, checked against its catalogue.

    ``model`` is the model's class (from its config.json) for profile entries scoped to one;
    unknown, such entries are left out and the engine picks. Raises ``EngineConfigError``
    listing every problem (speculative decoding without a draft model, a flag or value the
    pinned release does not accept).
    """
    catalogue = _pinned(settings, catalogue)
    speculative = speculative_on(settings, draft_folder, catalogue=catalogue)
    values = _placeholders(settings, catalogue, model_folder, draft_folder, multinode)
    problems = _speculation_problems(settings, catalogue, speculative, draft_folder)
    problems += _placed_problems(settings, catalogue, values, multinode)
    nodes = multinode.nodes if multinode else 1
    problems += parallel_layout(settings, nodes, catalogue=catalogue)[1]
    problems += _worker_problems(settings, catalogue)
    layers = _layers(
        settings, catalogue, multinode, model, speculative and draft_folder is not None
    )
    args = _layered(catalogue, layers, values, settings.args)
    problems += catalogue.check(args, settings.image_decides())
    if problems:
        raise EngineConfigError(problems)
    return args


def _speculation_problems(
    settings: EngineSettings, catalogue: Catalogue, speculative: bool, draft_folder: str | None
) -> list[str]:
    """Speculative decoding on with neither a draft model nor a method in engine.args."""
    if (
        speculative
        and draft_folder is None
        and not configures_speculation(settings, catalogue=catalogue)
    ):
        return [
            "speculative decoding is on but no draft model is configured: set "
            "draft_model_repo, or give the method in engine.args (--speculative-config / "
            "--speculative-algorithm) for one that needs no draft model (MTP, n-gram)"
        ]
    return []


def _layers(
    settings: EngineSettings,
    catalogue: Catalogue,
    multinode: MultiNode | None,
    model: object | None,
    drafts: bool,
) -> list[Mapping[str, Any]]:
    """The profile's layers, in order: managed < profile < optional-if-catalogued <
    speculative (with a draft model) < metrics < multi-node (< worker)."""
    engine = profile(settings.name)
    version = settings.version
    layers: list[Mapping[str, Any]] = [
        scoped(engine["managed"], version, model),
        scoped(engine["args"], version, model),
    ]
    optional = scoped(engine["if_supported"], version, model)
    layers.append({f: v for f, v in optional.items() if catalogue.accepts(f, v)})
    if drafts:
        layers.append(scoped(engine["speculative"]["args"], version, model))
    if settings.alerts:
        layers.append(scoped(engine["metrics"]["args"], version, model))
    if multinode is not None:
        section = multinode_profile(settings, catalogue=catalogue)
        layers.append(scoped(section["args"], version, model))
        if multinode.rank > 0:
            layers.append(scoped(section["worker_args"], version, model))
    return layers


def _layered(
    catalogue: Catalogue,
    layers: list[Mapping[str, Any]],
    values: Mapping[str, Any],
    given: Mapping[str, Any],
) -> dict[str, Any]:
    """The layers rendered and set one over the other, then the operator's ``given``."""
    args: dict[str, Any] = {}
    for layer in layers:
        for flag, value in layer.items():
            _set(args, catalogue, flag, _render(value, values))
    for flag, value in given.items():
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
    placed = {key: name for key, name in placeholders_of(catalogue).items() if name in PLACED}
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
            if name is None or name in LAYOUT or _agrees(name, value, values, multinode):
                continue  # the layout is checked on its own (parallel_layout)
            where = key if key == reading.key else f"{flag} key {key.split('.', 1)[1]!r}"
            if name == "draft":
                problems.append(
                    f"{where}: the draft model comes from draft_model_repo (the deploy downloads "
                    f"it and mounts its folder); set draft_model_repo to {value!s} and leave "
                    "this out, or make them agree"
                )
            elif multinode is None:
                problems.append(
                    f"{where}: set by the deploy from {meaning[name]} on Sparks serving one "
                    "model together; leave it out on one Spark (or write what one Spark means)"
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
    *,
    catalogue: Catalogue | None = None,
) -> dict[str, str]:
    """The engine's environment: profile < speculative < multi-node < ``engine.env``."""
    catalogue = _pinned(settings, catalogue)
    engine = profile(settings.name)
    version = settings.version
    values = _placeholders(settings, catalogue, "", draft_folder, multinode)
    env: dict[str, Any] = scoped(engine["env"], version, model)
    if speculative_on(settings, draft_folder, catalogue=catalogue):
        env |= scoped(engine["speculative"]["env"], version, model)
    if multinode is not None:
        section = multinode_profile(settings, catalogue=catalogue)
        env |= scoped(engine["multinode"]["env"], version, model)
        env |= scoped(section.get("extra_env") or {}, version, model)
    elif chooses_ray(settings, catalogue=catalogue):
        # Ray on one Spark (the recipe's choice): its memory monitor runs there too, so the
        # Ray section's own environment applies (RAY_memory_monitor_refresh_ms=0).
        section = multinode_profile(settings, catalogue=catalogue)
        env |= scoped(section.get("extra_env") or {}, version, model)
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
