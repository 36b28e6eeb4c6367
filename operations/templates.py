"""Render the project's jinja2 templates (templates/) to text."""

from __future__ import annotations

from pathlib import Path

from jinja2 import Environment, FileSystemLoader, StrictUndefined

TEMPLATES = Path(__file__).resolve().parents[1] / "templates"
FILES = Path(__file__).resolve().parents[1] / "files"

_environment = Environment(
    loader=FileSystemLoader(TEMPLATES),
    undefined=StrictUndefined,
    keep_trailing_newline=True,
    autoescape=False,
)


def render(name: str, **values) -> str:
    return _environment.get_template(name).render(**values)


def file_text(name: str) -> str:
    """A file shipped as is from files/."""
    return (FILES / name).read_text()
