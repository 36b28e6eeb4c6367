"""
The environment file multi-node engines read, written from what the QSFP proof found on a
Spark: NCCL's RDMA devices and GID index, the socket interfaces, the pair's QSFP addresses.
"""

from __future__ import annotations

from dataclasses import dataclass

from sparkdeploy.config.paths import NCCL_ENV
from sparkdeploy.config.topology import Place
from sparkdeploy.escape import shell
from sparkdeploy.facts.roce import RailGid
from sparkdeploy.knowledge.ring import ring_env
from sparkdeploy.render import render


@dataclass(frozen=True)
class EnvRail:
    interface: str
    address: str
    ip: str
    peer: str
    dev: str
    port: int
    index: int
    far: str = ""  # the far end of the rail, in words ("" when the comment has none)


def nccl_env(place: Place, found: list[RailGid]) -> str:
    """The engine environment of a Spark from its place and what the proof found on it."""
    rails = []
    for rail, rail_gid in zip(place.rails, found):
        gid = rail_gid.gid
        if gid is None:
            raise ValueError(
                f"{place.name}: rail {rail.interface} has no RoCE v2 GID; the engine "
                "environment is written only from a passed QSFP proof, which finds one on "
                "every rail"
            )
        far = rail.peer_ip
        if place.ringed and rail.ends:
            far = " ".join((rail.ends[0].name, rail.ends[0].interface, rail.ends[0].ip))
        rails.append(
            EnvRail(
                rail.interface,
                rail.address,
                rail.ip,
                rail.peer_ip,
                gid.dev,
                gid.port,
                gid.index,
                far,
            )  # fmt: skip
        )
    return render(
        "nccl.env.j2",
        host=place.name,
        path=NCCL_ENV,
        rails=rails,
        gid_index=rails[0].index,
        head=place.head_ip,
        rank=place.rank,
        nodes=place.nodes,
        ring=ring_env(place.nodes) if place.ringed else (),
        meeting=place.meeting if place.ringed else None,
    )


def write_command(path: str, content: str) -> str:
    """Replace the file at once (mode 0644, root), creating its folder."""
    q = shell
    folder, new = path.rsplit("/", 1)[0] or "/", f"{path}.new"
    return (
        f"install -d -m 0755 {q(folder)} && printf '%s' {q(content)} > {q(new)} && "
        f"chmod 0644 {q(new)} && chown root:root {q(new)} && mv -f {q(new)} {q(path)}"
    )
