"""
vLLM config field annotations, read statically, and the argparse kwargs vLLM derives.

vLLM turns each config dataclass field into a flag in ``_compute_kwargs``
(``vllm/engine/arg_utils.py``): the annotation is flattened (unions, ``Optional``,
``Annotated``, aliases) into a set of type hints, and the kwargs follow from it:

- a dataclass                -> a JSON value
- exactly ``bool | str | None`` -> an optional string value (bare flag = true)
- ``bool``                   -> ``--flag`` / ``--no-flag`` (BooleanOptionalAction)
- ``Literal[...]``           -> choices (none when plain ``str`` is also allowed)
- ``list``/``tuple``/``set`` -> several values of the element's type
- ``int``, ``float``         -> that type (some ints also take 4k / 1M style)
- ``dict``                   -> a JSON value
- anything else              -> a string; an ``Enum`` (attention backends) adds its
                                member names as choices, as vLLM's validators accept them
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any

from tools.catalogue.argparse_ast import Kwargs
from tools.catalogue.pysource import Binding, Unknown, WheelSource, call_name, literal_args

DATACLASS_DECORATORS = {"config", "dataclass"}
ENUM_BASES = {"Enum", "IntEnum", "StrEnum"}
BUILTIN_HINTS = {"int": "int", "float": "float", "str": "str", "bool": "bool", "dict": "dict"}
COLLECTIONS = {
    "list": "list",
    "List": "list",
    "tuple": "tuple",
    "Tuple": "tuple",
    "set": "set",
    "Set": "set",
    "Sequence": "list",
    "frozenset": "set",
}
MAPPINGS = {"dict", "Dict", "Mapping", "MutableMapping", "TypedDict"}
MAX_DEPTH = 25


@dataclass(frozen=True)
class Hint:
    """One member of a field's (flattened) type annotation."""

    kind: str  # none|bool|int|float|str|dict|literal|collection|dataclass|enum|other
    values: tuple[Any, ...] = ()  # literal values / enum member names
    element: tuple[Hint, ...] = ()  # element hints of a collection


def class_mro(source: WheelSource, cls: Binding, depth: int = 0) -> list[Binding]:
    """A class and its bases found in the wheel, most derived first."""
    order = [cls]
    if depth > MAX_DEPTH:
        return order
    for base in cls.node.bases:  # type: ignore[attr-defined]  # a class binding: a ClassDef
        found = source.find_class(cls.module, base)
        if found is not None and found != cls:
            order += [b for b in class_mro(source, found, depth + 1) if b not in order]
    return order


class TypeReader:
    """Flattens field annotations of one wheel into ``Hint``s."""

    def __init__(self, source: WheelSource):
        self.source = source

    def hints(self, module: str, annotation: ast.expr, depth: int = 0) -> list[Hint]:
        """An annotation flattened like vLLM's get_type_hints (unions, Annotated, aliases)."""
        if depth > MAX_DEPTH:
            return [Hint("other")]
        if isinstance(annotation, ast.Constant):
            if annotation.value is None:
                return [Hint("none")]
            if isinstance(annotation.value, str):  # a forward reference
                try:
                    parsed = ast.parse(annotation.value, mode="eval").body
                except SyntaxError:
                    return [Hint("other")]
                return self.hints(module, parsed, depth + 1)
        if isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr):
            return self.hints(module, annotation.left, depth + 1) + self.hints(
                module, annotation.right, depth + 1
            )
        if isinstance(annotation, ast.Subscript):
            return self._subscript(module, annotation, depth)
        if isinstance(annotation, (ast.Name, ast.Attribute)):
            return self._name(module, annotation, depth)
        return [Hint("other")]

    def _subscript(self, module: str, node: ast.Subscript, depth: int) -> list[Hint]:
        origin = call_name(node.value)
        args = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if origin == "Literal":
            try:
                return [Hint("literal", tuple(literal_args(self.source, module, node)))]
            except Unknown:
                return [Hint("str")]
        if origin == "Annotated":
            return self.hints(module, args[0], depth + 1)
        if origin in ("Optional", "Union"):
            flat = [hint for arg in args for hint in self.hints(module, arg, depth + 1)]
            return flat + ([Hint("none")] if origin == "Optional" else [])
        if origin in COLLECTIONS:
            element = [a for a in args if not (isinstance(a, ast.Constant) and a.value is ...)]
            inner = tuple(self.hints(module, element[0], depth + 1)) if element else ()
            return [Hint("collection", element=inner)]
        if origin in MAPPINGS:
            return [Hint("dict")]
        return [Hint("other")]

    def _name(self, module: str, node: ast.expr, depth: int) -> list[Hint]:
        name = call_name(node)
        if isinstance(node, ast.Name) and name in BUILTIN_HINTS:
            return [Hint(BUILTIN_HINTS[name])]
        if name == "None":
            return [Hint("none")]
        if name in MAPPINGS:
            return [Hint("dict")]
        if name in COLLECTIONS:
            return [Hint("collection")]
        found = self.source.lookup_dotted(module, node)
        if found is None:
            return [Hint("other")]
        if isinstance(found.node, ast.ClassDef):
            return [self._class(found)]
        if isinstance(found.node, ast.Name) and found.node.id == "__module__":
            return [Hint("other")]
        if isinstance(found.node, ast.expr):  # a type alias
            value = found.node
            if isinstance(value, ast.Call) and call_name(value.func) in (
                "TypeAliasType",
                "NewType",
            ):
                value = value.args[-1] if value.args else value
            return self.hints(found.module, value, depth + 1)
        return [Hint("other")]

    def _class(self, cls: Binding) -> Hint:
        for binding in class_mro(self.source, cls):
            node: ast.ClassDef = binding.node  # type: ignore[assignment]  # MRO: ClassDefs
            bases = {call_name(base) for base in node.bases}
            if "IntEnum" in bases:
                # vLLM types an enum field `str` for argparse and lets its pydantic config
                # validate it; pydantic takes an IntEnum by value (`--optimization-level 3`,
                # what FlexibleArgumentParser turns `-O3` into), not by name.
                values = _int_enum_values(cls.node)  # type: ignore[arg-type]  # a ClassDef
                if values:
                    return Hint("literal", tuple(values))
            if bases & ENUM_BASES:
                return Hint("enum", tuple(_enum_members(cls.node)))  # type: ignore[arg-type]  # a ClassDef
            if bases & MAPPINGS:
                return Hint("dict")
            decorators = {
                call_name(d.func if isinstance(d, ast.Call) else d) for d in node.decorator_list
            }
            if decorators & DATACLASS_DECORATORS:
                return Hint("dataclass")
        return Hint("other")


def hint_kwargs(name: str, hints: list[Hint], human_readable: set[str]) -> Kwargs:
    """What vLLM's ``_compute_kwargs`` derives for field ``name`` from its hints."""
    kinds = {hint.kind for hint in hints}
    literals = [hint for hint in hints if hint.kind == "literal"]
    collections = [hint for hint in hints if hint.kind == "collection"]
    enums = [hint for hint in hints if hint.kind == "enum"]
    if "dataclass" in kinds:
        return {"type": "json"}
    if kinds == {"bool", "str", "none"}:
        return {"type": "str", "nargs": "?"}
    if "bool" in kinds:
        return {"action": "BooleanOptionalAction"}
    if literals:
        values = [value for hint in literals for value in hint.values]
        return {"type": _value_type(values), "choices": None if "str" in kinds else values}
    if collections:
        element = list(collections[0].element)
        if not element or len({hint.kind for hint in element} - {"none"}) > 1:
            inner: Kwargs = {"type": "str"}  # list[int | str] -> strings
        else:
            inner = hint_kwargs(name, element, human_readable)
        inner.pop("action", None)
        return {**inner, "nargs": "+"}
    if "int" in kinds:
        return {"type": "int", "human_readable": name in human_readable}
    if "float" in kinds:
        return {"type": "float"}
    if "dict" in kinds:
        return {"type": "json"}
    if enums:
        return {"type": "str", "choices": list(enums[0].values), "ignore_case": True}
    return {"type": "str"}


def _enum_members(cls: ast.ClassDef) -> list[str]:
    members = []
    for statement in cls.body:
        if isinstance(statement, ast.Assign):
            for target in statement.targets:
                if isinstance(target, ast.Name) and not target.id.startswith("_"):
                    members.append(target.id)
    return members


def _int_enum_values(cls: ast.ClassDef) -> list[int]:
    """The member values of an IntEnum whose members are integer literals, else []."""
    values = []
    for statement in cls.body:
        if isinstance(statement, ast.Assign) and not all(
            isinstance(t, ast.Name) and t.id.startswith("_") for t in statement.targets
        ):
            value = statement.value
            if not (isinstance(value, ast.Constant) and type(value.value) is int):
                return []
            values.append(value.value)
    return values


def _value_type(values: list[Any]) -> str:
    if values and all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return "int"
    if values and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        return "float"
    return "str"
