"""
Static reading of a Python package inside a wheel: modules, imports and literal values.

The flag extractors never import an engine (it would need CUDA, torch and hundreds of
dependencies). They parse its source with ``ast`` straight out of the wheel's zip file
and evaluate only what is literal: constants, lists, dicts, names bound to them (followed
across ``from x import y``), class attributes and a few pure builtins (``list``,
``sorted``, ``typing.get_args`` ...). Anything else raises ``Unknown``, and the caller
records the value as unknown instead of guessing.
"""

from __future__ import annotations

import ast
import hashlib
import operator
import zipfile
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any


class Unknown(Exception):
    """A value that cannot be known without running the code."""


@dataclass(frozen=True)
class Binding:
    """What a name is bound to in a module: an expression, a class or a function."""

    module: str
    node: ast.AST  # the value expression, or the ClassDef / FunctionDef


@dataclass
class Module:
    """One parsed module of the wheel and its top-level names."""

    name: str
    tree: ast.Module
    is_package: bool
    names: dict[str, ast.AST] = field(default_factory=dict)  # value expr / ClassDef / FunctionDef
    imports: dict[str, tuple[str, str | None]] = field(
        default_factory=dict
    )  # local -> (module, attr)


def _top_level(statements: list[ast.stmt]):
    """Top-level statements, looking inside ``if``/``try`` blocks (TYPE_CHECKING imports)."""
    for statement in statements:
        if isinstance(statement, ast.If):
            yield from _top_level(statement.body)
            yield from _top_level(statement.orelse)
        elif isinstance(statement, ast.Try):
            yield from _top_level(statement.body)
            for handler in statement.handlers:
                yield from _top_level(handler.body)
        else:
            yield statement


class WheelSource:
    """The Python source of a wheel, read without installing or importing it."""

    def __init__(self, path: Path):
        self.path = path
        self._zip = zipfile.ZipFile(path)
        self._files = set(self._zip.namelist())
        self._modules: dict[str, Module | None] = {}

    @cached_property
    def sha256(self) -> str:
        digest = hashlib.sha256()
        with self.path.open("rb") as stream:
            for chunk in iter(lambda: stream.read(1 << 20), b""):
                digest.update(chunk)
        return digest.hexdigest()

    def has(self, path: str) -> bool:
        return path in self._files

    def files(self, prefix: str) -> list[str]:
        return sorted(name for name in self._files if name.startswith(prefix))

    def class_def(self, module_name: str, name: str) -> Binding | None:
        """
        The top-level ``class name`` statement of a module, even when a later statement
        rebinds the name (SGLang 0.5.20+: ``ServerArgs = msgspec.defstruct(...)``).
        """
        module = self.module(module_name)
        if module is None:
            return None
        for statement in _top_level(module.tree.body):
            if isinstance(statement, ast.ClassDef) and statement.name == name:
                return Binding(module_name, statement)
        return None

    def text(self, path: str) -> str:
        return self._zip.read(path).decode("utf-8")

    def module(self, name: str) -> Module | None:
        """The parsed module ``name`` (dotted), or None if the wheel has no such module."""
        if name not in self._modules:
            self._modules[name] = self._load(name)
        return self._modules[name]

    def _load(self, name: str) -> Module | None:
        base = name.replace(".", "/")
        for path, is_package in ((f"{base}.py", False), (f"{base}/__init__.py", True)):
            if path in self._files:
                module = Module(name, ast.parse(self.text(path), path), is_package)
                self._index(module)
                return module
        return None

    @staticmethod
    def _index(module: Module) -> None:
        package = module.name if module.is_package else module.name.rpartition(".")[0]
        for statement in _top_level(module.tree.body):
            if isinstance(statement, ast.ImportFrom):
                source = statement.module or ""
                if statement.level:
                    parts = package.split(".")
                    parts = parts[: len(parts) - statement.level + 1]
                    source = ".".join(p for p in [*parts, source] if p)
                for alias in statement.names:
                    module.imports[alias.asname or alias.name] = (source, alias.name)
            elif isinstance(statement, ast.Import):
                for alias in statement.names:
                    if alias.asname:
                        module.imports[alias.asname] = (alias.name, None)
                    else:
                        top = alias.name.split(".")[0]
                        module.imports[top] = (top, None)
            elif isinstance(statement, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                module.names[statement.name] = statement
            elif isinstance(statement, ast.Assign):
                for target in statement.targets:
                    if isinstance(target, ast.Name):
                        module.names[target.id] = statement.value
            elif (
                isinstance(statement, ast.AnnAssign)
                and isinstance(statement.target, ast.Name)
                and statement.value is not None
            ):
                module.names[statement.target.id] = statement.value

    def lookup(self, module_name: str, name: str, _depth: int = 0) -> Binding | None:
        """What ``name`` means in ``module_name``, following imports (and re-exports)."""
        if _depth > 20:
            return None
        module = self.module(module_name)
        if module is None:
            return None
        if name in module.names:
            return Binding(module_name, module.names[name])
        if name in module.imports:
            source, attr = module.imports[name]
            if attr is None:
                return Binding(source, ast.Name(id="__module__"))
            found = self.lookup(source, attr, _depth + 1)
            if found is None and self.module(f"{source}.{attr}") is not None:
                return Binding(f"{source}.{attr}", ast.Name(id="__module__"))
            return found
        return None

    def lookup_dotted(self, module_name: str, expr: ast.expr) -> Binding | None:
        """Resolve ``Name`` or ``a.b.C`` (module attributes) to a binding."""
        if isinstance(expr, ast.Name):
            return self.lookup(module_name, expr.id)
        if isinstance(expr, ast.Attribute):
            owner = self.lookup_dotted(module_name, expr.value)
            if owner is None:
                return None
            if isinstance(owner.node, ast.Name) and owner.node.id == "__module__":
                return self.lookup(owner.module, expr.attr) or (
                    Binding(f"{owner.module}.{expr.attr}", ast.Name(id="__module__"))
                    if self.module(f"{owner.module}.{expr.attr}")
                    else None
                )
            if isinstance(owner.node, ast.ClassDef):
                value = class_attribute(owner.node, expr.attr)
                return Binding(owner.module, value) if value is not None else None
        return None

    def find_class(self, module_name: str, expr: ast.expr | str) -> Binding | None:
        """The ClassDef a name refers to in ``module_name``, or None."""
        node = ast.Name(id=expr) if isinstance(expr, str) else expr
        found = self.lookup_dotted(module_name, node)
        if found is not None and isinstance(found.node, ast.ClassDef):
            return found
        return None

    def literal(
        self, module_name: str, expr: ast.expr, local: dict[str, ast.expr] | None = None
    ) -> Any:
        """The value of a literal expression, or raise Unknown."""
        return _Evaluator(self, module_name, local or {}).eval(expr)


def class_attribute(cls: ast.ClassDef, name: str) -> ast.expr | None:
    """The expression a class body assigns to ``name`` (plain or annotated), if any."""
    for statement in cls.body:
        if isinstance(statement, ast.Assign):
            if any(isinstance(t, ast.Name) and t.id == name for t in statement.targets):
                return statement.value
        elif (
            isinstance(statement, ast.AnnAssign)
            and isinstance(statement.target, ast.Name)
            and statement.target.id == name
        ):
            return statement.value
    return None


def call_name(node: ast.expr) -> str:
    """The last dotted part of a callee: ``dataclasses.field`` -> ``field``."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def keyword(call: ast.Call, name: str) -> ast.expr | None:
    for item in call.keywords:
        if item.arg == name:
            return item.value
    return None


def field_default(source: WheelSource, module: str, value: ast.expr | None) -> Any:
    """A dataclass field's default: ``= 3``, ``field(default=3)``, ``Field(default_factory=list)``."""
    if value is None:
        raise Unknown("no default")
    if isinstance(value, ast.Call) and call_name(value.func) in ("field", "Field"):
        default = keyword(value, "default")
        if default is None and value.args and call_name(value.func) == "Field":
            default = value.args[0]
        if default is not None:
            return source.literal(module, default)
        factory = keyword(value, "default_factory")
        if factory is not None:
            name = call_name(factory)
            if name in ("list", "dict", "set", "tuple"):
                return [] if name in ("list", "set", "tuple") else {}
            if isinstance(factory, ast.Lambda):
                return source.literal(module, factory.body)
        raise Unknown("computed default")
    return source.literal(module, value)


PURE_CALLS = {"list", "tuple", "sorted", "set", "frozenset"}


class _Evaluator:
    def __init__(
        self,
        source: WheelSource,
        module: str,
        local: dict[str, ast.expr],
        imports: dict[str, tuple[str, str]] | None = None,
    ):
        self.source = source
        self.module = module
        self.local = local
        self.imports = imports or {}  # names a function imports in its body
        self.depth = 0

    def eval(self, expr: ast.expr) -> Any:
        self.depth += 1
        try:
            if self.depth > 60:
                raise Unknown("too deep")
            return self._eval(expr)
        finally:
            self.depth -= 1

    def _in(self, module: str, expr: ast.expr) -> Any:
        return _Evaluator(self.source, module, {}).eval(expr)

    def _eval(self, expr: ast.expr) -> Any:
        if isinstance(expr, ast.Constant):
            return expr.value
        if isinstance(expr, (ast.List, ast.Tuple, ast.Set)):
            items: list[Any] = []
            for element in expr.elts:
                if isinstance(element, ast.Starred):
                    items.extend(self.eval(element.value))
                else:
                    items.append(self.eval(element))
            return items
        if isinstance(expr, ast.Dict):
            keys = [key for key in expr.keys if key is not None]
            if len(keys) != len(expr.keys):
                raise Unknown("dict unpacking")
            return {self.eval(k): self.eval(v) for k, v in zip(keys, expr.values, strict=True)}
        if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.USub):
            return -self.eval(expr.operand)
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
            left, right = self.eval(expr.left), self.eval(expr.right)
            if isinstance(left, (list, str, int, float)) and type(left) is type(right):
                return operator.add(left, right)  # same type: mypy cannot pair the unions
            raise Unknown("addition of mixed types")
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Mult):
            left, right = self.eval(expr.left), self.eval(expr.right)
            if isinstance(left, (int, float)) and isinstance(right, (int, float)):
                return left * right
            raise Unknown("multiplication of non-numbers")
        if isinstance(expr, ast.Subscript):
            container, index = self.eval(expr.value), self.eval(expr.slice)
            try:
                return container[index]
            except (KeyError, IndexError, TypeError) as error:
                raise Unknown(ast.unparse(expr)) from error
        if isinstance(expr, ast.Name):
            if expr.id in self.local:
                return _Evaluator(self.source, self.module, {}).eval(self.local[expr.id])
            if expr.id in ("True", "False", "None"):
                return {"True": True, "False": False, "None": None}[expr.id]
            if expr.id in self.imports:
                return self._binding(self.source.lookup(*self.imports[expr.id]))
            return self._binding(self.source.lookup(self.module, expr.id))
        if isinstance(expr, ast.Attribute):
            return self._attribute(expr)
        if isinstance(expr, ast.Call):
            return self._call(expr)
        raise Unknown(ast.unparse(expr))

    def _dict_keys(self, expr: ast.expr) -> list[Any]:
        """Keys of a dict literal reached through names; its values need not be literal."""
        module, node = self.module, expr
        for _ in range(20):
            if isinstance(node, ast.Dict):
                keys = [key for key in node.keys if key is not None]
                if len(keys) != len(node.keys):
                    raise Unknown("dict unpacking")
                return [self._in(module, key) for key in keys]
            if isinstance(node, ast.Name) and node.id in self.local and module == self.module:
                node = self.local[node.id]
                continue
            if isinstance(node, ast.Attribute):
                owner = self.source.find_class(module, node.value)
                if owner is not None:
                    value = class_attribute(owner.node, node.attr)  # type: ignore[arg-type]  # find_class: a ClassDef
                    if value is None:
                        break
                    module, node = owner.module, value
                    continue
            if isinstance(node, (ast.Name, ast.Attribute)):
                found = self.source.lookup_dotted(module, node)
                if found is None or not isinstance(found.node, ast.expr):
                    break
                module, node = found.module, found.node
                continue
            break
        return list(self.eval(expr))

    def _binding(self, binding: Binding | None) -> Any:
        if binding is None or not isinstance(binding.node, ast.expr):
            raise Unknown("not a literal binding")
        if isinstance(binding.node, ast.Name) and binding.node.id == "__module__":
            raise Unknown("module")
        return self._in(binding.module, binding.node)

    def _attribute(self, expr: ast.Attribute) -> Any:
        # Enum member or class attribute: Cls.NAME / module.Cls.NAME
        owner = self.source.find_class(self.module, expr.value)
        if owner is not None:
            value = class_attribute(owner.node, expr.attr)  # type: ignore[arg-type]  # find_class: a ClassDef
            if value is None:
                raise Unknown(f"{ast.unparse(expr)} not assigned in the class body")
            if isinstance(value, ast.Call) and call_name(value.func) in ("field", "Field"):
                return field_default(self.source, owner.module, value)
            # Names in a class body see the attributes assigned before them there
            # (``ALL = (FULL, BREAKABLE, DISABLED)``).
            scope = _class_scope(owner.node)  # type: ignore[arg-type]  # find_class: a ClassDef
            return _Evaluator(self.source, owner.module, scope).eval(value)
        return self._binding(self.source.lookup_dotted(self.module, expr))

    def _call(self, expr: ast.Call) -> Any:
        name = call_name(expr.func)
        if name in PURE_CALLS and len(expr.args) == 1 and not expr.keywords:
            value = self.eval(expr.args[0])
            if isinstance(value, dict):
                value = list(value)
            return sorted(value) if name == "sorted" else list(value)
        if name == "keys" and isinstance(expr.func, ast.Attribute) and not expr.args:
            return self._dict_keys(expr.func.value)
        if name == "get_args" and len(expr.args) == 1:
            return literal_args(self.source, self.module, expr.args[0])
        if isinstance(expr.func, ast.Name) and not expr.args and not expr.keywords:
            return self._function_result(expr)
        raise Unknown(ast.unparse(expr))

    def _function_result(self, expr: ast.Call) -> Any:
        """
        A call of a module function without parameters whose last statement returns a
        literal (``def _choices(): from x import NAMES; return list(NAMES)``): that value.
        Imports inside the function are followed; earlier returns are branches the
        function may take at run time and are not evaluated.
        """
        binding = self.source.lookup(self.module, expr.func.id)  # type: ignore[attr-defined]  # a Name
        function = binding.node if binding is not None else None
        if not isinstance(function, ast.FunctionDef) or _has_parameters(function.args):
            raise Unknown(ast.unparse(expr))
        last = function.body[-1]
        if not isinstance(last, ast.Return) or last.value is None:
            raise Unknown(f"{function.name}: does not end with a return")
        assert binding is not None  # function is its node
        parts = binding.module.split(".")
        imports: dict[str, tuple[str, str]] = {}
        for node in ast.walk(function):
            if isinstance(node, ast.ImportFrom) and node.module:
                base = parts[: len(parts) - node.level] if node.level else []
                origin = ".".join([*base, node.module])
                for alias in node.names:
                    imports[alias.asname or alias.name] = (origin, alias.name)
        return _Evaluator(self.source, binding.module, {}, imports).eval(last.value)


def _class_scope(cls: ast.ClassDef) -> dict[str, ast.expr]:
    """The simple ``NAME = value`` assignments of a class body."""
    scope: dict[str, ast.expr] = {}
    for statement in cls.body:
        if isinstance(statement, ast.Assign):
            for target in statement.targets:
                if isinstance(target, ast.Name):
                    scope[target.id] = statement.value
    return scope


def _has_parameters(arguments: ast.arguments) -> bool:
    return bool(
        arguments.posonlyargs
        or arguments.args
        or arguments.kwonlyargs
        or arguments.vararg
        or arguments.kwarg
    )


def literal_args(source: WheelSource, module: str, expr: ast.expr, depth: int = 0) -> list[Any]:
    """The values of ``Literal[...]`` (also through aliases and unions of Literals)."""
    if depth > 20:
        raise Unknown("too deep")
    if isinstance(expr, ast.Subscript) and call_name(expr.value) == "Literal":
        inner = expr.slice
        elements = inner.elts if isinstance(inner, ast.Tuple) else [inner]
        values: list[Any] = []
        for element in elements:
            if isinstance(element, ast.Starred):
                values.extend(source.literal(module, element.value))
            else:
                values.append(source.literal(module, element))
        return values
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.BitOr):
        return literal_args(source, module, expr.left, depth + 1) + literal_args(
            source, module, expr.right, depth + 1
        )
    if isinstance(expr, (ast.Name, ast.Attribute)):
        found = source.lookup_dotted(module, expr)
        if found is not None and isinstance(found.node, ast.expr):
            return literal_args(source, found.module, found.node, depth + 1)
    raise Unknown(f"not a Literal: {ast.unparse(expr)}")
