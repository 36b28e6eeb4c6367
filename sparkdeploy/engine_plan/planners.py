"""
The planners of one Spark's engine: each takes what the engine is planned from
(``PlanInput``, with the pinned release's catalogue looked up once) and returns its part of
the plan with the problems that stop the engine and the warnings that do not (``Planned``).
plan.py runs them in order and composes the ``EnginePlan`` from their parts.

Room: engine_plan. May import config and knowledge; knows nothing of hosts, pyinfra or how
a part is rendered on the Spark.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from sparkdeploy.config.engine import EngineSettings
from sparkdeploy.config.paths import API_KEY_FILE, API_KEY_MOUNT
from sparkdeploy.config.shipped import Shipped
from sparkdeploy.engine_plan.alerts import AlertPlan
from sparkdeploy.engine_plan.effective import (
    EngineConfigError,
    MultiNode,
    chooses_ray,
    control_ports,
    effective_args,
    effective_env,
    parallel_layout,
    speculative_on,
)
from sparkdeploy.engine_plan.launch import Launch, launch_of
from sparkdeploy.engine_plan.rules import check_rules, judge
from sparkdeploy.knowledge.docker_options import docker_words, parse_docker_args
from sparkdeploy.knowledge.fabric import rdma_options
from sparkdeploy.knowledge.flags import Catalogue
from sparkdeploy.knowledge.model_class import ModelClass, UnknownModel

T = TypeVar("T", covariant=True)  # a Planned[Mounts] is a Planned[object]


@dataclass(frozen=True)
class PlanInput:
    """What one Spark's engine is planned from."""

    settings: EngineSettings
    catalogue: Catalogue  # the pinned release's, looked up once for the whole plan
    model_folder: str
    draft_folder: str | None
    multinode: MultiNode | None  # its place among Sparks serving one model; None alone
    model: ModelClass | UnknownModel | None  # the model's class (None: not read)
    shipped: tuple[Shipped, ...]  # engine.files and engine.mods read on the laptop
    api_key: bool  # the laptop holds the API key the engine must require

    @property
    def name(self) -> str:
        """spark-engine-ENGINE: the container environment file, the main unit."""
        return f"spark-engine-{self.settings.name}"

    @property
    def known(self) -> ModelClass | None:
        """The model's class when it was read, for profile entries scoped to one."""
        return self.model if isinstance(self.model, ModelClass) else None

    @property
    def ray(self) -> bool:
        """Whether engine.args choose Ray to run the engine across Sparks."""
        return chooses_ray(self.settings, catalogue=self.catalogue)

    @property
    def folders(self) -> tuple[str, ...]:
        """The model folders mounted read-only at the same path (model, then draft)."""
        return tuple(folder for folder in (self.model_folder, self.draft_folder) if folder)


@dataclass(frozen=True)
class Planned(Generic[T]):
    """A planner's part of the plan, the problems that stop the engine, the warnings."""

    part: T
    problems: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()


def plan_args(given: PlanInput) -> Planned[dict[str, Any]]:
    """The server's effective flags (GB10 profile layered with engine.args), checked."""
    try:
        args = effective_args(
            given.settings,
            given.model_folder,
            given.draft_folder,
            given.multinode,
            given.known,
            catalogue=given.catalogue,
        )
    except EngineConfigError as error:
        return Planned({}, tuple(error.problems))
    return Planned(args)


def plan_env(given: PlanInput) -> dict[str, str]:
    """The container's environment (GB10 profile layered with engine.env)."""
    return effective_env(
        given.settings,
        given.draft_folder,
        given.multinode,
        given.known,
        catalogue=given.catalogue,
    )


def plan_rules(
    given: PlanInput, args: dict[str, Any], env: dict[str, str]
) -> Planned[tuple[tuple[str, str], ...]]:
    """The GB10 rules the flags and environment break, judged with engine.accept: the
    rules accepted (id, reason) go into the unit."""
    violations = check_rules(given.settings, args, env, given.model, catalogue=given.catalogue)
    judgement = judge(given.settings, violations)
    return Planned(judgement.accepted, tuple(judgement.errors), tuple(judgement.warnings))


def plan_release(given: PlanInput, env: dict[str, str]) -> Planned[None]:
    """What the pinned release says of the settings: flags written as abbreviations, its
    own variables it does not read, and a release that is not known."""
    warnings = [
        *given.catalogue.spelling_notes(given.settings.args),
        *given.catalogue.unread_env(env),
        *given.settings.flag_warnings(),
    ]
    version = given.settings.unknown_version_warning()
    return Planned(None, warnings=(*warnings, *([version] if version else [])))


@dataclass(frozen=True)
class Ranks:
    """The engine's place among the Sparks serving one model (nodes 1, rank 0 alone)."""

    nodes: int
    rank: int
    # What every container gets so NCCL can use the RDMA devices (knowledge/fabric.yaml).
    rdma_args: tuple[str, ...]
    control_ports: tuple[tuple[int, int], ...]  # what the fabric peers may reach
    rollback: bool  # engine.rollback, on one Spark only: ranks would go back together


def ring_layout_problems(given: PlanInput) -> list[str]:
    """Four Sparks in a ring share no cable between ranks 0 and 2, nor 1 and 3: a layout
    whose groups pair them (tensor and pipeline parallel both above 1, or Ray's placement)
    makes NCCL connect Sparks that have no link (eugr/spark-vllm-docker docs/NETWORKING.md,
    rings: "Ray and mixed TP/PP/DP layouts are currently rejected for a sparse ring";
    field notes 2026-11b section 2). Three Sparks in a ring are each other's neighbours."""
    multinode = given.multinode
    if multinode is None or not multinode.ring or multinode.nodes < 4:
        return []
    layout, _ = parallel_layout(given.settings, multinode.nodes, catalogue=given.catalogue)
    if layout.tp > 1 and layout.pp > 1:
        return [
            f"engine.args: tensor x pipeline parallel {layout.tp} x {layout.pp} on four "
            "Sparks in a ring: the pipeline stages pair Sparks that share no cable; use "
            "tensor parallel 4 (or pipeline parallel 4) across the ring"
        ]
    return []


def ring_layout_warnings(given: PlanInput) -> list[str]:
    """Ray on four Sparks in a ring: it places the ranks itself, which need not follow the
    cables (eugr rejects it for sparse rings; not seen to crash here, so a warning)."""
    multinode = given.multinode
    if multinode is None or not multinode.ring or multinode.nodes < 4:
        return []
    if not chooses_ray(given.settings, catalogue=given.catalogue):
        return []
    return [
        "engine.args: --distributed-executor-backend ray on four Sparks in a ring: Ray "
        "places the ranks itself, and a rank next to one it shares no cable with fails at "
        "NCCL's connect (ibv_modify_qp ... 110); eugr's ring support refuses Ray for this "
        "reason. The engine's own launcher keeps the inventory's order"
    ]


def plan_multinode(given: PlanInput) -> Planned[Ranks]:
    """Ranks, RDMA options and control ports across Sparks (engine.mods run in every
    container of the Sparks, launch.py ``services``)."""
    settings, multinode = given.settings, given.multinode
    rdma_args: tuple[str, ...] = ()
    problems: list[str] = []
    warnings: list[str] = []
    if multinode is not None:
        rdma_args, found, said = rdma_options(parse_docker_args(settings.docker_args)[0])
        problems += [f"engine.docker_args: {problem}" for problem in found]
        warnings += [f"engine.docker_args: {warning}" for warning in said]
        problems += ring_layout_problems(given)
        warnings += ring_layout_warnings(given)
    ranks = Ranks(
        nodes=multinode.nodes if multinode else 1,
        rank=multinode.rank if multinode else 0,
        rdma_args=rdma_args,
        control_ports=control_ports(settings, multinode, catalogue=given.catalogue),
        rollback=settings.rollback and not multinode,
    )
    return Planned(ranks, tuple(problems), tuple(warnings))


def plan_launch(given: PlanInput) -> Planned[Launch]:
    """How the server starts in the image, and a warning when that is a guess."""
    # engine.launch image says itself that the image starts the engine (image_launch.py).
    settings = given.settings
    warning = None if settings.launch == "image" else settings.launch_warning()
    problems = (
        ()
        if settings.launch == "image" or not settings.launcher_words
        else (
            "engine.launcher_words: only with engine.launch image (the image's own launcher "
            "takes them); with `entrypoint` or `command` the deploy writes the command itself",
        )
    )
    return Planned(launch_of(settings), problems, warnings=(warning,) if warning else ())


def plan_docker(given: PlanInput) -> Planned[tuple[str, ...]]:
    """engine.docker_args as `docker run` words, and what the options used warn about."""
    words = docker_words(parse_docker_args(given.settings.docker_args)[0])
    warnings = [f"engine.docker_args: {warning}" for warning in given.settings.docker_warnings()]
    return Planned(words, warnings=tuple(warnings))


def plan_exposure(given: PlanInput) -> Planned[None]:
    """A warning when the API answers anyone who reaches the port."""
    settings = given.settings
    if settings.bind == "0.0.0.0" and settings.api_open and not given.api_key:
        return Planned(
            None,
            warnings=(
                "engine.bind 0.0.0.0 with api_open: the engine's API answers anyone who "
                "reaches the port, without a key",
            ),
        )
    return Planned(None)


@dataclass(frozen=True)
class ApiKey:
    """Whether the engine requires the API key (engine.api_key_env), and how it reads it."""

    required: bool
    env: str  # the laptop's variable holding the key
    flags: tuple[str, ...] = ()  # added to the server's flags (SGLang's --config)
    mounts: tuple[tuple[str, str], ...] = ()  # the key file mounted for it (host, container)


def plan_api_key(given: PlanInput, flags: tuple[str, ...]) -> Planned[ApiKey]:
    """The API key, on the Spark serving the API (rank 0) only. SGLang reads it as api-key
    from a YAML file given with --config and merges it into its arguments in-process
    (sglang/srt/server_args.py prepare_server_args, server_args_config_parser.py; in every
    catalogued release), so it never is in argv."""
    settings, multinode = given.settings, given.multinode
    required = given.api_key and (multinode is None or multinode.rank == 0)
    if not required or settings.name != "sglang":
        return Planned(ApiKey(required, settings.api_key_env))
    problems: tuple[str, ...] = ()
    if "--config" in flags:
        problems = (
            "engine.args --config: SGLang takes one --config file, and with an API key "
            "the deploy gives it the one holding the key; write those settings in "
            "engine.args instead",
        )
    key = ApiKey(
        required,
        settings.api_key_env,
        flags=("--config", API_KEY_MOUNT),
        mounts=((API_KEY_FILE.format(name=given.name, kind="yaml"), API_KEY_MOUNT),),
    )
    return Planned(key, problems)


def plan_alerts(given: PlanInput) -> AlertPlan | None:
    """Prometheus rules and scrape config (engine.alerts), None without."""
    settings = given.settings
    if not settings.alerts:
        return None
    return AlertPlan(
        engine=settings.name,
        version=settings.version,
        threshold=settings.alert_accept_rate,
        window=settings.alert_window,
        speculative=speculative_on(settings, given.draft_folder, catalogue=given.catalogue),
    )
