"""
Whole files the deploy owns: each declared once in the managed-file registry
(config/paths.py: path, mode, owner, the fact that reads it, a check before it goes live),
written atomically (staged beside the target, checked, then renamed) and compared against
the coarse host-state fact, so an unchanged file costs no round trip.
"""

from __future__ import annotations

import hashlib
import posixpath
from io import StringIO

from pyinfra import host
from pyinfra.api import FileUploadCommand, OperationError, operation

from sparkdeploy.config.paths import HOME, OPERATOR, ManagedFile, managed_files
from sparkdeploy.escape import shell
from sparkdeploy.facts.host_state import FileState, HostState, host_state

UPLOAD_DIR = ".spark-deploy-upload"  # private (0700) staging under the SSH user's home


def digest(content: str) -> str:
    return hashlib.sha256(content.encode()).hexdigest()


def registered(path: str) -> ManagedFile:
    """The registry entry of ``path`` on the current host; a path that is not registered
    is a bug in the deploy, refused before anything is written."""
    files = managed_files(host.data.spark, host.data.get("engine_plan"))
    if path not in files:
        raise OperationError(
            f"{path} is not in the managed-file registry (sparkdeploy/config/paths.py); "
            "declare it there so the host-state fact reads it"
        )
    return files[path]


def wanted_state(file: ManagedFile, content: str, state: HostState) -> FileState:
    """What the file must be: its digest, and its mode and owner as ``stat`` prints them."""
    user = host.data.spark.user if file.owner == OPERATOR else file.owner
    group = state.user_group if file.group == OPERATOR else file.group
    return FileState(digest(content), file.mode, user, group)


def differs(path: str, content: str) -> bool:
    """Whether ``managed_file`` with this content would change the file."""
    file, state = registered(path), host_state()
    return state.files.get(path) != wanted_state(file, content, state)


@operation()
def managed_file(path: str, content: str):
    """
    Make the registered file at ``path`` hold exactly ``content``, with the mode and owner
    the registry declares for it.

    + path: the file's path as the registry names it (``~/`` for the operator's home)
    + content: the whole text of the file

    The registry entry also says whether the staged copy is validated first (``visudo
    -cf``; on failure it is removed and nothing changes) and whether the file is a secret
    (uploaded through a private 0700 folder, its folders created 0700 for the owner).

    **Example:**

    .. code:: python

        managed_file(
            name="Install the memory guard",
            path="/usr/local/sbin/spark-memory-guard",
            content=file_text("spark-memory-guard"),
        )
    """
    file = registered(path)
    state = host_state()
    current = state.files.get(path)
    wanted = wanted_state(file, content, state)
    if current == wanted:
        host.noop(f"{path} is up to date")
        return
    real = posixpath.join(state.user_home, path[len(HOME) :]) if file.under_home else path
    target = shell(real)
    owner = shell(f"{wanted.user}:{wanted.group}")
    ownership = f"chown {owner} {{f}} && chmod {wanted.mode} {{f}}"
    if current is not None and current.sha256 == wanted.sha256:
        yield ownership.format(f=target)
        return
    staged = shell(f"{real}.spark-deploy-new")
    private_upload = None
    if file.secret:
        staging_dir = posixpath.join(state.ssh_home, UPLOAD_DIR)
        private_upload = posixpath.join(staging_dir, posixpath.basename(real))
        yield f'install -d -m 700 -o "${{SUDO_USER:-root}}" {shell(staging_dir)}'
        parent = posixpath.dirname(real)
        folders = " ".join(shell(folder) for folder in (posixpath.dirname(parent), parent))
        yield f"install -d -m 700 -o {shell(wanted.user)} -g {shell(wanted.group)} {folders}"
    else:
        yield f"mkdir -p {shell(posixpath.dirname(real))}"
    # With sudo, pyinfra uploads to a temporary file and copies it to the staged path.
    yield FileUploadCommand(
        StringIO(content), f"{real}.spark-deploy-new", remote_temp_filename=private_upload
    )
    check = ""
    if file.validate:
        check = f"{{ {file.validate.format(path=staged)} || {{ rm -f {staged}; exit 1; }}; }} && "
    yield f"{ownership.format(f=staged)} && {check}mv -f {staged} {target}"
