"""
Text the deploy writes: the project's jinja2 templates (sparkdeploy/templates/, one
environment for all of them), the files shipped as they are (sparkdeploy/files/), and
aligned text tables.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined

from sparkdeploy import __version__
from sparkdeploy.escape import FILTERS

PACKAGE = Path(__file__).resolve().parent  # templates/ and files/ travel inside the package
TEMPLATES = PACKAGE / "templates"
FILES = PACKAGE / "files"

# The first words of every file the deploy writes, with the release that wrote it. A Spark
# recognises the deploy's files by the words before the release (config/paths.py
# MANAGED_HEADER, which files of older releases carry too); a new release rewrites each file
# once, two runs of one release write the same bytes.
UNSTAMPED = "# Managed by spark-deploy"
STAMP = f"{UNSTAMPED} {__version__}"

_environment = Environment(
    loader=FileSystemLoader(TEMPLATES),
    undefined=StrictUndefined,
    keep_trailing_newline=True,
    autoescape=False,
)
_environment.filters.update(FILTERS)  # one escape per destination: sparkdeploy/escape.py
_environment.globals["managed"] = STAMP  # the templates' first line: {{ managed }}: ...


def render(name: str, **values: Any) -> str:
    """The template ``templates/<name>`` rendered with ``values``."""
    return _environment.get_template(name).render(**values)


def file_text(name: str) -> str:
    """A file shipped as is from files/, stamped: its own header line made STAMP, or STAMP
    added as a comment after the ``#!`` line (first, without one)."""
    text = (FILES / name).read_text()
    if text.startswith(UNSTAMPED + ":"):
        return STAMP + text[len(UNSTAMPED) :]
    if text.startswith("#!"):
        shebang, _, rest = text.partition("\n")
        return f"{shebang}\n{STAMP}\n{rest}"
    return f"{STAMP}\n{text}"


def aligned(rows: Sequence[Sequence[str]], indent: str = "") -> str:
    """Rows as text columns, each as wide as its widest cell (the last one left ragged)."""
    if not rows:
        return ""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        indent + "  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip()
        for row in rows
    )
