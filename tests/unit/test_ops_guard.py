"""The fabric guard (deploys/qsfp/guard.py): the ports a pair or cluster uses for control
answer only the other Sparks; facts in, commands (or the no-op) out, and the table itself."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from sparkdeploy.config.paths import FABRIC_GUARD, FABRIC_GUARD_UNIT
from sparkdeploy.deploys.qsfp.guard import (
    NFTABLES,
    guard_loaded,
    guard_of,
    guard_retired,
    guard_text,
    nftables_installed,
)
from sparkdeploy.engine_plan.files import managed_files
from sparkdeploy.facts.host_state import SparkHostState
from tests.unit.operations import HOST_STATE, given, host_state, pair, run, spark

SGLANG = {"engine": {"name": "sglang"}, "model_repo": "o/m"}
RAY_ENGINE = {"name": "vllm", "args": {"--distributed-executor-backend": "ray"}}
RAY_VLLM = {"engine": RAY_ENGINE, "model_repo": "o/m"}
UNIT = "spark-fabric-guard.service"


def guard_on(host):
    return guard_of(host.data.spark, host.data.place, host.data.get("engine_plan"))


def test_a_sglang_pair_closes_its_rendezvous_zmq_link_test_and_copy_ports_to_all_but_the_peer():
    head = pair(**SGLANG)["spark-1"]
    guard = guard_on(head)
    assert guard is not None
    assert guard.peers == ("192.168.100.2", "192.168.101.2")  # the other Spark, every rail
    # SGLang's TCPStore and PortArgs ports (profiles.yaml control_span), the link test's
    # rendezvous (link_test_port), the copy server (fetch/jobs.py PAIR_COPY_PORT)
    assert guard.control == ((20000, 20015), (29500, 29500), (47471, 47471))
    assert guard.kept == (22, 30000)  # SSH and the API port (engine.bind decides that one)


def test_a_ray_pair_closes_the_gcs_dashboard_client_agent_and_worker_ports():
    guard = guard_on(pair(**RAY_VLLM)["spark-2"])
    assert guard is not None and guard.peers == ("192.168.100.1", "192.168.101.1")
    assert guard.control == (
        (6379, 6379),
        (8265, 8265),
        (10001, 19999),  # the client server and the workers' ports, merged
        (29500, 29500),
        (47471, 47471),
        (52365, 52365),
    )


def test_the_api_port_and_ssh_port_stay_reachable_even_inside_a_closed_range():
    host = pair(**{**RAY_VLLM, "engine": {**RAY_ENGINE, "port": 10005}}, ssh_port=40022)["spark-1"]
    guard = guard_on(host)
    assert guard is not None and guard.kept == (22, 10005, 40022)
    text = guard_text(host.data.place, guard)
    assert text.index("tcp dport @kept_ports accept") < text.index("tcp dport @control_ports drop")
    assert text.index("ip saddr @fabric_peers accept") < text.index("ct state new")


def test_the_file_replaces_only_its_own_table_in_one_transaction():
    host = pair(**SGLANG)["spark-1"]
    guard = guard_on(host)
    assert guard is not None
    text = guard_text(host.data.place, guard)
    assert "flush ruleset" not in text
    tables = [line for line in text.splitlines() if line.startswith(("table", "delete"))]
    assert tables == [
        "table inet spark_deploy {",
        "delete table inet spark_deploy",
        "table inet spark_deploy {",
    ]
    assert "elements = { 20000-20015, 29500, 47471 }" in text
    assert "elements = { 192.168.100.2, 192.168.101.2 }" in text
    assert "ct state new tcp dport 32768-60999 drop" in text


@pytest.mark.skipif(shutil.which("nft") is None, reason="nft is not installed here")
def test_nft_accepts_the_file(tmp_path):
    host = pair(**RAY_VLLM)["spark-1"]
    guard = guard_on(host)
    assert guard is not None
    path = tmp_path / "guard.nft"
    path.write_text(guard_text(host.data.place, guard))
    checked = subprocess.run(["nft", "-c", "-f", str(path)], capture_output=True, text=True)
    if "Operation not permitted" in checked.stderr:
        pytest.skip("nft -c needs CAP_NET_ADMIN")
    assert checked.returncode == 0, checked.stderr


def test_the_file_is_checked_by_nft_before_it_goes_live_and_registered_on_a_pair_only():
    host = pair(**SGLANG)["spark-1"]
    files = managed_files(host.data.spark, host.data.get("engine_plan"))
    assert files[FABRIC_GUARD].validate == "nft -c -f {path}"
    assert files[FABRIC_GUARD].mode == "600" and FABRIC_GUARD_UNIT in files
    alone = spark()
    assert FABRIC_GUARD not in managed_files(alone.data.spark, None)


def test_one_spark_has_no_guard_and_retires_one_left_from_a_pair():
    alone = spark(**SGLANG)
    assert guard_on(alone) is None
    given(alone, SparkHostState, host_state(fabric={"table": "0", "present": "0"}))
    assert run(guard_retired, alone).noop == "no fabric guard on this Spark"
    given(alone, SparkHostState, host_state(fabric={"table": "1", "present": "1"}))
    assert run(guard_retired, alone).commands == [
        f"systemctl disable --now {UNIT} 2>/dev/null; "
        "nft delete table inet spark_deploy 2>/dev/null; "
        f"rm -f {FABRIC_GUARD} {FABRIC_GUARD_UNIT} && systemctl daemon-reload"
    ]


def loaded(table: str, enabled: str, reload: bool):
    host = pair(**SGLANG)["spark-1"]
    units = {UNIT: ("active", enabled)}
    given(host, SparkHostState, host_state(fabric={"table": table, "present": "1"}, units=units))
    return run(guard_loaded, host, reload=reload)


def test_an_unchanged_loaded_guard_is_a_noop_else_it_is_enabled_and_reloaded():
    load = [
        f"systemctl daemon-reload && systemctl enable {UNIT} && systemctl reload-or-restart {UNIT}"
    ]
    same = loaded("1", "enabled", reload=False)
    assert same.commands == []
    assert same.noop == f"table inet spark_deploy is loaded from {FABRIC_GUARD}"
    assert loaded("1", "enabled", reload=True).commands == load  # its file or unit changed
    assert loaded("0", "enabled", reload=False).commands == load  # an operator's flush ruleset
    assert loaded("1", "disabled", reload=False).commands == load  # not loaded at boot


def test_nftables_is_installed_when_the_spark_lacks_it():
    host = pair()["spark-1"]
    given(host, SparkHostState, host_state(packages={**HOST_STATE.packages, "nftables": "1.0.9"}))
    assert run(nftables_installed, host).noop == "nftables is installed"
    given(host, SparkHostState, host_state(packages={}))
    assert run(nftables_installed, host).commands == [NFTABLES]


def test_the_sample_fact_reads_the_guard_lines():
    assert HOST_STATE.fabric == {"table": "1", "present": "1"}
