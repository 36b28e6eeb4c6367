"""
The layout of the Sparks, worked out once from validated settings: which Spark is the head
(the first in the inventory), each Spark's rank, and every other Spark's end of each QSFP
rail. Frozen; the plan, the network operations, the engine environment and the status table
all read it from here.

Three layouts (NVIDIA's playbooks ``connect-two-sparks``, ``multi-sparks-through-switch``
and ``connect-three-sparks``, field notes 2026-11 section 4 and 2026-11b section 3): two
Sparks cabled to each other, rail N to rail N; three to eight Sparks through a switch, every
Spark's rail N in one subnet shared by all; three or four Sparks in a ring
(``qsfp_topology: ring``, config/ring.py), where each rail reaches one neighbour and the
engines meet on the management network, since not every Spark shares a cable with the head.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from sparkdeploy.config.jsondata import PyinfraJson
from sparkdeploy.config.ring import Cable, cables_of, ring_problems
from sparkdeploy.config.spark import QsfpInterface, SparkSettings

# How a Spark is wired to the others: alone (or without rails), a pair, a switch, a ring.
Fabric = Literal["", "pair", "switch", "ring"]

# Sparks an inventory may hold: a pair cabled directly, or up to eight through a switch. Eight
# is the most NVIDIA's switch playbook and the published cluster recipes use (field notes
# 2026-11, peers.md "Layouts"); the rank, rail and fetch code has no other limit.
MAX_SPARKS = 8


@dataclass(frozen=True)
class End:
    """Another Spark's end of a rail: that Spark, its interface and address on the rail."""

    name: str
    interface: str
    ip: str


@dataclass(frozen=True)
class Rail:
    """Rail ``number`` (from 1) of a Spark: this end, and the other Sparks' ends of it."""

    number: int
    interface: str
    address: str  # CIDR
    ip: str
    mtu: int
    peer_interface: str = ""  # the peer's end, in a pair only ("" when it lists fewer rails)
    peer_ip: str = ""
    ends: tuple[End, ...] = ()  # every other Spark's end of rail ``number``, in rank order
    # (in a ring: the one neighbour's end of the logical link)
    port: int | None = None  # the QSFP port, in a ring
    cable: int = 0  # the number of the ring's cable it is on (config/ring.py), 0 elsewhere


@dataclass(frozen=True)
class Place(PyinfraJson):
    """One Spark's place among the Sparks of the inventory."""

    name: str
    rank: int  # inventory order: 0 is the head
    nodes: int  # Sparks in the inventory
    head: str  # name of the head Spark
    # Where every Spark meets the head (rendezvous): its address on its first rail, or in a
    # ring its management address; "" when it has none.
    head_ip: str
    peer: str | None  # the other Spark of a pair (None alone and with three or more)
    rails: tuple[Rail, ...]
    # Every Spark's address on rail 1, in rank order; () unless every Spark has a rail 1
    # (and in a ring, where rail 1 of each Spark is on a different cable).
    members: tuple[str, ...] = ()
    fabric: Fabric = ""
    # In a ring: this Spark's management interface and address, the other Sparks' addresses
    # there, and every cable of the ring.
    meeting: tuple[str, str] = ("", "")
    meeting_peers: tuple[str, ...] = ()
    cables: tuple[Cable, ...] = ()

    @property
    def linked(self) -> bool:
        """On the QSFP fabric with the others: more than one Spark, rails listed, the head reachable on rail 1."""
        return self.nodes > 1 and bool(self.rails) and bool(self.head_ip)

    @property
    def paired(self) -> bool:
        """Cabled to a peer: both Sparks list their QSFP rails."""
        return self.peer is not None and bool(self.rails) and bool(self.rails[0].peer_ip)

    @property
    def switched(self) -> bool:
        """Three or more Sparks with rails on a switch, every rail N in one subnet."""
        return self.fabric == "switch"

    @property
    def ringed(self) -> bool:
        """Three or four Sparks cabled in a ring."""
        return self.fabric == "ring"

    @property
    def meet_interface(self) -> str:
        """The interface this Spark's engines, NCCL bootstrap and Gloo use to reach the
        others: its first rail, or in a ring its management interface."""
        return self.meeting[0] if self.ringed else self.rails[0].interface

    @property
    def meet_address(self) -> str:
        """This Spark's address on ``meet_interface``."""
        return self.meeting[1] if self.ringed else self.rails[0].ip

    def ping_ends(self, rail: Rail, mode: str = "head") -> tuple[End, ...]:
        """The ends of ``rail`` this Spark proves its jumbo path to: ``head``, the head's end
        (on the head, every other Spark's end, so a pair pings each other as it always
        has); ``all``, every other Spark's end. In a ring a rail has one end, the
        neighbour's, and it is always pinged."""
        if mode == "all" or self.rank == 0 or self.ringed:
            return rail.ends
        return tuple(end for end in rail.ends if end.name == self.head)


@dataclass(frozen=True)
class Topology:
    places: dict[str, Place]  # name -> place, in inventory order

    @classmethod
    def of(cls, sparks: dict[str, SparkSettings]) -> Topology:
        """The places of the inventory's Sparks (validated settings, in inventory order).
        More than ``MAX_SPARKS`` is refused with the inventory (``too_many_sparks``)."""
        if any(spark.qsfp_topology == "ring" for spark in sparks.values()):
            return cls(_ring_places(sparks))
        return cls(_rail_places(sparks))

    def __getitem__(self, name: str) -> Place:
        return self.places[name]


def _rail(number: int, rail: QsfpInterface, **far: Any) -> Rail:
    """Rail ``number`` of a Spark from its settings, with what is known of its far end."""
    return Rail(number, rail.interface, rail.address, rail.ip, rail.mtu, **far)


def _ends(sparks: dict[str, SparkSettings], name: str, number: int) -> tuple[End, ...]:
    """Every other Spark's end of rail ``number`` (a pair's or a switch's), in rank order."""
    return tuple(
        End(other, spark.qsfp[number - 1].interface, spark.qsfp[number - 1].ip)
        for other, spark in sparks.items()
        if other != name and number <= len(spark.qsfp)
    )


def _rail_places(sparks: dict[str, SparkSettings]) -> dict[str, Place]:
    """The places of Sparks alone, in a pair (rail N to rail N) or through a switch (rail N
    of every Spark in one subnet)."""
    names = list(sparks)
    head = names[0] if names else ""
    head_rails = sparks[head].qsfp if head else []
    pair = len(names) == 2
    fabric: Fabric = "" if len(names) < 2 else "pair" if pair else "switch"
    members = (
        tuple(spark.qsfp[0].ip for spark in sparks.values())
        if len(names) > 1 and all(spark.qsfp for spark in sparks.values())
        else ()
    )
    places = {}
    for rank, (name, spark) in enumerate(sparks.items()):
        peer = next((other for other in names if other != name), None) if pair else None
        theirs = sparks[peer].qsfp if peer else []
        rails = tuple(
            _rail(
                number,
                rail,
                peer_interface=theirs[number - 1].interface if number <= len(theirs) else "",
                peer_ip=theirs[number - 1].ip if number <= len(theirs) else "",
                ends=_ends(sparks, name, number),
            )
            for number, rail in enumerate(spark.qsfp, start=1)
        )
        head_ip = head_rails[0].ip if head_rails else ""
        places[name] = Place(
            name, rank, len(names), head, head_ip, peer, rails, members, fabric if rails else ""
        )
    return places


def _ring_places(sparks: dict[str, SparkSettings]) -> dict[str, Place]:
    """The places of Sparks in a ring: each rail's one end is the neighbour's interface on
    the same logical link (config/ring.py), and the head is met on the management
    network."""
    names = list(sparks)
    cables = cables_of(sparks)
    far: dict[tuple[str, str], End] = {}
    on: dict[tuple[str, int], int] = {}  # (Spark, port) -> cable number
    for cable in cables:
        on[(cable.a, 0)] = on[(cable.b, 1)] = cable.number
        for link in cable.links:
            far[(cable.a, link.a.interface)] = End(cable.b, link.b.interface, link.b.ip)
            far[(cable.b, link.b.interface)] = End(cable.a, link.a.interface, link.a.ip)
    meeting = {name: spark.meeting_address for name, spark in sparks.items()}
    places = {}
    for rank, (name, spark) in enumerate(sparks.items()):
        rails = tuple(
            _rail(
                number,
                rail,
                ends=(far[(name, rail.interface)],) if (name, rail.interface) in far else (),
                port=rail.cx7_port,
                cable=on.get((name, rail.cx7_port if rail.cx7_port is not None else -1), 0),
            )
            for number, rail in enumerate(spark.qsfp, start=1)
        )
        places[name] = Place(
            name, rank, len(names), names[0], meeting[names[0]], None, rails,
            fabric="ring" if rails else "",
            meeting=(spark.management_interface, meeting[name]),
            meeting_peers=tuple(meeting[other] for other in names if other != name),
            cables=cables,
        )  # fmt: skip
    return places


def too_many_sparks(path: str, count: int) -> str:
    """The inventory's problem when it lists more than ``MAX_SPARKS`` Sparks."""
    return (
        f"{path}: sparks: {count} hosts given; this project prepares one Spark, a pair "
        f"cabled to each other, or up to {MAX_SPARKS} Sparks through a switch "
        f"({MAX_SPARKS} at most): give each group of Sparks that serves one model its own "
        "inventory"
    )


def rail_problems(
    path: str, sparks: dict[str, SparkSettings], listed: int | None = None
) -> list[str]:
    """
    The QSFP address plan of two or more Sparks. A pair: rail N of one Spark is cabled to
    rail N of the other, so both ends share one subnet. Three to eight through a switch:
    rail N of every Spark is in one subnet, the head's. Every Spark lists the same number of
    rails (or none does), and no address is used twice. A ring (config/ring.py) is judged
    only when all ``listed`` Sparks' own settings are valid.
    """
    if any(spark.qsfp_topology == "ring" for spark in sparks.values()):
        if listed is not None and listed != len(sparks):
            return []  # a ring is judged whole, once each Spark's own settings are valid
        return ring_problems(path, sparks) or _reused_addresses(path, sparks)
    if len(sparks) < 2:
        return []
    return _rail_counts(path, sparks) or _rail_addresses(path, sparks)


def _rail_counts(path: str, sparks: dict[str, SparkSettings]) -> list[str]:
    """Every Spark lists as many rails as the head."""
    (first, one), *others = sparks.items()
    pair = len(sparks) == 2
    problems = []
    for name, spark in others:
        where = f"{path}: host '{name}', key 'qsfp'"
        if len(spark.qsfp) != len(one.qsfp):
            problems.append(
                f"{where}: {len(spark.qsfp)} rail(s), but host '{first}' has {len(one.qsfp)}; "
                + (
                    "rail N of one Spark is cabled to rail N of the other, so list the same "
                    "number of rails on both (or none on either)"
                    if pair
                    else "rail N of every Spark is on the switch in one subnet, so list the "
                    "same number of rails on every Spark (or none on any)"
                )
            )
    return problems


def _rail_addresses(path: str, sparks: dict[str, SparkSettings]) -> list[str]:
    """No address used twice, and rail N of every Spark in the subnet of the head's."""
    (first, one), *_ = sparks.items()
    pair = len(sparks) == 2
    problems = _reused_addresses(path, sparks)
    reused = {(name, number) for name, number, _ in _reuses(sparks)}
    for name, spark in sparks.items():
        where = f"{path}: host '{name}', key 'qsfp'"
        for number, (theirs, rail) in enumerate(zip(one.qsfp, spark.qsfp), start=1):
            if (name, number) in reused or name == first or theirs.network == rail.network:
                continue
            problems.append(
                f"{where}, rail {number}, 'address': {rail.address} is not in "
                f"{theirs.network}, the subnet of rail {number} on host '{first}' "
                f"({theirs.address}); "
                + (
                    "both ends of a rail share one subnet"
                    if pair
                    else "through a switch, rail N of every Spark is in one subnet. Three or "
                    "more Sparks cabled to each other (a ring, one subnet per cable) are not "
                    f"supported: connect them through a switch and give rail {number} of every "
                    f"Spark an address in {theirs.network}"
                )
            )
    return problems


def _reuses(sparks: dict[str, SparkSettings]) -> list[tuple[str, int, tuple[str, str, int]]]:
    """Each rail whose address an earlier rail already has: (host, rail number, (address,
    the host and rail that had it first))."""
    used: dict[str, tuple[str, int]] = {}
    reuses = []
    for name, spark in sparks.items():
        for number, rail in enumerate(spark.qsfp, start=1):
            if rail.ip in used:
                reuses.append((name, number, (rail.ip, *used[rail.ip])))
            else:
                used[rail.ip] = (name, number)
    return reuses


def _reused_addresses(path: str, sparks: dict[str, SparkSettings]) -> list[str]:
    """No QSFP address used twice, on one Spark or across them."""
    return [
        f"{path}: host '{name}', key 'qsfp', rail {number}, 'address': {ip} is also the "
        f"address of host '{owner}' on rail {on}; each Spark needs its own address"
        for name, number, (ip, owner, on) in _reuses(sparks)
    ]
