"""
Flag lists read from images (``make catalogue IMAGE=...``, tools/catalogue/image.py): the
flags an image's engine lists for ``--help``, read by the same script and parser spark-fetch
uses on the Spark (files/fetch_docker.py ``read_image``), kept in
``catalogues/images/<engine>-<image>.json``. An engine with ``launch: image`` has its flags
checked by name against the list of its image before any host is touched; without one the
image decides, with a warning, and the Spark's own reading after the pull stands.

A list answers for the image it was read from: the reference it was built for, the image's
ID (``sha256:<64 hex>``, an image built on the Spark) or one of its registry digests.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

IMAGE_CATALOGUES_DIR = Path(__file__).resolve().parent / "catalogues" / "images"
UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True)
class ImageCatalogue:
    """One image's flag list, as read from the image."""

    engine: str
    image: str  # the reference it was read for
    id: str  # the image ID it was read from
    repo_digests: tuple[str, ...]
    release: str  # the engine release found in the image ("" when none)
    flags: frozenset[str]
    path: Path

    def answers_for(self, image: str) -> bool:
        """Whether ``image`` (as the inventory names it) is the image this list was read
        from: the same reference, its ID, or a reference carrying one of its digests."""
        digest = image.split("@", 1)[1] if "@" in image else ""
        digests = {entry.split("@", 1)[-1] for entry in self.repo_digests}
        return image in (self.image, self.id) or (bool(digest) and digest in digests)


def catalogue_file_name(engine: str, image: str) -> str:
    """The file a flag list read from ``image`` is kept in (one per engine and image)."""
    return f"{engine}-{UNSAFE.sub('_', image).strip('_')}.json"


def catalogue_of(data: dict[str, Any], path: Path) -> ImageCatalogue:
    """An image's flag list from its file's JSON (``path`` names it in messages)."""
    source = data.get("source") or {}
    return ImageCatalogue(
        engine=str(data["engine"]),
        image=str(data["image"]),
        id=str(source.get("id", "")),
        repo_digests=tuple(source.get("repo_digests") or ()),
        release=str(data.get("release", "")),
        flags=frozenset(data["flags"]),
        path=path,
    )


def find_image_catalogue(
    engine: str, image: str, folder: Path = IMAGE_CATALOGUES_DIR
) -> ImageCatalogue | None:
    """The flag list read from ``image`` for ``engine``, None when none was built."""
    for path in sorted(folder.glob(f"{engine}-*.json")):
        found = catalogue_of(json.loads(path.read_text(encoding="utf-8")), path)
        if found.engine == engine and found.answers_for(image):
            return found
    return None
