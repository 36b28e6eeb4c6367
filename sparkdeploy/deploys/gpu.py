"""
GPU services taking turns with the engine (gpu_services): a unit per service with the engine
unit's memory guard and `Conflicts=` with the engine and every other GPU service, the map and
the command (spark-gpu-switch) that hand the GPU from one to the next, and a sudoers file per
name that lets the operator run it for that name and nothing else. The deploy starts none of
them: the engine holds the GPU after a deploy unless the operator handed it to a service.
"""

from __future__ import annotations

import json

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.operations import systemd
from pyinfra.operations.util import any_changed

from sparkdeploy.config.gpu_services import ENGINE, GpuService
from sparkdeploy.config.paths import (
    DROP_CACHES,
    GPU_SERVICES_MAP,
    GPU_SUDOERS,
    GPU_SWITCH_BIN,
    GPU_UNIT,
    MEMORY_GUARD,
    gpu_switch_names,
)
from sparkdeploy.config.spark import SparkSettings
from sparkdeploy.deploys.engine.units import DOCKER
from sparkdeploy.deploys.managed import managed_file
from sparkdeploy.engine_plan.plan import EnginePlan, gpu_container
from sparkdeploy.escape import systemd_word
from sparkdeploy.render import file_text, render

# The engine's readiness for spark-gpu-switch: /health answers 200 without the API key on
# both engines (sglang/srt/utils/auth.py; vLLM's PUBLIC_ENDPOINTS) once the server is up.
ENGINE_HEALTH_PATH = "/health"


def gpu_units(spark: SparkSettings, plan: EnginePlan | None) -> dict[str, str]:
    """Every GPU unit of the Spark by its spark-gpu-switch name: the engine's, the services'."""
    units = {ENGINE: plan.unit} if plan is not None else {}
    return units | {service.name: service.unit for service in spark.gpu_services}


def service_unit(spark: SparkSettings, plan: EnginePlan | None, service: GpuService) -> str:
    """The unit of one GPU service: the engine's memory guard around `docker run`, and
    Conflicts= with the engine's units and every other GPU service."""
    others = [unit for name, unit in gpu_units(spark, plan).items() if name != service.name]
    engine_units = list(plan.units) if plan is not None else []
    start = [DOCKER, *gpu_container(service.container, pull="missing"), service.image]
    return render(
        "gpu-service.service.j2",
        service=service,
        conflicts=list(dict.fromkeys([*engine_units, *others])),
        drop_caches=DROP_CACHES,
        memory_guard=MEMORY_GUARD,
        guard_timeout=spark.memory_guard_timeout,
        start=[systemd_word(word) for word in [*start, *service.command]],
    )


def switch_map(spark: SparkSettings, plan: EnginePlan | None) -> str:
    """What spark-gpu-switch reads: each name's unit, port, health path and memory need."""
    services = {}
    if plan is not None:
        services[ENGINE] = {
            "unit": plan.unit,
            "port": plan.port,
            "health": ENGINE_HEALTH_PATH,
            "memory_gb": spark.memory_guard_gb,
        }
    for service in spark.gpu_services:
        services[service.name] = {
            "unit": service.unit,
            "port": service.port,
            "health": service.health,
            "memory_gb": service.memory_gb,
        }
    document = {"memory_timeout": spark.memory_guard_timeout, "services": services}
    return json.dumps(document, indent=1, sort_keys=True) + "\n"


@deploy("Let GPU services take turns with the engine")
def take_turns() -> None:
    spark: SparkSettings = host.data.spark
    plan: EnginePlan | None = host.data.get("engine_plan")
    if not spark.gpu_services:
        return  # files of services no longer declared are retired with the engine's
    managed_file(
        name="Install spark-gpu-switch", path=GPU_SWITCH_BIN, content=file_text("spark-gpu-switch")
    )
    managed_file(
        name="Write the GPU services spark-gpu-switch hands the GPU to",
        path=GPU_SERVICES_MAP,
        content=switch_map(spark, plan),
    )
    units = [
        managed_file(
            name=f"Write {service.unit}",
            path=GPU_UNIT.format(unit=service.unit),
            content=service_unit(spark, plan, service),
        )
        for service in spark.gpu_services
    ]
    systemd.daemon_reload(name="Reload systemd units", _if=any_changed(*units))
    for name in gpu_switch_names(spark):
        managed_file(
            name=f"Let {spark.user} hand the GPU to {name} (sudoers)",
            path=GPU_SUDOERS.format(name=name),
            content=render(
                "gpu-switch-sudoers.j2", user=spark.user, holder=name, switch=GPU_SWITCH_BIN
            ),
        )
