"""
Engine flags checked against the engine's own catalogue before the deploy emits them.

Arguments are a mapping ``{"--flag": value}``: ``True`` for a flag without value
(``{"--enforce-eager": True}`` -> ``--enforce-eager``), a list for a flag taking several
values, a dict for a JSON flag, else a scalar. ``check_flags`` lists every problem at
once: unknown flags (with the closest valid names, the engine's name for a flag carried
over from another engine or release, or the release that still had it), deprecated flags,
values of the wrong type and values outside the engine's choices.

A flag is read the way the release's own parser reads it (the catalogue's ``parser``
section, taken from the engine's source): aliases (``-tp``, ``--tp``), ``_`` for ``-``
where the parser treats them alike (vLLM), dotted keys of a JSON flag
(``--speculative-config.method``, vLLM), and argparse's prefix matching where the parser
allows abbreviations (SGLang): a unique prefix is read as the flag it abbreviates, and a
prefix of several flags is the ``ambiguous option`` argparse stops on, which is how a
removed flag shows up when its successors share its name (SGLang 0.5.2x:
``--cuda-graph-max-bs`` -> ``--cuda-graph-max-bs-decode``/``-prefill``).
"""

from __future__ import annotations

import difflib
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import cache, cached_property
from pathlib import Path
from typing import Any

from sparkdeploy.knowledge import load_yaml
from sparkdeploy.knowledge.spec import FlagSpec

HERE = Path(__file__).resolve().parent
FLAGS_DIR = HERE / "catalogues"
RENAMES_FILE = HERE / "renames.yaml"
ENGINES = ("sglang", "vllm")
ENGINE_TITLES = {"sglang": "SGLang", "vllm": "vLLM"}
HUMAN_INT = re.compile(r"^\d+(\.\d+)?[kKmMgGtT]?$")
MAX_LISTED_CHOICES = 24
INT_TEXT = re.compile(r"[+-]?\d+")


# Flags a release types as plain strings although it parses their value as JSON (their help
# says JSON; the engine's own tests pass JSON text): SGLang's --model-loader-extra-config
# (sglang test/: '{"enable_multithread_load": true}') and --json-model-override-args (a JSON
# string merged into the model's config). A flag another catalogued release of the engine
# types as JSON (vLLM 0.31-0.33 --limit-mm-per-prompt, typed str there) is read the same way.
JSON_TEXT_FLAGS = {
    "sglang": frozenset({"--model-loader-extra-config", "--json-model-override-args"}),
    "vllm": frozenset(),
}


class CatalogueNotFound(LookupError):
    """No committed catalogue for this engine release."""


@dataclass(frozen=True)
class Parser:
    """How a release's command-line parser reads flag names (the catalogue's ``parser``)."""

    prog: str  # "" where the release names none (argparse then uses the script's name)
    allow_abbrev: bool  # argparse prefix matching: a unique prefix stands for the flag
    underscores: bool  # `--max_model_len` is read as `--max-model-len`
    dotted_json: bool  # `--speculative-config.method X` sets one key of a JSON flag


@dataclass(frozen=True)
class Reading:
    """How the release reads one written flag name."""

    flag: str  # the canonical flag (a `--no-` form stays itself)
    path: tuple[str, ...] = ()  # keys inside the JSON flag, for a dotted spelling
    abbreviates: bool = False  # written as a prefix that argparse expands to ``flag``
    value: Any = None  # a value written into the name itself (vLLM's ``-O3``), else None

    @property
    def key(self) -> str:
        """``--flag`` or ``--flag.key.sub``: what the reading sets."""
        return ".".join((self.flag, *self.path))


@dataclass(frozen=True)
class Catalogue:
    """The flags one engine release accepts, as extracted from its wheel."""

    engine: str
    version: str
    wheel: str
    sha256: str
    flags: Mapping[str, FlagSpec]
    parser: Parser
    env: frozenset[str] | None = None  # environment variables the release reads, if recorded

    def spec(self, name: str) -> FlagSpec | None:
        return self.flags.get(name)

    def aliases(self, canonical: str) -> tuple[str, ...]:
        """The other names of ``canonical`` (``--tp`` for ``--tensor-parallel-size``)."""
        return self._aliases.get(canonical, ())

    @cached_property
    def _aliases(self) -> dict[str, tuple[str, ...]]:
        """Canonical flag -> its aliases, gathered once: a plan asks for the spellings of
        every flag it sets, and a scan of the release's hundreds of flags each time was the
        largest share of planning."""
        found: dict[str, list[str]] = {}
        for name, spec in self.flags.items():
            if spec.alias_of is not None:
                found.setdefault(spec.alias_of, []).append(name)
        return {canonical: tuple(names) for canonical, names in found.items()}

    def canonical(self, name: str) -> str:
        """The canonical spelling of a flag (``--tp-size`` -> ``--tensor-parallel-size``)."""
        reading = self.read(name)
        return reading.flag if reading is not None and not reading.path else name

    def read(self, name: str) -> Reading | None:
        """What the release's parser makes of the flag name ``name``; None if it is no flag.
        A dotted key may follow a short alias too (``-cc.mode``: vLLM's FlexibleArgumentParser
        splits any dashed word with a dot into a JSON flag and its keys)."""
        spec = self.flags.get(name)
        if spec is not None:
            return Reading(spec.alias_of or name)
        if not name.startswith("-"):
            return None
        level = self._optimization_level(name)
        if level is not None:
            return level
        dashes = "--" if name.startswith("--") else "-"
        head, dot, rest = name[len(dashes) :].partition(".")
        if self.parser.underscores and dashes == "--":
            head = head.replace("_", "-")
        flag = dashes + head
        if dot:
            return self._dotted(flag, rest) if flag in self.flags else None
        if dashes == "-":
            return None
        spec = self.flags.get(flag)
        if spec is not None:
            return Reading(spec.alias_of or flag)
        matches = self.prefix_matches(flag)
        return Reading(matches[0], abbreviates=True) if len(matches) == 1 else None

    def _dotted(self, flag: str, keys: str) -> Reading | None:
        """``flag.key.subkey``: a key of the JSON value of ``flag`` (a catalogued flag or
        alias), when this release's parser splits dotted words so (``dotted_json``)."""
        spec = self.flags[flag]
        canonical = spec.alias_of or flag
        if not self.parser.dotted_json or not self.takes_json(canonical):
            return None
        if not all(keys.split(".")):
            return None
        return Reading(canonical, tuple(keys.split(".")))

    def _optimization_level(self, name: str) -> Reading | None:
        """vLLM's ``-O`` spellings of --optimization-level: its FlexibleArgumentParser rewrites
        ``-O3``, ``-O=3``, ``-Odecode`` to ``--optimization-level 3`` (and ``-O 3`` for 0-3)
        before argparse sees them (vllm/utils/argparse_utils.py, parse_args). ``-O.key`` is
        no such spelling there (it was when -O stood for --compilation-config)."""
        flag = "--optimization-level"
        if not self.parser.underscores or flag not in self.flags or not name.startswith("-O"):
            return None
        written = name[2:].removeprefix("=")
        if name == "-O":
            return Reading(flag)
        if not written or written.startswith("."):
            return None
        return Reading(flag, value=int(written) if written.isdigit() else written)

    def takes_json(self, flag: str) -> bool:
        """Whether the release parses the value of ``flag`` (canonical) as JSON: typed so in
        this catalogue, or a string the engine reads as JSON (``json_text_flags``)."""
        spec = self.flags.get(flag)
        return spec is not None and (
            spec.type == "json" or (spec.type == "str" and flag in json_text_flags(self.engine))
        )

    def prefix_matches(self, name: str) -> list[str]:
        """The flags argparse would take ``name`` to abbreviate (none without allow_abbrev)."""
        if not self.parser.allow_abbrev or not name.startswith("--"):
            return []
        found = {
            spec.alias_of or flag
            for flag, spec in self.flags.items()
            if flag.startswith(name) and flag.startswith("--")
        }
        return sorted(found)

    def accepts(self, name: str, value: Any = True) -> bool:
        """Whether ``name`` with ``value`` passes ``check_flags`` for this release."""
        return not _problems_for(self, name, value)

    def check(self, args: Mapping[str, object], image_decides: bool = False) -> list[str]:
        """Every problem with ``args`` for this release; empty when all are valid. With
        ``image_decides`` (the image is not this release: a fork, preview, nightly or local
        build) a flag the catalogue does not know and a value outside its choices are left to
        the image (``undecided``), and only the other problems are returned."""
        return [
            problem
            for name, value in args.items()
            if not (image_decides and self.image_decides(name, value))
            for problem in _problems_for(self, name, value)
        ]

    def image_decides(self, name: str, value: Any) -> bool:
        """Whether the only problems of ``name`` with ``value`` are ones an image that is not
        this release may not have: a flag this release does not read, or a value outside its
        choices (a build may add flags, backends and loaders)."""
        if not isinstance(name, str) or not name.startswith("-"):
            return False
        reading = self.read(name)
        if reading is None:
            return True
        spec = self.flags[name if name in self.flags else reading.flag]
        if reading.path or spec.choices is None or spec.deprecated:
            return False
        unchosen = replace(spec, choices=None)
        return _value_problem(self, name, unchosen, value) is None

    def undecided(self, args: Mapping[str, object]) -> list[str]:
        """The problems of ``args`` that only an image which is not this release can settle
        (``image_decides``), as ``check`` words them."""
        return [
            problem
            for name, value in args.items()
            if self.image_decides(name, value)
            for problem in _problems_for(self, name, value)
        ]

    def argv(self, args: Mapping[str, Any]) -> list[str]:
        """``args`` as command-line words (``to_argv``)."""
        return _argv(self, args)

    def spelling_notes(self, args: Mapping[str, object]) -> list[str]:
        """``spelling_notes`` for this release."""
        return _spelling_notes(self, args)

    def unread_env(self, env: Mapping[str, str]) -> list[str]:
        """``unread_env`` for this release."""
        return _unread_env(self, env)


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version))


RELEASE_NUMBER = re.compile(r"v?(\d+(?:\.\d+)*)(?:\.?post(\d+))?")


def release_key(version: str) -> tuple[int, ...]:
    """The numbers of the release a version names, without a build's suffix: ``0.5.8-t5``
    -> (0, 5, 8), ``0.5.8.post1`` -> (0, 5, 8, 1), ``0.24.0-dev`` -> (0, 24, 0)."""
    found = RELEASE_NUMBER.match(version.strip())
    if found is None:
        return ()
    post = (int(found.group(2)),) if found.group(2) else ()
    return tuple(int(part) for part in found.group(1).split(".")) + post


def nearest_release(engine: str, version: str) -> str | None:
    """The catalogued release of ``engine`` nearest ``version``: itself when catalogued, else
    the one sharing the longest leading part of its number (0.20.0 -> 0.20.1, 0.5.8 ->
    0.5.8.post1), then the closest at the first number that differs, the older on a tie;
    None when ``version`` names no release number or nothing is catalogued."""
    releases = available_versions(engine)
    wanted = release_key(version)
    if version in releases or not wanted or not releases:
        return version if version in releases else None

    def distance(release: str) -> tuple[int, int, bool]:
        """Longer shared leading numbers first, then the smaller gap, then the older."""
        key = release_key(release)
        pairs = list(zip(key, wanted, strict=False))
        shared = next((i for i, (a, b) in enumerate(pairs) if a != b), len(pairs))
        gap = abs(pairs[shared][0] - pairs[shared][1]) if shared < len(pairs) else 0
        return (-shared, gap, key > wanted)

    return min(releases, key=distance)


def nearness(engine: str, version: str, nearest: str) -> str:
    """Why ``nearest`` stands for ``version`` (nearest_release), in a few words."""
    releases = available_versions(engine)
    wanted, key = release_key(version), release_key(nearest)
    if wanted[:3] == key[:3]:
        return f"the same {'.'.join(map(str, wanted[:3]))} release"
    if wanted[:2] == key[:2]:
        return f"the nearest of the {'.'.join(map(str, wanted[:2]))} line"
    if wanted < release_key(releases[0]):
        return f"{version} is older than every catalogued release"
    if wanted > release_key(releases[-1]):
        return f"{version} is newer than every catalogued release"
    return f"no {'.'.join(map(str, wanted[:2]))} release is catalogued"


def available_versions(engine: str, flags_dir: Path = FLAGS_DIR) -> list[str]:
    """Catalogued releases of ``engine``, oldest first (a list of the caller's own)."""
    return list(_catalogued(engine, flags_dir))


@cache
def _catalogued(engine: str, flags_dir: Path) -> tuple[str, ...]:
    """The folder listed once per process: the committed catalogues are shipped data, which
    load_catalogue caches too, and a plan asks for them a dozen times (one glob each was a
    millisecond of every inventory checked)."""
    prefix = f"{engine}-"
    versions = [p.stem[len(prefix) :] for p in flags_dir.glob(f"{prefix}*.json")]
    return tuple(sorted(versions, key=version_key))


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
    recorded = data["parser"]  # every catalogue records it (tools/catalogue)
    parser = Parser(
        prog=recorded.get("prog") or "",
        allow_abbrev=bool(recorded["allow_abbrev"]),
        underscores=bool(recorded["underscores"]),
        dotted_json=bool(recorded["dotted_json"]),
    )
    env = frozenset(data["env"]) if isinstance(data.get("env"), list) else None
    return Catalogue(
        engine, version, data["source"]["wheel"], data["source"]["sha256"], flags, parser, env
    )


@cache
def json_text_flags(engine: str) -> frozenset[str]:
    """Flags of ``engine`` whose string value the engine parses as JSON: typed JSON by another
    catalogued release of the engine, or listed in JSON_TEXT_FLAGS."""
    found = set(JSON_TEXT_FLAGS.get(engine, ()))
    for version in available_versions(engine):
        for flag, spec in load_catalogue(engine, version).flags.items():
            if spec.type == "json":
                found.add(spec.alias_of or flag)
    return frozenset(found)


@cache
def renames(engine: str) -> dict[str, Any]:
    """The rename table of ``engine`` (renames.yaml): {"flags": [...], "values": [...]}."""
    data = load_yaml(RENAMES_FILE) or {}
    table = data.get(engine) or {}
    return {"flags": table.get("flags") or [], "values": table.get("values") or []}


def check_flags(engine: str, version: str, args: Mapping[str, object]) -> list[str]:
    """Every problem with ``args`` for ``engine`` ``version``; empty when all are valid."""
    return load_catalogue(engine, version).check(args)


def _problems_for(catalogue: Catalogue, name: str, value: Any) -> list[str]:
    if not isinstance(name, str) or not name.startswith("-"):
        return [f"{name!r}: flags are written with their dashes, like --context-length"]
    reading = catalogue.read(name)
    if reading is None:
        return [f"{name}: {_unknown(catalogue, name)}"]
    if reading.path:
        return _json_key_problem(catalogue, name, value)
    if reading.value is not None:
        if value is not True:
            return [f"{name}: carries its value in its name; write {name}: true"]
        name, value = reading.flag, reading.value
    # as written when it is a spelling of the catalogue (an alias keeps its own), else as read
    name = name if name in catalogue.flags else reading.flag
    spec = catalogue.flags[name]
    if spec.deprecated:
        better = f"; use {spec.replaced_by}" if spec.replaced_by else ""
        return [f"{name}: deprecated in {_title(catalogue)}{better}"]
    problem = _value_problem(catalogue, name, spec, value)
    return [f"{name}: {problem}"] if problem else []


def json_object(value: Any) -> dict[str, Any] | None:
    """A JSON flag's value as a mapping, whether given as one or as JSON text (as the
    engines take it on the command line); None when it is no JSON object."""
    if isinstance(value, str) and value.lstrip().startswith("{"):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    return value if isinstance(value, dict) else None


def _json_key_problem(catalogue: Catalogue, name: str, value: Any) -> list[str]:
    """A dotted key of a JSON flag takes one JSON value (vLLM parses it as JSON)."""
    if value is None or isinstance(value, (bool, int, float, str, list, dict)):
        return []
    return [f"{name}: needs a JSON value (got {value!r})"]


def _title(catalogue: Catalogue) -> str:
    return f"{ENGINE_TITLES[catalogue.engine]} {catalogue.version}"


def _unknown(catalogue: Catalogue, name: str) -> str:
    """Why a flag is unknown, and what to write instead."""
    title = _title(catalogue)
    head, dot, _ = name.partition(".") if name.startswith("--") else (name, "", "")
    if dot and catalogue.read(head) is not None:
        spec = catalogue.spec(catalogue.canonical(head))
        if spec is not None and not catalogue.takes_json(catalogue.canonical(head)):
            return f"{head} is not a JSON flag in {title}, so it has no dotted keys"
        return f"{title} does not take dotted keys; give {head} as one JSON object"
    matches = catalogue.prefix_matches(name)
    if len(matches) > 1:
        elsewhere = _where_it_exists(catalogue, name)
        stops = f'its parser stops with "ambiguous option: {name} could match {", ".join(matches)}"'
        if elsewhere:
            return f"removed from {title}{elsewhere}: {stops}; its successors: {', '.join(matches)}"
        return f"not a flag of {title} but an abbreviation of several: {stops}; write one of them"
    for rename in renames(catalogue.engine)["flags"]:
        if rename["old"] == name and rename["new"] in catalogue.flags:
            note = f" ({rename['note']})" if rename.get("note") else ""
            elsewhere = _where_it_exists(catalogue, name)
            return f"not a flag of {title}; use {rename['new']}{note}{elsewhere}"
    elsewhere = _where_it_exists(catalogue, name)
    close = difflib.get_close_matches(name, list(catalogue.flags), n=3, cutoff=0.6)
    hint = f"; closest: {', '.join(close)}" if close else "; no close match"
    return f"not a flag of {title}{elsewhere}{hint}"


def release_ranges(engine: str, releases: list[str]) -> str:
    """Catalogued releases as runs of consecutive ones: "0.5.3.post3 to 0.5.19, 0.5.23"."""
    every = available_versions(engine)
    wanted = set(releases)
    runs: list[list[str]] = []
    for version in every:
        if version not in wanted:
            runs.append([])
        elif runs and runs[-1]:
            runs[-1].append(version)
        else:
            runs.append([version])
    parts = [run[0] if len(run) == 1 else f"{run[0]} to {run[-1]}" for run in runs if run]
    return ", ".join(parts)


def _where_it_exists(catalogue: Catalogue, name: str) -> str:
    """Other catalogued releases (of this engine, else the other engine) that have the flag."""
    same = [
        v
        for v in available_versions(catalogue.engine)
        if name in load_catalogue(catalogue.engine, v).flags
    ]
    if same:
        return f" (it is in {ENGINE_TITLES[catalogue.engine]} {release_ranges(catalogue.engine, same)})"
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
    if isinstance(value, (dict, list)) and catalogue.takes_json(spec.alias_of or name):
        return None  # one JSON value, written as one compact JSON word (_word)
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
    # Quoted numbers ("0.90", "32") are what argparse's type=int/float read from the command
    # line too, so they pass like numbers.
    if kind == "int":
        human = (
            spec.human_readable
            and isinstance(item, str)
            and (HUMAN_INT.match(item) or item == "auto")
        )
        quoted = isinstance(item, str) and INT_TEXT.fullmatch(item.strip())
        if not isinstance(item, int) and not human and not quoted:
            return (
                f"needs an integer{' (or 64k style)' if spec.human_readable else ''} (got {item!r})"
            )
    elif kind == "float":
        if not isinstance(item, (int, float)) and not _float_text(item):
            return f"needs a number (got {item!r})"
    elif kind == "json":
        if not isinstance(item, (dict, list, str)):
            return f"needs a JSON object or string (got {item!r})"
    elif not isinstance(item, (str, int, float)):
        return f"needs a string (got {item!r})"
    if spec.choices is not None and not _in_choices(spec, item):
        return _choice_problem(catalogue, name, spec, item)
    return None


def _float_text(item: Any) -> bool:
    if not isinstance(item, str):
        return False
    try:
        return math.isfinite(float(item))
    except ValueError:
        return False


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
    return load_catalogue(engine, version).argv(args)


def _argv(catalogue: Catalogue, args: Mapping[str, Any]) -> list[str]:
    words: list[str] = []
    for name, value in args.items():
        reading = catalogue.read(name)
        spec = catalogue.spec(catalogue.canonical(name))
        inline = reading is not None and reading.value is not None
        if value is True and (spec is None or spec.type == "bool" or spec.nargs == "?" or inline):
            words.append(name)
        elif isinstance(value, list) and spec is not None and spec.repeatable:
            for item in value:
                words += [name, _word(item)]
        elif isinstance(value, list) and not catalogue.takes_json(catalogue.canonical(name)):
            words += [name, *(_word(item) for item in value)]
        else:
            words += [name, _word(value)]
    return words


@dataclass(frozen=True)
class ParsedArgs:
    """A server command line read as the release reads it (``from_argv``)."""

    args: dict[str, Any]  # written flag -> value, in the shape ``to_argv`` and the checks take
    positional: tuple[str, ...]  # words no flag takes (vLLM's `serve MODEL`)
    unknown: tuple[str, ...]  # flags the release does not read (their value is guessed)


def from_argv(engine: str, version: str, words: list[str]) -> ParsedArgs:
    """
    The inverse of ``to_argv``: a server's flags as written on a command line
    (``--tp 2 --enable-x --cudagraph-capture-sizes 1 2 4 --k=v``) as the ``{"--flag": value}``
    mapping the inventory says them in. Each flag is read with the release's own catalogue:
    a ``bool`` flag takes no word, ``nargs`` ``+``/``*`` takes the words up to the next
    flag, ``?`` takes the next word unless it is a flag, an ``append`` flag collects one
    word per time it is given; a JSON flag's word is parsed. A flag the release does not
    read takes the next word when that is not a flag, and is listed in ``unknown``.
    """
    catalogue = load_catalogue(engine, version)
    args: dict[str, Any] = {}
    positional: list[str] = []
    unknown: list[str] = []
    index = 0
    while index < len(words):
        word = words[index]
        index += 1
        if not _is_flag(word) or word == "-":
            positional.append(word)
            continue
        name, equals, inline = _spelled(catalogue, word)
        reading = catalogue.read(name)
        spec = catalogue.spec(reading.flag) if reading is not None else None
        following = [inline] if equals else []
        if spec is None:
            unknown.append(name)
            if not equals and index < len(words) and not _is_flag(words[index]):
                following, index = [words[index]], index + 1
            args[name] = following[0] if following else True
            continue
        if not equals:
            following, index = _taken(spec, reading, words, index)
        json_valued = reading is not None and catalogue.takes_json(reading.flag)
        _store(args, name, spec, _flag_value(spec, following, json_valued))
    return ParsedArgs(args, tuple(positional), tuple(unknown))


def _is_flag(word: str) -> bool:
    """A word that starts a flag: not a negative number."""
    return word.startswith("-") and not INT_TEXT.fullmatch(word) and not _float_text(word)


def _spelled(catalogue: Catalogue, word: str) -> tuple[str, str, str]:
    """A flag word as (name, "=" or "", the value written inline): ``--k=v``, and argparse's
    ``-O3`` for ``-O 3`` (a short flag that takes a value)."""
    name, equals, inline = word.partition("=")
    short = catalogue.spec(word[:2]) if not word.startswith("--") else None
    if not equals and len(word) > 2 and short is not None and short.type != "bool":
        return word[:2], "=", word[2:]
    return name, equals, inline


def _taken(
    spec: FlagSpec, reading: Reading | None, words: list[str], index: int
) -> tuple[list[str], int]:
    """The words a known flag written without ``=`` takes from ``words[index:]``, and the
    index after them."""
    if (
        reading is not None
        and (reading.value is not None or spec.type == "bool")
        and not reading.path
    ):
        return [], index
    if spec.nargs in ("+", "*"):
        following = []
        while index < len(words) and not _is_flag(words[index]):
            following.append(words[index])
            index += 1
        return following, index
    if index < len(words) and (spec.nargs != "?" or not _is_flag(words[index])):
        return [words[index]], index + 1
    return [], index


def _flag_value(spec: FlagSpec, following: list[str], json_valued: bool) -> Any:
    """A known flag's value from the words it took: True for none, the list for nargs
    ``+``/``*``, a JSON flag's word parsed (when it parses to an object), else the word."""
    if spec.nargs in ("+", "*") and not json_valued:
        return following
    if not following:
        return True
    value = json_object(following[0]) if json_valued else None
    return following[0] if value is None else value


def _store(args: dict[str, Any], name: str, spec: FlagSpec, value: Any) -> None:
    """Set ``name`` in ``args``; an ``append`` flag collects its values in a list."""
    if spec.repeatable and name in args:
        args[name] = [*args[name], value] if isinstance(args[name], list) else [args[name]]
    else:
        args[name] = [value] if spec.repeatable else value


def _word(value: Any) -> str:
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"), sort_keys=True)
    return str(value)


def spelling_notes(engine: str, version: str, args: Mapping[str, object]) -> list[str]:
    """How the release reads flags written as abbreviations (argparse prefix matching): the
    unit writes the full name, so a later release that adds a flag with the same prefix
    cannot change its meaning."""
    return load_catalogue(engine, version).spelling_notes(args)


def _spelling_notes(catalogue: Catalogue, args: Mapping[str, object]) -> list[str]:
    notes = []
    for name in args:
        reading = catalogue.read(name)
        if reading is not None and reading.abbreviates:
            notes.append(
                f"{name}: {_title(catalogue)} reads it as {reading.flag} (an abbreviation); "
                f"the unit writes {reading.flag}, and so should engine.args"
            )
    return notes


ENV_PREFIXES = {"sglang": ("SGLANG_", "SGL_"), "vllm": ("VLLM_",)}


def unread_env(engine: str, version: str, env: Mapping[str, str]) -> list[str]:
    """The engine's own variables (SGLANG_*, VLLM_*) in ``env`` that this release does not
    read, when its catalogue records what it reads: they have no effect there."""
    return load_catalogue(engine, version).unread_env(env)


def _unread_env(catalogue: Catalogue, env: Mapping[str, str]) -> list[str]:
    engine = catalogue.engine
    if catalogue.env is None:
        return []
    notes = []
    for name in env:
        if name.startswith(ENV_PREFIXES[engine]) and name not in catalogue.env:
            readers = [
                v
                for v in available_versions(engine)
                if name in (load_catalogue(engine, v).env or ())
            ]
            where = f" (read by {release_ranges(engine, readers)})" if readers else ""
            notes.append(f"{name}: not read by {_title(catalogue)}, so it has no effect{where}")
    return notes
