"""The engine image probe: the ID of the plan's image on the Spark, what spark-fetch read from
that image (kept by ID), and whether a last good engine configuration is kept
(spark-engine-rollback)."""

from __future__ import annotations

import json
from dataclasses import dataclass

from sparkdeploy.config.paths import IMAGE_READINGS, ROLLBACK_KEPT
from sparkdeploy.escape import shell
from sparkdeploy.facts.probes import HostQuery, kind_of, last_value


@dataclass(frozen=True)
class EngineImage:
    image_id: str = ""  # "" when the image is not there
    reading: dict | None = None  # None when it was not read yet (or the reading is torn)
    kept: bool = False


def parse_reading(lines: list[str]) -> dict | None:
    """The last ``reading`` line's JSON; None when there is none or it is torn (a torn cache
    file: the image is read again)."""
    readings = [line.partition(" ")[2] for line in lines if kind_of(line) == "reading"]
    if not readings:
        return None
    try:
        reading: dict = json.loads(readings[-1])
    except ValueError:
        return None
    return reading


class Image:
    """
    The engine image: its ID, its reading and the rollback's kept configuration.

    Sample output of the command::

        image sha256:9f2a6c1e0b7d4c5a8e3f1b2d6c7a8e9f0a1b2c3d4e5f60718293a4b5c6d7e8f9
        reading {"id": "sha256:9f2a...", "engine": "sglang", "release": "0.5.10", "ray": false, "flags": ["--port"]}
        kept 1
    """  # noqa: E501 -- the sample output is verbatim (tests parse it)

    kinds = ("image", "reading", "kept")

    def lines(self, query: HostQuery) -> list[str]:
        if not query.image:
            return []
        return [
            f"id=$(docker image inspect -f '{{{{.Id}}}}' {shell(query.image)} 2>/dev/null)",
            'printf "image %s\\n" "${id:--}"',
            f'r={IMAGE_READINGS}/"${{id#sha256:}}".json',
            '[ -z "$id" ] || [ ! -s "$r" ] || printf "reading %s\\n" "$(cat "$r")"',
            f"[ -e {ROLLBACK_KEPT} ] && echo 'kept 1' || echo 'kept 0'",
        ]

    def parse(self, lines: list[str]) -> EngineImage:
        image = last_value(lines, "image") or "-"
        return EngineImage(
            image_id="" if image == "-" else image,
            reading=parse_reading(lines),
            kept=last_value(lines, "kept") == "1",
        )
