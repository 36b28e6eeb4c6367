"""
The engine service: one systemd unit per engine, rendered from the plan made (and checked
against the engine's flag catalogue and the GB10 rules) before any host was touched; a
sudoers file that lets the operator start, stop, restart and see it, and nothing else; and
a health check after every start.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass

from pyinfra import host, logger
from pyinfra.api import FunctionCommand, OperationError, StringCommand, deploy, operation
from pyinfra.operations import systemd
from pyinfra.operations.util import any_changed

from sparkdeploy.config.engine import laptop_api_key
from sparkdeploy.config.paths import (
    CONTAINER_ENV,
    ENGINE_HEALTH,
    ENGINE_SUDOERS,
    ENGINE_UNIT,
    HEALTH_FAILED,
    IMAGE_READINGS,
    LINK_TEST,
    MANAGED_HEADER,
    PROMETHEUS_RULES,
    PROMETHEUS_SCRAPE,
    RAY_WAIT,
    ROLLBACK_BIN,
    shipped_path,
)
from sparkdeploy.config.shipped import Shipped
from sparkdeploy.config.spark import SparkSettings
from sparkdeploy.deploys.engine.rollback import Keep, keep_of, kept_before_change
from sparkdeploy.deploys.engine.units import DOCKER, health_words, unit_text
from sparkdeploy.deploys.linktest import link_test_before_start
from sparkdeploy.deploys.managed import differs, managed_file
from sparkdeploy.engine_plan.alerts import template_values
from sparkdeploy.engine_plan.files import managed_files
from sparkdeploy.engine_plan.image_check import ImageReading, image_problems
from sparkdeploy.engine_plan.plan import EnginePlan
from sparkdeploy.escape import redact_lines, shell
from sparkdeploy.facts.host_state import HostState, host_state
from sparkdeploy.knowledge.signatures import diagnose
from sparkdeploy.render import file_text, render
from sparkdeploy.reports import notices
from sparkdeploy.reports.access import api_access
from sparkdeploy.reports.failures import SparkFailed, diagnose_command, expected

HEALTH_TIMEOUT = 1800  # a pair loading 118 GB and capturing CUDA graphs takes ~15 min


@expected("health check")
def _check_health(
    state, host, unit: str, words: list[str], nccl: bool = False, keep: Keep | None = None
) -> None:
    """Run spark-engine-health on the Spark with ``words`` (health_words): the API answers
    and, on a multi-node engine (``nccl``), NCCL chose RDMA according to the unit's journal.
    With ``keep`` (engine.rollback), a configuration that passes is kept as the last good
    one, and one that fails is replaced by the last good one, which must then pass."""
    ok, output = host.run_shell_command(StringCommand(ENGINE_HEALTH, *words), _sudo=True)
    if not ok:
        raise SparkFailed(
            _unhealthy(host, unit, output.output, keep),
            then=(diagnose_command(host.name), f"journalctl -u {unit} -n 300   (on the Spark)"),
        )
    said = [line for line in output.stdout.strip().splitlines() if " waiting for " not in line]
    for line in said[-2:] if nccl else said[-1:]:  # NCCL's network, then ready
        logger.info(f"{host.print_prefix}{line}")
    if keep:
        ok, output = host.run_shell_command(keep.save(), _sudo=True)
        if not ok:
            raise OperationError(f"the healthy configuration was not kept:\n{output.output}")
        logger.info(f"{host.print_prefix}{output.stdout.strip()}")


def _unhealthy(host, unit: str, said: str, keep: Keep | None) -> str:
    """Why ``unit`` failed its health check: the journal's lines (redacted), the known GB10
    failure signatures they match, and what rolling back (with ``keep``) did."""
    shown = "\n".join(redact_lines(said.splitlines()))  # the journal's lines
    found = diagnose(shown)
    known = "".join(f"\n  {diagnosis}" for diagnosis in found) or (
        "\n  no known GB10 failure signature matched; the journal lines are above"
    )
    why = found[0].signature.id if found else "not healthy"
    back = _roll_back(host, keep, why) if keep else ""
    return f"{unit} did not become healthy:\n{shown}{known}{back}"


def _roll_back(host, keep: Keep, why: str) -> str:
    """Put the last good configuration back and check it; what to add to the failure."""
    ok, output = host.run_shell_command(keep.restore(f"{keep.units[0]}: {why}"), _sudo=True)
    said = output.stdout.strip().splitlines()
    if ok:
        return (
            f"\nRolled back: {said[0] if said else 'the last good configuration'}; it is "
            f"healthy and serving again ({said[-1] if said else ''}). The new configuration "
            "stays in the inventory: fix it, or set engine.rollback: false to keep a failed "
            "start as it is."
        )
    if "nothing to go back to" in output.stdout:
        return "\nNo earlier configuration passed a health check on this Spark: nothing to roll back to."
    said = "\n".join(redact_lines(output.output.splitlines()))
    return f"\nRolling back did not help: the last good configuration failed too:\n{said}"


def unit_commands(
    unit: str, now: tuple[str, str], restart: bool, follows: bool, recheck: bool = False
) -> list[str] | None:
    """The systemctl commands that keep ``unit`` enabled and running, given ``now`` (its
    is-active, is-enabled): None when it is both and nothing asks for a restart or a check
    (``follows``: it was restarted with another unit; ``recheck``: its last check failed)."""
    active, enabled = now
    commands = [] if enabled == "enabled" else [f"systemctl enable {unit}"]
    if restart or active != "active":
        return [*commands, f"systemctl {'restart' if active == 'active' else 'start'} {unit}"]
    if not (follows or recheck) and enabled == "enabled":
        return None
    return commands


@operation()
def serving(
    unit: str,
    port: int,
    restart: bool = False,
    follows: bool = False,
    health: bool = True,
    timeout: int = HEALTH_TIMEOUT,
    nccl: bool = False,
    keep: Keep | None = None,
    key_file: str = "",
    container: str = "",
    gpu_with: str = "",
):
    """
    Keep an engine unit enabled at boot and running; (re)start it when asked or when it is
    not active, then wait (bounded, with progress) until it answers /v1/models and a
    one-token chat completion. A running unit whose last check failed (spark-engine-health
    records it) is checked again, not restarted: a crash-looping engine fails it again.

    + unit: the systemd unit
    + port: the engine's API port on 127.0.0.1
    + restart: restart even when it is running (its unit or environment changed)
    + follows: the unit it is part of was (re)started in this run, which restarted it too
      when it was running: check its health all the same
    + health: run the health check after a start (of Sparks serving one model, only the head,
      rank 0, serves the API; the others run headless)
    + timeout: seconds the health check waits
    + nccl: a rank of a multi-node engine: after a start its journal must show NCCL on RDMA
      (NET/IB), checked with the API on the head and alone on the other ranks
    + keep: the configuration as spark-engine-rollback keeps it (engine.rollback): kept when
      healthy, replaced by the last good one when not
    + key_file: the root-only file with the API key the engine requires ("" when none): the
      health check asks with it
    + container: the container the unit runs in: the health check sends the key only to a
      port that container's processes hold
    + gpu_with: the GPU service unit the operator handed the GPU to (spark-gpu-switch), ""
      when none: the engine is then left stopped, to start with this run's changes at the
      next `spark-gpu-switch engine`

    **Example:**

    .. code:: python

        engine.serving(unit="spark-engine-sglang.service", port=30000)
    """
    if gpu_with:
        host.noop(f"the GPU is with {gpu_with}: `sudo spark-gpu-switch engine` gives it back")
        return
    state = host_state()
    now, recheck = state.units.get(unit, ("inactive", "absent")), unit in state.unhealthy
    if (commands := unit_commands(unit, now, restart, follows, recheck)) is None:
        host.noop(f"{unit} is enabled and running")
        return
    yield from commands
    if health or nccl:
        words = health_words(
            unit, port, timeout, nccl=nccl, api=health, key_file=key_file, container=container
        )
        yield FunctionCommand(_check_health, (unit, words), {"nccl": nccl, "keep": keep})


def _judge_image(plan: EnginePlan, reading: dict) -> None:
    """Refuse the plan when its image's engine does not take it; warnings as notices."""
    problems, warnings = image_problems(plan, ImageReading.of(reading))
    for warning in warnings:
        notices.add(host.name, f"engine image: {warning}")
    if problems:
        raise OperationError(
            "the engine unit was not written: " + "".join(f"\n  {problem}" for problem in problems)
        )


@expected("image check")
def _read_and_judge(state, host, plan: EnginePlan) -> None:
    """The image was fetched in this run: read what spark-fetch read from it, then judge."""
    command = (
        f"id=$(docker image inspect -f '{{{{.Id}}}}' {shell(plan.image)}) && "
        f'cat {IMAGE_READINGS}/"${{id#sha256:}}".json'
    )
    ok, output = host.run_shell_command(StringCommand(command), _sudo=True)
    if not ok:
        raise OperationError(f"no reading of {plan.image} on the Spark: {output.stderr}")
    _judge_image(plan, json.loads(output.stdout))


@operation()
def image_accepts(plan: EnginePlan):
    """
    Check the plan against what its image holds, as read from the image on the Spark (once
    per image ID, by spark-fetch): every flag the unit passes is one the image's engine
    lists, the release matches the catalogue the plan was checked with, and a Ray pair's
    image has ``ray``. Refused before the unit is written.

    + plan: the engine plan of this Spark

    **Example:**

    .. code:: python

        engine.image_accepts(plan=plan)
    """
    reading = host_state().image_reading
    if reading is None or reading.get("engine") != plan.engine:
        yield FunctionCommand(_read_and_judge, (plan,), {})
        return
    _judge_image(plan, reading)
    host.noop(f"{plan.image} ({reading.get('id', '')[:19]}) takes every flag of the plan")


def api_key_text(engine: str, key: str) -> str:
    """The root-only file that hands the API key to the engine: for vLLM a docker --env-file
    line of VLLM_API_KEY (vllm/envs.py; the server takes `args.api_key or VLLM_API_KEY`), for
    SGLang its --config YAML with api-key (the key's characters, API_KEY_TEXT, need no
    escaping in a single-quoted scalar nor in an env-file line)."""
    if engine == "vllm":
        return f"VLLM_API_KEY={key}\n"
    return f"api-key: '{key}'\n"


def leaving_ray(plan: EnginePlan, paths: list[str]) -> str:
    """What to tell the operator when a vLLM plan without Ray retires the Ray units an
    earlier deploy wrote (vLLM's own multi-node mode became the default): "" otherwise."""
    units = [path.rsplit("/", 1)[1] for path in paths if path.endswith(".service")]
    ray_units = [unit for unit in units if "-ray-" in unit]
    if plan.engine != "vllm" or not ray_units or any(s.role != "server" for s in plan.services):
        return ""
    return (
        f"vLLM across the Sparks now runs its own multi-node mode, without Ray: "
        f"{', '.join(ray_units)} retired (stopped, disabled, removed). To keep Ray, add "
        "--distributed-executor-backend: ray to engine.args (the image must have `ray`)"
    )


def foreign_files_notice(paths: list[str]) -> str:
    """What to tell the operator of files with the deploy's names that it did not write."""
    return (
        f"left in place: {', '.join(paths)}: named like the deploy's engine files, but not "
        f"written by it (no '{MANAGED_HEADER}' first line), so never retired; rename it to "
        "avoid the confusion"
    )


@operation()
def retired(paths: list[str]):
    """
    Remove engine units, sudoers and Prometheus files the deploy wrote earlier and no longer
    plans, stopping and disabling a unit and removing its container (and the record of its
    last failed health check) first. The host-state
    fact lists as the deploy's only the files in shared folders whose first line is its
    header (config/paths.py MANAGED_HEADER): an admin's own file is never among ``paths``.

    + paths: the unit, sudoers and Prometheus files to remove

    **Example:**

    .. code:: python

        engine.retired(paths=["/etc/systemd/system/spark-engine-vllm.service"])
    """
    if not paths:
        host.noop("no retired engine files")
        return
    for path in paths:
        if path.endswith(".service"):
            unit = path.rsplit("/", 1)[1]
            container = unit.removesuffix(".service")  # the plan names both alike
            yield f"systemctl disable --now {shell(unit)} || true"
            yield f"{DOCKER} rm -f {shell(container)} >/dev/null 2>&1 || true"
            yield f"rm -f {shell(f'{HEALTH_FAILED}/{unit}')}"
        yield f"rm -f {shell(path)}"
    if any(path.endswith(".service") for path in paths):
        yield "systemctl daemon-reload"


def write_alerts(plan: EnginePlan) -> None:
    """The Prometheus alert rules and scrape config of the engine (engine.alerts)."""
    if not plan.writes_alerts or plan.alerts is None:
        return
    values = template_values(plan.alerts, plan.unit, plan.port, host.name)
    paths = (PROMETHEUS_RULES.format(name=plan.name), PROMETHEUS_SCRAPE.format(name=plan.name))
    for path, template in zip(paths, ("prometheus-rules.yml.j2", "prometheus-scrape.yml.j2")):
        managed_file(
            name=f"Write {path.rsplit('/', 1)[1]} (Prometheus)",
            path=path,
            content=render(template, alerts=values),
        )


# The engine's helper commands on the Spark, by path: each a script of files/.
ENGINE_SCRIPTS = {
    ENGINE_HEALTH: "spark-engine-health",
    RAY_WAIT: "spark-ray-wait",
    LINK_TEST: "spark-link-test",
    ROLLBACK_BIN: "spark-engine-rollback",
}


@dataclass(frozen=True)
class EngineFiles:
    """What the Spark must hold for a plan: the container environment, the shipped
    engine.files and engine.mods by path, each unit's text, and the API key file's text
    ("" when the engine requires none)."""

    env_file: str
    env_text: str
    shipped: dict[str, Shipped]
    units: dict[str, str]
    key_text: str = ""


@dataclass(frozen=True)
class Changes:
    """What differs on the Spark from ``EngineFiles``: ``env`` what the container reads at
    start (environment, shipped files, API key: every unit restarts), ``units`` each unit."""

    env: bool
    units: dict[str, bool]

    @property
    def any(self) -> bool:
        return self.env or any(self.units.values())


def engine_files(plan: EnginePlan, spark: SparkSettings) -> EngineFiles:
    """The files of ``plan`` on this Spark. The API key comes from the laptop's environment
    (engine.api_key_env): root-only on the Spark, never in a command line."""
    env_file = CONTAINER_ENV.format(name=plan.name)
    shipped = {shipped_path(plan.name, item.kind, item.name): item for item in plan.shipped}
    units = {service.unit: unit_text(plan, service, spark, env_file) for service in plan.services}
    key_text = ""
    if plan.api_key_file and spark.engine is not None:
        key_text = api_key_text(plan.engine, laptop_api_key(spark.engine, os.environ))
    env_text = render("engine.env.j2", plan=plan)
    return EngineFiles(env_file, env_text, shipped, units, key_text)


def changes_of(plan: EnginePlan, files: EngineFiles) -> Changes:
    """What writing ``files`` would change (engine.files and engine.mods: the container
    reads them at start, so a change restarts it; so does a new API key)."""
    env = differs(files.env_file, files.env_text)
    env = any([differs(path, item.content) for path, item in files.shipped.items()]) or env
    units = {
        unit: differs(ENGINE_UNIT.format(unit=unit), text) for unit, text in files.units.items()
    }
    if files.key_text:
        env = differs(plan.api_key_file, files.key_text) or env
    return Changes(env, units)


def install_scripts() -> None:
    """The engine's helper commands: health check, Ray wait, link test, rollback."""
    for path, script in ENGINE_SCRIPTS.items():
        managed_file(name=f"Install {script}", path=path, content=file_text(script))


def retire_unplanned(spark: SparkSettings, plan: EnginePlan | None, state: HostState) -> None:
    """Retire the engine files the deploy wrote and no longer plans (saying so when vLLM
    leaves Ray), and name the admin's files that only look like the deploy's."""
    planned = set(managed_files(spark, plan))  # engine files and GPU services' alike
    leaving = sorted(path for path in state.owned if path not in planned)
    if plan is not None and leaving and (notice := leaving_ray(plan, leaving)):
        notices.add(host.name, notice, logging.INFO)
    if admins := sorted(path for path in state.foreign if path not in planned):
        notices.add(host.name, foreign_files_notice(admins), logging.INFO)
    retired(name="Retire engine files no longer planned", paths=leaving)


def keep_serving(plan: EnginePlan, changing: bool) -> Keep | None:
    """What serves now is kept before it changes, when no good configuration is kept yet;
    the configuration as spark-engine-rollback keeps it (None when not rolled back)."""
    containers = {service.unit: service.container for service in plan.services}
    words = health_words(
        plan.unit,
        plan.port,
        HEALTH_TIMEOUT,
        key_file=plan.api_key_file,
        container=containers.get(plan.unit, ""),
    )
    keep = keep_of(plan, words)
    kept_before_change(
        name="Keep the configuration that serves now as the last good one",
        keep=keep,
        unit=plan.unit,
        changing=changing,
    )
    return keep


def write_files(plan: EnginePlan, spark: SparkSettings, files: EngineFiles) -> None:
    """The API key, the shipped files, the container environment, then the units."""
    if files.key_text:
        managed_file(
            name="Install the engine's API key (0600)",
            path=plan.api_key_file,
            content=files.key_text,
        )
    for path, item in files.shipped.items():
        managed_file(
            name=f"Ship {'mod' if item.kind == 'mod' else 'file'} {item.name}",
            path=path,
            content=item.content,
        )
    managed_file(
        name=f"Write the {plan.engine} container environment",
        path=files.env_file,
        content=files.env_text,
    )
    write_units(plan, spark, files.units)


def write_units(plan: EnginePlan, spark: SparkSettings, units: dict[str, str]) -> None:
    """Each service's unit and the sudoers file that lets the operator run it; systemd
    reloads when a unit changed."""
    unit_ops = []
    for service in plan.services:
        unit_ops.append(
            managed_file(
                name=f"Write {service.unit}",
                path=ENGINE_UNIT.format(unit=service.unit),
                content=units[service.unit],
            )
        )
        managed_file(
            name=f"Let {spark.user} start, stop, restart and see {service.unit} (sudoers)",
            path=ENGINE_SUDOERS.format(name=service.unit_base),
            content=render(
                "engine-sudoers.j2", user=spark.user, unit=service.unit, unit_base=service.unit_base
            ),
        )
    systemd.daemon_reload(name="Reload systemd units", _if=any_changed(*unit_ops))


def gpu_holder(spark: SparkSettings, state: HostState) -> str:
    """The GPU service unit the operator handed the GPU to, "" when none is active."""
    active = (
        s.unit for s in spark.gpu_services if state.units.get(s.unit, ("", ""))[0] == "active"
    )
    return next(active, "")


def start_services(plan: EnginePlan, changes: Changes, keep: Keep | None, gpu_with: str) -> None:
    """Run every service of the plan, restarted when what it reads changed, and check it."""
    for service in plan.services:
        # A service in another unit's container is restarted with that unit (BindsTo=).
        follows = bool(service.part_of) and (changes.env or changes.units[service.part_of])
        serving(
            name=f"Run {service.unit}" + (" and check it answers" if service.serves_api else ""),
            unit=service.unit,
            port=plan.port,
            restart=(changes.env or changes.units[service.unit]) and not follows,
            follows=follows,
            health=service.serves_api,
            # Each rank's server logs the network its NCCL chose (a Ray worker's go to the
            # head's server): on RDMA, or the check fails naming the fallback's cause.
            nccl=plan.nodes > 1 and service.role == "server",
            keep=keep if service.unit == plan.unit else None,
            key_file=plan.api_key_file if service.serves_api else "",
            container=service.container,
            gpu_with=gpu_with,
        )


@deploy("Serve the model with the engine")
def serve_model() -> None:
    spark: SparkSettings = host.data.spark
    plan: EnginePlan | None = host.data.get("engine_plan")
    state = host_state()
    install_scripts()
    # The image is judged before anything of the engine changes: a plan it refuses (Ray asked
    # of an image without it) leaves the units that serve now in place.
    if plan is not None:
        image_accepts(name=f"Check the plan against {plan.image}", plan=plan)
    retire_unplanned(spark, plan, state)
    if plan is None:
        return
    files = engine_files(plan, spark)
    changes = changes_of(plan, files)
    keep = keep_serving(plan, changing=changes.any)
    write_files(plan, spark, files)
    write_alerts(plan)
    # link_test_before_start: prove the link once, before a pair's units first start.
    link_test_before_start(plan, spark, host.data.place)
    start_services(plan, changes, keep, gpu_holder(spark, state))
    reach = api_access(spark, plan)
    if reach:  # printed at the end of a run in which this Spark did not fail
        notices.add(host.name, reach, logging.INFO)
