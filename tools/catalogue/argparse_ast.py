"""
``parser.add_argument(...)`` calls read from source: keyword arguments to a ``FlagSpec``.

Both engines declare their flags with argparse in the end. The extractors gather each
call's keyword arguments as plain data (``Kwargs``: type name, action name, choices,
default, nargs ...), whether they are written in the call or computed from a config field,
and ``to_spec`` turns that into what the catalogue records.
"""

from __future__ import annotations

import ast
from typing import Any

from sparkdeploy.knowledge.spec import (
    FlagSpec,
    clean_choices,
    json_safe,
    register,
    register_negatable,
)
from tools.catalogue.pysource import Unknown, WheelSource, call_name

Kwargs = dict[str, Any]
UNKNOWN = object()  # a default that is not a literal

# argparse ``type=`` callables by name -> (catalogue type, human-readable ints)
TYPE_NAMES: dict[str, tuple[str, bool]] = {
    "str": ("str", False),
    "nullable_str": ("str", False),
    "int": ("int", False),
    "float": ("float", False),
    "loads": ("json", False),  # json.loads
    "json_list_type": ("json", False),
    "union_dict_and_str": ("json", False),
    "parse_cuda_graph_config_arg": ("json", False),  # SGLang 0.5.14+: json.loads of a dict
    "human_readable_int": ("int", True),
    "human_readable_int_or_auto": ("int", True),
}
VALUELESS_ACTIONS = ("store_true", "store_false", "store_const", "count")
# SGLang's own actions (sglang/srt/arg_groups/argparse_actions.py, earlier server_args.py)
# whose ``__init__`` defaults to ``nargs=0``: no value unless the call passes another nargs
# (0.5.23 ``--monokernel-backend``: DeprecatedStoreConstAction with ``nargs=None``).
NARGS_ZERO_ACTIONS = ("DeprecatedAction", "DeprecatedStoreTrueAction", "DeprecatedStoreConstAction")
# Every SGLang action named Deprecated* warns that the flag is deprecated; ``new_flag=``
# names the replacement (DeprecatedAliasStoreAction keeps the value for the new flag).
DEPRECATED_ACTION_PREFIX = "Deprecated"


def type_of(expr: ast.expr) -> tuple[str, bool]:
    """Catalogue type of an argparse ``type=`` expression (unknown callables: str)."""
    if isinstance(expr, ast.Call) and call_name(expr.func) in ("optional_type", "parse_type"):
        return type_of(expr.args[0]) if expr.args else ("str", False)
    return TYPE_NAMES.get(call_name(expr), ("str", False))


def keywords(
    source: WheelSource, module: str, call: ast.Call, local: dict[str, ast.expr] | None = None
) -> Kwargs:
    """The keyword arguments written in an add_argument call, as data."""
    found: Kwargs = {}
    for item in call.keywords:
        if item.arg is None:
            continue  # **kwargs: the caller resolves those
        found.update(keyword_value(source, module, item.arg, item.value, local))
    return found


def keyword_value(
    source: WheelSource,
    module: str,
    name: str,
    value: ast.expr,
    local: dict[str, ast.expr] | None = None,
) -> Kwargs:
    """One argparse keyword (``type=int``, ``choices=X`` ...) as data."""
    if name == "type":
        kind, human = type_of(value)
        return {"type": kind, "human_readable": human}
    if name == "action":
        if isinstance(value, ast.Constant):
            return {"action": value.value}
        return {"action": call_name(value)}
    if name in ("choices", "default", "nargs", "new_flag", "deprecated"):
        if isinstance(value, ast.Attribute) and value.attr == "SUPPRESS":
            return {name: None}
        try:
            return {name: source.literal(module, value, local)}
        except Unknown:
            return {name: UNKNOWN if name == "default" else None}
    return {}


def to_spec(kwargs: Kwargs) -> tuple[FlagSpec, bool]:
    """The catalogue entry for argparse kwargs, and whether it has ``--no-`` forms."""
    action = kwargs.get("action")
    nargs = kwargs.get("nargs")
    default = kwargs.get("default")
    default = None if default is UNKNOWN else json_safe(default)
    deprecated = bool(kwargs.get("deprecated")) or str(action).startswith(DEPRECATED_ACTION_PREFIX)
    common: dict[str, Any] = {
        "deprecated": deprecated,
        "replaced_by": kwargs.get("new_flag") if isinstance(kwargs.get("new_flag"), str) else None,
    }
    if action == "BooleanOptionalAction":
        return FlagSpec(type="bool", default=default, **common), True
    nargs_zero = action in NARGS_ZERO_ACTIONS and kwargs.get("nargs", 0) == 0
    if action in VALUELESS_ACTIONS or nargs == 0 or nargs_zero:
        if action == "store_false":
            default = True
        return FlagSpec(
            type="bool", default=default if isinstance(default, bool) else False, **common
        ), False
    if isinstance(nargs, int):
        nargs = "+"
    return (
        FlagSpec(
            type=kwargs.get("type") or "str",
            choices=clean_choices(kwargs.get("choices")),
            default=default,
            nargs=nargs if nargs in ("+", "*", "?") else None,
            repeatable=action == "append",
            human_readable=bool(kwargs.get("human_readable")),
            ignore_case=bool(kwargs.get("ignore_case")),
            **common,
        ),
        False,
    )


def option_strings(call: ast.Call) -> list[str] | None:
    """The flag names of an add_argument call; None for positionals or computed names."""
    names = []
    for arg in call.args:
        if not (isinstance(arg, ast.Constant) and isinstance(arg.value, str)):
            return None
        names.append(arg.value)
    if not names or not all(name.startswith("-") for name in names):
        return None
    return names


def record(flags: dict[str, FlagSpec], names: list[str], kwargs: Kwargs) -> None:
    """Add one argparse argument (all its spellings) to ``flags``."""
    spec, negatable = to_spec(kwargs)
    (register_negatable if negatable else register)(flags, names, spec)


def add_argument_calls(tree: ast.AST) -> list[ast.Call]:
    """Every ``<x>.add_argument(...)`` call under ``tree``, in source order."""
    calls = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "add_argument"
    ]
    return sorted(calls, key=lambda node: (node.lineno, node.col_offset))


def local_assignments(function: ast.AST) -> dict[str, ast.expr]:
    """Simple ``name = expr`` assignments inside a function (the last one wins)."""
    local: dict[str, ast.expr] = {}
    for node in ast.walk(function):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name):
                local[target.id] = node.value
    return local
