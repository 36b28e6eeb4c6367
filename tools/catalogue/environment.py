"""
The environment variables an engine release reads, from its wheel's source.

vLLM
    The keys of ``environment_variables`` in ``vllm/envs.py``: vLLM reads every
    ``VLLM_*`` setting through that table (``envs.VLLM_X`` goes through its
    ``__getattr__``).

SGLang
    The union of
    1. its registry, ``class Envs`` in ``sglang/srt/environ.py``: every class attribute
       assigned an ``Env*(...)`` field, the ``deprecated_name`` of the ``Env*WithAlias``
       fields (read when the new name is unset) and the keys of ``_DEPRECATED_ENVS``
       (read to warn and forward);
    2. every string literal matching ``^(SGLANG|SGL)_[A-Z0-9_]+$`` that some module of the
       package (``sglang/**.py``) reads from the environment: the first argument of
       ``os.getenv``, ``os.environ.get/pop/setdefault``, ``get_bool_env_var``,
       ``get_int_env_var`` and any other call whose name contains ``env`` (not
       ``setenv``/``delenv``/``putenv``/``unsetenv``), or of a package function (or
       class) that passes its parameter on to such a call (``_lazy_bool(key)``); an
       ``os.environ["X"]`` read; ``"X" in os.environ``.

    A name only written (``os.environ["X"] = ...``, ``monkeypatch.setenv``) does not count.
    A name read only to warn that it is gone counts: the release still looks at it
    (0.5.14-0.5.20 ``SGLANG_ENABLE_SPEC_V2``).
"""

from __future__ import annotations

import ast
import re

from tools.catalogue.pysource import WheelSource, call_name

SGLANG_NAME = re.compile(r"^(SGLANG|SGL)_[A-Z0-9_]+$")
ENVIRON_FILE = "sglang/srt/environ.py"
VLLM_ENVS_FILE = "vllm/envs.py"
WRITERS = {"setenv", "delenv", "putenv", "unsetenv"}
ENVIRON_METHODS = {"get", "pop", "setdefault"}
NOT_WRAPPERS = {"get", "pop", "setdefault", "main"}


class EnvironmentNotFound(Exception):
    """The wheel does not have the table or registry this module reads."""


def vllm_environment(source: WheelSource) -> list[str]:
    """The keys of ``environment_variables`` in ``vllm/envs.py``, sorted."""
    if not source.has(VLLM_ENVS_FILE):
        raise EnvironmentNotFound(f"{source.path.name}: no {VLLM_ENVS_FILE}")
    tree = ast.parse(source.text(VLLM_ENVS_FILE), VLLM_ENVS_FILE)
    for node in tree.body:
        target: ast.expr | None = None
        value: ast.expr | None = None
        if isinstance(node, ast.AnnAssign):
            target, value = node.target, node.value
        elif isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        if (
            isinstance(target, ast.Name)
            and target.id == "environment_variables"
            and isinstance(value, ast.Dict)
        ):
            names = {
                key.value
                for key in value.keys
                if isinstance(key, ast.Constant) and isinstance(key.value, str)
            }
            if len(names) != len(value.keys):
                raise EnvironmentNotFound(
                    f"{VLLM_ENVS_FILE}:{node.lineno}: environment_variables has keys "
                    "that are not string literals"
                )
            return sorted(names)
    raise EnvironmentNotFound(
        f"{source.path.name}: no environment_variables dict in {VLLM_ENVS_FILE}"
    )


def sglang_environment(source: WheelSource) -> list[str]:
    """Registry names plus environment reads of SGLANG_*/SGL_* literals, sorted."""
    names = set(sglang_registry(source))
    candidates: list[tuple[str, str]] = []  # (callee name, literal) of calls with a literal
    readers: set[str] = set()
    for path in source.files("sglang/"):
        if not path.endswith(".py"):
            continue
        text = source.text(path)
        if "SGL" not in text and "env" not in text:
            continue
        try:
            tree = ast.parse(text, path)
        except SyntaxError:
            continue  # a template or Python 2 file: not imported by the server
        names |= _direct_reads(tree)
        readers |= _wrappers(tree)
        candidates += _literal_calls(tree)
    names |= {literal for callee, literal in candidates if callee in readers}
    return sorted(names)


def sglang_registry(source: WheelSource) -> list[str]:
    """The names ``sglang/srt/environ.py`` declares (empty when the release has no registry)."""
    if not source.has(ENVIRON_FILE):
        return []
    tree = ast.parse(source.text(ENVIRON_FILE), ENVIRON_FILE)
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "Envs":
            for statement in node.body:
                if not (
                    isinstance(statement, ast.Assign) and isinstance(statement.value, ast.Call)
                ):
                    continue
                names |= {t.id for t in statement.targets if isinstance(t, ast.Name)}
                for item in statement.value.keywords:
                    if item.arg == "deprecated_name" and isinstance(item.value, ast.Constant):
                        names.add(str(item.value.value))
                if call_name(statement.value.func).endswith("WithAlias"):
                    for arg in statement.value.args[1:2]:
                        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                            names.add(arg.value)
        value = None
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            value = node.value if node.target.id == "_DEPRECATED_ENVS" else None
        elif isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "_DEPRECATED_ENVS" for t in node.targets
        ):
            value = node.value
        if isinstance(value, ast.Dict):
            names |= {
                key.value
                for key in value.keys
                if isinstance(key, ast.Constant) and isinstance(key.value, str)
            }
    return sorted(names)


def _is_environ(expr: ast.expr) -> bool:
    return ast.unparse(expr).split(".")[-1] == "environ"


def _is_reader(call: ast.Call) -> bool:
    name = call_name(call.func)
    if isinstance(call.func, ast.Attribute) and name in ENVIRON_METHODS:
        return _is_environ(call.func.value)
    lowered = name.lower()
    return "env" in lowered and not any(writer in lowered for writer in WRITERS)


def _first_literal(call: ast.Call) -> str | None:
    if call.args and isinstance(call.args[0], ast.Constant) and isinstance(call.args[0].value, str):
        return call.args[0].value
    return None


def _direct_reads(tree: ast.AST) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(tree):
        literal: object = None
        if isinstance(node, ast.Call) and _is_reader(node):
            literal = _first_literal(node)
        elif (
            isinstance(node, ast.Subscript)
            and isinstance(node.ctx, ast.Load)
            and _is_environ(node.value)
            and isinstance(node.slice, ast.Constant)
        ):
            literal = node.slice.value
        elif (
            isinstance(node, ast.Compare)
            and isinstance(node.left, ast.Constant)
            and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops)
            and any(_is_environ(c) for c in node.comparators)
        ):
            literal = node.left.value
        if isinstance(literal, str) and SGLANG_NAME.match(literal):
            found.add(literal)
    return found


def _wrappers(tree: ast.AST) -> set[str]:
    """Functions (and classes, by ``__init__``) that pass a parameter to an env read."""
    found: set[str] = set()
    for node in ast.walk(tree):
        owners: list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]] = []
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            owners.append((node.name, node))
        if isinstance(node, ast.ClassDef):
            for statement in node.body:
                if isinstance(statement, ast.FunctionDef) and statement.name == "__init__":
                    owners.append((node.name, statement))
        for name, function in owners:
            if name in NOT_WRAPPERS or name.startswith("__"):
                continue
            parameters = {a.arg for a in [*function.args.posonlyargs, *function.args.args]}
            for inner in ast.walk(function):
                if (
                    isinstance(inner, ast.Call)
                    and _is_reader(inner)
                    and inner.args
                    and isinstance(inner.args[0], ast.Name)
                    and inner.args[0].id in parameters
                ):
                    found.add(name)
                    break
    return found


def _literal_calls(tree: ast.AST) -> list[tuple[str, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            literal = _first_literal(node)
            if literal is not None and SGLANG_NAME.match(literal):
                found.append((call_name(node.func), literal))
    return found
