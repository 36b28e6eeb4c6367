"""The layout of one to eight Sparks (a pair cabled rail to rail, or Sparks through a switch)
and the address plan checked with the inventory: settings in, places and problems out."""

from __future__ import annotations

from typing import Any

from sparkdeploy.config.load import validate_document
from sparkdeploy.config.spark import SparkSettings
from sparkdeploy.config.topology import End, Topology

PATH = "inventory/sparks.yml"


def rails(node: int, subnets: tuple[int, ...] = (100, 101)) -> list[dict[str, Any]]:
    interfaces = ("enp1s0f0np0", "enP2p1s0f0np0")
    return [
        {"interface": interface, "address": f"192.168.{subnet}.{node}/24"}
        for interface, subnet in zip(interfaces, subnets)
    ]


def settings(count: int, **overrides: list[dict[str, Any]]) -> dict[str, SparkSettings]:
    return {
        f"spark-{node}": SparkSettings.model_validate(
            {"ssh_host": f"spark-{node}.local", "qsfp": overrides.get(f"spark-{node}", rails(node))}
        )
        for node in range(1, count + 1)
    }


def problems(count: int, **overrides: list[dict[str, Any]]) -> list[str]:
    document = {
        "defaults": {"ssh_user": "nvidia"},
        "sparks": {
            f"spark-{node}": {
                "ssh_host": f"spark-{node}.local",
                "qsfp": overrides.get(f"spark-{node}", rails(node)),
            }
            for node in range(1, count + 1)
        },
    }
    return validate_document(document, PATH)[1]


def test_one_spark_is_its_own_head_and_linked_to_nothing():
    place = Topology.of(settings(1))["spark-1"]
    assert (place.rank, place.nodes, place.head, place.head_ip) == (
        0,
        1,
        "spark-1",
        "192.168.100.1",
    )
    assert place.peer is None and place.members == ()
    assert not place.linked and not place.paired and not place.switched
    assert [rail.ends for rail in place.rails] == [(), ()]
    assert place.ping_ends(place.rails[0], "all") == ()


def test_a_pair_is_cabled_rail_to_rail_as_before():
    topology = Topology.of(settings(2))
    one, two = topology["spark-1"], topology["spark-2"]
    assert (one.peer, two.peer) == ("spark-2", "spark-1")
    assert one.paired and two.paired and one.linked and two.linked
    assert not one.switched
    assert one.members == two.members == ("192.168.100.1", "192.168.100.2")
    assert two.head_ip == "192.168.100.1" and two.rank == 1
    rail = two.rails[1]
    assert (rail.peer_interface, rail.peer_ip) == ("enP2p1s0f0np0", "192.168.101.1")
    assert rail.ends == (End("spark-1", "enP2p1s0f0np0", "192.168.101.1"),)
    for mode in ("head", "all"):  # a pair pings each other either way
        assert one.ping_ends(one.rails[0], mode) == (
            End("spark-2", "enp1s0f0np0", "192.168.100.2"),
        )
        assert two.ping_ends(two.rails[0], mode) == (
            End("spark-1", "enp1s0f0np0", "192.168.100.1"),
        )


def test_three_sparks_share_a_subnet_per_rail_and_ping_the_head_or_all():
    topology = Topology.of(settings(3))
    head, two, three = (topology[f"spark-{n}"] for n in (1, 2, 3))
    for place in (head, two, three):
        assert place.peer is None and not place.paired
        assert place.linked and place.switched and place.nodes == 3
        assert place.head == "spark-1" and place.head_ip == "192.168.100.1"
        assert place.members == ("192.168.100.1", "192.168.100.2", "192.168.100.3")
        assert all(rail.peer_ip == "" for rail in place.rails)
    assert [three.rank, two.rank] == [2, 1]
    assert three.rails[1].ends == (
        End("spark-1", "enP2p1s0f0np0", "192.168.101.1"),
        End("spark-2", "enP2p1s0f0np0", "192.168.101.2"),
    )
    assert [end.name for end in three.ping_ends(three.rails[1], "head")] == ["spark-1"]
    assert [end.name for end in three.ping_ends(three.rails[1], "all")] == ["spark-1", "spark-2"]
    assert [end.ip for end in head.ping_ends(head.rails[0], "head")] == [
        "192.168.100.2",
        "192.168.100.3",
    ]


def test_eight_sparks_through_a_switch():
    topology = Topology.of(settings(8))
    last = topology["spark-8"]
    assert (last.rank, last.nodes, last.head) == (7, 8, "spark-1")
    assert len(last.members) == 8 and last.members[7] == "192.168.100.8"
    assert [end.name for end in last.rails[0].ends] == [f"spark-{n}" for n in range(1, 8)]
    assert problems(8) == []


def test_nine_sparks_are_refused_saying_how_many_may_be():
    assert problems(9) == [
        f"{PATH}: sparks: 9 hosts given; this project prepares one Spark, a pair cabled to "
        "each other, or up to 8 Sparks through a switch (8 at most): give each group of "
        "Sparks that serves one model its own inventory"
    ]


def test_a_ring_of_three_with_a_subnet_per_cable_is_refused_naming_the_fix():
    ring = problems(3, **{"spark-3": rails(3, (102, 103))})
    assert ring == [
        f"{PATH}: host 'spark-3', key 'qsfp', rail {n}, 'address': 192.168.{s}.3/24 is not in "
        f"192.168.{h}.0/24, the subnet of rail {n} on host 'spark-1' (192.168.{h}.1/24); "
        "through a switch, rail N of every Spark is in one subnet. Three or more Sparks "
        "cabled to each other (a ring, one subnet per cable) are not supported: connect them "
        f"through a switch and give rail {n} of every Spark an address in 192.168.{h}.0/24"
        for n, s, h in ((1, 102, 100), (2, 103, 101))
    ]


def test_an_address_used_twice_among_three_names_its_owner():
    twice = problems(3, **{"spark-3": [rails(3)[0], {**rails(2)[1]}]})
    assert twice == [
        f"{PATH}: host 'spark-3', key 'qsfp', rail 2, 'address': 192.168.101.2 is also the "
        "address of host 'spark-2' on rail 2; each Spark needs its own address"
    ]


def test_every_spark_of_a_switch_lists_the_same_rails():
    fewer = problems(4, **{"spark-3": rails(3)[:1], "spark-4": []})
    assert fewer == [
        f"{PATH}: host 'spark-{n}', key 'qsfp': {count} rail(s), but host 'spark-1' has 2; "
        "rail N of every Spark is on the switch in one subnet, so list the same number of "
        "rails on every Spark (or none on any)"
        for n, count in ((3, 1), (4, 0))
    ]
    assert problems(3, **{f"spark-{n}": [] for n in (1, 2, 3)}) == []  # no fabric at all


def test_the_pair_messages_stay_those_of_a_cable():
    [mismatch] = problems(2, **{"spark-2": rails(2, (100, 201))})
    assert mismatch.endswith("the subnet of rail 2 on host 'spark-1' (192.168.101.1/24); both "
                             "ends of a rail share one subnet")  # fmt: skip
