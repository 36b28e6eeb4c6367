"""
Text the deploy writes: the project's jinja2 templates (templates/, one environment for
all of them), the files shipped as they are (files/), and aligned text tables.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined

from sparkdeploy.escape import FILTERS

ROOT = Path(__file__).resolve().parents[1]
TEMPLATES = ROOT / "templates"
FILES = ROOT / "files"

_environment = Environment(
    loader=FileSystemLoader(TEMPLATES),
    undefined=StrictUndefined,
    keep_trailing_newline=True,
    autoescape=False,
)
_environment.filters.update(FILTERS)  # one escape per destination: sparkdeploy/escape.py


def render(name: str, **values: Any) -> str:
    """The template ``templates/<name>`` rendered with ``values``."""
    return _environment.get_template(name).render(**values)


def file_text(name: str) -> str:
    """A file shipped as is from files/."""
    return (FILES / name).read_text()


def aligned(rows: Sequence[Sequence[str]], indent: str = "") -> str:
    """Rows as text columns, each as wide as its widest cell (the last one left ragged)."""
    if not rows:
        return ""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        indent + "  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip()
        for row in rows
    )
