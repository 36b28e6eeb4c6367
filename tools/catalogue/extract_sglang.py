"""
SGLang's server flags, parser and environment variables, read from the wheel's source.

``sglang serve`` / ``python -m sglang.launch_server`` parse their flags with the parser
``prepare_server_args`` builds (``sglang/srt/server_args.py``) and
``ServerArgs.add_cli_args``. SGLang has declared those flags in three ways; the extractor
picks the one the wheel contains (``layout``) and refuses a wheel none of them reads:

``add_argument`` (0.5.4 ... 0.5.13.post1)
    ``ServerArgs.add_cli_args`` is a list of ``parser.add_argument("--flag", type=...,
    choices=..., default=ServerArgs.field, ...)`` calls.
``annotated-fields`` (0.5.14 ... 0.5.19)
    ``ServerArgs`` is a dataclass whose fields carry their flag in the annotation,
    ``name: A[T, "help"] = default`` or ``A[T, Arg(aliases=..., choices=..., ...)]``, and
    ``add_cli_args`` calls ``add_cli_args_from_dataclass(parser, ServerArgs)``
    (``sglang/srt/arg_groups/arg_utils.py``), then registers the few flags that cannot be
    fields (dynamic choices, deprecated spellings, ``--config``) with ``add_argument``.
``arg-groups-fields`` (0.5.20 ...)
    The same annotated fields, moved to namespace classes in
    ``sglang/srt/arg_groups/fields/*.py`` (choices in ``arg_groups/choices.py``);
    ``server_args.py`` lists the classes in ``_INPUT_NAMESPACES`` and builds ``ServerArgs``
    from their fields (``collect_input_fields``), in that order.

For the annotated layouts the extractor follows ``add_cli_args_from_dataclass`` branch by
branch: ``Arg(no_cli=True)`` fields have no flag; the flag is ``Arg.cli_name`` or
``--field-name`` plus ``Arg.aliases``; ``Arg.action`` (with ``action_kwargs``) wins; else an
``Optional[...]`` is unwrapped, a ``Literal[...]`` gives choices (``Arg.choices`` first), a
``list[X]`` without ``type_parser`` takes several values, ``bool`` is ``store_true``, and
anything else is one value of ``type_parser`` or the annotated type. Choices and defaults
are names bound to literals, which ``pysource`` resolves without importing SGLang.

A wheel whose ``add_cli_args`` is missing, declares no flags, or lacks ``--model-path`` or
``--port`` afterwards raises ``ExtractionError`` naming the file: never an empty or partial
catalogue.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any

from sparkdeploy.knowledge.spec import FlagSpec
from tools.catalogue.argparse_ast import (
    UNKNOWN,
    Kwargs,
    add_argument_calls,
    keyword_value,
    keywords,
    local_assignments,
    option_strings,
    record,
    type_of,
)
from tools.catalogue.environment import sglang_environment
from tools.catalogue.pysource import (
    Binding,
    Unknown,
    WheelSource,
    call_name,
    field_default,
    literal_args,
)
from tools.catalogue.vllm_types import class_mro

SERVER_ARGS = "sglang.srt.server_args"
SERVER_ARGS_FILE = "sglang/srt/server_args.py"
ARG_UTILS = "sglang.srt.arg_groups.arg_utils"
ARG_UTILS_FILE = "sglang/srt/arg_groups/arg_utils.py"
FIELDS_DIR = "sglang/srt/arg_groups/fields/"
NAMESPACES = "_INPUT_NAMESPACES"
FROM_DATACLASS = "add_cli_args_from_dataclass"
REQUIRED_FLAGS = ("--model-path", "--port")  # in every release; their absence means a miss

LAYOUT_ADD_ARGUMENT = "add_argument"
LAYOUT_ANNOTATED = "annotated-fields"
LAYOUT_NAMESPACES = "arg-groups-fields"

_MISSING = object()  # a field without a default (argparse: required)


class ExtractionError(Exception):
    """The wheel's layout is not one this extractor understands."""


@dataclass(frozen=True)
class Field:
    """One annotated field: where it is declared, its type and its ``Arg`` metadata."""

    name: str
    module: str
    annotation: ast.expr  # the T of A[T, ...]
    meta: dict[str, ast.expr]  # Arg(...) keywords; {} for a bare help string
    default: Any  # a literal, UNKNOWN, or _MISSING


# -- entry points --------------------------------------------------------------------------


def extract(source: WheelSource) -> tuple[dict[str, FlagSpec], list[str]]:
    """Every flag ``sglang serve`` accepts in this wheel, and what was not resolved."""
    flags, unresolved, _ = extract_with_layout(source)
    return flags, unresolved


def extract_with_layout(source: WheelSource) -> tuple[dict[str, FlagSpec], list[str], str]:
    """The flags, what was not resolved, and the layout they were read from."""
    return _Reader(source).read()


def parser_facts(source: WheelSource) -> dict[str, Any]:
    """
    How the release parses its command line: the ``argparse.ArgumentParser(...)`` call in
    ``prepare_server_args`` (the last one: 0.5.4 builds a first parser only to read
    ``--config``). ``allow_abbrev`` is the call's keyword, else argparse's default (True);
    a plain ``argparse.ArgumentParser`` neither maps ``--foo_bar`` to ``--foo-bar`` nor
    reads ``--json-flag.key``. ``prog`` is None when the call does not set it (argparse
    then shows the script name).
    """
    function = source.lookup(SERVER_ARGS, "prepare_server_args")
    if function is None or not isinstance(function.node, ast.FunctionDef):
        raise ExtractionError(f"{SERVER_ARGS_FILE}: no prepare_server_args function")
    calls = [
        node
        for node in ast.walk(function.node)
        if isinstance(node, ast.Call) and call_name(node.func) == "ArgumentParser"
    ]
    if not calls:
        raise ExtractionError(f"{SERVER_ARGS_FILE}: prepare_server_args builds no ArgumentParser")
    call = max(calls, key=lambda node: (node.lineno, node.col_offset))
    if not (isinstance(call.func, ast.Attribute) and ast.unparse(call.func.value) == "argparse"):
        raise ExtractionError(
            f"{SERVER_ARGS_FILE}:{call.lineno}: prepare_server_args uses "
            f"{ast.unparse(call.func)}, not argparse.ArgumentParser; read its class first"
        )
    found: dict[str, Any] = {"prog": None, "allow_abbrev": True}
    for item in call.keywords:
        if item.arg in found:
            try:
                found[item.arg] = source.literal(SERVER_ARGS, item.value)
            except Unknown as error:
                raise ExtractionError(
                    f"{SERVER_ARGS_FILE}:{call.lineno}: {item.arg}= is not a literal"
                ) from error
    return {
        "prog": found["prog"],
        "allow_abbrev": bool(found["allow_abbrev"]),
        "underscores": False,
        "dotted_json": False,
        "source": f"{SERVER_ARGS_FILE} prepare_server_args (line {call.lineno})",
    }


def environment(source: WheelSource) -> list[str]:
    """Environment variables the release reads (see ``environment.sglang_environment``)."""
    return sglang_environment(source)


# -- flags -----------------------------------------------------------------------------------


class _Reader:
    def __init__(self, source: WheelSource):
        self.source = source
        self.unresolved: list[str] = []
        self.defaults: dict[str, Any] = {}  # field defaults, for _declared_default("x")

    def read(self) -> tuple[dict[str, FlagSpec], list[str], str]:
        server_args = self.source.class_def(SERVER_ARGS, "ServerArgs")
        method = _method(server_args.node, "add_cli_args") if server_args else None  # type: ignore[arg-type]  # class_def: a ClassDef
        if server_args is None or method is None:
            raise ExtractionError(
                f"{self.source.path.name}: no ServerArgs.add_cli_args in {SERVER_ARGS_FILE}"
            )
        flags: dict[str, FlagSpec] = {}
        calls = add_argument_calls(method)
        from_dataclass = any(
            isinstance(node, ast.Call) and call_name(node.func) == FROM_DATACLASS
            for node in ast.walk(method)
        )
        if from_dataclass:
            layout, fields = self._fields(server_args)
            self.defaults.update({field.name: field.default for field in fields})
            for field in fields:
                self._field_flag(flags, field)
        elif calls:
            layout = LAYOUT_ADD_ARGUMENT
        else:
            where = self.source.files(FIELDS_DIR)
            raise ExtractionError(
                f"{self.source.path.name}: ServerArgs.add_cli_args ({SERVER_ARGS_FILE}) "
                f"neither calls parser.add_argument nor {FROM_DATACLASS}"
                + (f"; {len(where)} files under {FIELDS_DIR}" if where else "")
                + ". Extend tools/catalogue/extract_sglang.py for this layout."
            )
        local = local_assignments(method)
        for call in calls:
            names = option_strings(call)
            if names is None:
                if call_name(call.func) == "add_argument" and call.args:
                    self.unresolved.append(
                        f"{SERVER_ARGS_FILE}:{call.lineno}: flag name is not a literal"
                    )
                continue
            kwargs = keywords(self.source, SERVER_ARGS, call, local)
            self._declared_default(call, kwargs)
            record(flags, names, kwargs)
        missing = [name for name in REQUIRED_FLAGS if name not in flags]
        if missing:
            raise ExtractionError(
                f"{self.source.path.name}: {', '.join(missing)} not found reading "
                f"{SERVER_ARGS_FILE} as the {layout!r} layout ({len(flags)} flags read); "
                "the catalogue would be partial"
            )
        return flags, self.unresolved, layout

    def _declared_default(self, call: ast.Call, kwargs: Kwargs) -> None:
        """``default=_declared_default("name")`` (0.5.20+): that field's default."""
        for item in call.keywords:
            value = item.value
            if (
                item.arg == "default"
                and isinstance(value, ast.Call)
                and call_name(value.func) == "_declared_default"
                and value.args
                and isinstance(value.args[0], ast.Constant)
            ):
                found = self.defaults.get(str(value.args[0].value), UNKNOWN)
                kwargs["default"] = UNKNOWN if found is _MISSING else found

    # -- where the fields are ------------------------------------------------------------

    def _fields(self, server_args: Binding) -> tuple[str, list[Field]]:
        if self.source.lookup(ARG_UTILS, FROM_DATACLASS) is None:
            raise ExtractionError(
                f"{self.source.path.name}: add_cli_args calls {FROM_DATACLASS}, but "
                f"{ARG_UTILS_FILE} does not define it"
            )
        namespaces = self.source.lookup(SERVER_ARGS, NAMESPACES)
        if self.source.files(FIELDS_DIR) or namespaces is not None:
            if namespaces is None or not isinstance(namespaces.node, ast.List):
                raise ExtractionError(
                    f"{self.source.path.name}: {FIELDS_DIR} exists but {SERVER_ARGS_FILE} "
                    f"has no {NAMESPACES} list naming the classes ServerArgs is built from"
                )
            fields: list[Field] = []
            for element in namespaces.node.elts:
                cls = self.source.find_class(SERVER_ARGS, element)
                if cls is None:
                    raise ExtractionError(
                        f"{SERVER_ARGS_FILE}: {NAMESPACES} entry {ast.unparse(element)} "
                        "is not a class in the wheel"
                    )
                fields += self._class_fields(cls)
            fields += self._class_fields(server_args)  # ServerArgs' own annotations, last
            layout = LAYOUT_NAMESPACES
        else:
            fields = self._class_fields(server_args)
            layout = LAYOUT_ANNOTATED
        if not fields:
            raise ExtractionError(
                f"{self.source.path.name}: no A[T, ...] fields found for {FROM_DATACLASS} "
                f"({layout} layout, {SERVER_ARGS_FILE})"
            )
        return layout, fields

    def _class_fields(self, cls: Binding) -> list[Field]:
        """Annotated fields of a class and its bases in the wheel (base fields first)."""
        fields: dict[str, Field] = {}
        for binding in reversed(class_mro(self.source, cls)):
            for statement in binding.node.body:  # type: ignore[attr-defined]  # MRO: ClassDefs
                if not (
                    isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name)
                ):
                    continue
                field = self._field(binding.module, statement)
                if field is not None:
                    fields[field.name] = field
                elif statement.value is not None:  # a field without a flag: its default
                    try:
                        value = field_default(self.source, binding.module, statement.value)
                    except Unknown:
                        value = UNKNOWN
                    self.defaults.setdefault(statement.target.id, value)
        return list(fields.values())

    def _field(self, module: str, statement: ast.AnnAssign) -> Field | None:
        assert isinstance(statement.target, ast.Name)  # checked by the caller
        name = statement.target.id
        annotation = statement.annotation
        if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
            annotation = ast.parse(annotation.value, mode="eval").body
        if "ClassVar" in ast.unparse(annotation):
            return None
        if not (
            isinstance(annotation, ast.Subscript)
            and call_name(annotation.value) in ("A", "Annotated")
            and isinstance(annotation.slice, ast.Tuple)
        ):
            return None  # no Arg or help string: add_cli_args_from_dataclass skips it
        inner, *extras = annotation.slice.elts
        meta = self._meta(module, name, extras)
        if meta is None:
            return None
        try:
            default = (
                _MISSING
                if statement.value is None
                else field_default(self.source, module, statement.value)
            )
        except Unknown:
            default = UNKNOWN
        return Field(name, module, inner, meta, default)

    def _meta(self, module: str, name: str, extras: list[ast.expr]) -> dict[str, ast.expr] | None:
        """The first ``Arg(...)`` or help string of an annotation (``_unwrap_annotated``)."""
        for extra in extras:
            if isinstance(extra, ast.Call) and call_name(extra.func) == "Arg":
                return {item.arg: item.value for item in extra.keywords if item.arg}
            if isinstance(extra, ast.Call):
                continue  # NS(...), Derived(...): other metadata
            if isinstance(extra, (ast.Constant, ast.JoinedStr, ast.BinOp)):
                if not isinstance(extra, ast.Constant) or isinstance(extra.value, str):
                    return {}  # a help string
                continue
            try:
                value = self.source.literal(module, extra)
            except Unknown:
                self.unresolved.append(f"{module}.{name}: annotation {ast.unparse(extra)}")
                continue
            if isinstance(value, str):
                return {}
        return None

    # -- one field -> one argparse argument ----------------------------------------------

    def _literal(self, field: Field, key: str, fallback: Any = None) -> Any:
        expr = field.meta.get(key)
        if expr is None:
            return fallback
        try:
            return self.source.literal(field.module, expr)
        except Unknown:
            return fallback

    def _field_flag(self, flags: dict[str, FlagSpec], field: Field) -> None:
        if self._literal(field, "no_cli", False) is True:
            return
        cli_name = self._literal(field, "cli_name") or "--" + field.name.replace("_", "-")
        aliases = self._literal(field, "aliases") or []
        if "aliases" in field.meta and not isinstance(aliases, list):
            self.unresolved.append(f"{field.module}.{field.name}: aliases are not literal")
            aliases = []
        kwargs = self._field_kwargs(field)
        record(flags, [cli_name, *aliases], kwargs)

    def _field_kwargs(self, field: Field) -> Kwargs:
        kwargs: Kwargs = {}
        if field.default is not _MISSING:
            kwargs["default"] = field.default
        meta = field.meta
        if "action" in meta and not _is_none(meta["action"]):
            kwargs.update(keyword_value(self.source, field.module, "action", meta["action"]))
            extra = meta.get("action_kwargs")
            if isinstance(extra, ast.Dict):
                for key, value in zip(extra.keys, extra.values, strict=True):
                    if isinstance(key, ast.Constant) and isinstance(key.value, str):
                        kwargs.update(keyword_value(self.source, field.module, key.value, value))
            elif extra is not None and not _is_none(extra):
                self.unresolved.append(f"{field.module}.{field.name}: action_kwargs")
            return kwargs
        parser = meta.get("type_parser")
        parser = None if parser is None or _is_none(parser) else parser
        kind, payload = self._type(field.module, field.annotation)
        choices = self._literal(field, "choices")
        nargs = self._literal(field, "nargs")
        if kind == "bool":  # store_true: the default is all it keeps
            return {"action": "store_true", **kwargs}
        if kind == "literal":  # no nargs in this branch
            return {
                **kwargs,
                "choices": choices or payload,
                **_type_kwargs(parser, _value_type(payload)),
            }
        if kind == "list" and parser is None:
            return {**kwargs, "nargs": nargs or "+", "choices": choices, "type": payload}
        inferred = payload if kind == "scalar" else "str"
        return {**kwargs, "nargs": nargs, "choices": choices, **_type_kwargs(parser, inferred)}

    def _type(self, module: str, annotation: ast.expr, depth: int = 0) -> tuple[str, Any]:
        """
        What ``add_cli_args_from_dataclass`` sees in a field type: ``("literal", values)``,
        ``("list", element type)``, ``("bool", None)``, ``("scalar", "int"|"float"|"str")``.
        ``Optional[X]`` / ``X | None`` is unwrapped when X is the only other member.
        """
        if depth > 20:
            return "scalar", "str"
        if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
            return self._type(module, ast.parse(annotation.value, mode="eval").body, depth + 1)
        members = _union_members(annotation)
        if members is not None:
            others = [m for m in members if not _is_none(m)]
            if len(others) == 1 and len(others) < len(members):
                return self._type(module, others[0], depth + 1)
            return "scalar", "str"
        if isinstance(annotation, ast.Subscript):
            origin = call_name(annotation.value)
            if origin == "Literal":
                try:
                    return "literal", literal_args(self.source, module, annotation)
                except Unknown:
                    return "scalar", "str"
            if origin in ("list", "List"):
                element = self._type(module, annotation.slice, depth + 1)
                return "list", element[1] if element[0] == "scalar" else "str"
            if origin in ("A", "Annotated") and isinstance(annotation.slice, ast.Tuple):
                return self._type(module, annotation.slice.elts[0], depth + 1)
            return "scalar", "str"
        if isinstance(annotation, ast.Name) and annotation.id in ("bool", "int", "float", "str"):
            return ("bool", None) if annotation.id == "bool" else ("scalar", annotation.id)
        if isinstance(annotation, (ast.Name, ast.Attribute)):
            found = self.source.lookup_dotted(module, annotation)
            if (
                found is not None
                and isinstance(found.node, ast.expr)
                and not (isinstance(found.node, ast.Name) and found.node.id == "__module__")
            ):
                return self._type(found.module, found.node, depth + 1)  # a type alias
        return "scalar", "str"


def _union_members(annotation: ast.expr) -> list[ast.expr] | None:
    """The members of ``Optional[X]``, ``Union[...]`` or ``X | Y``; None for other types."""
    if isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr):
        left = _union_members(annotation.left) or [annotation.left]
        right = _union_members(annotation.right) or [annotation.right]
        return left + right
    if isinstance(annotation, ast.Subscript):
        origin = call_name(annotation.value)
        elements = (
            annotation.slice.elts if isinstance(annotation.slice, ast.Tuple) else [annotation.slice]
        )
        if origin == "Optional":
            return [*elements, ast.Constant(value=None)]
        if origin == "Union":
            return list(elements)
    return None


def _is_none(expr: ast.expr) -> bool:
    return (isinstance(expr, ast.Constant) and expr.value is None) or (
        isinstance(expr, ast.Name) and expr.id == "None"
    )


def _type_kwargs(parser: ast.expr | None, inferred: str) -> Kwargs:
    if parser is None:
        return {"type": inferred, "human_readable": False}
    kind, human = type_of(parser)
    return {"type": kind, "human_readable": human}


def _value_type(values: list[Any]) -> str:
    """``type(literal_vals[0])`` as the catalogue names it (str for anything else)."""
    if not values:
        return "str"
    first = values[0]
    if isinstance(first, bool):
        return "str"
    return {int: "int", float: "float"}.get(type(first), "str")


def _method(cls: ast.ClassDef, name: str) -> ast.FunctionDef | None:
    for statement in cls.body:
        if isinstance(statement, ast.FunctionDef) and statement.name == name:
            return statement
    return None
