#!/usr/bin/env python3
"""A stand-in container registry for the Spark twins: "the internet" for every registry host.

Standard library only. It serves every image of ../images.json over the subset of the OCI
Distribution API that `docker pull` uses, as registry:2 and Docker Hub answer it:

    GET /v2/                                      200 {}
    GET|HEAD /v2/<name>/manifests/<tag|digest>    the image index (OCI) or manifest list (Docker)
                                                  with linux/arm64 and linux/amd64 entries, and
                                                  each platform's image manifest by digest
    GET|HEAD /v2/<name>/blobs/<digest>            config and layer blobs; `Range: bytes=N-` -> 206

<name> is the repository as docker normalises it, registry host included
(`docker.io/vllm/vllm-openai`, `docker.io/library/debian`, `nvcr.io/nvidia/vllm`): one server
plays every registry. Unknown manifests and blobs are 404 with the registry's error bodies
(MANIFEST_UNKNOWN, BLOB_UNKNOWN, NAME_UNKNOWN).

Content: every image of images.json. An entry's optional "layers" lists layer sizes in bytes
(default DEFAULT_LAYERS); each layer is a real gzip'd tar holding one file of pseudo-random
(incompressible) bytes seeded by the image and the layer's index, so that builds are
reproducible. The last layer also holds the Python distributions the image has
(`<engine>-<version>.dist-info/METADATA`, `ray-<version>.dist-info` with Ray) under
usr/local/lib/python3/dist-packages, which the docker stand-in unpacks so that
`importlib.metadata` in a container finds the image's release. The image config holds the
entry's Entrypoint, Cmd, Env (PATH with the image's programs, then the entry's "env") and the
rootfs diff_ids. Both platforms share the layers; their configs differ (architecture).

Blobs are made once into the cache folder (--cache) and kept while images.json is unchanged
(`--build` makes them and exits: the twin image does it at build time).

Blob bodies are sent at the rate (bytes/s) in the --rate-file, read again at each request so
that a test can slow a running twin's registry down (default DEFAULT_RATE). Each request is
logged, when it ends (a body cut off by the client too), as one line of the --log file:

    METHOD PATH STATUS BYTES_SENT RANGE        (RANGE: the Range header, or -)

An image listed in the --missing file (default /etc/spark-twin/missing-images, one `repo:tag`
a line, `docker.io/` optional) is not there: its tag is MANIFEST_UNKNOWN, as a deleted tag is.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import random
import re
import sys
import tarfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
IMAGES = HERE.parent / "images.json"
DEFAULT_LAYERS = [1_000_000, 3_000_000]
DEFAULT_RATE = 50_000_000  # bytes/s
CHUNK = 16384
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
PROGRAMS = "/opt/spark-twin/image"  # the images' own programs in a twin (standins/install.sh)
ENGINE = "/opt/spark-twin/standins/engine/engine.py"  # the stand-in engine in a twin
SITE = "usr/local/lib/python3/dist-packages"
CREATED = "2026-01-01T00:00:00Z"

OCI = {
    "index": "application/vnd.oci.image.index.v1+json",
    "manifest": "application/vnd.oci.image.manifest.v1+json",
    "config": "application/vnd.oci.image.config.v1+json",
    "layer": "application/vnd.oci.image.layer.v1.tar+gzip",
}
DOCKER = {
    "index": "application/vnd.docker.distribution.manifest.list.v2+json",
    "manifest": "application/vnd.docker.distribution.manifest.v2+json",
    "config": "application/vnd.docker.container.image.v1+json",
    "layer": "application/vnd.docker.image.rootfs.diff.tar.gzip",
}
PLATFORMS = ({"architecture": "arm64", "os": "linux", "variant": "v8"},
             {"architecture": "amd64", "os": "linux"})  # fmt: skip


def ray_version() -> str:
    """The Ray release the stand-in `ray` plays (engine/ray.py's VERSION)."""
    text = (HERE.parent / "engine" / "ray.py").read_text()
    match = re.search(r'^VERSION = "([^"]+)"', text, re.M)
    return match.group(1) if match else "2.51.1"


def full_repository(name: str) -> str:
    """A repository as docker normalises it: registry host first (docker.io for Docker Hub,
    library/ for its official images)."""
    first = name.split("/", 1)[0]
    if "/" in name and ("." in first or ":" in first or first == "localhost"):
        return name
    return f"docker.io/{name}" if "/" in name else f"docker.io/library/{name}"


def split_reference(reference: str) -> tuple[str, str]:
    """`repo:tag` -> (full repository, tag)."""
    last = reference.rsplit("/", 1)[-1]
    if ":" in last:
        repo, tag = reference.rsplit(":", 1)
    else:
        repo, tag = reference, "latest"
    return full_repository(repo), tag


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def canonical_json(document: Any) -> bytes:
    """Manifests as buildx/containerd push them: indented JSON."""
    return json.dumps(document, indent=2).encode()


def layer_tar(files: list[tuple[str, bytes]]) -> bytes:
    """A reproducible tar: fixed owners, modes and times."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        made: set[str] = set()
        for path, data in files:
            parts = path.split("/")[:-1]
            for depth in range(1, len(parts) + 1):
                folder = "/".join(parts[:depth])
                if folder not in made:
                    made.add(folder)
                    info = tarfile.TarInfo(folder + "/")
                    info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, 0
                    tar.addfile(info)
            info = tarfile.TarInfo(path)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def gzipped(data: bytes) -> bytes:
    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb", compresslevel=1, mtime=0) as out:
        out.write(data)
    return buffer.getvalue()


def distributions(entry: dict) -> list[tuple[str, bytes]]:
    """The image's Python distributions, as pip installs them (dist-info/METADATA)."""
    found = []
    if entry.get("engine") and entry.get("version"):
        found.append((entry["engine"], entry["version"]))
    if entry.get("ray"):
        found.append(("ray", ray_version()))
    files = [
        (
            f"{SITE}/{name}-{version}.dist-info/METADATA",
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        )
        for name, version in found
    ]
    if entry.get("engine") == "sglang":
        # `python3 -m sglang.launch_server`, as SGLang's images run it, is the stand-in engine
        # run as that command, whatever the container's command line around it.
        launch = (
            "import os, sys\n"
            f"engine = {ENGINE!r}\n"
            "os.execv(sys.executable, [sys.executable, engine, 'python3', '-m',"
            " 'sglang.launch_server', *sys.argv[1:]])\n"
        )
        files += [
            (f"{SITE}/sglang/__init__.py", b""),
            (f"{SITE}/sglang/launch_server.py", launch.encode()),
        ]
    return files


def image_path(entry: dict) -> str:
    programs = [p for p in (entry.get("engine"), "ray" if entry.get("ray") else None) if p]
    return ":".join([*(f"{PROGRAMS}/{p}" for p in programs), SYSTEM_PATH])


class Content:
    """What the registry holds: manifests by repository and tag, blobs by digest."""

    def __init__(self, cache: Path):
        self.cache = cache
        self.blobs = cache / "blobs"
        document = json.loads((cache / "content.json").read_text())
        self.tags: dict[str, dict[str, str]] = document["tags"]  # repo -> tag -> digest
        self.manifests: dict[str, str] = document["manifests"]  # digest -> media type
        self.owned: dict[str, list[str]] = document["owned"]  # repo -> digests

    def blob(self, digest: str) -> Path:
        return self.blobs / digest.replace(":", "-")


def build(images: Path, cache: Path) -> Content:
    """Make the blobs of every image into the cache, unless it holds them for this images.json."""
    source = images.read_bytes()
    # this file makes the content: a change to it makes the cache again
    generator = Path(__file__).read_bytes()
    key = hashlib.sha256(source + generator + ray_version().encode()).hexdigest()
    index = cache / "content.json"
    try:
        if json.loads(index.read_text())["key"] == key:
            return Content(cache)
    except (OSError, ValueError, KeyError):
        pass
    blobs = cache / "blobs"
    blobs.mkdir(parents=True, exist_ok=True)
    for old in blobs.iterdir():
        old.unlink()
    tags: dict[str, dict[str, str]] = {}
    manifests: dict[str, str] = {}
    owned: dict[str, list[str]] = {}

    def put(data: bytes) -> str:
        digest = digest_of(data)
        (blobs / digest.replace(":", "-")).write_bytes(data)
        return digest

    for reference, entry in json.loads(source)["images"].items():
        repo, tag = split_reference(reference)
        kinds = DOCKER if entry.get("manifest_format") == "docker" else OCI
        sizes = entry.get("layers") or DEFAULT_LAYERS
        layers: list[dict[str, Any]] = []
        diff_ids: list[str] = []
        for number, size in enumerate(sizes):
            seed = f"{reference}#{number}"
            data = random.Random(seed).randbytes(size)
            files = distributions(entry) if number == len(sizes) - 1 else []
            slug = re.sub(r"[^a-z0-9]+", "-", reference.lower())
            files.append((f"opt/spark-twin/layers/{slug}-{number}.bin", data))
            tar = layer_tar(files)
            diff_ids.append(digest_of(tar))
            compressed = gzipped(tar)
            layers.append(
                {"mediaType": kinds["layer"], "digest": put(compressed), "size": len(compressed)}
            )
        children = []
        for platform in PLATFORMS:
            config = {
                "architecture": platform["architecture"],
                "config": {
                    "Env": [f"PATH={image_path(entry)}", *entry.get("env", [])],
                    "Entrypoint": entry.get("entrypoint"),
                    "Cmd": entry.get("cmd"),
                    "WorkingDir": entry.get("workdir", ""),
                    "Labels": entry.get("labels") or None,
                },
                "created": entry.get("created", CREATED),
                "history": [
                    {"created": entry.get("created", CREATED), "created_by": f"layer {n}"}
                    for n in range(len(sizes))
                ],
                "os": "linux",
                "rootfs": {"type": "layers", "diff_ids": diff_ids},
            }
            if "variant" in platform:
                config["variant"] = platform["variant"]
            config_bytes = json.dumps(config, separators=(",", ":")).encode()
            config_digest = put(config_bytes)
            manifest = {
                "schemaVersion": 2,
                "mediaType": kinds["manifest"],
                "config": {
                    "mediaType": kinds["config"],
                    "digest": config_digest,
                    "size": len(config_bytes),
                },
                "layers": layers,
            }
            manifest_bytes = canonical_json(manifest)
            digest = put(manifest_bytes)
            manifests[digest] = kinds["manifest"]
            children.append(
                {
                    "mediaType": kinds["manifest"],
                    "digest": digest,
                    "size": len(manifest_bytes),
                    "platform": platform,
                }
            )
            owned.setdefault(repo, []).extend(
                [digest, config_digest, *(str(lay["digest"]) for lay in layers)]
            )
        top = {"schemaVersion": 2, "mediaType": kinds["index"], "manifests": children}
        top_bytes = canonical_json(top)
        top_digest = put(top_bytes)
        manifests[top_digest] = kinds["index"]
        tags.setdefault(repo, {})[tag] = top_digest
        owned[repo].append(top_digest)
    index.write_text(
        json.dumps({"key": key, "tags": tags, "manifests": manifests, "owned": owned}, indent=1)
    )
    return Content(cache)


# --- the server ---------------------------------------------------------------------------

ROUTE = re.compile(r"^/v2/(?P<name>.+)/(?P<kind>manifests|blobs)/(?P<ref>[^/]+)$")


class Registry(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address, content: Content, log: Path, rate_file: Path, missing: Path):
        super().__init__(address, Handler)
        self.content = content
        self.log_path = log
        self.rate_file = rate_file
        self.missing_file = missing
        self.log_lock = threading.Lock()

    def rate(self) -> float:
        try:
            value = float(self.rate_file.read_text().strip())
            return value if value > 0 else DEFAULT_RATE
        except (OSError, ValueError):
            return DEFAULT_RATE

    def missing(self) -> set[tuple[str, str]]:
        try:
            lines = self.missing_file.read_text().split()
        except OSError:
            return set()
        return {split_reference(line) for line in lines}

    def record(self, line: str) -> None:
        with self.log_lock, open(self.log_path, "a") as log:
            log.write(line + "\n")


class Handler(BaseHTTPRequestHandler):
    server: Registry
    server_version = "registry/2.0"
    sys_version = ""

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 -- BaseHTTPRequestHandler's
        pass

    def do_GET(self) -> None:
        self.serve(body=True)

    def do_HEAD(self) -> None:
        self.serve(body=False)

    def serve(self, body: bool) -> None:
        self.sent = 0
        self.status = 0
        self.logged = False
        try:
            self.route(body)
        except (BrokenPipeError, ConnectionResetError):
            pass
        finally:
            self.log_answer()

    def log_answer(self, sent: int | None = None) -> None:
        """Log the answer once: before its last byte goes out (``sent``: the bytes it will
        have sent then), so a client holding the whole answer always finds its line; after
        a failure, with what was sent."""
        if self.logged:
            return
        self.logged = True
        self.server.record(
            f"{self.command} {self.path} {self.status} "
            f"{self.sent if sent is None else sent} {self.headers.get('Range') or '-'}"
        )

    def finish_body(self, last: bytes) -> None:
        """Send the answer's last bytes after its log line."""
        self.log_answer(self.sent + len(last))
        self.wfile.write(last)
        self.sent += len(last)

    def reply(self, status: int, data: bytes, content_type: str, body: bool, **headers) -> None:
        self.status = status
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Docker-Distribution-Api-Version", "registry/2.0")
        for key, value in headers.items():
            self.send_header(key.replace("_", "-"), value)
        if not body or not data:  # the headers are the whole answer
            self.log_answer()
            self.end_headers()
            return
        self.end_headers()
        self.wfile.write(data[:-1])
        self.sent = len(data) - 1
        self.finish_body(data[-1:])

    def error(self, status: int, code: str, message: str, detail: Any, body: bool) -> None:
        document = {"errors": [{"code": code, "message": message, "detail": detail}]}
        self.reply(status, json.dumps(document).encode() + b"\n", "application/json", body)

    def route(self, body: bool) -> None:
        content = self.server.content
        if self.path in ("/v2/", "/v2"):
            self.reply(200, b"{}", "application/json", body)
            return
        match = ROUTE.match(self.path)
        if not match:
            self.error(404, "NOT_FOUND", "not found", None, body)  # registry:2's answer off-API
            return
        name, kind, ref = match["name"], match["kind"], match["ref"]
        repo = full_repository(name)
        if repo not in content.tags:
            self.error(404, "NAME_UNKNOWN", "repository name not known to registry",
                       {"name": name}, body)  # fmt: skip
            return
        if kind == "manifests":
            digest = ref if ref.startswith("sha256:") else content.tags[repo].get(ref)
            if (repo, ref) in self.server.missing():
                digest = None
            if (
                digest is None
                or digest not in content.owned[repo]
                or digest not in content.manifests
            ):
                self.error(404, "MANIFEST_UNKNOWN", "manifest unknown",
                           {"Tag" if ":" not in ref else "Digest": ref}, body)  # fmt: skip
                return
            data = content.blob(digest).read_bytes()
            self.reply(200, data, content.manifests[digest], body, Docker_Content_Digest=digest)
            return
        if ref not in content.owned[repo] or not content.blob(ref).is_file():
            self.error(404, "BLOB_UNKNOWN", "blob unknown to registry", ref, body)
            return
        self.send_blob(content.blob(ref), ref, body)

    def send_blob(self, path: Path, digest: str, body: bool) -> None:
        size = path.stat().st_size
        start = 0
        wanted = self.headers.get("Range")
        match = re.fullmatch(r"bytes=(\d+)-(\d*)", wanted or "")
        if wanted and match and int(match[1]) < size:
            start = int(match[1])
            end = min(int(match[2]), size - 1) if match[2] else size - 1
            self.status = 206
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        elif wanted:
            self.status = 416
            self.send_response(416)
            self.send_header("Content-Range", f"bytes */{size}")
            self.send_header("Content-Length", "0")
            self.log_answer()
            self.end_headers()
            return
        else:
            end = size - 1
            self.status = 200
            self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(end - start + 1))
        self.send_header("Docker-Content-Digest", digest)
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Docker-Distribution-Api-Version", "registry/2.0")
        if not body:
            self.log_answer()
            self.end_headers()
            return
        self.end_headers()
        rate = self.server.rate()
        began = time.monotonic()
        with open(path, "rb") as blob:
            blob.seek(start)
            left = end - start + 1
            while left > 0:
                chunk = blob.read(min(CHUNK, left))
                if not chunk:
                    break
                if len(chunk) == left:  # the last byte waits for the log line
                    self.wfile.write(chunk[:-1])
                    self.sent += len(chunk) - 1
                    self.finish_body(chunk[-1:])
                    break
                self.wfile.write(chunk)
                self.sent += len(chunk)
                left -= len(chunk)
                ahead = self.sent / rate - (time.monotonic() - began)
                if ahead > 0:
                    time.sleep(ahead)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--images", type=Path, default=IMAGES)
    parser.add_argument("--cache", type=Path, default=Path("/var/cache/spark-twin-registry"))
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=5000)
    parser.add_argument("--log", type=Path, default=Path("/var/log/spark-twin-registry.log"))
    parser.add_argument("--rate-file", type=Path, default=Path("/etc/spark-twin/registry-rate"))
    parser.add_argument("--missing", type=Path, default=Path("/etc/spark-twin/missing-images"))
    parser.add_argument("--build", action="store_true", help="make the blobs, then exit")
    options = parser.parse_args(argv)
    content = build(options.images, options.cache)
    if options.build:
        return 0
    server = Registry(
        (options.host, options.port), content, options.log, options.rate_file, options.missing
    )
    print(f"registry listening on {options.host}:{server.server_address[1]}", flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
