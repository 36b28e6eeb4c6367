"""
The twins' QSFP switch, proven with no deploy logic: three twins on it, their rails addressed
by hand with nmcli as the inventory plans them (harness.qsfp_plan), then jumbo-frame pings
between every two twins on every rail; a switch port held to MTU 1500 stops jumbo frames to
its Spark and passes ordinary ones; a rebooted twin is plugged in again with its port as it was.
"""

from __future__ import annotations

import itertools

import pytest

from tests.twins import harness

pytestmark = pytest.mark.twins

JUMBO = 8972  # 9000 less the IPv4 (20) and ICMP (8) headers
SMALL = 1400  # fits a 1500-byte port


def rail_ip(twin: harness.Twin, rail: int) -> str:
    return twin.data["qsfp"][rail]["address"].split("/")[0]


def address_rails(twin: harness.Twin) -> None:
    """NetworkManager profiles for the twin's rails from its inventory keys, MTU 9000."""
    for entry in twin.data["qsfp"]:
        ifname, address = entry["interface"], entry["address"]
        twin.exec(
            f"nmcli connection add type ethernet con-name test-{ifname} ifname {ifname}"
            f" ipv4.method manual ipv4.addresses {address} ipv6.method disabled"
            f" 802-3-ethernet.mtu {harness.JUMBO_MTU} && nmcli connection up test-{ifname}"
        )


def ping(source: harness.Twin, target: harness.Twin, rail: int, size: int) -> bool:
    """A don't-fragment ping of `size` payload bytes from `source` to `target` on `rail`."""
    done = source.exec(
        f"ping -n -c 2 -i 0.2 -W 2 -M do -s {size} -I {harness.RAILS[rail]} {rail_ip(target, rail)}",
        check=False,
    )
    return done.returncode == 0


def switch_links(switch: harness.Switch) -> dict[str, tuple[str, int]]:
    """The switch's ports: name -> (bridge, MTU), read from its network namespace."""
    links = {}
    for line in switch.ip("-o", "link", "show").stdout.splitlines():
        fields = line.split()
        name = fields[1].rstrip(":").split("@")[0]
        mtu = int(fields[fields.index("mtu") + 1])
        master = fields[fields.index("master") + 1] if "master" in fields else ""
        links[name] = (master, mtu)
    return links


def all_pairs(twins: dict[str, harness.Twin]):
    return itertools.permutations(twins.values(), 2)


class TestSwitch:
    def test_the_switch_has_a_bridge_per_rail_and_a_port_per_twin_and_rail(self, switch_trio):
        switch = switch_trio.switch
        assert switch is not None
        assert switch.ports == {"spark-a": 1, "spark-b": 2, "spark-c": 3}
        links = switch_links(switch)
        expected = {
            "lo": ("", 65536),
            "rail1": ("", 9000),
            "rail2": ("", 9000),
            **{f"p{port}r{rail}": (f"rail{rail}", 9000) for port in (1, 2, 3) for rail in (1, 2)},
        }
        assert links == expected
        for twin in switch_trio.twins.values():
            address_rails(twin)
        for twin in switch_trio.twins.values():
            harness.wait_for(lambda twin=twin: harness.rails_connected(twin), twin.name, 60)

    def test_jumbo_frames_pass_between_every_two_twins_on_every_rail(self, switch_trio):
        failed = [
            (a.name, b.name, rail + 1)
            for a, b in all_pairs(switch_trio.twins)
            for rail in range(len(harness.RAILS))
            if not ping(a, b, rail, JUMBO)
        ]
        assert failed == []

    def test_a_port_at_mtu_1500_stops_jumbo_frames_to_its_twin_only(self, switch_trio):
        twins = switch_trio.twins
        a, b, c = twins["spark-a"], twins["spark-b"], twins["spark-c"]
        harness.set_port_mtu(switch_trio.switch, c, 1500, rail=0)
        assert switch_links(switch_trio.switch)["p3r1"] == ("rail1", 1500)
        for source in (a, b):
            assert not ping(source, c, 0, JUMBO), f"{source.name} -> spark-c rail 1"
            assert not ping(c, source, 0, JUMBO), f"spark-c -> {source.name} rail 1"
            assert ping(source, c, 0, SMALL), f"{source.name} -> spark-c rail 1, {SMALL}"
            assert ping(source, c, 1, JUMBO), f"{source.name} -> spark-c rail 2"
        assert ping(a, b, 0, JUMBO) and ping(b, a, 0, JUMBO)

    def test_a_rebooted_twin_is_plugged_in_again_with_its_port_as_it_was(self, switch_trio):
        twins = switch_trio.twins
        a, c = twins["spark-a"], twins["spark-c"]
        restarts = harness.reboot_count(c)
        c.exec("systemctl reboot", check=False)
        harness.wait_for(lambda: harness.reboot_count(c) > restarts, "spark-c to reboot")
        harness.wait_booted(c)
        assert not harness.rails_connected(c)  # the cables went with the old namespace
        harness.replug(list(twins.values()))
        assert switch_links(switch_trio.switch)["p3r1"] == ("rail1", 1500)
        assert not ping(a, c, 0, JUMBO)
        assert ping(a, c, 0, SMALL)
        assert ping(a, c, 1, JUMBO)
        harness.set_port_mtu(switch_trio.switch, c, harness.JUMBO_MTU)
        failed = [
            (x.name, y.name, rail + 1)
            for x, y in all_pairs(twins)
            for rail in range(len(harness.RAILS))
            if not ping(x, y, rail, JUMBO)
        ]
        assert failed == []
