"""
The QSFP network between two Sparks: one NetworkManager profile per rail of the cable
(static IPv4, jumbo MTU, autoconnect, IPv6 off unless asked), made with nmcli only (on a
Spark, netplan with the networkd renderer silently does nothing for these ports).

Refused before anything changes on any host: an interface that carries the deploy's own SSH
session or the default route, a missing interface, NetworkManager not running or not
managing the interface. The address plan itself (shared addresses, a rail's ends in
different subnets) is checked with the inventory, before any connection.
"""

from __future__ import annotations

import posixpath

from pyinfra import host, logger
from pyinfra.api import Host, deploy, operation

from sparkdeploy.config.spark import QsfpInterface, SparkSettings
from sparkdeploy.deploys.refuse import refuse
from sparkdeploy.escape import shell
from sparkdeploy.facts.network import Network, is_up_as_configured, network, profile_name
from sparkdeploy.reports import notices


def wanted(rail: QsfpInterface) -> dict[str, str]:
    """The profile properties of a rail, as nmcli names and prints them."""
    return {
        "connection.interface-name": rail.interface,
        "connection.autoconnect": "yes",
        "ipv4.method": "manual",
        "ipv4.addresses": rail.address,
        "802-3-ethernet.mtu": str(rail.mtu),
        "ipv6.method": "link-local" if rail.ipv6 else "disabled",
    }


def profile_commands(rail: QsfpInterface, facts: Network) -> list[str]:
    """The nmcli commands that bring a rail to its wanted state ([] when it is there)."""
    name = profile_name(rail.interface)
    profile = facts.profiles.get(name)
    want = wanted(rail)
    if profile is None:
        settings = " ".join(f"{key} {shell(value)}" for key, value in want.items())
        change = f"nmcli connection add type ethernet con-name {shell(name)} {settings}"
    else:
        differ = {key: value for key, value in want.items() if profile.get(key) != value}
        settings = " ".join(f"{key} {shell(value)}" for key, value in differ.items())
        change = f"nmcli connection modify {shell(name)} {settings}" if differ else ""
    if not change and is_up_as_configured(rail, facts):
        return []
    return [command for command in (change, f"nmcli connection up {shell(name)}") if command]


def changes_planned(target: Host) -> bool:
    """Does this run change the QSFP network of this Spark?"""
    facts = network(target)
    return any(profile_commands(rail, facts) for rail in target.data.spark.qsfp)


def refusals(spark: SparkSettings, facts: Network) -> list[str]:
    """Why the QSFP interfaces of this host may not be configured (empty when they may).
    A rail that carries the SSH session (a Spark reached through its peer, say) is refused
    only when it would be changed."""
    if not facts.nmcli:
        return [
            "NetworkManager is not running (nmcli -t -f RUNNING general); the QSFP "
            "interfaces are configured with nmcli only"
        ]
    problems = []
    for number, rail in enumerate(spark.qsfp, start=1):
        where = f"qsfp rail {number} ({rail.interface})"
        if rail.interface not in facts.links:
            problems.append(
                f"{where}: no such interface here; it has {', '.join(sorted(facts.links))}"
            )
            continue
        carries = []
        if rail.interface in facts.ssh_devs:
            carries.append(f"the SSH session of this deploy ({facts.ssh_connection})")
        if rail.interface in facts.default_devs:
            carries.append("the default route")
        if carries and profile_commands(rail, facts):  # one already as wanted is left alone
            problems.append(
                f"{where} carries {' and '.join(carries)}; reconfiguring it would cut this "
                "Spark off. List only the QSFP ports of the cable to the peer under qsfp"
            )
        elif facts.devices.get(rail.interface, {}).get("GENERAL.STATE", "").startswith("10 "):
            problems.append(
                f"{where}: NetworkManager does not manage it (unmanaged); let it manage the "
                "interface (see netplan files and /etc/NetworkManager/conf.d)"
            )
    return problems


def netplan_claims(facts: Network) -> list[str]:
    """Netplan files that mention a QSFP interface, other than those NetworkManager writes
    for the deploy's own profiles (90-NM-<uuid>.yaml on Ubuntu)."""
    own = {f"90-NM-{p.get('connection.uuid')}.yaml" for p in facts.profiles.values()}
    return [
        f"{path} mentions {interface}: netplan with the networkd renderer does nothing for "
        f"it on a Spark and may compete with NetworkManager's {profile_name(interface)}; "
        "remove the QSFP interfaces from that file"
        for path, interface in facts.netplan
        if posixpath.basename(path) not in own
    ]


@operation()
def nm_profile(interface: str, address: str, mtu: int = 9000, ipv6: bool = False):
    """
    A NetworkManager connection profile ``qsfp-<interface>`` for one QSFP interface: static
    IPv4, MTU, autoconnect, IPv6 off unless asked. Created when missing, only the
    properties that differ are modified, and it is brought up only when something changed
    (or when it is not up as configured).

    + interface: the network interface, such as ``enp1s0f0np0``
    + address: static IPv4 address with prefix length, such as ``192.168.100.1/24``
    + mtu: MTU of the interface (9000: jumbo frames)
    + ipv6: IPv6 link-local addresses on the interface (off by default)

    **Example:**

    .. code:: python

        network.nm_profile(
            name="Rail 1: NetworkManager profile",
            interface="enp1s0f0np0",
            address="192.168.100.1/24",
        )
    """
    rail = QsfpInterface(interface=interface, address=address, mtu=mtu, ipv6=ipv6)
    commands = profile_commands(rail, network(host))
    if not commands:
        host.noop(f"{profile_name(interface)} is up with {address}, MTU {mtu}")
    yield from commands


@deploy("Configure the QSFP network")
def configure_qsfp_network() -> None:
    """
    One profile per rail listed under ``qsfp``; nothing at all (not even a fact) when the
    list is empty. Refuses, at planning time, what would cut the deploy off.
    """
    spark: SparkSettings = host.data.spark
    if not spark.qsfp:
        return
    facts = network(host)
    problems = refusals(spark, facts)
    if problems:
        refuse(problems)
    for claim in netplan_claims(facts):
        logger.warning(f"{host.print_prefix}{claim}")
        notices.add(host.name, f"NETPLAN: {claim}")
    for number, rail in enumerate(spark.qsfp, start=1):
        nm_profile(
            name=f"Rail {number}: NetworkManager profile",
            interface=rail.interface,
            address=rail.address,
            mtu=rail.mtu,
            ipv6=rail.ipv6,
        )
