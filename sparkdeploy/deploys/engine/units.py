"""
The text of an engine's systemd units: the `docker run` (or `docker exec`) command line of
each service of the plan, escaped word by word for systemd, and the unit around it.
"""

from __future__ import annotations

from sparkdeploy.config.paths import (
    DROP_CACHES,
    HF_ENV_FILE,
    MEMORY_GUARD,
    MODEL_CHECK_BIN,
    NCCL_ENV,
    RAY_WAIT,
)
from sparkdeploy.config.spark import SparkSettings
from sparkdeploy.engine_plan.plan import EnginePlan, EngineService, gpu_container
from sparkdeploy.escape import systemd_word
from sparkdeploy.render import render

DOCKER = "/usr/bin/docker"
RAY_WAIT_TIMEOUT = 600  # report 004: forming the Ray cluster takes about 2 minutes


def docker_run(plan: EnginePlan, service: EngineService, env_files: list[str]) -> list[str]:
    """
    The `docker run` command line of a service with a container of its own: the options
    the deploy manages (on a multi-node plan with what NCCL needs to use the RDMA devices,
    ``plan.rdma_args`` from knowledge/fabric.yaml), the model folders and ``engine.mounts``
    read-only, the entrypoint when the service replaces the image's, ``engine.docker_args``
    (allowed options only, one ``--option=value`` word each), the image, then the service's
    command.
    """
    words = [DOCKER, *gpu_container(service.container, docker_args=plan.docker_args)]
    words += plan.rdma_args
    for env_file in env_files:
        words += ["--env-file", env_file]
    for folder in plan.mounts:
        words += ["-v", f"{folder}:{folder}:ro"]
    for host, container in plan.extra_mounts:
        words += ["-v", f"{host}:{container}:ro"]
    if service.entrypoint:
        words += ["--entrypoint", service.entrypoint]
    return [*words, *plan.docker_args, plan.image, *service.command]


def exec_pid_file(service: EngineService) -> str:
    """Where, in the container, a `docker exec` service keeps its pid: docker does not pass
    a signal to the command it runs, so the unit's stop signals it by that pid."""
    return f"/tmp/{service.unit_base}.pid"


def start_command(plan: EnginePlan, service: EngineService, env_files: list[str]) -> list[str]:
    if not service.part_of:
        return docker_run(plan, service, env_files)
    record = f'echo $$ > {exec_pid_file(service)} && exec "$@"'
    return [DOCKER, "exec", service.container, "sh", "-c", record, "sh", *service.command]


def stop_command(service: EngineService) -> list[str]:
    if not service.part_of:
        return [DOCKER, "stop", "-t", "60", service.container]
    signal = f'kill -TERM "$(cat {exec_pid_file(service)})"'
    return [DOCKER, "exec", service.container, "sh", "-c", signal]


def description(plan: EnginePlan, service: EngineService) -> str:
    """The unit's Description=: the engine and model, and on several Sparks this node's
    rank among them (from 0, the head) and whether it serves the API (only the head does)."""
    serving = f"{plan.engine} serving {plan.served_model_name}"
    node = ""
    if plan.nodes > 1:
        node = f", rank {plan.rank} of {plan.nodes} Sparks" + (
            ", serving the API" if service.serves_api else ", no API"
        )
    return {
        "server": serving + node,
        "ray-head": f"Ray head of {plan.nodes} Sparks for {serving}",
        "ray-worker": f"Ray worker {plan.rank} of {plan.nodes} Sparks for {serving}",
    }[service.role]


def unit_text(plan: EnginePlan, service: EngineService, spark: SparkSettings, env_file: str) -> str:
    """The systemd unit of one service of the plan."""
    multinode = plan.nodes > 1
    env_files = [HF_ENV_FILE, *([NCCL_ENV] if multinode else []), env_file]
    if plan.api_key_file and plan.engine == "vllm":
        env_files.append(plan.api_key_file)  # VLLM_API_KEY (vllm/envs.py), root-only
    wait = [RAY_WAIT, *service.wait, "--timeout", str(RAY_WAIT_TIMEOUT)] if service.wait else []
    return render(
        "engine.service.j2",
        plan=plan,
        service=service,
        description=description(plan, service),
        hf_env=HF_ENV_FILE,
        nccl_env=NCCL_ENV if multinode else None,
        drop_caches=DROP_CACHES,
        memory_guard=MEMORY_GUARD,
        guard_gb=spark.memory_guard_gb,
        guard_timeout=spark.memory_guard_timeout,
        model_check=MODEL_CHECK_BIN,
        model_checks=[
            (systemd_word(folder), systemd_word(want), "1" if tokenizer else "0")
            for folder, want, tokenizer in spark.model_folders()
        ],
        wait=[systemd_word(word) for word in wait],
        start=[systemd_word(word) for word in start_command(plan, service, env_files)],
        stop=[systemd_word(word) for word in stop_command(service)],
        start_timeout=spark.memory_guard_timeout + 120 + (RAY_WAIT_TIMEOUT if wait else 0),
    )


def health_words(
    unit: str,
    port: int,
    timeout: int,
    nccl: bool = False,
    api: bool = True,
    key_file: str = "",
    container: str = "",
) -> list[str]:
    """The arguments of spark-engine-health for one unit: its API on ``port`` (``api``),
    asked with the API key in ``key_file`` when the engine requires one (sent only to a port
    the engine's ``container`` holds), and, on a rank of a multi-node engine (``nccl``),
    NCCL's network in its journal."""
    words = ["--port", str(port)] if api else ["--no-api"]
    if api and key_file:
        words += ["--key-file", key_file, "--container", container or unit.removesuffix(".service")]
    words += ["--nccl"] if nccl else []
    return [*words, "--unit", unit, "--timeout", str(timeout)]
