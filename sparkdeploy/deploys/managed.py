"""
Whole files the deploy owns: each declared once in the managed-file registry
(config/paths.py: path, mode, owner, the fact that reads it, a check before it goes live),
written atomically (staged beside the target, checked, then renamed) and compared against
the coarse host-state fact, so an unchanged file costs no round trip.
"""

from __future__ import annotations

import hashlib
import posixpath
from collections.abc import Generator, Iterator
from io import StringIO

from pyinfra import host
from pyinfra.api import FileUploadCommand, OperationError, operation

from sparkdeploy.config.paths import HOME, OPERATOR, ManagedFile
from sparkdeploy.engine_plan.files import managed_files
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
    (uploaded through the SSH user's private 0700 folder, never readable by others). A file
    under the operator's home is written by the operator, never by root (``AS_OPERATOR``).

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
    if file.under_home:
        yield from _home_file(file, content, state)
        return
    yield from _system_file(file, content, current, wanted, state)


def _system_file(
    file: ManagedFile, content: str, current: FileState | None, wanted: FileState, state: HostState
) -> Iterator[str | FileUploadCommand]:
    """A file in a root-owned folder: staged beside it, checked, renamed. Only the file's own
    folder is created (``mkdir -p``: a folder that exists keeps its mode and owner); a secret
    is staged into a file made 0600 before its content is copied in (cp keeps the mode of a
    file it writes into), so it is never readable by others, not even for a moment."""
    target = shell(file.path)
    ownership = f"chown {shell(f'{wanted.user}:{wanted.group}')} {{f}} && chmod {wanted.mode} {{f}}"
    if current is not None and current.sha256 == wanted.sha256:
        yield ownership.format(f=target)
        return
    staged = shell(f"{file.path}.spark-deploy-new")
    yield f"mkdir -p {shell(posixpath.dirname(file.path))}"
    private_upload = None
    if file.secret:
        private_upload = yield from _private_upload_dir(file, state)
        yield f"rm -f {staged} && install -m 600 -o root -g root /dev/null {staged}"
    # With sudo, pyinfra uploads to a temporary file and copies it to the staged path.
    yield FileUploadCommand(
        StringIO(content), f"{file.path}.spark-deploy-new", remote_temp_filename=private_upload
    )
    check = ""
    if file.validate:
        check = f"{{ {file.validate.format(path=staged)} || {{ rm -f {staged}; exit 1; }}; }} && "
    yield f"{ownership.format(f=staged)} && {check}mv -f {staged} {target}"


def _private_upload_dir(file: ManagedFile, state: HostState) -> Generator[str, None, str]:
    """The SSH user's private (0700) upload folder, made if missing; the path a secret's
    content is uploaded to inside it."""
    staging_dir = posixpath.join(state.ssh_home, UPLOAD_DIR)
    yield f'install -d -m 700 -o "${{SUDO_USER:-root}}" {shell(staging_dir)}'
    return posixpath.join(staging_dir, posixpath.basename(file.path))


# Run as the operator by root (util-linux runuser: no sudoers rule, no password): the folders
# are made with the operator's rights (umask 077: 0700 when new, an existing one untouched),
# the content comes on standard input from root's private copy, the file is renamed into
# place. Root never opens, creates, chowns or chmods a path inside the operator's home, so a
# symlink the operator planted there ($HOME/.cache -> /etc) leads root nowhere.
AS_OPERATOR = (
    'umask 077 && mkdir -p "$1" && cat > "$2.spark-deploy-new" && '
    'chmod {mode} "$2.spark-deploy-new" && mv -f "$2.spark-deploy-new" "$2"'
)


def _home_file(
    file: ManagedFile, content: str, state: HostState
) -> Generator[str | FileUploadCommand, None, None]:
    """A file under the operator's home, written by the operator (see ``AS_OPERATOR``) from
    a copy root keeps in the SSH user's private upload folder, removed whatever happens."""
    real = posixpath.join(state.user_home, file.path[len(HOME) :])
    staged = yield from _private_upload_dir(file, state)
    yield FileUploadCommand(StringIO(content), staged, remote_temp_filename=f"{staged}.upload")
    write = as_operator(real, file.mode, staged)
    yield f"{write}; written=$?; rm -f {shell(staged)}; [ $written -eq 0 ]"


def as_operator(real: str, mode: str, source: str) -> str:
    """The command that makes the operator write ``real`` (a path under their home) with
    ``mode`` from ``source``, a file root opens as standard input (see ``AS_OPERATOR``): the
    content never passes through argv, and root never touches the operator's home."""
    script = shell(AS_OPERATOR.format(mode=mode))
    return (
        f"runuser -u {shell(host.data.spark.user)} -- sh -c {script} spark-deploy "
        f"{shell(posixpath.dirname(real))} {shell(real)} < {shell(source)}"
    )
