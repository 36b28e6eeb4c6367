"""
Which cable is where in a ring, read from the addresses that answer, and the exact move that
makes the cabling the ring the inventory describes (port 0 of each Spark to port 1 of the
next). Pure: the ring's cables and what each port saw in, sentences out.

What a port saw: the proof of a ring pings the one neighbour each logical interface is
linked to; when such a ping fails, the Spark asks every other address of the ring through
that interface (``facts/network.RingNeighbours``). Linux answers ARP for any of its
addresses on any interface (arp_ignore 0, the default), so the MAC address that answers names
the far interface exactly, whatever subnet it is in; the MACs come from each Spark's own
network fact.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from sparkdeploy.config.ring import Cable

End = tuple[str, int]  # (Spark, port)
Wiring = frozenset[frozenset[End]]


def wiring_of(cables: Iterable[Cable]) -> Wiring:
    """The cabling the inventory describes, as unordered pairs of (Spark, port) ends."""
    return frozenset(frozenset({(cable.a, 0), (cable.b, 1)}) for cable in cables)


def seen_wiring(seen: Mapping[End, End]) -> Wiring:
    """The cabling the probes found: each port -> the far end that answered on it."""
    return frozenset(frozenset({near, far}) for near, far in seen.items() if near != far)


def _port(end: End) -> str:
    return f"{end[0]} port {end[1]}"


def _exchanged(wiring: Wiring, x: End, y: End) -> Wiring:
    """The wiring with the cables in ends ``x`` and ``y`` exchanged."""
    swap = {x: y, y: x}
    return frozenset(frozenset(swap.get(end, end) for end in cable) for cable in wiring)


def cabling_fix(cables: tuple[Cable, ...], seen: Mapping[End, End]) -> list[str]:
    """
    What is wrong with the cabling and the exact move that fixes it: the cables in two
    ports exchanged (at one Spark, or between two), else each port whose far end is not the
    ring's. Empty when every port that answered is cabled as the ring says.
    """
    wanted = wiring_of(cables)
    found = seen_wiring(seen)
    wrong = sorted(sorted(cable) for cable in found - wanted)
    if not wrong:
        return []
    said = "; ".join(f"{_port(near)} is cabled to {_port(far)}" for near, far in wrong)
    ends = sorted({end for cable in found for end in cable})
    for i, x in enumerate(ends):
        for y in ends[i + 1 :]:
            if _exchanged(found, x, y) == wanted:
                return [
                    f"the ring is miscabled ({said}): exchange the cables in {_port(x)} and "
                    f"{_port(y)}, so that port 0 of each Spark goes to port 1 of the next in "
                    f"inventory order ({_ring_words(cables)})"
                ]
    return [
        f"the ring is miscabled ({said}); it needs port 0 of each Spark cabled to port 1 of "
        f"the next in inventory order: {_ring_words(cables)}"
    ]


def _ring_words(cables: tuple[Cable, ...]) -> str:
    return ", ".join(f"{cable.a} port 0 to {cable.b} port 1" for cable in cables)
