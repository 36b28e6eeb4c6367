"""
vLLM's server flags, read from the wheel's source (``vllm serve``'s argument parser).

``vllm serve`` builds its parser in ``make_arg_parser`` (``vllm/entrypoints/openai/
cli_args.py``, or ``vllm/entrypoints/common/cli_args.py`` in later releases): a few flags
of its own, every field of the ``FrontendArgs`` dataclass as ``--kebab-case``, then
``AsyncEngineArgs.add_cli_args`` -> ``EngineArgs.add_cli_args``. Most engine flags there
are ``group.add_argument("--flag", **get_kwargs(SomeConfig)["field"])``: argparse keyword
arguments computed from the config dataclass field's annotation (``vllm/config/*.py``) the
way vLLM's ``_compute_kwargs`` does it: bool -> ``--flag``/``--no-flag``
(BooleanOptionalAction), Literal -> choices (none when ``str`` is also allowed), list/tuple
-> several values, dataclass -> JSON, Enum -> its member names.

This module follows those steps statically: it interprets the statements of the
``add_cli_args`` functions in order (kwargs variables, later tweaks such as
``kwargs["f"]["type"] = ...`` or ``["choices"].remove(x)``, and calls into other
``add_cli_args``) without importing vLLM.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any

from sparkdeploy.knowledge.spec import FlagSpec
from tools.catalogue.argparse_ast import (
    UNKNOWN,
    Kwargs,
    add_argument_calls,
    keyword_value,
    keywords,
    option_strings,
    record,
)
from tools.catalogue.environment import vllm_environment
from tools.catalogue.pysource import (
    Binding,
    Unknown,
    WheelSource,
    call_name,
    field_default,
)
from tools.catalogue.vllm_types import TypeReader, class_mro, hint_kwargs

ARG_UTILS = "vllm.engine.arg_utils"
FRONTEND_MODULES = ("vllm.entrypoints.openai.cli_args", "vllm.entrypoints.common.cli_args")
PARSER_MODULES = ("vllm.utils.argparse_utils", "vllm.utils")  # FlexibleArgumentParser
CLI_MAIN = "vllm.entrypoints.cli.main"
CLI_SERVE = "vllm.entrypoints.cli.serve"


class ExtractionError(Exception):
    """The wheel's layout is not one this extractor understands."""


@dataclass
class _ClassKwargs:
    """``get_kwargs(cls)``: every field of a config class."""

    cls: Binding


@dataclass
class _FieldKwargs:
    """``get_kwargs(cls)["field"]``: one field's argparse kwargs."""

    cls: Binding
    name: str


@dataclass
class _State:
    flags: dict[str, FlagSpec] = field(default_factory=dict)
    overrides: dict[tuple[str, str, str], Kwargs] = field(default_factory=dict)
    seen: set[tuple[str, str]] = field(default_factory=set)
    unresolved: list[str] = field(default_factory=list)


def class_key(binding: Binding) -> str:
    return f"{binding.module}.{binding.node.name}"  # type: ignore[attr-defined]  # a class binding


class VllmReader:
    """Reads ``vllm serve``'s flags out of one wheel."""

    def __init__(self, source: WheelSource):
        self.source = source
        self.state = _State()
        self.types = TypeReader(source)
        self.human_readable = self._human_readable_fields()

    # -- entry point -------------------------------------------------------------------

    def read(self) -> tuple[dict[str, FlagSpec], list[str]]:
        # ``vllm serve`` calls the make_arg_parser its cli/serve.py imports (0.29-0.32:
        # entrypoints/launchers/cli_args.py); older wheels without cli/serve.py: the list.
        served = self.source.lookup(CLI_SERVE, "make_arg_parser")
        frontend = (
            served.module
            if served is not None and isinstance(served.node, ast.FunctionDef)
            else next((m for m in FRONTEND_MODULES if self.source.module(m)), None)
        )
        if self.source.module(ARG_UTILS) is None or frontend is None:
            raise ExtractionError(
                f"{self.source.path.name}: expected {ARG_UTILS} and make_arg_parser imported "
                f"by {CLI_SERVE} or in one of {FRONTEND_MODULES}"
            )
        make = self.source.lookup(frontend, "make_arg_parser")
        if make is None or not isinstance(make.node, ast.FunctionDef):
            raise ExtractionError(f"{frontend}: no make_arg_parser function")
        self._run(make.node, frontend, None)
        if "--gpu-memory-utilization" not in self.state.flags:
            raise ExtractionError("engine flags not found: EngineArgs.add_cli_args was not reached")
        return self.state.flags, self.state.unresolved

    # -- statements -----------------------------------------------------------------------

    def _run(self, function: ast.FunctionDef, module: str, owner: Binding | None) -> None:
        variables: dict[str, Any] = {}
        self._block(function.body, module, owner, variables)

    def _block(self, body: list[ast.stmt], module: str, owner: Binding | None, env: dict) -> None:
        for statement in body:
            self._statement(statement, module, owner, env)

    def _statement(self, node: ast.stmt, module: str, owner: Binding | None, env: dict) -> None:
        if isinstance(node, (ast.If, ast.With, ast.Try)):
            for block in ("body", "orelse", "finalbody"):
                self._block(getattr(node, block, []) or [], module, owner, env)
            for handler in getattr(node, "handlers", []):
                self._block(handler.body, module, owner, env)
            return
        if isinstance(node, ast.For):
            if not self._field_loop(node, module, env):
                self._block(node.body, module, owner, env)
            return
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name):
                ref = self._kwargs_ref(node.value, module, owner, env)
                if ref is not None:
                    env[target.id] = ref
                    return
            elif isinstance(target, ast.Subscript) and self._override(
                target, module, env, node.value
            ):
                return
        if isinstance(node, ast.Delete):
            for target in node.targets:
                if isinstance(target, ast.Subscript):
                    self._override(target, module, env, None)
            return
        if isinstance(node, ast.Expr) and self._choice_removal(node.value, module, env):
            return
        self._calls(node, module, owner, env)

    def _calls(self, node: ast.AST, module: str, owner: Binding | None, env: dict) -> None:
        """add_argument calls and calls into another class's add_cli_args, in order."""
        calls = sorted(
            (n for n in ast.walk(node) if isinstance(n, ast.Call)),
            key=lambda n: (n.lineno, n.col_offset),
        )
        for call in calls:
            name = call_name(call.func)
            if name == "add_argument":
                self._add_argument(call, module, env)
            elif name == "add_cli_args" and isinstance(call.func, ast.Attribute):
                self._nested_add_cli_args(call.func.value, module, owner)

    # -- kwargs variables -----------------------------------------------------------------

    def _kwargs_ref(self, value: ast.expr, module: str, owner: Binding | None, env: dict):
        if isinstance(value, ast.Call) and call_name(value.func) == "get_kwargs" and value.args:
            cls = self._class(value.args[0], module, owner)
            return _ClassKwargs(cls) if cls else None
        if isinstance(value, ast.Call) and call_name(value.func) == "_customize_cli_kwargs":
            ref = (
                env.get(value.args[0].id)
                if value.args and isinstance(value.args[0], ast.Name)
                else None
            )
            receiver = value.func.value if isinstance(value.func, ast.Attribute) else None
            is_super = isinstance(receiver, ast.Call) and call_name(receiver.func) == "super"
            if isinstance(ref, _ClassKwargs) and not is_super:  # super(): already in the MRO walk
                self._customize(ref.cls)
            return ref
        if isinstance(value, ast.Subscript):
            base = self._kwargs_ref(value.value, module, owner, env)
            key = value.slice
            if (
                isinstance(base, _ClassKwargs)
                and isinstance(key, ast.Constant)
                and isinstance(key.value, str)
            ):
                return _FieldKwargs(base.cls, key.value)
        if isinstance(value, ast.Name) and value.id in env:
            return env[value.id]
        return None

    def _class(self, expr: ast.expr, module: str, owner: Binding | None) -> Binding | None:
        if isinstance(expr, ast.Name) and expr.id == "cls" and owner is not None:
            return owner
        return self.source.find_class(module, expr)

    def _field_target(
        self, target: ast.Subscript, module: str, env: dict
    ) -> tuple[_FieldKwargs, str] | None:
        """``X["field"]["key"]`` or ``F["key"]`` -> (field kwargs, key)."""
        if not (isinstance(target.slice, ast.Constant) and isinstance(target.slice.value, str)):
            return None
        ref = self._kwargs_ref(target.value, module, None, env)
        if isinstance(ref, _FieldKwargs):
            return ref, target.slice.value
        return None

    def _override(
        self, target: ast.Subscript, module: str, env: dict, value: ast.expr | None
    ) -> bool:
        found = self._field_target(target, module, env)
        if found is None:
            return False
        ref, key = found
        slot = self.state.overrides.setdefault((class_key(ref.cls), ref.name, "set"), {})
        if value is None:
            slot[key] = None  # del kwargs["field"]["key"]
        elif key == "flags":
            try:
                slot["flags"] = self.source.literal(module, value)
            except Unknown:
                self.state.unresolved.append(f"{ref.name}: extra flags {ast.unparse(value)}")
        else:
            slot.update(keyword_value(self.source, module, key, value))
        return True

    def _choice_removal(self, call: ast.expr, module: str, env: dict) -> bool:
        """``kwargs["field"]["choices"].remove(x)``."""
        if not (isinstance(call, ast.Call) and call_name(call.func) == "remove"):
            return False
        # call_name() == "remove" is taken to mean an attribute call (x.remove): a bare remove()
        # would raise AttributeError here, as it always has.
        holder = call.func.value  # type: ignore[attr-defined]
        if not isinstance(holder, ast.Subscript):
            return False
        found = self._field_target(holder, module, env)
        if found is None or found[1] != "choices" or not call.args:
            return False
        ref = found[0]
        try:
            removed = self.source.literal(module, call.args[0])
        except Unknown:
            self.state.unresolved.append(f"{ref.name}: removed choice {ast.unparse(call.args[0])}")
            return True
        slot = self.state.overrides.setdefault((class_key(ref.cls), ref.name, "remove"), {})
        slot.setdefault("choices", []).append(removed)
        return True

    def _customize(self, cls: Binding) -> None:
        """Apply ``_customize_cli_kwargs`` of a class and its bases (base first)."""
        for binding in reversed(class_mro(self.source, cls)):
            method = _method(binding.node, "_customize_cli_kwargs")  # type: ignore[arg-type]  # MRO: ClassDefs
            if method is None:
                continue
            argument = method.args.args[-1].arg  # (cls, frontend_kwargs)
            self._block(method.body, binding.module, binding, {argument: _ClassKwargs(cls)})

    # -- flags --------------------------------------------------------------------------

    def _add_argument(self, call: ast.Call, module: str, env: dict) -> None:
        names = option_strings(call)
        if names is None:
            if call.args and not (
                isinstance(call.args[0], ast.Constant)
                and not str(call.args[0].value).startswith("-")
            ):
                self.state.unresolved.append(f"{module}:{call.lineno}: {ast.unparse(call)[:120]}")
            return  # a positional argument (model_tag) is not a flag
        kwargs: Kwargs = {}
        for item in call.keywords:
            if item.arg is None:
                kwargs.update(self._unpacked(item.value, module, env))
        kwargs.update(keywords(self.source, module, call))
        record(self.state.flags, names, kwargs)

    def _unpacked(self, value: ast.expr, module: str, env: dict) -> Kwargs:
        """``**kwargs["field"]``, ``**field_kwargs`` or ``**{**kwargs["field"], "default": x}``."""
        if isinstance(value, ast.Dict):
            merged: Kwargs = {}
            for key, item in zip(value.keys, value.values, strict=True):
                if key is None:
                    merged.update(self._unpacked(item, module, env))
                elif isinstance(key, ast.Constant) and isinstance(key.value, str):
                    merged.update(keyword_value(self.source, module, key.value, item))
            return merged
        ref = self._kwargs_ref(value, module, None, env)
        if isinstance(ref, _FieldKwargs):
            return self.field_kwargs(ref.cls, ref.name)
        self.state.unresolved.append(f"{module}:{value.lineno}: **{ast.unparse(value)}")
        return {}

    def _field_loop(self, loop: ast.For, module: str, env: dict) -> bool:
        """``for key, value in kwargs.items(): group.add_argument(f"--{key...}", **value)``."""
        iterator = loop.iter
        if not (isinstance(iterator, ast.Call) and call_name(iterator.func) == "items"):
            return False
        # Taken as an attribute call (x.items()), like remove() above.
        ref = self._kwargs_ref(iterator.func.value, module, None, env)  # type: ignore[attr-defined]
        if not isinstance(ref, _ClassKwargs) or not add_argument_calls(loop):
            return False
        for name in self.field_names(ref.cls):
            kwargs = self.field_kwargs(ref.cls, name)
            extra = kwargs.pop("flags", None) or []
            record(self.state.flags, [*extra, "--" + name.replace("_", "-")], kwargs)
        return True

    def _nested_add_cli_args(self, expr: ast.expr, module: str, owner: Binding | None) -> None:
        cls = self._class(expr, module, owner)
        if cls is None:
            return
        for binding in class_mro(self.source, cls):
            method = _method(binding.node, "add_cli_args")  # type: ignore[arg-type]  # MRO: ClassDefs
            if method is not None:
                key = (class_key(cls), class_key(binding))
                if key not in self.state.seen:
                    self.state.seen.add(key)
                    self._run(method, binding.module, cls)
                return

    # -- config classes -----------------------------------------------------------------

    def _fields(self, cls: Binding) -> dict[str, tuple[Binding, ast.AnnAssign]]:
        fields: dict[str, tuple[Binding, ast.AnnAssign]] = {}
        for binding in reversed(class_mro(self.source, cls)):
            for statement in binding.node.body:  # type: ignore[attr-defined]  # MRO: ClassDefs
                if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
                    if "ClassVar" in ast.unparse(statement.annotation):
                        continue
                    fields[statement.target.id] = (binding, statement)
        return fields

    def field_names(self, cls: Binding) -> list[str]:
        return [name for name in self._fields(cls) if not name.startswith("_")]

    def field_kwargs(self, cls: Binding, name: str) -> Kwargs:
        """argparse kwargs vLLM computes for one config field, with later tweaks applied."""
        found = self._fields(cls).get(name)
        if found is None:
            self.state.unresolved.append(f"{class_key(cls)}.{name}: no such field")
            return {}
        owner, statement = found
        try:
            default = field_default(self.source, owner.module, statement.value)
        except Unknown:
            default = UNKNOWN
        hints = self.types.hints(owner.module, statement.annotation)
        kwargs = hint_kwargs(name, hints, self.human_readable)
        kwargs["default"] = default
        key = class_key(cls)
        for change, value in self.state.overrides.get((key, name, "set"), {}).items():
            if value is None:
                kwargs.pop(change, None)
            else:
                kwargs[change] = value
        removed = self.state.overrides.get((key, name, "remove"), {}).get("choices", [])
        if kwargs.get("choices") and removed:
            kwargs["choices"] = [c for c in kwargs["choices"] if c not in removed]
        return kwargs

    def _human_readable_fields(self) -> set[str]:
        """Fields whose ints accept 1k/2M/... (the set in ``_compute_kwargs``)."""
        found: set[str] = set()
        compute = self.source.lookup(ARG_UTILS, "_compute_kwargs")
        if compute is None:
            return found
        for node in ast.walk(compute.node):
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "human_readable_int_args" for t in node.targets
            ):
                try:
                    found |= set(self.source.literal(ARG_UTILS, node.value))
                except Unknown:
                    pass
            if (
                isinstance(node, ast.Compare)
                and isinstance(node.left, ast.Name)
                and node.left.id == "name"
            ):
                right = node.comparators[0]
                if isinstance(right, ast.Constant) and isinstance(right.value, str):
                    found.add(right.value)
        return found


def _method(cls: ast.ClassDef, name: str) -> ast.FunctionDef | None:
    for statement in cls.body:
        if isinstance(statement, ast.FunctionDef) and statement.name == name:
            return statement
    return None


def extract(source: WheelSource) -> tuple[dict[str, FlagSpec], list[str]]:
    """Every flag ``vllm serve`` accepts in this wheel, and what could not be resolved."""
    return VllmReader(source).read()


# -- the parser ----------------------------------------------------------------------------


def _file(module: str) -> str:
    return module.replace(".", "/") + ".py"


def parser_facts(source: WheelSource) -> dict[str, Any]:
    """
    How ``vllm serve`` parses its command line. ``vllm`` (the console script, from the
    wheel's ``entry_points.txt``) builds a ``FlexibleArgumentParser`` in
    ``entrypoints/cli/main.py`` ``main`` and ``ServeSubcommand.subparser_init``
    (``entrypoints/cli/serve.py``) adds ``serve`` as a subparser of the same class;
    ``main`` calls ``parse_args`` on the top parser, whose ``FlexibleArgumentParser.parse_args``
    rewrites the arguments before argparse sees them:

    - ``underscores``: it replaces ``_`` by ``-`` in every ``--name`` (up to the first
      ``.``): a ``.replace("_", "-")`` call in ``parse_args``;
    - ``dotted_json``: ``--json-flag.key value`` becomes ``--json-flag '{"key": value}'``:
      ``parse_args`` splits names on ``"."`` and ``json.loads`` the values;
    - ``allow_abbrev``: the ``allow_abbrev`` keyword (or ``kwargs["allow_abbrev"]``) in
      the class, the top parser's construction or ``subparser_init``; argparse's default
      (True: unique prefixes of long options are accepted) when none sets it.
    """
    parser_cls = next(
        (found for m in PARSER_MODULES if (found := source.class_def(m, "FlexibleArgumentParser"))),
        None,
    )
    if parser_cls is None:
        raise ExtractionError(f"{source.path.name}: no FlexibleArgumentParser in {PARSER_MODULES}")
    parse_args = _method(parser_cls.node, "parse_args")  # type: ignore[arg-type]  # class_def: a ClassDef
    if parse_args is None:
        raise ExtractionError(
            f"{_file(parser_cls.module)}: FlexibleArgumentParser.parse_args missing"
        )
    calls = [node for node in ast.walk(parse_args) if isinstance(node, ast.Call)]
    underscores = any(
        call_name(c.func) == "replace"
        and [ast.unparse(a) for a in c.args] in (["'_'", "'-'"], ['"_"', '"-"'])
        for c in calls
    )
    dotted = any(
        call_name(c.func) == "split" and [ast.unparse(a) for a in c.args] in (["'.'"], ['"."'])
        for c in calls
    ) and any(call_name(c.func) == "loads" for c in calls)
    places: list[tuple[str, ast.AST]] = [(parser_cls.module, parser_cls.node)]
    main = source.lookup(CLI_MAIN, "main")
    serve = source.class_def(CLI_SERVE, "ServeSubcommand")
    if main is None or serve is None:
        raise ExtractionError(
            f"{source.path.name}: expected {_file(CLI_MAIN)} main and "
            f"{_file(CLI_SERVE)} ServeSubcommand"
        )
    places += [(CLI_MAIN, main.node), (CLI_SERVE, serve.node)]
    allow_abbrev = True
    for module, node in places:
        for item in ast.walk(node):
            value = _allow_abbrev_setting(item)
            if value is None:
                continue
            try:
                allow_abbrev = bool(source.literal(module, value))
            except Unknown as error:
                raise ExtractionError(
                    f"{_file(module)}:{getattr(item, 'lineno', '?')}: allow_abbrev is set "
                    "to a value that is not a literal"
                ) from error
    command = _console_script(source)
    name_expr = next(
        (
            s.value
            for s in serve.node.body  # type: ignore[attr-defined]  # class_def: a ClassDef
            if isinstance(s, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "name" for t in s.targets)
        ),
        None,
    )
    subcommand = source.literal(CLI_SERVE, name_expr) if name_expr is not None else "serve"
    return {
        "prog": f"{command} {subcommand}",
        "allow_abbrev": allow_abbrev,
        "underscores": underscores,
        "dotted_json": dotted,
        "source": (
            f"{_file(parser_cls.module)} FlexibleArgumentParser.parse_args (line "
            f"{parse_args.lineno}); {_file(CLI_SERVE)} ServeSubcommand.subparser_init"
        ),
    }


def _allow_abbrev_setting(node: ast.AST) -> ast.expr | None:
    """The value an ``allow_abbrev=`` keyword or ``kwargs["allow_abbrev"]`` gives, if any."""
    if isinstance(node, ast.keyword) and node.arg == "allow_abbrev":
        return node.value
    if (
        isinstance(node, ast.Call)
        and call_name(node.func) == "setdefault"
        and len(node.args) == 2
        and isinstance(node.args[0], ast.Constant)
        and node.args[0].value == "allow_abbrev"
    ):
        return node.args[1]
    if isinstance(node, ast.Assign):
        for target in node.targets:
            if (
                isinstance(target, ast.Subscript)
                and isinstance(target.slice, ast.Constant)
                and target.slice.value == "allow_abbrev"
            ):
                return node.value
    return None


def _console_script(source: WheelSource) -> str:
    """The console script that runs ``vllm.entrypoints.cli.main:main`` (``vllm``)."""
    for path in source.files("vllm-"):
        if path.endswith(".dist-info/entry_points.txt"):
            for line in source.text(path).splitlines():
                name, _, target = (part.strip() for part in line.partition("="))
                if target == f"{CLI_MAIN}:main":
                    return name
    raise ExtractionError(f"{source.path.name}: no console script runs {CLI_MAIN}:main")


def environment(source: WheelSource) -> list[str]:
    """Environment variables the release reads (see ``environment.vllm_environment``)."""
    return vllm_environment(source)
