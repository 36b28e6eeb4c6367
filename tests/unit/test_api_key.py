"""An API that asks for a key: the laptop's variable decides, an open API must be said, the key
reaches the engine through a root-only file (never argv or the unit), the health check asks
with it."""

from __future__ import annotations

import http.server
import json
import os
import pwd
import threading
from typing import Any, ClassVar

import pytest

from sparkdeploy.config.errors import InventoryError
from sparkdeploy.config.paths import API_KEY_MOUNT
from sparkdeploy.deploys.engine.serve import api_key_text
from sparkdeploy.deploys.engine.units import health_words, unit_text
from sparkdeploy.engine_plan.files import managed_files
from sparkdeploy.engine_plan.plan import EnginePlan
from sparkdeploy.facts.host_state import SparkHostState
from sparkdeploy.inventory import Inventory, build_inventory
from tests.twins import harness
from tests.unit.test_fabric import load_health

KEY = "k3y-0123456789abcdef0123456789abcdef"
PATH = "inventory/sparks.yml"


def inventory(engine: dict[str, Any], environ: dict[str, str], pair: bool = False) -> Inventory:
    keys = {"ssh_user": "nvidia", "model_repo": "org/model", "engine": engine}
    sparks = {
        f"s{node}": {"ssh_host": f"s{node}.local"}
        | ({"qsfp": harness.qsfp_plan(node)} if pair else {})
        for node in ((1, 2) if pair else (1,))
    }
    return build_inventory({"defaults": keys, "sparks": sparks}, PATH, environ=environ)


def plan(engine: dict[str, Any], environ: dict[str, str]) -> EnginePlan:
    found = inventory(engine, environ).engine_plans["s1"]
    assert found is not None
    return found


def refusal(engine: dict[str, Any], environ: dict[str, str]) -> str:
    with pytest.raises(InventoryError) as refused:
        inventory(engine, environ)
    return str(refused.value)


def test_an_open_api_without_a_key_is_refused_with_both_ways_out():
    message = refusal({"name": "sglang", "bind": "0.0.0.0"}, {})
    assert (
        f"{PATH}: host 's1', key 'engine.bind': 0.0.0.0 serves the API beyond this Spark, and "
        "$SPARK_API_KEY is not set on this laptop: export SPARK_API_KEY=<key>"
    ) in message
    assert "or set engine.api_open: true to serve it without a key on purpose" in message


def test_an_open_api_said_so_is_planned_with_a_warning():
    found = inventory({"name": "sglang", "bind": "0.0.0.0", "api_open": True}, {})
    assert any("answers anyone who reaches the port" in w for w in found.warnings)
    assert found.engine_plans["s1"] is not None and not found.engine_plans["s1"].api_key


def test_a_key_the_engine_cannot_use_is_refused_without_showing_it():
    bad = "short key"
    message = refusal({"name": "vllm"}, {"SPARK_API_KEY": bad})
    assert "key 'engine.api_key_env': $SPARK_API_KEY on this laptop is not usable" in message
    assert bad not in message
    quoting = "x" * 20 + "'\n"
    assert "not usable" in refusal({"name": "sglang"}, {"SPARK_API_KEY": quoting})


def test_a_key_and_an_open_api_contradict_each_other():
    message = refusal({"name": "vllm", "api_open": True}, {"SPARK_API_KEY": KEY})
    assert "key 'engine.api_open': true says the API is open" in message


def test_loopback_without_a_key_stays_as_it_was():
    found = plan({"name": "sglang"}, {})
    assert not found.api_key and found.api_key_file == ""
    assert API_KEY_MOUNT not in found.flags


def test_sglang_reads_the_key_from_its_config_file_mounted_read_only():
    found = plan({"name": "sglang", "bind": "0.0.0.0"}, {"SPARK_API_KEY": KEY})
    assert found.api_key_file == "/etc/spark-deploy/spark-engine-sglang.key.yaml"
    assert found.flags[-2:] == ("--config", API_KEY_MOUNT)
    assert (found.api_key_file, API_KEY_MOUNT) in found.extra_mounts
    spark = inventory({"name": "sglang", "bind": "0.0.0.0"}, {"SPARK_API_KEY": KEY}).sparks["s1"]
    unit = unit_text(found, found.main, spark, "/etc/spark-deploy/spark-engine-sglang.env")
    assert KEY not in unit and f"-v {found.api_key_file}:{API_KEY_MOUNT}:ro" in unit
    assert api_key_text("sglang", KEY) == f"api-key: '{KEY}'\n"


def test_vllm_reads_the_key_from_a_root_only_env_file():
    environ = {"MY_KEY": KEY}
    found = plan({"name": "vllm", "api_key_env": "MY_KEY"}, environ)
    assert found.api_key_file == "/etc/spark-deploy/spark-engine-vllm.key.env"
    assert "--config" not in found.flags and "--api-key" not in found.flags
    spark = inventory({"name": "vllm", "api_key_env": "MY_KEY"}, environ).sparks["s1"]
    unit = unit_text(found, found.main, spark, "/etc/spark-deploy/spark-engine-vllm.env")
    assert KEY not in unit and f"--env-file {found.api_key_file}" in unit
    assert api_key_text("vllm", KEY) == f"VLLM_API_KEY={KEY}\n"


def test_the_key_file_is_a_root_only_secret_in_the_registry():
    found = plan({"name": "vllm"}, {"SPARK_API_KEY": KEY})
    spark = inventory({"name": "vllm"}, {"SPARK_API_KEY": KEY}).sparks["s1"]
    entry = managed_files(spark, found)[found.api_key_file]
    assert (entry.mode, entry.owner, entry.secret) == ("600", "root", True)


def test_only_the_spark_serving_the_api_asks_for_the_key():
    plans = inventory({"name": "sglang"}, {"SPARK_API_KEY": KEY}, pair=True).engine_plans
    assert [(p.rank, p.api_key) for p in plans.values() if p is not None] == [
        (0, True),
        (1, False),
    ]


def test_sglang_takes_one_config_file():
    message = refusal({"name": "sglang", "args": {"--config": "/x.yaml"}}, {"SPARK_API_KEY": KEY})
    assert "engine.args --config: SGLang takes one --config file" in message


def test_the_key_on_the_command_line_is_refused():
    message = refusal({"name": "vllm", "args": {"--api-key": "x" * 20}}, {})
    assert "--api-key: carries a secret" in message


def test_the_health_check_asks_with_the_key_file_of_the_units_container():
    # The container is named since the key goes only to a port it holds (issue 22).
    words = health_words("u.service", 8000, 60, key_file="/etc/spark-deploy/x.key.env")
    assert words == [
        "--port", "8000", "--key-file", "/etc/spark-deploy/x.key.env", "--container", "u",
        "--unit", "u.service", "--timeout", "60",
    ]  # fmt: skip
    named = health_words("w.service", 8000, 60, key_file="/k", container="spark-ray-head")
    assert named[named.index("--container") + 1] == "spark-ray-head"
    assert "--key-file" not in health_words("u.service", 8000, 60, api=False, nccl=True)


@pytest.mark.parametrize(
    "engine, text", [("vllm", f"VLLM_API_KEY={KEY}\n"), ("sglang", f"api-key: '{KEY}'\n")]
)
def test_the_health_check_reads_either_key_file(tmp_path, engine, text):
    path = tmp_path / "key"
    path.write_text(api_key_text(engine, KEY))
    assert path.read_text() == text
    assert load_health().read_key(str(path)) == KEY


class Recorder(http.server.BaseHTTPRequestHandler):
    """A stranger's server on the engine port: answers like an engine, keeps every header."""

    heard: ClassVar[list[str]] = []

    def do_GET(self) -> None:  # noqa: N802 -- http.server's name
        type(self).heard.append(str(self.headers))
        body = json.dumps({"data": [{"id": "m"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def stranger():
    """A server listening on a free loopback port in this process (the stranger)."""
    Recorder.heard = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    # Polled for shutdown() every 20 ms, not socketserver's 0.5 s that held each test.
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def key_file(tmp_path) -> str:
    path = tmp_path / "key"
    path.write_text(api_key_text("vllm", KEY))
    return str(path)


def test_the_key_never_goes_to_a_port_a_stranger_holds(tmp_path, stranger, monkeypatch, capsys):
    health = load_health()
    # The engine's container runs (pid 1 is no ancestor of this test's server: a stranger).
    monkeypatch.setattr(health, "container_of", lambda name: (2**22 + 7, "c" * 64))
    argv = ["--port", str(stranger), "--key-file", key_file(tmp_path), "--container", "e"]
    assert health.main([*argv, "--timeout", "5", "--interval", "0.1"]) == 1
    assert Recorder.heard == []  # not even a request without the key reached it
    said = capsys.readouterr().err
    assert f"port {stranger} is held by a process outside the engine's container e" in said
    assert f"pid {os.getpid()} user {pwd.getpwuid(os.getuid()).pw_name}" in said
    assert "the API key was not sent to it" in said and KEY not in said


def test_the_key_goes_to_a_port_the_engines_container_holds(tmp_path, stranger, monkeypatch):
    health = load_health()
    # This process is the container's main process, or its cgroup names the container's ID.
    monkeypatch.setattr(health, "container_of", lambda name: (os.getpid(), "c" * 64))
    argv = ["--port", str(stranger), "--key-file", key_file(tmp_path), "--container", "e"]
    health.main([*argv, "--timeout", "5", "--interval", "0.1"])  # no chat answer: fails later
    assert Recorder.heard and all(f"Bearer {KEY}" in heard for heard in Recorder.heard)


def test_a_descendant_of_the_containers_process_is_the_engine(tmp_path, stranger, monkeypatch):
    health = load_health()
    monkeypatch.setattr(health, "container_of", lambda name: (os.getppid(), "c" * 64))
    assert health.engine_holds(stranger, "e") is True  # this process is the parent's child
    assert health.listeners(stranger) == [(os.getpid(), os.getuid(), health.command(os.getpid()))]


def test_no_listener_no_key_and_no_container_needs_no_check(monkeypatch):
    health = load_health()
    monkeypatch.setattr(health, "listeners", lambda port: [])
    assert health.engine_holds(1, "e") is False
    with pytest.raises(SystemExit):
        health.main(["--port", "1", "--key-file", "/k"])  # the key needs --container


def test_a_key_in_the_journal_it_prints_is_hidden(monkeypatch):
    health = load_health()
    monkeypatch.setitem(health.KEY, "key", KEY)
    line = f"server_args=ServerArgs(host='0.0.0.0', api_key='{KEY}', port=30000)"
    assert (
        health.hidden(line)
        == "server_args=ServerArgs(host='0.0.0.0', api_key='<redacted>', port=30000)"
    )


def test_the_container_environment_is_root_only():
    from sparkdeploy.config.paths import CONTAINER_ENV
    from sparkdeploy.deploys.managed import managed_file
    from tests.unit.operations import given, host_state, run, spark

    host = spark(model_repo="org/model", engine={"name": "sglang"})
    path = CONTAINER_ENV.format(name="spark-engine-sglang")
    files = managed_files(host.data.spark, host.data.engine_plan)
    assert (files[path].mode, files[path].owner) == ("600", "root")
    given(host, SparkHostState, host_state(files={}))
    commands = run(managed_file, host, path=path, content="A=1\n").commands
    assert (
        f"chown root:root {path}.spark-deploy-new && chmod 600 {path}.spark-deploy-new"
        in (commands[-1])
    )


def test_a_socket_whose_holder_cannot_be_read_is_a_strangers(monkeypatch):
    health = load_health()
    monkeypatch.setattr(health, "listeners", lambda port: [(None, os.getuid(), "")])
    monkeypatch.setattr(health, "container_of", lambda name: (os.getpid(), "c" * 64))
    with pytest.raises(health.ForeignListener, match=r"a socket of user \S+ whose process could"):
        health.engine_holds(30000, "e")
