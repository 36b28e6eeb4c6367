"""
The `docker run` options engine.docker_args may hold (docker_options.yaml, with sources):
each allowed option with whether it takes a value and what the value may be, and the options
the deploy manages itself, refused naming the setting that manages each.

    options, problems, warnings = parse_docker_args(["--shm-size=16g", "--ulimit", "memlock=-1"])
    # options == (("--shm-size", "16g"), ("--ulimit", "memlock=-1"))
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from sparkdeploy.knowledge import load_yaml

OPTIONS_FILE = Path(__file__).resolve().parent / "docker_options.yaml"


@dataclass(frozen=True)
class AllowedOption:
    name: str
    value: re.Pattern[str] | None  # None: the option takes no value
    example: str
    warning: str
    source: str


@lru_cache(maxsize=1)
def _table() -> dict[str, Any]:
    return load_yaml(OPTIONS_FILE)


@lru_cache(maxsize=1)
def allowed_options() -> dict[str, AllowedOption]:
    """The options engine.docker_args may hold, by name."""
    return {
        name: AllowedOption(
            name=name,
            value=re.compile(entry["value"]) if entry["value"] is not None else None,
            example=entry["example"],
            warning=" ".join(str(entry.get("warning", "")).split()),
            source=" ".join(str(entry["source"]).split()),
        )
        for name, entry in _table()["allowed"].items()
    }


@lru_cache(maxsize=1)
def managed_options() -> dict[str, tuple[str, bool]]:
    """Options the deploy manages, every spelling (aliases too) -> (the setting managing it,
    whether the option takes a value)."""
    found: dict[str, tuple[str, bool]] = {}
    for name, entry in _table()["managed"].items():
        for spelling in (name, *(entry.get("aliases") or [])):
            found[spelling] = (" ".join(str(entry["setting"]).split()), bool(entry.get("value")))
    return found


def _refusal(name: str) -> str:
    """Why a managed option is refused, and what to use instead."""
    setting = managed_options()[name][0]
    if name in ("-e", "--env", "--env-file"):
        return f"{name}: use engine.env (the deploy writes the container's environment file)"
    if name in ("-v", "--volume", "--mount", "--volumes-from"):
        return f"{name}: use engine.mounts ({{host: /path, container: /path}}, read-only)"
    return f"{name}: managed by {setting}; remove it"


def _shown(word: str, limit: int = 48) -> str:
    text = repr(word)
    return text if len(text) <= limit else text[: limit - 4] + "...'"


def _allowed_list() -> str:
    return ", ".join(allowed_options())


# What one word of engine.docker_args (with the value it takes) is: an allowed option, or
# why not: a word that is no option ("stray"), an option the deploy manages, one not
# allowed, a value given to an option without one, none to one with one, or one refused.
Verdict = Literal["allowed", "stray", "managed", "unknown", "no_value", "needs_value", "refused"]


@dataclass(frozen=True)
class ReadOption:
    """One option of engine.docker_args as read: its verdict, name and value."""

    verdict: Verdict
    name: str
    value: str | None = None
    option: AllowedOption | None = None


def parse_docker_args(
    words: list[str] | tuple[str, ...],
) -> tuple[tuple[tuple[str, str | None], ...], list[str], list[str]]:
    """
    Read ``words`` as docker options: ``--opt=value`` or ``--opt value`` for an option with
    a value, ``--opt`` alone for one without. Returns the options (name, value), the problems
    (each names the option and the fix) and the warnings of the options used.
    """
    options: list[tuple[str, str | None]] = []
    problems: list[str] = []
    warnings: list[str] = []
    index = 0
    while index < len(words):
        read, index = read_option(words, index)
        if read.verdict != "allowed" or read.option is None:
            problems.append(docker_problem(read))
            continue
        options.append((read.name, read.value))
        if read.option.warning and read.option.warning not in warnings:
            warnings.append(read.option.warning)
    return tuple(options), problems, warnings


def read_option(words: list[str] | tuple[str, ...], index: int) -> tuple[ReadOption, int]:
    """The option at ``words[index]`` (with the value it takes), and the index after it."""
    word = words[index]
    index += 1
    if not word.startswith("-"):
        return ReadOption("stray", word), index
    name, equals, attached = word.partition("=")
    value_follows = index < len(words) and not words[index].startswith("-")
    managed = managed_options()
    if name in managed:
        if managed[name][1] and not equals and value_follows:
            index += 1  # its value goes with it
        return ReadOption("managed", name), index
    option = allowed_options().get(name)
    if option is None:
        return ReadOption("unknown", name), index
    if option.value is None:
        return ReadOption("no_value" if equals else "allowed", name, None, option), index
    if equals:
        value = attached
    elif value_follows:
        value, index = words[index], index + 1
    else:
        return ReadOption("needs_value", name, None, option), index
    verdict: Verdict = "allowed" if option.value.fullmatch(value) else "refused"
    return ReadOption(verdict, name, value, option), index


def docker_problem(read: ReadOption) -> str:
    """Why an option of engine.docker_args is refused, and the fix."""
    name, option = read.name, read.option
    if read.verdict == "stray":
        return (
            f"{_shown(name)} is no option's value: docker would read it as the image and run "
            "it instead of the pinned one; write options as --option=value"
        )
    if read.verdict == "managed":
        return _refusal(name)
    if option is None:
        return (
            f"{name}: not an allowed docker option (allowed: {_allowed_list()}); "
            "remove it, or see sparkdeploy/knowledge/docker_options.yaml"
        )
    if read.verdict == "no_value":
        return f"{name} takes no value: write {option.example}"
    if read.verdict == "needs_value" or option.value is None:
        return f"{name} needs a value, such as {option.example}"
    return (
        f"{name} {_shown(read.value or '')} is not a value the deploy allows for it "
        f"(pattern {option.value.pattern}); such as {option.example}"
    )


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
