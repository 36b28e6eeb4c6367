"""
Engine images (images.yaml, with sources): per engine, the default image, exact images mapped
to a release, and families of images that behave alike: which of their tags are fixed
releases (and which engine release each holds), which move with every push, and whether the
image's ENTRYPOINT starts the engine or the server must be given as the container command.

    info = describe_image("vllm", "nvcr.io/nvidia/vllm:26.05-py3")
    info.family, info.version, info.launch, info.wrapper
    # 'ngc-vllm', '0.20.1', 'command', '/opt/nvidia/nvidia_entrypoint.sh'
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from sparkdeploy.knowledge import load_yaml

IMAGES_FILE = Path(__file__).resolve().parent / "images.yaml"
ENGINES = ("sglang", "vllm")
LAUNCHES = ("entrypoint", "command")
IMAGE_ID = re.compile(r"sha256:[0-9a-f]{64}")
FAMILY_KEYS = {
    "repositories",
    "launch",
    "wrapper",
    "release_tag",
    "releases",
    "fixed_tags",
    "dev_tag",
    "preview_tags",
}


@lru_cache(maxsize=1)
def images() -> dict[str, Any]:
    """images.yaml: per engine the server command, default image, exact images, families."""
    return load_yaml(IMAGES_FILE)


def image_tag(image: str) -> str | None:
    """The tag of ``repo[:tag][@digest]``; None when there is none (or for an image ID)."""
    if is_image_id(image):
        return None
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    return last.split(":", 1)[1] if ":" in last else None


def image_repository(image: str) -> str:
    """The name of ``repo[:tag][@digest]`` without tag and digest, and without the
    ``docker.io/`` (and ``docker.io/library/``) prefix docker adds to Hub images."""
    name = image.split("@", 1)[0]
    head, _, last = name.rpartition("/")
    repository = f"{head}/{last.split(':', 1)[0]}" if head else last.split(":", 1)[0]
    for prefix in ("docker.io/library/", "docker.io/", "index.docker.io/"):
        repository = repository.removeprefix(prefix)
    return repository


def is_image_id(image: str) -> bool:
    """An image ID (``sha256:<64 hex>``): how an image built on the Spark itself is pinned."""
    return bool(IMAGE_ID.fullmatch(image))


def has_digest(image: str) -> bool:
    return "@sha256:" in image


@dataclass(frozen=True)
class ImageInfo:
    """What images.yaml knows about one image of one engine."""

    engine: str
    image: str
    family: str | None  # the family id, None for an image of no known family
    pinned: str  # how it is pinned ("" when it is not): digest, image ID, release tag, ...
    version: str | None  # the catalogued release its flags are checked against, None: unknown
    launch: str | None  # entrypoint | command, None when unknown
    wrapper: str  # the image's wrapper ENTRYPOINT, kept in front of the command ("" if none)
    rolling_tag: bool  # a tag that moves with every push
    # The engine build as PEP 440 orders it, for the GB10 rules' release scopes: the release,
    # or a development build (0.24.0.dev0; 0.5.10.dev0 for a build after 0.5.9); None: unknown.
    release: str | None = None
    preview: bool = False  # a preview tag (a build for a model or a feature), not a release


def families(engine: str) -> dict[str, dict[str, Any]]:
    return images()[engine].get("families") or {}


def family_of(engine: str, image: str) -> str | None:
    """The family of ``engine`` whose repositories hold ``image``."""
    if is_image_id(image):
        return None
    repository = image_repository(image)
    for family, entry in families(engine).items():
        if repository in entry["repositories"]:
            return family
    return None


def engine_of(image: str) -> str | None:
    """The engine whose families hold ``image`` (None when no family does)."""
    return next((engine for engine in ENGINES if family_of(engine, image)), None)


def _rolling_patterns() -> list[str]:
    return list(images()["rolling_tags"]["patterns"])


def how_to_pin() -> str:
    return str(images()["rolling_tags"]["how_to_pin"]).strip()


@dataclass(frozen=True)
class _TagMatch:
    """What an image's tag says within its family's entry of images.yaml."""

    release: re.Match[str] | None  # a release tag (its group is the release)
    dev: re.Match[str] | None  # a development build's tag (its group is the base release)
    fixed: bool  # a tag that names one build (a dev tag, or one of fixed_tags)
    rolling: bool  # a tag that moves (latest, nightly, a family's unmatched tag)


def _match_tag(family: str | None, entry: dict[str, Any], tag: str | None) -> _TagMatch:
    """How ``tag`` reads in ``entry`` (the family's images.yaml entry, {} for none)."""
    text = tag or ""
    release = re.match(entry["release_tag"], text) if entry.get("release_tag") else None
    dev = re.match(entry["dev_tag"], text) if entry.get("dev_tag") else None
    fixed = bool(dev) or any(re.match(p, text) for p in entry.get("fixed_tags") or [])
    if family is not None:
        rolling = tag is not None and not release and not fixed
    else:
        rolling = tag is None or any(re.search(p, tag) for p in _rolling_patterns())
    return _TagMatch(release=release, dev=dev, fixed=fixed, rolling=rolling)


@lru_cache(maxsize=256)
def describe_image(engine: str, image: str) -> ImageInfo:
    """Family, pinning, release and launch of ``image`` as images.yaml knows them. Cached:
    images.yaml is shipped data read once, ImageInfo is frozen, and a plan asks about its
    image a dozen times."""
    family = family_of(engine, image)
    entry = families(engine).get(family or "", {})
    tag = image_tag(image)
    found = _match_tag(family, entry, tag)
    exact = (images()[engine].get("images") or {}).get(image)
    pinned = _pinning(
        image, known=exact is not None, release=bool(found.release), fixed=found.fixed
    )
    if not pinned and family is None and not found.rolling:
        pinned = "tag"
    build = _version(exact, found.release, entry.get("releases"))
    return ImageInfo(
        engine=engine,
        image=image,
        family=family,
        pinned=pinned,
        version=_catalogue_release(build),
        launch=entry.get("launch"),
        wrapper=entry.get("wrapper", ""),
        rolling_tag=found.rolling and tag is not None,
        release=build or (_after(found.dev.group(1)) if found.dev else None),
        preview=any(re.match(p, tag or "") for p in _previews(entry)),
    )


def _previews(entry: dict[str, Any]) -> list[str]:
    return list((entry.get("preview_tags") or {}).get("patterns") or [])


def _catalogue_release(build: str | None) -> str | None:
    """The release whose flags a build is checked against: itself, or for a development or
    pre-release build (0.24.0.dev0) the release it leads to (0.24.0)."""
    try:
        return Version(build).base_version if build and Version(build).is_prerelease else build
    except InvalidVersion:
        return build


def _after(base: str) -> str | None:
    """A development build after ``base`` as PEP 440 orders it: a pre-release of the next
    release (0.5.9 -> 0.5.10.dev0, setuptools-scm's numbering of commits after a tag)."""
    try:
        numbers = list(Version(base).release)
    except InvalidVersion:
        return None
    numbers[-1] += 1
    return ".".join(map(str, numbers)) + ".dev0"


def _pinning(image: str, known: bool, release: bool, fixed: bool) -> str:
    """How ``image`` is pinned, strongest first ("" when by nothing images.yaml knows)."""
    if is_image_id(image):
        return "image ID"
    if has_digest(image):
        return "digest"
    if known:
        return "known image"
    return "release tag" if release else "fixed tag" if fixed else ""


def _version(
    exact: dict[str, Any] | None, release: re.Match[str] | None, mapped: dict[str, Any] | None
) -> str | None:
    """The release an image holds: its own entry's, or its release tag's (through the
    family's ``releases`` map when it has one)."""
    if exact is not None:
        return str(exact["version"])
    if release is None:
        return None
    key = release.group(1)
    return key if mapped is None else (str(mapped[key]) if key in mapped else None)


def version_for_image(engine: str, image: str) -> str | None:
    """The release images.yaml maps ``image`` to (exact entry, else a release tag)."""
    return describe_image(engine, image).version


def pinning_problem(engine: str, image: str) -> str | None:
    """Why ``image`` is not pinned, with how to pin it; None when it is."""
    info = describe_image(engine, image)
    if info.pinned:
        return None
    tag = image_tag(image)
    if tag is None:
        return f"is not pinned: it has no tag (untagged means latest); {how_to_pin()}"
    preview = " (a preview build, not a release: set engine.version too)" if info.preview else ""
    return f"tag {tag!r} moves with every push, so it is not pinned{preview}; {how_to_pin()}"


def server_command(engine: str) -> tuple[str, ...]:
    """The command that starts ``engine``'s server in its image."""
    return tuple(images()[engine]["server"])


def reading_script(engine: str) -> str:
    """
    The ``sh`` script spark-fetch runs in a container of an image (no GPU, no network) to
    read what it holds: ``release R`` (the engine's installed distribution), ``ray yes|no``,
    then ``--- help`` and the engine's own --help (images.yaml ``introspection``).
    """
    found = images()[engine]["introspection"]
    package = found["package"]
    version = f"import importlib.metadata as m; print('release', m.version({package!r}))"
    return "\n".join(
        [
            f"python3 -c {shlex.quote(version)} 2>/dev/null || echo 'release '",
            "if command -v ray >/dev/null 2>&1; then echo 'ray yes'; else echo 'ray no'; fi",
            "echo '--- help'",
            " ".join(shlex.quote(word) for word in found["help"]) + " 2>&1",
        ]
    )
