"""
GB10 engine profiles as data (profiles.yaml, with the field report behind each value): the
flags and environment that work on a Spark per engine, and which flags the deploy derives
from settings itself (a ``{placeholder}`` in the value).
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from sparkdeploy.knowledge.flags import Catalogue, load_catalogue

PROFILES_FILE = Path(__file__).resolve().parent / "profiles.yaml"
PLACEHOLDER = re.compile(r"\{(\w+)\}")


@lru_cache(maxsize=1)
def _profiles() -> dict[str, Any]:
    return yaml.safe_load(PROFILES_FILE.read_text(encoding="utf-8"))


def profile(engine: str) -> dict[str, Any]:
    """The raw profile of ``engine`` from profiles.yaml."""
    return _profiles()[engine]


def managed_flags(engine: str, version: str) -> dict[str, str]:
    """
    Flags the deploy derives from settings -> the setting behind them (every spelling).

    A profile flag is managed when its value holds a ``{placeholder}``: the model folder,
    bind address, port, context length, draft folder, the pair's addresses ...
    """
    catalogue = load_catalogue(engine, version)
    meaning = _profiles()["placeholders"]
    engine_profile = profile(engine)
    sections = (
        engine_profile["managed"],
        engine_profile["speculative"]["args"],
        engine_profile["multinode"]["args"],
        engine_profile["multinode"]["worker_args"],
    )
    managed: dict[str, str] = {}
    for section in sections:
        for flag, value in section.items():
            names = PLACEHOLDER.findall(str(value))
            if names:
                for spelling in spellings(catalogue, flag):
                    managed.setdefault(spelling, meaning[names[0]])
    return managed


def spellings(catalogue: Catalogue, flag: str) -> list[str]:
    canonical = catalogue.canonical(flag)
    return [canonical] + [
        name for name, spec in catalogue.flags.items() if spec.alias_of == canonical
    ]
