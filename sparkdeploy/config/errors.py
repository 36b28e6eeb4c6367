"""
One way to say "refused, nothing was changed": every problem an inventory has, named by
file, host and key with what would be valid, raised before any host is contacted.
"""

from __future__ import annotations

import difflib
import re
import shutil
import textwrap
from dataclasses import dataclass
from typing import TextIO

from pydantic import BaseModel
from pydantic_core import ErrorDetails

from sparkdeploy.config.engine import EngineSettings
from sparkdeploy.config.spark import QsfpInterface, SparkSettings
from sparkdeploy.config.values import shown

KNOWN_KEYS = tuple(SparkSettings.model_fields)
PLAIN_KEY = re.compile(r"[A-Za-z0-9_.:@+-]{1,64}")


class InventoryError(Exception):
    """Every problem found in an inventory file, listed at once."""

    def __init__(self, path: str, problems: list[str]):
        self.path = path
        self.problems = problems
        self.header = (
            f"Invalid inventory {path} ({len(problems)} problem(s)); no host was contacted:"
        )
        super().__init__(self.wrapped(None))

    def wrapped(self, width: int | None) -> str:
        """The message as printed: one item per problem, each wrapped at ``width`` columns
        (None: one line each, as the data keeps them)."""
        lines = [self.header]
        for problem in self.problems:
            lines += wrap_item(problem, width)
        return "\n".join(lines)


def wrap_item(text: str, width: int | None, bullet: str = "  - ") -> list[str]:
    """``text`` as a list item: ``bullet`` then the text, wrapped at ``width`` columns
    under itself (None: one line). Words are never broken: a path or a flag stays whole."""
    if not width:
        return [f"{bullet}{text}"]
    indent = " " * len(bullet)
    return textwrap.wrap(
        text,
        width=max(width, len(bullet) + 20),
        initial_indent=bullet,
        subsequent_indent=indent,
        break_long_words=False,
        break_on_hyphens=False,
    )


def terminal_width(stream: TextIO) -> int | None:
    """The columns to wrap messages printed on ``stream`` at: the terminal's, or None when
    it is not a terminal (a log or a pipe keeps one line per message, for grep)."""
    try:
        return shutil.get_terminal_size().columns - 1 if stream.isatty() else None
    except (AttributeError, ValueError):  # a closed or fake stream
        return None


SECRET_KEYS = ("hf_token", "token", "huggingface_token")
# Keys whose value is never shown in a message, valid or not: a secret is pasted there by
# mistake in any shape (sk-abc..., a short hf_...), not only the shapes SECRET knows.
UNSHOWN_KEYS = ("hf_token_env", "api_key_env")


def valid_keys_hint(key: str, known: tuple[str, ...] = KNOWN_KEYS) -> str:
    if key in SECRET_KEYS:
        return (
            "secrets never go in the inventory; export the token on the laptop "
            "(HF_TOKEN, or the variable named by hf_token_env)"
        )
    close = difflib.get_close_matches(key, known, n=1)
    hint = f"did you mean '{close[0]}'? " if close else ""
    return f"unknown key; {hint}valid keys: {', '.join(known)}"


def name_of(key: object) -> str:
    """A key of the file as a message names it: a plain name in quotes, anything else escaped
    and shortened (a key is input too: it may hold a newline or a pasted token)."""
    if isinstance(key, str) and PLAIN_KEY.fullmatch(key):
        return f"'{key}'"
    return shown(key)


def location(loc: tuple) -> str:
    """("qsfp", 0, "address") -> "key 'qsfp', rail 1, 'address'" (rails count from 1)."""
    parts = [f"key {name_of(loc[0])}" if loc else "key '?'"]
    counted = "rail" if loc and loc[0] == "qsfp" else "item"
    for part in loc[1:]:
        parts.append(f"{counted} {part + 1}" if isinstance(part, int) else name_of(part))
    return ", ".join(parts)


def describe(error: ErrorDetails) -> str:
    """One pydantic error as a sentence that says what would be valid."""
    loc = error["loc"]
    nested_models: dict[str | int, tuple[type[BaseModel], int]] = {
        "qsfp": (QsfpInterface, 3),
        "engine": (EngineSettings, 2),
    }
    model, depth = nested_models.get(loc[0] if loc else "", (SparkSettings, 1))
    nested = len(loc) >= depth > 1
    model = model if nested else SparkSettings
    key = str(loc[-1] if nested else loc[0]) if loc else ""
    kind = error["type"]
    if kind == "extra_forbidden":
        return valid_keys_hint(key, tuple(model.model_fields))
    if kind == "missing":
        return "required: " + (model.model_fields[key].description or "").split(".")[0]
    got = error.get("input")
    message = error["msg"]
    if message.startswith("Value error, "):
        message = message[len("Value error, ") :]
    if isinstance(got, (list, dict)) or key in UNSHOWN_KEYS:  # the message names what is wrong
        return message
    return f"{message} (got {shown(got)})"


@dataclass(frozen=True)
class KeyProblem:
    """A problem of one Spark's key: where (pydantic's location), whether the Spark
    inherits the key from ``defaults:``, and what is wrong."""

    host: str
    loc: tuple[str | int, ...]
    inherited: bool
    text: str


def dotted(loc: tuple[str | int, ...]) -> str:
    """("engine", "args") -> "engine.args" (items counted from 1)."""
    return ".".join(part if isinstance(part, str) else str(part + 1) for part in loc)


def key_messages(path: str, found: list[KeyProblem]) -> list[str]:
    """One message per problem, in the order found: a Spark's own key names the host; a
    key inherited from ``defaults:`` is said once however many Sparks inherit it, naming
    ``defaults.KEY`` and those Sparks (one Spark: its key, "set under defaults:"; the same
    key with another problem on another Spark, such as a flag judged against another
    image, is a message of its own)."""
    shared: dict[tuple[tuple[str | int, ...], str], list[str]] = {}
    order: list[KeyProblem | tuple[tuple[str | int, ...], str]] = []
    for problem in found:
        if not problem.inherited:
            order.append(problem)
            continue
        group = (problem.loc, problem.text)
        if group not in shared:
            order.append(group)
        shared.setdefault(group, []).append(problem.host)
    messages = []
    for item in order:
        if isinstance(item, KeyProblem):
            where = f"host {name_of(item.host)}, {location(item.loc)}"
            messages.append(f"{path}: {where}: {item.text}")
            continue
        loc, text = item
        hosts = shared[item]
        if len(hosts) == 1:  # one Spark inherits it: named as its own key is, and where set
            where = f"host {name_of(hosts[0])}, {location(loc)} (set under defaults:)"
        else:
            where = f"defaults.{dotted(loc)} (inherited by hosts {', '.join(map(name_of, hosts))})"
        messages.append(f"{path}: {where}: {text}")
    return messages
