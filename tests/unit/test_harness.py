"""The twin harness's pure parts: names, wiring and address plans of twins on a cable or a
switch (the Docker side is proven by tests/scenarios/test_switch.py)."""

from __future__ import annotations

import pytest

from tests.twins import harness
from tests.twins.__main__ import up_arguments


def test_spark_names_run_from_spark_a_up_to_eight():
    assert harness.spark_names(3) == ("spark-a", "spark-b", "spark-c")
    assert harness.spark_names(8)[-1] == "spark-h"
    for count in (0, 9):
        with pytest.raises(harness.HarnessError, match="1 to 8 Sparks"):
            harness.spark_names(count)


@pytest.mark.parametrize(
    ("count", "cable", "fabric", "wiring"),
    [
        (2, True, None, "cable"),  # today's default: a pair is cabled
        (2, False, None, None),
        (1, True, None, None),
        (3, True, None, None),  # three twins are not cabled unless asked for a switch
        (3, True, "switch", "switch"),
        (2, False, "switch", "switch"),
        (2, False, "cable", "cable"),
    ],
)
def test_choose_fabric(count, cable, fabric, wiring):
    assert harness.choose_fabric(count, cable, fabric) == wiring


def test_a_cable_joins_exactly_two():
    with pytest.raises(harness.HarnessError, match="joins two twins, not 3"):
        harness.choose_fabric(3, fabric="cable")


def test_the_demo_pair_keeps_its_inventory():
    """`make demo` still shows the pair it showed: host_data changes nothing for it."""
    assert harness.host_data(tuple(harness.DEMO_HOSTS), "cable") == harness.DEMO_HOSTS


def test_twins_on_a_switch_share_one_subnet_per_rail():
    hosts = harness.host_data(harness.spark_names(3), "switch")
    addresses = {name: [entry["address"] for entry in data["qsfp"]] for name, data in hosts.items()}
    assert addresses == {
        "spark-a": ["192.168.100.1/24", "192.168.101.1/24"],
        "spark-b": ["192.168.100.2/24", "192.168.101.2/24"],
        "spark-c": ["192.168.100.3/24", "192.168.101.3/24"],
    }
    assert [entry["interface"] for entry in hosts["spark-c"]["qsfp"]] == list(harness.RAILS)
    # spark-c is keyed like spark-b (model, engine, stand-in sysfs), and may not reboot
    assert {k: v for k, v in hosts["spark-c"].items() if k != "qsfp"} == {
        k: v for k, v in harness.DEMO_HOSTS["spark-b"].items() if k != "qsfp"
    }
    assert hosts["spark-a"]["allow_reboot"] is True


def test_the_rails_follow_the_order_of_the_names():
    hosts = harness.host_data(("spark-c", "spark-a"), "switch")
    assert hosts["spark-c"]["qsfp"] == harness.qsfp_plan(1)
    assert hosts["spark-a"]["qsfp"] == harness.qsfp_plan(2)


def test_unwired_twins_of_other_names_get_no_keys():
    assert harness.host_data(("solo",), None) == {"solo": {}}


def test_switch_ports_and_bridges_are_named_per_port_and_rail():
    assert harness.bridge_name(0) == "rail1"
    assert [harness.switch_port(port, rail) for port in (1, 8) for rail in (0, 1)] == [
        "p1r1",
        "p1r2",
        "p8r1",
        "p8r2",
    ]
    assert max(len(harness.switch_port(8, rail)) for rail in range(2)) <= 15  # IFNAMSIZ - 1


def test_a_switch_port_is_jumbo_until_set():
    switch = harness.Switch(container="c", mtu={(3, 0): 1500})
    assert switch.port_mtu(3, 0) == 1500
    assert switch.port_mtu(3, 1) == harness.JUMBO_MTU == 9000


def test_up_arguments():
    assert up_arguments([]) == (tuple(harness.DEMO_HOSTS), None)
    assert up_arguments(["--switch", "3"]) == (("spark-a", "spark-b", "spark-c"), "switch")
    for bad in (["--switch"], ["--switch", "x"], ["--pair"]):
        with pytest.raises(harness.HarnessError, match="usage"):
            up_arguments(bad)
