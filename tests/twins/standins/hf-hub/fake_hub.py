#!/usr/bin/env python3
"""A stand-in for the Hugging Face Hub that the real `hf` client downloads from.

Standard library only (Python 3.11), so it runs inside a Spark twin as it is:

    python3 fake_hub.py --root DIR [--port 5555] [--cdn-port 5556] [--bind 127.0.0.1] [--log FILE]
                        [--rate-file FILE]

Model repos are folders DIR/<org>/<name>/; every file in them (sub-folders too) is a repo file,
except DIR/<org>/<name>/.gated, which gates the repo: it holds the one token that may read the
repo's files. Files matched by a `filter=lfs` pattern of the repo's .gitattributes are LFS
files. A repo has a single commit, `main`, whose sha is a digest of its file names and contents.

Like the real Hub there are two servers. The Hub (--port):

    GET       /api/whoami-v2                                   the token's user
    GET       /api/agent-harnesses                             registry the client reads at start
    GET       /api/models/{org}/{name}[/revision/{rev}]        repo info, siblings (?blobs=true)
    GET       /api/models/{org}/{name}/tree/{rev}[/{path}]     tree (?recursive=true), paginated
                                                               with a `Link: <...>; rel="next"`
    GET, HEAD /{org}/{name}/resolve/{rev}/{path}               a regular file: 200 (206 for a
                                                               Range) with ETag (git blob sha1),
                                                               X-Repo-Commit, Content-Length;
                                                               an LFS file: 302 to the CDN with
                                                               X-Linked-Etag (sha256), X-Linked-Size

and the CDN (--cdn-port), which serves LFS files by content hash at signed, expiring URLs:

    GET, HEAD /repos/{org}/{name}/{sha256}?Expires=...&Signature=...

Errors are the Hub's: a JSON body {"error": ...} with X-Error-Message and, where the Hub sends
one, X-Error-Code (RepoNotFound, RevisionNotFound, EntryNotFound, GatedRepo). Repo metadata and
trees of a gated repo are public, as on the Hub; its files are not. No Xet: no X-Xet-* header is
ever sent.

File bodies (a regular file from resolve, an LFS file from the CDN) go out in chunks at the rate
in bytes per second that the --rate-file holds (an integer), read again for every request so a
test can slow the Hub down or let it run while it serves; a missing, empty or unreadable file,
or one that holds no positive integer, means no limit. The rate is the Hub's whole bandwidth,
shared by the bodies being sent at once (as a link's is), not a rate per download. A throttled
body goes out in chunks of a tenth of a second's worth (at most 64 KiB), so a client that goes
away mid-body stops the transfer within about that time.

Each request is logged as one line, `ROLE METHOD TARGET STATUS BYTES RANGE`, e.g.

    cdn GET /repos/spark-twin/big-model/4f1c...?Expires=...&Signature=... 206 4194304 bytes=8388608-

BYTES is the body bytes actually written to the connection (fewer than asked when the client
went away; 0 for HEAD) and RANGE the request's Range header, whitespace removed, or `-`. The line
is written just before the body's last byte goes out, so a client holding a whole answer always
finds its line, and a body cut short is logged with what was written.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import fnmatch
import hashlib
import hmac
import json
import os
import re
import secrets
import socket
import socketserver
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, NoReturn, TextIO
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit

DEFAULT_REVISION = "main"
GATE_FILE = ".gated"
LFS_POINTER = "version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n"
SIGNED_URL_SECONDS = 3600
CHUNK = 1 << 16
# A throttled body goes out in chunks of about a tenth of a second each, so a dead client is
# noticed within that time.
THROTTLED_CHUNKS_PER_SECOND = 10
RANGE = re.compile(r"\s*bytes\s*=\s*(\d*)\s*-\s*(\d*)\s*", re.IGNORECASE)
# The client fetches this registry of AI-agent harnesses on start; an empty one detects none.
AGENT_HARNESSES: dict[str, Any] = {"standardEnvVars": [], "harnesses": {}}


# --- Repos on disk -------------------------------------------------------------------------


@dataclass(frozen=True)
class RepoFile:
    """One file of a repo, with the ids git and git-lfs give it."""

    path: str  # repo-relative, '/'-separated
    disk: Path
    size: int
    oid: str  # git blob sha1 of what git stores: the content, or the LFS pointer
    sha256: str | None = None  # set for LFS files only
    pointer_size: int | None = None

    def tree_entry(self) -> dict[str, Any]:
        """The file as the tree API lists it."""
        entry: dict[str, Any] = {
            "type": "file",
            "oid": self.oid,
            "size": self.size,
            "path": self.path,
        }
        if self.sha256 is not None:
            entry["lfs"] = {"oid": self.sha256, "size": self.size, "pointerSize": self.pointer_size}
        return entry

    def sibling(self, blobs: bool) -> dict[str, Any]:
        """The file as repo info lists it; sizes and ids only when `blobs` was asked for."""
        sibling: dict[str, Any] = {"rfilename": self.path}
        if blobs:
            sibling.update(size=self.size, blobId=self.oid)
            if self.sha256 is not None:
                sibling["lfs"] = {
                    "sha256": self.sha256,
                    "size": self.size,
                    "pointerSize": self.pointer_size,
                }
        return sibling


@dataclass(frozen=True)
class Snapshot:
    """A repo as it is on disk now: its only commit."""

    repo_id: str
    files: dict[str, RepoFile]  # by path, sorted
    gate: str | None  # the token that may read the files of a gated repo
    modified: float
    sha: str = field(init=False)

    def __post_init__(self) -> None:
        listing = "".join(f"{f.oid} {f.path}\n" for f in self.files.values())
        object.__setattr__(self, "sha", hashlib.sha1(listing.encode()).hexdigest())

    def folders(self) -> list[str]:
        """Every folder that holds a file, parents included, sorted."""
        return sorted(
            {path.rsplit("/", n)[0] for path in self.files for n in range(1, path.count("/") + 1)}
        )

    def tree(self, folder: str, recursive: bool) -> list[dict[str, Any]] | None:
        """Entries under `folder` ('' for the root), or None when no such folder exists."""
        if folder and folder not in self.folders():
            return None
        prefix = f"{folder}/" if folder else ""

        def listed(path: str) -> bool:
            return path.startswith(prefix) and (recursive or "/" not in path[len(prefix) :])

        entries = [self._folder_entry(path) for path in self.folders() if listed(path)]
        entries += [f.tree_entry() for f in self.files.values() if listed(f.path)]
        return sorted(entries, key=lambda entry: entry["path"])

    def _folder_entry(self, folder: str) -> dict[str, Any]:
        inside = "".join(
            f"{f.oid} {f.path}\n" for f in self.files.values() if f.path.startswith(f"{folder}/")
        )
        return {
            "type": "directory",
            "oid": hashlib.sha1(inside.encode()).hexdigest(),
            "size": 0,
            "path": folder,
        }


class Store:
    """Reads repos from the root folder on every request, so edits show at once."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._digests: dict[tuple[str, int, int], tuple[str, str]] = {}
        self._lock = threading.Lock()

    def snapshot(self, repo_id: str) -> Snapshot | None:
        """The repo `org/name`, or None when there is no such repo."""
        parts = repo_id.split("/")
        if len(parts) != 2 or any(not part or part.startswith(".") for part in parts):
            return None
        folder = self.root / parts[0] / parts[1]
        if not folder.is_dir():
            return None
        gate_file = folder / GATE_FILE
        lfs_patterns = _lfs_patterns(folder / ".gitattributes")
        files: dict[str, RepoFile] = {}
        for disk in sorted(self._walk(folder)):
            path = disk.relative_to(folder).as_posix()
            if path != GATE_FILE:
                files[path] = self._repo_file(disk, path, _is_lfs(path, lfs_patterns))
        modified = max(
            (f.disk.stat().st_mtime for f in files.values()), default=folder.stat().st_mtime
        )
        gate = gate_file.read_text().strip() if gate_file.is_file() else None
        return Snapshot(repo_id, files, gate, modified)

    def tokens(self) -> set[str]:
        """Every token the Hub knows: those that open a gated repo."""
        return {gate.read_text().strip() for gate in self.root.glob(f"*/*/{GATE_FILE}")}

    @staticmethod
    def _walk(folder: Path) -> list[Path]:
        found = []
        for parent, dirs, names in os.walk(folder):
            dirs[:] = [d for d in dirs if d != ".git"]
            found += [Path(parent) / name for name in names]
        return found

    def _repo_file(self, disk: Path, path: str, lfs: bool) -> RepoFile:
        stat = disk.stat()
        oid, sha256 = self._digest(disk, stat.st_size, stat.st_mtime_ns)
        if not lfs:
            return RepoFile(path, disk, stat.st_size, oid)
        pointer = LFS_POINTER.format(sha256=sha256, size=stat.st_size).encode()
        return RepoFile(path, disk, stat.st_size, _git_blob_oid(pointer), sha256, len(pointer))

    def _digest(self, disk: Path, size: int, mtime_ns: int) -> tuple[str, str]:
        """(git blob sha1, sha256) of a file, remembered while its size and mtime stay."""
        key = (str(disk), size, mtime_ns)
        with self._lock:
            if key in self._digests:
                return self._digests[key]
        blob, sha256 = hashlib.sha1(b"blob %d\0" % size), hashlib.sha256()
        with disk.open("rb") as stream:
            while chunk := stream.read(CHUNK):
                blob.update(chunk)
                sha256.update(chunk)
        with self._lock:
            self._digests[key] = (blob.hexdigest(), sha256.hexdigest())
        return self._digests[key]


def _git_blob_oid(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _lfs_patterns(gitattributes: Path) -> list[str]:
    """Patterns that a .gitattributes file puts under git-lfs."""
    if not gitattributes.is_file():
        return []
    lines = (line.split() for line in gitattributes.read_text().splitlines())
    return [
        words[0]
        for words in lines
        if words and not words[0].startswith("#") and "filter=lfs" in words[1:]
    ]


def _is_lfs(path: str, patterns: list[str]) -> bool:
    """Git's rule: a pattern without a slash matches the file name, one with a slash the path."""
    name = path.rsplit("/", 1)[-1]
    return any(
        fnmatch.fnmatchcase(path, pattern.lstrip("/"))
        if "/" in pattern
        else fnmatch.fnmatchcase(name, pattern)
        for pattern in patterns
    )


# --- Requests and responses ----------------------------------------------------------------


@dataclass(frozen=True)
class Request:
    """What the handlers need of an HTTP request."""

    method: str
    target: str  # path and query, as sent
    headers: Message
    server_host: str  # bound address, for requests without a Host header

    @property
    def raw_path(self) -> str:
        return urlsplit(self.target).path

    @property
    def segments(self) -> list[str]:
        """Path segments, each percent-decoded after splitting (so %2F stays inside one)."""
        return [unquote(segment) for segment in self.raw_path.split("/")[1:]]

    @property
    def query(self) -> list[tuple[str, str]]:
        return parse_qsl(urlsplit(self.target).query, keep_blank_values=True)

    def param(self, name: str) -> str | None:
        return dict(self.query).get(name)

    def flag(self, name: str) -> bool:
        return (self.param(name) or "").lower() in ("1", "true")

    @property
    def token(self) -> str | None:
        """The bearer token, '' when Authorization holds anything else, None without it."""
        authorization = self.headers.get("Authorization")
        if authorization is None:
            return None
        scheme, _, token = authorization.partition(" ")
        return token.strip() if scheme.lower() == "bearer" else ""

    @property
    def host(self) -> str:
        return self.headers.get("Host") or self.server_host

    @property
    def hostname(self) -> str:
        """The Host header without its port ('[::1]' stays bracketed)."""
        host = self.host
        return host[: host.index("]") + 1] if host.startswith("[") else host.split(":")[0]

    @property
    def base_url(self) -> str:
        return f"http://{self.host}"


@dataclass
class Response:
    """A response to send: a body in memory, or a span [start, end) of a repo file."""

    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    file: RepoFile | None = None
    span: tuple[int, int] = (0, 0)


class Refusal(Exception):
    """Raised by a handler to answer with an error response."""

    def __init__(self, response: Response) -> None:
        super().__init__(response.status)
        self.response = response


def json_response(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    body = json.dumps(data).encode()
    return Response(
        status, {"Content-Type": "application/json; charset=utf-8", **(headers or {})}, body
    )


def refuse(status: int, message: str, code: str | None = None, **headers: str) -> NoReturn:
    """Refuse as the Hub does: the message in X-Error-Message and a JSON body, the code in X-Error-Code."""
    if code is not None:
        headers["X-Error-Code"] = code
    raise Refusal(
        json_response({"error": message}, status, {"X-Error-Message": message, **headers})
    )


def file_response(file: RepoFile, request: Request, headers: dict[str, str]) -> Response:
    """A repo file, or the byte range the Range header asks for (a single range only)."""
    headers = {"Accept-Ranges": "bytes", **headers}
    span = _byte_span(request.headers.get("Range"), file.size)
    if span is None:
        return Response(200, headers, file=file, span=(0, file.size))
    if span[0] >= file.size:
        raise Refusal(Response(416, {**headers, "Content-Range": f"bytes */{file.size}"}))
    headers["Content-Range"] = f"bytes {span[0]}-{span[1] - 1}/{file.size}"
    return Response(206, headers, file=file, span=span)


def _byte_span(header: str | None, size: int) -> tuple[int, int] | None:
    """[start, end) asked by a `bytes=` Range; None (the whole file) for none or one we ignore."""
    match = RANGE.fullmatch(header or "")
    if match is None or match.groups() == ("", ""):
        return None
    first, last = match.groups()
    if first == "":  # a suffix: the last N bytes
        return (max(size - int(last), 0), size) if int(last) > 0 else (size, size)
    if last and int(last) < int(first):
        return None
    return int(first), min(int(last) + 1, size) if last else size


def disposition(kind: str, path: str) -> str:
    name = path.rsplit("/", 1)[-1]
    fallback = name.encode("ascii", "replace").decode().replace('"', "'")
    return f"{kind}; filename*=UTF-8''{quote(name)}; filename=\"{fallback}\";"


# --- The Hub ---------------------------------------------------------------------------------


class Hub:
    """Answers Hub and CDN requests from a Store."""

    def __init__(self, store: Store, page_size: int) -> None:
        self.store = store
        self.page_size = page_size
        self.cdn_port = 0
        self._secret = secrets.token_bytes(32)

    def hub_request(self, request: Request) -> Response:
        """Answers a request to the Hub."""
        token = request.token
        if token is not None and token not in self.store.tokens():
            refuse(401, "Invalid credentials in Authorization header")
        match request.segments:
            case ["api", "whoami-v2"]:
                return self.whoami(token)
            case ["api", "agent-harnesses"]:
                return json_response(AGENT_HARNESSES)
            case ["api", "models", org, name]:
                return self.model_info(request, f"{org}/{name}", DEFAULT_REVISION)
            case ["api", "models", org, name, "revision", revision]:
                return self.model_info(request, f"{org}/{name}", revision)
            case ["api", "models", org, name, "tree", revision, *folder]:
                return self.tree(request, f"{org}/{name}", revision, "/".join(folder))
            case [org, name, "resolve", revision, *path] if path:
                return self.resolve(request, f"{org}/{name}", revision, "/".join(path))
        refuse(404, "Sorry, we can't find the page you are looking for.")

    def whoami(self, token: str | None) -> Response:
        """GET /api/whoami-v2: every known token is the user `spark-twin`."""
        if token is None:
            refuse(401, "Invalid username or password.")
        digest = hashlib.sha256(token.encode()).hexdigest()
        return json_response(
            {
                "type": "user",
                "id": digest[:24],
                "name": "spark-twin",
                "fullname": "Spark twin",
                "isPro": False,
                "canPay": False,
                "orgs": [],
                "auth": {
                    "type": "access_token",
                    "accessToken": {"displayName": f"twin-{digest[:8]}", "role": "read"},
                },
            }
        )

    def model_info(self, request: Request, repo_id: str, revision: str) -> Response:
        """GET /api/models/{repo}[/revision/{rev}]: public, gated repos too."""
        snapshot = self._repo(request, repo_id, revision)
        stamp = datetime.fromtimestamp(snapshot.modified, UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")
        blobs = request.flag("blobs")
        return json_response(
            {
                "id": repo_id,
                "modelId": repo_id,
                "author": repo_id.split("/")[0],
                "sha": snapshot.sha,
                "lastModified": stamp,
                "createdAt": stamp,
                "private": False,
                "disabled": False,
                "gated": "manual" if snapshot.gate is not None else False,
                "downloads": 0,
                "likes": 0,
                "tags": [],
                "spaces": [],
                "siblings": [f.sibling(blobs) for f in snapshot.files.values()],
                "usedStorage": sum(f.size for f in snapshot.files.values()),
            }
        )

    def tree(self, request: Request, repo_id: str, revision: str, folder: str) -> Response:
        """GET /api/models/{repo}/tree/{rev}[/{folder}]: public, paginated by an opaque cursor."""
        snapshot = self._repo(request, repo_id, revision)
        entries = snapshot.tree(folder, request.flag("recursive"))
        if entries is None:
            refuse(404, f"Path {folder} not found in {repo_id}", "EntryNotFound")
        start = _decode_cursor(request.param("cursor"))
        end = start + self.page_size
        headers = {}
        if end < len(entries):
            query = [(key, value) for key, value in request.query if key != "cursor"] + [
                ("cursor", _cursor(end))
            ]
            headers["Link"] = (
                f'<{request.base_url}{request.raw_path}?{urlencode(query)}>; rel="next"'
            )
        return json_response(entries[start:end], headers=headers)

    def resolve(self, request: Request, repo_id: str, revision: str, path: str) -> Response:
        """GET/HEAD /{repo}/resolve/{rev}/{path}: the file, or for an LFS file a redirect to the CDN."""
        snapshot = self._repo(request, repo_id, revision, gated=True)
        file = snapshot.files.get(path)
        if file is None:
            refuse(404, "Entry not found", "EntryNotFound", **{"X-Repo-Commit": snapshot.sha})
        headers = {"X-Repo-Commit": snapshot.sha, "ETag": f'"{file.oid}"'}
        if file.sha256 is None:
            headers["Content-Type"] = "text/plain; charset=utf-8"
            headers["Content-Disposition"] = disposition("inline", path)
            return file_response(file, request, headers)
        location = self._cdn_url(request, repo_id, file.sha256)
        headers.update(
            {
                "Location": location,
                "X-Linked-Etag": f'"{file.sha256}"',
                "X-Linked-Size": str(file.size),
                "Content-Type": "text/plain; charset=utf-8",
                "Accept-Ranges": "bytes",
            }
        )
        return Response(302, headers, f"Found. Redirecting to {location}".encode())

    def cdn_request(self, request: Request) -> Response:
        """Answers a request to the CDN: an LFS file at a signed URL that has not expired."""
        match request.segments:
            case ["repos", org, name, sha256] if self._signed(request):
                snapshot = self.store.snapshot(f"{org}/{name}")
                files = (
                    [f for f in snapshot.files.values() if f.sha256 == sha256] if snapshot else []
                )
                if not files:
                    raise Refusal(_s3_error(404, "NoSuchKey", "The specified key does not exist."))
                headers = {
                    "Content-Type": "application/octet-stream",
                    "ETag": f'"{sha256}"',
                    "Content-Disposition": disposition("attachment", files[0].path),
                }
                return file_response(files[0], request, headers)
        raise Refusal(_s3_error(403, "AccessDenied", "Access denied"))

    def _repo(self, request: Request, repo_id: str, revision: str, gated: bool = False) -> Snapshot:
        """The repo at `revision`, or the Hub's refusal: unknown repo, closed gate, unknown revision."""
        token = request.token
        snapshot = self.store.snapshot(repo_id)
        if snapshot is None and token is None:
            refuse(401, "Invalid username or password.", "RepoNotFound")
        if snapshot is None:
            refuse(404, "Repository not found", "RepoNotFound")
        if gated and snapshot.gate is not None and token != snapshot.gate:
            if token is None:
                refuse(
                    401,
                    f"Access to model {repo_id} is restricted. You must have access to it and be "
                    "authenticated to access it. Please log in.",
                    "GatedRepo",
                )
            refuse(
                403,
                f"Access to model {repo_id} is restricted and you are not in the authorized list. "
                f"Visit {request.base_url}/{repo_id} to ask for access.",
                "GatedRepo",
            )
        if revision not in (DEFAULT_REVISION, snapshot.sha):
            refuse(404, f"Invalid rev id: {revision}", "RevisionNotFound")
        return snapshot

    def _cdn_url(self, request: Request, repo_id: str, sha256: str) -> str:
        path = f"/repos/{repo_id}/{sha256}"
        expires = str(int(time.time()) + SIGNED_URL_SECONDS)
        query = urlencode({"Expires": expires, "Signature": self._signature(path, expires)})
        return f"http://{request.hostname}:{self.cdn_port}{path}?{query}"

    def _signature(self, path: str, expires: str) -> str:
        return hmac.new(self._secret, f"{path}\n{expires}".encode(), hashlib.sha256).hexdigest()

    def _signed(self, request: Request) -> bool:
        expires, signature = request.param("Expires") or "", request.param("Signature") or ""
        valid = hmac.compare_digest(self._signature(request.raw_path, expires), signature)
        return valid and expires.isdigit() and int(expires) >= time.time()


def _cursor(offset: int) -> str:
    return base64.urlsafe_b64encode(json.dumps({"offset": offset}).encode()).decode()


def _decode_cursor(cursor: str | None) -> int:
    if cursor is None:
        return 0
    try:
        offset = int(json.loads(base64.urlsafe_b64decode(cursor))["offset"])
    except (ValueError, KeyError, TypeError, binascii.Error):
        offset = -1
    if offset < 0:
        refuse(400, "Invalid cursor")
    return offset


def _s3_error(status: int, code: str, message: str) -> Response:
    body = f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code><Message>{message}</Message></Error>'
    return Response(status, {"Content-Type": "application/xml"}, body.encode())


# --- HTTP plumbing ---------------------------------------------------------------------------


class Throttle:
    """The Hub's bandwidth for file bodies: a rate in bytes/s read from a file, shared by every
    body the Hub and the CDN send at once, as a link would be."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._free = 0.0  # when the link has sent what it was given (time.monotonic)

    def rate(self) -> int | None:
        """The limit now: the file's positive integer, or None (no limit) for anything else."""
        if self.path is None:
            return None
        try:
            rate = int(self.path.read_text().strip())
        except (OSError, ValueError):
            return None
        return rate if rate > 0 else None

    def wait(self, size: int, rate: int) -> None:
        """Returns when `size` more bytes may go out at `rate`, after those already queued."""
        with self._lock:
            now = time.monotonic()
            start = max(now, self._free)
            self._free = start + size / rate
        time.sleep(start - now)


class RequestLog:
    """One line per request, `ROLE METHOD TARGET STATUS BODY_BYTES RANGE`, flushed at once."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._lock = threading.Lock()

    def write(
        self, role: str, method: str, target: str, status: int, sent: int, range_: str | None
    ) -> None:
        asked = "".join((range_ or "").split()) or "-"
        with self._lock:
            self._stream.write(f"{role} {method} {target} {status} {sent} {asked}\n")
            self._stream.flush()


class StandInServer(ThreadingHTTPServer):
    """One of the two servers, `hub` or `cdn`, sharing a Hub, a log and a throttle."""

    daemon_threads = True

    def __init__(
        self, address: tuple[str, int], role: str, hub: Hub, log: RequestLog, throttle: Throttle
    ) -> None:
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.role, self.hub, self.log, self.throttle = role, hub, log, throttle
        super().__init__(address, Handler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind looks the bound address up in DNS; a twin may have no DNS.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = (
            str(self.server_address[0]),
            int(self.server_address[1]),
        )


class Handler(BaseHTTPRequestHandler):
    """Turns HTTP requests into Hub calls and their responses back into HTTP."""

    protocol_version = "HTTP/1.1"
    server: StandInServer

    def do_GET(self) -> None:
        self._serve()

    def do_HEAD(self) -> None:
        self._serve()

    def _refuse_method(self) -> None:
        self.close_connection = True
        self._send(
            Response(405, {"Allow": "GET, HEAD", "Connection": "close"}, b"Method Not Allowed")
        )

    do_POST = do_PUT = do_DELETE = do_PATCH = _refuse_method

    def _serve(self) -> None:
        host = self.server.server_name
        request = Request(
            self.command, self.path, self.headers, f"[{host}]" if ":" in host else host
        )
        hub = self.server.hub
        app = hub.hub_request if self.server.role == "hub" else hub.cdn_request
        try:
            response = app(request)
        except Refusal as refusal:
            response = refusal.response
        self._send(response)

    def _send(self, response: Response) -> None:
        start, end = response.span
        length = end - start if response.file is not None else len(response.body)
        self.send_response(response.status)
        for name, value in {"X-Request-Id": str(uuid.uuid4()), **response.headers}.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(length))
        body = 0 if self.command == "HEAD" else length
        if not body:  # the headers are the whole answer: logged before they go out
            self._log(response, 0)
            self.end_headers()
            return
        self.end_headers()
        sent, last = 0, b""
        try:
            for chunk in self._body_chunks(response):
                if sent + len(chunk) == body:  # the last byte waits for the log line
                    chunk, last = chunk[:-1], chunk[-1:]
                self.wfile.write(chunk)
                sent += len(chunk)
        except OSError:  # the client went away: a broken pipe, a reset
            last = b""
        if not last:
            self.close_connection = True
            self._log(response, sent)
            return
        # Logged before the last byte goes out: once a client has its whole answer, the line is
        # there.
        self._log(response, body)
        try:
            self.wfile.write(last)
        except OSError:
            self.close_connection = True

    def _log(self, response: Response, sent: int) -> None:
        self.server.log.write(
            self.server.role,
            self.command,
            self.path,
            response.status,
            sent,
            self.headers.get("Range"),
        )

    def _body_chunks(self, response: Response) -> Iterator[bytes]:
        """The body in the chunks to write, a file's paced by the throttle at the rate read now."""
        if response.file is None:
            yield response.body
            return
        throttle = self.server.throttle
        rate = throttle.rate()
        size = CHUNK if rate is None else max(1, min(CHUNK, rate // THROTTLED_CHUNKS_PER_SECOND))
        start, end = response.span
        sent = 0
        with response.file.disk.open("rb") as stream:
            stream.seek(start)
            while sent < end - start and (chunk := stream.read(min(size, end - start - sent))):
                if rate is not None:
                    throttle.wait(len(chunk), rate)
                yield chunk
                sent += len(chunk)

    def log_message(self, format: str, *args: Any) -> None:
        """Silenced: RequestLog writes the one line per request."""


# --- Command line ----------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="A stand-in Hugging Face Hub for the Spark twins.")
    parser.add_argument(
        "--root", type=Path, required=True, help="folder holding <org>/<name>/ repos"
    )
    parser.add_argument("--port", type=int, default=5555, help="Hub port (0: any free port)")
    parser.add_argument(
        "--cdn-port", type=int, help="CDN port for LFS files (default: port+1, or any free port)"
    )
    parser.add_argument("--bind", default="127.0.0.1", help="address both servers listen on")
    parser.add_argument("--log", type=Path, help="request log file (default: stderr)")
    parser.add_argument(
        "--page-size", type=int, default=1000, help="tree entries per page (the Hub's: 1000)"
    )
    parser.add_argument(
        "--rate-file",
        type=Path,
        help="file holding the rate limit for file bodies in bytes/s, read for every request "
        "(missing or empty: no limit)",
    )
    args = parser.parse_args(argv)
    if not args.root.is_dir():
        parser.error(f"--root {args.root} is not a folder")
    cdn_port = args.cdn_port if args.cdn_port is not None else (args.port + 1 if args.port else 0)

    log = RequestLog(args.log.open("a", encoding="utf-8") if args.log else sys.stderr)
    hub = Hub(Store(args.root.resolve()), max(args.page_size, 1))
    throttle = Throttle(args.rate_file)
    hub_server = StandInServer((args.bind, args.port), "hub", hub, log, throttle)
    cdn_server = StandInServer((args.bind, cdn_port), "cdn", hub, log, throttle)
    hub.cdn_port = cdn_server.server_port
    threading.Thread(target=cdn_server.serve_forever, daemon=True).start()
    host = f"[{args.bind}]" if ":" in args.bind else args.bind
    print(
        f"fake_hub ready: hub=http://{host}:{hub_server.server_port} "
        f"cdn=http://{host}:{cdn_server.server_port} root={args.root}",
        flush=True,
    )
    try:
        hub_server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
