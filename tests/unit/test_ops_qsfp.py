"""QSFP operations (NetworkManager profiles, the engine environment written from the proof):
the network fact and what the proof recorded in, commands or no-op reason out."""

from __future__ import annotations

import hashlib
import ipaddress
import shlex
from dataclasses import replace
from typing import Any

import pytest
from pydantic import ValidationError
from pyinfra.api import Host, OperationError

from sparkdeploy.config.paths import NCCL_ENV
from sparkdeploy.deploys.qsfp.nccl_env import nccl_env
from sparkdeploy.deploys.qsfp.network import nm_profile
from sparkdeploy.deploys.qsfp.proof import PROVEN, engine_environment, proof, prove_now
from sparkdeploy.facts.network import Network, Ping, QsfpNetwork, fact_arguments, pinged
from sparkdeploy.facts.roce import Gid, check_gids
from sparkdeploy.facts.store import run_store
from tests.twins import harness
from tests.unit.operations import NETWORK, Outcome, given, pair, run, spark, sparks

# --- nm_profile ------------------------------------------------------------------------

RAIL = "enp1s0f0np0"  # rail 1 of spark-1, as the network fact's sample shows it
PROFILE = f"qsfp-{RAIL}"
ADDRESS = "192.168.100.1/24"
AS_WANTED = {
    "connection.interface-name": RAIL,
    "connection.autoconnect": "yes",
    "ipv4.method": "manual",
    "ipv4.addresses": ADDRESS,
    "802-3-ethernet.mtu": "9000",
    "ipv6.method": "disabled",
    "GENERAL.STATE": "activated",
}
UP = f"nmcli connection up {PROFILE}"


def network(profile: dict[str, str] | None = None, **changes: Any) -> Network:
    """The sample network, its rail-1 profile as wanted and up unless changed."""
    return replace(NETWORK, profiles={PROFILE: {**AS_WANTED, **(profile or {})}}, **changes)


def nm_with(facts: Network, **arguments: Any) -> Outcome:
    host = pair()["spark-1"]
    given(host, QsfpNetwork, facts)
    return run(nm_profile, host, **{"interface": RAIL, "address": ADDRESS, **arguments})


def test_a_profile_as_wanted_and_up_is_a_noop():
    outcome = nm_with(network())
    assert outcome.commands == []
    assert outcome.noop == f"{PROFILE} is up with {ADDRESS}, MTU 9000"


def test_a_missing_profile_is_added_with_every_property_and_brought_up():
    outcome = nm_with(network(), interface="enP2p1s0f0np0", address="192.168.101.1/24")
    assert outcome.commands == [
        "nmcli connection add type ethernet con-name qsfp-enP2p1s0f0np0 "
        "connection.interface-name enP2p1s0f0np0 connection.autoconnect yes "
        "ipv4.method manual ipv4.addresses 192.168.101.1/24 802-3-ethernet.mtu 9000 "
        "ipv6.method disabled",
        "nmcli connection up qsfp-enP2p1s0f0np0",
    ]
    assert outcome.noop is None


def test_only_the_differing_properties_are_modified_then_it_is_brought_up():
    outcome = nm_with(network({"802-3-ethernet.mtu": "1500"}), ipv6=True)
    assert outcome.commands == [
        f"nmcli connection modify {PROFILE} 802-3-ethernet.mtu 9000 ipv6.method link-local",
        UP,
    ]


LINK = NETWORK.links[RAIL]


@pytest.mark.parametrize(
    "facts",
    [
        network({"GENERAL.STATE": ""}),  # the profile is not active
        network(devices={RAIL: {"GENERAL.CONNECTION": "Wired connection 1"}}),
        network(links={RAIL: replace(LINK, mtu=1500)}),  # changed behind NetworkManager's back
        network(links={RAIL: replace(LINK, addresses=())}),
        network(links={}),
    ],
    ids=["inactive", "other-connection", "kernel-mtu", "kernel-address", "no-link"],
)
def test_a_profile_as_wanted_but_not_up_as_configured_is_only_brought_up(facts: Network):
    outcome = nm_with(facts)
    assert outcome.commands == [UP] and outcome.noop is None


@pytest.mark.parametrize(
    "arguments",
    [
        {"interface": "enp1s0f0np0; reboot"},
        {"interface": "en p1"},
        {"address": "192.168.100.1/24' && reboot '"},
    ],
)
def test_an_interface_or_address_that_is_not_one_is_refused(arguments: dict[str, str]):
    with pytest.raises(ValidationError):
        nm_with(network(), **arguments)


# --- engine_environment ----------------------------------------------------------------

RDMA = {"enp1s0f0np0": "rocep1s0f0", "enP2p1s0f0np0": "roceP2p1s0f0"}
NEW = f"{NCCL_ENV}.new"


def proven(host: Host, index: int = 3) -> str:
    """Record in the run store what the proof finds when every rail of ``host`` has its
    RoCE v2 GID at ``index``; the environment file that follows from it."""
    place = host.data.place
    table = tuple(
        Gid(
            RDMA[rail.interface],
            1,
            index,
            ipaddress.IPv6Address(f"::ffff:{rail.ip}").exploded,
            "RoCE v2",
            rail.interface,
        )
        for rail in place.rails
    )
    found, problems = check_gids(table, [(r.interface, r.ip) for r in place.rails], index, "/sys")
    assert problems == []
    run_store(host.state).results[(host.name, PROVEN)] = found
    return nccl_env(place, found)


def environment_with(up_to_date: bool = False, **arguments: Any) -> tuple[Outcome, str]:
    """engine_environment on spark-1 of a pair, once the proof is recorded, and the content
    that follows from it; the file on the host has that content, or the sample's checksum."""
    host = pair()["spark-1"]
    content = proven(host)
    sha = hashlib.sha256(content.encode()).hexdigest() if up_to_date else NETWORK.env_sha256
    given(host, QsfpNetwork, replace(NETWORK, env_sha256=sha))
    return run(engine_environment, host, **arguments), content


def write(content: str) -> str:
    return (
        f"install -d -m 0755 /etc/spark-deploy && printf '%s' {shlex.quote(content)} > "
        f"{NEW} && chmod 0644 {NEW} && chown root:root {NEW} && mv -f {NEW} {NCCL_ENV}"
    )


def test_the_environment_follows_from_the_proof_and_is_written_when_it_differs():
    outcome, content = environment_with()
    assert outcome.commands == [write(content)] and outcome.noop is None
    assert shlex.split(outcome.commands[0])[8] == content  # one word for printf
    assert "NCCL_IB_HCA=rocep1s0f0,roceP2p1s0f0\nNCCL_IB_GID_INDEX=3\n" in content
    assert "SPARK_NODE_ADDR=192.168.100.1\nSPARK_PEER_ADDR=192.168.100.2\n" in content


def test_an_environment_already_as_proven_is_a_noop():
    outcome, _ = environment_with(up_to_date=True)
    assert outcome.commands == [] and outcome.noop == f"{NCCL_ENV} is up to date"


def test_proving_first_puts_the_proof_first_and_planning_stops_there():
    host = pair()["spark-1"]
    given(host, QsfpNetwork, NETWORK)
    outcome = run(engine_environment, host, limit=1, prove_first=True)  # nothing recorded yet
    assert outcome.commands == ["call prove_now"]
    assert outcome.callbacks[0].function is prove_now


def test_at_execution_the_file_is_written_from_what_the_proof_recorded():
    outcome, content = environment_with(prove_first=True)
    assert outcome.commands == ["call prove_now", write(content)]


def test_a_path_outside_the_registry_is_refused():
    host = pair()["spark-1"]
    with pytest.raises(OperationError, match="not in the managed-file registry"):
        run(engine_environment, host, path="/etc/spark-deploy/other.env")
    with pytest.raises(OperationError, match="not in the managed-file registry"):
        run(engine_environment, spark())  # no qsfp: not its file


# --- three Sparks through a switch --------------------------------------------------------


def switch(mode: str = "head", count: int = 3) -> dict[str, Host]:
    """``count`` Sparks on a switch, rail N of each in 192.168.(100 + N - 1).0/24."""
    return sparks(
        **{
            f"spark-{node}": {"qsfp": harness.qsfp_plan(node), "qsfp_proof": mode}
            for node in range(1, count + 1)
        }
    )


def ping_lines(host: Host) -> list[str]:
    """The ping commands of the host's network fact, as they run (all at once, each in the
    background: facts/network.captured_together)."""
    command = QsfpNetwork().command(**fact_arguments(host))
    return [
        line.split("( ", 1)[1].split(" )", 1)[0]
        for line in command.splitlines()
        if line.startswith("{ ( ping") and line.endswith("} &")
    ]


def ping(interface: str, address: str) -> str:
    return f"ping -n -q -c 2 -i 0.05 -W 1 -M do -s 8972 -I {interface} {address}"


RAILS = ("enp1s0f0np0", "enP2p1s0f0np0")


def test_through_a_switch_each_spark_pings_the_head_on_every_rail():
    hosts = switch("head")
    for name in ("spark-2", "spark-3"):
        assert ping_lines(hosts[name]) == [
            ping(RAILS[0], "192.168.100.1"),
            ping(RAILS[1], "192.168.101.1"),
        ]
        assert [other.name for other in pinged(hosts[name])] == ["spark-1"]
    assert ping_lines(hosts["spark-1"]) == [  # the head proves its side to each
        ping(RAILS[0], "192.168.100.2"),
        ping(RAILS[0], "192.168.100.3"),
        ping(RAILS[1], "192.168.101.2"),
        ping(RAILS[1], "192.168.101.3"),
    ]


def test_all_mode_pings_every_other_spark_on_every_rail():
    hosts = switch("all")
    assert ping_lines(hosts["spark-3"]) == [
        ping(RAILS[0], "192.168.100.1"),
        ping(RAILS[0], "192.168.100.2"),
        ping(RAILS[1], "192.168.101.1"),
        ping(RAILS[1], "192.168.101.2"),
    ]
    assert [other.name for other in pinged(hosts["spark-2"])] == ["spark-1", "spark-3"]
    assert ping_lines(pair()["spark-2"]) == [  # a pair: the peer, as ever
        ping(RAILS[0], "192.168.100.1"),
        ping(RAILS[1], "192.168.101.1"),
    ]


def answers(host: Host, failing: tuple[str, str] | None = None) -> Network:
    """The network of ``host`` after its pings, all answered but ``failing``."""
    pings = {}
    for interface, address, _ in fact_arguments(host)["pings"]:
        ok = (interface, address) != failing
        detail = "2 packets transmitted, 2 received" if ok else "2 packets transmitted, 0 received"
        pings[(interface, address)] = Ping(interface, ok, detail, address)
    return replace(NETWORK, pings=pings)


def test_a_switch_path_that_drops_jumbo_frames_names_both_ends_and_the_switch():
    hosts = switch("all")
    three = hosts["spark-3"]
    spark_3 = three.data.spark
    _, problems = proof(spark_3, three.data.place, answers(three), {})
    assert not any("got no reply" in problem for problem in problems)  # (the GIDs are .1's)
    _, problems = proof(
        spark_3,
        three.data.place,
        answers(three, failing=(RAILS[0], "192.168.100.2")),
        {"spark-2": {RAILS[0]: 1500}},
    )
    assert (
        "rail 1: spark-3 enp1s0f0np0 192.168.100.3 (MTU 9000) got no reply from spark-2 "
        "enp1s0f0np0 192.168.100.2 (MTU 1500) to a 8972-byte don't-fragment ping "
        "(2 packets transmitted, 0 received); through a switch, the switch ports' MTU must "
        "allow jumbo frames too"
    ) in problems
    _, head_mode = proof(
        spark_3.model_copy(update={"qsfp_proof": "head"}),
        three.data.place,
        answers(three, failing=(RAILS[0], "192.168.100.2")),
        {},
    )
    assert not any("got no reply" in problem for problem in head_mode)  # not a head path


def test_the_engine_environment_of_a_switch_has_no_peer_and_counts_every_node():
    hosts = switch()
    content = proven(hosts["spark-3"])
    assert "SPARK_PEER_ADDR" not in content
    assert "SPARK_NODE_ADDR=192.168.100.3\n" in content
    assert "SPARK_HEAD_ADDR=192.168.100.1\n" in content
    assert "SPARK_NODE_RANK=2\nSPARK_NNODES=3\n" in content
