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
from sparkdeploy.deploys.qsfp.proof import PROVEN, engine_environment, prove_now
from sparkdeploy.facts.network import Network, QsfpNetwork
from sparkdeploy.facts.roce import Gid, check_gids
from sparkdeploy.facts.store import run_store
from tests.unit.operations import NETWORK, Outcome, given, pair, run, spark

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
