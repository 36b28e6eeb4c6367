"""
GB10 rules: configurations that crash or misbehave on a DGX Spark, each scoped by the
evidence behind it.

The rules are data (``knowledge/gb10_rules.yaml``); this module loads them, checks their shape
strictly, and matches them against an engine's settings, flags and environment::

    violations = check_rules(settings, effective_args(...), effective_env(...), model)
    outcome = judge(settings, violations)   # engine.accept applied

A rule's ``scope`` says where its sources saw the failure: engine release range (a PEP 440
specifier), model class (``knowledge/model_class.py``), node count, image. Inside the scope
it has its ``severity``; outside it has the ``otherwise`` severity (or does not apply);
when the scope needs the model's class, or the engine release, and that is unknown, an error
becomes a warning that says so. The release the scopes compare is the inventory's
``engine.version`` or the build images.yaml maps the image to (a development build by its
PEP 440 pre-release, 0.5.10.dev0 for a build after 0.5.9), never the newest catalogue that
an unknown image's flags are checked against; a release's default (``include_default``) is
evidence only when the release is known. A setting is seen however it is given: the flag in
any spelling the catalogue knows, a key inside a JSON flag (``--attention-config.backend``),
or an environment variable the engine reads for it in that release (the ``ways`` table of
the rules file).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from sparkdeploy.config.engine import EngineSettings
from sparkdeploy.knowledge import KNOWLEDGE_DIR, load_yaml
from sparkdeploy.knowledge.flags import (
    Catalogue,
    available_versions,
    json_object,
)
from sparkdeploy.knowledge.images import describe_image, image_tag, pinning_problem
from sparkdeploy.knowledge.model_class import FIELDS, ModelClass, UnknownModel

RULES_FILE = KNOWLEDGE_DIR / "gb10_rules.yaml"
SEVERITIES = ("error", "warning")
ENGINES = ("sglang", "vllm", "any")
RULE_KEYS = {"id", "engine", "severity", "scope", "match", "summary", "reason", "fix", "sources"}
OPTIONAL_RULE_KEYS = {"otherwise"}
SCOPE_KEYS = {"releases", "model", "model_not", "nodes", "image"}
SOURCE_KEYS = {"seen", "where", "date"}
OTHERWISE_KEYS = {"severity", "summary", "reason", "fix"}
OTHERWISE_KEYS_ORDER = ("summary", "reason", "fix")
WAY_KEYS = {"json", "env", "releases", "source"}
FLAG_TESTS = {"equals", "matches", "above", "not_equal", "present", "absent"}
SUBJECTS = {
    "env_missing",
    "env_not",
    "env_present",
    "image_unpinned",
    "image_matches",
    "image_not_matches",
    "docker_option",
    "setting",
}
CONDITIONS = {"when_env", "unless_env", "when_flag", "unless_flag", "unless_image"}
MATCH_KEYS = {"flag", "at_most", "include_default"} | FLAG_TESTS | SUBJECTS | CONDITIONS
DATE = re.compile(r"\d{4}-\d{2}(-\d{2})?")
RULE_ID = re.compile(r"[a-z0-9][a-z0-9-]{0,63}")
# How a model condition reads in a message ("applies if the model uses MLA").
MODEL_WORDS = {
    ("mla", True): "uses MLA attention",
    ("mla", False): "does not use MLA attention",
    ("moe", True): "is a mixture of experts",
    ("moe", False): "is not a mixture of experts",
}


@dataclass(frozen=True)
class Violation:
    """One rule a configuration breaks."""

    id: str
    severity: str  # error | warning
    message: str  # names the flag and value (or variable, image, option)
    reason: str
    fix: str

    def __str__(self) -> str:
        return f"{self.severity} [{self.id}] {self.message}. {self.reason} Fix: {self.fix}"


@dataclass(frozen=True)
class Source:
    seen: str  # what was seen
    where: str  # report id, URL, PR, issue, file in a wheel
    date: str  # YYYY-MM or YYYY-MM-DD


@dataclass(frozen=True)
class Scope:
    """Where the sources saw the failure; every part given must hold."""

    releases: str = ""  # PEP 440 specifier of engine releases; "" is every release
    model: Mapping[str, Any] = field(default_factory=dict)  # ModelClass field -> value(s)
    model_not: Mapping[str, Any] = field(default_factory=dict)
    nodes: str = ""  # specifier of the node count (">=2")
    image: str = ""  # regex searched in the image reference

    def describe(self) -> str:
        parts = [f"releases {self.releases}"] if self.releases else []
        parts += [_model_words(self.model, self.model_not)] if self.model or self.model_not else []
        parts += [f"{self.nodes} nodes"] if self.nodes else []
        parts += [f"images matching {self.image}"] if self.image else []
        return "; ".join(parts) or "everywhere"


@dataclass(frozen=True)
class Rule:
    id: str
    engine: str
    severity: str
    scope: Scope
    match: Mapping[str, Any]
    summary: str
    reason: str
    fix: str
    sources: tuple[Source, ...]
    otherwise: Mapping[str, str] | None = None  # severity (and texts) outside the scope


@dataclass(frozen=True)
class Way:
    """Another way to give a flag: a key in a JSON flag, or an environment variable."""

    json: str = ""  # --flag.key
    env: str = ""
    releases: str = ""  # the releases that read it
    source: str = ""


@dataclass(frozen=True)
class RuleBook:
    rules: tuple[Rule, ...]
    ways: Mapping[str, Mapping[str, tuple[Way, ...]]]  # engine -> canonical flag -> ways


@dataclass(frozen=True)
class Release:
    """The engine build the rules' release scopes compare."""

    version: str | None  # PEP 440; None when the image's release is unknown
    assumed: str = ""  # when unknown: what the flags were checked against instead, and why


@dataclass(frozen=True)
class _Context:
    settings: EngineSettings
    catalogue: Catalogue
    args: Mapping[str, Any]  # canonical flag spellings
    env: Mapping[str, str]
    ways: Mapping[str, tuple[Way, ...]]
    release: Release = Release(None)


class RulesError(ValueError):
    """gb10_rules.yaml is malformed."""


# -- loading -----------------------------------------------------------------------------------


@lru_cache(maxsize=1)
def load_book() -> RuleBook:
    """The rules and ways of gb10_rules.yaml, checked for shape (unknown keys are an error)."""
    raw = load_yaml(RULES_FILE)
    problems: list[str] = []
    if not isinstance(raw, dict) or set(raw) != {"ways", "rules"}:
        raise RulesError(f"{RULES_FILE.name}: needs exactly two keys, `ways` and `rules`")
    ways = _load_ways(raw["ways"], problems)
    rules = []
    for index, item in enumerate(raw["rules"] or []):
        where = f"{RULES_FILE.name} rule {index + 1} ({item.get('id', '?')})"
        rule = _load_rule(item, where, problems)
        if rule is not None:
            rules.append(rule)
    ids = [rule.id for rule in rules]
    problems += [
        f"{RULES_FILE.name}: duplicate id {i!r}" for i in sorted(set(ids)) if ids.count(i) > 1
    ]
    if problems:
        raise RulesError("; ".join(problems))
    return RuleBook(tuple(rules), ways)


def load_rules() -> tuple[Rule, ...]:
    return load_book().rules


def rule_ids(engine: str) -> list[str]:
    """The ids of the rules that apply to ``engine``, in file order."""
    return [rule.id for rule in load_rules() if rule.engine in ("any", engine)]


def _specifier(text: Any, where: str, problems: list[str]) -> str:
    if not isinstance(text, str):
        problems.append(f"{where}: a release or node range is a string such as '<0.5.11'")
        return ""
    try:
        SpecifierSet(text)
    except InvalidSpecifier:
        problems.append(f"{where}: {text!r} is not a PEP 440 specifier")
    return text


def _load_ways(raw: Any, problems: list[str]) -> dict[str, dict[str, tuple[Way, ...]]]:
    ways: dict[str, dict[str, tuple[Way, ...]]] = {}
    for engine, flags in (raw or {}).items():
        if engine not in ENGINES[:2]:
            problems.append(f"{RULES_FILE.name} ways: unknown engine {engine!r}")
            continue
        ways[engine] = {}
        for flag, items in (flags or {}).items():
            found = []
            for item in items:
                where = f"{RULES_FILE.name} ways {engine} {flag}"
                unknown = set(item) - WAY_KEYS
                problems += [f"{where}: unknown key {key!r}" for key in sorted(unknown)]
                if bool(item.get("json")) == bool(item.get("env")) or not item.get("source"):
                    problems.append(
                        f"{where}: each way is one `json` key or one `env`, with a source"
                    )
                releases = _specifier(item.get("releases", ""), where, problems)
                found.append(
                    Way(item.get("json", ""), item.get("env", ""), releases, item.get("source", ""))
                )
            ways[engine][flag] = tuple(found)
    return ways


def _load_rule(item: Any, where: str, problems: list[str]) -> Rule | None:
    before = len(problems)
    if not isinstance(item, dict):
        problems.append(f"{where}: a rule is a mapping")
        return None
    problems += [
        f"{where}: unknown key {key!r}"
        for key in sorted(set(item) - RULE_KEYS - OPTIONAL_RULE_KEYS)
    ]
    problems += [f"{where}: missing {key!r}" for key in sorted(RULE_KEYS - set(item))]
    if not RULE_ID.fullmatch(str(item.get("id", ""))):
        problems.append(f"{where}: id is lower-case letters, digits and -")
    match = item.get("match") or {}
    problems += [f"{where}: unknown match key {key!r}" for key in sorted(set(match) - MATCH_KEYS)]
    if item.get("severity") not in SEVERITIES:
        problems.append(f"{where}: severity must be one of {SEVERITIES}")
    if item.get("engine") not in ENGINES:
        problems.append(f"{where}: engine must be sglang, vllm or any")
    if bool(set(match) & FLAG_TESTS) != ("flag" in match):
        problems.append(
            f"{where}: flag tests ({', '.join(sorted(FLAG_TESTS))}) need `flag`, "
            "and `flag` needs one of them"
        )
    if not set(match) & (FLAG_TESTS | SUBJECTS):
        problems.append(f"{where}: match tests nothing")
    scope = _load_scope(item.get("scope"), where, problems)
    sources = _load_sources(item.get("sources"), where, problems)
    otherwise = item.get("otherwise")
    if otherwise is not None and (
        not isinstance(otherwise, dict)
        or set(otherwise) - OTHERWISE_KEYS
        or otherwise.get("severity") not in SEVERITIES
    ):
        problems.append(
            f"{where}: otherwise is {{severity: error|warning}} with optional summary, reason, fix"
        )
    if len(problems) > before:
        return None
    texts = {
        key: str(item[key]) for key in ("id", "engine", "severity", "summary", "reason", "fix")
    }
    return Rule(scope=scope, match=match, sources=sources, otherwise=otherwise, **texts)


def _load_scope(raw: Any, where: str, problems: list[str]) -> Scope:
    if not isinstance(raw, dict):
        problems.append(f"{where}: scope is a mapping ({{}} for everywhere)")
        return Scope()
    problems += [f"{where}: unknown scope key {key!r}" for key in sorted(set(raw) - SCOPE_KEYS)]
    for key in ("model", "model_not"):
        for name in raw.get(key) or {}:
            if name not in FIELDS:
                problems.append(f"{where}: scope {key} field {name!r} is not one of {FIELDS}")
    if raw.get("image"):
        try:
            re.compile(raw["image"])
        except re.error as error:
            problems.append(f"{where}: scope image is not a regex ({error})")
    return Scope(
        releases=_specifier(raw.get("releases", ""), where, problems),
        model=raw.get("model") or {},
        model_not=raw.get("model_not") or {},
        nodes=_specifier(raw.get("nodes", ""), where, problems),
        image=raw.get("image", ""),
    )


def _load_sources(raw: Any, where: str, problems: list[str]) -> tuple[Source, ...]:
    if not isinstance(raw, list) or not raw:
        problems.append(f"{where}: sources is a non-empty list of {{seen, where, date}}")
        return ()
    sources = []
    for item in raw:
        if not isinstance(item, dict) or set(item) != SOURCE_KEYS:
            problems.append(f"{where}: each source has exactly seen, where and date")
            continue
        if not DATE.fullmatch(str(item["date"])):
            problems.append(f"{where}: source date {item['date']!r} is not YYYY-MM[-DD]")
        sources.append(Source(str(item["seen"]), str(item["where"]), str(item["date"])))
    return tuple(sources)


# -- checking ----------------------------------------------------------------------------------


def check_rules(
    settings: EngineSettings,
    args: Mapping[str, Any],
    env: Mapping[str, str],
    model: ModelClass | UnknownModel | None = None,
    *,
    catalogue: Catalogue | None = None,
) -> list[Violation]:
    """Every rule of this engine that ``settings``/``args``/``env`` break, in file order.
    ``model`` is the model's class, or why it is unknown (None: not given); ``catalogue``
    the pinned release's (looked up when not given)."""
    model = model if model is not None else UnknownModel("no config.json was read")
    if catalogue is None:
        catalogue = settings.catalogue
    book = load_book()
    canonical = {_canonical(catalogue, flag): value for flag, value in args.items()}
    context = _Context(
        settings,
        catalogue,
        canonical,
        env,
        book.ways.get(settings.name, {}),
        rule_release(settings),
    )
    violations = []
    for rule in book.rules:
        if rule.engine not in ("any", settings.name) or not _conditions_hold(rule.match, context):
            continue
        verdict = _verdict(rule, context, model)
        if verdict is None:
            continue
        severity, summary, reason, fix, note = verdict
        for subject in _subjects(rule.match, context):
            message = f"{subject}: {summary}" + (f" ({note})" if note else "")
            violations.append(Violation(rule.id, severity, message, reason, fix))
    return violations


def _verdict(
    rule: Rule, context: _Context, model: ModelClass | UnknownModel
) -> tuple[str, str, str, str, str] | None:
    """Severity, summary, reason, fix and a note on where the rule stands for this
    configuration; None when it is outside the scope and has no ``otherwise``."""
    texts = (rule.summary, rule.reason, rule.fix)
    verdict = _in_scope(rule.scope, context, model)
    if verdict is False:
        if rule.otherwise is None:
            return None
        other = rule.otherwise
        summary, reason, fix = (
            other.get(key, text) for key, text in zip(OTHERWISE_KEYS_ORDER, texts)
        )
        note = f"outside where it was seen: {rule.scope.describe()}"
        return other["severity"], summary, reason, fix, note
    if isinstance(verdict, str):
        return "warning", *texts, verdict
    if _default_assumed(rule.match, context):
        note = f"the default is not evidence here: {context.release.assumed}"
        return "warning", *texts, note
    return rule.severity, *texts, ""


def rule_release(settings: EngineSettings) -> Release:
    """The build the rules' release scopes compare: the inventory's engine.version, or what
    images.yaml maps the image to (a development build as its PEP 440 pre-release); unknown,
    saying what was assumed, when neither tells it (config/engine.py then checks the flags
    against the newest catalogued release and warns)."""
    info = describe_image(settings.name, settings.image)
    newest = available_versions(settings.name)[-1]
    warning = getattr(settings, "unknown_version_warning", lambda: None)()
    if settings.version != newest or warning is None:  # named, or mapped by images.yaml
        mapped = info.release if info.release and info.version == settings.version else None
        return Release(mapped or settings.version)
    if info.release:  # a development build after a known release, or an uncatalogued one
        return Release(info.release)
    return Release(
        None,
        f"image {settings.image} is of no release images.yaml knows; {settings.name} "
        f"{newest}, the newest catalogued release, was assumed for its flags (set "
        "engine.version to the release the image holds)",
    )


def _default_assumed(match: Mapping[str, Any], context: _Context) -> bool:
    """Whether the rule fires on a release default read from an assumed release."""
    if not match.get("include_default") or context.release.version is not None:
        return False
    flags = match["flag"] if isinstance(match["flag"], list) else [match["flag"]]
    return not any(_given(flag, context) for flag in flags)


def _canonical(catalogue: Catalogue, name: str) -> str:
    """What the release reads ``name`` as (``Catalogue.read``): the canonical flag for an
    alias, an underscore spelling or an abbreviation, ``--flag.key`` for a dotted JSON key."""
    reading = catalogue.read(name)
    return reading.key if reading is not None else name


def _release_in(specifier: str, version: str) -> bool:
    if not specifier:
        return True
    try:
        return SpecifierSet(specifier).contains(Version(version), prereleases=True)
    except InvalidVersion:  # a version PEP 440 cannot order: assume the rule applies
        return True


def _in_scope(scope: Scope, context: _Context, model: ModelClass | UnknownModel) -> bool | str:
    """True inside, False outside, or (a note) when only the unknown release or model class
    could tell."""
    release = context.release
    if release.version is not None and not _release_in(scope.releases, release.version):
        return False
    if scope.image and not re.search(scope.image, context.settings.image):
        return False
    if scope.nodes and not SpecifierSet(scope.nodes).contains(str(_nodes(context.args))):
        return False
    notes = []
    if scope.releases and release.version is None:
        notes.append(
            f"applies to {context.settings.name} releases {scope.releases}; {release.assumed}"
        )
    if scope.model or scope.model_not:
        if isinstance(model, UnknownModel):
            words = _model_words(scope.model, scope.model_not)
            notes.append(f"applies if the model {words}; {model.why}")
        elif not (
            _model_holds(scope.model, model, True) and _model_holds(scope.model_not, model, False)
        ):
            return False
    return "; ".join(notes) or True


def _model_holds(conditions: Mapping[str, Any], model: ModelClass, wanted: bool) -> bool:
    for name, expected in conditions.items():
        actual = model.value(name)
        options = expected if isinstance(expected, list) else [expected]
        have = actual if isinstance(actual, tuple) else (actual,)
        if any(item in have for item in options) != wanted:
            return False
    return True


def _model_words(model: Mapping[str, Any], model_not: Mapping[str, Any]) -> str:
    words = []
    for conditions, negate in ((model, False), (model_not, True)):
        for name, expected in conditions.items():
            if isinstance(expected, bool):
                words.append(MODEL_WORDS[(name, expected != negate)])
            else:
                options = " or ".join(
                    map(str, expected if isinstance(expected, list) else [expected])
                )
                words.append(f"{'has no' if negate else 'has'} {name.replace('_', ' ')} {options}")
    return " and ".join(words)


def _nodes(args: Mapping[str, Any]) -> int:
    """Sparks the engine spans: --nnodes, or the GPUs of its tensor x pipeline parallel
    layout (a Spark has one, so vLLM's Ray executor spans that many Sparks)."""

    def count(*flags: str) -> int:
        for flag in flags:
            try:
                return max(int(args.get(flag) or 1), 1)
            except (TypeError, ValueError):
                continue
        return 1

    nodes = count("--nnodes")
    if nodes > 1:
        return nodes
    tensor = count("--tensor-parallel-size", "--tp-size")
    return tensor * count("--pipeline-parallel-size", "--pp-size")


# -- conditions ------------------------------------------------------------------------------


def _env_matches(env: Mapping[str, str], name: str, pattern: str) -> bool:
    return name in env and re.search(pattern, str(env[name]), re.IGNORECASE) is not None


def _conditions_hold(match: Mapping[str, Any], context: _Context) -> bool:
    for name, pattern in (match.get("when_env") or {}).items():
        if not _env_matches(context.env, name, pattern):
            return False
    for name, pattern in (match.get("unless_env") or {}).items():
        if _env_matches(context.env, name, pattern):
            return False
    for flag, pattern in (match.get("when_flag") or {}).items():
        if not any(
            re.search(pattern, str(value), re.IGNORECASE) for _, value in _given(flag, context)
        ):
            return False
    for flag, pattern in (match.get("unless_flag") or {}).items():
        if any(re.search(pattern, str(value), re.IGNORECASE) for _, value in _given(flag, context)):
            return False
    unless_image = match.get("unless_image")
    return not (unless_image and re.search(unless_image, context.settings.image))


# -- subjects: what a rule points at ----------------------------------------------------------


def _given(flag: str, context: _Context) -> list[tuple[str, Any]]:
    """Every (how it reads, value) the setting ``flag`` is given as: the flag itself, a key
    of a JSON flag, or an environment variable the release reads for it."""
    found: list[tuple[str, Any]] = []
    if flag in context.args:
        found.append((flag, context.args[flag]))
    base, dot, key = flag.partition(".")
    value: Any = json_object(context.args.get(base)) if dot else None
    for part in key.split(".") if dot else ():
        value = value.get(part) if isinstance(value, Mapping) else None
    if value is not None:
        found.append((flag, value))
    for way in context.ways.get(flag, ()):
        if not _release_in(way.releases, context.release.version or context.settings.version):
            continue
        if way.json:
            found += _given(way.json, context)
        elif way.env in context.env:
            found.append((f"{way.env}=", context.env[way.env]))
    return found


def _subjects(match: Mapping[str, Any], context: _Context) -> list[str]:
    if "flag" in match:
        return _flag_subjects(match, context)
    found: list[str] = []
    for key, test in _SUBJECT_TESTS.items():
        if key in match:
            found += test(match[key], context)
    return found


def _flag_subjects(match: Mapping[str, Any], context: _Context) -> list[str]:
    flags = match["flag"] if isinstance(match["flag"], list) else [match["flag"]]
    given = [item for flag in flags for item in _given(flag, context)]
    if match.get("absent"):
        return [] if given else [f"{flags[0]} not set"]
    if not given and match.get("include_default"):
        for flag in flags:
            spec = context.catalogue.spec(flag)
            if spec is not None and spec.default is not None:
                title = f"{context.settings.name} {context.settings.version}'s default"
                given.append((f"{flag} ({title})", spec.default))
                break
    subjects = []
    for shown, value in given:
        if _flag_value_matches(match, value):
            if value is True:
                subjects.append(shown)
            else:
                joint = "" if shown.endswith("=") else " "
                subjects.append(f"{shown}{joint}{_show(value)}")
    return subjects


def _flag_value_matches(match: Mapping[str, Any], value: Any) -> bool:
    items = value if isinstance(value, list) else [value]
    if match.get("present"):
        return True
    if "equals" in match:
        wanted = {_fold(item) for item in match["equals"]}
        return any(_fold(item) in wanted for item in items)
    if "matches" in match:
        return any(re.search(match["matches"], str(item), re.IGNORECASE) for item in items)
    if "above" in match:
        ceiling = match.get("at_most")
        return any(
            _number_above(item, match["above"])
            and (ceiling is None or not _number_above(item, ceiling))
            for item in items
        )
    if "not_equal" in match:
        return any(_fold(item) != _fold(match["not_equal"]) for item in items)
    return False


def _fold(value: Any) -> Any:
    """Compare strings ignoring case and numbers by value ("1" == 1)."""
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value.lower()
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return value


def _number_above(value: Any, limit: float) -> bool:
    try:
        return value is not None and not isinstance(value, bool) and float(value) > limit
    except (TypeError, ValueError):
        return False


def _show(value: Any) -> str:
    return " ".join(map(str, value)) if isinstance(value, list) else str(value)


def _env_missing(names: list[str], context: _Context) -> list[str]:
    missing = [name for name in names if not context.env.get(name)]
    return [f"{', '.join(missing)} unset"] if missing else []


def _env_not(expected: Mapping[str, str], context: _Context) -> list[str]:
    return [
        f"{name}={context.env[name]}" if name in context.env else f"{name} unset"
        for name, pattern in expected.items()
        if not _env_matches(context.env, name, pattern)
    ]


def _env_present(name: str, context: _Context) -> list[str]:
    return [f"{name}={context.env[name]}"] if name in context.env else []


def _image_unpinned(_: Any, context: _Context) -> list[str]:
    image = context.settings.image
    return [f"image {image}"] if pinning_problem(context.settings.name, image) else []


def _image_matches(pattern: str, context: _Context) -> list[str]:
    image = context.settings.image
    return [f"image {image}"] if re.search(pattern, image_tag(image) or "") else []


def _image_not_matches(pattern: str, context: _Context) -> list[str]:
    image = context.settings.image
    return [] if re.search(pattern, image_tag(image) or "") else [f"image {image}"]


def _docker_option(options: list[str], context: _Context) -> list[str]:
    words = [*context.settings.docker_args, *context.args]
    found = []
    for option in options:
        if any(word == option or word.startswith(option + "=") for word in words):
            found.append(f"docker {option}")
    return found


def _setting(expected: Mapping[str, Any], context: _Context) -> list[str]:
    return [
        f"{name} {value}"
        for name, value in expected.items()
        if getattr(context.settings, name) == value
    ]


_SUBJECT_TESTS: dict[str, Callable[[Any, _Context], list[str]]] = {
    "env_missing": _env_missing,
    "env_not": _env_not,
    "env_present": _env_present,
    "image_unpinned": _image_unpinned,
    "image_matches": _image_matches,
    "image_not_matches": _image_not_matches,
    "docker_option": _docker_option,
    "setting": _setting,
}


# -- engine.accept -------------------------------------------------------------------------


@dataclass(frozen=True)
class Judgement:
    """The rules' verdict with the operator's ``engine.accept`` applied."""

    errors: list[str]  # refuse the configuration
    warnings: list[str]  # reported; accepted rules are among them as notices
    accepted: tuple[tuple[str, str], ...]  # (rule id, reason) of accepted rules that fired


def judge(settings: EngineSettings, violations: list[Violation]) -> Judgement:
    """Apply ``engine.accept``: an accepted rule that fires becomes a notice (its reason
    goes into the unit); an unknown id is refused with the ids there are; an accepted rule
    that does not fire is a warning."""
    accept: Mapping[str, str] = getattr(settings, "accept", None) or {}
    known = rule_ids(settings.name)
    errors: list[str] = []
    warnings: list[str] = []
    for rule_id in accept:
        if rule_id not in known:
            errors.append(
                f"engine.accept: {rule_id!r} is not a GB10 rule for {settings.name}; the rules "
                f"are: {', '.join(known)}"
            )
    fired = {v.id for v in violations}
    warnings += [
        f"engine.accept: rule {rule_id} does not fire for this configuration; remove it"
        for rule_id in accept
        if rule_id in known and rule_id not in fired
    ]
    for violation in violations:
        if violation.id in accept:
            warnings.append(
                f"accepted [{violation.id}] {violation.message} (a {violation.severity}, "
                f"accepted by engine.accept: {accept[violation.id]})"
            )
        elif violation.severity == "error":
            errors.append(str(violation))
        else:
            warnings.append(str(violation))
    accepted = tuple((rule_id, accept[rule_id]) for rule_id in accept if rule_id in fired)
    return Judgement(errors, warnings, accepted)
