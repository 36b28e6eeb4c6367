"""
Names and paths inside a model folder, as root meets them: a name is a normalised relative
path below the folder, and every component is opened without following a symlink
(O_NOFOLLOW at each step, from the folder's descriptor).

May import: the standard library and fetch_errors (shipped beside spark-fetch). Must not
know: where a name came from (the Hub, the head, a tar), the copy channel, docker or the
deploy; the jobs that take a name from outside pass it through here first.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import posixpath
import stat
from pathlib import Path

from fetch_errors import JobError

# Root works inside folders the operator owns, with names it did not choose: the Hub's file
# list, the head's manifest, a tar from the head. Issue 22 ("the copy client writes where the
# head says", "root helpers follow ../absolute names from Hub JSON", "jobs chown through
# symlinks"): a name is a normalised relative path below the folder, and every component is
# opened without following a symlink (O_NOFOLLOW at each step, from the folder's descriptor).

MARKER = ".spark-deploy-complete"  # spark-model-check's seal: the folder is complete
NAME_LIMIT = 1024  # bytes of a whole name (a Hub path is far shorter)
PART_LIMIT = 255  # bytes of one component (NAME_MAX)
PARTIAL = ".cache/spark-copy"  # the copy's partial files, beside hf's own .cache/huggingface
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: a FIFO planted under a file's name opens at once (and is then refused).
FILE_FLAGS = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
COPY_CHUNK = 8 * 1024 * 1024  # bytes read (and sent) at once


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
    (``copied_name``) are left out, and so is an entry gone between the listing and its
    stat: hf renames each partial file as it completes while the job samples its progress
    (a job failed on that FileNotFoundError in the suite)."""
    found: dict[str, os.stat_result] = {}

    def walk(fd: int, prefix: str) -> None:
        with os.scandir(fd) as entries:
            for entry in entries:
                name = prefix + entry.name
                if entry.is_dir(follow_symlinks=False) and name != ".cache":
                    try:
                        inner = os.open(entry.name, DIR_FLAGS, dir_fd=fd)
                    except FileNotFoundError:
                        continue
                    try:
                        walk(inner, name + "/")
                    finally:
                        os.close(inner)
                elif entry.is_file(follow_symlinks=False):
                    with contextlib.suppress(JobError, FileNotFoundError):
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


def sealed(root: int, want: str) -> bool:
    """Whether the folder's marker (a regular file) names ``want``."""
    try:
        fd = open_regular(root, MARKER)
    except JobError:
        return False
    with os.fdopen(fd, "rb") as marker:
        return marker.read(4096).decode(errors="replace").strip() == want
