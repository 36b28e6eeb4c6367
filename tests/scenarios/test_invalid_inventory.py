"""
Invalid inventories through the real command line: a clear error naming file, host and key,
and no connection made to anyone. Each inventory points at a local socket that records
any connection attempt.
"""

from __future__ import annotations

import socket

import pytest

from tests.twins.runner import run_deploy


@pytest.fixture
def listener():
    """A TCP socket on 127.0.0.1 standing where an SSH server would be."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    sock.setblocking(False)
    yield sock
    sock.close()


def connections(sock: socket.socket) -> int:
    count = 0
    while True:
        try:
            conn, _ = sock.accept()
        except BlockingIOError:
            return count
        conn.close()
        count += 1


CASES = {
    "unknown key": (
        "sparks:\n  spark-1: {{ssh_host: 127.0.0.1, ssh_port: {port}, alow_reboot: true}}\n",
        ["host 'spark-1', key 'alow_reboot': unknown key; did you mean 'allow_reboot'?"],
    ),
    "wrong type and missing ssh_host": (
        "sparks:\n  spark-1: {{ssh_host: 127.0.0.1, ssh_port: {port}, allow_reboot: maybe}}\n"
        "  spark-2: {{ssh_port: {port}}}\n",
        [
            "host 'spark-1', key 'allow_reboot': Input should be a valid boolean (got 'maybe')",
            "host 'spark-2', key 'ssh_host': required",
        ],
    ),
    "malformed yaml": (
        "sparks:\n  spark-1: {{ssh_host: 127.0.0.1, ssh_port: {port}\n",
        [":3:1: not valid YAML"],
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_invalid_inventory_fails_before_any_connection(case, listener, tmp_path):
    text, expected = CASES[case]
    path = tmp_path / "sparks.yml"
    path.write_text(text.format(port=listener.getsockname()[1]))
    run = run_deploy(path)
    assert run.returncode == 2, run.explain()
    assert f"Invalid inventory {path}" in run.stderr
    assert "no host was contacted" in run.stderr
    for fragment in expected:
        assert f"{path}" in run.stderr and fragment in run.stderr, run.stderr
    assert "Connecting to hosts" not in run.stderr
    assert connections(listener) == 0


def test_missing_inventory_file(tmp_path):
    run = run_deploy(tmp_path / "absent.yml")
    assert run.returncode == 2
    assert "file not found; copy inventory/sparks.example.yml" in run.stderr


def test_listener_does_see_a_valid_inventory_connect(listener, tmp_path):
    """The no-connection assertion above can fail: a valid inventory does connect."""
    path = tmp_path / "sparks.yml"
    path.write_text(
        f"sparks:\n  spark-1: {{ssh_host: 127.0.0.1, ssh_port: {listener.getsockname()[1]}}}\n"
    )
    run_deploy(path, env={"HOME": str(tmp_path)})
    assert connections(listener) >= 1
