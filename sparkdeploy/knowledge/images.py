"""
Engine images: per engine, the default image, the pattern of its release tags and the
images the field reports name, each mapped to the release whose flag catalogue checks it
(images.yaml, with sources).
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

IMAGES_FILE = Path(__file__).resolve().parent / "images.yaml"


@lru_cache(maxsize=1)
def images() -> dict[str, Any]:
    """images.yaml: per engine, the default image, release tag pattern and known images."""
    return yaml.safe_load(IMAGES_FILE.read_text(encoding="utf-8"))


def image_tag(image: str) -> str | None:
    """The tag of ``repo[:tag][@digest]``; None when there is none."""
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    return last.split(":", 1)[1] if ":" in last else None


def version_for_image(engine: str, image: str) -> str | None:
    """The catalogue version images.yaml maps ``image`` to (exact entry, else release tag)."""
    table = images()[engine]
    known = table.get("images") or {}
    if image in known:
        return str(known[image]["version"])
    tag = image_tag(image)
    match = re.match(table["release_tag"], tag or "")
    return match.group(1) if match else None
