"""The network fact's parsing, the nmcli plan per rail, the refusals, the ping proof's
message and the engine environment, on fact output recorded on a twin."""

from __future__ import annotations

import dataclasses

from sparkdeploy.config.spark import QsfpInterface, SparkSettings
from sparkdeploy.config.topology import Topology
from sparkdeploy.deploys.qsfp.nccl_env import nccl_env
from sparkdeploy.deploys.qsfp.network import profile_commands, refusals
from sparkdeploy.deploys.qsfp.proof import proof
from sparkdeploy.facts.network import QsfpNetwork
from sparkdeploy.facts.roce import Gid, RailGid, check_gids

PROFILE = "profile.qsfp-enp1s0f0np0="
CONVERGED = f"""\
nm=running
ssh=172.17.0.1 51612 172.17.0.4 22
ssh_dev=eth0
ssh_dev=eth0
default_dev=eth0
link=1: lo: <LOOPBACK,UP,LOWER_UP> mtu 65536 qdisc noqueue state UNKNOWN mode DEFAULT
link=144: eth0@if145: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 qdisc noqueue state UP
link=149: enp1s0f0np0@if148: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 9000 qdisc noqueue state UP
link=151: enP2p1s0f0np0@if150: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 9000 qdisc noqueue state UP
addr=1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever preferred_lft forever
addr=144: eth0    inet 172.17.0.4/16 brd 172.17.255.255 scope global eth0\\       valid_lft
addr=149: enp1s0f0np0    inet 192.168.100.1/24 brd 192.168.100.255 scope global noprefixroute
addr=151: enP2p1s0f0np0    inet 192.168.101.1/24 brd 192.168.101.255 scope global noprefixroute
nmdev.enp1s0f0np0=GENERAL.STATE:100 (connected)
nmdev.enp1s0f0np0=GENERAL.CONNECTION:qsfp-enp1s0f0np0
{PROFILE}connection.uuid:942e6266-a7c9-431c-895a-ceaf3c7bd043
{PROFILE}connection.interface-name:enp1s0f0np0
{PROFILE}connection.autoconnect:yes
{PROFILE}ipv4.method:manual
{PROFILE}ipv4.addresses:192.168.100.1/24
{PROFILE}802-3-ethernet.mtu:9000
{PROFILE}ipv6.method:disabled
{PROFILE}GENERAL.STATE:activated
nmdev.enP2p1s0f0np0=GENERAL.STATE:30 (disconnected)
nmdev.enP2p1s0f0np0=GENERAL.CONNECTION:
netplan=/etc/netplan/40-cx7.yaml:enp1s0f0np0
netplan=/etc/netplan/90-NM-942e6266-a7c9-431c-895a-ceaf3c7bd043.yaml:enp1s0f0np0
ping.enp1s0f0np0@192.168.100.2=0 2 packets transmitted, 2 received, 0% packet loss, time 201ms
ping.enP2p1s0f0np0@192.168.101.2=1 2 packets transmitted, 0 received, 100% packet loss, time 204ms
gid=/sys/class/infiniband/rocep1s0f0/ports/1/gids/3:0000:0000:0000:0000:0000:ffff:c0a8:6401
gid=/sys/class/infiniband/rocep1s0f0/ports/1/gid_attrs/types/3:RoCE v2
gid=/sys/class/infiniband/rocep1s0f0/ports/1/gid_attrs/ndevs/3:enp1s0f0np0
gid=/sys/class/infiniband/roceP2p1s0f0/ports/1/gids/3:0000:0000:0000:0000:0000:ffff:c0a8:6501
gid=/sys/class/infiniband/roceP2p1s0f0/ports/1/gid_attrs/types/3:RoCE v2
gid=/sys/class/infiniband/roceP2p1s0f0/ports/1/gid_attrs/ndevs/3:enP2p1s0f0np0
env_sha256=
""".splitlines()
RAIL_1 = QsfpInterface(interface="enp1s0f0np0", address="192.168.100.1/24")
RAIL_2 = QsfpInterface(interface="enP2p1s0f0np0", address="192.168.101.1/24")


def facts(lines=CONVERGED, drop: str = "", add: tuple[str, ...] = ()):
    return QsfpNetwork().process(
        [line for line in lines if not (drop and drop in line)] + list(add)
    )


def found_gid(rail: RailGid) -> Gid:
    """The RoCE v2 GID found for a rail, which these facts have."""
    assert rail.gid is not None, f"no RoCE v2 GID found for {rail.interface}"
    return rail.gid


def settings(node: int = 1, **keys) -> SparkSettings:
    rails = [
        {"interface": "enp1s0f0np0", "address": f"192.168.100.{node}/24"},
        {"interface": "enP2p1s0f0np0", "address": f"192.168.101.{node}/24"},
    ]
    return SparkSettings.model_validate({"ssh_host": f"spark-{node}", "qsfp": rails, **keys})


def test_fact_parsing():
    parsed = facts()
    assert parsed.nmcli is True
    assert parsed.ssh_connection == "172.17.0.1 51612 172.17.0.4 22"
    assert parsed.ssh_devs == ("eth0",) and parsed.default_devs == ("eth0",)
    assert parsed.links["enp1s0f0np0"].mtu == 9000
    assert parsed.links["enP2p1s0f0np0"].addresses == ("192.168.101.1/24",)
    assert parsed.links["eth0"].up
    assert parsed.devices["enP2p1s0f0np0"] == {
        "GENERAL.STATE": "30 (disconnected)",
        "GENERAL.CONNECTION": "",
    }
    assert parsed.profiles["qsfp-enp1s0f0np0"]["ipv4.addresses"] == "192.168.100.1/24"
    assert "qsfp-enP2p1s0f0np0" not in parsed.profiles
    assert parsed.pings[("enp1s0f0np0", "192.168.100.2")].ok
    assert not parsed.pings[("enP2p1s0f0np0", "192.168.101.2")].ok
    assert [(g.dev, g.index, g.type) for g in parsed.gids] == [
        ("roceP2p1s0f0", 3, "RoCE v2"),
        ("rocep1s0f0", 3, "RoCE v2"),
    ]
    assert parsed.env_sha256 == ""


def test_converged_rail_needs_nothing():
    assert profile_commands(RAIL_1, facts()) == []


def test_missing_profile_is_added_then_brought_up():
    assert profile_commands(RAIL_2, facts()) == [
        "nmcli connection add type ethernet con-name qsfp-enP2p1s0f0np0 "
        "connection.interface-name enP2p1s0f0np0 connection.autoconnect yes ipv4.method manual "
        "ipv4.addresses 192.168.101.1/24 802-3-ethernet.mtu 9000 ipv6.method disabled",
        "nmcli connection up qsfp-enP2p1s0f0np0",
    ]


def test_only_the_properties_that_differ_are_modified():
    changed = facts(
        add=(f"{PROFILE}802-3-ethernet.mtu:1500", f"{PROFILE}connection.autoconnect:no")
    )
    assert profile_commands(RAIL_1, changed) == [
        "nmcli connection modify qsfp-enp1s0f0np0 connection.autoconnect yes "
        "802-3-ethernet.mtu 9000",
        "nmcli connection up qsfp-enp1s0f0np0",
    ]
    ipv6 = RAIL_1.model_copy(update={"ipv6": True})
    assert profile_commands(ipv6, facts())[0] == (
        "nmcli connection modify qsfp-enp1s0f0np0 ipv6.method link-local"
    )


def test_profile_down_or_drifted_is_only_brought_up():
    down = facts(drop=f"{PROFILE}GENERAL.STATE")
    assert profile_commands(RAIL_1, down) == ["nmcli connection up qsfp-enp1s0f0np0"]
    drifted = [
        line.replace("mtu 9000", "mtu 1500") if "enp1s0f0np0@" in line else line
        for line in CONVERGED
    ]
    assert profile_commands(RAIL_1, facts(drifted)) == ["nmcli connection up qsfp-enp1s0f0np0"]


def test_refuses_the_ssh_and_default_route_interface():
    spark = SparkSettings.model_validate(
        {"ssh_host": "s", "qsfp": [{"interface": "eth0", "address": "10.9.0.1/24"}]}
    )
    assert refusals(spark, facts()) == [
        "qsfp rail 1 (eth0) carries the SSH session of this deploy (172.17.0.1 51612 "
        "172.17.0.4 22) and the default route; reconfiguring it would cut this Spark off. "
        "List only the QSFP ports of the cable to the peer under qsfp"
    ]
    assert refusals(settings(), facts()) == []


def test_a_rail_carrying_ssh_is_left_alone_when_it_needs_no_change():
    """A Spark reached through its peer: the SSH session arrives on its QSFP rail."""
    through_peer = facts(drop="ssh_dev=", add=("ssh_dev=enp1s0f0np0",))
    rail_1 = SparkSettings.model_validate({"ssh_host": "s", "qsfp": [RAIL_1.model_dump()]})
    assert refusals(rail_1, through_peer) == []
    moved = SparkSettings.model_validate(
        {"ssh_host": "s", "qsfp": [{**RAIL_1.model_dump(), "mtu": 1500}]}
    )
    [problem] = refusals(moved, through_peer)
    assert problem.startswith("qsfp rail 1 (enp1s0f0np0) carries the SSH session")


def test_refuses_missing_interface_unmanaged_device_and_no_networkmanager():
    spark = SparkSettings.model_validate(
        {"ssh_host": "s", "qsfp": [{"interface": "enp9s0", "address": "10.9.0.1/24"}]}
    )
    [missing] = refusals(spark, facts())
    assert missing == (
        "qsfp rail 1 (enp9s0): no such interface here; it has enP2p1s0f0np0, enp1s0f0np0, eth0, lo"
    )
    unmanaged = facts(
        drop="nmdev.enP2p1s0f0np0=GENERAL.STATE",
        add=("nmdev.enP2p1s0f0np0=GENERAL.STATE:10 (unmanaged)",),
    )
    [problem] = refusals(settings(), unmanaged)
    assert problem.startswith("qsfp rail 2 (enP2p1s0f0np0): NetworkManager does not manage it")
    [problem] = refusals(settings(), facts(drop="nm=running"))
    assert problem.startswith("NetworkManager is not running")


PAIR = Topology.of({"spark-1": settings(1), "spark-2": settings(2)})
ALONE = Topology.of({"spark-1": settings(1)})


def test_ping_failure_names_the_rail_both_addresses_and_mtus():
    mtus = {"spark-2": {"enP2p1s0f0np0": 1500}}
    found, problems = proof(settings(), PAIR["spark-1"], facts(), mtus)
    assert problems == [
        "rail 2: spark-1 enP2p1s0f0np0 192.168.101.1 (MTU 9000) got no reply from spark-2 "
        "enP2p1s0f0np0 192.168.101.2 (MTU 1500) to a 8972-byte don't-fragment ping "
        "(2 packets transmitted, 0 received, 100% packet loss, time 204ms)"
    ]
    assert [found_gid(rail).index for rail in found] == [3, 3]


def test_alone_there_is_no_ping_to_check():
    all_ok = facts(drop="ping.enP2p1s0f0np0")
    assert proof(settings(), ALONE["spark-1"], all_ok, {})[1] == []
    assert proof(settings(), ALONE["spark-1"], facts(drop="ping."), {})[1] == []


def test_engine_environment_from_what_was_found():
    one = PAIR["spark-1"]
    found, _ = check_gids(
        facts().gids,
        [("enp1s0f0np0", "192.168.100.1"), ("enP2p1s0f0np0", "192.168.101.1")],
        3,
        "/sys",
    )
    text = nccl_env(one, found)
    values = dict(line.split("=", 1) for line in text.splitlines() if line[:1].isupper())
    assert values == {
        "NCCL_IB_HCA": "rocep1s0f0,roceP2p1s0f0",
        "NCCL_IB_GID_INDEX": "3",
        "SPARK_NODE_ADDR": "192.168.100.1",
        "SPARK_PEER_ADDR": "192.168.100.2",
        "SPARK_HEAD_ADDR": "192.168.100.1",
        "SPARK_NODE_RANK": "0",
        "SPARK_NNODES": "2",
    }  # host facts only: the engines' own variables are in their profiles
    assert (
        "# rail 2: enP2p1s0f0np0 192.168.101.1/24 <-> 192.168.101.2, roceP2p1s0f0 port 1, "
        "RoCE v2 GID index 3\n" in text
    )
    moved = [dataclasses.replace(r, gid=dataclasses.replace(found_gid(r), index=5)) for r in found]
    assert "NCCL_IB_GID_INDEX=5\n" in nccl_env(one, moved)


def test_engine_environment_of_a_spark_alone():
    alone = ALONE["spark-1"]
    found, _ = check_gids(
        facts().gids,
        [("enp1s0f0np0", "192.168.100.1"), ("enP2p1s0f0np0", "192.168.101.1")],
        3,
        "/sys",
    )
    text = nccl_env(alone, found)
    assert "SPARK_PEER_ADDR" not in text
    assert "SPARK_NNODES=1\n" in text and "SPARK_HEAD_ADDR=192.168.100.1\n" in text


def test_commands_captured_together_run_at_once_and_report_in_order(tmp_path):
    import subprocess
    import time

    from sparkdeploy.facts.network import captured_together

    script = "\n".join(
        captured_together(
            [
                ("ping.a@1", "sleep 0.4; echo '2 packets transmitted, 2 received'"),
                ("ping.b@2", "echo noise; echo 'Network unreachable' >&2; sleep 0.4; false"),
            ],
            keep="transmitted|nreachable",
        )
    )
    started = time.monotonic()
    done = subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=True)
    assert time.monotonic() - started < 0.75  # together, not one after the other
    assert done.stdout.splitlines() == [
        "ping.a@1=0 2 packets transmitted, 2 received ",
        "ping.b@2=1 Network unreachable ",
    ]
