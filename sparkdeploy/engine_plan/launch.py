"""
How the engine starts on one Spark: the image's launch (entrypoint, command or the image's
own launcher; engine.mods before the server or Ray), the `docker run` options of every GPU
container, and the systemd units of an engine (alone, as a rank, or as a Ray head or
worker) with their command lines.

Room: engine_plan. May import config and knowledge; knows nothing of hosts, pyinfra or the
files on the Spark (deploys/engine/units.py renders these units).
"""

from __future__ import annotations

from dataclasses import dataclass

from sparkdeploy.config.engine import EngineSettings
from sparkdeploy.config.paths import MODS_MOUNT
from sparkdeploy.engine_plan.effective import MultiNode
from sparkdeploy.knowledge.docker_options import hardening_words
from sparkdeploy.knowledge.images import describe_image, server_command
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
    serve`), so `docker run` gets the flags only; ``image`` when the image's ENTRYPOINT is a
    launcher of its own that gets engine.args as they are (engine_plan/image_launch.py), so
    `docker run` gets those only, too; ``command`` when the container command is the server
    (`vllm serve ...`, `python3 -m sglang.launch_server ...`), after the image's wrapper
    entrypoint if it has one (NGC: /opt/nvidia/nvidia_entrypoint.sh), which docker
    run keeps and docker exec, which never applies an entrypoint, is given explicitly.
    """

    mode: str  # entrypoint | command | image
    server: tuple[str, ...]  # the engine's server command
    wrapper: str = ""  # the image's wrapper ENTRYPOINT ("" when none or unknown)

    def run(self, flags: tuple[str, ...]) -> tuple[str, ...]:
        """The container command after the image (`docker run IMAGE ...`)."""
        return (*self.server, *flags) if self.mode == "command" else flags

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

    def other_after_mods(self, command: tuple[str, ...]) -> tuple[str, tuple[str, ...]]:
        """``--entrypoint`` and command that run engine.mods, then another program of the
        image (Ray) in the shell's place: through the wrapper when the image has one, as
        ``other`` runs it, otherwise with the shell as the entrypoint."""
        script = ("-c", MODS_SCRIPT, "sh", *command)
        if self.mode == "command" and self.wrapper:
            return "", ("sh", *script)
        return "sh", script


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
    ``launch`` says how they start the server (default: the image's entrypoint runs it);
    with ``mods`` engine.mods run first in every container the units start (the server's,
    or the Ray head's and worker's, before `ray start`: the server of a Ray head runs in the
    head's container, where they ran).
    """
    launch = launch or Launch("entrypoint", server_command(engine))
    pair = multinode_section(engine, ray)
    if multinode is None or pair["launcher"] != "ray":
        return (_server(name, flags, multinode, launch, mods),)
    gcs = f"{multinode.head}:{multinode.port or pair['port']}"
    if multinode.rank > 0:
        return (_ray_worker(name, gcs, multinode, launch, mods),)
    return _ray_head(name, flags, gcs, multinode, launch, mods)


def _server(
    name: str, flags: tuple[str, ...], multinode: MultiNode | None, launch: Launch, mods: bool
) -> EngineService:
    """The one unit of an engine alone or of a rank that runs the server itself."""
    serves_api = multinode is None or multinode.rank == 0
    entrypoint, command = launch.after_mods(flags) if mods else ("", launch.run(flags))
    return EngineService(
        f"{name}.service", name, command, entrypoint=entrypoint, serves_api=serves_api
    )


def _ray_node(multinode: MultiNode) -> tuple[str, ...]:
    """What every `ray start` of the plan gets: this Spark's fabric address, in front."""
    return ("--node-ip-address", multinode.address, "--disable-usage-stats", "--block")


def _ray_start(launch: Launch, command: tuple[str, ...], mods: bool) -> tuple[str, tuple[str, ...]]:
    """``--entrypoint`` and command of a Ray container: engine.mods first when there are."""
    return launch.other_after_mods(command) if mods else launch.other(command)


def _ray_worker(
    name: str, gcs: str, multinode: MultiNode, launch: Launch, mods: bool
) -> EngineService:
    """The Ray worker of a Spark after the head: it waits for the head's Ray port."""
    worker = f"{name}-ray-worker"
    entrypoint, command = _ray_start(
        launch, ("ray", "start", "--address", gcs, *_ray_node(multinode)), mods
    )
    return EngineService(
        f"{worker}.service",
        worker,
        command,
        role="ray-worker",
        entrypoint=entrypoint,
        wait=("--address", gcs),
    )


def _ray_head(
    name: str,
    flags: tuple[str, ...],
    gcs: str,
    multinode: MultiNode,
    launch: Launch,
    mods: bool,
) -> tuple[EngineService, ...]:
    """The Ray head, and the server in its container once every Spark's GPU is in."""
    head = f"{name}-ray-head"
    port = gcs.rsplit(":", 1)[1]
    entrypoint, command = _ray_start(
        launch,
        ("ray", "start", "--head", "--port", port, *RAY_HEAD_CLOSED, *_ray_node(multinode)),
        mods,
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
