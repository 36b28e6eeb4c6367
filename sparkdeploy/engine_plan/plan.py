"""
The engine plan of one Spark, made from validated settings before any host is touched:
the unit and container names, the exact command line, the environment, the mounts, the
services it conflicts with, and its place in a pair. Every flag is checked against the
pinned release's catalogue and every GB10 rule; the operations only render what is here.

``plan_engine`` runs the planners (planners.py, mounts.py, launch.py) in order, each with
its part, problems and warnings, and composes the ``EnginePlan`` from their parts;
``plan_sparks`` plans every Spark of the inventory, alone or serving one model together.

Room: engine_plan. May import config and knowledge; knows nothing of hosts or pyinfra.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sparkdeploy.config.engine import EngineSettings
from sparkdeploy.config.jsondata import PyinfraJson
from sparkdeploy.config.paths import API_KEY_FILE
from sparkdeploy.config.shipped import Shipped
from sparkdeploy.config.spark import SparkSettings
from sparkdeploy.config.topology import Topology
from sparkdeploy.engine_plan.alerts import AlertPlan
from sparkdeploy.engine_plan.effective import MAX_NODES, MultiNode, multinode_of
from sparkdeploy.engine_plan.image_launch import image_argv, plan_image_args
from sparkdeploy.engine_plan.launch import (
    MODS_SCRIPT,
    RAY_HEAD_CLOSED,
    EngineService,
    Launch,
    gpu_container,
    launch_of,
    services,
)
from sparkdeploy.engine_plan.mounts import Mounts, plan_mounts
from sparkdeploy.engine_plan.planners import (
    ApiKey,
    PlanInput,
    Planned,
    Ranks,
    plan_alerts,
    plan_api_key,
    plan_args,
    plan_docker,
    plan_env,
    plan_exposure,
    plan_launch,
    plan_multinode,
    plan_release,
    plan_rules,
)
from sparkdeploy.knowledge.model_class import ModelClass, UnknownModel

# Names callers import from here (deploys/, tests/) that now live in launch.py.
__all__ = [
    "MODS_SCRIPT",
    "RAY_HEAD_CLOSED",
    "EnginePlan",
    "EnginePlanError",
    "EngineService",
    "Launch",
    "gpu_container",
    "launch_of",
    "plan_engine",
    "plan_sparks",
    "services",
]


@dataclass(frozen=True)
class EnginePlan(PyinfraJson):
    engine: str
    image: str
    name: str  # spark-engine-ENGINE: the container environment file, the main unit
    services: tuple[EngineService, ...]  # in start order
    env: tuple[tuple[str, str], ...]  # the container's environment, sorted
    mounts: tuple[str, ...]  # host folders mounted read-only at the same path
    extra_mounts: tuple[tuple[str, str], ...]  # engine.mounts/files/mods: (host, container), ro
    port: int
    bind: str
    served_model_name: str
    conflicts: tuple[str, ...]
    docker_args: tuple[str, ...]  # engine.docker_args, one `--option[=value]` word each
    # What every container of a multi-node plan gets so NCCL can use the RDMA devices
    # (knowledge/fabric.yaml), before engine.docker_args; () on one Spark.
    rdma_args: tuple[str, ...] = ()
    launch: str = "entrypoint"  # entrypoint | command (Launch.mode)
    nodes: int = 1
    rank: int = 0
    alerts: AlertPlan | None = None  # Prometheus rules and scrape config (engine.alerts)
    accepted_rules: tuple[tuple[str, str], ...] = ()  # (GB10 rule id, reason): engine.accept
    shipped: tuple[Shipped, ...] = ()  # engine.files and engine.mods, written on the Spark
    version: str = ""  # the release whose catalogue the flags were checked against
    flags: tuple[str, ...] = ()  # the server's flags as the unit writes them (argv words)
    # Go back to the last configuration that passed its health check when a changed one does
    # not (engine.rollback); on one Spark only: the ranks of a pair would have to go back
    # together.
    rollback: bool = False
    # The engine requires the API key in the laptop's variable api_key_env (engine.api_key_env),
    # on the Spark serving the API.
    api_key: bool = False
    api_key_env: str = ""
    # Port ranges (first, last) its processes listen on for the other Sparks (rendezvous,
    # ZMQ, Ray): only the fabric peers may reach them (deploys/fabric.py); () on one Spark.
    control_ports: tuple[tuple[int, int], ...] = ()

    @property
    def main(self) -> EngineService:
        """The service serving the API, or on a Ray worker Spark its only service."""
        return next((s for s in self.services if s.serves_api), self.services[0])

    @property
    def unit(self) -> str:
        return self.main.unit

    @property
    def argv(self) -> tuple[str, ...]:
        return self.main.command

    @property
    def serves_api(self) -> bool:
        """Only the head (rank 0) of Sparks serving one model answers the OpenAI API."""
        return self.main.serves_api

    @property
    def api_key_file(self) -> str:
        """The root-only file the API key is in on the Spark ("" without a key)."""
        if not self.api_key:
            return ""
        return API_KEY_FILE.format(
            name=self.name, kind="yaml" if self.engine == "sglang" else "env"
        )

    @property
    def writes_alerts(self) -> bool:
        """Prometheus rules and scrape config go beside the Spark serving the API."""
        return self.alerts is not None and self.serves_api

    @property
    def units(self) -> tuple[str, ...]:
        """Every systemd unit this plan runs on its Spark, the one serving the API first."""
        return (self.main.unit, *(s.unit for s in self.services if s is not self.main))


class EnginePlanError(ValueError):
    """The engine cannot be planned: every problem and every breached rule is listed."""

    def __init__(self, problems: list[str], warnings: list[str]):
        self.problems = problems
        self.warnings = warnings
        super().__init__("; ".join(problems))


def plan_engine(
    settings: EngineSettings,
    model_folder: str | None,
    draft_folder: str | None,
    multinode: MultiNode | None = None,
    model: ModelClass | UnknownModel | None = None,
    shipped: tuple[Shipped, ...] = (),
    api_key: bool = False,
    gpu_units: tuple[str, ...] = (),
) -> tuple[EnginePlan, list[str]]:
    """The plan and its warnings; raises ``EnginePlanError`` when the engine may not start.
    ``model`` is the model's class for the GB10 rules scoped to one (None: unknown);
    ``shipped`` the engine.files and engine.mods read on the laptop; ``api_key`` whether the
    laptop holds the API key the engine must require; ``gpu_units`` the Spark's GPU
    services (gpu_services), which the engine takes turns with."""
    if model_folder is None:
        raise EnginePlanError(["an engine needs a model: set model_repo"], [])
    given = PlanInput(
        settings, settings.catalogue, model_folder, draft_folder, multinode, model,
        shipped, api_key,
    )  # fmt: skip
    image = settings.launch == "image"  # the image's launcher gets engine.args alone
    args = plan_image_args(given) if image else plan_args(given)
    _stop_at(args)
    env = plan_env(given)
    mounts = plan_mounts(given)
    ranks = plan_multinode(given)
    launch = plan_launch(given)
    docker = plan_docker(given)
    checked = (
        args,
        rules := plan_rules(given, args.part, env),
        Planned(None) if image else plan_release(given, env),
        mounts,
        ranks,
        launch,
        docker,
        plan_exposure(given),
    )
    _stop_at(*checked)
    flags = image_argv(given, args.part) if image else tuple(given.catalogue.argv(args.part))
    key = plan_api_key(given, flags)
    _stop_at(key, *checked)
    plan = _compose(given, env, rules.part, mounts.part, ranks.part, launch.part, docker.part,
                    key.part, flags + key.part.flags, gpu_units)  # fmt: skip
    return plan, _warnings(*checked)


def _warnings(*parts: Planned[object]) -> list[str]:
    return [warning for part in parts for warning in part.warnings]


def _stop_at(*parts: Planned[object]) -> None:
    """Raise with every problem of ``parts`` (and all their warnings), if there is one."""
    problems = [problem for part in parts for problem in part.problems]
    if problems:
        raise EnginePlanError(problems, _warnings(*parts))


def _compose(
    given: PlanInput,
    env: Mapping[str, str],
    accepted: tuple[tuple[str, str], ...],
    mounts: Mounts,
    ranks: Ranks,
    launch: Launch,
    docker_args: tuple[str, ...],
    key: ApiKey,
    flags: tuple[str, ...],
    gpu_units: Sequence[str],
) -> EnginePlan:
    """The plan of the planners' parts."""
    settings, name = given.settings, given.name
    units = services(settings.name, name, flags, given.multinode, launch, mounts.mods, given.ray)
    return EnginePlan(
        engine=settings.name,
        image=settings.image,
        name=name,
        services=units,
        env=tuple(sorted(env.items())),
        mounts=mounts.folders,
        extra_mounts=mounts.extra + key.mounts,
        shipped=given.shipped,
        port=settings.port,
        bind=settings.bind,
        served_model_name=settings.served_model_name
        or given.model_folder.rstrip("/").split("/")[-1],
        conflicts=(*settings.other_gpu_services, *gpu_units),
        docker_args=docker_args,
        rdma_args=ranks.rdma_args,
        launch=launch.mode,
        nodes=ranks.nodes,
        rank=ranks.rank,
        rollback=ranks.rollback,
        api_key=key.required,
        api_key_env=key.env,
        control_ports=ranks.control_ports,
        alerts=plan_alerts(given),
        accepted_rules=accepted,
        version=settings.version,
        flags=flags,
    )


def plan_sparks(
    sparks: dict[str, SparkSettings],
    topology: Topology,
    models: Mapping[str, ModelClass | UnknownModel] | None = None,
    shipped: Mapping[str, tuple[Shipped, ...]] | None = None,
    keyed: frozenset[str] = frozenset(),
) -> tuple[dict[str, EnginePlan], list[str], list[str]]:
    """
    Plan the engine of every Spark that has one. Two to eight Sparks with the same engine,
    all on the QSFP fabric (``Place.linked``), serve one model together: ranks follow the
    inventory, the topology's head is rank 0 and is reached on its first rail. Sparks with
    an engine but no fabric each serve on their own. ``models`` holds each Spark's model
    class where it was read, ``shipped`` its engine.files and engine.mods, ``keyed`` the
    Sparks whose API key the laptop holds (engine.api_key_env). Returns the
    plans, the problems (as "host 'NAME', key 'engine': ...") and the warnings.
    """
    plans: dict[str, EnginePlan] = {}
    problems: list[str] = []
    warnings: list[str] = []
    engines: dict[str, tuple[SparkSettings, EngineSettings]] = {
        name: (spark, spark.engine) for name, spark in sparks.items() if spark.engine is not None
    }
    together = len(engines) > 1 and all(topology[name].linked for name in engines)
    if together:
        problems = _cluster_problems(sparks, engines)
        if problems:
            return plans, problems, warnings
    for name, (spark, engine) in engines.items():
        multinode = multinode_of(topology[name]) if together else None
        plan, found, said = _plan_spark(
            name,
            spark,
            engine,
            multinode,
            (models or {}).get(name),
            (shipped or {}).get(name, ()),
            keyed=name in keyed,
        )
        if plan is not None:
            plans[name] = plan
        problems += found
        warnings += said
    return plans, problems, warnings


def _plan_spark(
    name: str,
    spark: SparkSettings,
    engine: EngineSettings,
    multinode: MultiNode | None,
    model_class: ModelClass | UnknownModel | None,
    shipped: tuple[Shipped, ...],
    keyed: bool,
) -> tuple[EnginePlan | None, list[str], list[str]]:
    """One Spark's plan (None when it may not start), its problems and its warnings, each
    as "host 'NAME', key 'engine': ..."."""
    where = f"host '{name}', key 'engine'"
    model = spark.model_folder(spark.model_repo) if spark.model_repo else None
    draft = spark.model_folder(spark.draft_model_repo) if spark.draft_model_repo else None
    # The engine takes turns with the Spark's GPU services (gpu_services).
    gpu_units = tuple(service.unit for service in spark.gpu_services)
    try:
        plan, found = plan_engine(
            engine, model, draft, multinode, model_class, shipped, keyed, gpu_units
        )
    except EnginePlanError as error:
        problems = [f"{where}: {problem}" for problem in error.problems]
        return None, problems, [f"{where}: {warning}" for warning in error.warnings]
    problems = []
    if gpu_units and multinode is not None:
        problems.append(
            f"host '{name}', key 'gpu_services': not yet on Sparks serving one model "
            "together (the engine's ranks would have to hand the GPU over together)"
        )
    return plan, problems, [f"{where}: {warning}" for warning in found]


# What the Sparks serving one model must share: the engine and the model, key by key.
SHARED_KEYS = ("model_repo", "model_revision", "model_base_repo", "draft_model_repo")


def _cluster_problems(
    sparks: dict[str, SparkSettings], engines: dict[str, tuple[SparkSettings, EngineSettings]]
) -> list[str]:
    """
    Why Sparks on the fabric with engines cannot serve one model together: more than
    ``MAX_NODES``; a Spark of the inventory without the engine (the ranks follow the
    inventory, so every Spark is a rank, the first the head); engines or models that differ
    (every rank loads the same model with the same engine and flags).
    """
    names = list(engines)
    bare = [name for name in sparks if name not in engines]
    if bare:
        return [
            f"host '{name}', key 'engine': not set, but {', '.join(names)} on the same QSFP "
            "fabric have one; Sparks on the fabric serve one model together with every Spark "
            "of the inventory as a rank (the first is the head). Give it the same engine "
            "(under defaults:), or keep engine: on one Spark only to serve there alone"
            for name in bare
        ]
    if len(names) > MAX_NODES:
        return [
            f"host '{names[MAX_NODES]}', key 'engine': {len(names)} Sparks with an engine on "
            f"the fabric; one model is served across {MAX_NODES} Sparks at most. List "
            f"{MAX_NODES} or fewer Sparks in this inventory"
        ]
    first, (spark, engine) = names[0], engines[names[0]]
    problems = []
    for name in names[1:]:
        other_spark, other = engines[name]
        if (engine.name, engine.image, engine.version) != (other.name, other.image, other.version):
            problems.append(
                f"host '{name}', key 'engine': Sparks on the fabric serve one model with one "
                f"engine; {first} runs {engine.name} {engine.image}, {name} runs "
                f"{other.name} {other.image}. Give all the same engine (under defaults:)"
            )
            continue
        mine, theirs = engine.model_dump(), other.model_dump()
        keys = [f"engine.{key}" for key in mine if mine[key] != theirs[key]]
        keys += [key for key in SHARED_KEYS if getattr(spark, key) != getattr(other_spark, key)]
        if keys:
            problems.append(
                f"host '{name}', key 'engine': Sparks on the fabric serve one model together, "
                f"each rank with the same settings, but {', '.join(keys)} differ from "
                f"{first}'s. Set them once under defaults: (or alike on every Spark)"
            )
    return problems
