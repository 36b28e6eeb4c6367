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
        stands = (
            "no check of the flags stands (engine.launch image)"
            if plan.launch == "image"
            else f"only the catalogue check stands{left}"
        )
        return [
            f"{where}: its engine's --help gave no flag list ({reading.help_error or 'no output'}); "
            + stands
        ]
    return [
        f"{flag}: the engine in {where} does not accept it (its --help lists no such flag); "
        f"{_checked(plan, flag)}. Fix: {_fix(plan, reading)}"
        for flag in names
        if flag not in reading.flags
    ]


def _checked(plan: EnginePlan, flag: str) -> str:
    """What checked ``flag`` before connecting (nothing, with engine.launch image)."""
    if plan.launch == "image":
        return "engine.launch image passes engine.args as written"
    return _catalogued(plan, flag)


def _fix(plan: EnginePlan, reading: ImageReading) -> str:
    """How to satisfy the image's flag list."""
    if plan.launch == "image":
        return "remove it from engine.args, or choose an image whose launcher has it"
    if reading.release and nearest_release(plan.engine, reading.release) != plan.version:
        return f"set engine.version: {reading.release!r}, the release the image holds"
    return "remove it from engine.args, or choose an image whose release has it"


def image_problems(plan: EnginePlan, reading: ImageReading) -> tuple[list[str], list[str]]:
    """Problems (the unit may not be written) and warnings of ``plan`` against its image."""
    found = f"{reading.engine} {reading.release}" if reading.release else reading.engine
    where = f"{plan.image} ({reading.id[:19]}, {found})"
    # engine.launch image: no catalogue checked the flags, so the release does not matter.
    warnings = [] if plan.launch == "image" else _release_warnings(plan, reading, where)
    problems: list[str] = []
    # With the image's flag list, a flag it does not list is refused; without, said.
    (problems if reading.flags is not None else warnings).extend(_unlisted(plan, reading, where))
    ray_problems, ray_warnings = _ray_findings(plan, reading, where)
    return problems + ray_problems, warnings + ray_warnings


def _ray_findings(
    plan: EnginePlan, reading: ImageReading, where: str
) -> tuple[list[str], list[str]]:
    """An image without `ray` for Ray units: a problem, or a warning when engine.mods (which
    run before `ray start`) may install it."""
    ray_units = any(service.role.startswith("ray-") for service in plan.services)
    if not ray_units or reading.ray:
        return [], []
    if any(item.kind == "mod" for item in plan.shipped):
        return [], [
            f"{where} has no `ray` program: engine.mods run before `ray start` in every Ray "
            "container and must install it (e.g. pip install 'ray[default]'), or Ray fails "
            "with `ray: not found`"
        ]
    return [
        f"{where} has no `ray` program, which the Ray units engine.args ask for "
        "(--distributed-executor-backend ray) run: drop that flag to run vLLM's own "
        "multi-node mode, which needs no Ray, or choose an image with Ray"
    ], []
