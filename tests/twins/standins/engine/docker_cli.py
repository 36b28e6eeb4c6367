"""A stand-in for the `docker` CLI in a Spark twin, where no Docker engine can run.

It supports what engine units and operators use, with docker 28's messages and exit codes:

    docker run [--name N] [--rm] [--restart P] [-d] [--gpus G] [--network M] [--ipc M]
               [--shm-size S] [--ulimit L]... [-e K[=V]]... [--env-file F]...
               [-v SRC:DST[:MODE]]... [-p P]... [--entrypoint E] [-i] [-t]
               [--device PATH[:PATH][:rwm]]... [--cap-add CAP]... [--cap-drop CAP]...
               [--security-opt OPT]... [--privileged]
               [--pull missing|always|never] [-q] IMAGE [COMMAND] [ARG...]
    docker exec [-i] [-t] [-d] [-e K[=V]]... [-u U] [-w DIR] CONTAINER COMMAND [ARG...]
    docker stop [-t N] CONTAINER...        docker kill [-s SIGNAL] CONTAINER...
    docker rm [-f] CONTAINER...            docker logs [-f] [-n N] CONTAINER
    docker ps [-a] [-q] [--no-trunc] [--filter name=|status=|id=]... [--format TEMPLATE]
    docker inspect [-f TEMPLATE] [--type container|image] NAME|ID...
    docker pull [-q] [--platform P] IMAGE  docker images [-q] [--format T] [REPO[:TAG]]
    docker image inspect [-f T] IMAGE...   docker rmi [-f] IMAGE...
    docker save [-o FILE] IMAGE...         docker load [-i FILE] [-q]
    docker manifest inspect [-v] IMAGE     docker info [-f TEMPLATE]
    docker image pull|inspect|ls|rm|save|load ...                docker --version

Images are real: `docker pull` fetches them over HTTP from the twin's stand-in registry
(../registry/registry.py; its URL in $SPARK_TWIN_REGISTRY_URL, else /etc/spark-twin/registry-url,
else http://127.0.0.1:5000): the index, the linux/arm64 manifest, the config and the layers,
each checked against its digest, with docker's progress output. The store
($SPARK_TWIN_DOCKER_IMAGES, default /var/lib/spark-twin-docker/images) survives reboots:
layers/<diff_id>.tar (unpacked layers), blobs/ (downloaded, not yet unpacked), ingest/
(partial downloads, resumed with a Range by the next pull), images/<id>/ (config.json,
record.json and rootfs/, the image's Python distributions unpacked from its layers) and
repositories.json (tags and repo digests). `docker run` runs only an image in the store
(pulling it first unless --pull never), with the ENTRYPOINT, CMD and ENV of its config. An
image missing from the registry (listed in /etc/spark-twin/missing-images, which the
registry reads) fails to pull as an unknown tag does.

A container is the engine's process on this host. As docker does, `docker run IMAGE ARGS`
runs the ENTRYPOINT with ARGS appended (ARGS alone without one, the image's CMD without ARGS;
`--entrypoint` replaces it; `docker exec` never applies it). An entrypoint that is a wrapper
script (NVIDIA's /opt/nvidia/nvidia_entrypoint.sh) runs as the stand-in script (../images.json
"wrappers") under bash with its real path as $0, so it execs its arguments as bash would. An
engine command line of the image's engine (see engine.py) runs the stand-in engine as that
release: the engine, release and Ray are what the image's own Python distributions
(`<name>-<version>.dist-info`, on the container's PYTHONPATH, so `importlib.metadata` finds
them) say; an engine image's Python also finds the stand-in torch (pylib/torch), whose "nccl"
backend moves real bytes between ranks over TCP (the link test). Any other command is found
on the container's PATH, which has the image's own
programs first (the stand-ins in /opt/spark-twin/image/<program>/, or
$SPARK_TWIN_IMAGE_PROGRAMS: vllm or sglang, and ray only in an image with Ray), so `ray` in
an image without it is not found. It gets the container's environment, and SPARK_TWIN_MOUNTS
tells it where the container paths of its bind mounts are on the host. The network is always
the host's. `--device`, `--cap-add`, `--cap-drop`, `--security-opt` and `--privileged` are
recorded in HostConfig (Devices, CapAdd, CapDrop, SecurityOpt, Privileged); devices, limits,
added capabilities and privilege are passed to the process as SPARK_TWIN_DEVICES (the
container paths, colon-separated), SPARK_TWIN_ULIMITS (name=soft:hard, comma-separated), SPARK_TWIN_CAPS and
SPARK_TWIN_PRIVILEGED (1 or 0), from which the NCCL stand-in (nccl.py) decides RDMA or
sockets; a --device path missing on the host ($SPARK_TWIN_DEVICE_ROOT, default /) stops
the start with dockerd's "error gathering device information" and leaves the container
created. `--gpus` needs the NVIDIA runtime in /etc/docker/daemon.json
($SPARK_TWIN_DOCKER_DAEMON_JSON) or a CDI spec in /etc/cdi or /var/run/cdi
($SPARK_TWIN_CDI_DIRS), as dockerd does.

`docker run` itself plays the container's shim: it starts the process, records it in the
state folder ($SPARK_TWIN_DOCKER_STATE, default /run/spark-twin-docker: NAME.json and
NAME.log), forwards signals to it, waits, records the exit code and exits with it. In the
foreground it copies the output to its own (the unit's journal); with -d a forked shim does
the same with the output to the log only. Other commands read and signal the recorded process.

`docker exec` runs a command in a running container: with its environment, moved into the
cgroup of the container's shim (so it outlives the exec client, as a process in a container
does), recorded beside the container and killed when the container's process ends. Like
docker, the exec client passes no signal on to the command.

Restart policies are validated and recorded, not acted on.
"""

from __future__ import annotations

# hashlib, importlib.util, secrets, shutil and subprocess are imported by the functions that
# use them: the calls a deploy makes most (ps, info, image inspect) need none of them, and
# importing them took about 45 ms of each call's start in a twin (python3 -X importtime).
import grp
import io
import json
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple  # not dataclasses: importing it (inspect, ast) took 22 ms

VERSION = "Docker version 28.5.1, build e180ab8"
STATE = Path(os.environ.get("SPARK_TWIN_DOCKER_STATE", "/run/spark-twin-docker"))
ENGINE = Path(__file__).resolve().with_name("engine.py")
# The stand-in torch of the engine images (its "nccl" backend moves bytes over TCP): the
# folder holding the package, put on an engine image's PYTHONPATH.
TORCH_STANDIN = Path(__file__).resolve().with_name("pylib")
# What each image is (engine, release, ENTRYPOINT, Ray): harness data beside the stand-ins.
IMAGES = Path(
    os.environ.get("SPARK_TWIN_IMAGES", Path(__file__).resolve().parents[1] / "images.json")
)
# The images' own programs, one folder each (vllm/vllm, sglang/sglang, ray/ray): an image's PATH
# has the folders of the programs it has, before the system's.
IMAGE_PROGRAMS = Path(os.environ.get("SPARK_TWIN_IMAGE_PROGRAMS", "/opt/spark-twin/image"))
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
PROXIED_SIGNALS = (
    signal.SIGTERM,
    signal.SIGINT,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
)
RESTART_POLICIES = ("no", "always", "on-failure", "unless-stopped")
ULIMITS = (
    "core",
    "cpu",
    "data",
    "fsize",
    "locks",
    "memlock",
    "msgqueue",
    "nice",
    "nofile",
    "nproc",
    "rss",
    "rtprio",
    "rttime",
    "sigpending",
    "stack",
)
NAME = re.compile(r"^/?[a-zA-Z0-9][a-zA-Z0-9_.-]+$")
NEVER = "0001-01-01T00:00:00Z"
SOCKET_DENIED = (
    "permission denied while trying to connect to the Docker daemon socket at "
    'unix:///var/run/docker.sock: Get "http://%2Fvar%2Frun%2Fdocker.sock/v1.51/'
    'containers/json": dial unix /var/run/docker.sock: connect: permission denied'
)


class Failure(Exception):
    """An error docker prints (to stderr) before exiting with `status`."""

    def __init__(self, message: str, status: int = 1):
        super().__init__(message)
        self.status = status


# --- command lines, parsed as docker's flag library does ---------------------------------


class Flag(NamedTuple):
    long: str
    short: str = ""
    kind: str = "bool"  # bool | value | list
    check: Callable[[str], object] | None = None  # raises ValueError(reason) when invalid

    def label(self) -> str:
        return f"-{self.short}, --{self.long}" if self.short else f"--{self.long}"


class Command(NamedTuple):
    usage: str
    flags: tuple[Flag, ...]
    min_args: int = 1
    exact: bool = False  # exactly min_args arguments
    interspersed: bool = True  # flags after arguments (not for run: they belong to COMMAND)


def usage_error(name: str, command: Command, message: str) -> Failure:
    return Failure(
        f"{message}\n\nUsage:  docker {name} {command.usage}\n\n"
        f"Run 'docker {name} --help' for more information",
        125,
    )


def parse_args(name: str, command: Command, argv: list[str]) -> tuple[dict, list[str]]:
    flags = {f"--{f.long}": f for f in command.flags}
    flags.update({f"-{f.short}": f for f in command.flags if f.short})
    options: dict[str, Any] = {
        f.long: [] if f.kind == "list" else (False if f.kind == "bool" else None)
        for f in command.flags
    }
    args: list[str] = []

    def take(flag: Flag, value: str | None, rest: list[str], shown: str) -> None:
        if flag.kind == "bool":
            options[flag.long] = value is None or value.lower() in ("1", "t", "true")
            return
        if value is None:
            if not rest:
                raise usage_error(name, command, f"flag needs an argument: {shown}")
            value = rest.pop(0)
        if flag.check:
            try:
                flag.check(value)
            except ValueError as reason:
                raise usage_error(
                    name, command, f'invalid argument "{value}" for "{flag.label()}" flag: {reason}'
                ) from None
        if flag.kind == "list":
            options[flag.long].append(value)
        else:
            options[flag.long] = value

    rest = list(argv)
    while rest:
        arg = rest.pop(0)
        if arg == "--":
            args += rest
            break
        if arg.startswith("--"):
            key, eq, value = arg.partition("=")
            if key not in flags:
                raise usage_error(name, command, f"unknown flag: {key}")
            take(flags[key], value if eq else None, rest, key)
        elif arg.startswith("-") and len(arg) > 1:
            letters = arg[1:]
            while letters:
                letter, letters = letters[0], letters[1:]
                flag = flags.get(f"-{letter}")
                if flag is None:
                    raise usage_error(name, command, f"unknown shorthand flag: '{letter}' in {arg}")
                if flag.kind == "bool":
                    take(flag, None, rest, f"'{letter}' in {arg}")
                else:
                    take(flag, letters.removeprefix("=") or None, rest, f"'{letter}' in -{letter}")
                    letters = ""
        else:
            args.append(arg)
            if not command.interspersed:
                args += rest
                break
    if len(args) < command.min_args or (command.exact and len(args) != command.min_args):
        needs = (
            f"exactly {command.min_args}"
            if command.exact and command.min_args > 1
            else (f"{command.min_args}" if command.exact else f"at least {command.min_args}")
        )
        plural = "" if command.min_args == 1 else "s"
        see = "Run" if command.exact else "See"
        raise Failure(
            f"docker: 'docker {name}' requires {needs} argument{plural}\n\n"
            f"Usage:  docker {name} {command.usage}\n\n"
            f"{see} 'docker {name} --help' for more information",
            1,
        )
    return options, args


def check_size(value: str) -> int:
    """go-units RAMInBytes: 64g, 1.5GiB, 512m, 1024."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(.*)", value)
    if not match:
        raise ValueError(f"invalid size: '{value}'")
    suffix = match.group(2).strip().lower().removesuffix("b").removesuffix("i")
    if suffix not in ("", "k", "m", "g", "t", "p"):
        raise ValueError(f"invalid suffix: '{match.group(2).strip()}'")
    return int(float(match.group(1)) * 1024 ** " kmgtp".index(suffix or " "))


def check_ulimit(value: str) -> dict:
    kind, eq, limits = value.partition("=")
    if not eq:
        raise ValueError(f"invalid ulimit argument: {value}")
    if kind not in ULIMITS:
        raise ValueError(f"invalid ulimit type: {kind}")
    soft, _, hard = limits.partition(":")
    for number in (soft, hard or soft):
        check_int(number)
    soft_n, hard_n = int(soft), int(hard or soft)
    if soft_n > hard_n and hard_n != -1:
        raise ValueError(
            f"ulimit soft limit must be less than or equal to hard limit: {soft_n} > {hard_n}"
        )
    return {"Name": kind, "Hard": hard_n, "Soft": soft_n}


# --- devices, capabilities, privileges (what NCCL needs for RDMA) ----------------------------

# Where the host's device nodes are (unit tests point it at a folder of their own).
DEVICE_ROOT = Path(os.environ.get("SPARK_TWIN_DEVICE_ROOT", "/"))
DEVICE_PERMISSIONS = re.compile(r"[rwm]{1,3}")


def check_device(value: str) -> None:
    """docker/cli opts.ValidateDevice: PATH[:PATH][:PERMISSIONS], absolute paths."""
    parts = value.split(":")
    if len(parts) > 3 or not parts[0]:
        raise ValueError(f"bad format for path: {value}")
    if (
        len(parts) >= 2
        and not parts[1].startswith("/")
        and not (len(parts) == 2 and DEVICE_PERMISSIONS.fullmatch(parts[1]))
    ):
        raise ValueError(f"bad format for path: {parts[1]}")
    if not parts[0].startswith("/"):
        raise ValueError(f"bad format for path: {parts[0]}")


def device_mappings(specs: list[str]) -> list[dict]:
    """HostConfig.Devices as docker records --device: host path, container path (the host
    path when not given) and cgroup permissions (rwm when not given)."""
    found = []
    for spec in specs:
        parts = spec.split(":")
        permissions = (
            parts[-1] if len(parts) > 1 and DEVICE_PERMISSIONS.fullmatch(parts[-1]) else ""
        )
        paths = parts[:-1] if permissions else parts
        found.append(
            {
                "PathOnHost": paths[0],
                "PathInContainer": paths[1] if len(paths) > 1 else paths[0],
                "CgroupPermissions": permissions or "rwm",
            }
        )
    return found


def gather_devices(c: dict) -> None:
    """The daemon's check at start: every --device path exists on the host (a folder gives
    the devices under it), or the container does not start."""
    for device in c["host_config"].get("Devices") or []:
        host = device["PathOnHost"]
        if not (DEVICE_ROOT / host.lstrip("/")).exists():
            raise Failure(
                "Error response from daemon: error gathering device information while adding "
                f'custom device "{host}": no such file or directory'
            )


def privilege_env(c: dict) -> dict[str, str]:
    """What the container was given, for the stand-ins that run in it (engine/nccl.py):
    --device container paths, --ulimit limits, --cap-add values, --privileged."""
    config = c["host_config"]
    return {
        "SPARK_TWIN_DEVICES": ":".join(d["PathInContainer"] for d in config.get("Devices") or []),
        "SPARK_TWIN_ULIMITS": ",".join(
            f"{u['Name']}={u['Soft']}:{u['Hard']}" for u in config.get("Ulimits") or []
        ),
        "SPARK_TWIN_CAPS": ",".join(config.get("CapAdd") or []),
        "SPARK_TWIN_PRIVILEGED": "1" if config.get("Privileged") else "0",
    }


def check_gpus(value: str) -> None:
    for part in value.split(","):
        key, eq, setting = part.partition("=")
        if eq and key in ("count", "device", "driver", "capabilities", "options"):
            continue
        if part != "all" and not part.isdigit():
            raise ValueError(
                f'invalid count ({part}): value must be either "all" or an integer: invalid syntax'
            )


def check_int(value: str) -> None:
    if not re.fullmatch(r"-?\d+", value):
        raise ValueError(f'strconv.ParseInt: parsing "{value}": invalid syntax')


def check_tail(value: str) -> None:
    if value != "all":
        check_int(value)


RUN = Command(
    "[OPTIONS] IMAGE [COMMAND] [ARG...]",
    (
        Flag("name", kind="value"),
        Flag("rm"),
        Flag("restart", kind="value"),
        Flag("detach", "d"),
        Flag("interactive", "i"),
        Flag("tty", "t"),
        Flag("gpus", kind="value", check=check_gpus),
        Flag("network", kind="value"),
        Flag("net", kind="value"),
        Flag("ipc", kind="value"),
        Flag("shm-size", kind="value", check=check_size),
        Flag("ulimit", kind="list", check=check_ulimit),
        Flag("env", "e", "list"),
        Flag("env-file", kind="list"),
        Flag("volume", "v", "list"),
        Flag("publish", "p", "list"),
        Flag("entrypoint", kind="value"),
        Flag("pull", kind="value"),
        Flag("quiet", "q"),
        Flag("device", kind="list", check=check_device),
        Flag("cap-add", kind="list"),
        Flag("cap-drop", kind="list"),
        Flag("security-opt", kind="list"),
        Flag("privileged"),
    ),
    interspersed=False,
)
IMAGES_LS = Command(
    "[OPTIONS] [REPOSITORY[:TAG]]",
    (Flag("quiet", "q"), Flag("format", kind="value"), Flag("all", "a"), Flag("no-trunc")),
    min_args=0,
)
IMAGE_COMMANDS = {  # docker image SUBCOMMAND -> the top-level command it is
    "pull": "pull",
    "inspect": "image inspect",
    "ls": "images",
    "list": "images",
    "rm": "rmi",
    "remove": "rmi",
    "save": "save",
    "load": "load",
}
COMMANDS = {
    "run": RUN,
    "stop": Command(
        "[OPTIONS] CONTAINER [CONTAINER...]",
        (Flag("timeout", "t", "value", check_int), Flag("time", "", "value", check_int)),
    ),
    "kill": Command("[OPTIONS] CONTAINER [CONTAINER...]", (Flag("signal", "s", "value"),)),
    "rm": Command("[OPTIONS] CONTAINER [CONTAINER...]", (Flag("force", "f"), Flag("volumes", "v"))),
    "ps": Command(
        "[OPTIONS]",
        (
            Flag("all", "a"),
            Flag("quiet", "q"),
            Flag("no-trunc"),
            Flag("filter", "f", "list"),
            Flag("format", kind="value"),
        ),
        min_args=0,
    ),
    "inspect": Command(
        "[OPTIONS] NAME|ID [NAME|ID...]", (Flag("format", "f", "value"), Flag("type", kind="value"))
    ),
    "image inspect": Command("[OPTIONS] IMAGE [IMAGE...]", (Flag("format", "f", "value"),)),
    "images": IMAGES_LS,
    "rmi": Command("[OPTIONS] IMAGE [IMAGE...]", (Flag("force", "f"), Flag("no-prune"))),
    "save": Command("[OPTIONS] IMAGE [IMAGE...]", (Flag("output", "o", "value"),)),
    "load": Command("[OPTIONS]", (Flag("input", "i", "value"), Flag("quiet", "q")), min_args=0),
    "manifest": Command(
        "inspect [OPTIONS] [MANIFEST_LIST] MANIFEST",
        (Flag("verbose", "v"), Flag("insecure")),
        min_args=2,
    ),
    "info": Command("[OPTIONS]", (Flag("format", "f", "value"),), min_args=0),
    "logs": Command(
        "[OPTIONS] CONTAINER",
        (Flag("follow", "f"), Flag("tail", "n", "value", check_tail)),
        exact=True,
    ),
    "pull": Command(
        "[OPTIONS] NAME[:TAG|@DIGEST]",
        (Flag("quiet", "q"), Flag("platform", kind="value"), Flag("all-tags", "a")),
        exact=True,
    ),
    "exec": Command(
        "[OPTIONS] CONTAINER COMMAND [ARG...]",
        (
            Flag("interactive", "i"),
            Flag("tty", "t"),
            Flag("detach", "d"),
            Flag("env", "e", "list"),
            Flag("user", "u", "value"),
            Flag("workdir", "w", "value"),
        ),
        min_args=2,
        interspersed=False,
    ),
}


# --- containers: records in the state folder and the processes they name -----------------


def rfc3339(stamp: float | None) -> str:
    if not stamp:
        return NEVER
    moment = datetime.fromtimestamp(stamp, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond * 1000:09d}Z"


def process_start(pid: int) -> str | None:
    """The start time of a live (not zombie) process, to tell it from a reused pid."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] in "ZXx" else fields[19]


def alive(pid: int | None, start: str | None) -> bool:
    if not pid:
        return False
    return process_start(pid) == start


def record_path(name: str) -> Path:
    return STATE / f"{name}.json"


def state_dir() -> Path:
    """The state folder (on /run, so made at first use): root's, and the docker group's."""
    if not STATE.is_dir():
        STATE.mkdir(parents=True, exist_ok=True)
        try:
            os.chown(STATE, -1, grp.getgrnam("docker").gr_gid)
            STATE.chmod(0o2775)
        except (KeyError, PermissionError):
            pass
    return STATE


def save(c: dict) -> None:
    temporary = STATE / f".{c['name']}.{os.getpid()}.tmp"
    temporary.write_text(json.dumps(c, indent=1))
    os.replace(temporary, record_path(c["name"]))


def remove(c: dict) -> None:
    end_execs(c)
    for path in (record_path(c["name"]), STATE / f"{c['name']}.log"):
        path.unlink(missing_ok=True)


def exec_records(c: dict) -> list[Path]:
    return sorted(STATE.glob(f"{c['name']}.exec-*"))


def end_execs(c: dict) -> None:
    """What `docker exec` started in a container ends with it (its pid namespace goes)."""
    for path in exec_records(c):
        try:
            pid, start = json.loads(path.read_text())
            if alive(pid, start):
                os.killpg(pid, signal.SIGKILL)
        except (OSError, ValueError):
            pass
        path.unlink(missing_ok=True)


def read(name: str) -> dict | None:
    try:
        return json.loads(record_path(name).read_text())
    except (OSError, ValueError):
        return None


def finish(c: dict, code: int) -> None:
    """Record an exit (or remove an --rm container), unless it was removed meanwhile."""
    current = read(c["name"])
    if current is None or current["id"] != c["id"]:
        return
    if c["auto_remove"]:
        remove(c)
        return
    current.update(status="exited", exit_code=code, finished=time.time(), pid=0)
    save(current)


def load(name: str) -> dict | None:
    """A container record, brought up to date: a recorded process that died with its shim
    (both killed, as systemd does at the end of a stop) is an exited container."""
    c = read(name)
    if (
        c
        and running(c)
        and not alive(c["pid"], c["pid_start"])
        and not alive(c["shim_pid"], c["shim_start"])
    ):
        finish(c, 128 + signal.SIGKILL)
        return read(name)
    return c


def containers() -> list[dict]:
    found = [load(path.stem) for path in sorted(STATE.glob("*.json"))] if STATE.is_dir() else []
    return sorted((c for c in found if c), key=lambda c: c["created"], reverse=True)


def find(reference: str) -> dict:
    """By name, full id or unique id prefix, as docker resolves a container reference."""
    c = load(reference.removeprefix("/")) if NAME.match(reference) else None
    if c:
        return c
    matches = [c for c in containers() if c["id"].startswith(reference)] if reference else []
    if len(matches) == 1:
        return matches[0]
    raise Failure(f"Error response from daemon: No such container: {reference}")


def running(c: dict) -> bool:
    return c["status"] == "running"


def send(c: dict, signum: int) -> None:
    """A signal for the container's main process; SIGKILL ends all of its processes."""
    try:
        if signum == signal.SIGKILL:
            os.killpg(c["pid"], signum)  # its own session and group, from the shim
        else:
            os.kill(c["pid"], signum)
    except ProcessLookupError:
        pass  # it has just ended


def wait_stopped(c: dict, timeout: float) -> bool:
    """Wait until the container is no longer running (its shim has recorded the exit)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        current = load(c["name"])
        if current is None or current["id"] != c["id"] or not running(current):
            return True
        time.sleep(0.05)
    return False


# --- images: the store, the registry client, pull's output -------------------------------

# The image store, kept across reboots (unlike containers): layers by diff_id (the uncompressed
# tar), complete downloads waiting to be unpacked and partial ones (resumed with a Range, as
# containerd's ingest does), image configs by ID and the tag/digest index.
STORE = Path(os.environ.get("SPARK_TWIN_DOCKER_IMAGES", "/var/lib/spark-twin-docker/images"))
REGISTRY_URL = Path("/etc/spark-twin/registry-url")
DEFAULT_REGISTRY = "http://127.0.0.1:5000"
DAEMON_JSON = Path(os.environ.get("SPARK_TWIN_DOCKER_DAEMON_JSON", "/etc/docker/daemon.json"))
CDI_DIRS = ["/etc/cdi", "/var/run/cdi"]  # dockerd's default CDI spec dirs (docs: cdi)
SITE = "usr/local/lib/python3/dist-packages"  # where the stand-in registry's images keep them
PROGRAMS_IN_IMAGE = "/opt/spark-twin/image"  # the programs' folder an image's PATH names
MAX_CONCURRENT_DOWNLOADS = 3  # dockerd's default max-concurrent-downloads
ACCEPT = ", ".join(
    (
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.v2+json",
    )
)
INDEXES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
)


def registry_url() -> str:
    if os.environ.get("SPARK_TWIN_REGISTRY_URL"):
        return os.environ["SPARK_TWIN_REGISTRY_URL"].rstrip("/")
    try:
        return REGISTRY_URL.read_text().strip().rstrip("/") or DEFAULT_REGISTRY
    except OSError:
        return DEFAULT_REGISTRY


class Reference(NamedTuple):
    """An image reference as docker's reference library normalises it."""

    repo: str  # full: docker.io/library/debian, nvcr.io/nvidia/vllm
    tag: str | None
    digest: str | None

    @classmethod
    def parse(cls, text: str) -> Reference:
        name, at, digest = text.partition("@")
        last = name.rsplit("/", 1)[-1]
        tag = None
        if ":" in last:
            name, tag = name.rsplit(":", 1)
        first = name.split("/", 1)[0]
        if "/" in name and ("." in first or ":" in first or first == "localhost"):
            repo = name
        else:
            repo = f"docker.io/{name}" if "/" in name else f"docker.io/library/{name}"
        familiar = repo.removeprefix("docker.io/").removeprefix("library/")
        if familiar != familiar.lower() or not re.fullmatch(r"[a-z0-9._/:-]+", repo):
            shown = repo.removeprefix("docker.io/")
            raise Failure(f"invalid reference format: repository name ({shown}) must be lowercase")
        if at and not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
            raise Failure("invalid reference format")
        return cls(repo, tag if tag or at else "latest", digest or None)

    @property
    def familiar_repo(self) -> str:
        """As docker shows it: without docker.io/ and library/."""
        return self.repo.removeprefix("docker.io/").removeprefix("library/")

    @property
    def path(self) -> str:
        """The repository path on its registry (`vllm/vllm-openai`, `library/debian`)."""
        return self.repo.split("/", 1)[1]

    def familiar(self) -> str:
        return (
            self.familiar_repo
            + (f":{self.tag}" if self.tag else "")
            + (f"@{self.digest}" if self.digest else "")
        )

    def full(self) -> str:
        return (
            self.repo
            + (f":{self.tag}" if self.tag else "")
            + (f"@{self.digest}" if self.digest else "")
        )


def human_size(size: float, precision: int = 4) -> str:
    """go-units HumanSizeWithPrecision (docker/go-units size.go): decimal units, `%.<p>g`."""
    units = ["B", "kB", "MB", "GB", "TB", "PB", "EB", "ZB", "YB"]
    index = 0
    while size >= 1000 and index < len(units) - 1:
        size /= 1000
        index += 1
    return f"{size:.{precision}g}{units[index]}"


def store_dir(*parts: str) -> Path:
    path = STORE.joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return path


class StoreLock:
    """The store's index is changed by one command at a time."""

    def __enter__(self):
        import fcntl

        self.file = open(store_dir() / ".lock", "w")  # noqa: SIM115 -- closed in __exit__
        fcntl.flock(self.file, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        self.file.close()


def repositories() -> dict:
    try:
        return json.loads((STORE / "repositories.json").read_text())
    except (OSError, ValueError):
        return {"tags": {}, "digests": {}}


def save_repositories(index: dict) -> None:
    path = store_dir() / "repositories.json"
    temporary = path.with_suffix(f".{os.getpid()}.tmp")
    temporary.write_text(json.dumps(index, indent=1, sort_keys=True))
    os.replace(temporary, path)


def image_record(image_id: str) -> dict | None:
    try:
        return json.loads((STORE / "images" / image_id.split(":")[-1] / "record.json").read_text())
    except (OSError, ValueError):
        return None


def all_images() -> list[dict]:
    folder = STORE / "images"
    found = [image_record(p.name) for p in folder.iterdir()] if folder.is_dir() else []
    return [r for r in found if r]


def image_config(image_id: str) -> dict:
    return json.loads((STORE / "images" / image_id.split(":")[-1] / "config.json").read_bytes())


def resolve_image(text: str) -> str | None:
    """The ID of a local image: by (a prefix of) its ID, repo:tag or repo@digest."""
    bare = text.removeprefix("sha256:")
    if re.fullmatch(r"[0-9a-f]{4,64}", bare):
        matches = [r["id"] for r in all_images() if r["id"].split(":")[1].startswith(bare)]
        if len(matches) == 1:
            return matches[0]
        if text.startswith("sha256:"):
            return None
    try:
        ref = Reference.parse(text)
    except Failure:
        return None
    index = repositories()
    if ref.digest:
        return index["digests"].get(f"{ref.repo}@{ref.digest}")
    return index["tags"].get(f"{ref.repo}:{ref.tag}")


def layer_path(diff_id: str) -> Path:
    return STORE / "layers" / f"{diff_id.split(':')[1]}.tar"


class RegistryError(Exception):
    def __init__(self, status: int, codes: list[str]):
        super().__init__(f"{status} {codes}")
        self.status = status
        self.codes = codes


class Registry:
    """The registry client of `docker pull`, over plain HTTP to the twin's registry."""

    def __init__(self, url: str):
        self.url = url

    def request(self, path: str, accept: str | None = None, start: int = 0):
        import urllib.error
        import urllib.request

        request = urllib.request.Request(self.url + path)
        if accept:
            request.add_header("Accept", accept)
        if start:
            request.add_header("Range", f"bytes={start}-")
        try:
            return urllib.request.urlopen(request, timeout=30)
        except urllib.error.HTTPError as error:
            try:
                codes = [e.get("code", "") for e in json.loads(error.read())["errors"]]
            except (ValueError, KeyError, TypeError):
                codes = []
            raise RegistryError(error.code, codes) from None
        except (urllib.error.URLError, OSError) as error:
            reason = getattr(error, "reason", error)
            host = self.url.split("://", 1)[1].split("/", 1)[0]
            if isinstance(reason, ConnectionRefusedError):
                detail = f"dial tcp {host}: connect: connection refused"
            else:
                detail = f"dial tcp {host}: {reason}"
            raise Failure(f'Error response from daemon: Get "{self.url}{path}": {detail}') from None

    def ping(self) -> None:
        self.request("/v2/").close()

    def manifest(self, ref: Reference, which: str) -> tuple[bytes, str, str]:
        import hashlib

        with self.request(f"/v2/{ref.repo}/manifests/{which}", ACCEPT) as reply:
            data = reply.read()
            kind = reply.headers.get("Content-Type", "")
        return data, kind, "sha256:" + hashlib.sha256(data).hexdigest()

    def blob(self, ref: Reference, digest: str) -> bytes:
        import hashlib

        with self.request(f"/v2/{ref.repo}/blobs/{digest}") as reply:
            data = reply.read()
        if "sha256:" + hashlib.sha256(data).hexdigest() != digest:
            raise Failure(f"Error response from daemon: digest mismatch for {digest}")
        return data


def manifest_failure(ref: Reference, error: RegistryError) -> Failure:
    if "MANIFEST_UNKNOWN" in error.codes:
        return Failure(
            f"Error response from daemon: manifest for {ref.familiar()} not found: "
            "manifest unknown: manifest unknown"
        )
    return Failure(  # Docker Hub's answer for a repository that does not exist
        f"Error response from daemon: pull access denied for {ref.familiar_repo}, repository "
        "does not exist or may require 'docker login': denied: requested access to the "
        "resource is denied"
    )


def wanted_platform(platform: str | None) -> tuple[str, str]:
    os_name, _, arch = (platform or "linux/arm64").partition("/")
    return os_name, arch.split("/")[0] or "arm64"


def fetch_manifest(
    registry: Registry, ref: Reference, platform: str | None
) -> tuple[dict, str, str, bytes]:
    """(platform manifest, its digest, the digest the reference names, index bytes)."""
    try:
        data, kind, top = registry.manifest(ref, ref.digest or ref.tag or "latest")
        document = json.loads(data)
        if kind in INDEXES or document.get("mediaType") in INDEXES:
            os_name, arch = wanted_platform(platform)
            for entry in document["manifests"]:
                if (entry["platform"]["os"], entry["platform"]["architecture"]) == (os_name, arch):
                    child, _, digest = registry.manifest(ref, entry["digest"])
                    return json.loads(child), digest, top, data
            raise Failure(
                f"Error response from daemon: no matching manifest for {os_name}/{arch} in the "
                "manifest list entries"
            )
        return document, top, top, data
    except RegistryError as error:
        raise manifest_failure(ref, error) from None


class Progress:
    """Pull's output, as docker's CLI prints the daemon's JSON messages
    (moby pkg/jsonmessage, DisplayJSONMessagesStream and JSONMessage.Display).

    Not a terminal: a message with progress (Downloading, Extracting) is not shown, the
    others are `ID: STATUS` lines. A terminal: every message of a layer rewrites that layer's
    line in place (cursor up by its distance from the bottom, ESC[2K, CR, the text, CR,
    cursor down), with JSONProgress.String's bar when the terminal is wider than 110."""

    def __init__(self, out, quiet: bool = False):
        self.out = out
        self.quiet = quiet
        try:
            self.terminal = os.isatty(out.fileno())
        except (OSError, ValueError, AttributeError):
            self.terminal = False
        self.ids: dict[str, int] = {}
        self.lock = threading.Lock()

    def width(self) -> int:
        """JSONProgress's width: the terminal's, 200 when it cannot be read."""
        try:
            return os.get_terminal_size(self.out.fileno()).columns
        except (OSError, ValueError, AttributeError):
            return 200

    def bar(self, current: int, total: int) -> str:
        """jsonmessage JSONProgress.String (moby pkg/jsonmessage/jsonmessage.go), bytes units,
        no Start (the pull's progress sets none, so no time left)."""
        if current <= 0 and total <= 0:
            return ""
        if total <= 0:
            return f"{human_size(current):>8}"
        percentage = min(int(current / total * 100) // 2, 50)
        box = ""
        if self.width() > 110:
            box = f"[{'=' * percentage}>{' ' * max(50 - percentage, 0)}] "
        numbers = f"{human_size(current):>8}/{human_size(total)}"
        if current > total:
            numbers = f"{human_size(current):>8}"
        return box + numbers

    def write(self, text: str) -> None:
        self.out.write(text)
        self.out.flush()

    def status(self, text: str, ident: str = "") -> None:
        """A message without progress (`Pulling from`, Digest, Status): ends the layer lines."""
        if self.quiet:
            return
        with self.lock:
            self.ids = {}
            self.write(f"{ident}: {text}\n" if ident else f"{text}\n")

    def update(self, ident: str, action: str, current: int = 0, total: int = 0) -> None:
        """A layer's message (progressDetail present, empty unless current/total)."""
        if self.quiet:
            return
        with self.lock:
            shown = self.bar(current, total)
            if not self.terminal:
                if not shown:
                    self.write(f"{ident}: {action}\n")
                return
            line = self.ids.get(ident)
            text = ""
            if line is None:
                line = self.ids[ident] = len(self.ids)
                text += "\n"
            diff = len(self.ids) - line
            text += f"\x1b[{diff}A\x1b[2K\r{ident}: {action} {shown}\r\x1b[{diff}B"
            self.write(text)


def short(digest: str) -> str:
    return digest.split(":", 1)[1][:12]


def download(registry: Registry, ref: Reference, layer: dict, progress: Progress) -> Path:
    """A layer blob into the store, resuming a partial download (kept in ingest/) with a Range;
    checked against its digest."""
    import fcntl
    import hashlib

    digest, total = layer["digest"], layer["size"]
    ident = short(digest)
    done = store_dir("blobs") / digest.replace(":", "-")
    partial = store_dir("ingest") / digest.replace(":", "-")
    with open(partial, "ab", buffering=0) as sink:
        fcntl.flock(sink, fcntl.LOCK_EX)  # another pull of this layer finishes it first
        if done.is_file():
            progress.update(ident, "Download complete")
            return done
        have = partial.stat().st_size
        if have > total:
            sink.truncate(0)
            have = 0
        if have < total:
            try:
                reply = registry.request(f"/v2/{ref.repo}/blobs/{digest}", start=have)
            except RegistryError:
                raise Failure(
                    f"Error response from daemon: blob unknown to registry: {digest}"
                ) from None
            with reply:
                if have and reply.status != 206:  # the range was not honoured: start again
                    sink.truncate(0)
                    have = 0
                shown = 0.0
                while chunk := reply.read(65536):
                    sink.write(chunk)
                    have += len(chunk)
                    if time.monotonic() - shown >= 0.1:
                        progress.update(ident, "Downloading", have, total)
                        shown = time.monotonic()
            progress.update(ident, "Downloading", have, total)
        progress.update(ident, "Verifying Checksum")
        hasher = hashlib.sha256()
        with open(partial, "rb") as data:
            for chunk in iter(lambda: data.read(1 << 20), b""):
                hasher.update(chunk)
        if "sha256:" + hasher.hexdigest() != digest or have != total:
            partial.unlink(missing_ok=True)
            raise Failure(
                f"Error response from daemon: filesystem layer verification failed for digest "
                f"{digest}"
            )
        os.replace(partial, done)
    progress.update(ident, "Download complete")
    return done


def unpack(blob: Path, diff_id: str, ident: str, progress: Progress) -> None:
    """A downloaded layer into the layer store: its tar, checked against the config's diff_id."""
    import gzip
    import hashlib

    total = blob.stat().st_size
    progress.update(ident, "Extracting", min(32768, total), total)
    data = gzip.decompress(blob.read_bytes())
    if "sha256:" + hashlib.sha256(data).hexdigest() != diff_id:
        raise Failure(
            f"Error response from daemon: failed to register layer: layer {diff_id} does not "
            "match its content"
        )
    target = layer_path(diff_id)
    store_dir("layers")
    temporary = target.with_suffix(f".{os.getpid()}.tmp")
    temporary.write_bytes(data)
    os.replace(temporary, target)
    progress.update(ident, "Extracting", total, total)
    blob.unlink(missing_ok=True)
    progress.update(ident, "Pull complete")


def register_image(config_bytes: bytes, layers: list[str], names: list[str], digests: list[str]):
    """An image whose layers are in the store: its config, its unpacked Python distributions
    (the image's own site-packages, for `importlib.metadata` in its containers), its names."""
    import hashlib
    import shutil
    import tarfile

    image_id = "sha256:" + hashlib.sha256(config_bytes).hexdigest()
    folder = store_dir("images", image_id.split(":")[1])
    (folder / "config.json").write_bytes(config_bytes)
    site = folder / "rootfs"
    if not site.is_dir():
        made = folder / f"rootfs.{os.getpid()}.tmp"
        shutil.rmtree(made, ignore_errors=True)
        made.mkdir()
        for diff_id in layers:
            with tarfile.open(layer_path(diff_id)) as tar:
                for member in tar:  # regular files under SITE only (Debian 12's python: no filter)
                    name = member.name.lstrip("./")
                    if member.isfile() and name.startswith(SITE + "/") and ".." not in name:
                        target = made / name
                        target.parent.mkdir(parents=True, exist_ok=True)
                        source = tar.extractfile(member)
                        if source is not None:
                            target.write_bytes(source.read())
        os.replace(made, site)
    if not (folder / "record.json").exists():
        sizes = [layer_path(d).stat().st_size for d in layers]
        record = {"id": image_id, "layers": layers, "size": sum(sizes), "stored": time.time()}
        (folder / "record.json").write_text(json.dumps(record, indent=1))
    with StoreLock():
        index = repositories()
        for name in names:
            index["tags"][name] = image_id
        for name in digests:
            index["digests"][name] = image_id
        save_repositories(index)
    return image_id


def pull(text: str, out, quiet: bool = False, platform: str | None = None) -> str:
    """`docker pull`: the image into the store, printing docker's progress to `out`.
    Returns the image ID."""
    ref = Reference.parse(text)
    progress = Progress(out, quiet)
    registry = Registry(registry_url())
    registry.ping()
    manifest, _, top, _ = fetch_manifest(registry, ref, platform)
    progress.status(f"Pulling from {ref.path}", ref.tag or ref.digest or "")  # library/debian
    config_digest = manifest["config"]["digest"]
    image_id = config_digest
    names = [f"{ref.repo}:{ref.tag}"] if ref.tag else []
    digest_name = f"{ref.repo}@{top}"
    known = image_record(image_id)
    index = repositories()
    if (
        known
        and all(index["tags"].get(n) == image_id for n in names)
        and (index["digests"].get(digest_name) == image_id)
    ):
        progress.status(f"Digest: {top}")
        progress.status(f"Status: Image is up to date for {ref.familiar()}")
        return image_id
    try:
        config_bytes = registry.blob(ref, config_digest)
    except RegistryError:
        raise Failure(
            f"Error response from daemon: blob unknown to registry: {config_digest}"
        ) from None
    config = json.loads(config_bytes)
    diff_ids = config["rootfs"]["diff_ids"]
    layers = manifest["layers"]
    missing = []
    for layer, diff_id in zip(layers, diff_ids, strict=True):
        if layer_path(diff_id).is_file():
            progress.update(short(layer["digest"]), "Already exists")
        else:
            progress.update(short(layer["digest"]), "Pulling fs layer")
            missing.append((layer, diff_id))
    for layer, _ in missing[MAX_CONCURRENT_DOWNLOADS:]:
        progress.update(short(layer["digest"]), "Waiting")
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(MAX_CONCURRENT_DOWNLOADS) as pool:
        jobs = [pool.submit(download, registry, ref, layer, progress) for layer, _ in missing]
        for job, (layer, diff_id) in zip(jobs, missing, strict=True):
            blob = job.result()  # layers are unpacked in order, as each is downloaded
            unpack(blob, diff_id, short(layer["digest"]), progress)
    register_image(config_bytes, diff_ids, names, [digest_name])
    progress.status(f"Digest: {top}")
    if known:
        progress.status(f"Status: Image is up to date for {ref.familiar()}")
    else:
        progress.status(f"Status: Downloaded newer image for {ref.familiar()}")
    return image_id


def cmd_pull(options: dict, args: list[str]) -> int:
    ref = Reference.parse(args[0])
    pull(args[0], sys.stdout, options["quiet"], options["platform"])
    print(ref.full())
    return 0


def names_of(image_id: str) -> tuple[list[str], list[str]]:
    """RepoTags and RepoDigests, familiar as docker shows them."""
    index = repositories()

    def familiar(name: str) -> str:
        return name.removeprefix("docker.io/").removeprefix("library/")

    tags = sorted(familiar(n) for n, i in index["tags"].items() if i == image_id)
    digests = sorted(familiar(n) for n, i in index["digests"].items() if i == image_id)
    return tags, digests


def image_inspect_object(image_id: str) -> dict:
    """`docker image inspect` (docker 28, overlay2 store)."""
    config = image_config(image_id)
    record = image_record(image_id) or {}
    tags, digests = names_of(image_id)
    inner = config.get("config") or {}
    return {
        "Id": image_id,
        "RepoTags": tags,
        "RepoDigests": digests,
        "Parent": "",
        "Comment": "",
        "Created": config.get("created", NEVER),
        "DockerVersion": "",
        "Author": "",
        "Config": {
            "Hostname": "",
            "Domainname": "",
            "User": inner.get("User", ""),
            "AttachStdin": False,
            "AttachStdout": False,
            "AttachStderr": False,
            "Tty": False,
            "OpenStdin": False,
            "StdinOnce": False,
            "Env": inner.get("Env"),
            "Cmd": inner.get("Cmd"),
            "Image": "",
            "Volumes": None,
            "WorkingDir": inner.get("WorkingDir", ""),
            "Entrypoint": inner.get("Entrypoint"),
            "OnBuild": None,
            "Labels": inner.get("Labels"),
        },
        "Architecture": config.get("architecture", "arm64"),
        **({"Variant": config["variant"]} if config.get("variant") else {}),
        "Os": config.get("os", "linux"),
        "Size": record.get("size", 0),
        "GraphDriver": {"Data": None, "Name": "overlay2"},
        "RootFS": {"Type": "layers", "Layers": config["rootfs"]["diff_ids"]},
        "Metadata": {"LastTagTime": NEVER},
    }


def cmd_image_inspect(options: dict, args: list[str]) -> int:
    found, errors = [], []
    for reference in args:
        image_id = resolve_image(reference)
        if image_id and image_record(image_id):
            found.append(image_inspect_object(image_id))
        else:
            errors.append(f"Error: No such image: {reference}")
    return print_inspected(options["format"], found, errors)


def print_inspected(template: str | None, found: list[dict], errors: list[str]) -> int:
    if template:
        for obj in found:
            print(render(template, obj, lambda key: "<no value>"))
        if errors:
            print()
    else:
        print(json.dumps(found, indent=4, ensure_ascii=False))
    for error in errors:
        print(error, file=sys.stderr)
    return 1 if errors else 0


def age(created: str) -> str:
    try:
        moment = datetime.fromisoformat(re.sub(r"(\.\d+)?Z$", "+00:00", created))
    except ValueError:
        return "N/A"
    return f"{human(time.time() - moment.timestamp())} ago"


IMAGES_TABLE = "table {{.Repository}}\t{{.Tag}}\t{{.ID}}\t{{.CreatedSince}}\t{{.Size}}"
IMAGE_HEADERS = {
    "Repository": "REPOSITORY",
    "Tag": "TAG",
    "ID": "IMAGE ID",
    "CreatedSince": "CREATED",
    "CreatedAt": "CREATED AT",
    "Size": "SIZE",
    "Digest": "DIGEST",
}


def cmd_images(options: dict, args: list[str]) -> int:
    """`docker images`: a row per tag (an untagged image: <none>), newest first."""
    rows = []
    records = sorted(all_images(), key=lambda r: image_config(r["id"]).get("created", ""))
    for record in reversed(records):
        config = image_config(record["id"])
        tags, _ = names_of(record["id"])
        for tag in tags or ["<none>:<none>"]:
            repo, _, name = tag.rpartition(":")
            if args:  # REPOSITORY[:TAG]: that repository, that tag when one is given
                wanted = Reference.parse(args[0])
                tagged = ":" in args[0].rsplit("/", 1)[-1]
                if wanted.familiar_repo != repo or (tagged and wanted.tag != name):
                    continue
            rows.append(
                {
                    "Repository": repo,
                    "Tag": name,
                    "ID": record["id"] if options["no-trunc"] else record["id"].split(":")[1][:12],
                    "CreatedSince": age(config.get("created", "")),
                    "CreatedAt": config.get("created", ""),
                    # docker/cli formatter/image.go: HumanSizeWithPrecision(size, 3)
                    "Size": human_size(record["size"], 3),
                    "Digest": "<none>",
                }
            )
    if options["quiet"]:
        seen = []
        for row in rows:
            if row["ID"] not in seen:
                seen.append(row["ID"])
        sys.stdout.write("".join(i + "\n" for i in seen))
        return 0
    return print_table(options["format"] or IMAGES_TABLE, rows, IMAGE_HEADERS, "ImageContext")


def print_table(template: str, rows: list[dict], headers: dict, context: str) -> int:
    def missing(key: str) -> str:
        raise Failure(
            f'failed to execute template: template: :1:2: executing "" at <.{key}>: '
            f"can't evaluate field {key} in type *formatter.{context}"
        )

    if template.startswith("table"):
        cells = template.removeprefix("table").strip().replace("\\t", "\t").split("\t")
        header = [
            TEMPLATE.sub(lambda m: headers.get(m.group(2), m.group(2).upper()), cell)
            for cell in cells
        ]
        body = [[render(cell, row, missing) for cell in cells] for row in rows]
        sys.stdout.write(tabulate([header, *body]))
    else:
        sys.stdout.write("".join(render(template, row, missing) + "\n" for row in rows))
    return 0


def chain_ids(diff_ids: list[str]) -> list[str]:
    """The layers' chain IDs (image-spec config.md: ChainID(L0..n) = sha256(ChainID(n-1) + " " +
    DiffID(n)))."""
    import hashlib

    chains: list[str] = []
    for diff_id in diff_ids:
        chain = (
            diff_id
            if not chains
            else ("sha256:" + hashlib.sha256(f"{chains[-1]} {diff_id}".encode()).hexdigest())
        )
        chains.append(chain)
    return chains


def cmd_rmi(options: dict, args: list[str]) -> int:
    status = 0
    for reference in args:
        try:
            for line in remove_image(reference, options["force"]):
                print(line)
        except Failure as failure:
            print(failure, file=sys.stderr)
            status = 1
    return status


def remove_image(reference: str, force: bool) -> list[str]:
    import shutil

    image_id = resolve_image(reference)
    if not image_id or not image_record(image_id):
        raise Failure(f"Error response from daemon: No such image: {reference}")
    by_id = image_id.split(":")[1].startswith(reference.removeprefix("sha256:"))
    users = [c for c in containers() if c.get("image_id") == image_id]
    if users and not force:
        c = users[0]
        if not by_id:
            raise Failure(
                f'Error response from daemon: conflict: unable to remove repository reference "'
                f'{reference}" (must force) - container {c["id"][:12]} is using its referenced '
                f"image {image_id.split(':')[1][:12]}"
            )
        how = "cannot be forced" if running(c) else "must be forced"
        state = "running" if running(c) else "stopped"
        raise Failure(
            f"Error response from daemon: conflict: unable to delete {image_id.split(':')[1][:12]}"
            f" ({how}) - image is being used by {state} container {c['id'][:12]}"
        )
    lines = []
    with StoreLock():
        index = repositories()
        if by_id:
            untag = [n for n, i in {**index["tags"], **index["digests"]}.items() if i == image_id]
        else:
            ref = Reference.parse(reference)
            untag = [f"{ref.repo}:{ref.tag}"] if ref.tag else []
            if ref.digest:
                untag.append(f"{ref.repo}@{ref.digest}")
            left_tags = [n for n, i in index["tags"].items() if i == image_id and n not in untag]
            if not left_tags:  # the last tag: its repo digests go with it
                untag += [n for n, i in index["digests"].items() if i == image_id]
        for name in untag:
            for table in ("tags", "digests"):
                if index[table].pop(name, None):
                    lines.append(
                        "Untagged: " + name.removeprefix("docker.io/").removeprefix("library/")
                    )
        save_repositories(index)
        still = any(i == image_id for i in {**index["tags"], **index["digests"]}.values())
        if still or users:
            return lines
        record = image_record(image_id) or {"layers": []}
        shutil.rmtree(STORE / "images" / image_id.split(":")[1], ignore_errors=True)
        lines.append(f"Deleted: {image_id}")
        in_use = {d for r in all_images() for d in r["layers"]}
        for diff_id, chain in reversed(list(zip(record["layers"], chain_ids(record["layers"])))):
            if diff_id not in in_use:
                layer_path(diff_id).unlink(missing_ok=True)
                lines.append(f"Deleted: {chain}")
    return lines


# --- docker save / load: the archive docker 25+ writes (an OCI layout plus manifest.json) ---


def cmd_save(options: dict, args: list[str]) -> int:
    import tarfile

    if options["output"] is None and sys.stdout.isatty():
        raise Failure(
            "failed to save image: cowardly refusing to save to a terminal. Use the -o flag or "
            "redirect"
        )
    entries, seen, blobs = [], set(), {}
    repos: dict[str, dict[str, str]] = {}
    for reference in args:
        image_id = resolve_image(reference)
        if not image_id or not image_record(image_id):
            raise Failure(f"Error response from daemon: No such image: {reference}")
        config_hex = image_id.split(":")[1]
        blobs[config_hex] = STORE / "images" / config_hex / "config.json"
        record = image_record(image_id) or {}
        for diff_id in record["layers"]:
            blobs[diff_id.split(":")[1]] = layer_path(diff_id)
        tags = (
            names_of(image_id)[0]
            if reference.startswith("sha256:") or re.fullmatch(r"[0-9a-f]{4,64}", reference)
            else [Reference.parse(reference).familiar()]
        )
        for tag in tags:
            repo, _, name = tag.rpartition(":")
            repos.setdefault(repo, {})[name] = config_hex
        if image_id not in seen:
            seen.add(image_id)
            entries.append(
                {
                    "Config": f"blobs/sha256/{config_hex}",
                    "RepoTags": tags,
                    "Layers": [f"blobs/sha256/{d.split(':')[1]}" for d in record["layers"]],
                }
            )
    sink = open(options["output"], "wb") if options["output"] else sys.stdout.buffer  # noqa: SIM115
    with tarfile.open(fileobj=sink, mode="w|", format=tarfile.PAX_FORMAT) as tar:

        def add(name: str, data: bytes | None = None, path: Path | None = None) -> None:
            info = tarfile.TarInfo(name)
            info.mtime, info.mode = 0, 0o644
            if path is not None:
                info.size = path.stat().st_size
                with open(path, "rb") as handle:
                    tar.addfile(info, handle)
            else:
                info.size = len(data or b"")
                tar.addfile(info, io.BytesIO(data or b""))

        for hexdigest, path in blobs.items():
            add(f"blobs/sha256/{hexdigest}", path=path)
        add("manifest.json", json.dumps(entries).encode())
        add("repositories", json.dumps(repos).encode())
        add("oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
    if options["output"]:
        sink.close()
    else:
        sys.stdout.flush()
    return 0


def cmd_load(options: dict, args: list[str]) -> int:
    import hashlib
    import shutil
    import tarfile
    import tempfile

    if options["input"] is None and sys.stdin.isatty():
        raise Failure("requested load from stdin, but stdin is empty")
    source = open(options["input"], "rb") if options["input"] else sys.stdin.buffer  # noqa: SIM115
    work = Path(tempfile.mkdtemp(prefix="load-", dir=store_dir()))
    try:
        with tarfile.open(fileobj=source, mode="r|*") as tar:
            for member in tar:
                if not member.isfile():
                    continue
                name = member.name.lstrip("./")
                if name in ("manifest.json", "repositories", "oci-layout", "index.json") or (
                    name.startswith("blobs/sha256/") and "/" not in name[13:]
                ):
                    handle = tar.extractfile(member)
                    if handle is None:
                        continue
                    target = work / name.replace("/", "_")
                    with open(target, "wb") as out:
                        shutil.copyfileobj(handle, out, 1 << 20)
        manifest_path = work / "manifest.json"
        if not manifest_path.is_file():
            raise Failure("open /var/lib/docker/tmp/docker-import/manifest.json: no such file or "
                          "directory")  # fmt: skip
        for entry in json.loads(manifest_path.read_text()):
            config_bytes = (work / entry["Config"].replace("/", "_")).read_bytes()
            diff_ids = json.loads(config_bytes)["rootfs"]["diff_ids"]
            for diff_id, layer in zip(diff_ids, entry["Layers"], strict=True):
                if layer_path(diff_id).is_file():
                    continue  # already in the store
                staged = work / layer.replace("/", "_")
                hasher = hashlib.sha256()
                with open(staged, "rb") as data:
                    for chunk in iter(lambda: data.read(1 << 20), b""):
                        hasher.update(chunk)
                if "sha256:" + hasher.hexdigest() != diff_id:
                    raise Failure(f"Error response from daemon: layer {diff_id} does not match "
                                  "its content")  # fmt: skip
                store_dir("layers")
                os.replace(staged, layer_path(diff_id))
            tags = [f"{Reference.parse(t).repo}:{Reference.parse(t).tag}" for t in entry["RepoTags"]
                    or []]  # fmt: skip
            image_id = register_image(config_bytes, diff_ids, tags, [])
            for tag in entry["RepoTags"] or []:  # -q hides only the progress
                print(f"Loaded image: {tag}")
            if not entry["RepoTags"]:
                print(f"Loaded image ID: {image_id}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if options["input"]:
            source.close()
    return 0


# --- docker manifest inspect: the registry's manifests, as the CLI prints them -------------


def go_indent(document: Any) -> str:
    """encoding/json MarshalIndent(v, "", "\\t")."""
    return json.dumps(document, indent="\t", ensure_ascii=False)


def cmd_manifest(options: dict, args: list[str]) -> int:
    """docker/cli cli/command/manifest/inspect.go: a single manifest as the registry's JSON
    re-indented with tabs (-v: a types.ImageManifest); a list rebuilt as a Docker manifest list
    (distribution manifestlist, indented with 3 spaces; -v: a list of types.ImageManifest)."""
    import base64

    if args[0] != "inspect" or len(args) != 2:
        raise Failure(
            "docker: 'docker manifest inspect' requires 1 argument\n\nUsage:  docker manifest "
            "inspect [OPTIONS] [MANIFEST_LIST] MANIFEST",
            1,
        )
    ref = Reference.parse(args[1])
    registry = Registry(registry_url())
    try:
        data, kind, top = registry.manifest(ref, ref.digest or ref.tag or "latest")
    except RegistryError as error:
        if "MANIFEST_UNKNOWN" in error.codes:
            raise Failure(f"no such manifest: {ref.full()}") from None
        raise Failure("errors:\ndenied: requested access to the resource is denied") from None
    document = json.loads(data)

    def image_manifest(raw: bytes, digest: str, platform: dict | None, media: str) -> dict:
        parsed = json.loads(raw)
        named = ref.full() if digest == top else f"{ref.repo}:{ref.tag or 'latest'}@{digest}"
        descriptor: dict[str, Any] = {"mediaType": media, "digest": digest, "size": len(raw)}
        if platform:
            descriptor["platform"] = platform
        key = "OCIManifest" if "oci" in media else "SchemaV2Manifest"
        return {
            "Ref": named,
            "Descriptor": descriptor,
            "Raw": base64.b64encode(raw).decode(),
            key: parsed,
        }

    if not (kind in INDEXES or document.get("mediaType") in INDEXES):
        if options["verbose"]:
            print(go_indent(image_manifest(data, top, None, kind)))
        else:
            print(go_indent(document))
        return 0
    if not options["verbose"]:
        listed = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.docker.distribution.manifest.list.v2+json",
            "manifests": [
                {
                    "mediaType": m["mediaType"],
                    "size": m["size"],
                    "digest": m["digest"],
                    "platform": m["platform"],
                }  # fmt: skip
                for m in document["manifests"]
            ],
        }
        print(json.dumps(listed, indent=3))
        return 0
    found = []
    for entry in document["manifests"]:
        raw, media, digest = registry.manifest(ref, entry["digest"])
        found.append(image_manifest(raw, digest, entry["platform"], entry["mediaType"]))
    print(go_indent(found))
    return 0


# --- docker info ------------------------------------------------------------------------


def daemon_json() -> dict:
    try:
        return json.loads(DAEMON_JSON.read_text())
    except (OSError, ValueError):
        return {}


def cdi_specs() -> list[Path]:
    dirs = os.environ.get("SPARK_TWIN_CDI_DIRS", ":".join(CDI_DIRS)).split(":")
    return [p for d in dirs if Path(d).is_dir() for p in sorted(Path(d).iterdir())
            if p.suffix in (".json", ".yaml", ".yml")]  # fmt: skip


def info_object() -> dict:
    daemon = daemon_json()
    runtimes = {"io.containerd.runc.v2": {"path": "runc"}, "runc": {"path": "runc"}}
    for name, spec in (daemon.get("runtimes") or {}).items():
        runtimes[name] = {"path": spec.get("path", name), **({"runtimeArgs": spec["args"]}
                                                             if spec.get("args") else {})}  # fmt: skip
    all_containers = containers()
    return {
        "ID": "",
        "Containers": len(all_containers),
        "ContainersRunning": sum(1 for c in all_containers if running(c)),
        "ContainersPaused": 0,
        "ContainersStopped": sum(1 for c in all_containers if not running(c)),
        "Images": len(all_images()),
        "Driver": "overlay2",
        "DriverStatus": [
            ["Backing Filesystem", "extfs"],
            ["Supports d_type", "true"],
            ["Using metacopy", "false"],
            ["Native Overlay Diff", "true"],
            ["userxattr", "false"],
        ],  # fmt: skip
        "DockerRootDir": "/var/lib/docker",
        "ServerVersion": VERSION.split()[2].rstrip(","),
        "OperatingSystem": "Ubuntu 24.04.3 LTS",
        "OSType": "linux",
        "Architecture": "aarch64",
        "Runtimes": runtimes,
        "DefaultRuntime": daemon.get("default-runtime", "runc"),
        "CgroupDriver": "systemd",
        "CgroupVersion": "2",
        "CDISpecDirs": CDI_DIRS,
        "Name": os.uname().nodename,
    }


def cmd_info(options: dict, args: list[str]) -> int:
    info = info_object()
    if options["format"]:
        print(render(options["format"], info, lambda key: "<no value>"))
        return 0
    lines = [
        "Client:",
        f" Version:    {info['ServerVersion']}",
        " Context:    default",
        " Debug Mode: false",
        "",
        "Server:",
        f" Containers: {info['Containers']}",
        f"  Running: {info['ContainersRunning']}",
        "  Paused: 0",
        f"  Stopped: {info['ContainersStopped']}",
        f" Images: {info['Images']}",
        f" Server Version: {info['ServerVersion']}",
        f" Storage Driver: {info['Driver']}",
        *(f"  {k}: {v}" for k, v in info["DriverStatus"]),
        " Logging Driver: json-file",
        f" Cgroup Driver: {info['CgroupDriver']}",
        f" Cgroup Version: {info['CgroupVersion']}",
        f" Runtimes: {' '.join(sorted(info['Runtimes']))}",
        f" Default Runtime: {info['DefaultRuntime']}",
        f" Operating System: {info['OperatingSystem']}",
        f" OSType: {info['OSType']}",
        f" Architecture: {info['Architecture']}",
        f" Name: {info['Name']}",
        f" Docker Root Dir: {info['DockerRootDir']}",
        " CDI spec directories:",
        *(f"  {d}" for d in info["CDISpecDirs"]),
    ]
    print("\n".join(lines))
    return 0


def gpus_available() -> bool:
    """What `--gpus` needs: the NVIDIA runtime (daemon.json "runtimes", as `nvidia-ctk runtime
    configure --runtime=docker` writes it), its hook on PATH, or a CDI spec."""
    import shutil

    return (
        "nvidia" in (daemon_json().get("runtimes") or {})
        or shutil.which("nvidia-container-runtime-hook") is not None
        or bool(cdi_specs())
    )


# --- docker run -----------------------------------------------------------------------


class Image(NamedTuple):
    """A stored image as a container sees it: its config, and the engine, release and Ray that
    its own Python distributions say it has (unpacked from its layers)."""

    id: str
    entrypoint: list[str]
    cmd: list[str]
    env: list[str]
    site: Path  # its site-packages, unpacked
    engine: str | None  # sglang, vllm or None (no engine)
    version: str | None
    ray: bool

    @classmethod
    def stored(cls, image_id: str) -> Image:
        config = image_config(image_id).get("config") or {}
        site = STORE / "images" / image_id.split(":")[1] / "rootfs" / SITE
        found = {}
        if site.is_dir():
            for dist in site.glob("*.dist-info"):
                name, _, version = dist.name.removesuffix(".dist-info").rpartition("-")
                found[name] = version
        engine = next((e for e in ("vllm", "sglang") if e in found), None)
        return cls(
            image_id,
            list(config.get("Entrypoint") or []),
            list(config.get("Cmd") or []),
            list(config.get("Env") or []),
            site,
            engine,
            found.get(engine) if engine else None,
            "ray" in found,
        )


def images_table() -> dict:
    return json.loads(IMAGES.read_text())


def host_path(value: str) -> str:
    """An image's PATH on this host: its programs' folder where the stand-ins put them."""
    return value.replace(PROGRAMS_IN_IMAGE, str(IMAGE_PROGRAMS))


def env_file(path: str) -> list[str]:
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as exc:
        raise Failure(f"open {path}: {str(exc.strerror).lower()}") from None
    return [line.lstrip() for line in lines if line.strip() and not line.lstrip().startswith("#")]


def environment(options: dict, image: Image | None) -> list[str]:
    """Config.Env: the image's ENV, then --env-file lines, then -e (later ones win)."""
    env = dict(e.split("=", 1) for e in image.env) if image else {}
    env.setdefault("PATH", SYSTEM_PATH)
    for item in [line for f in options["env-file"] for line in env_file(f)] + options["env"]:
        key, eq, value = item.partition("=")
        if " " in key:
            raise Failure(f"variable '{key}' contains whitespaces")
        if eq:
            env[key] = value
        elif key in os.environ:
            env[key] = os.environ[key]
    return [f"{k}={v}" for k, v in env.items()]


def mounts(volumes: list[str]) -> list[dict]:
    """Bind mounts (a missing source folder is created, as docker does) and named volumes."""
    made = []
    for spec in volumes:
        parts = spec.split(":")
        if not 2 <= len(parts) <= 3 or not parts[0] or not parts[1]:
            raise Failure(f"invalid volume specification: '{spec}'")
        source, destination, mode = parts[0], parts[1], (parts[2] if len(parts) == 3 else "")
        if not destination.startswith("/"):
            raise Failure(
                f"invalid volume specification: '{spec}': invalid mount config for type "
                f"\"bind\": invalid mount path: '{destination}' "
                "mount path must be absolute"
            )
        named = not source.startswith("/")
        host = state_dir() / "volumes" / source / "_data" if named else Path(source)
        if not host.exists():
            host.mkdir(parents=True)
        made.append(
            {
                "Type": "volume" if named else "bind",
                "Name": source if named else "",
                "Source": str(host),
                "Destination": destination,
                "Mode": mode,
                "RW": "ro" not in mode.split(","),
                "Propagation": "" if named else "rprivate",
            }
        )
    return made


def restart_policy(value: str | None, auto_remove: bool) -> dict:
    name, colon, count = (value or "no").partition(":")
    if colon and not name:
        raise Failure("invalid restart policy format: no policy provided before colon")
    if colon and not count.isdigit():
        raise Failure("invalid restart policy format: maximum retry count must be an integer")
    if auto_remove and name not in ("", "no"):
        raise Failure("conflicting options: cannot specify both --restart and --rm")
    return {"Name": name, "MaximumRetryCount": int(count or 0)}


def validate_on_daemon(c: dict) -> None:
    policy = c["host_config"]["RestartPolicy"]
    if policy["Name"] not in RESTART_POLICIES:
        raise Failure(
            "Error response from daemon: invalid restart policy: unknown policy "
            f"'{policy['Name']}'; use one of 'no', 'always', 'on-failure', "
            "or 'unless-stopped'"
        )
    if policy["MaximumRetryCount"] and policy["Name"] != "on-failure":
        raise Failure(
            "Error response from daemon: invalid restart policy: maximum retry count "
            "can only be used with 'on-failure'"
        )
    if not NAME.match(c["name"]):
        raise Failure(
            f"Error response from daemon: Invalid container name ({c['name']}), "
            "only [a-zA-Z0-9][a-zA-Z0-9_.-] are allowed"
        )


def claim(c: dict) -> None:
    """Take the container's name, atomically, or fail as docker does on a name in use."""
    state_dir()
    holder = {"id": ""}
    for _ in range(2):
        try:
            os.close(os.open(record_path(c["name"]), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
            save(c)
            return
        except FileExistsError:
            holder = load(c["name"]) or holder  # a dead --rm container is removed: try again
            if holder["id"]:
                break
    raise Failure(
        f'Error response from daemon: Conflict. The container name "/{c["name"]}" is '
        f'already in use by container "{holder["id"]}". You have to remove (or rename) '
        "that container to be able to reuse that name."
    )


def engine_module():
    """engine.py, to ask it which command lines are engines (compiled once: the twin image
    holds its __pycache__, which the image's hash of the stand-ins leaves out)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("spark_twin_engine", ENGINE)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {ENGINE}")
    module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def process_argv(c: dict) -> list[str]:
    """What the container's process is on this host: the image's entrypoint and command, with
    the stand-in engine for an engine command line of the image's engine (or a `python3 -m`
    one, which fails as python does without the module); a wrapper entrypoint (a script that
    execs its arguments) runs as the stand-in script under its real path; any other command
    is found on the container's PATH."""
    import shutil

    image = Image.stored(c["image_id"])
    command = c["entrypoint"] + c["cmd"]
    wrappers = images_table().get("wrappers", {})
    if command and command[0] in wrappers:
        script = (IMAGES.parent / wrappers[command[0]]).read_text()
        return ["/bin/bash", "-c", script, command[0], *engine_argv(command[1:], image)]
    recognized = engine_argv(command, image)
    if recognized != command:
        return recognized
    path = host_path(dict(e.split("=", 1) for e in c["env"])["PATH"])
    found = shutil.which(command[0], path=path) if command else None
    if found is None:
        what = command[0] if command else ""
        raise Failure(
            "Error response from daemon: failed to create task for container: failed to "
            "create shim task: OCI runtime create failed: runc create failed: unable to "
            "start container process: error during container init: exec: "
            f'"{what}": executable file not found in $PATH: unknown',
            127,
        )
    return command  # found again on the container's PATH, its name kept as argv[0]


def engine_argv(command: list[str], image: Image | None) -> list[str]:
    """The stand-in engine's command line for an engine command, else the command as given.
    `vllm serve` on an image without vLLM is no engine: its PATH has no `vllm`."""
    recognized = engine_module().recognize(command)
    if recognized and (not recognized.program or (image and recognized.kind == image.engine)):
        return [sys.executable, str(ENGINE), *command]
    return command


def process_env(c: dict) -> dict[str, str]:
    env = dict(e.split("=", 1) for e in c["env"])
    env["PATH"] = host_path(env.get("PATH", SYSTEM_PATH))
    env.setdefault("HOSTNAME", c["id"][:12])
    env.setdefault("HOME", "/root")
    # The stand-ins' own knobs reach the engine; so do the container paths of the mounts.
    env.update({k: v for k, v in os.environ.items() if k.startswith("SPARK_TWIN_")})
    env["SPARK_TWIN_MOUNTS"] = json.dumps([[m["Destination"], m["Source"]] for m in c["mounts"]])
    env.update(privilege_env(c))
    # The image's own Python distributions (its site-packages, unpacked from its layers), and
    # the release the stand-in engine plays: what they say, not part of the container's Config.
    image = Image.stored(c["image_id"])
    if image.site.is_dir():
        env["PYTHONPATH"] = ":".join(filter(None, (str(image.site), env.get("PYTHONPATH"))))
    if image.engine:  # an engine image has torch: the stand-in one (pylib/torch), after its own
        env["PYTHONPATH"] = ":".join(filter(None, (env.get("PYTHONPATH"), str(TORCH_STANDIN))))
    env["SPARK_TWIN_IMAGE_ENGINE"] = image.engine or ""
    env["SPARK_TWIN_IMAGE_VERSION"] = image.version or ""
    env["SPARK_TWIN_IMAGE_RAY"] = "1" if image.ray else "0"
    return env


def shim(c: dict, argv: list[str], foreground: bool) -> int:
    """Run the container's process to its end: record it, forward signals, copy its output."""
    import subprocess

    log = open(STATE / f"{c['name']}.log", "ab")  # noqa: SIM115 -- open until the shim exits
    started: list[subprocess.Popen] = []
    pending: list[int] = []  # signals that came before the process
    for signum in PROXIED_SIGNALS:
        signal.signal(
            signum, lambda s, _frame: started[0].send_signal(s) if started else pending.append(s)
        )
    process = subprocess.Popen(
        argv,
        env=process_env(c),
        cwd="/",
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE if foreground else log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    started.append(process)
    for number in pending:
        process.send_signal(number)
    c.update(
        status="running",
        pid=process.pid,
        pid_start=process_start(process.pid),
        shim_pid=os.getpid(),
        shim_start=process_start(os.getpid()),
        started=time.time(),
    )
    current = read(c["name"])
    if current is None or current["id"] != c["id"]:  # removed before it could start
        process.kill()
    else:
        save(c)
    if foreground and process.stdout is not None:  # a pipe in the foreground
        pipe = process.stdout.fileno()
        for chunk in iter(lambda: os.read(pipe, 65536), b""):
            log.write(chunk)
            log.flush()
            try:
                os.write(sys.stdout.fileno(), chunk)
            except OSError:
                pass  # nobody reads our output any more; the container goes on
    code = process.wait()
    code = 128 - code if code < 0 else code
    end_execs(c)
    finish(c, code)
    return code


def entrypoint(image: Image, given: str | None) -> list[str]:
    """The image's ENTRYPOINT, or --entrypoint's (an empty one clears it)."""
    if given is None:
        return image.entrypoint
    return [given] if given else []


PULL_POLICIES = ("always", "missing", "never")


def obtain(reference: str, policy: str, quiet: bool) -> str:
    """The ID of the image to run, pulled first as --pull says (docker/cli run.go: the pull's
    output goes to stderr, after `Unable to find image` when it is missing)."""
    ref = Reference.parse(reference)
    image_id = None if policy == "always" else resolve_image(reference)
    if image_id and image_record(image_id):
        return image_id
    if policy == "never":
        raise Failure(f"Error response from daemon: No such image: {ref.familiar()}")
    if policy == "missing" and not quiet:
        print(f"Unable to find image '{ref.familiar()}' locally", file=sys.stderr)
    return pull(reference, sys.stderr, quiet)


def cmd_run(options: dict, args: list[str]) -> int:
    import secrets

    reference, cmd = args[0], args[1:]
    policy = restart_policy(options["restart"], options["rm"])
    environment(options, None)  # the client's checks of -e and --env-file come first
    pulling = options["pull"] or "missing"
    if pulling not in PULL_POLICIES:
        raise Failure(
            f'invalid pull option: \'{pulling}\': must be one of "always", "missing" or "never"'
        )
    image = Image.stored(obtain(reference, pulling, options["quiet"]))
    env = environment(options, image)
    if not cmd and options["entrypoint"] is None:
        cmd = image.cmd  # the image's CMD (an --entrypoint resets it, as docker does)
    cid = secrets.token_hex(32)
    network = options["network"] or options["net"] or "bridge"
    c = {
        "id": cid,
        "name": options["name"] or f"twin_{cid[:8]}",
        "image": reference,
        "image_id": image.id,
        "entrypoint": entrypoint(image, options["entrypoint"]),
        "cmd": cmd,
        "env": env,
        "mounts": [],
        "status": "created",
        "created": time.time(),
        "started": None,
        "finished": None,
        "exit_code": 0,
        "pid": 0,
        "pid_start": None,
        "shim_pid": 0,
        "shim_start": None,
        "auto_remove": options["rm"],
        "host_config": {
            "NetworkMode": network,
            "IpcMode": options["ipc"] or "private",
            "ShmSize": check_size(options["shm-size"]) if options["shm-size"] else 67108864,
            "RestartPolicy": policy,
            "AutoRemove": options["rm"],
            "Ulimits": [check_ulimit(u) for u in options["ulimit"]],
            "DeviceRequests": [
                {
                    "Driver": "",
                    "Count": -1,
                    "DeviceIDs": None,
                    "Options": {},
                    "Capabilities": [["gpu"]],
                }
            ]
            if options["gpus"]
            else None,
            "PortBindings": options["publish"],
            "Devices": device_mappings(options["device"]),
            "CapAdd": options["cap-add"] or None,
            "CapDrop": options["cap-drop"] or None,
            "SecurityOpt": options["security-opt"] or None,
            "Privileged": options["privileged"],
        },
    }
    validate_on_daemon(c)
    c["mounts"] = mounts(options["volume"])
    claim(c)
    if options["publish"] and network == "host":
        print(
            "WARNING: Published ports are discarded when using host network mode", file=sys.stderr
        )
    try:
        if options["gpus"] and not gpus_available():
            raise Failure(  # dockerd's answer when no device driver offers the capability
                'Error response from daemon: could not select device driver "" with '
                "capabilities: [[gpu]]"
            )
        gather_devices(c)
        argv = process_argv(c)
    except Failure as failure:  # the container stays, never started, unless --rm
        remove(c) if c["auto_remove"] else save({**c, "exit_code": failure.status})
        raise
    if not options["detach"]:
        return shim(c, argv, foreground=True)
    if os.fork() == 0:  # the shim of a detached container
        code = 125
        try:
            os.setsid()
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(devnull, fd)
            code = shim(c, argv, foreground=False)
        finally:
            os._exit(code)
    print(cid)
    return 0


def run_failure(failure: Failure) -> Failure:
    """How `docker run` reports a failure: prefixed, with the help hint, exit 125 (or 126/127)."""
    status = failure.status if failure.status in (126, 127) else 125
    return Failure(f"docker: {failure}\n\nRun 'docker run --help' for more information", status)


# --- the other commands ----------------------------------------------------------------


def each(references: list[str], action: Callable[[str], None], missing_ok: bool = False) -> int:
    """Apply to every container named, printing its name; report each failure, exit 1 if any
    (a missing container reported only, with missing_ok)."""
    status = 0
    for reference in references:
        try:
            action(reference)
            print(reference)
        except Failure as failure:
            print(failure, file=sys.stderr)
            if not (missing_ok and "No such container" in str(failure)):
                status = 1
    return status


def signal_number(name: str) -> int:
    if name.isdigit():
        return int(name)
    try:
        return signal.Signals["SIG" + name.upper().removeprefix("SIG")].value
    except KeyError:
        raise Failure(f"Error response from daemon: Invalid signal: {name}") from None


def cmd_stop(options: dict, args: list[str]) -> int:
    timeout = int(options["timeout"] or options["time"] or 10)

    def stop(reference: str) -> None:
        c = find(reference)
        if not running(c):
            return
        send(c, signal.SIGTERM)
        if not wait_stopped(c, timeout):
            send(c, signal.SIGKILL)
            wait_stopped(c, 10)

    return each(args, stop)


def cmd_kill(options: dict, args: list[str]) -> int:
    number = signal_number(options["signal"] or "KILL")

    def kill(reference: str) -> None:
        try:
            c = find(reference)
        except Failure:
            raise Failure(
                f"Error response from daemon: cannot kill container: {reference}: "
                f"No such container: {reference}"
            ) from None
        if not running(c):
            raise Failure(
                f"Error response from daemon: cannot kill container: {reference}: "
                f"container {c['id']} is not running"
            )
        send(c, number)
        if number == signal.SIGKILL:
            wait_stopped(c, 10)

    return each(args, kill)


def cmd_rm(options: dict, args: list[str]) -> int:
    def rm(reference: str) -> None:
        c = find(reference)
        if running(c):
            if not options["force"]:
                raise Failure(
                    f'Error response from daemon: cannot remove container "/{c["name"]}": '
                    "container is running: stop the container before removing "
                    "or force remove"
                )
            send(c, signal.SIGKILL)
            wait_stopped(c, 10)  # its shim records the exit first
        remove(c)

    return each(args, rm, missing_ok=options["force"])


def human(seconds: float) -> str:
    """go-units HumanDuration (docker/go-units duration.go)."""
    s = int(seconds)
    if s < 1:
        return "Less than a second"
    if s < 60:
        return "1 second" if s == 1 else f"{s} seconds"
    minutes = s // 60
    if minutes < 60:
        return "About a minute" if minutes == 1 else f"{minutes} minutes"
    hours = int(seconds / 3600 + 0.5)
    if hours == 1:
        return "About an hour"
    if hours < 48:
        return f"{hours} hours"
    if hours < 24 * 7 * 2:
        return f"{hours // 24} days"
    if hours < 24 * 30 * 2:
        return f"{hours // 24 // 7} weeks"
    if hours < 24 * 365 * 2:
        return f"{hours // 24 // 30} months"
    return f"{int(seconds / 3600) // 24 // 365} years"


def ps_row(c: dict, no_trunc: bool) -> dict:
    command = " ".join(c["entrypoint"] + c["cmd"])
    if not no_trunc and len(command) > 20:
        command = command[:19] + "…"
    if running(c):
        status = f"Up {human(time.time() - c['started'])}"
    elif c["status"] == "exited":
        status = f"Exited ({c['exit_code']}) {human(time.time() - c['finished'])} ago"
    else:
        status = "Created"
    return {
        "ID": c["id"] if no_trunc else c["id"][:12],
        "Image": c["image"],
        "Command": json.dumps(command, ensure_ascii=False),
        "CreatedAt": datetime.fromtimestamp(c["created"])
        .astimezone()
        .strftime("%Y-%m-%d %H:%M:%S %z %Z"),
        "RunningFor": f"{human(time.time() - c['created'])} ago",
        "Status": status,
        "State": c["status"],
        "Ports": "",
        "Names": c["name"],
        "Mounts": ",".join(m["Name"] or m["Source"] for m in c["mounts"]),
    }


HEADERS = {
    "ID": "CONTAINER ID",
    "Image": "IMAGE",
    "Command": "COMMAND",
    "CreatedAt": "CREATED AT",
    "RunningFor": "CREATED",
    "Status": "STATUS",
    "State": "STATE",
    "Ports": "PORTS",
    "Names": "NAMES",
    "Mounts": "MOUNTS",
}
PS_TABLE = (
    "table {{.ID}}\t{{.Image}}\t{{.Command}}\t{{.RunningFor}}\t{{.Status}}\t{{.Ports}}\t{{.Names}}"
)
TEMPLATE = re.compile(r"{{\s*(json\s+)?\.([\w.]*)\s*}}")


def go_string(value) -> str:
    """A value as Go's text/template prints it."""
    if isinstance(value, bool):
        return str(value).lower()
    if value is None:
        return "<nil>"
    if isinstance(value, list):
        return "[" + " ".join(go_string(v) for v in value) + "]"
    if isinstance(value, dict):
        return "map[" + " ".join(f"{k}:{go_string(v)}" for k, v in sorted(value.items())) + "]"
    return str(value)


def render(template: str, data: dict, missing: Callable[[str], str]) -> str:
    """A Go template of field references: {{.A.B}}, {{json .A}}, {{json .}}."""

    def field(match: re.Match) -> str:
        value = data
        for key in filter(None, match.group(2).split(".")):
            if not isinstance(value, dict) or key not in value:
                return missing(key)
            value = value[key]
        if match.group(1):  # Go's encoding/json: compact
            return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
        return go_string(value)

    text = template.replace("\\t", "\t").replace("\\n", "\n")
    return TEMPLATE.sub(field, text)


def tabulate(rows: list[list[str]]) -> str:
    """text/tabwriter as docker sets it up: minimum width 10, padding 3."""
    widths = [max(10, *(len(r[i]) + 3 for r in rows)) for i in range(len(rows[0]))]
    return (
        "\n".join("".join(cell.ljust(w) for cell, w in zip(r[:-1], widths)) + r[-1] for r in rows)
        + "\n"
    )


def cmd_ps(options: dict, args: list[str]) -> int:
    filters = []
    for spec in options["filter"]:
        key, _, value = spec.partition("=")
        if key not in ("name", "status", "id"):
            raise Failure(f"Error response from daemon: Invalid filter '{key}'")
        filters.append((key, value))
    chosen = []
    for c in containers():
        if not options["all"] and not running(c) and not any(k == "status" for k, _ in filters):
            continue
        checks = {
            "name": lambda v, c=c: re.search(v, c["name"]) or re.search(v, "/" + c["name"]),
            "status": lambda v, c=c: c["status"] == v,
            "id": lambda v, c=c: c["id"].startswith(v),
        }
        if all(checks[key](value) for key, value in filters):
            chosen.append(ps_row(c, options["no-trunc"]))
    if options["quiet"]:
        sys.stdout.write("".join(row["ID"] + "\n" for row in chosen))
        return 0
    return print_table(options["format"] or PS_TABLE, chosen, HEADERS, "ContainerContext")


def inspect_object(c: dict) -> dict:
    state = c["status"]
    return {
        "Id": c["id"],
        "Created": rfc3339(c["created"]),
        "Path": (c["entrypoint"] + c["cmd"] + [""])[0],
        "Args": (c["entrypoint"] + c["cmd"])[1:],
        "State": {
            "Status": state,
            "Running": state == "running",
            "Paused": False,
            "Restarting": False,
            "OOMKilled": False,
            "Dead": False,
            "Pid": c["pid"],
            "ExitCode": c["exit_code"],
            "Error": "",
            "StartedAt": rfc3339(c["started"]),
            "FinishedAt": rfc3339(c["finished"]),
        },
        "Image": c.get("image_id", ""),
        "LogPath": str(STATE / f"{c['name']}.log"),
        "Name": "/" + c["name"],
        "RestartCount": 0,
        "HostConfig": {
            "Binds": [
                ":".join(filter(None, (m["Source"], m["Destination"], m["Mode"])))
                for m in c["mounts"]
            ]
            or None,
            **c["host_config"],
        },
        "Mounts": c["mounts"],
        "Config": {
            "Hostname": c["id"][:12],
            "Env": c["env"],
            "Cmd": c["cmd"] or None,
            "Image": c["image"],
            "Entrypoint": c["entrypoint"] or None,
            "WorkingDir": "",
            "Labels": {},
        },
    }


def cmd_inspect(options: dict, args: list[str]) -> int:
    """A container, else an image (docker/cli inspect.go tries them in that order)."""
    kind = options["type"]
    if kind not in (None, "container", "image"):
        raise Failure(f'"{kind}" is not a valid value for --type')
    found, errors = [], []
    for reference in args:
        if kind in (None, "container"):
            try:
                found.append(inspect_object(find(reference)))
                continue
            except Failure:
                pass
        image_id = resolve_image(reference) if kind in (None, "image") else None
        if image_id and image_record(image_id):
            found.append(image_inspect_object(image_id))
        elif kind == "image":
            errors.append(f"Error: No such image: {reference}")
        elif kind == "container":
            errors.append(f"Error: No such container: {reference}")
        else:
            errors.append(f"Error: No such object: {reference}")
    return print_inspected(options["format"], found, errors)


def cmd_logs(options: dict, args: list[str]) -> int:
    c = find(args[0])
    path = STATE / f"{c['name']}.log"
    lines = path.read_bytes().splitlines(keepends=True) if path.exists() else []
    tail = options["tail"]
    if tail not in (None, "all"):
        lines = lines[len(lines) - int(tail) :] if int(tail) else []
    sys.stdout.buffer.write(b"".join(lines))
    sys.stdout.flush()
    if options["follow"] and path.exists():
        with open(path, "rb") as log:
            log.seek(0, os.SEEK_END)
            while True:
                chunk = log.read()
                if chunk:
                    sys.stdout.buffer.write(chunk)
                    sys.stdout.flush()
                elif (load(c["name"]) or {}).get("status") != "running":
                    break
                else:
                    time.sleep(0.2)
    return 0


def cgroup_of(pid: int) -> Path | None:
    try:
        line = Path(f"/proc/{pid}/cgroup").read_text().splitlines()[0]
    except (OSError, IndexError):
        return None
    return Path("/sys/fs/cgroup" + line.split("::", 1)[1]) if "::" in line else None


def exec_recorder(c: dict):
    """What the exec'd process runs before its command: it records itself as the
    container's (pid and start time), so that the record exists before the command does
    anything, as dockerd knows an exec before it starts; a client killed right after the
    start cannot leave it unrecorded (the container's stop would then miss it)."""

    def record() -> None:
        pid = os.getpid()
        (STATE / f"{c['name']}.exec-{pid}").write_text(json.dumps([pid, process_start(pid)]))

    return record


def cmd_exec(options: dict, args: list[str]) -> int:
    import shutil
    import subprocess

    c = find(args[0])
    if not running(c):
        raise Failure(f"Error response from daemon: container {c['id']} is not running")
    env = process_env(c)
    for item in options["env"]:
        key, eq, value = item.partition("=")
        if eq:
            env[key] = value
        elif key in os.environ:
            env[key] = os.environ[key]
    command = args[1:]
    found = shutil.which(command[0], path=env["PATH"])
    if found is None:
        raise Failure(
            "OCI runtime exec failed: exec failed: unable to start container process: "
            f'exec: "{command[0]}": executable file not found in $PATH: unknown',
            127,
        )
    process = subprocess.Popen(
        command,  # found on the container's PATH (env's), its name kept as argv[0]
        env=env,
        cwd=options["workdir"] or "/",
        stdin=None if options["interactive"] else subprocess.DEVNULL,
        start_new_session=True,
        preexec_fn=exec_recorder(c),
    )
    cgroup = cgroup_of(c["shim_pid"])
    if cgroup is not None:
        try:
            (cgroup / "cgroup.procs").write_text(str(process.pid))
        except OSError:
            pass  # not root: it stays in the caller's cgroup
    record = STATE / f"{c['name']}.exec-{process.pid}"
    if options["detach"]:
        return 0
    code = process.wait()  # a signal to this client ends the client only, as docker's does
    record.unlink(missing_ok=True)
    return 128 - code if code < 0 else code


HANDLERS = {
    "exec": cmd_exec,
    "run": cmd_run,
    "stop": cmd_stop,
    "kill": cmd_kill,
    "rm": cmd_rm,
    "ps": cmd_ps,
    "inspect": cmd_inspect,
    "logs": cmd_logs,
    "pull": cmd_pull,
    "image inspect": cmd_image_inspect,
    "images": cmd_images,
    "rmi": cmd_rmi,
    "save": cmd_save,
    "load": cmd_load,
    "manifest": cmd_manifest,
    "info": cmd_info,
}


def may_use_docker() -> bool:
    """The state folder plays the daemon's socket: root and the docker group may write it."""
    folder = STATE if STATE.exists() else STATE.parent
    return os.access(folder, os.W_OK)


def main(argv: list[str]) -> int:
    if argv[:1] in (["--version"], ["-v"]):
        print(VERSION)
        return 0
    name = argv[0] if argv else ""
    if name == "image" and argv[1:2] and argv[1] in IMAGE_COMMANDS:
        name, argv = IMAGE_COMMANDS[argv[1]], [IMAGE_COMMANDS[argv[1]], *argv[2:]]
    if name not in HANDLERS:
        raise Failure(
            f"docker: unknown command: docker {name}\n\nRun 'docker --help' for more information"
        )
    if not may_use_docker():
        raise Failure(SOCKET_DENIED)
    options, args = parse_args(name, COMMANDS[name], argv[1:])
    if name != "run":
        return HANDLERS[name](options, args)
    try:
        return cmd_run(options, args)
    except Failure as failure:
        raise run_failure(failure) from None


def run() -> int:
    """The command (the `docker` launcher beside this module calls it)."""
    try:
        return main(sys.argv[1:])
    except Failure as failure:
        print(failure, file=sys.stderr)
        return failure.status


if __name__ == "__main__":
    sys.exit(run())
