"""
The engine image copied from the head over the QSFP link: the head's `docker save` tar
passed to `docker load` member by member, only when it is the image whose ID the deploy read
from the head over SSH (plain names, blobs that are what they are named, a manifest and an
index naming that image or none), then read as a pulled image is read.

May import: the standard library and the sibling modules fetch_spec, fetch_errors,
fetch_progress, fetch_names, fetch_docker and fetch_channel (shipped beside spark-fetch).
Must not know: model folders, the server's side or the deploy.
"""

from __future__ import annotations

import hashlib
import io
import json
import posixpath
import re
import subprocess
import tarfile
from collections.abc import Callable
from typing import Any

from fetch_channel import JSON_LIMIT, head_get, wait_for_head
from fetch_docker import docker, docker_argv, docker_root, image_id, read_image
from fetch_errors import JobError
from fetch_names import safe_name
from fetch_progress import Status, check_room, human
from fetch_spec import CopyImageSpec, Head

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
        docker_argv("load"), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
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
            check_room(f"{image} ({human(total)})", docker_root(), total)
        load_from_head(spec.head, image, expected, status)
    read_image(image, spec, status)
