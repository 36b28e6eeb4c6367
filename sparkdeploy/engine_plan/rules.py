"""
GB10 rules: configurations the field reports saw crash or misbehave on a DGX Spark.

The rules are data (``knowledge/gb10_rules.yaml``); this module loads them, checks their shape,
and matches them against an engine's settings, flags and environment::

    violations = check_rules(settings, effective_args(...), effective_env(...))
    errors = [v for v in violations if v.severity == "error"]

Each ``Violation`` names the rule, the flag and value (or variable, image, option) that
matched, why it fails on GB10 and what to do instead.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import yaml

from sparkdeploy.config.engine import EngineSettings
from sparkdeploy.knowledge import KNOWLEDGE_DIR
from sparkdeploy.knowledge.flags import load_catalogue
from sparkdeploy.knowledge.images import image_tag, pinning_problem

RULES_FILE = KNOWLEDGE_DIR / "gb10_rules.yaml"
SEVERITIES = ("error", "warning")
RULE_KEYS = {"id", "engine", "severity", "match", "summary", "reason", "fix", "source"}
FLAG_TESTS = {"equals", "matches", "above", "not_equal", "present", "absent"}
SUBJECTS = {
    "env_missing",
    "env_not",
    "env_present",
    "image_unpinned",
    "image_not_matches",
    "docker_option",
    "setting",
}
CONDITIONS = {"when_env", "unless_env", "when_flag", "when_multinode"}
MATCH_KEYS = {"flag", "at_most"} | FLAG_TESTS | SUBJECTS | CONDITIONS


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
class Rule:
    id: str
    engine: str
    severity: str
    match: Mapping[str, Any]
    summary: str
    reason: str
    fix: str
    source: str


@dataclass(frozen=True)
class _Context:
    settings: EngineSettings
    args: Mapping[str, Any]  # canonical flag spellings
    env: Mapping[str, str]


class RulesError(ValueError):
    """gb10_rules.yaml is malformed."""


@lru_cache(maxsize=1)
def load_rules() -> tuple[Rule, ...]:
    """The rules of gb10_rules.yaml, checked for shape (unknown keys are an error)."""
    raw = yaml.safe_load(RULES_FILE.read_text(encoding="utf-8"))
    rules, problems = [], []
    for index, item in enumerate(raw):
        where = f"{RULES_FILE.name} rule {index + 1} ({item.get('id', '?')})"
        problems += [f"{where}: unknown key {key!r}" for key in set(item) - RULE_KEYS]
        problems += [f"{where}: missing {key!r}" for key in RULE_KEYS - set(item)]
        match = item.get("match") or {}
        problems += [f"{where}: unknown match key {key!r}" for key in set(match) - MATCH_KEYS]
        if item.get("severity") not in SEVERITIES:
            problems.append(f"{where}: severity must be one of {SEVERITIES}")
        if item.get("engine") not in ("sglang", "vllm", "any"):
            problems.append(f"{where}: engine must be sglang, vllm or any")
        if bool(set(match) & FLAG_TESTS) != ("flag" in match):
            problems.append(
                f"{where}: flag tests ({', '.join(sorted(FLAG_TESTS))}) need `flag`, "
                "and `flag` needs one of them"
            )
        if not set(match) & (FLAG_TESTS | SUBJECTS):
            problems.append(f"{where}: match tests nothing")
        if not problems:
            rules.append(Rule(**{key: item[key] for key in RULE_KEYS}))
    ids = [rule.id for rule in rules]
    problems += [
        f"{RULES_FILE.name}: duplicate id {i!r}" for i in sorted(set(ids)) if ids.count(i) > 1
    ]
    if problems:
        raise RulesError("; ".join(problems))
    return tuple(rules)


def check_rules(
    settings: EngineSettings, args: Mapping[str, Any], env: Mapping[str, str]
) -> list[Violation]:
    """Every rule of this engine that ``settings``/``args``/``env`` break, in file order."""
    catalogue = load_catalogue(settings.name, settings.version)
    canonical = {catalogue.canonical(flag): value for flag, value in args.items()}
    context = _Context(settings, canonical, env)
    violations = []
    for rule in load_rules():
        if rule.engine not in ("any", settings.name) or not _conditions_hold(rule.match, context):
            continue
        for subject in _subjects(rule.match, context):
            violations.append(
                Violation(
                    rule.id, rule.severity, f"{subject}: {rule.summary}", rule.reason, rule.fix
                )
            )
    return violations


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
        if flag not in context.args or not re.search(
            pattern, str(context.args[flag]), re.IGNORECASE
        ):
            return False
    return not match.get("when_multinode") or _multinode(context.args)


def _multinode(args: Mapping[str, Any]) -> bool:
    """Across Sparks: more than one node, or tensor parallelism above one GPU (a Spark has
    one, so vLLM's Ray executor spans the pair)."""
    return _number_above(args.get("--nnodes"), 1) or _number_above(
        args.get("--tensor-parallel-size"), 1
    )


# -- subjects: what a rule points at ----------------------------------------------------------


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
    given = [flag for flag in flags if flag in context.args]
    if match.get("absent"):
        return [] if given else [f"{flags[0]} not set"]
    subjects = []
    for flag in given:
        value = context.args[flag]
        if _flag_value_matches(match, value):
            subjects.append(flag if value is True else f"{flag} {_show(value)}")
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
    "image_not_matches": _image_not_matches,
    "docker_option": _docker_option,
    "setting": _setting,
}
