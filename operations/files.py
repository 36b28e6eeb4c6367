"""
Whole files the deploy owns: written atomically (staged beside the target, then renamed),
compared against the coarse host-state fact, so an unchanged file costs no round trip.
"""

from __future__ import annotations

import hashlib
import posixpath
import shlex
from io import StringIO

from pyinfra import host
from pyinfra.api import FileUploadCommand, operation

from operations.facts import FileState, host_state


def digest(content: str) -> str:
    return hashlib.sha256(content.encode()).hexdigest()


def differs(path: str, content: str, mode: str = "644", user: str = "root",
            group: str = "root") -> bool:
    """Whether ``managed_file`` with these arguments would change the file."""
    return host_state().files.get(path) != FileState(digest(content), mode, user, group)


@operation()
def managed_file(
    path: str,
    content: str,
    mode: str = "644",
    user: str = "root",
    group: str = "root",
    private_dirs: tuple[str, ...] = (),
    staging_dir: str | None = None,
    validate: str | None = None,
):
    """
    Make the file at ``path`` hold exactly ``content`` with the given mode and owner.

    + path: absolute path of the file on the host
    + content: the whole text of the file
    + mode: octal permission bits, as ``stat -c %a`` prints them
    + user: owner of the file
    + group: group of the file
    + private_dirs: folders to create first, mode 0700 and owned by ``user``:``group``
      (default: the parent folder is created as root, 0755, when missing)
    + staging_dir: a private (0700) folder to upload through, for secrets; the file is then
      never readable by others, not even while it is copied
    + validate: command checking the staged file before it goes live, ``{path}`` standing
      for it (``visudo -cf {path}``); on failure the staged file is removed and nothing
      changes

    **Example:**

    .. code:: python

        files.managed_file(
            name="Install the memory guard",
            path="/usr/local/sbin/spark-memory-guard",
            content=open("files/spark-memory-guard").read(),
            mode="755",
        )
    """
    if not differs(path, content, mode, user, group):
        host.noop(f"{path} is up to date")
        return
    current = host_state().files.get(path)
    wanted = FileState(digest(content), mode, user, group)
    target = shlex.quote(path)
    ownership = f"chown {user}:{group} {{f}} && chmod {mode} {{f}}"
    if current is not None and current.sha256 == wanted.sha256:
        yield ownership.format(f=target)
        return
    staged = shlex.quote(f"{path}.spark-deploy-new")
    private_upload = None
    if staging_dir:
        private_upload = posixpath.join(staging_dir, posixpath.basename(path))
        yield f"install -d -m 700 -o \"${{SUDO_USER:-root}}\" {shlex.quote(staging_dir)}"
    if private_dirs:
        folders = " ".join(shlex.quote(folder) for folder in private_dirs)
        yield f"install -d -m 700 -o {user} -g {group} {folders}"
    else:
        yield f"mkdir -p {shlex.quote(posixpath.dirname(path))}"
    # With sudo, pyinfra uploads to a temporary file and copies it to the staged path.
    yield FileUploadCommand(
        StringIO(content), f"{path}.spark-deploy-new", remote_temp_filename=private_upload
    )
    check = ""
    if validate:
        check = f"{{ {validate.format(path=staged)} || {{ rm -f {staged}; exit 1; }}; }} && "
    yield f"{ownership.format(f=staged)} && {check}mv -f {staged} {target}"
