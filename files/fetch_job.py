#!/usr/bin/env python3
"""
spark-fetch: the long work of a deploy (downloading a model folder, pulling an engine image
and reading it), run on the Spark as the systemd job ``spark-fetch@ID.service`` so that it
does not depend on the SSH session of the deploy that started it.

    spark-fetch run ID         the job itself (ExecStart of spark-fetch@.service)
    spark-fetch status ID...   one JSON line per job: its unit and its last progress

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
import http.server
import json
import os
import pty
import pwd
import re
import select
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

JOBS = Path(os.environ.get("SPARK_FETCH_JOBS", "/var/lib/spark-deploy/fetch"))
# Where the hf command's venv, spark-model-check and the image readings are: the deploy's
# paths (config/paths.py), given in each job's spec.
MARKER = ".spark-deploy-complete"  # spark-model-check's seal: the folder is complete
DOCKER = "/usr/bin/docker"
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


# --- model folders ---------------------------------------------------------------------


def as_operator(spec: dict[str, Any]) -> dict[str, Any]:
    """Popen arguments that run a command as the operator, with their home and the Hugging
    Face environment the deploy chose (their token is read from their home)."""
    account = pwd.getpwnam(spec["user"])
    env = {
        "HOME": account.pw_dir,
        "USER": spec["user"],
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        **spec.get("env", {}),
    }
    return {
        "user": account.pw_uid,
        "group": account.pw_gid,
        "extra_groups": [],
        "env": env,
        "cwd": account.pw_dir,
    }


def hub_files(spec: dict[str, Any]) -> dict[str, int]:
    """The revision's files and sizes from the Hub ({} when the Hub does not answer)."""
    result = subprocess.run(
        [f"{spec['hf_venv']}/bin/python", "-c", HUB_FILES, spec["repo"], spec["revision"]],
        capture_output=True,
        text=True,
        timeout=120,
        **as_operator(spec),
    )
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        print(f"the Hub's file list of {spec['repo']} could not be read: {last}", flush=True)
        return {}
    return {str(k): int(v) for k, v in json.loads(result.stdout).items()}


def folder_bytes(folder: Path, files: dict[str, int]) -> int:
    """Bytes of the revision in ``folder``: finished files, and the partial files hf keeps
    under .cache/huggingface/download while it downloads."""
    done = 0
    for name, size in files.items():
        with contextlib.suppress(OSError):
            done += min((folder / name).stat().st_size, size)
    partial = folder / ".cache" / "huggingface" / "download"
    if partial.is_dir():
        for path in partial.rglob("*.incomplete"):
            with contextlib.suppress(OSError):
                done += path.stat().st_size
    return done


def seal(spec: dict[str, Any]) -> None:
    """Check, as the operator, that the folder has every file an engine needs, and mark it
    complete (spark-model-check --seal); the job fails naming what is missing."""
    tokenizer = "1" if spec["needs_tokenizer"] else "0"
    code, lines = watch(
        [spec["model_check"], "--seal", spec["folder"], spec["want"], tokenizer],
        lambda: None,
        **as_operator(spec),
    )
    if code != 0:
        raise JobError(" | ".join(lines))


def fetch_model(spec: dict[str, Any], status: Status) -> None:
    folder = Path(spec["folder"])
    operator = as_operator(spec)
    status.update(force=True, phase="listing", done=0, total=None)
    files = hub_files(spec)
    total = sum(files.values()) or None
    partial = folder / ".cache" / "huggingface" / "download"
    if partial.is_dir():  # an earlier attempt's partial files: hf never reads them again
        for path in partial.rglob("*.incomplete"):
            path.unlink(missing_ok=True)
    done = folder_bytes(folder, files)
    status.update(force=True, phase="download", done=done, total=total)
    if total:
        check_room(f"{spec['repo']} ({human(total)})", str(folder), total - done)
    account = pwd.getpwnam(spec["user"])
    folder.mkdir(parents=True, exist_ok=True)
    os.chown(folder, account.pw_uid, operator["group"])
    print(f"downloading {spec['repo']}@{spec['revision']} into {folder}", flush=True)
    code, lines = watch(
        [
            f"{spec['hf_venv']}/bin/hf",
            "download",
            spec["repo"],
            "--revision",
            spec["revision"],
            "--local-dir",
            str(folder),
            "--quiet",
        ],  # fmt: skip
        lambda: status.update(done=folder_bytes(folder, files)),
        **operator,
    )
    if code != 0:
        raise JobError(f"hf download {spec['repo']} failed (exit {code}): " + " | ".join(lines))
    status.update(force=True, done=folder_bytes(folder, files))
    wanted = REPAIRABLE if spec["needs_tokenizer"] else REPAIRABLE[:1]
    missing = [name for name in wanted if not (folder / name).is_file()]
    if spec.get("base_repo") and missing:
        status.update(force=True, phase="repair")
        print(f"fetching {', '.join(missing)} from {spec['base_repo']}", flush=True)
        code, lines = watch(
            [
                f"{spec['hf_venv']}/bin/hf",
                "download",
                spec["base_repo"],
                *missing,
                "--local-dir",
                str(folder),
                "--quiet",
            ],  # fmt: skip
            lambda: None,
            **operator,
        )
        if code != 0:
            raise JobError(f"hf download {spec['base_repo']} failed: " + " | ".join(lines))
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


class PullProgress:
    """The bytes of a ``docker pull`` as its terminal output shows them: per layer (the 12
    digits docker prints), the bytes downloaded so far, and the layers it has whole."""

    def __init__(self, sizes: dict[str, int]):
        self.sizes = dict(sizes)  # layer -> compressed size (from the manifest, else the bar)
        self.current: dict[str, int] = {}
        self.finished: set[str] = set()
        self.buffer = ""
        self.lines: list[str] = []  # the last status lines (not the bars)

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

    @property
    def done(self) -> int:
        return sum(
            self.sizes.get(layer, 0) if layer in self.finished else self.current.get(layer, 0)
            for layer in set(self.sizes) | set(self.current)
        )

    @property
    def total(self) -> int | None:
        return sum(self.sizes.values()) or None


def pull(image: str, status: Status) -> None:
    """``docker pull`` on a terminal of its own, so that it prints its progress bars, from
    which the bytes of each layer are read."""
    progress = PullProgress(layer_sizes(image))
    status.update(force=True, phase="pull", done=0, total=progress.total)
    if progress.total:
        root = docker("info", "-f", "{{.DockerRootDir}}").stdout.strip() or "/var/lib/docker"
        need = progress.total * IMAGE_EXPANSION
        check_room(f"{image} ({human(progress.total)} compressed)", root, need)
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


def read_image(image: str, spec: dict[str, Any], status: Status) -> dict[str, Any]:
    """What the deploy checks an engine against, read once per image ID: its ID, digests,
    entrypoint and command, the engine release inside, whether it has `ray`, and the flags
    the engine's own --help lists. Cached in the readings folder as <id>.json."""
    found = image_id(image)
    if not found:
        raise JobError(f"{image} is not on this Spark after the pull")
    readings = Path(spec["readings"])
    cache = readings / f"{found.removeprefix('sha256:')}.json"
    if cache.exists():
        reading = json.loads(cache.read_text())
        if reading.get("engine") == spec["engine"]:
            return reading
    status.update(force=True, phase="read")
    inspected = json.loads(docker("image", "inspect", image).stdout)[0]
    config = inspected.get("Config") or {}
    result = docker(
        "run", "--rm", "--pull", "never", "--network", "none", "--entrypoint", "sh",
        found, "-c", spec["read_script"],
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
        "engine": spec["engine"],
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
    print(f"read {image} ({found[:19]}): {spec['engine']} {release or 'release not found'}, "
          f"ray {'yes' if ray else 'no'}, {len(flags)} flags", flush=True)  # fmt: skip
    return reading


def fetch_image(spec: dict[str, Any], status: Status) -> None:
    image = spec["image"]
    if image_id(image):
        status.update(force=True, phase="present")
    elif image.startswith("sha256:"):
        raise JobError(
            f"{image} is an image ID and no such image is on this Spark: build or load it "
            "there, or name a published image"
        )
    else:
        logins = Path(spec.get("docker_config") or "/nonexistent") / "config.json"
        if logins.is_file():  # the operator's `docker login`s (NGC's nvcr.io, private registries)
            os.environ["DOCKER_CONFIG"] = str(logins.parent)
        print(f"pulling {image}", flush=True)
        pull(image, status)
    read_image(image, spec, status)


# --- a pair or a switch: fetched once, copied over the QSFP link --------------------------
#
# The head fetches from the internet; every other Spark copies from the head over rail 1.
# Trust is the link's: the head's server binds its own fabric address, answers the other
# Sparks' fabric addresses only, reads only, serves only the model folders and the image
# the deploy planned, each once it is complete, and stops when the deploy is done with it
# (or after IDLE seconds without a request). No key, account or sudo right is created.

IDLE = 1800
COPY_CHUNK = 8 * 1024 * 1024


def model_listing(folder: Path, want: str) -> dict[str, Any]:
    """A complete folder's files and sizes (the deploy's marker says it is complete)."""
    try:
        complete = (folder / MARKER).read_text().strip() == want
    except OSError:
        complete = False
    if not complete:
        return {"ready": False, "files": {}}
    files = {}
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder).as_posix()
        if path.is_file() and not relative.startswith(".cache/") and relative != MARKER:
            files[relative] = path.stat().st_size
    return {"ready": True, "files": files}


def image_listing(image: str) -> dict[str, Any]:
    found = image_id(image)
    if not found:
        return {"ready": False}
    size = docker("image", "inspect", "-f", "{{.Size}}", image).stdout.strip()
    return {"ready": True, "id": found, "size": int(size) if size.isdigit() else 0}


def allowed(spec: dict[str, Any]) -> set[str]:
    """The addresses the server answers: the other Sparks' (a list; one address, as a
    string, in the specs of earlier releases)."""
    allow = spec["allow"]
    return {allow} if isinstance(allow, str) else set(allow)


def serve(spec: dict[str, Any], status: Status) -> None:
    """Serve the planned folders and image to the other Sparks until stopped (or idle)."""
    models: dict[str, str] = spec["models"]  # want -> folder
    images: list[str] = spec["images"]
    allow = allowed(spec)
    last = [time.monotonic()]

    class Handler(http.server.BaseHTTPRequestHandler):
        server_version = "spark-fetch"

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
            last[0] = time.monotonic()
            if self.client_address[0] not in allow:
                self.reply(403, {"error": "only the other Sparks of this deploy may copy"})
                return
            url = urllib.parse.urlsplit(self.path)
            query = dict(urllib.parse.parse_qsl(url.query))
            want, image = query.get("want", ""), query.get("image", "")
            if url.path == "/model" and want in models:
                self.reply(200, model_listing(Path(models[want]), want))
            elif url.path == "/file" and want in models:
                self.send_model_file(Path(models[want]), want, query.get("path", ""))
            elif url.path == "/image" and image in images:
                self.reply(200, image_listing(image))
            elif url.path == "/save" and image in images and image_id(image):
                self.send_image(image)
            else:
                self.reply(404, {"error": "not something this deploy planned to copy"})

        def send_model_file(self, folder: Path, want: str, name: str) -> None:
            listing = model_listing(folder, want)
            if name not in listing["files"]:
                self.reply(404, {"error": f"{name} is not a file of the complete folder"})
                return
            size = listing["files"][name]
            start = 0
            match = re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range", ""))
            if match:
                start = min(int(match.group(1)), size)
            self.send_response(206 if match else 200)
            self.send_header("Content-Length", str(size - start))
            if match:
                self.send_header("Content-Range", f"bytes {start}-{size - 1}/{size}")
            self.end_headers()
            with open(folder / name, "rb") as source:
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

    server = http.server.ThreadingHTTPServer((spec["bind"], int(spec["port"])), Handler)
    server.timeout = 5
    status.update(force=True, phase="serving")
    print(f"serving copies on {spec['bind']}:{spec['port']} to {', '.join(sorted(allow))}")
    while time.monotonic() - last[0] < IDLE:
        server.handle_request()
    print(f"no request for {IDLE} s: stopping", flush=True)


def head_json(spec: dict[str, Any], path: str, **query: str) -> dict[str, Any]:
    url = f"http://{spec['source']}:{spec['port']}{path}?{urllib.parse.urlencode(query)}"
    with urllib.request.urlopen(url, timeout=30) as response:
        found: dict[str, Any] = json.load(response)
        return found


def wait_for_head(spec: dict[str, Any], status: Status, path: str, **query: str) -> dict:
    """The head's listing once the head has the thing whole (it may still be fetching),
    waiting at most the deploy's fetch_timeout."""
    deadline = time.monotonic() + float(spec["wait_limit"])
    while True:
        try:
            listing = head_json(spec, path, **query)
        except OSError as error:  # its server is not up yet, or the link is down
            listing = {"ready": False, "error": str(error)}
        if listing.get("ready"):
            return listing
        if time.monotonic() > deadline:
            raise JobError(
                f"the head ({spec['source']}) did not have {query} whole within "
                f"{spec['wait_limit']} s: {listing.get('error') or 'it is still fetching'}"
            )
        status.update(force=True, phase="waiting", error="")
        time.sleep(5)


def copy_model(spec: dict[str, Any], status: Status) -> None:
    """Copy a complete model folder from the head: file by file, each resumed where it
    stopped, then seal it as the head's was sealed."""
    folder = Path(spec["folder"])
    listing = wait_for_head(spec, status, "/model", want=spec["want"])
    files: dict[str, int] = listing["files"]
    partial = folder / ".cache" / "spark-copy"

    def done() -> int:
        """Bytes here: each file whole, or its partial copy."""
        total = 0
        for name, size in files.items():
            for path in (folder / name, partial / name):
                if path.is_file():
                    total += min(path.stat().st_size, size)
                    break
        return total

    total = sum(files.values())
    status.update(force=True, phase="copy", done=done(), total=total)
    check_room(f"{spec['want']} ({human(total)})", str(folder), total - done())
    for name, size in files.items():
        target = folder / name
        if target.is_file() and target.stat().st_size == size:
            continue
        part = partial / name
        part.parent.mkdir(parents=True, exist_ok=True)
        start = part.stat().st_size if part.exists() else 0
        query = urllib.parse.urlencode({"want": spec["want"], "path": name})
        request = urllib.request.Request(
            f"http://{spec['source']}:{spec['port']}/file?{query}",
            headers={"Range": f"bytes={start}-"} if start else {},
        )
        with urllib.request.urlopen(request, timeout=60) as response, open(part, "ab") as out:
            if start and response.status != 206:
                out.truncate(0)  # the head sent the whole file
            while chunk := response.read(COPY_CHUNK):
                out.write(chunk)
                status.update(done=done())
        if part.stat().st_size != size:
            raise JobError(f"{name}: copied {part.stat().st_size} of {size} bytes")
        target.parent.mkdir(parents=True, exist_ok=True)
        part.replace(target)
    account = pwd.getpwnam(spec["user"])
    for path in [folder, *folder.rglob("*")]:
        os.chown(path, account.pw_uid, account.pw_gid)
    status.update(force=True, phase="seal", done=total)
    seal(spec)


def copy_image(spec: dict[str, Any], status: Status) -> None:
    """Copy the image from the head (`docker save` there, `docker load` here), unless the
    same image ID is here already; then read it as a pulled one is read."""
    image = spec["image"]
    listing = wait_for_head(spec, status, "/image", image=image)
    if image_id(image) != listing["id"]:
        total = int(listing.get("size") or 0) or None
        status.update(force=True, phase="copy", done=0, total=total)
        if total:
            root = docker("info", "-f", "{{.DockerRootDir}}").stdout.strip() or "/var/lib/docker"
            check_room(f"{image} ({human(total)})", root, total)
        query = urllib.parse.urlencode({"image": image})
        url = f"http://{spec['source']}:{spec['port']}/save?{query}"
        loading = subprocess.Popen(
            [DOCKER, "load"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=False
        )
        assert loading.stdin is not None and loading.stdout is not None
        moved = 0
        with urllib.request.urlopen(url, timeout=60) as response:
            while chunk := response.read(COPY_CHUNK):
                loading.stdin.write(chunk)
                moved += len(chunk)
                status.update(done=moved)
        loading.stdin.close()
        output = loading.stdout.read().decode(errors="replace").strip()
        if loading.wait() != 0 or image_id(image) != listing["id"]:
            raise JobError(f"docker load of {image} from the head failed: {output}")
        print(output, flush=True)
        status.update(force=True, done=moved, total=moved)
    read_image(image, spec, status)


# --- the command ---------------------------------------------------------------------------

KINDS: dict[str, Callable[[dict[str, Any], Status], None]] = {
    "model": fetch_model,
    "image": fetch_image,
    "copy-model": copy_model,
    "copy-image": copy_image,
    "serve": serve,
}


def run(job_id: str) -> int:
    spec = json.loads((JOBS / f"{job_id}.json").read_text())
    status = Status(job_id, spec["label"])
    status.update(force=True, state="running", phase="start", started=time.time(), error="")
    try:
        KINDS[spec["kind"]](spec, status)
    except JobError as error:
        print(error, flush=True)
        status.update(force=True, state="failed", error=str(error))
        return 1
    except Exception as error:  # reported in the status, then as systemd shows it
        status.update(force=True, state="failed", error=f"{type(error).__name__}: {error}")
        raise
    status.update(force=True, state="done", phase="done", finished=time.time())
    return 0


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
    if found["unit"] not in ("active", "activating") and found.get("state") == "running":
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
    if len(argv) >= 2 and argv[0] == "status":
        for job_id in argv[1:]:
            print(json.dumps(job_status(job_id)))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
