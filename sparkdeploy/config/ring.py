"""
Three or four Sparks cabled in a ring, without a switch (``qsfp_topology: ring``): which
port of each Spark goes to which neighbour, the logical links of each cable, and the address
plan's problems. Imports only the Spark settings; knows no plan, fact or host.

The cabling is NVIDIA's (dgx-spark-playbooks nvidia/connect-three-sparks, a8bb888): port 0
of each Spark to port 1 of the next, in inventory order, and the last Spark's port 0 back to
the first's port 1; four Sparks the same way (eugr/spark-vllm-docker docs/NETWORKING.md,
"Example: four-node ring"). Each physical port has two logical interfaces (``enp1s0f0np0``
and ``enP2p1s0f0np0`` on port 0; ``enp1s0f1np1`` and ``enP2p1s0f1np1`` on port 1): the
n-th interface a Spark lists on port 0 is linked to the n-th its neighbour lists on port 1.
Both ends of a link share one subnet: NVIDIA gives a whole cable one /24 (both logical
interfaces of a port in it), eugr one /24 per logical link; either is accepted, and no
subnet is shared by two cables.

Five or more Sparks in a ring are not offered: NCCL's tree then needs links between Sparks
that share no cable (MiaAI-Lab/DeepSeek-v4.1-Flash-DGX-Sparks PR #3, field notes 2026-11b
section 2), which already bites at four, and a switch serves them.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from sparkdeploy.config.spark import QsfpInterface, SparkSettings

RING_SIZES = (3, 4)
PORTS = (0, 1)


@dataclass(frozen=True)
class Link:
    """One logical link of a cable: an interface of port 0 of one Spark and the interface
    of port 1 of the next that it is linked to."""

    a: QsfpInterface  # on port 0 of the cable's first Spark
    b: QsfpInterface  # on port 1 of the next Spark


@dataclass(frozen=True)
class Cable:
    """Cable ``number`` (from 1) of a ring: port 0 of Spark ``a`` to port 1 of Spark ``b``."""

    number: int
    a: str
    b: str
    links: tuple[Link, ...]
    listed: tuple[int, int] = (0, 0)  # interfaces listed on a's port 0 and on b's port 1

    def words(self) -> str:
        return f"cable {self.number} ({self.a} port 0 to {self.b} port 1)"


def on_port(spark: SparkSettings, port: int) -> list[QsfpInterface]:
    """The interfaces a Spark lists on ``port``, in the order it lists them."""
    return [rail for rail in spark.qsfp if rail.cx7_port == port]


def cables_of(sparks: dict[str, SparkSettings]) -> tuple[Cable, ...]:
    """The cables of the ring, in inventory order of their port-0 end."""
    names = list(sparks)
    cables = []
    for number, name in enumerate(names, start=1):
        following = names[number % len(names)]
        ends = on_port(sparks[name], 0), on_port(sparks[following], 1)
        links = tuple(Link(a, b) for a, b in zip(*ends))
        cables.append(Cable(number, name, following, links, (len(ends[0]), len(ends[1]))))
    return tuple(cables)


def ring_problems(path: str, sparks: dict[str, SparkSettings]) -> list[str]:
    """Everything wrong with a ring's layout and address plan, each with its fix (empty
    when no Spark asks for a ring)."""
    ring = [name for name, spark in sparks.items() if spark.qsfp_topology == "ring"]
    if not ring:
        return []
    shape = _shape_problems(path, sparks, ring)
    if shape:
        return shape
    cables = cables_of(sparks)
    return (
        _port_problems(path, sparks)
        or _cable_problems(path, cables) + _subnet_problems(path, cables)
    ) + _meeting_problems(path, sparks)


def _shape_problems(path: str, sparks: dict[str, SparkSettings], ring: list[str]) -> list[str]:
    """Every Spark in the ring, three or four of them, each listing its QSFP interfaces."""
    others = [name for name in sparks if name not in ring]
    if others:
        return [
            f"{path}: host '{name}', key 'qsfp_topology': auto, but {', '.join(ring)} say "
            "ring; a ring is a layout of all the Sparks: set qsfp_topology: ring under "
            "defaults"
            for name in others
        ]
    if len(sparks) not in RING_SIZES:
        return [
            f"{path}: key 'qsfp_topology': ring with {len(sparks)} Spark(s); a ring is three "
            "or four Sparks (NVIDIA's connect-three-sparks playbook; four as eugr's four-node "
            "ring). Two Sparks are a pair cabled directly and five or more go through a "
            "switch: set qsfp_topology: auto"
        ]
    return [
        f"{path}: host '{name}', key 'qsfp': empty; in a ring every Spark lists the "
        "interfaces of both its QSFP ports (such as enp1s0f0np0 and enP2p1s0f0np0 on port 0, "
        "enp1s0f1np1 and enP2p1s0f1np1 on port 1)"
        for name, spark in sparks.items()
        if not spark.qsfp
    ]


def _port_problems(path: str, sparks: dict[str, SparkSettings]) -> list[str]:
    """Each interface on a known port, one or two on each port, the management interface
    not among them."""
    names = list(sparks)
    problems = []
    for rank, (name, spark) in enumerate(sparks.items()):
        where = f"{path}: host '{name}', key 'qsfp'"
        for number, rail in enumerate(spark.qsfp, start=1):
            if rail.cx7_port is None:
                problems.append(
                    f"{where}, rail {number} ({rail.interface}): its QSFP port is not in its "
                    "name (ConnectX-7 names end in np0 or np1); set port: 0 or port: 1"
                )
            if rail.interface == spark.management_interface:
                problems.append(
                    f"{where}, rail {number}: {rail.interface} is the management interface "
                    "(management_interface), where the engines of a ring meet; list only the "
                    "QSFP interfaces"
                )
        neighbours = {0: names[(rank + 1) % len(names)], 1: names[rank - 1]}
        for port, neighbour in neighbours.items():
            count = len(on_port(spark, port))
            if count not in (1, 2):
                problems.append(
                    f"{where}: {count} interface(s) on port {port}, which is cabled to "
                    f"{neighbour}; list one or both of its two logical interfaces"
                )
    return problems


def _cable_problems(path: str, cables: tuple[Cable, ...]) -> list[str]:
    """Both ends of each cable list as many interfaces, and each link's ends share a
    subnet."""
    problems = []
    for cable in cables:
        ours, theirs = cable.listed
        if ours != theirs:
            problems.append(
                f"{path}: key 'qsfp': {cable.words()}: {cable.a} lists {ours} interface(s) on "
                f"port 0 and {cable.b} {theirs} on port 1; list as many at both ends (the "
                "n-th on one end is linked to the n-th on the other)"
            )
        for link in cable.links:
            if link.a.network != link.b.network:
                problems.append(
                    f"{path}: host '{cable.b}', key 'qsfp', '{link.b.interface}': "
                    f"{link.b.address} is not in {link.a.network}, the subnet of "
                    f"{cable.a}'s {link.a.interface} ({link.a.address}) at the other end of "
                    f"{cable.words()}; both ends of a link share a subnet: give "
                    f"{link.b.interface} an address in {link.a.network}"
                )
    return problems


def _subnet_problems(path: str, cables: tuple[Cable, ...]) -> list[str]:
    """No subnet shared by two cables: a Spark would route one cable's traffic out of the
    other's port."""
    problems = []
    seen: list[tuple[ipaddress.IPv4Network, Cable]] = []
    for cable in cables:
        for network in dict.fromkeys(link.a.network for link in cable.links):
            clash = next((other for net, other in seen if net.overlaps(network)), None)
            if clash is not None:
                problems.append(
                    f"{path}: key 'qsfp': {cable.words()} uses {network}, which overlaps a "
                    f"subnet of {clash.words()}; give each cable subnets of its own"
                )
            seen.append((network, cable))
    return problems


def _meeting_problems(path: str, sparks: dict[str, SparkSettings]) -> list[str]:
    """Every Spark reachable by the others on the management network, at its own address
    outside every QSFP subnet."""
    problems = []
    owners: dict[str, str] = {}
    subnets = {rail.network for spark in sparks.values() for rail in spark.qsfp}
    for name, spark in sparks.items():
        where = f"{path}: host '{name}', key 'management_address'"
        address = spark.meeting_address
        if not address:
            problems.append(
                f"{where}: unset, and ssh_host {spark.ssh_host} is not an IPv4 address the "
                "other Sparks reach; in a ring the engines, NCCL's bootstrap and Gloo meet on "
                "the management network (not every Spark shares a cable with every other): "
                f"set management_address to {name}'s address on {spark.management_interface}"
            )
        elif address in owners:
            problems.append(f"{where}: {address} is also host '{owners[address]}''s")
        elif any(ipaddress.IPv4Address(address) in net for net in subnets):
            problems.append(
                f"{where}: {address} lies in a QSFP subnet; give the management network and "
                "the cables subnets apart"
            )
        owners.setdefault(address, name)
    return problems
