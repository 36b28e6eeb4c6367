"""
The engine plan of one Spark, made from validated settings before any host is touched:
the unit and container names, the exact command line, the environment, the mounts, the
services it conflicts with, and its place in a pair. Every flag is checked against the
pinned release's catalogue and every GB10 rule; the operations only render what is here.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from dataclasses import dataclass, replace

from sparkdeploy.config.engine import EngineSettings
from sparkdeploy.config.paths import API_KEY_FILE, API_KEY_MOUNT, MODS_MOUNT, shipped_path
from sparkdeploy.config.shipped import Shipped
from sparkdeploy.config.spark import SparkSettings
from sparkdeploy.config.topology import Topology
from sparkdeploy.engine_plan.alerts import AlertPlan
from sparkdeploy.engine_plan.effective import (
    MAX_NODES,
    EngineConfigError,
    MultiNode,
    chooses_ray,
    control_ports,
    effective_args,
    effective_env,
    multinode_of,
    speculative_on,
)
from sparkdeploy.engine_plan.rules import check_rules, judge
from sparkdeploy.knowledge.docker_options import (
    docker_words,
    hardening_words,
    parse_docker_args,
)
from sparkdeploy.knowledge.fabric import rdma_options
from sparkdeploy.knowledge.flags import spelling_notes, to_argv, unread_env
from sparkdeploy.knowledge.images import describe_image, server_command
from sparkdeploy.knowledge.model_class import ModelClass, UnknownModel
from sparkdeploy.knowledge.profiles import multinode_section

# Run every mod (in name order, each with sh, any failure stops the start), then the server
# in the shell's place, so signals reach it.
MODS_SCRIPT = (
    f'for mod in {MODS_MOUNT}/*; do [ -f "$mod" ] || continue; '
    'echo "spark-deploy: applying $mod"; sh "$mod" || exit 1; done; exec "$@"'
)


# What the Ray head runs besides the GCS: nothing that takes jobs from the network. Ray's own
# CLI (ray-project/ray python/ray/scripts/scripts.py `start`, Ray 2.x, the release line the
# Ray images carry): --include-dashboard (click bool, head only) false starts no dashboard and
# so no jobs API (8265, which runs any code it is sent); --dashboard-host its bind,
# 127.0.0.1 (its default, written out in case a release starts the API server anyway); a
# --ray-client-server-port of 0 starts no client server (10001, otherwise started whenever
# ray[client] is installed: node.py start_head_processes starts it only for a truthy port).
# --node-ip-address (every unit) is the Spark's rail-1 address. What still listens (the GCS,
# the raylet's and workers' ports) answers the fabric peers only (deploys/fabric.py).
RAY_HEAD_CLOSED = (
    "--include-dashboard", "false",
    "--dashboard-host", "127.0.0.1",
    "--ray-client-server-port", "0",
)  # fmt: skip


@dataclass(frozen=True)
class Launch:
    """
    How the server starts in the image (knowledge/images.yaml, or ``engine.launch``):
    ``entrypoint`` when the image's ENTRYPOINT runs the engine (vllm/vllm-openai: `vllm
    serve`), so `docker run` gets the flags only; ``command`` when the container command is
    the server (`vllm serve ...`, `python3 -m sglang.launch_server ...`), after the image's
    wrapper entrypoint if it has one (NGC: /opt/nvidia/nvidia_entrypoint.sh), which docker
    run keeps and docker exec, which never applies an entrypoint, is given explicitly.
    """

    mode: str  # entrypoint | command
    server: tuple[str, ...]  # the engine's server command
    wrapper: str = ""  # the image's wrapper ENTRYPOINT ("" when none or unknown)

    def run(self, flags: tuple[str, ...]) -> tuple[str, ...]:
        """The container command after the image (`docker run IMAGE ...`)."""
        return flags if self.mode == "entrypoint" else (*self.server, *flags)

    def after_mods(self, flags: tuple[str, ...]) -> tuple[str, tuple[str, ...]]:
        """``--entrypoint`` and command that run engine.mods, then the server: through the
        wrapper entrypoint when the image has one (the command is then the shell), in place
        of an entrypoint that is the engine itself."""
        command = ("-c", MODS_SCRIPT, "sh", *self.server, *flags)
        if self.mode == "command":
            return "", ("sh", *command)
        return "sh", command

    def exec(self, flags: tuple[str, ...]) -> tuple[str, ...]:
        """The command run in a running container (`docker exec CONTAINER ...`)."""
        wrapper = (self.wrapper,) if self.mode == "command" and self.wrapper else ()
        return (*wrapper, *self.server, *flags)

    def other(self, command: tuple[str, ...]) -> tuple[str, tuple[str, ...]]:
        """``--entrypoint`` and command to run another program of the image (Ray): through
        the wrapper when the image has one, otherwise as the entrypoint itself."""
        if self.mode == "command" and self.wrapper:
            return "", command
        return command[0], command[1:]


def launch_of(settings: EngineSettings) -> Launch:
    """The launch of the settings' image: ``engine.launch``, else its family's, else
    ``command`` (EngineSettings.launch_warning says so)."""
    info = describe_image(settings.name, settings.image)
    mode = settings.launch or info.launch or "command"
    return Launch(mode=mode, server=server_command(settings.name), wrapper=info.wrapper)


def gpu_container(
    container: str, pull: str = "never", docker_args: tuple[str, ...] = ()
) -> list[str]:
    """The `docker run` options of every GPU container the deploy runs (the engine's, the link
    test's, the GPU services'): the image already on the Spark (spark-fetch put it there; a
    pull at start would race the start timeout; a GPU service's image, which the fetch does
    not bring, is pulled when missing), every GPU, the host's network and IPC, and the
    hardening of knowledge/docker_options.yaml (no NET_RAW, no new privileges) unless the
    engine's ``docker_args`` say otherwise."""
    return [
        "run", "--pull", pull, "--name", container,
        "--gpus", "all", "--network", "host", "--ipc", "host",
        *hardening_words(docker_args),
    ]  # fmt: skip


@dataclass(frozen=True)
class EngineService:
    """
    One systemd unit of an engine plan: a container of its own (`docker run`), or, with
    ``part_of``, a command run in the container of that unit (`docker exec`), which it
    starts after and stops and restarts with.
    """

    unit: str  # systemd unit file name
    container: str  # the container it runs, or runs in
    command: tuple[str, ...]  # after the image (docker run), or in the container (docker exec)
    role: str = "server"  # server, ray-head or ray-worker (units.description names each)
    entrypoint: str = ""  # replaces the image's entrypoint (docker run --entrypoint)
    part_of: str = ""  # the unit whose container it runs in
    wait: tuple[str, ...] = ()  # spark-ray-wait's arguments: what must be up before it starts
    serves_api: bool = False  # answers the OpenAI API (health-checked after a start)

    @property
    def unit_base(self) -> str:
        return self.unit.removesuffix(".service")


@dataclass(frozen=True)
class EnginePlan:
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


def services(
    engine: str,
    name: str,
    flags: tuple[str, ...],
    multinode: MultiNode | None,
    launch: Launch | None = None,
    mods: bool = False,
    ray: bool = False,
) -> tuple[EngineService, ...]:
    """
    The units of an engine on one Spark. Alone, or among Sparks where every one runs the
    server with its rank (SGLang, and vLLM's own multi-node mode, where the Sparks after the
    head run it headless): one, which serves the API on rank 0 only. With Ray (vLLM, when
    ``ray``: engine.args choose it): on the head a Ray head unit and the server in its
    container, which waits for every Spark's GPU in the cluster; on every other Spark a Ray
    worker unit, which waits for the head's Ray port. ``flags`` are the server's flags;
    ``launch`` says how they start the server (default: the image's entrypoint runs it).
    """
    launch = launch or Launch("entrypoint", server_command(engine))
    pair = multinode_section(engine, ray)
    if multinode is None or pair["launcher"] != "ray":
        serves_api = multinode is None or multinode.rank == 0
        entrypoint, command = launch.after_mods(flags) if mods else ("", launch.run(flags))
        return (
            EngineService(
                f"{name}.service", name, command, entrypoint=entrypoint, serves_api=serves_api
            ),
        )
    gcs = f"{multinode.head}:{multinode.port or pair['port']}"
    node = ("--node-ip-address", multinode.address, "--disable-usage-stats", "--block")
    if multinode.rank > 0:
        worker = f"{name}-ray-worker"
        entrypoint, command = launch.other(("ray", "start", "--address", gcs, *node))
        return (
            EngineService(
                f"{worker}.service",
                worker,
                command,
                role="ray-worker",
                entrypoint=entrypoint,
                wait=("--address", gcs),
            ),
        )
    head = f"{name}-ray-head"
    port = gcs.rsplit(":", 1)[1]
    entrypoint, command = launch.other(
        ("ray", "start", "--head", "--port", port, *RAY_HEAD_CLOSED, *node)
    )
    return (
        EngineService(
            f"{head}.service",
            head,
            command,
            role="ray-head",
            entrypoint=entrypoint,
        ),
        EngineService(
            f"{name}.service",
            head,
            launch.exec(flags),
            part_of=f"{head}.service",
            serves_api=True,
            wait=("--container", head, "--gpus", str(multinode.nodes)),
        ),
    )


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
) -> tuple[EnginePlan, list[str]]:
    """The plan and its warnings; raises ``EnginePlanError`` when the engine may not start.
    ``model`` is the model's class for the GB10 rules scoped to one (None: unknown);
    ``shipped`` the engine.files and engine.mods read on the laptop; ``api_key`` whether the
    laptop holds the API key the engine must require."""
    if model_folder is None:
        raise EnginePlanError(["an engine needs a model: set model_repo"], [])
    known = model if isinstance(model, ModelClass) else None
    try:
        args = effective_args(settings, model_folder, draft_folder, multinode, known)
    except EngineConfigError as error:
        raise EnginePlanError(error.problems, []) from None
    env = effective_env(settings, draft_folder, multinode, known)
    judgement = judge(settings, check_rules(settings, args, env, model))
    errors, warnings = judgement.errors, judgement.warnings
    warnings += spelling_notes(settings.name, settings.version, settings.args)
    warnings += unread_env(settings.name, settings.version, env)
    folders = tuple(folder for folder in (model_folder, draft_folder) if folder)
    name = f"spark-engine-{settings.name}"
    extra = [(mount.host, mount.container) for mount in settings.mounts]
    extra += [
        (shipped_path(name, item.kind, item.name), item.dest)
        for item in shipped
        if item.kind == "file"
    ]
    mods = any(item.kind == "mod" for item in shipped)
    if mods:
        extra.append((posixpath.dirname(shipped_path(name, "mod", "x")), MODS_MOUNT))
    errors += _mount_problems(extra, folders)
    operator_options = parse_docker_args(settings.docker_args)[0]
    rdma_args: tuple[str, ...] = ()
    if multinode is not None:
        rdma_args, rdma_problems = rdma_options(operator_options)
        errors += [f"engine.docker_args: {problem}" for problem in rdma_problems]
    ray = chooses_ray(settings)
    if (
        mods
        and multinode is not None
        and multinode_section(settings.name, ray)["launcher"] == "ray"
    ):
        errors.append(
            "engine.mods: not yet with Ray across Sparks (the mods would have to run in every "
            "Ray container before Ray starts); drop --distributed-executor-backend ray to run "
            "vLLM's own multi-node mode, which runs them, or bake them into the image"
        )
    warnings += [
        warning
        for warning in (settings.unknown_version_warning(), settings.launch_warning())
        if warning
    ]
    warnings += [f"engine.docker_args: {warning}" for warning in settings.docker_warnings()]
    if settings.bind == "0.0.0.0" and settings.api_open and not api_key:
        warnings.append(
            "engine.bind 0.0.0.0 with api_open: the engine's API answers anyone who reaches "
            "the port, without a key"
        )
    if errors:
        raise EnginePlanError(errors, warnings)
    flags = tuple(to_argv(settings.name, settings.version, args))
    # Only the Spark serving the API (rank 0) asks for the key.
    api_key = api_key and (multinode is None or multinode.rank == 0)
    if api_key and settings.name == "sglang":
        # SGLang reads the key as api-key from a YAML file given with --config and merges it
        # into its arguments in-process (sglang/srt/server_args.py prepare_server_args,
        # server_args_config_parser.py; in every catalogued release), so it never is in argv.
        if "--config" in flags:
            errors.append(
                "engine.args --config: SGLang takes one --config file, and with an API key "
                "the deploy gives it the one holding the key; write those settings in "
                "engine.args instead"
            )
        flags += ("--config", API_KEY_MOUNT)
        extra.append((API_KEY_FILE.format(name=name, kind="yaml"), API_KEY_MOUNT))
    if errors:
        raise EnginePlanError(errors, warnings)
    launch = launch_of(settings)
    plan = EnginePlan(
        engine=settings.name,
        image=settings.image,
        name=name,
        services=services(settings.name, name, flags, multinode, launch, mods, ray),
        env=tuple(sorted(env.items())),
        mounts=folders,
        extra_mounts=tuple(extra),
        shipped=shipped,
        port=settings.port,
        bind=settings.bind,
        served_model_name=settings.served_model_name or model_folder.rstrip("/").split("/")[-1],
        conflicts=tuple(settings.other_gpu_services),
        docker_args=docker_words(operator_options),
        rdma_args=rdma_args,
        launch=launch.mode,
        nodes=multinode.nodes if multinode else 1,
        rank=multinode.rank if multinode else 0,
        rollback=settings.rollback and not multinode,
        api_key=api_key,
        api_key_env=settings.api_key_env,
        control_ports=control_ports(settings, multinode),
        alerts=AlertPlan(
            engine=settings.name,
            version=settings.version,
            threshold=settings.alert_accept_rate,
            window=settings.alert_window,
            speculative=speculative_on(settings, draft_folder),
        )
        if settings.alerts
        else None,
        accepted_rules=judgement.accepted,
        version=settings.version,
        flags=flags,
    )
    return plan, warnings


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
        place = topology[name]
        multinode = multinode_of(place) if together else None
        model = spark.model_folder(spark.model_repo) if spark.model_repo else None
        draft = spark.model_folder(spark.draft_model_repo) if spark.draft_model_repo else None
        try:
            model_class = (models or {}).get(name)
            plans[name], found = plan_engine(
                engine,
                model,
                draft,
                multinode,
                model_class,
                (shipped or {}).get(name, ()),
                api_key=name in keyed,
            )
            # The engine takes turns with the Spark's GPU services (gpu_services).
            gpu_units = tuple(service.unit for service in spark.gpu_services)
            plans[name] = replace(plans[name], conflicts=plans[name].conflicts + gpu_units)
            if gpu_units and together:
                problems.append(
                    f"host '{name}', key 'gpu_services': not yet on Sparks serving one model "
                    "together (the engine's ranks would have to hand the GPU over together)"
                )
        except EnginePlanError as error:
            problems += [f"host '{name}', key 'engine': {problem}" for problem in error.problems]
            found = error.warnings
        warnings += [f"host '{name}', key 'engine': {warning}" for warning in found]
    return plans, problems, warnings


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
