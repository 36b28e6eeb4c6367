"""Three and four Sparks in a ring (qsfp_topology: ring): NVIDIA's three-Spark cabling and
addresses, eugr's four-node ring, the refusals with their fixes, the places each Spark gets
(one neighbour per rail, the head met on the management network), the NCCL settings of a
ring and the engine layouts it allows. Settings in, places, problems and files out."""

from __future__ import annotations

from typing import Any

import pytest

from sparkdeploy.config.load import validate_document
from sparkdeploy.config.spark import SparkSettings
from sparkdeploy.config.topology import End, Topology
from sparkdeploy.deploys.qsfp.cabling import cabling_fix
from sparkdeploy.deploys.qsfp.guard import guard_of
from sparkdeploy.deploys.qsfp.nccl_env import nccl_env
from sparkdeploy.deploys.qsfp.network import own_table, wanted
from sparkdeploy.engine_plan.linktest import min_busbw
from sparkdeploy.engine_plan.plan import plan_sparks
from sparkdeploy.facts.network import Link, Network, Ping, QsfpNetwork, RingNeighbours
from sparkdeploy.facts.roce import Gid, RailGid
from sparkdeploy.reports.status import explained_by, rail_rows
from tests.twins.harness import ring_plan

PATH = "inventory/sparks.yml"
MANAGEMENT = "10.0.0.{}"


def hosts(count: int, **per_host: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        f"spark-{node}": {
            "ssh_host": MANAGEMENT.format(node),
            "qsfp": ring_plan(node, count),
            **per_host.get(f"spark_{node}", {}),
        }
        for node in range(1, count + 1)
    }


def problems(count: int, defaults: dict[str, Any] | None = None, **per_host) -> list[str]:
    document = {
        "defaults": {"ssh_user": "nvidia", "qsfp_topology": "ring", **(defaults or {})},
        "sparks": hosts(count, **per_host),
    }
    return validate_document(document, PATH)[1]


def ring(count: int, **keys: Any) -> dict[str, SparkSettings]:
    return {
        name: SparkSettings.model_validate({"qsfp_topology": "ring", **data, **keys})
        for name, data in hosts(count).items()
    }


def test_nvidias_three_spark_ring_is_accepted_as_the_playbook_addresses_it():
    assert problems(3) == []
    places = Topology.of(ring(3))
    one = places["spark-1"]
    assert one.ringed and not one.switched and not one.paired and one.linked
    # Node1 Port0 to Node2 Port1, Node3 Port0 to Node1 Port1; the n-th logical interface of
    # one port linked to the n-th of the other.
    assert [(rail.interface, rail.port, rail.ends) for rail in one.rails] == [
        ("enp1s0f0np0", 0, (End("spark-2", "enp1s0f1np1", "192.168.0.3"),)),
        ("enP2p1s0f0np0", 0, (End("spark-2", "enP2p1s0f1np1", "192.168.0.4"),)),
        ("enp1s0f1np1", 1, (End("spark-3", "enp1s0f0np0", "192.168.1.3"),)),
        ("enP2p1s0f1np1", 1, (End("spark-3", "enP2p1s0f0np0", "192.168.1.4"),)),
    ]
    assert [(c.a, c.b) for c in one.cables] == [
        ("spark-1", "spark-2"), ("spark-2", "spark-3"), ("spark-3", "spark-1"),
    ]  # fmt: skip
    # Every rail is pinged, on every Spark, whatever qsfp_proof says: its one neighbour.
    two = places["spark-2"]
    assert [two.ping_ends(rail, "head") for rail in two.rails] == [rail.ends for rail in two.rails]
    # The head is met on the management network, not on a rail another Spark may not reach.
    assert (one.head_ip, two.head_ip) == ("10.0.0.1", "10.0.0.1")
    assert (two.meet_interface, two.meet_address) == ("enP7s7", "10.0.0.2")
    assert two.members == ()


def test_eugrs_four_spark_ring_with_a_subnet_per_logical_link_is_accepted():
    assert problems(4) == []
    four = Topology.of(ring(4))["spark-4"]
    assert [end for rail in four.rails for end in rail.ends] == [
        End("spark-1", "enp1s0f1np1", "10.20.6.11"),
        End("spark-1", "enP2p1s0f1np1", "10.20.7.11"),
        End("spark-3", "enp1s0f0np0", "10.20.4.13"),
        End("spark-3", "enP2p1s0f0np0", "10.20.5.13"),
    ]


def test_one_logical_interface_per_port_is_enough():
    only_first = {f"spark_{node}": {"qsfp": ring_plan(node, 3)[0::2]} for node in (1, 2, 3)}
    assert problems(3, **only_first) == []


@pytest.mark.parametrize("count", [2, 5])
def test_a_ring_is_three_or_four_sparks(count):
    (problem,) = problems(count)
    assert "qsfp_topology': ring with" in problem and "three or four Sparks" in problem
    assert "set qsfp_topology: auto" in problem


def test_every_spark_says_ring_or_none_does():
    document = {
        "defaults": {"ssh_user": "nvidia"},
        "sparks": {
            name: {**data, **({"qsfp_topology": "ring"} if name != "spark-4" else {})}
            for name, data in hosts(4).items()
        },
    }
    assert validate_document(document, PATH)[1] == [
        f"{PATH}: host 'spark-4', key 'qsfp_topology': auto, but spark-1, spark-2, spark-3 say "
        "ring; a ring is a layout of all the Sparks: set qsfp_topology: ring under defaults"
    ]


def test_a_link_whose_ends_are_in_different_subnets_is_refused_with_the_address_to_give():
    wrong = ring_plan(2, 3)
    wrong[2] = {"interface": "enp1s0f1np1", "address": "192.168.9.3/24"}
    assert problems(3, spark_2={"qsfp": wrong}) == [
        f"{PATH}: host 'spark-2', key 'qsfp', 'enp1s0f1np1': 192.168.9.3/24 is not in "
        "192.168.0.0/24, the subnet of spark-1's enp1s0f0np0 (192.168.0.1/24) at the other "
        "end of cable 1 (spark-1 port 0 to spark-2 port 1); both ends of a link share a "
        "subnet: give enp1s0f1np1 an address in 192.168.0.0/24"
    ]


def test_two_cables_in_one_subnet_are_refused():
    # Cable 3 (spark-3 port 0 to spark-4 port 1) given cable 1's subnets.
    three, four = ring_plan(3, 4), ring_plan(4, 4)
    for i in (0, 1):
        three[i]["address"] = f"10.20.{i}.33/24"
        four[2 + i]["address"] = f"10.20.{i}.44/24"
    found = problems(4, spark_3={"qsfp": three}, spark_4={"qsfp": four})
    assert found == [
        f"{PATH}: key 'qsfp': cable 3 (spark-3 port 0 to spark-4 port 1) uses {net}, which "
        "overlaps a subnet of cable 1 (spark-1 port 0 to spark-2 port 1); give each cable "
        "subnets of its own"
        for net in ("10.20.0.0/24", "10.20.1.0/24")
    ]


def test_an_interface_of_no_known_port_and_uneven_ends_are_refused():
    odd = ring_plan(1, 3)[:3] + [{"interface": "qsfp9", "address": "192.168.7.2/24"}]
    found = problems(3, spark_1={"qsfp": odd})
    assert found == [
        f"{PATH}: host 'spark-1', key 'qsfp', rail 4 (qsfp9): its QSFP port is not in its "
        "name (ConnectX-7 names end in np0 or np1); set port: 0 or port: 1"
    ]
    odd[3] = {"interface": "qsfp9", "address": "192.168.1.2/24", "port": 1}
    assert problems(3, spark_1={"qsfp": odd}) == []
    assert problems(3, spark_1={"qsfp": ring_plan(1, 3)[:3]}) == [
        f"{PATH}: key 'qsfp': cable 3 (spark-3 port 0 to spark-1 port 1): spark-3 lists 2 "
        "interface(s) on port 0 and spark-1 1 on port 1; list as many at both ends (the "
        "n-th on one end is linked to the n-th on the other)"
    ]


def test_a_port_with_no_interface_names_the_neighbour_it_is_cabled_to():
    found = problems(3, spark_3={"qsfp": ring_plan(3, 3)[2:]})
    assert (
        f"{PATH}: host 'spark-3', key 'qsfp': 0 interface(s) on port 0, which is cabled to "
        "spark-1; list one or both of its two logical interfaces"
    ) in found


def test_only_one_port_may_share_a_subnet_between_its_two_interfaces():
    spread = ring_plan(1, 3)
    spread[2] = {"interface": "enp1s0f1np1", "address": "192.168.0.9/24"}
    (problem, *_) = problems(3, spark_1={"qsfp": spread})
    assert "share a subnet" in problem and "only the two interfaces of one port" in problem
    assert "host 'spark-1', key 'qsfp'" in problem


def test_the_engines_need_a_management_address_the_others_reach():
    found = problems(3, spark_2={"ssh_host": "spark-2.local"}, spark_3={"ssh_host": "127.0.0.1"})
    assert [problem.split(": unset")[0] for problem in found] == [
        f"{PATH}: host 'spark-2', key 'management_address'",
        f"{PATH}: host 'spark-3', key 'management_address'",
    ]
    assert "set management_address to spark-2's address on enP7s7" in found[0]
    given = {"management_address": "10.0.0.12"}
    assert problems(3, spark_2={"ssh_host": "spark-2.local", **given}) == []


def test_the_management_interface_may_not_be_a_rail():
    own = ring_plan(1, 3)
    found = problems(3, spark_1={"management_interface": "enp1s0f0np0", "qsfp": own})
    assert found == [
        f"{PATH}: host 'spark-1', key 'qsfp', rail 1: enp1s0f0np0 is the management "
        "interface (management_interface), where the engines of a ring meet; list only the "
        "QSFP interfaces"
    ]


def found_gids(place) -> list[RailGid]:
    devices = ("rocep1s0f0", "roceP2p1s0f0", "rocep1s0f1", "roceP2p1s0f1")
    return [
        RailGid(rail.interface, rail.ip, Gid(dev, 1, 3, "", "RoCE v2", rail.interface), [dev])
        for rail, dev in zip(place.rails, devices)
    ]


@pytest.mark.parametrize("count", [3, 4])
def test_the_engine_environment_lists_every_device_and_the_ring_settings(count):
    place = Topology.of(ring(count))["spark-2"]
    text = nccl_env(place, found_gids(place))
    lines = [line for line in text.splitlines() if not line.startswith("#")]
    assert "NCCL_IB_HCA=rocep1s0f0,roceP2p1s0f0,rocep1s0f1,roceP2p1s0f1" in lines
    assert "NCCL_IB_SUBNET_AWARE_ROUTING=1" in lines and "NCCL_IB_MERGE_NICS=0" in lines
    assert ("NCCL_ALGO=Ring" in lines) == (count == 4)  # a three-ring is a full mesh
    assert "SPARK_HEAD_ADDR=10.0.0.1" in lines and "SPARK_NODE_ADDR=10.0.0.2" in lines


def test_the_fabric_guard_admits_the_neighbours_and_the_others_management_addresses():
    sparks = ring(4)
    guard = guard_of(sparks["spark-1"], Topology.of(sparks)["spark-1"], None)
    assert guard is not None
    assert set(guard.peers) == {
        "10.20.0.12", "10.20.1.12", "10.20.6.14", "10.20.7.14",
        "10.0.0.2", "10.0.0.3", "10.0.0.4",
    }  # fmt: skip


def plan_ring(count: int, engine: dict[str, Any]):
    sparks = ring(count, model_repo="Qwen/Qwen3-0.6B", engine=engine, ssh_user="nvidia")
    return plan_sparks(sparks, Topology.of(sparks))


def test_sglang_across_a_ring_meets_the_head_on_the_management_network():
    plans, found, _ = plan_ring(3, {"name": "sglang"})
    assert found == []
    argv = list(plans["spark-3"].main.command)
    assert argv[argv.index("--dist-init-addr") + 1].startswith("10.0.0.1:")
    assert argv[argv.index("--tensor-parallel-size") + 1] == "3"
    env = dict(plans["spark-3"].env)
    assert env["NCCL_SOCKET_IFNAME"] == env["GLOO_SOCKET_IFNAME"] == "enP7s7"
    assert env["SGLANG_HOST_IP"] == "10.0.0.3"


def test_four_sparks_in_a_ring_refuse_a_mixed_layout_and_warn_about_ray():
    _, found, _ = plan_ring(4, {"name": "sglang", "args": {"--tp-size": 2, "--pp-size": 2}})
    assert found and all("share no cable" in problem for problem in found)
    plans, found, _ = plan_ring(4, {"name": "vllm", "args": {"--tensor-parallel-size": 4}})
    assert found == [] and len(plans) == 4
    _, found, said = plan_ring(
        4, {"name": "vllm", "args": {"--distributed-executor-backend": "ray"}}
    )
    assert found == [] and any("Ray" in warning and "ring" in warning for warning in said)
    _, found, _ = plan_ring(3, {"name": "sglang", "args": {"--tp-size": 1, "--pp-size": 3}})
    assert found == []


# -- the cabling the probes found, and the fix ----------------------------------------------


def test_a_ring_cabled_as_the_inventory_says_needs_no_fix():
    cables = Topology.of(ring(3))["spark-1"].cables
    seen = {("spark-1", 0): ("spark-2", 1), ("spark-2", 1): ("spark-1", 0)}
    assert cabling_fix(cables, seen) == []


def test_two_cables_swapped_at_one_spark_are_named_with_the_exchange_to_make():
    cables = Topology.of(ring(3))["spark-1"].cables
    # The cable meant for spark-1's port 0 is in its port 1, and the other way round.
    seen = {
        ("spark-1", 1): ("spark-2", 1), ("spark-2", 1): ("spark-1", 1),
        ("spark-2", 0): ("spark-3", 1), ("spark-3", 1): ("spark-2", 0),
        ("spark-3", 0): ("spark-1", 0), ("spark-1", 0): ("spark-3", 0),
    }  # fmt: skip
    assert cabling_fix(cables, seen) == [
        "the ring is miscabled (spark-1 port 0 is cabled to spark-3 port 0; spark-1 port 1 "
        "is cabled to spark-2 port 1): exchange the cables in spark-1 port 0 and spark-1 "
        "port 1, so that port 0 of each Spark goes to port 1 of the next in inventory order "
        "(spark-1 port 0 to spark-2 port 1, spark-2 port 0 to spark-3 port 1, spark-3 port 0 "
        "to spark-1 port 1)"
    ]


def test_two_cables_exchanged_between_sparks_of_a_four_ring_are_named_too():
    cables = Topology.of(ring(4))["spark-1"].cables
    # spark-2 port 1 and spark-4 port 1 exchanged their cables; exchanging the far ends of
    # those two cables (spark-1 port 0 and spark-3 port 0) mends it as well, and comes first.
    wired = {
        (("spark-1", 0), ("spark-4", 1)), (("spark-2", 0), ("spark-3", 1)),
        (("spark-3", 0), ("spark-2", 1)), (("spark-4", 0), ("spark-1", 1)),
    }  # fmt: skip
    seen = dict(wired) | {far: near for near, far in wired}
    (fix,) = cabling_fix(cables, seen)
    assert "exchange the cables in spark-1 port 0 and spark-3 port 0" in fix


def test_a_cabling_no_single_exchange_fixes_lists_what_the_ring_needs():
    cables = Topology.of(ring(4))["spark-1"].cables
    seen = {("spark-1", 0): ("spark-3", 0), ("spark-2", 0): ("spark-4", 0)}
    (fix,) = cabling_fix(cables, seen)
    assert fix.startswith("the ring is miscabled (spark-1 port 0 is cabled to spark-3 port 0")
    assert fix.endswith("spark-4 port 0 to spark-1 port 1")


def test_the_second_interface_of_a_port_in_its_cables_subnet_gets_a_table_of_its_own():
    rails = ring(3)["spark-1"].qsfp  # NVIDIA's: both interfaces of a port in one /24
    assert [own_table(rail, rails) for rail in rails] == [0, 20002, 0, 20004]
    wanted_second = wanted(rails[1], 20002)
    assert wanted_second["ipv4.route-table"] == "20002"
    assert wanted_second["ipv4.routing-rules"] == "priority 20002 from 192.168.0.2 table 20002"
    eugr = ring(4)["spark-1"].qsfp  # one /24 per logical link: the main table serves all
    assert [own_table(rail, eugr) for rail in eugr] == [0, 0, 0, 0]
    # a profile left with a table of its own goes back to the main table
    back = wanted(eugr[1], 0, {"ipv4.route-table": "20002"})
    assert (back["ipv4.route-table"], back["ipv4.routing-rules"]) == ("0", "")
    assert "ipv4.route-table" not in wanted(eugr[1], 0, {"ipv4.route-table": "0"})


def test_the_probe_flushes_asks_every_address_then_reads_who_answered():
    probe = RingNeighbours()
    command = probe.command([("enp1s0f0np0", ["192.168.0.3", "192.168.2.1"])])
    lines = command.splitlines()
    assert lines[0] == "ip -4 neigh flush dev enp1s0f0np0 2>/dev/null"
    assert "ping -n -q -c 1 -W 1 -I enp1s0f0np0 192.168.2.1 >/dev/null 2>&1 &" in lines
    assert lines.index("wait") < lines.index(
        "ip -o -4 neigh show dev enp1s0f0np0 2>/dev/null | sed 's/^/neigh.enp1s0f0np0=/'"
    )
    assert probe.process(
        [
            "neigh.enp1s0f0np0=192.168.2.1 lladdr 3c:6d:66:cc:b3:b7 REACHABLE",
            "neigh.enp1s0f0np0=192.168.0.3  FAILED",
        ]
    ) == {"enp1s0f0np0": (("192.168.2.1", "3c:6d:66:cc:b3:b7"),)}


def test_status_has_a_row_per_cable_with_its_logical_links():
    sparks = ring(3)
    place = Topology.of(sparks)["spark-2"]
    links = {
        rail.interface: Link(rail.interface, 9000, True, (rail.address,))
        for rail in sparks["spark-2"].qsfp
    }
    profiles = {
        f"qsfp-{rail.interface}": {"GENERAL.STATE": "activated"} for rail in sparks["spark-2"].qsfp
    }
    devices = {
        rail.interface: {"GENERAL.CONNECTION": f"qsfp-{rail.interface}"}
        for rail in sparks["spark-2"].qsfp
    }
    pings = {
        (rail.interface, rail.ends[0].ip): Ping(
            rail.interface, rail.interface != "enP2p1s0f1np1", ""
        )
        for rail in place.rails
    }
    facts = Network(True, "", (), (), links, devices, profiles, (), pings, (), "")
    rows = rail_rows(sparks["spark-2"], place.rails, facts)
    assert [(row.check, row.state) for row in rows] == [("cable 2", "ok"), ("cable 1", "FAIL")]
    assert "ping to spark-3 192.168.2.3 ok" in rows[0].detail
    assert (
        "enp1s0f1np1" in rows[1].detail and "ping to spark-1 192.168.0.2 FAILED" in rows[1].detail
    )
    assert "deploy.py --limit spark-2 --dry" in explained_by("cable 1", "spark-2")


def test_the_link_test_of_a_ring_is_judged_by_nvidias_ring_threshold_unless_given():
    sparks = ring(3)
    place = Topology.of(sparks)["spark-1"]
    assert min_busbw(sparks["spark-1"], place) == 10.0  # MIN_NCCL_TEST_BW_RING
    given = ring(3, link_test_min_busbw=21.875)
    assert min_busbw(given["spark-1"], Topology.of(given)["spark-1"]) == 21.875


def test_the_cabling_is_probed_once_per_spark_however_many_proofs_failed():
    from pyinfra.context import ctx_host, ctx_state

    from sparkdeploy.deploys.qsfp.proof import ring_cabling
    from tests.unit.operations import given, sparks

    hosts = sparks(
        **{
            f"spark-{node}": {
                "qsfp": ring_plan(node, 3),
                "qsfp_topology": "ring",
                "management_address": f"10.0.0.{node}",
            }
            for node in (1, 2, 3)
        }
    )
    mac = {}  # (Spark, interface) -> its MAC, as each Spark's own network fact shows it
    for number, (name, host) in enumerate(hosts.items(), start=1):
        links = {}
        for index, rail in enumerate(host.data.spark.qsfp):
            mac[(name, rail.interface)] = f"02:00:00:00:0{number}:0{index}"
            links[rail.interface] = Link(
                rail.interface, 9000, True, (), mac[(name, rail.interface)]
            )
        given(host, QsfpNetwork, Network(True, "", (), (), links, {}, {}, (), {}, (), ""))
    # spark-1's two cables in each other's ports: its port 0 reaches spark-3's port 0
    answers = {
        "spark-1": {"enp1s0f0np0": mac[("spark-3", "enp1s0f0np0")],
                    "enp1s0f1np1": mac[("spark-2", "enp1s0f1np1")]},
        "spark-2": {"enp1s0f0np0": mac[("spark-3", "enp1s0f1np1")],
                    "enp1s0f1np1": mac[("spark-1", "enp1s0f1np1")]},
        "spark-3": {"enp1s0f1np1": mac[("spark-2", "enp1s0f0np0")],
                    "enp1s0f0np0": mac[("spark-1", "enp1s0f0np0")]},
    }  # fmt: skip
    probed: list[str] = []
    for name, host in hosts.items():

        def probe(fact, name=name, **arguments):
            assert fact is RingNeighbours
            probed.append(name)
            return {i: (("192.0.2.1", m),) for i, m in answers[name].items()}

        host.get_fact = probe  # type: ignore[method-assign,assignment]
    said = []
    for name in ("spark-1", "spark-3"):  # two Sparks' proofs failed
        with ctx_state.use(hosts[name].state), ctx_host.use(hosts[name]):
            said.append(ring_cabling(hosts[name]))
    assert sorted(probed) == ["spark-1", "spark-2", "spark-3"]  # each Spark asked once
    assert said[0] == said[1]
    assert "exchange the cables in spark-1 port 0 and spark-1 port 1" in said[0][0]
