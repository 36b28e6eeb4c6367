"""
The environment file multi-node engines read, written from what the QSFP proof found on a
Spark: NCCL's RDMA devices and GID index, the socket interfaces, the pair's QSFP addresses.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

import jinja2
from pyinfra.api import Host

from operations.network import peer_of
from operations.roce import RailGid
from operations.settings import ENGINE_ENV, SparkSettings

TEMPLATES = Path(__file__).resolve().parents[1] / "templates"


@dataclass(frozen=True)
class EnvRail:
    interface: str
    address: str
    ip: str
    peer: str
    dev: str
    port: int
    index: int


def render(target: Host, found: list[RailGid]) -> str:
    """The engine environment of a Spark from what the proof found on it."""
    spark: SparkSettings = target.data.spark
    peer = peer_of(target)
    peer_ips = [rail.ip for rail in peer.data.spark.qsfp] if peer else [""] * len(spark.qsfp)
    rails = [
        EnvRail(rail.interface, rail.address, rail.ip, peer_ip, rail_gid.gid.dev,
                rail_gid.gid.port, rail_gid.gid.index)
        for rail, peer_ip, rail_gid in zip(spark.qsfp, peer_ips, found)
    ]
    sparks = list(target.inventory)  # inventory order: the first Spark is the head
    names = [other.name for other in sparks]
    template = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
    ).get_template("nccl.env.j2")
    return template.render(
        host=target.name,
        path=ENGINE_ENV,
        rails=rails,
        gid_index=rails[0].index,
        head=sparks[0].data.spark.qsfp[0].ip,
        rank=names.index(target.name),
        nodes=len(sparks),
    )


def write_command(path: str, content: str) -> str:
    """Replace the file at once (mode 0644, root), creating its folder."""
    q = shlex.quote
    folder, new = path.rsplit("/", 1)[0] or "/", f"{path}.new"
    return (
        f"install -d -m 0755 {q(folder)} && printf '%s' {q(content)} > {q(new)} && "
        f"chmod 0644 {q(new)} && chown root:root {q(new)} && mv -f {q(new)} {q(path)}"
    )
