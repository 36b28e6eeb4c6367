"""
What the twins fetched from "the internet", read from the stand-ins' request logs: the Hub's
(`ROLE METHOD TARGET STATUS BYTES RANGE`) and the registry's (`METHOD PATH STATUS BYTES
RANGE`), each line written when a request ends with the bytes it really sent.
"""

from __future__ import annotations

import json
from collections import Counter

from tests.twins.harness import Twin

HUB_LOG = "/var/log/spark-twin-hub.log"
REGISTRY_LOG = "/var/log/spark-twin-registry.log"
REGISTRY_BLOBS = "/var/cache/spark-twin-registry/blobs"


def log_lines(twin: Twin, path: str) -> list[list[str]]:
    return [line.split() for line in (twin.read(path) or "").splitlines()]


def hub_content(twin: Twin) -> Counter[str]:
    """Bytes of file content the Hub sent, by request target (file bodies: the Hub's
    resolve answers and the CDN's; not the API's metadata)."""
    sent: Counter[str] = Counter()
    for role, method, target, status, size, *_ in log_lines(twin, HUB_LOG):
        body = role == "cdn" or "/resolve/" in target
        if method == "GET" and body and status in ("200", "206"):
            sent[target.split("?")[0]] += int(size)
    return sent


def registry_blobs(twin: Twin) -> Counter[str]:
    """Bytes of each blob (layers, configs) the registry sent, by digest."""
    sent: Counter[str] = Counter()
    for method, path, status, size, *_ in log_lines(twin, REGISTRY_LOG):
        if method == "GET" and "/blobs/" in path and status in ("200", "206"):
            sent[path.rsplit("/", 1)[1]] += int(size)
    return sent


def blob_size(twin: Twin, digest: str) -> int:
    return int(twin.exec(f"stat -c %s {REGISTRY_BLOBS}/{digest.replace(':', '-')}").stdout)


def folder_bytes(twin: Twin, *folders: str) -> int:
    """The bytes of the files a deploy downloaded into these folders (not hf's or the
    deploy's own bookkeeping)."""
    sizes = twin.exec(
        f"find {' '.join(folders)} -type f ! -path '*/.cache/*' "
        "! -name .spark-deploy-complete -printf '%s\\n'"
    ).stdout.split()
    return sum(map(int, sizes))


def image_bytes(twin: Twin, image: str) -> int:
    """An image's compressed size for the twin's platform: its layers and its config, as
    its manifest lists them (what a pull fetches)."""
    found = json.loads(twin.exec(f"docker manifest inspect -v {image}").stdout)
    arch = twin.exec("dpkg --print-architecture").stdout.strip()
    for entry in found if isinstance(found, list) else [found]:
        if entry["Descriptor"].get("platform", {}).get("architecture", arch) == arch:
            manifest = entry.get("OCIManifest") or entry["SchemaV2Manifest"]
            return int(manifest["config"]["size"]) + sum(
                int(layer["size"]) for layer in manifest["layers"]
            )
    raise AssertionError(f"no {arch} manifest for {image}")


def internet_bytes(twin: Twin) -> int:
    """Everything the twin fetched from the stand-in Hub and registry."""
    return sum(hub_content(twin).values()) + sum(registry_blobs(twin).values())
