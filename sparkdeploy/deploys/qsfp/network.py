"""
The QSFP network of a Spark: one NetworkManager profile per rail (static IPv4, jumbo MTU,
autoconnect, IPv6 off unless asked), made with nmcli only, for a pair cabled rail to rail or
for up to eight Sparks through a switch.

Refused before anything changes on any host: an interface that carries the deploy's own SSH
session or the default route, a missing interface, NetworkManager not running or not
managing the interface, and a netplan file the deploy may not take the interface over from
(``netplan_plan``). The address plan itself (shared addresses, rails in different subnets) is
checked with the inventory, before any connection.

Netplan. NVIDIA's two-Spark playbook configures the ConnectX ports in
``/etc/netplan/40-cx7.yaml``; on DGX OS netplan renders to NetworkManager, as profiles
``netplan-<interface>`` with keyfiles in /run/NetworkManager/system-connections (field notes
2026-11 section 4; netplan's NetworkManager renderer names them so). Left there, such a
profile and the deploy's ``qsfp-<interface>`` both autoconnect on one interface, and which
one holds it after a reboot is NetworkManager's choice. With ``qsfp_netplan: take_over`` (the
default) the deploy moves the file to NETPLAN_BACKUP (named with its checksum, so a second
file of the same name never overwrites the first backup), removes the keyfiles netplan
rendered for the QSFP interfaces and has NetworkManager reload its profiles, then brings its
own profiles up as ever, and says exactly what it changed. It never runs ``netplan apply``
(which drops the management address for about a second, sparkring#168) nor ``netplan
generate`` (which rewrites every interface's profile), and it removes keyfiles itself rather
than with ``nmcli connection delete``, which on Ubuntu's NetworkManager asks netplan to edit
the YAML a profile came from. The safe rule: a file is moved only when it lies under
/etc/netplan and every device it defines is a QSFP interface this Spark lists (by name, or
matched by name alone); a file that also configures any other interface (the management
port, a bond, a device matched by MAC address) is refused with the exact edit to make,
since moving it would take that interface's configuration too. With ``refuse`` every claim
is refused with the exact commands. Once taken over, the file and the keyfiles are gone, so
a second run changes nothing.
"""

from __future__ import annotations

import hashlib
import posixpath
from dataclasses import dataclass, field
from typing import Any, Literal

import yaml
from pyinfra import host, logger
from pyinfra.api import Host, OperationError, deploy, operation

from sparkdeploy.config.paths import NETPLAN_BACKUP, NETPLAN_NM_DIR
from sparkdeploy.config.spark import QsfpInterface, SparkSettings
from sparkdeploy.deploys.refuse import refuse
from sparkdeploy.escape import shell
from sparkdeploy.facts.network import Network, is_up_as_configured, network, profile_name
from sparkdeploy.reports import notices

# Routing tables and rule priorities of rails that share a subnet with an earlier rail of the
# same Spark (the second logical interface of a ring's port, NVIDIA connect-three-sparks):
# ROUTE_TABLE_BASE + the rail's number, for both.
ROUTE_TABLE_BASE = 20000


def own_table(rail: QsfpInterface, rails: list[QsfpInterface]) -> int:
    """
    The routing table of a rail that shares its subnet with an earlier rail of the Spark
    (0: none, the main table). Two interfaces in one subnet share the main table's route
    through the first, so a reply to the second's address would leave through the first:
    on the cable's other logical interface, where a socket bound to the second (the proof's
    ping, an engine's bound socket) never sees it. The second gets its prefix route in a
    table of its own and a rule that sends what it answers from its own address there.
    """
    for other in rails:
        if other.interface == rail.interface:
            return 0
        if other.network == rail.network:
            return ROUTE_TABLE_BASE + rails.index(rail) + 1
    return 0


def wanted(
    rail: QsfpInterface, table: int = 0, current: dict[str, str] | None = None
) -> dict[str, str]:
    """The profile properties of a rail, as nmcli names and prints them: with a routing
    table of its own when ``table`` (``own_table``), or back to the main table when the
    ``current`` profile still has one."""
    properties = {
        "connection.interface-name": rail.interface,
        "connection.autoconnect": "yes",
        "ipv4.method": "manual",
        "ipv4.addresses": rail.address,
        "802-3-ethernet.mtu": str(rail.mtu),
        "ipv6.method": "link-local" if rail.ipv6 else "disabled",
    }
    if table:
        properties["ipv4.route-table"] = str(table)
        properties["ipv4.routing-rules"] = f"priority {table} from {rail.ip} table {table}"
    elif (current or {}).get("ipv4.route-table", "0") not in ("", "0"):
        properties["ipv4.route-table"] = "0"
        properties["ipv4.routing-rules"] = ""
    return properties


def profile_commands(rail: QsfpInterface, facts: Network, table: int = 0) -> list[str]:
    """The nmcli commands that bring a rail to its wanted state ([] when it is there)."""
    name = profile_name(rail.interface)
    profile = facts.profiles.get(name)
    want = wanted(rail, table, profile)
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
    spark: SparkSettings = target.data.spark
    return bool(netplan_plan(spark, facts).commands) or any(
        profile_commands(rail, facts, own_table(rail, spark.qsfp)) for rail in spark.qsfp
    )


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
        changes = profile_commands(rail, facts, own_table(rail, spark.qsfp))
        if carries and changes:  # one already as wanted is left alone
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


# Netplan's device sections: every key under them defines one device (netplan's YAML
# reference, "Properties for device type ...").
NETPLAN_DEVICES = (
    "ethernets", "bonds", "bridges", "vlans", "wifis", "modems", "tunnels", "vrfs",
    "dummy-devices", "virtual-ethernets", "nm-devices",
)  # fmt: skip
RELOAD = "nmcli connection reload"
NO_APPLY = "(not `netplan apply`, which drops the management address for about a second)"


def netplan_devices(text: str | None) -> tuple[dict[str, str | None], str]:
    """The devices a netplan file defines: ID -> the interface it configures (its ID, or
    the name it is matched by alone; None when it is matched otherwise), and why the file
    could not be read ("" when it could)."""
    if text is None:
        return {}, "it is not UTF-8 text of at most 64 KiB"
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as error:
        return {}, f"it is not valid YAML ({str(error).splitlines()[0]})"
    network_: Any = document.get("network") if isinstance(document, dict) else None
    if not isinstance(network_, dict):
        return {}, "it has no `network:` mapping"
    devices: dict[str, str | None] = {}
    for section in NETPLAN_DEVICES:
        for netdef, stanza in (network_.get(section) or {}).items():
            match = stanza.get("match") if isinstance(stanza, dict) else None
            if match is None:
                devices[str(netdef)] = str(netdef)
            elif isinstance(match, dict) and set(match) == {"name"}:
                name = str(match["name"])
                devices[str(netdef)] = None if any(c in name for c in "*?[") else name
            else:
                devices[str(netdef)] = None
    return devices, ""


@dataclass(frozen=True)
class NetplanPlan:
    """What the deploy does about netplan's claims on the QSFP interfaces of a Spark."""

    commands: list[str] = field(default_factory=list)
    changes: list[str] = field(default_factory=list)  # what the commands change, in words
    problems: list[str] = field(default_factory=list)  # why it refuses (then no commands)


# What is decided about a netplan file that configures QSFP interfaces: moved aside, or
# refused because it lies outside /etc/netplan, could not be read, configures other
# interfaces too ("mixed"), or qsfp_netplan is refuse.
FileVerdict = Literal["move", "outside", "unreadable", "mixed", "refuse"]


@dataclass(frozen=True)
class ClaimedFile:
    """A netplan file that configures QSFP interfaces of this Spark, and its verdict."""

    path: str
    interfaces: tuple[str, ...]  # the QSFP interfaces it configures, sorted
    rendered: tuple[str, ...]  # the keyfiles netplan rendered from it for them
    verdict: FileVerdict
    unreadable: str = ""  # why it could not be read
    others: tuple[str, ...] = ()  # the other devices it configures
    moved: str = ""  # where it is moved to (the backup, named with its checksum)


@dataclass(frozen=True)
class RenderedProfile:
    """A NetworkManager keyfile netplan rendered for a QSFP interface."""

    keyfile: str
    interface: str


@dataclass(frozen=True)
class NetplanDecision:
    """What to do about netplan's claims: each file's verdict, the keyfiles to remove (all
    of them, when taking over and no file is refused), and the keyfiles refused alone
    (with qsfp_netplan: refuse, those of an interface no file configures)."""

    files: tuple[ClaimedFile, ...] = ()
    remove: tuple[RenderedProfile, ...] = ()
    refuse: tuple[RenderedProfile, ...] = ()


def _claims(qsfp: set[str], facts: Network) -> tuple[dict[str, list[str]], dict[str, str]]:
    """The netplan files that mention a QSFP interface (path -> interfaces) and the
    keyfiles netplan rendered for one (keyfile -> interface), less NetworkManager's own for
    the deploy's profiles (90-NM-<uuid>.yaml, netplan-NM-<uuid>.nmconnection)."""
    uuids = {p.get("connection.uuid") for p in facts.profiles.values()} - {None, ""}
    own_files = {f"90-NM-{uuid}.yaml" for uuid in uuids}
    own_keyfiles = {f"netplan-NM-{uuid}.nmconnection" for uuid in uuids}
    mentions: dict[str, list[str]] = {}
    for path, interface in facts.netplan:
        if posixpath.basename(path) not in own_files and interface in qsfp:
            mentions.setdefault(path, []).append(interface)
    keyfiles = {
        keyfile: interface
        for keyfile, interface in facts.netplan_profiles
        if interface in qsfp and posixpath.basename(keyfile) not in own_keyfiles
    }
    return mentions, keyfiles


def _claimed_file(
    path: str,
    interfaces: list[str],
    qsfp: set[str],
    keyfiles: dict[str, str],
    facts: Network,
    take_over: bool,
) -> ClaimedFile:
    """The verdict on one netplan file that mentions ``interfaces``."""
    text = facts.netplan_files.get(path)
    devices, unreadable = netplan_devices(text)
    rendered = [
        f"{NETPLAN_NM_DIR}/netplan-{netdef}.nmconnection"
        for netdef, interface in devices.items()
        if interface in qsfp
    ] or sorted(k for k, i in keyfiles.items() if i in interfaces)
    others = sorted(
        f"{netdef} (matched by more than its name)" if interface is None else interface
        for netdef, interface in devices.items()
        if interface not in qsfp
    )
    verdict: FileVerdict = "move" if take_over else "refuse"
    if not path.startswith("/etc/netplan/"):
        verdict = "outside"
    elif unreadable or others:
        verdict = "unreadable" if unreadable else "mixed"
    checksum = hashlib.sha256((text or "").encode()).hexdigest()[:12]
    moved = f"{_backup(path)}.{checksum}" if verdict == "move" else ""
    named = tuple(sorted(set(interfaces)))
    return ClaimedFile(path, named, tuple(rendered), verdict, unreadable, tuple(others), moved)


def netplan_decision(spark: SparkSettings, facts: Network) -> NetplanDecision:
    """What to do about each netplan file and rendered profile that claims a QSFP
    interface of this Spark (``qsfp_netplan``): see the module's docstring for the rule."""
    qsfp = {rail.interface for rail in spark.qsfp}
    mentions, keyfiles = _claims(qsfp, facts)
    take_over = spark.qsfp_netplan == "take_over"
    files = tuple(
        _claimed_file(path, interfaces, qsfp, keyfiles, facts, take_over)
        for path, interfaces in sorted(mentions.items())
    )
    profiles = tuple(RenderedProfile(k, i) for k, i in sorted(keyfiles.items()))
    if take_over:
        refused = any(file.verdict != "move" for file in files)
        return NetplanDecision(files, remove=() if refused else profiles)
    covered = {i for interfaces in mentions.values() for i in interfaces}
    return NetplanDecision(files, refuse=tuple(p for p in profiles if p.interface not in covered))


def _backup(path: str) -> str:
    return f"{NETPLAN_BACKUP}/{posixpath.basename(path)}"


def file_problem(file: ClaimedFile) -> str:
    """Why a netplan file is refused, with the exact edit or commands to make."""
    named = ", ".join(file.interfaces)
    remove = f"sudo rm -f {' '.join(file.rendered)} && " if file.rendered else ""
    if file.verdict == "outside":
        return (
            f"{file.path} configures {named} through netplan, beside the deploy's "
            f"NetworkManager profiles; the deploy takes over files under /etc/netplan "
            f"only. Fix: remove the stanzas of {named} from it, then {remove}sudo "
            f"{RELOAD} {NO_APPLY}"
        )
    if file.verdict in ("unreadable", "mixed"):
        why = (
            f"it could not be read ({file.unreadable})"
            if file.unreadable
            else f"it also configures {', '.join(file.others)}"
        )
        return (
            f"{file.path} configures {named} through netplan, and {why}: the deploy moves a "
            "netplan file aside only when it configures nothing but QSFP interfaces "
            f"this Spark lists. Fix: remove the stanzas of {named} from {file.path} and keep "
            f"the rest, then {remove}sudo {RELOAD} {NO_APPLY}"
        )
    return (
        f"{file.path} configures {named} through netplan, which renders NetworkManager "
        f"profiles that compete with the deploy's "
        f"{', '.join(profile_name(i) for i in file.interfaces)} "
        f"(qsfp_netplan: refuse). Fix: sudo install -d -m 0700 {NETPLAN_BACKUP} && "
        f"sudo mv {file.path} {_backup(file.path)} && {remove}sudo {RELOAD} {NO_APPLY}, or set "
        "qsfp_netplan: take_over"
    )


def profile_problem(profile: RenderedProfile) -> str:
    """Why a keyfile netplan rendered is refused (qsfp_netplan: refuse), with the fix."""
    keyfile, interface = profile.keyfile, profile.interface
    return (
        f"NetworkManager profile {_stem(keyfile)} ({keyfile}), rendered by "
        f"netplan, configures {interface} beside the deploy's "
        f"{profile_name(interface)} (qsfp_netplan: refuse). Fix: sudo rm -f "
        f"{keyfile} && sudo {RELOAD} {NO_APPLY}, or set qsfp_netplan: take_over"
    )


def file_change(file: ClaimedFile) -> str:
    """What moving a netplan file aside changed, and how to restore it."""
    return (
        f"moved {file.path}, which configured {', '.join(file.interfaces)} through netplan, "
        f"to {file.moved} (to restore it: sudo mv {file.moved} {file.path})"
    )


def profile_change(profile: RenderedProfile) -> str:
    """What removing a keyfile netplan rendered changed."""
    return (
        f"removed NetworkManager profile {_stem(profile.keyfile)} ({profile.keyfile}), which "
        f"netplan rendered for {profile.interface}"
    )


def netplan_plan(spark: SparkSettings, facts: Network) -> NetplanPlan:
    """
    The commands that take the QSFP interfaces over from netplan (``qsfp_netplan:
    take_over``), what they change, or why it is refused (``netplan_decision``, in words).
    """
    decision = netplan_decision(spark, facts)
    problems = [file_problem(file) for file in decision.files if file.verdict != "move"]
    problems += [profile_problem(profile) for profile in decision.refuse]
    if problems:
        return NetplanPlan(problems=problems)
    commands: list[str] = []
    for file in decision.files:
        commands += [
            f"install -d -m 0700 {shell(NETPLAN_BACKUP)}",
            f"mv -f {shell(file.path)} {shell(file.moved)}",
        ]
    commands += [f"rm -f {shell(profile.keyfile)}" for profile in decision.remove]
    if decision.remove:
        commands.append(RELOAD)
    changes = [file_change(file) for file in decision.files]
    changes += [profile_change(profile) for profile in decision.remove]
    return NetplanPlan(commands, changes)


def _stem(keyfile: str) -> str:
    return posixpath.basename(keyfile).removesuffix(".nmconnection")


@operation()
def netplan_taken_over():
    """
    Take this Spark's QSFP interfaces over from netplan: move each netplan file that
    configures only them to the backup folder, remove the NetworkManager profiles netplan
    rendered for them and reload NetworkManager's profiles (no ``netplan apply``). Nothing
    when netplan claims none of them; refused at planning what may not be taken over.

    **Example:**

    .. code:: python

        network.netplan_taken_over(name="Take the QSFP interfaces over from netplan")
    """
    plan = netplan_plan(host.data.spark, network(host))
    if plan.problems:
        raise OperationError("\n".join(plan.problems))
    if not plan.commands:
        host.noop("netplan configures no QSFP interface")
        return
    for change in plan.changes:
        logger.warning(f"{host.print_prefix}NETPLAN: {change}")
        notices.add(host.name, f"NETPLAN: {change}")
    yield from plan.commands


@operation()
def nm_profile(
    interface: str, address: str, mtu: int = 9000, ipv6: bool = False, route_table: int = 0
):
    """
    A NetworkManager connection profile ``qsfp-<interface>`` for one QSFP interface: static
    IPv4, MTU, autoconnect, IPv6 off unless asked. Created when missing, only the
    properties that differ are modified, and it is brought up only when something changed
    (or when it is not up as configured).

    + interface: the network interface, such as ``enp1s0f0np0``
    + address: static IPv4 address with prefix length, such as ``192.168.100.1/24``
    + mtu: MTU of the interface (9000: jumbo frames)
    + ipv6: IPv6 link-local addresses on the interface (off by default)
    + route_table: a routing table of its own, with a rule for what it sends from its
      address (0: the main table), for an interface in the subnet of another (``own_table``)

    **Example:**

    .. code:: python

        network.nm_profile(
            name="Rail 1: NetworkManager profile",
            interface="enp1s0f0np0",
            address="192.168.100.1/24",
        )
    """
    rail = QsfpInterface(interface=interface, address=address, mtu=mtu, ipv6=ipv6)
    commands = profile_commands(rail, network(host), route_table)
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
    problems = refusals(spark, facts) + netplan_plan(spark, facts).problems
    if problems:
        refuse(problems)
    netplan_taken_over(name="Take the QSFP interfaces over from netplan")
    for number, rail in enumerate(spark.qsfp, start=1):
        nm_profile(
            name=f"Rail {number}: NetworkManager profile",
            interface=rail.interface,
            address=rail.address,
            mtu=rail.mtu,
            ipv6=rail.ipv6,
            route_table=own_table(rail, spark.qsfp),
        )
