"""
The head's side of a pair or a switch: the digests the deploy reads over SSH before the other
Sparks copy (``digests``, cached root-only per folder), and the copy server, which answers
the other Sparks' fabric addresses only, with the run's token only, and only the planned
sealed folders' regular files and the planned image (`docker save`); it stops when the
deploy is done with it or after IDLE seconds without a request.

May import: the standard library and the sibling modules fetch_spec, fetch_errors,
fetch_progress, fetch_names, fetch_docker and fetch_channel (shipped beside spark-fetch).
Must not know: how a copy writes what it receives, the Hub, or the deploy.
"""

from __future__ import annotations

import hashlib
import hmac
import http.server
import json
import os
import re
import subprocess
import threading
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fetch_channel import REQUEST_TIMEOUT, read_token
from fetch_docker import docker, docker_argv, image_id
from fetch_errors import JobError
from fetch_names import (
    COPY_CHUNK,
    copied_name,
    file_sha256,
    open_folder,
    open_regular,
    regular_files,
    sealed,
)
from fetch_progress import JOBS, Status
from fetch_spec import ServeSpec

IDLE = 1800
TICK = 5  # the copy server's longest wait for a request before it looks at the idle time
STREAMS = 8  # model files streamed at once (a switch has at most 7 other Sparks)
CONNECTIONS = 16  # connections served at once; more are closed unanswered
PATH_LIMIT = 4096  # bytes of a request's path and query
HEADER_LIMIT = 8192  # bytes of a request's headers together
MANIFESTS = JOBS / "manifests"  # root-only cache of the sealed folders' digests


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
        saving = subprocess.Popen(docker_argv("save", image), stdout=subprocess.PIPE)
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
