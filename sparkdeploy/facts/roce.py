"""
RoCE GID tables: which GID index carries a QSFP interface's IPv4 address as RoCE v2.

The kernel keeps one GID table per RDMA port under sysfs, in three parallel folders::

    <sysfs>/class/infiniband/rocep1s0f0/ports/1/gids/3             0000:...:ffff:c0a8:6401
    <sysfs>/class/infiniband/rocep1s0f0/ports/1/gid_attrs/types/3  RoCE v2
    <sysfs>/class/infiniband/rocep1s0f0/ports/1/gid_attrs/ndevs/3  enp1s0f0np0

On a ConnectX-7 the table of a port holding one IPv4 address reads: 0 and 1 the link-local
fe80 GID (RoCE v1, v2), 2 and 3 the IPv4-mapped GID ::ffff:a.b.c.d (v1, v2). Unused
entries are all zeros and their type and netdev cannot be read. The kernel rebuilds the
table when addresses change, so the index of the RoCE v2 IPv4 entry is per node and may
move after a reboot: NCCL_IB_GID_INDEX must be what is found, not what is hoped for.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from sparkdeploy.escape import shell
from sparkdeploy.render import aligned

ZERO_GID = ":".join(["0000"] * 8)
ROCE_V2 = "RoCE v2"
GID_LINE = re.compile(
    r"^(?P<root>.*)/class/infiniband/(?P<dev>[^/]+)/ports/(?P<port>\d+)/"
    r"(?P<kind>gids|gid_attrs/types|gid_attrs/ndevs)/(?P<index>\d+):(?P<value>.*)$"
)


@dataclass(frozen=True)
class Gid:
    dev: str  # RDMA device, such as rocep1s0f0
    port: int
    index: int
    gid: str  # as sysfs prints it: eight groups of four hex digits
    type: str  # "IB/RoCE v1" or "RoCE v2"; "" when unreadable
    ndev: str  # the netdev the entry belongs to; "" when unreadable

    @property
    def ipv4(self) -> str:
        """The IPv4 address of an IPv4-mapped GID (::ffff:a.b.c.d), "" for any other."""
        try:
            mapped = ipaddress.IPv6Address(self.gid).ipv4_mapped
        except ValueError:
            return ""
        return str(mapped) if mapped else ""


def gid_table_command(sysfs_root: str) -> str:
    """
    Shell that prints every non-zero GID of every RDMA port under the sysfs root, and the
    readable type and netdev entries, as `gid=<path>:<value>` lines (grep -H). A real
    kernel answers EINVAL for the type of an unused entry: grep skips it (stderr is
    dropped), and the whole command still succeeds.
    """
    ports = f"{shell(sysfs_root.rstrip('/') + '/class/infiniband')}/*/ports/*"
    return (
        f"grep -H . {ports}/gids/* {ports}/gid_attrs/types/* {ports}/gid_attrs/ndevs/* "
        f"2>/dev/null | grep -v '/gids/[0-9]*:{ZERO_GID}$' | sed 's/^/gid=/'"
    )


def parse_gid_lines(values: list[str]) -> tuple[Gid, ...]:
    """The `<path>:<value>` lines of `gid_table_command` (prefix removed) as a table,
    sorted by device, port and index; all-zero GIDs are left out."""
    entries: dict[tuple[str, int, int], dict[str, str]] = {}
    for line in values:
        match = GID_LINE.match(line.strip())
        if not match:
            continue
        key = (match["dev"], int(match["port"]), int(match["index"]))
        kind = match["kind"].rsplit("/", 1)[-1]  # gids, types or ndevs
        entries.setdefault(key, {})[kind] = match["value"].strip()
    table = [
        Gid(dev, port, index, found["gids"], found.get("types", ""), found.get("ndevs", ""))
        for (dev, port, index), found in sorted(entries.items())
        if found.get("gids", ZERO_GID) != ZERO_GID
    ]
    return tuple(table)


def rdma_devices(table: tuple[Gid, ...], interface: str) -> list[str]:
    """The RDMA devices whose GID entries name this netdev (rocep1s0f0 for enp1s0f0np0)."""
    return sorted({gid.dev for gid in table if gid.ndev == interface})


def roce_v2_ipv4(table: tuple[Gid, ...], interface: str, ip: str) -> Gid | None:
    """The RoCE v2 entry of this netdev that carries this IPv4 address (lowest index)."""
    for gid in table:
        if gid.ndev == interface and gid.type == ROCE_V2 and gid.ipv4 == ip:
            return gid
    return None


def format_table(table: tuple[Gid, ...], devs: list[str]) -> str:
    """The GID tables of these devices, laid out like Mellanox's show_gids."""
    rows = [("DEV", "PORT", "INDEX", "GID", "IPv4", "VER", "DEV")]
    for gid in table:
        if gid.dev in devs:
            version = {"IB/RoCE v1": "v1", ROCE_V2: "v2"}.get(gid.type, gid.type or "?")
            rows.append(
                (gid.dev, str(gid.port), str(gid.index), gid.gid, gid.ipv4, version, gid.ndev)
            )
    if len(rows) == 1:
        return "    (no GID entries)"
    return aligned(rows, indent="    ")


@dataclass(frozen=True)
class RailGid:
    interface: str
    ip: str
    gid: Gid | None
    devs: list[str]


def check_gids(
    table: tuple[Gid, ...], rails: list[tuple[str, str]], expected: int | str, sysfs_root: str
) -> tuple[list[RailGid], list[str]]:
    """
    Find the RoCE v2 entry of each (interface, IPv4) rail and compare its index with the
    expected one (an index, or "auto" for whatever is found, the same on every rail, as
    NCCL_IB_GID_INDEX is one number). Returns what was found and the problems, each
    showing the table it was read from.
    """
    found = [
        RailGid(name, ip, roce_v2_ipv4(table, name, ip), rdma_devices(table, name))
        for name, ip in rails
    ]
    problems = []
    for number, rail in enumerate(found, start=1):
        where = f"rail {number} ({rail.interface}, {rail.ip})"
        if not rail.devs:
            problems.append(
                f"{where}: no RDMA device under {sysfs_root}/class/infiniband lists "
                f"{rail.interface} in gid_attrs/ndevs; is the ConnectX-7 RDMA driver "
                "(mlx5_ib) loaded and the interface up?"
            )
        elif rail.gid is None:
            problems.append(
                f"{where}: no RoCE v2 GID carries {rail.ip} on {', '.join(rail.devs)}:\n"
                + format_table(table, rail.devs)
            )
        elif expected != "auto" and rail.gid.index != expected:
            problems.append(
                f"{where}: the RoCE v2 GID of {rail.ip} is at index {rail.gid.index} on "
                f"{rail.gid.dev} port {rail.gid.port}, not {expected} (roce_gid_index); "
                "set roce_gid_index to "
                f"{rail.gid.index} or auto for this host if that is expected:\n"
                + format_table(table, rail.devs)
            )
    indexes = sorted({rail.gid.index for rail in found if rail.gid})
    if not problems and len(indexes) > 1:
        problems.append(
            "the RoCE v2 GIDs of the rails are at different indexes "
            f"({', '.join(f'{r.interface}: {r.gid.index}' for r in found if r.gid)}); "
            "NCCL_IB_GID_INDEX takes one index for all of them:\n"
            + format_table(table, sorted({d for r in found for d in r.devs}))
        )
    return found, problems
