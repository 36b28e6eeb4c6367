"""How to reach the API after a deploy: plan and settings in, one line out."""

from __future__ import annotations

import dataclasses

from sparkdeploy.config.spark import SparkSettings
from sparkdeploy.config.topology import Topology
from sparkdeploy.engine_plan.plan import plan_sparks
from sparkdeploy.reports.access import api_access
from tests.twins import harness

MODEL = "Mistral-Small-4-119B-2603-NVFP4"


def planned(node_count: int = 1, **keys):
    """Settings and plans of one Spark, or a pair on the QSFP cable, serving SGLang."""
    sparks = {
        f"spark-{node}": SparkSettings.model_validate(
            {
                "ssh_host": f"spark-{node}.local",
                "ssh_user": "nvidia",
                "sysfs_root": "/sys",
                "engine": {"name": "sglang"},
                **({"qsfp": harness.qsfp_plan(node)} if node_count > 1 else {}),
                **harness.MODEL,
                **keys,
            }
        )
        for node in range(1, node_count + 1)
    }
    plans, _, _ = plan_sparks(sparks, Topology.of(sparks))
    return sparks, plans


def test_loopback_api_is_reached_through_an_ssh_tunnel():
    sparks, plans = planned()
    plan = plans["spark-1"]
    assert api_access(sparks["spark-1"], plan) == (
        f"API of {MODEL} on 127.0.0.1:{plan.port} of the Spark only (no API key): "
        f"ssh -N -L {plan.port}:127.0.0.1:{plan.port} nvidia@spark-1.local &  then  "
        f"curl http://127.0.0.1:{plan.port}/v1/models"
    )


def test_a_key_is_sent_from_the_laptops_variable_and_never_shown():
    sparks, plans = planned()
    plan = dataclasses.replace(plans["spark-1"], api_key=True, api_key_env="SPARK_API_KEY")
    line = api_access(sparks["spark-1"], plan)
    assert "(requires the API key in $SPARK_API_KEY)" in line
    assert line.endswith(
        f'curl -H "Authorization: Bearer $SPARK_API_KEY" http://127.0.0.1:{plan.port}/v1/models'
    )


def test_an_api_bound_to_every_interface_is_asked_at_the_sparks_address():
    sparks, plans = planned()
    plan = dataclasses.replace(plans["spark-1"], bind="0.0.0.0", api_key=False)
    assert api_access(sparks["spark-1"], plan) == (
        f"API of {MODEL} bound to 0.0.0.0:{plan.port} (no API key: engine.api_open): "
        f"curl http://spark-1.local:{plan.port}/v1/models"
    )


def test_a_non_default_ssh_port_is_in_the_tunnel():
    sparks, plans = planned(ssh_port=2222)
    assert " -p 2222 nvidia@spark-1.local &" in api_access(sparks["spark-1"], plans["spark-1"])


def test_only_the_head_of_a_pair_says_how_to_reach_the_api():
    sparks, plans = planned(2)
    assert api_access(sparks["spark-1"], plans["spark-1"]).startswith(f"API of {MODEL}")
    assert api_access(sparks["spark-2"], plans["spark-2"]) == ""


def test_the_tunnel_uses_the_inventorys_key_known_hosts_and_host_key_policy():
    """As printed it must connect as the deploy did: on the twins, without the key and the
    known-hosts file, ssh said "Host key verification failed." (operator session)."""
    sparks, plans = planned(
        ssh_port=52479,
        ssh_key="/work/op session/.twins/id_ed25519",
        ssh_known_hosts_file="~/twins/known_hosts",
        ssh_strict_host_key_checking="yes",
    )
    line = api_access(sparks["spark-1"], plans["spark-1"])
    port = plans["spark-1"].port
    assert (
        f"ssh -N -L {port}:127.0.0.1:{port} -i '/work/op session/.twins/id_ed25519' "
        "-o UserKnownHostsFile=~/twins/known_hosts -o StrictHostKeyChecking=yes "
        "-p 52479 nvidia@spark-1.local &  then  "
    ) in line


def test_the_default_host_key_policy_is_left_to_ssh_and_known_hosts():
    sparks, plans = planned(ssh_known_hosts_file="/k")
    line = api_access(sparks["spark-1"], plans["spark-1"])
    assert "-o UserKnownHostsFile=/k nvidia@spark-1.local &" in line
    assert "StrictHostKeyChecking" not in line and " -i " not in line
