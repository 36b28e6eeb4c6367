"""
The read-only MCP server for local coding agents (``mcp_server: true``): the ``mcp`` SDK in
a venv of its own, the pure part of sparkdeploy it runs (knowledge, config, engine_plan,
readings, agent) unpacked beside it with its digest, what it knows of the Spark, a hardened
unit bound to 127.0.0.1, the system user it runs as, and the bearer token every request
must carry (made on the Spark, copied by the operator into their home). Turning it off
stops it and removes its files. See docs/mcp.md.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import posixpath
import tarfile
from functools import cache
from pathlib import Path

from pyinfra import host
from pyinfra.api import FileUploadCommand, OperationError, deploy, operation
from pyinfra.operations import systemd
from pyinfra.operations.util import any_changed

from sparkdeploy.agent.context import context_of
from sparkdeploy.config.paths import (
    MCP_CONTEXT,
    MCP_DIR,
    MCP_LIB,
    MCP_OPERATOR_TOKEN,
    MCP_PATH,
    MCP_TOKEN,
    MCP_UNIT,
    MCP_UNIT_NAME,
    MCP_USER,
    MCP_VENV,
)
from sparkdeploy.config.spark import SparkSettings
from sparkdeploy.deploys.managed import as_operator, managed_file
from sparkdeploy.deploys.venv import shipped_lock, venv_commands
from sparkdeploy.escape import shell
from sparkdeploy.facts.host_state import host_state
from sparkdeploy.facts.probes.mcp import MCP_DIGEST
from sparkdeploy.knowledge.locks import top_level
from sparkdeploy.render import render

PACKAGE = Path(__file__).resolve().parents[1]  # sparkdeploy/
# What the server runs: the parts of sparkdeploy that never import pyinfra (the layer test,
# tests/unit/test_layers.py, keeps them so).
SHIPPED_PARTS = (
    "__init__.py",
    "escape.py",
    "knowledge",
    "config",
    "engine_plan",
    "readings",
    "agent",
)
HOST = "127.0.0.1"
JOURNAL_GROUP = "systemd-journal"
START_TIMEOUT = 60  # seconds the server may take to answer after a (re)start
TOKEN_MODE = "640"  # root:MCP_USER: the server reads it, no other local user
COPY_MODE = "600"  # the operator's copy, theirs alone
# 32 random bytes, URL-safe, printed only into the file (never argv, never output); python3 -I
# ignores the caller's environment and the current folder (no planted module runs as root).
MAKE_TOKEN = "python3 -I -c 'import secrets; print(secrets.token_urlsafe(32))'"


def requirements(spark: SparkSettings) -> list[str]:
    """What the server's venv holds: the SDK and the shipped code's libraries, pinned (the
    top-level set of its hash lock)."""
    return top_level("mcp", spark.mcp_sdk_version)


@cache
def library() -> tuple[bytes, str]:
    """The shipped code as a gzipped tar, the same bytes for the same files (sorted, no
    times or owners), and the sha256 of the tar."""
    files = []
    for part in SHIPPED_PARTS:
        path = PACKAGE / part
        found = [path] if path.is_file() else sorted(path.rglob("*"))
        files += [f for f in found if f.is_file() and "__pycache__" not in f.parts]
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for path in files:
            info = tarfile.TarInfo("sparkdeploy/" + path.relative_to(PACKAGE).as_posix())
            data = path.read_bytes()
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            archive.addfile(info, io.BytesIO(data))
    data = raw.getvalue()
    return gzip.compress(data, mtime=0), hashlib.sha256(data).hexdigest()


@operation()
def mcp_user(user: str = MCP_USER):
    """
    Make the system user the MCP server runs as: no login, no home, no sudo right, in the
    systemd-journal group only (it reads the engines' journals and the kernel log).

    + user: the user's name

    **Example:**

    .. code:: python

        agent.mcp_user()
    """
    groups = host_state().mcp.get("user", "").split()
    if JOURNAL_GROUP in groups:
        host.noop(f"{user} exists and reads the journal")
        return
    if not groups:
        yield (
            f"useradd --system --user-group --no-create-home --home-dir /nonexistent "
            f"--shell /usr/sbin/nologin --groups {JOURNAL_GROUP} {shell(user)}"
        )
    else:
        yield f"usermod -a -G {JOURNAL_GROUP} {shell(user)}"


@operation()
def mcp_venv(packages: list[str], venv: str = MCP_VENV):
    """
    Install the MCP server's venv from the hash lock of exactly ``packages``
    (knowledge/locks/mcp-VERSION.txt), made beside the old one and swapped in whole, so an
    interrupted install leaves the old one serving.

    + packages: pinned requirements (``mcp==2.3.0``, ...), the lock's top-level set
    + venv: the folder of the venv

    **Example:**

    .. code:: python

        agent.mcp_venv(packages=["mcp==2.3.0", "pydantic==2.14.3"])
    """
    version = packages[0].partition("==")[2]
    lock = shipped_lock("mcp", version)
    if sorted(lock.top) != sorted(packages):
        raise OperationError(
            f"the MCP lock of {version} holds {' '.join(lock.top)}, not {' '.join(packages)}: "
            f"run `python -m tools.lock mcp {version}` on the laptop"
        )
    if host_state().mcp.get("venv") == lock.digest:
        host.noop(f"{venv} holds {' '.join(packages)} from its lock")
        return
    staged = f"{venv}.new"
    yield from venv_commands(staged, lock)
    yield f"rm -rf {venv} && mv {staged} {venv}"


@operation()
def mcp_library(archive: bytes, digest: str, lib: str = MCP_LIB):
    """
    Unpack the code the MCP server runs into ``lib``, beside the old copy first, then
    swapped in whole; its digest is kept in the folder, so an unchanged copy is a no-op.

    + archive: the gzipped tar of the shipped part of sparkdeploy (``library()``)
    + digest: the sha256 of the tar, kept as lib/DIGEST
    + lib: the folder on PYTHONPATH of the server

    **Example:**

    .. code:: python

        agent.mcp_library(*agent.library())
    """
    if host_state().mcp.get("lib") == digest:
        host.noop(f"{lib} holds the code of this deploy ({digest[:12]})")
        return
    upload = f"{MCP_DIR}/lib.tar.gz"
    staged, old = f"{lib}.new", f"{lib}.old"
    yield f"mkdir -p {MCP_DIR} && rm -rf {staged} {old} && mkdir -m 755 {staged}"
    yield FileUploadCommand(io.BytesIO(archive), upload)
    yield (
        f"tar -xzf {upload} -C {staged} --no-same-owner && chmod -R u=rwX,go=rX {staged} && "
        f"printf '%s\\n' {shell(digest)} > {staged}/{posixpath.basename(MCP_DIGEST)} && "
        f"{{ [ ! -e {lib} ] || mv {lib} {old}; }} && mv {staged} {lib} && rm -rf {old} {upload}"
    )


@operation()
def mcp_token(token: str = MCP_TOKEN):
    """
    Make the MCP server's bearer token on the Spark, once: only when missing, by root with
    ``umask 027`` from /dev/urandom, into ``token`` (0640 root:spark-mcp, renamed into
    place). It is never on the laptop, in argv or in output.

    + token: the token's path on the Spark

    **Example:**

    .. code:: python

        agent.mcp_token()
    """
    found = host_state().mcp.get("token", "")
    wanted = f"{TOKEN_MODE} root {MCP_USER}"
    if found == wanted:
        host.noop(f"{token} is there ({wanted})")
        return
    if found:
        yield f"chown root:{MCP_USER} {shell(token)} && chmod {TOKEN_MODE} {shell(token)}"
        return
    staged = shell(f"{token}.spark-deploy-new")
    yield (
        f"mkdir -p {shell(posixpath.dirname(token))} && (umask 027 && rm -f {staged} && "
        f"{MAKE_TOKEN} > {staged}) && chgrp {MCP_USER} {staged} && "
        f"chmod {TOKEN_MODE} {staged} && mv -f {staged} {shell(token)}"
    )


@operation()
def mcp_token_copy(token: str = MCP_TOKEN):
    """
    Give the operator a copy of the MCP server's token, ~/.config/spark-deploy/mcp-token
    (0600), whenever it is missing, differs from ``token`` or has another mode. The operator
    writes it from root's file on standard input (``managed.as_operator``): root never
    creates, chowns or chmods a path in the operator's home.

    + token: the token's path on the Spark (made by ``mcp_token`` before)

    **Example:**

    .. code:: python

        agent.mcp_token_copy()
    """
    state = host_state()
    if state.mcp.get("token") and state.mcp.get("copy") == COPY_MODE:
        host.noop(f"the operator {host.data.spark.user} holds a copy of {token}")
        return
    if not state.user_home:
        raise OperationError(
            f"{host.name}: the operator {host.data.spark.user} has no home to hold a copy of "
            f"{token}; set operator_user to an account with a home"
        )
    yield as_operator(posixpath.join(state.user_home, MCP_OPERATOR_TOKEN), COPY_MODE, token)


@operation()
def mcp_running(port: int, restart: bool = False):
    """
    Keep the MCP server enabled and running; (re)start it when asked or when it is not
    active, then wait until it answers on 127.0.0.1.

    + port: its port on 127.0.0.1
    + restart: restart it even when it runs (its code, venv, context or unit changed)

    **Example:**

    .. code:: python

        agent.mcp_running(port=8765)
    """
    active, enabled = host_state().units.get(MCP_UNIT_NAME, ("inactive", "absent"))
    if enabled != "enabled":
        yield f"systemctl enable {MCP_UNIT_NAME}"
    if not restart and active == "active":
        if enabled == "enabled":
            host.noop(f"{MCP_UNIT_NAME} is enabled and running")
        return
    yield f"systemctl {'restart' if active == 'active' else 'start'} {MCP_UNIT_NAME}"
    url = shell(f"http://{HOST}:{port}{MCP_PATH}")
    yield (
        f"for i in $(seq {START_TIMEOUT}); do curl -s -o /dev/null -m 2 {url} && exit 0; "
        f"systemctl -q is-failed {MCP_UNIT_NAME} && break; sleep 1; done; "
        f"echo 'spark-mcp did not answer on {HOST}:{port}:' >&2; "
        f"journalctl -u {MCP_UNIT_NAME} -n 20 --no-pager >&2; exit 1"
    )


@operation()
def mcp_retired():
    """
    Stop the MCP server and remove its unit, context, token, code and venv (the user
    stays); the operator's copy of the token is removed by the operator.

    **Example:**

    .. code:: python

        agent.mcp_retired()
    """
    if host_state().mcp.get("present") != "1":
        host.noop("no MCP server on this Spark")
        return
    yield f"systemctl disable --now {MCP_UNIT_NAME} 2>/dev/null || true"
    yield (
        f"rm -rf {MCP_UNIT} {shell(MCP_CONTEXT)} {shell(MCP_TOKEN)} {MCP_DIR} && "
        "systemctl daemon-reload"
    )
    home = host_state().user_home
    if home:
        copy = shell(posixpath.join(home, MCP_OPERATOR_TOKEN))
        yield f"runuser -u {shell(host.data.spark.user)} -- rm -f {copy}"


@deploy("Serve read-only diagnosis to local coding agents (MCP)")
def serve_agent_tools() -> None:
    spark: SparkSettings = host.data.spark
    if not spark.mcp_server:
        mcp_retired(name="Remove the MCP server (mcp_server is off)")
        return
    mcp_user(name=f"Make the {MCP_USER} user (systemd-journal, no sudo)")
    venv = mcp_venv(
        name=f"Install the MCP SDK ({spark.mcp_sdk_version}) in its own venv",
        packages=requirements(spark),
    )
    token = mcp_token(name="Make the MCP server's token")
    mcp_token_copy(name=f"Give the operator a copy of the MCP token (~/{MCP_OPERATOR_TOKEN})")
    archive, digest = library()
    code = mcp_library(name="Install the code the MCP server runs", archive=archive, digest=digest)
    context = managed_file(
        name="Tell the MCP server about this Spark",
        path=MCP_CONTEXT,
        content=context_of(
            host.name, spark, host.data.get("engine_plan"), host.data.place
        ).to_json(),
    )
    unit = managed_file(
        name=f"Write {MCP_UNIT_NAME}",
        path=MCP_UNIT,
        content=render(
            "mcp.service.j2",
            user=MCP_USER,
            host=HOST,
            port=spark.mcp_port,
            path=MCP_PATH,
            venv=MCP_VENV,
            lib=MCP_LIB,
            context=MCP_CONTEXT,
            token=MCP_TOKEN,
        ),
    )
    systemd.daemon_reload(name="Reload systemd units", _if=any_changed(unit))
    mcp_running(
        name=f"Run the MCP server on {HOST}:{spark.mcp_port}",
        port=spark.mcp_port,
        restart=any(op.will_change for op in (venv, code, context, unit, token)),
    )
