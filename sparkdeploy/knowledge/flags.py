"""
Engine flags checked against the engine's own catalogue before the deploy emits them.

Arguments are a mapping ``{"--flag": value}``: ``True`` for a flag without value
(``{"--enforce-eager": True}`` -> ``--enforce-eager``), a list for a flag taking several
values, a dict for a JSON flag, else a scalar. ``check_flags`` lists every problem at
once: unknown flags (with the closest valid names, the engine's name for a flag carried
over from another engine or release, or the release that still had it), deprecated flags,
values of the wrong type and values outside the engine's choices.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from sparkdeploy.knowledge.spec import FlagSpec

HERE = Path(__file__).resolve().parent
FLAGS_DIR = HERE / "catalogues"
RENAMES_FILE = HERE / "renames.yaml"
ENGINES = ("sglang", "vllm")
ENGINE_TITLES = {"sglang": "SGLang", "vllm": "vLLM"}
HUMAN_INT = re.compile(r"^\d+(\.\d+)?[kKmMgGtT]?$")
MAX_LISTED_CHOICES = 24


class CatalogueNotFound(LookupError):
    """No committed catalogue for this engine release."""


@dataclass(frozen=True)
class Catalogue:
    """The flags one engine release accepts, as extracted from its wheel."""

    engine: str
    version: str
    wheel: str
    sha256: str
    flags: Mapping[str, FlagSpec]

    def spec(self, name: str) -> FlagSpec | None:
        return self.flags.get(name)

    def canonical(self, name: str) -> str:
        """The canonical spelling of a flag (``--tp-size`` -> ``--tensor-parallel-size``)."""
        spec = self.flags.get(name)
        return spec.alias_of if spec is not None and spec.alias_of else name

    def accepts(self, name: str, value: Any = True) -> bool:
        """Whether ``name`` with ``value`` passes ``check_flags`` for this release."""
        return not _problems_for(self, name, value)


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version))


def available_versions(engine: str, flags_dir: Path = FLAGS_DIR) -> list[str]:
    """Catalogued releases of ``engine``, oldest first."""
    prefix = f"{engine}-"
    versions = [p.stem[len(prefix) :] for p in flags_dir.glob(f"{prefix}*.json")]
    return sorted(versions, key=version_key)


@cache
def load_catalogue(engine: str, version: str) -> Catalogue:
    """The committed catalogue of ``engine`` ``version`` (``catalogues/<engine>-<version>.json``)."""
    path = FLAGS_DIR / f"{engine}-{version}.json"
    if engine not in ENGINES or not path.is_file():
        known = ", ".join(available_versions(engine)) or "none"
        raise CatalogueNotFound(
            f"no flag catalogue for {engine} {version} (catalogued: {known}); build one with "
            f"`python -m tools.catalogue {engine} {version}`"
        )
    data = json.loads(path.read_text(encoding="utf-8"))
    flags = {name: FlagSpec.from_json(spec) for name, spec in data["flags"].items()}
    return Catalogue(engine, version, data["source"]["wheel"], data["source"]["sha256"], flags)


@cache
def renames(engine: str) -> dict[str, Any]:
    """The rename table of ``engine`` (renames.yaml): {"flags": [...], "values": [...]}."""
    data = yaml.safe_load(RENAMES_FILE.read_text(encoding="utf-8")) or {}
    table = data.get(engine) or {}
    return {"flags": table.get("flags") or [], "values": table.get("values") or []}


def check_flags(engine: str, version: str, args: Mapping[str, object]) -> list[str]:
    """Every problem with ``args`` for ``engine`` ``version``; empty when all are valid."""
    catalogue = load_catalogue(engine, version)
    problems: list[str] = []
    for name, value in args.items():
        problems += _problems_for(catalogue, name, value)
    return problems


def _problems_for(catalogue: Catalogue, name: str, value: Any) -> list[str]:
    if not isinstance(name, str) or not name.startswith("-"):
        return [f"{name!r}: flags are written with their dashes, like --context-length"]
    spec = catalogue.spec(name)
    if spec is None:
        return [f"{name}: {_unknown(catalogue, name)}"]
    if spec.deprecated:
        better = f"; use {spec.replaced_by}" if spec.replaced_by else ""
        return [f"{name}: deprecated in {_title(catalogue)}{better}"]
    problem = _value_problem(catalogue, name, spec, value)
    return [f"{name}: {problem}"] if problem else []


def _title(catalogue: Catalogue) -> str:
    return f"{ENGINE_TITLES[catalogue.engine]} {catalogue.version}"


def _unknown(catalogue: Catalogue, name: str) -> str:
    """Why a flag is unknown, and what to write instead."""
    title = _title(catalogue)
    for rename in renames(catalogue.engine)["flags"]:
        if rename["old"] == name and rename["new"] in catalogue.flags:
            note = f" ({rename['note']})" if rename.get("note") else ""
            elsewhere = _where_it_exists(catalogue, name)
            return f"not a flag of {title}; use {rename['new']}{note}{elsewhere}"
    elsewhere = _where_it_exists(catalogue, name)
    close = difflib.get_close_matches(name, list(catalogue.flags), n=3, cutoff=0.6)
    hint = f"; closest: {', '.join(close)}" if close else "; no close match"
    return f"not a flag of {title}{elsewhere}{hint}"


def _where_it_exists(catalogue: Catalogue, name: str) -> str:
    """Other catalogued releases (of this engine, else the other engine) that have the flag."""
    same = [
        v
        for v in available_versions(catalogue.engine)
        if name in load_catalogue(catalogue.engine, v).flags
    ]
    if same:
        return f" (it is in {ENGINE_TITLES[catalogue.engine]} {', '.join(same)})"
    for other in ENGINES:
        if other == catalogue.engine:
            continue
        found = [v for v in available_versions(other) if name in load_catalogue(other, v).flags]
        if found:
            article = "an" if ENGINE_TITLES[other][0] in "AEFHILMNORSX" else "a"
            return f" (it is {article} {ENGINE_TITLES[other]} flag)"
    return ""


def _value_problem(catalogue: Catalogue, name: str, spec: FlagSpec, value: Any) -> str | None:
    if spec.type == "bool":
        if value is True:
            return None
        negated = "--no-" + name[2:]
        off = (
            f"; to turn it off write {negated}: true"
            if negated in catalogue.flags
            else "; leave it out to keep it off"
        )
        return f"takes no value: write true to emit it{off} (got {value!r})"
    if value is True and spec.nargs == "?":
        return None
    many = spec.nargs in ("+", "*") or spec.repeatable
    if isinstance(value, list):
        if not many:
            return f"takes one value (got the list {value!r})"
        if not value and spec.nargs == "+":
            return "needs at least one value (got an empty list)"
        items = value
    else:
        items = [value]
    for item in items:
        problem = _item_problem(catalogue, name, spec, item)
        if problem:
            return problem
    return None


def _item_problem(catalogue: Catalogue, name: str, spec: FlagSpec, item: Any) -> str | None:
    kind = spec.type
    if isinstance(item, bool) or item is None:
        return f"needs a {kind} value (got {item!r})"
    if kind == "int":
        human = (
            spec.human_readable
            and isinstance(item, str)
            and (HUMAN_INT.match(item) or item == "auto")
        )
        if not isinstance(item, int) and not human:
            return (
                f"needs an integer{' (or 64k style)' if spec.human_readable else ''} (got {item!r})"
            )
    elif kind == "float":
        if not isinstance(item, (int, float)):
            return f"needs a number (got {item!r})"
    elif kind == "json":
        if not isinstance(item, (dict, list, str)):
            return f"needs a JSON object or string (got {item!r})"
    elif not isinstance(item, (str, int, float)):
        return f"needs a string (got {item!r})"
    if spec.choices is not None and not _in_choices(spec, item):
        return _choice_problem(catalogue, name, spec, item)
    return None


def _in_choices(spec: FlagSpec, item: Any) -> bool:
    if spec.ignore_case and isinstance(item, str):
        return item.upper() in {str(choice).upper() for choice in spec.choices or []}
    return item in (spec.choices or [])


def _choice_problem(catalogue: Catalogue, name: str, spec: FlagSpec, item: Any) -> str:
    choices = [str(choice) for choice in spec.choices or []]
    for rename in renames(catalogue.engine)["values"]:
        if (
            rename["flag"] == name
            and rename["old"] == item
            and rename["new"] in (spec.choices or [])
        ):
            return f"{item!r} is not a choice in {_title(catalogue)}; use {rename['new']}"
    if len(choices) <= MAX_LISTED_CHOICES:
        return f"{item!r} is not one of {', '.join(choices)}"
    close = difflib.get_close_matches(str(item), choices, n=3, cutoff=0.5)
    hint = (
        f"closest: {', '.join(close)}"
        if close
        else f"{len(choices)} choices, e.g. {', '.join(choices[:5])}"
    )
    return f"{item!r} is not a choice ({hint})"


def to_argv(engine: str, version: str, args: Mapping[str, Any]) -> list[str]:
    """
    Command-line words for checked args: a ``True`` flag bare, a list spread after the flag
    (or the flag repeated per item for ``append`` flags), a dict or JSON list as one JSON word.
    """
    catalogue = load_catalogue(engine, version)
    words: list[str] = []
    for name, value in args.items():
        spec = catalogue.spec(name)
        if value is True and (spec is None or spec.type == "bool" or spec.nargs == "?"):
            words.append(name)
        elif isinstance(value, list) and spec is not None and spec.repeatable:
            for item in value:
                words += [name, _word(item)]
        elif isinstance(value, list) and (spec is None or spec.type != "json"):
            words += [name, *(_word(item) for item in value)]
        else:
            words += [name, _word(value)]
    return words


def _word(value: Any) -> str:
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"), sort_keys=True)
    return str(value)
