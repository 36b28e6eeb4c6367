#!/usr/bin/env python3
"""
spark-fetch: the long work of a deploy (downloading a model folder, pulling an engine image
and reading it), run on the Spark as the systemd job ``spark-fetch@ID.service`` so that it
does not depend on the SSH session of the deploy that started it.

    spark-fetch run ID         the job itself (ExecStart of spark-fetch@.service)
    spark-fetch status ID...   one JSON line per job: its unit and its last progress
    spark-fetch digests JSON   the sha256 of sealed folders' files and images' IDs, which
                               the deploy reads from the head before the others copy

A job is described by the deploy in JOBS/ID.json (the spec) and writes JOBS/ID.status.json
(state, phase, bytes done and total, rate) at least every second while it works, so a
laptop can watch it, leave and come back. A job that fails says why in its status and its
journal; run again, it goes on from where it stopped: the files `hf download` finished are
kept and not fetched again, and so are the layers docker has (and, with the containerd image
store, the part of a layer it had). A file hf had not finished starts again: huggingface_hub
no longer resumes a partial file (PR #4306, "resuming a failed download is no longer
possible"; its 2.4.0 writes each to a new .incomplete file), so the job removes those
leftovers before it starts. Standard library only: the Spark's own python3.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import hmac
import http.client
import http.server
import io
import json
import os
import posixpath
import pty
import pwd
import re
import select
import shutil
import socket
import stat
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

# The modules shipped with spark-fetch (fetch_spec.py, the job specs it shares with the
# deploy; docker_pull.py, the pull through the Docker Engine API): in LIB on the Spark, a
# root-owned 0755 folder (config/paths.py: FETCH_LIB), or beside this file (files/, where
# the tests load it). Named here, not taken from the environment or the working folder: run
# as `python3 -I`, it finds them and nothing else.
LIB = "/usr/local/lib/spark-deploy"
for _folder in (os.path.dirname(os.path.realpath(__file__)), LIB):
    if _folder not in sys.path:
        sys.path.insert(0, _folder)

import docker_pull  # noqa: E402 -- found through the folders above
from fetch_spec import (  # noqa: E402 -- found through the folders above
    DOCKER,
    CopyImageSpec,
    CopyModelSpec,
    Head,
    ImageSpec,
    JobSpec,
    ModelSpec,
    ServeSpec,
    SpecError,
)

JOBS = Path(os.environ.get("SPARK_FETCH_JOBS", "/var/lib/spark-deploy/fetch"))
# Where the hf command's venv, spark-model-check and the image readings are: the deploy's
# paths (config/paths.py), given in each job's spec (fetch_spec.py).
MARKER = ".spark-deploy-complete"  # spark-model-check's seal: the folder is complete
UNIT = "spark-fetch@{id}.service"
# Free space the job leaves on a file system after what it will write (the deploy's margin:
# a full root file system stops journald and sshd's logins before the download fails).
RESERVE = 2 * 1024**3
# An image needs its compressed layers (the download) and the unpacked layers: the deploy
# estimates the whole at 3 times the compressed size, and says so when it refuses.
IMAGE_EXPANSION = 3
REPAIRABLE = ("config.json", "tokenizer.json")
RATE_WINDOW = 10.0  # seconds of samples the rate is averaged over

# The Hub's file list of a revision, with sizes (huggingface_hub's documented API), printed
# as {path: size}; run with the hf command's own python as the operator (their token).
HUB_FILES = """
import json, sys
from huggingface_hub import HfApi
info = HfApi().model_info(sys.argv[1], revision=sys.argv[2], files_metadata=True)
print(json.dumps({s.rfilename: s.size or 0 for s in info.siblings or []}))
"""


class JobError(Exception):
    """The job cannot go on; the message says why and what to do."""


class TransientError(JobError):
    """The job cannot go on because the network failed it (a connection dropped mid-file):
    run again after a pause, it may well finish."""


class WaitedOut(JobError):
    """The job waited as long as the deploy allows (fetch_timeout): never run again by
    systemd, whatever the last error it saw."""


# `spark-fetch run`'s exit statuses: spark-fetch@.service runs the job again (with back-off)
# after TRANSIENT_EXIT only; any other failure stays failed for the deploy to report.
PERMANENT_EXIT = 1  # refused, not found, unauthorised, disk full, a digest mismatch, a bug
TRANSIENT_EXIT = 75  # EX_TEMPFAIL (sysexits.h): a network error; try again later
# What hf, docker and the head say of an error that a later try may not meet again, and of
# one it will meet again: the permanent words win when both appear, and an error neither
# names is permanent (a job never loops on what it does not understand).
TRANSIENT_WORDS = re.compile(
    r"connection (?:reset|refused|aborted|closed|broken)|timed out|timeout|"
    r"temporary failure in name resolution|network is unreachable|no route to host|"
    r"remote ?disconnected|incomplete ?read|unexpected eof|broken pipe|"
    r"too ?many ?requests|\b(?:429|500|502|503|504)\b|bad gateway|service unavailable|"
    r"internal server error|gateway time-?out",
    re.IGNORECASE,
)
PERMANENT_WORDS = re.compile(
    r"\b(?:400|401|403|404|410)\b|unauthori[sz]ed|forbidden|not ?found|manifest unknown|"
    r"access (?:is )?denied|gated|no space left|mismatch|whose sha256|verification failed",
    re.IGNORECASE,
)
NETWORK_ERRORS = (ConnectionError, TimeoutError, http.client.HTTPException)


def is_transient(error: BaseException) -> bool:
    """Whether ``error`` is a network failure a later try may not meet: a dropped, refused
    or silent connection, a Hub, registry or head answering 5xx or 429, as the exception's
    type or its message says; never a full disk or a refusal (401, 403, 404, a digest)."""
    text = str(error)
    if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
        return False
    if isinstance(error, WaitedOut) or PERMANENT_WORDS.search(text):
        return False
    if isinstance(error, (TransientError, *NETWORK_ERRORS)):
        return True
    if isinstance(error, socket.gaierror):  # a name that may resolve later, or never
        return error.errno == socket.EAI_AGAIN
    return bool(TRANSIENT_WORDS.search(text))


def exit_status(error: BaseException) -> int:
    """`spark-fetch run`'s exit status for a job that raised ``error``."""
    return TRANSIENT_EXIT if is_transient(error) else PERMANENT_EXIT


def human(size: float) -> str:
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(size) < 1000 or unit == "TB":
            return f"{size:.1f} {unit}" if unit != "B" else f"{int(size)} B"
        size /= 1000
    raise AssertionError("unreachable")


class Status:
    """The job's status file, rewritten whole (temporary file + rename) at each update."""

    def __init__(self, job_id: str, label: str):
        self.path = JOBS / f"{job_id}.status.json"
        self.data: dict[str, Any] = {"id": job_id, "label": label, "state": "running"}
        self.samples: list[tuple[float, int]] = []
        self.written = 0.0

    def update(self, force: bool = False, **values: Any) -> None:
        self.data.update(values)
        now = time.time()
        if "done" in values:
            self.samples = [s for s in self.samples if now - s[0] <= RATE_WINDOW]
            self.samples.append((now, int(values["done"])))
            first = self.samples[0]
            span = now - first[0]
            self.data["rate"] = (self.samples[-1][1] - first[1]) / span if span > 0.5 else 0
        if force or now - self.written >= 1.0:
            self.data["updated"] = now
            temporary = self.path.with_suffix(".tmp")
            temporary.write_text(json.dumps(self.data) + "\n")
            temporary.replace(self.path)
            self.written = now


def free_bytes(path: str) -> tuple[str, int]:
    """The nearest existing folder at or above ``path``, and its free bytes."""
    folder = Path(path)
    while not folder.exists():
        folder = folder.parent
    stats = os.statvfs(folder)
    return str(folder), stats.f_bavail * stats.f_frsize


def check_room(what: str, path: str, need: int) -> None:
    folder, free = free_bytes(path)
    if need + RESERVE > free:
        raise JobError(
            f"not enough disk for {what}: it needs {human(need)} more at {folder}, "
            f"which has {human(free)} free (keeping {human(RESERVE)} spare); "
            "free some space (or choose another folder) and run the deploy again"
        )


def watch(command: list[str], sample: Callable[[], None], **popen: Any) -> tuple[int, list[str]]:
    """Run ``command`` (its output to the journal), calling ``sample`` every second; its
    exit code and last output lines."""
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **popen
    )
    assert process.stdout is not None
    lines: list[str] = []
    os.set_blocking(process.stdout.fileno(), False)
    while True:
        ready, _, _ = select.select([process.stdout], [], [], 1.0)
        chunk = process.stdout.read() if ready else None
        if chunk == "":  # end of its output: it has exited (or is about to)
            process.wait()
            sample()
            return process.returncode, lines
        for line in (chunk or "").splitlines():
            print(line, flush=True)
            lines = [*lines[-19:], line]
        sample()


# --- names and paths inside a model folder -------------------------------------------------
#
# Root works inside folders the operator owns, with names it did not choose: the Hub's file
# list, the head's manifest, a tar from the head. Issue 22 ("the copy client writes where the
# head says", "root helpers follow ../absolute names from Hub JSON", "jobs chown through
# symlinks"): a name is a normalised relative path below the folder, and every component is
# opened without following a symlink (O_NOFOLLOW at each step, from the folder's descriptor).

NAME_LIMIT = 1024  # bytes of a whole name (a Hub path is far shorter)
PART_LIMIT = 255  # bytes of one component (NAME_MAX)
PARTIAL = ".cache/spark-copy"  # the copy's partial files, beside hf's own .cache/huggingface
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: a FIFO planted under a file's name opens at once (and is then refused).
FILE_FLAGS = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


def safe_name(name: object) -> str:
    """``name`` when it is a normalised relative POSIX path (no ``..``, ``.``, empty or
    over-long component, no leading ``/``, backslash, NUL or control character); else the
    job stops naming it."""
    text = name if isinstance(name, str) else ""
    try:
        parts = [len(part.encode()) for part in text.split("/")]
        plain = len(text.encode()) <= NAME_LIMIT and all(0 < n <= PART_LIMIT for n in parts)
    except UnicodeEncodeError:  # a lone surrogate from JSON
        plain = False
    plain = (
        plain
        and not any(ord(c) < 32 or ord(c) == 127 or c == "\\" for c in text)
        and not text.startswith("/")
        and posixpath.normpath(text) == text
        and not any(part in (".", "..") for part in text.split("/"))
    )
    if not plain:
        raise JobError(
            f"refused the file name {name!r}: not a plain relative path inside the model folder"
        )
    return text


def copied_name(name: object) -> str:
    """A model file's name (``safe_name``) that is not the deploy's marker and not under
    .cache/ (hf's bookkeeping and the copy's partial files stay on each Spark)."""
    text = safe_name(name)
    if text == MARKER or text == ".cache" or text.startswith(".cache/"):
        raise JobError(f"refused the file name {name!r}: the deploy's own, never a model file")
    return text


def open_folder(folder: Path | str) -> int:
    """The model folder's descriptor; refused when the folder is a symlink."""
    try:
        return os.open(folder, DIR_FLAGS)
    except OSError as error:
        raise JobError(
            f"{folder}: cannot open it as a folder without following a symlink "
            f"({error.strerror}); remove what is there and run the deploy again"
        ) from None


def open_parent(root: int, name: str, owner: tuple[int, int] | None = None) -> int:
    """The descriptor of the folder holding ``name`` below ``root``: each component opened
    without following a symlink (one is refused); with ``owner``, missing ones are created
    (0755) and given to the owner through their descriptor."""
    fd = os.dup(root)
    try:
        for part in safe_name(name).split("/")[:-1]:
            made = False
            if owner is not None:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o755, dir_fd=fd)
                    made = True
            inner = os.open(part, DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = inner
            if made and owner is not None:
                os.fchown(fd, *owner)
    except OSError as error:
        os.close(fd)
        raise JobError(
            f"{name}: a folder on its way is a symlink or not a folder ({error.strerror}); "
            "refused (remove it and run the deploy again)"
        ) from None
    return fd


def open_regular(root: int, name: str, flags: int = os.O_RDONLY, mode: int = 0o644) -> int:
    """``name`` below ``root`` opened without following a symlink anywhere, and only when
    it is a regular file."""
    parent = open_parent(root, name)
    try:
        fd = os.open(posixpath.basename(name), flags | FILE_FLAGS, mode, dir_fd=parent)
    except OSError as error:
        raise JobError(f"{name}: cannot open it as a regular file ({error.strerror})") from None
    finally:
        os.close(parent)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise JobError(f"{name}: not a regular file; refused")
    os.set_blocking(fd, True)
    return fd


def size_inside(root: int, name: str) -> int:
    """The size of the regular file ``name`` below ``root`` (0: none, or not regular)."""
    try:
        fd = open_regular(root, name)
    except JobError:
        return 0
    try:
        return os.fstat(fd).st_size
    finally:
        os.close(fd)


def regular_files(root: int) -> dict[str, os.stat_result]:
    """The regular files below ``root`` by name, found without following a symlink:
    symlinks (and folders they point to), .cache/, the marker and names that are not plain
    (``copied_name``) are left out."""
    found: dict[str, os.stat_result] = {}

    def walk(fd: int, prefix: str) -> None:
        with os.scandir(fd) as entries:
            for entry in entries:
                name = prefix + entry.name
                if entry.is_dir(follow_symlinks=False) and name != ".cache":
                    inner = os.open(entry.name, DIR_FLAGS, dir_fd=fd)
                    try:
                        walk(inner, name + "/")
                    finally:
                        os.close(inner)
                elif entry.is_file(follow_symlinks=False):
                    with contextlib.suppress(JobError):
                        found[copied_name(name)] = entry.stat(follow_symlinks=False)

    walk(root, "")
    return dict(sorted(found.items()))


def file_sha256(root: int, name: str) -> tuple[int, str]:
    """The size and sha256 of the regular file ``name`` below ``root``."""
    digest = hashlib.sha256()
    with os.fdopen(open_regular(root, name), "rb") as source:
        while chunk := source.read(COPY_CHUNK):
            digest.update(chunk)
        return os.fstat(source.fileno()).st_size, digest.hexdigest()


# --- model folders ---------------------------------------------------------------------


def as_operator(spec: ModelSpec) -> dict[str, Any]:
    """Popen arguments that run a command as the operator, with their home and the Hugging
    Face environment the deploy chose (their token is read from their home)."""
    account = pwd.getpwnam(spec.user)
    env = {
        "HOME": account.pw_dir,
        "USER": spec.user,
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        **spec.env,
    }
    return {
        "user": account.pw_uid,
        "group": account.pw_gid,
        "extra_groups": [],
        "env": env,
        "cwd": account.pw_dir,
    }


def hub_files(spec: ModelSpec) -> dict[str, int]:
    """The revision's files and sizes from the Hub ({} when the Hub does not answer)."""
    result = subprocess.run(
        [f"{spec.hf_venv}/bin/python", "-c", HUB_FILES, spec.repo, spec.revision],
        capture_output=True,
        text=True,
        timeout=120,
        **as_operator(spec),
    )
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        print(f"the Hub's file list of {spec.repo} could not be read: {last}", flush=True)
        return {}
    listed = json.loads(result.stdout)
    # Names become paths under the folder (sizes, partial files): plain ones only (issue 22).
    return {copied_name(name): int(size) for name, size in listed.items()}


def folder_bytes(folder: Path, files: dict[str, int]) -> int:
    """Bytes of the revision in ``folder``: finished files, and the partial files hf keeps
    under .cache/huggingface/download while it downloads."""
    done = 0
    try:
        root = open_folder(folder)
    except JobError:
        return 0
    try:
        for name, size in files.items():
            done += min(size_inside(root, name), size)
        for _, info in partial_files(root):
            done += info.st_size
    finally:
        os.close(root)
    return done


HF_PARTIAL = ".cache/huggingface/download"  # hf's partial files, <name>.<etag>.incomplete


def partial_files(root: int) -> list[tuple[str, os.stat_result]]:
    """hf's partial files below ``root`` (found without following a symlink)."""
    try:
        inner = open_parent(root, f"{HF_PARTIAL}/x")
    except JobError:
        return []
    try:
        found = regular_files(inner)
    finally:
        os.close(inner)
    return [(name, info) for name, info in found.items() if name.endswith(".incomplete")]


def remove_partial_files(folder: Path) -> None:
    """An earlier attempt's partial files (hf never reads them again), each unlinked from
    its own folder's descriptor: nothing outside the folder is reached through a symlink."""
    try:
        root = open_folder(folder)
    except JobError:
        return
    try:
        for name, _ in partial_files(root):
            parent = open_parent(root, f"{HF_PARTIAL}/{name}")
            try:
                os.unlink(posixpath.basename(name), dir_fd=parent)
            finally:
                os.close(parent)
    finally:
        os.close(root)


def seal(spec: ModelSpec) -> None:
    """Check, as the operator, that the folder has every file an engine needs, and mark it
    complete (spark-model-check --seal); the job fails naming what is missing."""
    tokenizer = "1" if spec.needs_tokenizer else "0"
    code, lines = watch(
        [spec.model_check, "--seal", spec.folder, spec.want, tokenizer],
        lambda: None,
        **as_operator(spec),
    )
    if code != 0:
        raise JobError(" | ".join(lines))


def hf_download(
    spec: ModelSpec, repo: str, *words: str, progress: Callable[[], None] = lambda: None
) -> None:
    """``hf download repo words...`` into the model folder, as the operator (``progress``
    called while it runs); a JobError naming the repository and hf's last lines if it fails."""
    code, lines = watch(
        [f"{spec.hf_venv}/bin/hf", "download", repo, *words, "--local-dir", spec.folder, "--quiet"],
        progress,
        **as_operator(spec),
    )
    if code != 0:
        raise JobError(f"hf download {repo} failed (exit {code}): " + " | ".join(lines))


def fetch_model(spec: ModelSpec, status: Status) -> None:
    folder = Path(spec.folder)
    operator = as_operator(spec)
    status.update(force=True, phase="listing", done=0, total=None)
    files = hub_files(spec)
    total = sum(files.values()) or None
    if folder.is_dir():
        remove_partial_files(folder)
    done = folder_bytes(folder, files)
    status.update(force=True, phase="download", done=done, total=total)
    if total:
        check_room(f"{spec.repo} ({human(total)})", str(folder), total - done)
    account = pwd.getpwnam(spec.user)
    folder.mkdir(parents=True, exist_ok=True)
    # The folder itself, never what a symlink in its place points to (issue 22).
    os.chown(folder, account.pw_uid, operator["group"], follow_symlinks=False)
    print(f"downloading {spec.repo}@{spec.revision} into {folder}", flush=True)
    hf_download(
        spec, spec.repo, "--revision", spec.revision,
        progress=lambda: status.update(done=folder_bytes(folder, files)),
    )  # fmt: skip
    status.update(force=True, done=folder_bytes(folder, files))
    wanted = REPAIRABLE if spec.needs_tokenizer else REPAIRABLE[:1]
    missing = [name for name in wanted if not (folder / name).is_file()]
    if spec.base_repo and missing:
        status.update(force=True, phase="repair")
        print(f"fetching {', '.join(missing)} from {spec.base_repo}", flush=True)
        hf_download(spec, spec.base_repo, *missing)
    status.update(force=True, phase="seal")
    seal(spec)


# --- engine images -----------------------------------------------------------------------

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


def docker(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([DOCKER, *args], capture_output=True, text=True, timeout=600)


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
        root = docker("info", "-f", "{{.DockerRootDir}}").stdout.strip() or "/var/lib/docker"
        check_room(f"{image} ({human(total)} compressed)", root, total * IMAGE_EXPANSION)
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
        os.execv(DOCKER, [DOCKER, "pull", image])
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
    release, ray, help_lines, section = "", False, [], ""
    for line in result.stdout.splitlines():
        if line.startswith("release "):
            release = line.split(" ", 1)[1].strip()
        elif line.startswith("ray "):
            ray = line.split(" ", 1)[1].strip() == "yes"
        elif line == "--- help":
            section = "help"
        elif section == "help":
            help_lines.append(line)
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


# --- a pair or a switch: fetched once, copied over the QSFP link --------------------------
#
# The head fetches from the internet; every other Spark copies from the head over rail 1.
# The link is not trusted (issue 22: a host on a shared switch, or a compromised head, can
# answer on the head's address): the head's server binds its own fabric address, answers the
# other Sparks' fabric addresses only, and only with the run's token (a random secret the
# deploy wrote root-only on every Spark over SSH); it serves only regular files of the model
# folders the deploy planned, each once it is sealed, and the image. A copy writes only plain
# names inside its folder, no more bytes than declared, and keeps nothing whose sha256 (or
# image ID) differs from what the deploy read from the head over SSH (``digests``). The
# server stops when the deploy is done with it (or after IDLE seconds without a request).

IDLE = 1800
TICK = 5  # the copy server's longest wait for a request before it looks at the idle time
COPY_CHUNK = 8 * 1024 * 1024
STREAMS = 8  # model files streamed at once (a switch has at most 7 other Sparks)
CONNECTIONS = 16  # connections served at once; more are closed unanswered
PATH_LIMIT = 4096  # bytes of a request's path and query
HEADER_LIMIT = 8192  # bytes of a request's headers together
JSON_LIMIT = 16 * 1024 * 1024  # bytes of a listing (or a tar's manifest) read at most
REQUEST_TIMEOUT = 60  # seconds a connection may stay silent
BUSY_WAIT = 5  # seconds before a copy asks a busy head (503) again
MANIFESTS = JOBS / "manifests"  # root-only cache of the sealed folders' digests


def token_file(job_id: str) -> str:
    """Where the deploy writes a job's token: a root-only (0700) folder beside the specs."""
    return str(JOBS / "private" / f"{job_id}.token")


def read_token(path: str) -> str:
    """The run's token (in ``path``, the spec's ``token_file``), read at each use (a later
    run writes a new one); "" when none."""
    try:
        fd = os.open(path, os.O_RDONLY | FILE_FLAGS)
    except OSError:
        return ""
    with os.fdopen(fd, "rb") as source:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return ""
        return source.read(4096).decode(errors="replace").strip()


def sealed(root: int, want: str) -> bool:
    """Whether the folder's marker (a regular file) names ``want``."""
    try:
        fd = open_regular(root, MARKER)
    except JobError:
        return False
    with os.fdopen(fd, "rb") as marker:
        return marker.read(4096).decode(errors="replace").strip() == want


def model_listing(folder: Path, want: str) -> dict[str, Any]:
    """A sealed folder's regular files and sizes (``regular_files``: no symlink)."""
    try:
        root = open_folder(folder)
    except JobError:
        return {"ready": False, "files": {}}
    try:
        if not sealed(root, want):
            return {"ready": False, "files": {}}
        files = {name: info.st_size for name, info in regular_files(root).items()}
    finally:
        os.close(root)
    return {"ready": True, "files": files}


def folder_digests(folder: str, want: str) -> dict[str, Any]:
    """A sealed folder's files as {name: [size, sha256]} (``ready`` False until sealed),
    for the deploy to read over SSH. Each file's digest is kept in a root-only cache and
    computed again only when its size or mtime changed."""
    try:
        root = open_folder(folder)
    except JobError:
        return {"ready": False, "files": {}}
    cache = MANIFESTS / f"{hashlib.sha256(folder.encode()).hexdigest()[:32]}.json"
    try:
        if not sealed(root, want):
            return {"ready": False, "files": {}}
        try:
            known = json.loads(cache.read_text()).get("files") or {}
        except (OSError, ValueError, AttributeError):
            known = {}
        files = {}
        for name, info in regular_files(root).items():
            entry = known.get(name)
            if not (isinstance(entry, list) and entry[:2] == [info.st_size, info.st_mtime_ns]):
                size, digest = file_sha256(root, name)
                entry = [size, info.st_mtime_ns, digest]
            files[name] = entry
    finally:
        os.close(root)
    MANIFESTS.mkdir(mode=0o700, parents=True, exist_ok=True)
    temporary = cache.with_suffix(f".{os.getpid()}.tmp")
    temporary.write_text(json.dumps({"folder": folder, "want": want, "files": files}) + "\n")
    temporary.replace(cache)
    return {"ready": True, "files": {name: [e[0], e[2]] for name, e in files.items()}}


def digests(queries: list[dict[str, str]]) -> list[dict[str, Any]]:
    """What the deploy reads from the head over SSH before the other Sparks copy:
    ``{"want", "folder"}`` gives the folder's digests, ``{"image"}`` the image's ID."""
    found = []
    for query in queries:
        if "image" in query:
            identity = image_id(query["image"])
            found.append({"image": query["image"], "ready": bool(identity), "id": identity})
        else:
            found.append({"want": query["want"], **folder_digests(query["folder"], query["want"])})
    return found


def image_listing(image: str) -> dict[str, Any]:
    found = image_id(image)
    if not found:
        return {"ready": False}
    size = docker("image", "inspect", "-f", "{{.Size}}", image).stdout.strip()
    return {"ready": True, "id": found, "size": int(size) if size.isdigit() else 0}


def allowed(allow: str | list[str]) -> set[str]:
    """The addresses the server answers: the other Sparks' (the spec's ``allow``, a list;
    one address, as a string, in the specs of earlier releases)."""
    return {allow} if isinstance(allow, str) else set(allow)


class CopyServer(http.server.ThreadingHTTPServer):
    """A threading server that answers CONNECTIONS connections at once (more are closed)."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: type) -> None:
        super().__init__(address, handler)
        self.slots = threading.BoundedSemaphore(CONNECTIONS)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()


def refusal(handler: http.server.BaseHTTPRequestHandler, allow: set[str], token: str) -> tuple:
    """Why a request is not answered (code, text), or () when it is: a stranger's address,
    an over-long path or headers, or no token or the wrong one (hmac.compare_digest)."""
    if handler.client_address[0] not in allow:
        return 403, "only the other Sparks of this deploy may copy"
    if len(handler.path) > PATH_LIMIT:
        return 414, "the request's path is too long"
    if sum(len(k) + len(v) for k, v in handler.headers.items()) > HEADER_LIMIT:
        return 431, "the request's headers are too long"
    given = (handler.headers.get("Authorization") or "").encode("utf-8", "replace")
    if not token or not hmac.compare_digest(given, f"Bearer {token}".encode()):
        return 401, "this run's token is missing or wrong"
    return ()


class CopyHandler(http.server.BaseHTTPRequestHandler):
    """A request of the copy server: the planned folders and images only (``copy_handler``
    gives each server its own subclass, with what it serves)."""

    server_version = "spark-fetch"
    timeout = REQUEST_TIMEOUT
    token_file: str  # the spec's: where the run's token is
    models: dict[str, str]  # want -> folder
    images: list[str]
    allow: set[str]
    streams: Any  # a BoundedSemaphore of STREAMS
    saving: Any  # a Lock: one docker save at a time
    last: list[float]  # when the last request came

    def log_message(self, format: str, *args: Any) -> None:
        print(f"{self.client_address[0]} {format % args}", flush=True)

    def reply(self, code: int, body: Any) -> None:
        data = (json.dumps(body) + "\n").encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 -- http.server's name
        self.last[0] = time.monotonic()
        refused = refusal(self, self.allow, read_token(self.token_file))
        if refused:
            self.reply(refused[0], {"error": refused[1]})
            return
        url = urllib.parse.urlsplit(self.path)
        query = dict(urllib.parse.parse_qsl(url.query))
        want, image = query.get("want", ""), query.get("image", "")
        if url.path == "/model" and want in self.models:
            self.reply(200, model_listing(Path(self.models[want]), want))
        elif url.path == "/file" and want in self.models:
            self.limited(self.streams, self.send_model_file, self.models[want], want, query)
        elif url.path == "/image" and image in self.images:
            self.reply(200, image_listing(image))
        elif url.path == "/save" and image in self.images and image_id(image):
            self.limited(self.saving, self.send_image, image)
        else:
            self.reply(404, {"error": "not something this deploy planned to copy"})

    def limited(self, slots: Any, send: Callable[..., None], *args: Any) -> None:
        if not slots.acquire(blocking=False):
            self.reply(503, {"error": "busy: ask again in a few seconds"})
            return
        try:
            send(*args)
        finally:
            slots.release()

    def send_model_file(self, folder: str, want: str, query: dict[str, str]) -> None:
        try:
            name = copied_name(query.get("path", ""))
            root = open_folder(folder)
            try:
                fd = open_regular(root, name) if sealed(root, want) else -1
            finally:
                os.close(root)
        except JobError as error:
            fd, name = -1, str(error)
        if fd < 0:
            self.reply(404, {"error": f"not a regular file of the sealed folder: {name}"})
            return
        with os.fdopen(fd, "rb") as source:
            self.send_range(source, os.fstat(fd).st_size)

    def send_range(self, source: Any, size: int) -> None:
        start = 0
        match = re.fullmatch(r"bytes=(\d{1,19})-", self.headers.get("Range", ""))
        if match:
            start = min(int(match.group(1)), size)
        self.send_response(206 if match else 200)
        self.send_header("Content-Length", str(size - start))
        if match:
            self.send_header("Content-Range", f"bytes {start}-{size - 1}/{size}")
        self.end_headers()
        if size > start:
            self.connection.sendfile(source, start, size - start)

    def send_image(self, image: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/x-tar")
        self.end_headers()
        saving = subprocess.Popen([DOCKER, "save", image], stdout=subprocess.PIPE)
        assert saving.stdout is not None
        try:
            while chunk := saving.stdout.read(COPY_CHUNK):
                self.wfile.write(chunk)
        finally:
            saving.kill()
            saving.wait()


def copy_handler(spec: ServeSpec, last: list[float]) -> type:
    """The request handler of ``serve``: the planned folders and images only."""
    return type(
        "Handler",
        (CopyHandler,),
        {
            "token_file": spec.token_file,
            "models": dict(spec.models),
            "images": list(spec.images),
            "allow": allowed(spec.allow),
            "streams": threading.BoundedSemaphore(STREAMS),
            "saving": threading.Lock(),
            "last": last,
        },
    )


def serve(spec: ServeSpec, status: Status) -> None:
    """Serve the planned folders and image to the other Sparks until stopped (or idle)."""
    last = [time.monotonic()]
    server = CopyServer((spec.bind, int(spec.port)), copy_handler(spec, last))
    status.update(force=True, phase="serving")
    answered = ", ".join(sorted(allowed(spec.allow)))
    print(f"serving copies on {spec.bind}:{spec.port} to {answered}")
    if not read_token(spec.token_file):
        print("no token for this run: every request is refused (run the deploy again)")
    while (left := IDLE - (time.monotonic() - last[0])) > 0:
        # wait for a request no longer than the idle time left (at most TICK): the server
        # stops when it is idle, not up to a tick later
        server.timeout = min(TICK, max(left, 0.05))
        server.handle_request()
    print(f"no request for {IDLE} s: stopping", flush=True)
    server.server_close()


@contextlib.contextmanager
def head_get(
    head: Head, route: str, headers: dict[str, str] | None = None, **query: str
) -> Iterator[http.client.HTTPResponse]:
    """A GET to the head's server with the run's token (http.client: no redirect and no
    proxy is followed, so the token goes to the head's address only). A busy head (503) is
    asked again until the spec's wait_limit; any answer but 200 or 206 is an OSError."""
    deadline = time.monotonic() + float(head.wait_limit or 0)
    while True:
        connection = http.client.HTTPConnection(
            head.source, int(head.port), timeout=REQUEST_TIMEOUT
        )
        try:
            connection.request(
                "GET",
                f"{route}?{urllib.parse.urlencode(query)}",
                headers={
                    "Authorization": f"Bearer {read_token(head.token_file)}",
                    **(headers or {}),
                },
            )
            response = connection.getresponse()
            if response.status != 503 or time.monotonic() > deadline:
                if response.status not in (200, 206):
                    said = response.read(4096).decode(errors="replace").strip()
                    raise OSError(f"the head answered {response.status} to {route}: {said}")
                yield response
                return
        finally:
            connection.close()
        time.sleep(BUSY_WAIT)


def head_json(head: Head, route: str, **query: str) -> dict[str, Any]:
    with head_get(head, route, None, **query) as response:
        data = response.read(JSON_LIMIT + 1)
    if len(data) > JSON_LIMIT:
        raise OSError(f"the head's answer to {route} is over {JSON_LIMIT} bytes")
    found = json.loads(data)
    if not isinstance(found, dict):
        raise ValueError(f"the head's answer to {route} is not an object")
    return found


def wait_for_head(head: Head, status: Status, path: str, **query: str) -> dict:
    """The head's listing once the head has the thing whole (it may still be fetching),
    waiting at most the deploy's fetch_timeout."""
    deadline = time.monotonic() + float(head.wait_limit)
    while True:
        try:
            listing = head_json(head, path, **query)
        except (OSError, ValueError, http.client.HTTPException) as error:
            listing = {"ready": False, "error": str(error)}  # not up yet, or the link is down
        if listing.get("ready"):
            return listing
        if time.monotonic() > deadline:
            raise WaitedOut(
                f"the head ({head.source}) did not have {query} whole within "
                f"{head.wait_limit} s: {listing.get('error') or 'it is still fetching'}"
            )
        status.update(force=True, phase="waiting", error="")
        time.sleep(5)


def expected_files(spec: CopyModelSpec) -> dict[str, tuple[int, str]]:
    """The files to copy: plain names (``copied_name``) with the size and sha256 the deploy
    read from the head over SSH (the spec's ``files``), never the head server's listing."""
    files = spec.files
    if not isinstance(files, dict) or not files:
        raise JobError(
            f"the copy of {spec.want} has no digests of the head's files in its spec; "
            "run the deploy again (it reads them from the head over SSH)"
        )
    expected = {}
    for name, value in files.items():
        size, digest = value if isinstance(value, list) and len(value) == 2 else (None, "")
        if not (isinstance(size, int) and size >= 0 and re.fullmatch(r"[0-9a-f]{64}", digest)):
            raise JobError(f"the copy's spec has no size and sha256 for {name!r}; refused")
        expected[copied_name(name)] = (size, digest)
    return expected


def resume(out: Any, size: int) -> Any:
    """The sha256 of what a partial copy holds (emptied when it is longer than the file);
    ``out`` is left at its end."""
    hasher = hashlib.sha256()
    if os.fstat(out.fileno()).st_size > size:
        out.truncate(0)
    out.seek(0)
    while chunk := out.read(COPY_CHUNK):
        hasher.update(chunk)
    return hasher


def receive(spec: CopyModelSpec, name: str, out: Any, size: int, progress: Callable) -> Any:
    """The rest of ``name`` from the head into ``out`` (resumed from its end), no byte past
    the declared ``size``: a longer or shorter answer is refused. Its sha256."""
    hasher, start = resume(out, size), out.tell()
    headers = {"Range": f"bytes={start}-"} if start else {}
    with head_get(spec.head, "/file", headers, want=spec.want, path=name) as response:
        if start and not (response.getheader("Content-Range") or "").startswith(f"bytes {start}-"):
            out.seek(0)  # the head sent the whole file
            out.truncate(0)
            hasher, start = hashlib.sha256(), 0
        declared = response.getheader("Content-Length")
        if declared is not None and declared != str(size - start):
            raise JobError(
                f"{name}: the head offers {declared} bytes where {size - start} of its {size} "
                "remain (as the deploy read over SSH); refused"
            )
        left = size - start
        while left:
            chunk = response.read(min(COPY_CHUNK, left))
            if not chunk:
                raise TransientError(f"{name}: the head sent {size - left} of its {size} bytes")
            out.write(chunk)
            hasher.update(chunk)
            left -= len(chunk)
            progress(size - left)
        if response.read(1):
            raise JobError(f"{name}: the head sent more than its {size} bytes; refused")
    out.flush()
    return hasher


def copy_file(
    spec: CopyModelSpec, root: int, name: str, want: tuple[int, str], owner: tuple[int, int],
    progress: Callable[[int], None],
) -> None:  # fmt: skip
    """One file from the head: kept when it is here whole (its sha256 checked), else copied
    into its partial file under .cache/spark-copy (resumed), checked against the sha256 the
    deploy read over SSH, and renamed into place. Folders and files are created without
    following a symlink and given to the owner through their descriptors."""
    size, digest = want
    if size_inside(root, name) == size and file_sha256(root, name) == want:
        return
    base = posixpath.basename(name)
    parent = open_parent(root, f"{PARTIAL}/{name}", owner)
    try:
        try:
            fd = os.open(base, os.O_RDWR | os.O_CREAT | FILE_FLAGS, 0o644, dir_fd=parent)
        except OSError as error:
            raise JobError(f"{PARTIAL}/{name}: cannot open it ({error.strerror})") from None
        with os.fdopen(fd, "r+b") as out:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise JobError(f"{PARTIAL}/{name}: not a regular file; refused")
            os.set_blocking(fd, True)
            os.fchown(fd, *owner)
            found = receive(spec, name, out, size, progress).hexdigest()
            if found != digest:
                out.truncate(0)
                raise JobError(
                    f"{name}: the head sent bytes whose sha256 is {found}, not {digest} as the "
                    "deploy read it over SSH; discarded (check the head's folder, run again)"
                )
        target = open_parent(root, name, owner)
        try:
            os.rename(base, base, src_dir_fd=parent, dst_dir_fd=target)
        except OSError as error:
            raise JobError(f"{name}: cannot put it in place ({error.strerror})") from None
        finally:
            os.close(target)
    finally:
        os.close(parent)


def copy_model(spec: CopyModelSpec, status: Status) -> None:
    """Copy a complete model folder from the head: file by file, each resumed where it
    stopped and checked against its digest, then seal it as the head's was sealed."""
    folder = Path(spec.folder)
    files = expected_files(spec)
    wait_for_head(spec.head, status, "/model", want=spec.want)
    account = pwd.getpwnam(spec.user)
    owner = (account.pw_uid, account.pw_gid)
    folder.mkdir(parents=True, exist_ok=True)
    root = open_folder(folder)
    try:
        os.fchown(root, *owner)
        total = sum(size for size, _ in files.values())
        here = sum(
            min(size, max(size_inside(root, name), size_inside(root, f"{PARTIAL}/{name}")))
            for name, (size, _) in files.items()
        )
        status.update(force=True, phase="copy", done=here, total=total)
        check_room(f"{spec.want} ({human(total)})", str(folder), total - here)
        finished = [0]

        def progress(current: int) -> None:
            status.update(done=finished[0] + current)

        for name, want in files.items():
            copy_file(spec, root, name, want, owner, progress)
            finished[0] += want[0]
            status.update(done=finished[0])
    finally:
        os.close(root)
    status.update(force=True, phase="seal", done=total)
    seal(spec)


# docker save's tar (moby image/tarexport; OCI layout since docker 25): the names that tag
# an image. ``repositories`` (the legacy tags) is left out of what docker load reads.
NAME_ANNOTATIONS = ("io.containerd.image.name", "org.opencontainers.image.ref.name")


def image_names(image: str) -> set[str]:
    """The spellings of ``image`` a tar may tag: as given, with docker.io (and library/)
    in front, and its bare tag (OCI ref.name)."""
    names, first = {image}, image.split("/", 1)[0]
    if "/" not in image or not ("." in first or ":" in first or first == "localhost"):
        names |= {f"docker.io/{image}", f"docker.io/library/{image}"}
    tag = image.rsplit(":", 1)[1] if ":" in image.rsplit("/", 1)[-1] else "latest"
    return names | {tag}


def check_image_json(name: str, text: bytes, image: str, expected: str) -> None:
    """manifest.json and index.json of the head's tar describe one image: the expected
    config, named ``image`` or not at all; else refused before docker load has read them."""
    config, names = expected.removeprefix("sha256:"), image_names(image)
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if name == "manifest.json":
        entry = data[0] if isinstance(data, list) and len(data) == 1 else None
        plain = isinstance(entry, dict) and (
            entry.get("Config") in (f"blobs/sha256/{config}", f"{config}.json")
            and set(entry.get("RepoTags") or []) <= names
        )
    else:
        entries = data.get("manifests") if isinstance(data, dict) else None
        entry = entries[0] if isinstance(entries, list) and len(entries) == 1 else None
        notes = (entry.get("annotations") or {}) if isinstance(entry, dict) else None
        plain = isinstance(notes, dict) and all(
            notes[key] in names for key in NAME_ANNOTATIONS if key in notes
        )
    if not plain:
        raise JobError(
            f"the image's tar from the head has a {name} naming other images, or another ID "
            f"than {expected} (read over SSH); refused before docker load tagged anything"
        )


class Hashing:
    """A tar member's bytes, read through on their way to docker load: hashed, counted."""

    def __init__(self, source: Any, moved: Callable[[int], None]) -> None:
        self.source, self.hash, self.moved = source, hashlib.sha256(), moved

    def read(self, size: int = -1) -> bytes:
        chunk: bytes = self.source.read(size)
        self.hash.update(chunk)
        self.moved(len(chunk))
        return chunk


def pass_image(source: Any, sink: Any, image: str, expected: str, moved: Callable) -> None:
    """The head's ``docker save`` tar, passed to docker load member by member: plain names
    only; folders, regular files and symlinks that stay inside it only; each blob's sha256
    is its name; manifest.json and index.json as ``check_image_json`` wants them. A refused
    member ends it before the tar does, so docker load loads and tags nothing."""
    with (
        tarfile.open(fileobj=source, mode="r|") as tar,
        tarfile.open(fileobj=sink, mode="w|", format=tarfile.PAX_FORMAT) as out,
    ):
        for member in tar:
            name = safe_name(member.name.rstrip("/"))
            if member.issym():
                safe_name(
                    posixpath.normpath(posixpath.join(posixpath.dirname(name), member.linkname))
                )
            elif not (member.isdir() or member.isfile()):
                raise JobError(f"the image's tar from the head holds {name}, not a file; refused")
            data = tar.extractfile(member) if member.isfile() else None
            if data is None or name == "repositories":
                if name != "repositories":
                    out.addfile(member)
                continue
            if name in ("manifest.json", "index.json"):
                text = data.read(JSON_LIMIT)
                check_image_json(name, text, image, expected)
                out.addfile(member, io.BytesIO(text))
                continue
            reader = Hashing(data, moved)
            out.addfile(member, reader)
            blob = re.fullmatch(r"blobs/sha256/([0-9a-f]{64})", name)
            if blob and reader.hash.hexdigest() != blob.group(1):
                raise JobError(f"the image's tar from the head: {name} is not what it is named")


def load_from_head(head: Head, image: str, expected: str, status: Status) -> None:
    """docker load of the head's ``docker save``, through ``pass_image``; the image then
    tagged ``image`` when the tar did not, and refused unless its ID is ``expected``."""
    loading = subprocess.Popen(
        [DOCKER, "load"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    assert loading.stdin is not None and loading.stdout is not None
    moved = [0]

    def count(size: int) -> None:
        moved[0] += size
        status.update(done=moved[0])

    try:
        with head_get(head, "/save", image=image) as response:
            pass_image(response, loading.stdin, image, expected, count)
        loading.stdin.close()
    except BaseException:
        loading.kill()
        loading.wait()
        raise
    output = loading.stdout.read().decode(errors="replace").strip()
    if loading.wait() != 0:
        raise JobError(f"docker load of {image} from the head failed: {output}")
    print(output, flush=True)
    if image_id(image) != expected:
        docker("tag", expected, image)
    if image_id(image) != expected:
        raise JobError(f"{image} is not {expected} after docker load from the head: {output}")
    status.update(force=True, done=moved[0], total=moved[0])


def copy_image(spec: CopyImageSpec, status: Status) -> None:
    """Copy the image from the head (`docker save` there, `docker load` here), unless the
    ID the deploy read from the head over SSH is here already; then read it as a pulled
    one is read."""
    image, expected = spec.image, str(spec.image_id or "")
    if not re.fullmatch(r"sha256:[0-9a-f]{64}", expected):
        raise JobError(
            f"the copy of {image} has no image ID of the head's in its spec; run the deploy "
            "again (it reads it from the head over SSH)"
        )
    if image_id(image) != expected:
        listing = wait_for_head(spec.head, status, "/image", image=image)
        total = int(listing.get("size") or 0) or None
        status.update(force=True, phase="copy", done=0, total=total)
        if total:
            root = docker("info", "-f", "{{.DockerRootDir}}").stdout.strip() or "/var/lib/docker"
            check_room(f"{image} ({human(total)})", root, total)
        load_from_head(spec.head, image, expected, status)
    read_image(image, spec, status)


# --- the command ---------------------------------------------------------------------------

KINDS: dict[str, Callable[[Any, Status], None]] = {  # the spec's kind -> the job
    "model": fetch_model,
    "image": fetch_image,
    "copy-model": copy_model,
    "copy-image": copy_image,
    "serve": serve,
}


def read_spec(job_id: str) -> JobSpec:
    """The job's spec, with where its copy channel's secret is (never in the spec)."""
    spec = JobSpec.from_json((JOBS / f"{job_id}.json").read_text())
    if isinstance(spec, (CopyModelSpec, CopyImageSpec, ServeSpec)):
        spec = replace(spec, token_file=token_file(job_id))
    return spec


def run(job_id: str) -> int:
    try:
        spec = read_spec(job_id)
    except SpecError as error:  # written by another release: the status says so
        print(error, flush=True)
        Status(job_id, job_id).update(force=True, state="failed", error=str(error))
        return 1
    status = Status(job_id, spec.label)
    status.update(force=True, state="running", phase="start", started=time.time(), error="")
    try:
        KINDS[spec.kind](spec, status)
    except Exception as error:  # reported in the status, then as systemd shows it
        said = str(error) if isinstance(error, JobError) else f"{type(error).__name__}: {error}"
        code = exit_status(error)
        if code == TRANSIENT_EXIT:  # systemd runs it again (spark-fetch@.service)
            print(f"{said}\na network error: exit {code}, to be run again", flush=True)
            status.update(force=True, state="retrying", error=said)
            return code
        status.update(force=True, state="failed", error=said)
        if not isinstance(error, JobError):
            raise  # its traceback in the journal
        print(error, flush=True)
        return PERMANENT_EXIT
    status.update(force=True, state="done", phase="done", finished=time.time())
    return 0


WORKING = ("running", "retrying")  # states a job's status has while its unit runs it


def job_status(job_id: str) -> dict[str, Any]:
    path = JOBS / f"{job_id}.status.json"
    try:
        found: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError):
        found = {"id": job_id, "state": "none"}
    unit = UNIT.format(id=job_id)
    show = subprocess.run(
        ["systemctl", "show", unit, "-p", "ActiveState", "--value"], capture_output=True, text=True
    )
    found["unit"] = show.stdout.strip() or "inactive"
    # "retrying": a network error, and systemd waits to run it again (the unit is
    # activating, auto-restart) or has (active); else it gave up (StartLimitBurst).
    if found["unit"] not in ("active", "activating") and found.get("state") in WORKING:
        found["state"] = "failed"  # killed, or the Spark rebooted, before it could say so
        found["error"] = found.get("error") or f"{unit} stopped before it finished"
    if found.get("state") == "failed":
        journal = subprocess.run(
            ["journalctl", "-u", unit, "-n", "15", "--no-pager", "-o", "cat"],
            capture_output=True,
            text=True,
        )
        found["lines"] = journal.stdout.strip().splitlines()[-15:]
    return found


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "run":
        return run(argv[1])
    if len(argv) == 2 and argv[0] == "digests":
        print(json.dumps(digests(json.loads(argv[1]))))
        return 0
    if len(argv) >= 2 and argv[0] == "status":
        for job_id in argv[1:]:
            print(json.dumps(job_status(job_id)))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
