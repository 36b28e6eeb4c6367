"""
What is known about the engines and the GB10, as data with its sources: the flag
catalogues of each engine release (read from the published wheels by tools/catalogue),
images, GB10 profiles and rules, flag renames, failure signatures and metric names, with
the small pure loaders that read them. Nothing here depends on the inventory or on pyinfra.
"""

from pathlib import Path
from typing import Any

import yaml

KNOWLEDGE_DIR = Path(__file__).resolve().parent
# libyaml's loader when PyYAML has it (its wheels do): the knowledge files are read on every
# run, and the pure-Python loader took about 0.4 s of each inventory load for them.
_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_yaml(path: Path) -> Any:
    """A knowledge file, parsed safely."""
    return yaml.load(path.read_text(encoding="utf-8"), Loader=_LOADER)  # noqa: S506 -- a safe loader
