"""
What the engine's container mounts: the model folders at the same path, and the operator's
extra mounts (engine.mounts), files (engine.files) and mods folder (engine.mods), each
read-only, none covering another.

Room: engine_plan. May import config and knowledge; knows nothing of hosts, pyinfra or how
the files are written on the Spark (deploys/engine/serve.py writes them).
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

from sparkdeploy.config.paths import MODS_MOUNT, shipped_path
from sparkdeploy.engine_plan.planners import PlanInput, Planned


@dataclass(frozen=True)
class Mounts:
    """The container's mounts, and whether engine.mods are shipped (they run at start)."""

    folders: tuple[str, ...]  # host folders mounted read-only at the same path
    extra: tuple[tuple[str, str], ...]  # engine.mounts/files/mods: (host, container), ro
    mods: bool


def plan_mounts(given: PlanInput) -> Planned[Mounts]:
    """The model folders, engine.mounts, the engine.files and the mods folder."""
    name = given.name
    extra = [(mount.host, mount.container) for mount in given.settings.mounts]
    extra += [
        (shipped_path(name, item.kind, item.name), item.dest)
        for item in given.shipped
        if item.kind == "file"
    ]
    mods = any(item.kind == "mod" for item in given.shipped)
    if mods:
        extra.append((posixpath.dirname(shipped_path(name, "mod", "x")), MODS_MOUNT))
    mounts = Mounts(given.folders, tuple(extra), mods)
    return Planned(mounts, tuple(_mount_problems(extra, given.folders)))


def _mount_problems(extra: list[tuple[str, str]], folders: tuple[str, ...]) -> list[str]:
    """Extra mounts (engine.mounts, engine.files) that would cover (or sit inside) the
    model folders' mounts, or each other."""
    problems = []
    for _, container in extra:
        for folder in folders:
            if _overlap(container, folder):
                problems.append(
                    f"engine.mounts/files: container path {container} would cover the model "
                    f"folder mount {folder}; mount it elsewhere, such as /workspace/extra"
                )
    targets = [container for _, container in extra]
    for target in sorted({t for t in targets if targets.count(t) > 1}):
        problems.append(f"engine.mounts/files: {target} is mounted twice; give each its own")
    return problems


def _overlap(path: str, other: str) -> bool:
    return path == other or path.startswith(other + "/") or other.startswith(path + "/")
