"""The MCP server's operations: the host-state fact in, the commands (or the no-op) out."""

from __future__ import annotations

import gzip
import io
import os
import re
import subprocess
import tarfile
from pathlib import Path

import pytest
from pyinfra.api import OperationError

from sparkdeploy.config.errors import InventoryError
from sparkdeploy.config.paths import MCP_OPERATOR_TOKEN, MCP_TOKEN
from sparkdeploy.deploys.agent import (
    library,
    mcp_library,
    mcp_retired,
    mcp_running,
    mcp_token,
    mcp_token_copy,
    mcp_user,
    mcp_venv,
    requirements,
)
from sparkdeploy.deploys.managed import AS_OPERATOR
from sparkdeploy.escape import shell
from sparkdeploy.facts.host_state import SparkHostState
from sparkdeploy.facts.probes.mcp import MCP_LINES
from sparkdeploy.knowledge.locks import read_lock
from tests.unit.operations import HOST_STATE, Outcome, given, host_state, run, spark

PACKAGES = ["mcp==2.3.0", "pydantic==2.14.3", "pyyaml==6.0.3", "packaging==26.3"]
ARCHIVE, DIGEST = library()
MCP_LOCK = read_lock("mcp", "2.3.0")


def with_mcp(
    operation,
    mcp: dict[str, str],
    unit: tuple[str, str] | None = None,
    home: str = "/home/nvidia",
    **arguments,
) -> Outcome:
    host = spark(mcp_server=True)
    units = {"spark-mcp.service": unit} if unit else {}
    given(host, SparkHostState, host_state(mcp=mcp, units=units, user_home=home))
    return run(operation, host, **arguments)


def test_the_sample_fact_reads_every_mcp_line():
    assert HOST_STATE.mcp == {
        "venv": MCP_LOCK.digest,
        "lib": "3f79bb7b435b05321651daefd374cdc681dc06faa65e374e38337b88ca046dea",
        "user": "spark-mcp systemd-journal",
        "present": "1",
        "token": "640 root spark-mcp",
        "copy": "600",
    }


def test_the_user_reading_the_journal_is_a_noop_else_made_or_added_to_the_group():
    assert with_mcp(mcp_user, {"user": "spark-mcp systemd-journal"}).noop == (
        "spark-mcp exists and reads the journal"
    )
    assert with_mcp(mcp_user, {"user": ""}).commands == [
        "useradd --system --user-group --no-create-home --home-dir /nonexistent "
        "--shell /usr/sbin/nologin --groups systemd-journal spark-mcp"
    ]
    assert with_mcp(mcp_user, {"user": "spark-mcp"}).commands == [
        "usermod -a -G systemd-journal spark-mcp"
    ]


def test_the_venv_is_made_beside_the_old_from_its_lock_and_swapped_in_whole():
    """The locked install (before 22, `pip install mcp==V ...` let pip take any transitive
    release and build sdists as root)."""
    outcome = with_mcp(mcp_venv, {"venv": "0" * 64}, packages=PACKAGES)
    venv = "/opt/spark-deploy/mcp/venv"
    stamp = f"{venv}.new/spark-deploy.lock"
    assert outcome.commands == [
        f"rm -rf {venv}.new && python3 -I -m venv {venv}.new",
        f"upload {stamp}.new",
        f"{venv}.new/bin/pip install --quiet --disable-pip-version-check --no-input "
        f"--require-hashes --only-binary :all: -r {stamp}.new && mv -f {stamp}.new {stamp}",
        f"rm -rf {venv} && mv {venv}.new {venv}",
    ]
    assert outcome.uploads[f"{stamp}.new"] == MCP_LOCK.text
    same = with_mcp(mcp_venv, {"venv": MCP_LOCK.digest}, packages=PACKAGES)
    assert same.commands == [] and same.noop == f"{venv} holds {' '.join(PACKAGES)} from its lock"


def test_a_venv_of_other_packages_than_the_lock_is_refused():
    with pytest.raises(OperationError, match="python -m tools.lock mcp 2.3.0"):
        with_mcp(mcp_venv, {}, packages=[*PACKAGES[:-1], "packaging==1.0"])


def test_the_venv_pins_the_laptops_libraries():
    from importlib import metadata

    wanted = requirements(spark(mcp_sdk_version="2.3.0").data.spark)
    assert wanted == ["mcp==2.3.0"] + [
        f"{name}=={metadata.version(name)}" for name in ("pydantic", "pyyaml", "packaging")
    ]


def test_the_library_is_the_pure_part_only_and_the_same_bytes_every_time():
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(ARCHIVE))) as archive:
        names = archive.getnames()
    parts = {name.split("/")[1] for name in names}
    assert parts == {
        "__init__.py",
        "escape.py",
        "knowledge",
        "config",
        "engine_plan",
        "readings",
        "agent",
    }
    assert "sparkdeploy/agent/server.py" in names
    assert "sparkdeploy/knowledge/catalogues/sglang-0.5.10.json" in names
    assert not any("__pycache__" in name for name in names)
    library.cache_clear()
    assert library() == (ARCHIVE, DIGEST)


def test_the_library_is_unpacked_beside_and_swapped_in_unless_its_digest_is_there():
    outcome = with_mcp(mcp_library, {"lib": "old"}, archive=ARCHIVE, digest=DIGEST)
    lib = "/opt/spark-deploy/mcp/lib"
    assert outcome.commands == [
        f"mkdir -p /opt/spark-deploy/mcp && rm -rf {lib}.new {lib}.old && mkdir -m 755 {lib}.new",
        "upload /opt/spark-deploy/mcp/lib.tar.gz",
        f"tar -xzf /opt/spark-deploy/mcp/lib.tar.gz -C {lib}.new --no-same-owner && "
        f"chmod -R u=rwX,go=rX {lib}.new && printf '%s\\n' {DIGEST} > {lib}.new/DIGEST && "
        f"{{ [ ! -e {lib} ] || mv {lib} {lib}.old; }} && mv {lib}.new {lib} && "
        f"rm -rf {lib}.old /opt/spark-deploy/mcp/lib.tar.gz",
    ]
    same = with_mcp(mcp_library, {"lib": DIGEST}, archive=ARCHIVE, digest=DIGEST)
    assert same.commands == [] and str(same.noop).startswith(f"{lib} holds the code of this deploy")


@pytest.mark.parametrize(
    "unit, restart, expected",
    [
        (("active", "enabled"), False, []),
        (None, False, ["systemctl enable spark-mcp.service", "systemctl start"]),
        (("active", "enabled"), True, ["systemctl restart"]),
        (("active", "disabled"), False, ["systemctl enable spark-mcp.service"]),
    ],
)
def test_the_server_runs_enabled_and_answers_after_a_start(unit, restart, expected):
    outcome = with_mcp(mcp_running, {}, unit, port=8765, restart=restart)
    starts = [c for c in outcome.commands if c.startswith("systemctl ")]
    assert [c.split(" spark-mcp")[0] if "enable" not in c else c for c in starts] == expected
    waits = [c for c in outcome.commands if "curl" in c]
    if any("start" in c for c in starts):
        assert waits and "curl -s -o /dev/null -m 2 http://127.0.0.1:8765/mcp" in waits[0]
        assert "journalctl -u spark-mcp.service -n 20" in waits[0]
    else:
        assert waits == []
    if not expected:
        assert outcome.noop == "spark-mcp.service is enabled and running"


def test_turned_off_it_is_removed_when_anything_of_it_is_there():
    """The token goes with it; the operator's copy is removed by the operator."""
    assert with_mcp(mcp_retired, {"present": "0"}).noop == "no MCP server on this Spark"
    assert with_mcp(mcp_retired, {"present": "1"}).commands == [
        "systemctl disable --now spark-mcp.service 2>/dev/null || true",
        "rm -rf /etc/systemd/system/spark-mcp.service /etc/spark-deploy/mcp/context.json "
        "/etc/spark-deploy/mcp/token /opt/spark-deploy/mcp && systemctl daemon-reload",
        "runuser -u nvidia -- rm -f /home/nvidia/.config/spark-deploy/mcp-token",
    ]


# -- the token (issue 22: loopback alone let every local user read the journals through it) --

TOKEN = "/etc/spark-deploy/mcp/token"


def test_the_token_is_made_on_the_spark_only_when_missing_never_in_argv():
    made = with_mcp(mcp_token, {"token": ""}).commands
    staged = f"{TOKEN}.spark-deploy-new"
    assert made == [
        f"mkdir -p /etc/spark-deploy/mcp && (umask 027 && rm -f {staged} && "
        "python3 -I -c 'import secrets; print(secrets.token_urlsafe(32))' > "
        f"{staged}) && chgrp spark-mcp {staged} && chmod 640 {staged} && mv -f {staged} {TOKEN}"
    ]
    there = with_mcp(mcp_token, {"token": "640 root spark-mcp", "copy": ""})
    assert there.commands == [] and there.noop == f"{TOKEN} is there (640 root spark-mcp)"
    # A token another run left readable to others is closed, never made anew (the operator's
    # copy stays valid).
    assert with_mcp(mcp_token, {"token": "644 root root"}).commands == [
        f"chown root:spark-mcp {TOKEN} && chmod 640 {TOKEN}"
    ]


@pytest.mark.parametrize(
    "token, copy",
    [("", ""), ("640 root spark-mcp", ""), ("640 root spark-mcp", "644")],
    ids=["new token", "copy missing or different", "copy readable by others"],
)
def test_the_operators_copy_is_written_by_the_operator_from_roots_file(token, copy):
    """Root opens only its own file (as standard input); the operator makes the folders and
    the file (umask 077, chmod 600, renamed into place): nothing in argv, and no path in the
    operator's home is created, chowned or chmoded by root."""
    (command,) = with_mcp(mcp_token_copy, {"token": token, "copy": copy}).commands
    folder = "/home/nvidia/.config/spark-deploy"
    assert command == (
        f"runuser -u nvidia -- sh -c {shell(AS_OPERATOR.format(mode='600'))} spark-deploy "
        f"{folder} {folder}/mcp-token < {TOKEN}"
    )
    assert "chown" not in command.split(" -- ")[0] and "secrets" not in command


def test_the_operators_copy_holding_the_token_is_a_noop_and_a_missing_home_refused():
    held = with_mcp(mcp_token_copy, {"token": "640 root spark-mcp", "copy": "600"})
    assert held.commands == [] and held.noop == f"the operator nvidia holds a copy of {TOKEN}"
    with pytest.raises(OperationError, match="set operator_user to an account with a home"):
        with_mcp(mcp_token_copy, {"token": "", "copy": ""}, home="")


@pytest.mark.parametrize(
    "keys, taken",
    [
        (
            {"model_repo": "Qwen/Qwen3-8B", "engine": {"name": "sglang", "port": 8765}},
            "the engine's",
        ),
        ({"link_test_port": 8765}, "the link test (link_test_port)'s"),
    ],
)
def test_the_mcp_port_is_its_own(keys, taken):
    message = f"key 'mcp_port': port 8765 is {taken}: give the MCP server another"
    with pytest.raises(InventoryError, match=re.escape(message)):
        spark(mcp_server=True, **keys)


def token_lines(tmp_path: Path, case: str) -> dict[str, str]:
    """The fact's token lines (MCP_LINES) run by sh against a token and an operator's home
    under ``tmp_path``, laid out as in ``case``: HostState.mcp's "token" and "copy"."""
    token, home = tmp_path / "token", tmp_path / "home"
    copy = home / MCP_OPERATOR_TOKEN
    copy.parent.mkdir(parents=True)
    lay(case, token, copy)
    script = "\n".join(MCP_LINES[-3:]).replace(MCP_TOKEN, str(token))
    done = subprocess.run(
        ["sh", "-c", f"home={shell(str(home))}\n{script}"],
        capture_output=True,
        text=True,
        check=True,
        timeout=10,
    )
    return SparkHostState().process(done.stdout.splitlines()).mcp


def lay(case: str, token: Path, copy: Path) -> None:
    """The token and the operator's copy as in ``case``."""
    if case == "none":
        return
    token.write_text("" if case == "empty token" else "t0ken\n")
    if case == "token a symlink":
        token.unlink()
        token.symlink_to(copy)
        copy.write_text("t0ken\n")
    elif case == "copy a symlink":
        copy.symlink_to(token)
    elif case == "copy a fifo":
        os.mkfifo(copy)
    else:
        copy.write_text("other\n" if case == "other copy" else token.read_text())
        copy.chmod(0o644 if case == "readable copy" else 0o600)


@pytest.mark.parametrize(
    "case, token, copy",
    [
        ("held", True, "600"),
        ("readable copy", True, "644"),
        ("other copy", True, ""),
        ("copy a symlink", True, ""),
        ("copy a fifo", True, ""),
        ("empty token", False, ""),
        ("token a symlink", False, ""),
        ("none", False, ""),
    ],
)
def test_the_fact_compares_the_copy_as_root_and_never_follows_a_link_there(
    tmp_path, case, token, copy
):
    """A symlink (even to the token itself) or a FIFO the operator put in place of the copy
    reads as no copy: it is replaced by the operator, never opened by root. A token that is
    not a file with content reads as none (made anew)."""
    state = token_lines(tmp_path, case)
    assert state["copy"] == copy
    assert bool(state["token"]) is token
    if token:
        mode, user, group = state["token"].split()
        assert mode.isdigit() and user and group
