"""
The NCCL settings of Sparks cabled in a ring (ring.yaml, each with its source). Knows no
host, plan or inventory: the number of Sparks in, the settings out.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

from sparkdeploy.knowledge import load_yaml

RING_FILE = Path(__file__).resolve().parent / "ring.yaml"


@dataclass(frozen=True)
class RingSetting:
    name: str
    value: str
    nodes: int  # the smallest ring it applies to
    source: str


@cache
def _settings() -> tuple[RingSetting, ...]:
    return tuple(
        RingSetting(str(entry["name"]), str(entry["value"]), int(entry["nodes"]), entry["source"])
        for entry in load_yaml(RING_FILE)["env"]
    )


def ring_env(nodes: int) -> tuple[RingSetting, ...]:
    """The settings of a ring of ``nodes`` Sparks, in ring.yaml's order."""
    return tuple(setting for setting in _settings() if nodes >= setting.nodes)
