"""
The layout of the Sparks, worked out once from validated settings: which Spark is the head
(the first in the inventory), each Spark's rank, its peer, and both ends of every QSFP rail.
Frozen; the plan, the network operations, the engine environment and the status table all
read it from here.
"""

from __future__ import annotations

from dataclasses import dataclass

from sparkdeploy.config.spark import SparkSettings


@dataclass(frozen=True)
class Rail:
    """Rail ``number`` (from 1) of a Spark: this end, and the peer's end when cabled."""

    number: int
    interface: str
    address: str  # CIDR
    ip: str
    mtu: int
    peer_interface: str = ""  # "" without a peer or when the peer lists fewer rails
    peer_ip: str = ""


@dataclass(frozen=True)
class Place:
    """One Spark's place among the Sparks of the inventory."""

    name: str
    rank: int  # inventory order: 0 is the head
    nodes: int  # Sparks in the inventory
    head: str  # name of the head Spark
    head_ip: str  # the head's address on its first rail, "" when it has none
    peer: str | None  # the other Spark of a pair
    rails: tuple[Rail, ...]

    @property
    def linked(self) -> bool:
        """On the QSFP fabric with the others: more than one Spark, rails listed, the head reachable on rail 1."""
        return self.nodes > 1 and bool(self.rails) and bool(self.head_ip)

    @property
    def paired(self) -> bool:
        """Cabled to a peer: both Sparks list their QSFP rails."""
        return self.peer is not None and bool(self.rails) and bool(self.rails[0].peer_ip)


@dataclass(frozen=True)
class Topology:
    places: dict[str, Place]  # name -> place, in inventory order

    @classmethod
    def of(cls, sparks: dict[str, SparkSettings]) -> Topology:
        names = list(sparks)
        head = names[0] if names else ""
        head_rails = sparks[head].qsfp if head else []
        places = {}
        for rank, (name, spark) in enumerate(sparks.items()):
            peer = next((other for other in names if other != name), None)
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
                )
                for number, rail in enumerate(spark.qsfp, start=1)
            )
            places[name] = Place(
                name, rank, len(names), head, head_rails[0].ip if head_rails else "", peer, rails
            )
        return cls(places)

    def __getitem__(self, name: str) -> Place:
        return self.places[name]


def rail_problems(path: str, sparks: dict[str, SparkSettings]) -> list[str]:
    """The QSFP address plan of a pair: rail N of one Spark is cabled to rail N of the
    other, so both ends share one subnet, and no address is used twice."""
    if len(sparks) != 2:
        return []
    (first, one), (second, two) = sparks.items()
    where = f"{path}: host '{second}', key 'qsfp'"
    if len(one.qsfp) != len(two.qsfp):
        return [
            f"{where}: {len(two.qsfp)} rail(s), but host '{first}' has {len(one.qsfp)}; rail N "
            "of one Spark is cabled to rail N of the other, so list the same number of rails "
            "on both (or none on either)"
        ]
    problems = []
    addresses = {rail.ip: number for number, rail in enumerate(one.qsfp, start=1)}
    for number, (a, b) in enumerate(zip(one.qsfp, two.qsfp), start=1):
        if b.ip in addresses:
            problems.append(
                f"{where}, rail {number}, 'address': {b.ip} is also the address of host "
                f"'{first}' on rail {addresses[b.ip]}; each Spark needs its own address"
            )
        elif a.network != b.network:
            problems.append(
                f"{where}, rail {number}, 'address': {b.address} is not in {a.network}, the "
                f"subnet of rail {number} on host '{first}' ({a.address}); both ends of a rail "
                "share one subnet"
            )
    return problems
