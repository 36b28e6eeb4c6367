"""
The plan against the image that runs it. The flags were checked before connecting, against
the catalogue of the release the inventory (or images.yaml) names; once the image is on the
Spark, what it holds is read from it (spark-fetch: its engine's release, whether it has
`ray`, and the flags its engine's --help lists) and the plan is checked again, against that.
Pure: the reading comes in as data.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sparkdeploy.engine_plan.plan import EnginePlan
from sparkdeploy.knowledge.flags import CatalogueNotFound, load_catalogue, nearest_release


@dataclass(frozen=True)
class ImageReading:
    """What spark-fetch read from an image (IMAGE_READINGS/<id>.json on the Spark)."""

    id: str
    engine: str
    release: str  # "" when the engine's distribution was not found in the image
    ray: bool
    flags: frozenset[str] | None  # None: the engine's --help did not answer
    help_error: str = ""
    repo_digests: tuple[str, ...] = ()

    @classmethod
    def of(cls, data: dict[str, Any]) -> ImageReading:
        flags = data.get("flags")
        return cls(
            id=str(data.get("id", "")),
            engine=str(data.get("engine", "")),
            release=str(data.get("release", "")),
            ray=bool(data.get("ray")),
            flags=frozenset(flags) if isinstance(flags, list) else None,
            help_error=str(data.get("help_error", "")),
            repo_digests=tuple(data.get("repo_digests") or ()),
        )


def flag_names(words: tuple[str, ...]) -> list[str]:
    """The ``--flag`` names among command-line words (``--flag=value`` and a dotted key,
    ``--compilation-config.mode``, count as the flag itself: --help lists only that)."""
    return [
        word.split("=", 1)[0].split(".", 1)[0]
        for word in words
        if word.startswith("--") and len(word) > 2
    ]


def _known(plan: EnginePlan, flag: str) -> bool:
    """Whether the catalogue the plan was checked with reads ``flag``."""
    try:
        return load_catalogue(plan.engine, plan.version).read(flag) is not None
    except CatalogueNotFound:
        return False


def _catalogued(plan: EnginePlan, flag: str) -> str:
    """What the plan's catalogue said of ``flag``: it did, or it left it to the image."""
    if _known(plan, flag):
        return f"the {plan.version} catalogue did"
    return f"the {plan.version} catalogue does not know it either, and left it to the image"


def _release_warnings(plan: EnginePlan, reading: ImageReading, where: str) -> list[str]:
    """The image's release, when unknown or when another catalogue would check it."""
    if not reading.release:
        return [
            f"{where}: no {plan.engine} distribution was found in the image, so its release "
            f"is unknown; the flags were checked against the {plan.version} catalogue"
        ]
    if nearest_release(plan.engine, reading.release) != plan.version:
        return [
            f"{where} holds {plan.engine} {reading.release}, but the plan was checked against "
            f"the {plan.version} catalogue: set engine.version: {reading.release!r} so the "
            "rules and catalogue match the image"
        ]
    return []


def _unlisted(plan: EnginePlan, reading: ImageReading, where: str) -> list[str]:
    """The flags of the plan the image's --help does not list (a problem each); with no
    list, a warning, naming the flags that neither the catalogue nor the image vouches for."""
    names = sorted(set(flag_names(plan.flags)))
    if reading.flags is None:
        unvouched = [flag for flag in names if not _known(plan, flag)]
        left = (
            f"; nothing vouches for {', '.join(unvouched)}: the engine's own parser decides "
            "them when it starts"
            if unvouched
            else ""
        )
        return [
            f"{where}: its engine's --help gave no flag list ({reading.help_error or 'no output'}); "
            f"only the catalogue check stands{left}"
        ]
    fix = (
        f"set engine.version: {reading.release!r}, the release the image holds"
        if reading.release and nearest_release(plan.engine, reading.release) != plan.version
        else "remove it from engine.args, or choose an image whose release has it"
    )
    return [
        f"{flag}: the engine in {where} does not accept it (its --help lists no such flag); "
        f"{_catalogued(plan, flag)}. Fix: {fix}"
        for flag in names
        if flag not in reading.flags
    ]


def image_problems(plan: EnginePlan, reading: ImageReading) -> tuple[list[str], list[str]]:
    """Problems (the unit may not be written) and warnings of ``plan`` against its image."""
    found = f"{reading.engine} {reading.release}" if reading.release else reading.engine
    where = f"{plan.image} ({reading.id[:19]}, {found})"
    problems: list[str] = []
    warnings = _release_warnings(plan, reading, where)
    # With the image's flag list, a flag it does not list is refused; without, said.
    (problems if reading.flags is not None else warnings).extend(_unlisted(plan, reading, where))
    if any(service.role.startswith("ray-") for service in plan.services) and not reading.ray:
        problems.append(
            f"{where} has no `ray` program, which the Ray units engine.args ask for "
            "(--distributed-executor-backend ray) run: drop that flag to run vLLM's own "
            "multi-node mode, which needs no Ray, or choose an image with Ray"
        )
    return problems, warnings
