"""
An engine image on this Spark: pulled through the Docker Engine API (docker_pull.py, its
JSON stream read as bytes per layer), or with `docker pull` on a terminal of its own (its
progress bars read) when the daemon's socket cannot be reached; root's docker given only
the operator's registry logins, and the image read once per ID (its engine release, `ray`,
the flags of its --help) for the deploy to check an engine against. tools/catalogue reads
an image through ``read_image`` too, setting DOCKER here.

May import: the standard library and the sibling modules fetch_spec, fetch_errors,
fetch_progress, fetch_names and docker_pull (shipped beside spark-fetch). Must not know:
model folders, the copy channel or the deploy; every docker command line of spark-fetch
starts with ``docker_argv``.
"""

from __future__ import annotations

import json
import os
import pty
import pwd
import re
import select
import shutil
import stat
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import docker_pull
from fetch_errors import JobError
from fetch_names import FILE_FLAGS
from fetch_progress import Status, check_room, human
from fetch_spec import DOCKER, ImageSpec

# An image needs its compressed layers (the download) and the unpacked layers: the deploy
# estimates the whole at 3 times the compressed size, and says so when it refuses.
IMAGE_EXPANSION = 3

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# docker's progress line (moby pkg/jsonmessage JSONProgress.String: a 50-wide bar, drawn
# only on a terminal wider than 110 columns, then the sizes as go-units HumanSize prints
# them: decimal units, 4 significant digits).
DOWNLOADING = re.compile(
    r"^([0-9a-f]{12}): Downloading\s+(?:\[[=> ]*\]\s+)?"
    r"([\d.]+)\s*([kMGTP]?B)/([\d.]+)\s*([kMGTP]?B)"
)
EXTRACTING = re.compile(r"^([0-9a-f]{12}): Extracting\s+\[")
FINISHED = re.compile(r"^([0-9a-f]{12}): (Verifying Checksum|Download complete|Pull complete)")
PRESENT = re.compile(r"^([0-9a-f]{12}): Already exists")
UNITS = {"B": 1, "kB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12, "PB": 10**15}


def docker_argv(*args: str) -> list[str]:
    """A docker command line: every docker spark-fetch runs is DOCKER (fetch_spec.py)."""
    return [DOCKER, *args]


def docker_root() -> str:
    """Where docker keeps its images (the file system an image's layers fill)."""
    return docker("info", "-f", "{{.DockerRootDir}}").stdout.strip() or "/var/lib/docker"


def docker(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(docker_argv(*args), capture_output=True, text=True, timeout=600)


def image_id(image: str) -> str:
    result = docker("image", "inspect", "-f", "{{.Id}}", image)
    return result.stdout.strip() if result.returncode == 0 else ""


def layer_sizes(image: str) -> dict[str, int]:
    """The image's compressed layers for this Spark's platform, by the 12-digit ID docker's
    progress shows, from the registry's manifest (``docker manifest inspect -v``)."""
    result = docker("manifest", "inspect", "-v", image)
    if result.returncode != 0:
        print(f"the manifest of {image} could not be read: {result.stderr.strip()}", flush=True)
        return {}
    entries = json.loads(result.stdout)
    entries = entries if isinstance(entries, list) else [entries]
    arch = {"aarch64": "arm64", "x86_64": "amd64"}.get(os.uname().machine, os.uname().machine)
    for entry in entries:
        platform = (entry.get("Descriptor") or {}).get("platform") or {}
        if platform and (platform.get("os"), platform.get("architecture")) != ("linux", arch):
            continue
        manifest = entry.get("SchemaV2Manifest") or entry.get("OCIManifest") or {}
        return {
            layer["digest"].split(":", 1)[1][:12]: int(layer["size"])
            for layer in manifest.get("layers", [])
        }
    return {}


class PullProgress(docker_pull.LayerCount):
    """The bytes of a ``docker pull`` as its terminal output shows them (the 12 digits
    docker prints, the sizes on its bars): the pull when the daemon's socket cannot be
    reached."""

    def __init__(self, sizes: dict[str, int]):
        super().__init__(sizes)
        self.buffer = ""

    def feed(self, text: str) -> list[str]:
        """Read terminal output; the status lines it completed (bars are not lines)."""
        self.buffer += ANSI.sub("", text)
        *parts, self.buffer = re.split(r"[\r\n]", self.buffer)
        shown = []
        for part in filter(None, (p.strip() for p in parts)):
            if match := DOWNLOADING.match(part):
                layer, current, unit, size, size_unit = match.groups()
                self.current[layer] = int(float(current) * UNITS[unit])
                self.sizes.setdefault(layer, int(float(size) * UNITS[size_unit]))
                continue
            if EXTRACTING.match(part):
                continue
            if match := FINISHED.match(part) or PRESENT.match(part):
                self.finished.add(match.group(1))
                self.sizes.setdefault(match.group(1), self.current.get(match.group(1), 0))
            shown.append(part)
        self.lines = [*self.lines, *shown][-20:]
        return shown


def pull(image: str, status: Status) -> None:
    """Pull ``image``, its bytes counted from the Docker Engine API's JSON messages; with
    the docker CLI on a terminal when the daemon's socket cannot be reached (a daemon on
    another socket, DOCKER_HOST)."""
    sizes = layer_sizes(image)
    total = sum(sizes.values()) or None
    status.update(force=True, phase="pull", done=0, total=total)
    if total:
        check_room(f"{image} ({human(total)} compressed)", docker_root(), total * IMAGE_EXPANSION)
    try:
        pull_from_engine(image, status, sizes)
    except docker_pull.Unreachable as error:
        print(f"{error}: pulling with the docker CLI", flush=True)
        pull_on_terminal(image, status, sizes)


def pull_from_engine(image: str, status: Status, sizes: dict[str, int]) -> None:
    """``POST /images/create`` on the daemon's socket (files/docker_pull.py), with the
    logins of the private DOCKER_CONFIG; each message's bytes go to the status."""
    progress = docker_pull.LayerBytes(sizes)
    auth = docker_pull.registry_auth(image, docker_logins())
    counted = 0.0  # the daemon sends many messages a second: the status takes 4 of them
    try:
        for message in docker_pull.messages(image, auth):
            if line := progress.feed(message):
                print(line, flush=True)
            if time.monotonic() - counted >= 0.25:
                status.update(done=progress.done, total=progress.total)
                counted = time.monotonic()
    except docker_pull.PullError as error:
        raise JobError(f"docker pull {image} failed: {error}") from error
    status.update(force=True, done=progress.total or progress.done, total=progress.total)


def docker_logins() -> dict[str, dict[str, str]]:
    """The registry logins of the private DOCKER_CONFIG fetch_image made (root-only, only
    ``auths``); none without one."""
    folder = os.environ.get("DOCKER_CONFIG")
    if not folder:
        return {}
    with open(os.path.join(folder, "config.json")) as config:
        auths = json.load(config).get("auths")
    return auths if isinstance(auths, dict) else {}


def pull_on_terminal(image: str, status: Status, sizes: dict[str, int]) -> None:
    """``docker pull`` on a terminal of its own, so that it prints its progress bars, from
    which the bytes of each layer are read."""
    progress = PullProgress(sizes)
    pid, fd = pty.fork()
    if pid == 0:  # the child: docker pull on the terminal
        argv = docker_argv("pull", image)
        os.execv(argv[0], argv)
    while True:
        try:
            ready, _, _ = select.select([fd], [], [], 1.0)
            data = os.read(fd, 65536) if ready else b""
            ended = bool(ready) and not data
        except OSError:  # the terminal closed (EIO): docker exited
            data, ended = b"", True
        for line in progress.feed(data.decode(errors="replace")):
            print(line, flush=True)
        status.update(done=progress.done, total=progress.total)
        if ended:
            break
    _, code = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(code) != 0:
        raise JobError(f"docker pull {image} failed: " + " | ".join(progress.lines[-5:]))
    status.update(force=True, done=progress.total or progress.done)


def last_line(lines: list[str]) -> str:
    """The last line that says something (what an engine printed before it failed)."""
    said = [line.strip() for text in lines for line in text.splitlines() if line.strip()]
    return said[-1] if said else "no output"


FLAG = re.compile(r"(?<![\w-])(--[A-Za-z0-9][\w.-]*)")


def script_output(stdout: str) -> tuple[str, bool, list[str]]:
    """The reading script's answers (knowledge/images.py ``reading_script``): the engine's
    release, whether the image has `ray`, and the lines of its --help."""
    release, ray, help_lines, section = "", False, [], ""
    for line in stdout.splitlines():
        if line.startswith("release "):
            release = line.split(" ", 1)[1].strip()
        elif line.startswith("ray "):
            ray = line.split(" ", 1)[1].strip() == "yes"
        elif line == "--- help":
            section = "help"
        elif section == "help":
            help_lines.append(line)
    return release, ray, help_lines


def read_image(image: str, spec: ImageSpec, status: Status) -> dict[str, Any]:
    """What the deploy checks an engine against, read once per image ID: its ID, digests,
    entrypoint and command, the engine release inside, whether it has `ray`, and the flags
    the engine's own --help lists. Cached in the readings folder as <id>.json."""
    found = image_id(image)
    if not found:
        raise JobError(f"{image} is not on this Spark after the pull")
    readings = Path(spec.readings)
    cache = readings / f"{found.removeprefix('sha256:')}.json"
    if cache.exists():
        reading = json.loads(cache.read_text())
        if reading.get("engine") == spec.engine:
            return reading
    status.update(force=True, phase="read")
    inspected = json.loads(docker("image", "inspect", image).stdout)[0]
    config = inspected.get("Config") or {}
    result = docker(
        "run", "--rm", "--pull", "never", "--network", "none", "--entrypoint", "sh",
        found, "-c", spec.read_script,
    )  # fmt: skip
    release, ray, help_lines = script_output(result.stdout)
    flags = sorted({m.group(1).split("=")[0] for m in FLAG.finditer("\n".join(help_lines))})
    reading = {
        "id": found,
        "image": image,
        "engine": spec.engine,
        "repo_digests": inspected.get("RepoDigests") or [],
        "entrypoint": config.get("Entrypoint") or [],
        "cmd": config.get("Cmd") or [],
        "release": release,
        "ray": ray,
        "flags": flags if len(flags) > 5 else None,  # None: the engine's --help did not answer
        "help_error": "" if len(flags) > 5 else last_line([*help_lines, result.stderr]),
    }
    readings.mkdir(parents=True, exist_ok=True)
    temporary = cache.with_suffix(".tmp")
    temporary.write_text(json.dumps(reading) + "\n")
    temporary.replace(cache)
    print(f"read {image} ({found[:19]}): {spec.engine} {release or 'release not found'}, "
          f"ray {'yes' if ray else 'no'}, {len(flags)} flags", flush=True)  # fmt: skip
    return reading


CONFIG_LIMIT = 1024 * 1024  # bytes of the operator's docker config.json read at most


def operator_auths(spec: ImageSpec) -> dict[str, Any]:
    """The registry logins (``auths``) of the operator's docker config.json, opened without
    following a symlink and only when it is a regular file the operator owns; credential
    helpers (credsStore, credHelpers) are programs and are not carried over."""
    path = Path(spec.docker_config or "/nonexistent") / "config.json"
    try:
        fd = os.open(path, os.O_RDONLY | FILE_FLAGS)
    except OSError:
        return {}
    with os.fdopen(fd, "rb") as source:
        info = os.fstat(fd)
        owner = pwd.getpwnam(spec.user).pw_uid if spec.user else -1
        if not stat.S_ISREG(info.st_mode) or info.st_uid != owner:
            print(f"{path} is not a regular file of {spec.user}: its logins are not used")
            return {}
        try:
            config = json.loads(source.read(CONFIG_LIMIT))
        except ValueError:
            config = None
    if not isinstance(config, dict):
        print(f"{path} is not a JSON object: its logins are not used", flush=True)
        return {}
    if config.get("credsStore") or config.get("credHelpers"):
        print(
            f"{path} names a credential helper, which the pull (as root) does not run: a "
            "registry login must be in its auths (`docker login` with no credential helper)",
            flush=True,
        )
    auths = config.get("auths")
    return {
        str(registry): {k: v for k, v in entry.items() if k in ("auth", "identitytoken")}
        for registry, entry in (auths.items() if isinstance(auths, dict) else ())
        if isinstance(entry, dict)
    }


def private_docker_config(spec: ImageSpec) -> str:
    """A fresh root-only (0700) DOCKER_CONFIG holding only the operator's registry logins:
    root's docker never reads the operator's ~/.docker, whose CLI hooks and plugins would
    run as root (issue 22). The caller removes it."""
    folder = tempfile.mkdtemp(prefix="spark-fetch-docker-")
    config = os.open(
        os.path.join(folder, "config.json"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600
    )
    with os.fdopen(config, "w") as out:
        json.dump({"auths": operator_auths(spec)}, out)
    return folder


def fetch_image(spec: ImageSpec, status: Status) -> None:
    image = spec.image
    if image_id(image):
        status.update(force=True, phase="present")
    elif image.startswith("sha256:"):
        raise JobError(
            f"{image} is an image ID and no such image is on this Spark: build or load it "
            "there, or name a published image"
        )
    else:
        config = private_docker_config(spec)
        os.environ["DOCKER_CONFIG"] = config  # the pull and `docker manifest inspect`
        try:
            print(f"pulling {image}", flush=True)
            pull(image, status)
        finally:
            os.environ.pop("DOCKER_CONFIG", None)
            shutil.rmtree(config, ignore_errors=True)
    read_image(image, spec, status)
