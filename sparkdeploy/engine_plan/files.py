"""
The engine plan's files, and the registry of every file the deploy writes whole on a Spark.

``engine_files`` is what an ``EnginePlan`` writes (the container environment, a unit and a
sudoers file per service, the API key, the Prometheus files, engine.files and engine.mods);
``managed_files`` adds the Spark's own (``config.paths.host_files``) and is the only such
list: the coarse facts take their arguments from it and ``managed_file`` refuses any path
that is not in it, so a new file cannot be silently rewritten on every run.

May import config (paths, settings) and the plan; pure: no pyinfra, no host.
"""

from __future__ import annotations

from sparkdeploy.config.paths import (
    CONTAINER_ENV,
    ENGINE_SUDOERS,
    ENGINE_UNIT,
    PROMETHEUS_RULES,
    PROMETHEUS_SCRAPE,
    ManagedFile,
    host_files,
    shipped_path,
)
from sparkdeploy.config.spark import SparkSettings
from sparkdeploy.engine_plan.plan import EnginePlan


def engine_config_files(plan: EnginePlan) -> list[str]:
    """The files that make up how the engine runs (what a rollback puts back): the
    container environment, the units and the files shipped with it (engine.files, mods)."""
    return [
        CONTAINER_ENV.format(name=plan.name),
        *(ENGINE_UNIT.format(unit=service.unit) for service in plan.services),
        *(shipped_path(plan.name, item.kind, item.name) for item in plan.shipped),
    ]


def engine_files(plan: EnginePlan | None) -> list[ManagedFile]:
    """The files an engine plan writes: the container environment, a unit and a sudoers
    file per service, and the Prometheus files when the plan writes alerts."""
    if plan is None:
        return []
    # The container environment is root's alone (docker reads it as root): engine.env may
    # hold values other local users must not read (issue 22).
    files = [ManagedFile(CONTAINER_ENV.format(name=plan.name), mode="600", secret=True)]
    for service in plan.services:
        files += [
            ManagedFile(ENGINE_UNIT.format(unit=service.unit)),
            ManagedFile(
                ENGINE_SUDOERS.format(name=service.unit_base),
                mode="440",
                validate="visudo -cf {path}",
            ),
        ]
    if plan.api_key_file:
        files.append(ManagedFile(plan.api_key_file, mode="600", secret=True))
    if plan.writes_alerts:
        files += [
            ManagedFile(PROMETHEUS_RULES.format(name=plan.name)),
            ManagedFile(PROMETHEUS_SCRAPE.format(name=plan.name)),
        ]
    files += [
        ManagedFile(
            shipped_path(plan.name, item.kind, item.name),
            mode="755" if item.kind == "mod" else "644",
        )
        for item in plan.shipped
    ]
    return files


def managed_files(spark: SparkSettings, plan: EnginePlan | None) -> dict[str, ManagedFile]:
    """Every file the deploy writes whole on one Spark, by path: the only such list."""
    return {file.path: file for file in [*host_files(spark), *engine_files(plan)]}
