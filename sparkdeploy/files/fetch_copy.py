"""
A model folder copied from the head over the QSFP link (the head fetched it from the Hub):
only the plain names, sizes and sha256 the deploy read from the head over SSH, each file
resumed where it stopped into .cache/spark-copy, checked, put in place without following a
symlink, then the folder sealed as the head's was.

May import: the standard library and the sibling modules fetch_spec, fetch_errors,
fetch_progress, fetch_names, fetch_hub (the operator's seal) and fetch_channel (shipped beside
spark-fetch). Must not know: the server's side, docker or the deploy.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import pwd
import re
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fetch_channel import head_get, wait_for_head
from fetch_errors import JobError, TransientError
from fetch_hub import seal
from fetch_names import (
    COPY_CHUNK,
    FILE_FLAGS,
    PARTIAL,
    copied_name,
    file_sha256,
    open_folder,
    open_parent,
    size_inside,
)
from fetch_progress import Status, check_room, human
from fetch_spec import CopyModelSpec


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
