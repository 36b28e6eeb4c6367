"""
One way to say "refused, nothing was changed": every problem an inventory has, named by
file, host and key with what would be valid, raised before any host is contacted.
"""

from __future__ import annotations

import difflib
import re
from typing import Any

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
        lines = [f"Invalid inventory {path} ({len(problems)} problem(s)); no host was contacted:"]
        lines += [f"  - {problem}" for problem in problems]
        super().__init__("\n".join(lines))


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


def source_of(key: str, own: dict[str, Any], defaults: dict[str, Any]) -> str:
    return " (set under defaults:)" if key in defaults and key not in own else ""
