"""
SGLang's server flags, read from the wheel's source (``python -m sglang.launch_server``).

The releases catalogued here declare every flag in ``ServerArgs.add_cli_args``
(``sglang/srt/server_args.py``) as ``parser.add_argument("--flag", type=...,
choices=..., default=ServerArgs.field, ...)``. Choices and defaults are names bound to
literals (module constants, ``ServerArgs`` field defaults, class attributes such as
``ReasoningParser.DetectorMap``), which ``pysource`` resolves without importing SGLang.

Later releases (0.5.2x) moved the declarations to ``sglang/srt/arg_groups/``; a wheel
whose ``add_cli_args`` no longer declares them is refused with a clear error rather than
catalogued empty.
"""

from __future__ import annotations

import ast

from sparkdeploy.knowledge.spec import FlagSpec
from tools.catalogue.argparse_ast import (
    add_argument_calls,
    keywords,
    local_assignments,
    option_strings,
    record,
)
from tools.catalogue.pysource import WheelSource

SERVER_ARGS = "sglang.srt.server_args"
SERVER_ARGS_FILE = "sglang/srt/server_args.py"
FIELDS_DIR = "sglang/srt/arg_groups/fields/"


class ExtractionError(Exception):
    """The wheel's layout is not one this extractor understands."""


def _add_cli_args(source: WheelSource) -> ast.FunctionDef | None:
    server_args = source.find_class(SERVER_ARGS, "ServerArgs")
    if server_args is None:
        return None
    for node in server_args.node.body:  # type: ignore[attr-defined]  # find_class: a ClassDef
        if isinstance(node, ast.FunctionDef) and node.name == "add_cli_args":
            return node
    return None


def extract(source: WheelSource) -> tuple[dict[str, FlagSpec], list[str]]:
    """Every flag ``sglang.launch_server`` accepts in this wheel, and what was not resolved."""
    method = _add_cli_args(source)
    calls = add_argument_calls(method) if method is not None else []
    if method is None or not calls:
        fields = source.files(FIELDS_DIR)
        layout = (
            f"declares them as fields under {FIELDS_DIR} ({len(fields)} files)"
            if fields
            else "declares them somewhere else"
        )
        raise ExtractionError(
            f"{source.path.name}: no parser.add_argument calls in ServerArgs.add_cli_args "
            f"({SERVER_ARGS_FILE}); this release {layout}. Extend "
            "tools/catalogue/extract_sglang.py for that layout before cataloguing it."
        )
    local = local_assignments(method)
    flags: dict[str, FlagSpec] = {}
    unresolved: list[str] = []
    for call in calls:
        names = option_strings(call)
        if names is None:
            unresolved.append(f"{SERVER_ARGS_FILE}:{call.lineno}: flag name is not a literal")
            continue
        record(flags, names, keywords(source, SERVER_ARGS, call, local))
    return flags, unresolved
