"""
The `docker run` options engine.docker_args may hold, read with docker's own grammar
(docker_options.yaml, with sources): which options docker knows and which take a value, the
values docker parses itself, the options and values refused as unsafe, those warned about,
and the options the deploy manages itself, refused naming the setting that manages each.

    options, problems, warnings = parse_docker_args(["--shm-size=10.24gb", "-u", "1000"])
    # options == (("--shm-size", "10.24gb"), ("--user", "1000"))
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from sparkdeploy.knowledge import load_yaml

OPTIONS_FILE = Path(__file__).resolve().parent / "docker_options.yaml"
WHERE = "sparkdeploy/knowledge/docker_options.yaml"


@dataclass(frozen=True)
class Grammar:
    """The values docker parses itself for one option (anything else docker refuses)."""

    name: str
    value: re.Pattern[str]
    example: str
    source: str


@dataclass(frozen=True)
class Rule:
    """One `unsafe` (refused) or `warned` entry: an option, and which of its values."""

    option: str
    value: re.Pattern[str] | None  # None: whatever the option says
    text: str  # why it is refused, or the warning ({value} stands for the value)
    fix: str
    source: str

    def matches(self, name: str, value: str | None) -> bool:
        """Whether the option ``name`` with ``value`` is this rule's."""
        if name != self.option:
            return False
        return self.value is None or (value is not None and bool(self.value.fullmatch(value)))

    def said(self, value: str | None) -> str:
        """The rule's text with the value in it."""
        return self.text.replace("{value}", value or "")


def _text(value: object) -> str:
    return " ".join(str(value or "").split())


@lru_cache(maxsize=1)
def _table() -> dict[str, Any]:
    return load_yaml(OPTIONS_FILE)


@lru_cache(maxsize=1)
def docker_flags() -> frozenset[str]:
    """docker run's options without a value (booleans)."""
    return frozenset(_table()["docker_run"]["flags"])


@lru_cache(maxsize=1)
def docker_values() -> frozenset[str]:
    """docker run's options that take a value."""
    return frozenset(_table()["docker_run"]["values"])


@lru_cache(maxsize=1)
def aliases() -> dict[str, str]:
    """Short and old spellings -> docker's long name."""
    return dict(_table()["docker_run"]["aliases"])


@lru_cache(maxsize=1)
def grammar() -> dict[str, Grammar]:
    """The values docker parses itself, by option."""
    return {
        name: Grammar(
            name=name,
            value=re.compile(entry["value"], re.IGNORECASE),
            example=entry["example"],
            source=_text(entry["source"]),
        )
        for name, entry in _table()["grammar"].items()
    }


def _rules(section: str) -> tuple[Rule, ...]:
    return tuple(
        Rule(
            option=entry["option"],
            value=None if entry["value"] is None else re.compile(entry["value"], re.IGNORECASE),
            text=_text(entry.get("why") or entry.get("warning")),
            fix=_text(entry.get("fix")),
            source=_text(entry["source"]),
        )
        for entry in _table()[section]
    )


@lru_cache(maxsize=1)
def unsafe_rules() -> tuple[Rule, ...]:
    """Options and values refused as unsafe, with why and the fix."""
    return _rules("unsafe")


@lru_cache(maxsize=1)
def warned_rules() -> tuple[Rule, ...]:
    """Options and values accepted with a warning."""
    return _rules("warned")


@lru_cache(maxsize=1)
def managed_options() -> dict[str, str]:
    """Options the deploy manages (docker's long names) -> the setting managing each."""
    return {name: _text(entry["setting"]) for name, entry in _table()["managed"].items()}


def long_name(spelling: str) -> str:
    """docker's long name of an option as written (``-e`` -> ``--env``)."""
    return aliases().get(spelling, spelling)


def _knows(spelling: str) -> bool:
    name = long_name(spelling)
    return name in docker_flags() or name in docker_values()


def split_short(words: list[str] | tuple[str, ...]) -> list[str]:
    """Short options as pflag reads them, one per word: ``-it`` -> ``-i -t``, ``-m16g`` and
    ``-m=16g`` -> ``-m 16g``. Other words are left as they are."""
    out: list[str] = []
    for word in words:
        while len(word) > 2 and word[0] == "-" and word[1] != "-" and word[:2] in aliases():
            head, rest = word[:2], word[2:]
            out.append(head)
            if long_name(head) in docker_values():
                word = rest.removeprefix("=")
                break
            word = "-" + rest
        out.append(word)
    return out


# What one option of engine.docker_args is: accepted, or why not: a word that is no option's
# value ("stray"), an option the deploy manages, one docker does not know, a value given to a
# flag, none to an option that needs one, a value docker would refuse, or one refused as unsafe.
# "off" is a flag written `=false`: docker leaves it out, so does the deploy.
Verdict = Literal[
    "allowed", "off", "stray", "managed", "unknown", "no_value", "needs_value", "refused", "unsafe"
]


@dataclass(frozen=True)
class ReadOption:
    """One option of engine.docker_args as read: its verdict, docker's long name, its value
    (capabilities upper case without CAP_), the spelling written and the rule it met."""

    verdict: Verdict
    name: str
    value: str | None = None
    spelled: str = ""
    rule: Rule | None = None

    @property
    def shown(self) -> str:
        """The option as the inventory wrote it (its spelling)."""
        return self.spelled or self.name


def _value_follows(words: list[str] | tuple[str, ...], index: int) -> bool:
    """Whether ``words[index]`` is a value (pflag takes the next word; one that is itself an
    option is read as a missing value, the likelier slip)."""
    if index >= len(words):
        return False
    word = words[index]
    return not word.startswith("--") and not (word.startswith("-") and _knows(word[:2]))


def read_option(words: list[str] | tuple[str, ...], index: int) -> tuple[ReadOption, int]:
    """The option at ``words[index]`` (with the value it takes), and the index after it.
    ``words`` are as ``split_short`` leaves them."""
    word = words[index]
    index += 1
    if not word.startswith("-") or word == "-":
        return ReadOption("stray", word), index
    spelled, equals, attached = word.partition("=")
    name = long_name(spelled)
    if not _knows(spelled):
        return ReadOption("unknown", name, spelled=spelled), index
    takes_value = name in docker_values()
    value: str | None = attached if equals else None
    if takes_value and not equals:
        if not _value_follows(words, index):
            verdict: Verdict = "managed" if name in managed_options() else "needs_value"
            return ReadOption(verdict, name, spelled=spelled), index
        value, index = words[index], index + 1
    return _judge(name, value, spelled, takes_value), index


def _judge(name: str, value: str | None, spelled: str, takes_value: bool) -> ReadOption:
    """The verdict on a known option with its value."""
    if name in managed_options():
        return ReadOption("managed", name, value, spelled)
    if not takes_value and value is not None:
        if value.lower() not in ("true", "false"):
            return ReadOption("no_value", name, value, spelled)
        if value.lower() == "false":
            return ReadOption("off", name, None, spelled)
        value = None
    form = grammar().get(name)
    if form is not None and value is not None:
        if not form.value.fullmatch(value):
            return ReadOption("refused", name, value, spelled)
        if name in ("--cap-add", "--cap-drop"):
            value = value.upper().removeprefix("CAP_")
    for rule in unsafe_rules():
        if rule.matches(name, value):
            return ReadOption("unsafe", name, value, spelled, rule)
    warned = next((rule for rule in warned_rules() if rule.matches(name, value)), None)
    return ReadOption("allowed", name, value, spelled, warned)


def parse_docker_args(
    words: list[str] | tuple[str, ...],
) -> tuple[tuple[tuple[str, str | None], ...], list[str], list[str]]:
    """
    Read ``words`` as docker reads options: ``--opt=value`` or ``--opt value`` for an option
    with a value, ``--opt`` alone for one without, short ones clustered or not. Returns the
    options (docker's long name, value), the problems (each names the option and the fix) and
    the warnings of the options used.
    """
    words = split_short(words)
    options: list[tuple[str, str | None]] = []
    problems: list[str] = []
    warnings: list[str] = []
    index = 0
    while index < len(words):
        read, index = read_option(words, index)
        if read.verdict == "off":
            continue
        if read.verdict != "allowed":
            problems.append(docker_problem(read))
            continue
        options.append((read.name, read.value))
        said = read.rule.said(read.value) if read.rule else ""
        if said and said not in warnings:
            warnings.append(said)
    return tuple(options), problems, warnings


def _unknown(read: ReadOption) -> str:
    """Why an option docker does not know is refused, with the closest one it knows."""
    known = sorted(docker_flags() | docker_values())
    close = difflib.get_close_matches(read.name, known, n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    return (
        f"{read.shown}: docker run has no such option{hint}; docker would stop with "
        f'"unknown flag" before running anything (docker\'s list: {WHERE}, docker_run)'
    )


def docker_problem(read: ReadOption) -> str:
    """Why an option of engine.docker_args is refused, and the fix."""
    name, shown = read.name, read.shown
    shown_value = _shown(read.value or "")
    if read.verdict == "stray":
        return (
            f"{_shown(name)} is no option's value: docker would read it as the image and run "
            "it instead of the pinned one; write options as --option=value"
        )
    if read.verdict == "managed":
        return _refusal(read)
    if read.verdict == "unknown":
        return _unknown(read)
    if read.verdict == "no_value":
        return f"{shown} takes no value (docker reads only true or false): write {name}"
    form = grammar().get(name)
    example = form.example if form else f"{name}=VALUE"
    if read.verdict == "needs_value":
        return f"{shown} needs a value, such as {example}"
    if read.verdict == "unsafe" and read.rule is not None:
        value = f" {shown_value}" if read.value is not None else ""
        return (
            f"{shown}{value} is refused as unsafe: {read.rule.said(read.value)} ({WHERE}, "
            f"unsafe); fix: {read.rule.fix}"
        )
    pattern = form.value.pattern if form else ""
    return (
        f"{shown} {shown_value} is not a value docker reads for {name}, so docker would "
        f"refuse it at start (grammar {pattern}, {WHERE}); write it as {example}"
    )


def _refusal(read: ReadOption) -> str:
    """Why a managed option is refused, and what to use instead."""
    shown = read.shown
    if read.name in ("--env", "--env-file"):
        return f"{shown}: use engine.env (the deploy writes the container's environment file)"
    if read.name in ("--volume", "--mount", "--volumes-from"):
        return f"{shown}: use engine.mounts ({{host: /path, container: /path}}, read-only)"
    return f"{shown}: managed by {managed_options()[read.name]}; remove it"


def _shown(word: str, limit: int = 48) -> str:
    text = repr(word)
    return text if len(text) <= limit else text[: limit - 4] + "...'"


def docker_words(options: tuple[tuple[str, str | None], ...]) -> tuple[str, ...]:
    """The options as `docker run` words, one word each (``--opt=value``)."""
    return tuple(name if value is None else f"{name}={value}" for name, value in options)


@lru_cache(maxsize=1)
def _hardening() -> dict[str, tuple[str, ...]]:
    return {word: tuple(entry["unless"]) for word, entry in _table()["hardening"].items()}


def hardening_words(docker_args: tuple[str, ...] = ()) -> tuple[str, ...]:
    """What every GPU container the deploy runs gets to narrow what it can do
    (docker_options.yaml ``hardening``: --cap-drop=NET_RAW, no-new-privileges), less what
    ``docker_args`` (engine.docker_args as ``docker_words`` writes them) says otherwise:
    --privileged, or the same option of its own."""
    return tuple(
        word
        for word, unless in _hardening().items()
        if not any(arg in unless for arg in docker_args)
    )
