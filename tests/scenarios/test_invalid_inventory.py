"""
Invalid inventories through the real command line: a clear error naming file, host and key,
and no connection made to anyone. Each inventory points at a local socket that records
any connection attempt.
"""

from __future__ import annotations

import socket
import threading

import pytest

from tests.twins.runner import run_deploy


class Listener:
    """A TCP socket on 127.0.0.1 standing where an SSH server would be: it counts and
    closes every connection at once."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.count = 0
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.count += 1
            conn.close()


@pytest.fixture
def listener():
    made = Listener()
    yield made
    made.sock.close()


PASTED = "hf_" + "Q7tZ" * 9  # shaped like a Hugging Face token; must never be echoed

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
    "a key given twice": (
        "sparks:\n  spark-1:\n    ssh_host: 127.0.0.1\n    ssh_port: {port}\n"
        "    allow_reboot: false\n    allow_reboot: true\n",
        [":6:5: not valid YAML: key 'allow_reboot' is given twice in this mapping"],
    ),
    "a unit directive in a value": (
        "sparks:\n  spark-1: {{ssh_host: 127.0.0.1, ssh_port: {port}, ssh_user: x,"
        ' model_revision: "main\\nExecStartPre=/tmp/x"}}\n',
        ["host 'spark-1', key 'model_revision': must not contain control characters"],
    ),
    "a sudoers rule as the user": (
        "sparks:\n  spark-1: {{ssh_host: 127.0.0.1, ssh_port: {port},"
        " ssh_user: 'ALL ALL=(ALL) NOPASSWD: ALL'}}\n",
        ["host 'spark-1', key 'ssh_user': must be a user name"],
    ),
    "a token pasted into engine.env": (
        "sparks:\n  spark-1: {{ssh_host: 127.0.0.1, ssh_port: {port}, ssh_user: x,"
        " model_repo: o/m, engine: {{name: vllm, env: {{MY_KEY: " + PASTED + "}}}}}}\n",
        ["host 'spark-1', key 'engine', 'env', 'MY_KEY': looks like a secret"],
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_invalid_inventory_fails_before_any_connection(case, listener, tmp_path):
    text, expected = CASES[case]
    path = tmp_path / "sparks.yml"
    path.write_text(text.format(port=listener.port))
    run = run_deploy(path)
    assert run.returncode == 2, run.explain()
    assert f"Invalid inventory {path}" in run.stderr
    assert "no host was contacted" in run.stderr
    for fragment in expected:
        assert f"{path}" in run.stderr and fragment in run.stderr, run.stderr
    assert "Connecting to hosts" not in run.stderr
    assert listener.count == 0
    assert PASTED not in run.stderr + run.stdout


def test_missing_inventory_file(tmp_path):
    run = run_deploy(tmp_path / "absent.yml")
    assert run.returncode == 2
    assert "file not found; copy inventory/sparks.example.yml" in run.stderr


def test_listener_does_see_a_valid_inventory_connect(listener, tmp_path):
    """The no-connection assertion above can fail: a valid inventory does connect."""
    path = tmp_path / "sparks.yml"
    path.write_text(
        f"sparks:\n  spark-1: {{ssh_host: 127.0.0.1, ssh_user: x, ssh_port: {listener.port}}}\n"
    )
    run = run_deploy(path, env={"HOME": str(tmp_path)})
    assert "Invalid inventory" not in run.stderr, run.stderr
    assert listener.count >= 1
