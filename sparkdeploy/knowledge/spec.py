"""
One server flag as a catalogue records it, and the helpers both extractors share.

A flag's ``type`` is one of ``TYPES``: ``bool`` flags take no value (``--enforce-eager``);
the others take one value, or several when ``nargs`` is ``+``/``*``. ``choices`` is the
list of valid values when the engine declares one, else None. ``default`` is the engine's
default when it is a literal in the source, else None.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

TYPES = ("bool", "int", "float", "str", "json")


@dataclass(frozen=True)
class FlagSpec:
    """What the engine accepts for one flag."""

    type: str
    choices: list[Any] | None = None
    default: Any = None
    nargs: str | None = None  # "+", "*" (a list of values) or "?" (value optional)
    repeatable: bool = False  # argparse action="append": the flag may be given several times
    human_readable: bool = False  # ints also accept 4k / 1M / 2G style strings
    ignore_case: bool = False  # choices are matched case-insensitively (vLLM enum names)
    deprecated: bool = False
    replaced_by: str | None = None  # the engine's own replacement for a deprecated flag
    alias_of: str | None = None  # another spelling of this canonical flag
    negates: str | None = None  # --no-X of a BooleanOptionalAction flag --X

    def __post_init__(self) -> None:
        if self.type not in TYPES:
            raise ValueError(f"flag type {self.type!r} is not one of {TYPES}")

    def to_json(self) -> dict[str, Any]:
        """The JSON form: type, choices and default always; the other keys when set."""
        data = asdict(self)
        base = {key: data.pop(key) for key in ("type", "choices", "default")}
        return base | {key: value for key, value in data.items() if value not in (None, False)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> FlagSpec:
        return cls(**data)


def json_safe(value: Any) -> Any:
    """A default as JSON can hold it (tuples become lists; anything odd becomes None)."""
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, (list, tuple, set)):
        items = [json_safe(item) for item in value]
        return items if all(item is not None for item in items) or not items else None
    if isinstance(value, dict) and all(isinstance(key, str) for key in value):
        return {key: json_safe(item) for key, item in value.items()}
    return None


def clean_choices(choices: Any) -> list[Any] | None:
    """Choices as a list of scalars without None (argparse's "unset"), or None if unknown."""
    if not isinstance(choices, (list, tuple)):
        return None
    values = [choice for choice in choices if choice is not None]
    if not values or not all(isinstance(choice, (str, int, float)) for choice in values):
        return None
    unique: list[Any] = []
    for choice in values:
        if choice not in unique:
            unique.append(choice)
    return unique


def register(flags: dict[str, FlagSpec], names: list[str], spec: FlagSpec) -> None:
    """
    Record one argparse argument under every option string it has.

    The first long option is canonical; the others are ``alias_of`` it. A
    BooleanOptionalAction flag (``negatable``) also gets ``--no-<name>`` spellings.
    """
    long_names = [name for name in names if name.startswith("--")]
    canonical = (long_names or names)[0]
    flags[canonical] = spec
    for name in names:
        if name != canonical:
            flags[name] = replace(spec, alias_of=canonical)


def register_negatable(flags: dict[str, FlagSpec], names: list[str], spec: FlagSpec) -> None:
    """A bool flag with ``--no-`` forms (argparse.BooleanOptionalAction)."""
    register(flags, names, spec)
    canonical = [name for name in names if name.startswith("--")][0]
    for name in names:
        if name.startswith("--"):
            flags["--no-" + name[2:]] = replace(spec, negates=canonical, default=None)
