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
    """The ``--flag`` names among command-line words (``--flag=value`` counts as ``--flag``)."""
    return [word.split("=", 1)[0] for word in words if word.startswith("--") and len(word) > 2]


def image_problems(plan: EnginePlan, reading: ImageReading) -> tuple[list[str], list[str]]:
    """Problems (the unit may not be written) and warnings of ``plan`` against its image."""
    problems: list[str] = []
    warnings: list[str] = []
    found = f"{reading.engine} {reading.release}" if reading.release else reading.engine
    where = f"{plan.image} ({reading.id[:19]}, {found})"
    if not reading.release:
        warnings.append(
            f"{where}: no {plan.engine} distribution was found in the image, so its release "
            f"is unknown; the flags were checked against the {plan.version} catalogue"
        )
    elif reading.release != plan.version:
        warnings.append(
            f"{where} holds {plan.engine} {reading.release}, but the plan was checked against "
            f"the {plan.version} catalogue: set engine.version: {reading.release!r} so the "
            "rules and catalogue match the image"
        )
    if reading.flags is None:
        warnings.append(
            f"{where}: its engine's --help gave no flag list ({reading.help_error or 'no output'}); "
            "only the catalogue check stands"
        )
    else:
        fix = (
            f"set engine.version: {reading.release!r}, the release the image holds"
            if reading.release and reading.release != plan.version
            else "remove it from engine.args, or choose an image whose release has it"
        )
        for flag in sorted(set(flag_names(plan.flags))):
            if flag not in reading.flags:
                problems.append(
                    f"{flag}: the engine in {where} does not accept it (its --help lists no "
                    f"such flag); the {plan.version} catalogue did. Fix: {fix}"
                )
    ray_units = any(service.role.startswith("ray-") for service in plan.services)
    if ray_units and not reading.ray and any(item.kind == "mod" for item in plan.shipped):
        warnings.append(
            f"{where} has no `ray` program: engine.mods run before `ray start` in every Ray "
            "container and must install it (e.g. pip install 'ray[default]'), or Ray fails "
            "with `ray: not found`"
        )
    elif ray_units and not reading.ray:
        problems.append(
            f"{where} has no `ray` program, which the Ray units engine.args ask for "
            "(--distributed-executor-backend ray) run: drop that flag to run vLLM's own "
            "multi-node mode, which needs no Ray, or choose an image with Ray"
        )
    return problems, warnings
