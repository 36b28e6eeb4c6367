"""
GB10 engine profiles as data (profiles.yaml, with the field report behind each value): the
flags and environment that work on a Spark per engine, and which flags the deploy derives
from settings itself (a ``{placeholder}`` in the value).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from sparkdeploy.knowledge import load_yaml
from sparkdeploy.knowledge.flags import Catalogue, load_catalogue

PROFILES_FILE = Path(__file__).resolve().parent / "profiles.yaml"
PLACEHOLDER = re.compile(r"\{(\w+)\}")
SCOPED_KEYS = frozenset({"when", "value", "source"})
WHEN_KEYS = frozenset({"versions", "model"})


def is_scoped(value: Any) -> bool:
    """A profile entry written as ``{when: {...}, value: V, source: ...}``."""
    return isinstance(value, dict) and {"when", "value"} <= set(value) <= SCOPED_KEYS


def applies(when: Mapping[str, Any], version: str, model: object | None) -> bool:
    """
    Whether a scoped entry holds for this release and model class. ``versions`` is a PEP 440
    specifier (pre-releases and local builds count by their number); ``model`` lists
    attributes of the model's class (``mla: true``) and holds only when the class is known.
    """
    versions = when.get("versions")
    if versions and not SpecifierSet(versions).contains(Version(version), prereleases=True):
        return False
    conditions = when.get("model") or {}
    if conditions and model is None:
        return False
    return all(getattr(model, key, None) == want for key, want in conditions.items())


def scoped(section: Mapping[str, Any], version: str, model: object | None) -> dict[str, Any]:
    """The entries of a profile section that hold for this release and model, unwrapped."""
    return {
        name: value["value"] if is_scoped(value) else value
        for name, value in section.items()
        if not is_scoped(value) or applies(value["when"], version, model)
    }


@lru_cache(maxsize=1)
def _profiles() -> dict[str, Any]:
    return load_yaml(PROFILES_FILE)


def profile(engine: str) -> dict[str, Any]:
    """The raw profile of ``engine`` from profiles.yaml."""
    return _profiles()[engine]


# Placeholders whose value depends on where the Spark stands (alone or among Sparks serving
# one model) or on the draft model: an operator may write the same value the deploy would (a
# recipe's `-tp 1` on one Spark, its `"model": "org/draft"` with draft_model_repo set to that
# repository); the plan checks that it agrees (sparkdeploy/engine_plan/effective.py).
PLACED = frozenset({"nodes", "rank", "head", "dist_port", "interface", "draft", "tp", "pp"})
# The parallel layout: the operator may choose it in engine.args (`-tp 1 -pp 3`); the plan
# checks that tensor x pipeline parallel size is the number of Sparks (one GPU each).
LAYOUT = frozenset({"tp", "pp"})


def multinode_section(engine: str, ray: bool = False) -> dict[str, Any]:
    """The profile's multi-node section: its own launcher (``native``: every Spark runs the
    server with its rank), or with ``ray`` its ``ray`` section's launcher, port, args and
    worker_args (the environment stays the section's)."""
    section = profile(engine)["multinode"]
    chosen = section.get("ray") if ray else None
    return {**section, **chosen} if chosen else dict(section)


def managed_placeholders(engine: str, version: str) -> dict[str, str]:
    """
    What the deploy derives from settings -> the placeholder behind it, keyed the way
    ``Catalogue.read`` names what a flag sets: ``--flag`` (canonical), or ``--flag.key`` for
    one key of a JSON flag (the draft model inside ``--speculative-config``).

    A profile flag (or JSON key) is managed when its value holds a ``{placeholder}``: the
    model folder, bind address, port, context length, draft folder, the pair's addresses ...
    """
    return placeholders_of(load_catalogue(engine, version))


def placeholders_of(catalogue: Catalogue) -> dict[str, str]:
    """``managed_placeholders`` of the release ``catalogue`` describes."""
    engine_profile = profile(catalogue.engine)
    multinode = engine_profile["multinode"]
    ray = multinode.get("ray") or {}
    sections = (
        engine_profile["managed"],
        engine_profile["speculative"]["args"],
        multinode["args"],
        multinode["worker_args"],
        ray.get("args") or {},
        ray.get("worker_args") or {},
    )
    managed: dict[str, str] = {}
    for section in sections:
        for flag, value in section.items():
            canonical = catalogue.canonical(flag)
            value = value["value"] if is_scoped(value) else value
            parts = value.items() if isinstance(value, dict) else [("", value)]
            for key, item in parts:
                names = PLACEHOLDER.findall(str(item))
                if names:
                    managed.setdefault(f"{canonical}.{key}" if key else canonical, names[0])
    return managed


def placeholder_meanings() -> dict[str, str]:
    """Placeholder -> the setting it stands for (profiles.yaml ``placeholders``)."""
    return dict(_profiles()["placeholders"])


def managed_flags(engine: str, version: str, placed: bool = True) -> dict[str, str]:
    """``managed_placeholders`` with the setting each stands for; ``placed=False`` leaves out
    the ones (``PLACED``) the plan checks against the Spark's place instead."""
    meaning = _profiles()["placeholders"]
    return {
        key: meaning[name]
        for key, name in managed_placeholders(engine, version).items()
        if placed or name not in PLACED
    }


def spellings(catalogue: Catalogue, flag: str) -> list[str]:
    canonical = catalogue.canonical(flag)
    return [canonical, *catalogue.aliases(canonical)]
