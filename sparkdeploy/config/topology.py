"""
The layout of the Sparks, worked out once from validated settings: which Spark is the head
(the first in the inventory), each Spark's rank, and every other Spark's end of each QSFP
rail. Frozen; the plan, the network operations, the engine environment and the status table
all read it from here.

Two layouts (NVIDIA's playbooks ``connect-two-sparks`` and ``multi-sparks-through-switch``,
field notes 2026-11 section 4): two Sparks cabled to each other, rail N to rail N, and three to
eight Sparks through a switch, every Spark's rail N in one subnet shared by all. Three Sparks
cabled to each other in a ring are not a layout this project supports (each cable would need
its own subnets, and NCCL and the engines expect one address per node and rail).
"""

from __future__ import annotations

from dataclasses import dataclass

from sparkdeploy.config.jsondata import PyinfraJson
from sparkdeploy.config.spark import SparkSettings

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


@dataclass(frozen=True)
class Place(PyinfraJson):
    """One Spark's place among the Sparks of the inventory."""

    name: str
    rank: int  # inventory order: 0 is the head
    nodes: int  # Sparks in the inventory
    head: str  # name of the head Spark
    head_ip: str  # the head's address on its first rail, "" when it has none
    peer: str | None  # the other Spark of a pair (None alone and with three or more)
    rails: tuple[Rail, ...]
    # Every Spark's address on rail 1, in rank order; () unless every Spark has a rail 1.
    members: tuple[str, ...] = ()

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
        """Three or more Sparks with rails: on a switch, every rail N in one subnet."""
        return self.nodes > 2 and bool(self.rails)

    def ping_ends(self, rail: Rail, mode: str = "head") -> tuple[End, ...]:
        """The ends of ``rail`` this Spark proves its jumbo path to: ``head``, the head's end
        (on the head, every other Spark's end, so a pair pings each other as it always
        has); ``all``, every other Spark's end."""
        if mode == "all" or self.rank == 0:
            return rail.ends
        return tuple(end for end in rail.ends if end.name == self.head)


@dataclass(frozen=True)
class Topology:
    places: dict[str, Place]  # name -> place, in inventory order

    @classmethod
    def of(cls, sparks: dict[str, SparkSettings]) -> Topology:
        """The places of the inventory's Sparks (validated settings, in inventory order).
        More than ``MAX_SPARKS`` is refused with the inventory (``too_many_sparks``)."""
        names = list(sparks)
        head = names[0] if names else ""
        head_rails = sparks[head].qsfp if head else []
        pair = len(names) == 2
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
                Rail(
                    number,
                    rail.interface,
                    rail.address,
                    rail.ip,
                    rail.mtu,
                    theirs[number - 1].interface if number <= len(theirs) else "",
                    theirs[number - 1].ip if number <= len(theirs) else "",
                    tuple(
                        End(
                            other,
                            sparks[other].qsfp[number - 1].interface,
                            sparks[other].qsfp[number - 1].ip,
                        )
                        for other in names
                        if other != name and number <= len(sparks[other].qsfp)
                    ),
                )  # fmt: skip
                for number, rail in enumerate(spark.qsfp, start=1)
            )
            places[name] = Place(
                name,
                rank,
                len(names),
                head,
                head_rails[0].ip if head_rails else "",
                peer,
                rails,
                members,
            )
        return cls(places)

    def __getitem__(self, name: str) -> Place:
        return self.places[name]


def too_many_sparks(path: str, count: int) -> str:
    """The inventory's problem when it lists more than ``MAX_SPARKS`` Sparks."""
    return (
        f"{path}: sparks: {count} hosts given; this project prepares one Spark, a pair "
        f"cabled to each other, or up to {MAX_SPARKS} Sparks through a switch "
        f"({MAX_SPARKS} at most): give each group of Sparks that serves one model its own "
        "inventory"
    )


def rail_problems(path: str, sparks: dict[str, SparkSettings]) -> list[str]:
    """
    The QSFP address plan of two or more Sparks. A pair: rail N of one Spark is cabled to
    rail N of the other, so both ends share one subnet. Three to eight through a switch:
    rail N of every Spark is in one subnet, the head's. Every Spark lists the same number of
    rails (or none does), and no address is used twice.
    """
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
    problems = []
    used: dict[str, tuple[str, int]] = {}
    for name, spark in sparks.items():
        where = f"{path}: host '{name}', key 'qsfp'"
        for number, (theirs, rail) in enumerate(zip(one.qsfp, spark.qsfp), start=1):
            if rail.ip in used:
                owner, on = used[rail.ip]
                problems.append(
                    f"{where}, rail {number}, 'address': {rail.ip} is also the address of "
                    f"host '{owner}' on rail {on}; each Spark needs its own address"
                )
                continue
            used[rail.ip] = (name, number)
            if name == first or theirs.network == rail.network:
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
