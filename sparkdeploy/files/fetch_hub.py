"""
A model folder from the Hugging Face Hub: the revision's file list and sizes, `hf download`
as the operator into the folder (hf's partial files of an earlier attempt removed first),
the files a release omits fetched from its base repository, and the seal of
spark-model-check.

May import: the standard library and the sibling modules fetch_spec, fetch_errors,
fetch_progress and fetch_names (shipped beside spark-fetch). Must not know: docker, the copy
channel or the deploy; the copy from the head reuses its operator and seal.
"""

from __future__ import annotations

import json
import os
import posixpath
import pwd
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fetch_errors import JobError
from fetch_names import copied_name, open_folder, open_parent, regular_files, size_inside
from fetch_progress import Status, check_room, human, watch
from fetch_spec import ModelSpec

REPAIRABLE = ("config.json", "tokenizer.json")

# The Hub's file list of a revision, with sizes (huggingface_hub's documented API), printed
# as {path: size}; run with the hf command's own python as the operator (their token).
HUB_FILES = """
import json, sys
from huggingface_hub import HfApi
info = HfApi().model_info(sys.argv[1], revision=sys.argv[2], files_metadata=True)
print(json.dumps({s.rfilename: s.size or 0 for s in info.siblings or []}))
"""


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
            except FileNotFoundError:
                pass  # gone since it was listed: what this wanted
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
