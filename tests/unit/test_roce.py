"""
RoCE GID tables: the fact's shell part run on sysfs-format trees built from show_gids
listings of a Spark (fixtures/*.gids.txt), then parsed and checked.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from sparkdeploy.facts.network import QsfpNetwork
from sparkdeploy.facts.roce import (
    ZERO_GID,
    Gid,
    RailGid,
    check_gids,
    format_table,
    gid_table_command,
    rdma_devices,
)

FIXTURES = Path(__file__).parent / "fixtures"
TABLE_SIZE = 255  # entries per port, as a ConnectX-7 port has
TYPES = {"v1": "IB/RoCE v1", "v2": "RoCE v2"}
RAILS_1 = [("enp1s0f0np0", "192.168.100.1"), ("enP2p1s0f0np0", "192.168.101.1")]
RAILS_2 = [("enp1s0f0np0", "192.168.100.2"), ("enP2p1s0f0np0", "192.168.101.2")]


def found_gid(rail: RailGid) -> Gid:
    """The RoCE v2 GID found for a rail, which these tables have."""
    assert rail.gid is not None, f"no RoCE v2 GID found for {rail.interface}"
    return rail.gid


def sysfs_from_show_gids(listing: Path, root: Path) -> Path:
    """A sysfs tree as the kernel lays it out, from a show_gids listing: every port has
    TABLE_SIZE gids (all zeros when unused); the type and netdev of an unused entry cannot
    be read (EINVAL on a real kernel; here a directory in place of the file, or nothing)."""
    ports: dict[Path, dict[int, tuple[str, str, str]]] = {}
    for line in listing.read_text().splitlines():
        cells = line.split()
        if len(cells) < 6 or not cells[2].isdigit():
            continue
        dev, port, index, gid, version, ndev = *cells[:4], cells[-2], cells[-1]
        where = root / "class/infiniband" / dev / "ports" / port
        ports.setdefault(where, {})[int(index)] = (gid, TYPES[version], ndev)
    for where, entries in ports.items():
        for folder in ("gids", "gid_attrs/types", "gid_attrs/ndevs"):
            (where / folder).mkdir(parents=True)
        for slot in range(TABLE_SIZE):
            gid, kind, ndev = entries.get(slot, (ZERO_GID, "", ""))
            (where / "gids" / str(slot)).write_text(gid + "\n")
            if kind:
                (where / "gid_attrs/types" / str(slot)).write_text(kind + "\n")
                (where / "gid_attrs/ndevs" / str(slot)).write_text(ndev + "\n")
            elif slot % 2:
                (where / "gid_attrs/types" / str(slot)).mkdir()  # unreadable
    return root


def read_tables(listing: str, tmp_path: Path):
    """What the network fact returns for the GID tables of this listing."""
    root = sysfs_from_show_gids(FIXTURES / listing, tmp_path / "sys")
    done = subprocess.run(
        ["sh", "-c", gid_table_command(str(root))], capture_output=True, text=True, check=True
    )
    return QsfpNetwork().process(done.stdout.splitlines()).gids, str(root)


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    """read_tables of a listing, its tree built once per module and worker: a tree is about
    2,000 files and folders (four ports of TABLE_SIZE entries), some 1.5 s of CPU to make
    (2026-11-27, this machine kind), and the tests only read it."""
    made: dict[str, tuple] = {}

    def read(listing: str):
        if listing not in made:
            made[listing] = read_tables(listing, tmp_path_factory.mktemp("gids"))
        return made[listing]

    return read


def test_a_spark_has_roce_v2_ipv4_at_index_3(tables):
    table, root = tables("spark-1.gids.txt")
    assert len(table) == 12  # n_gids_found: zeros and unreadable entries are left out
    found, problems = check_gids(table, RAILS_1, 3, root)
    assert problems == []
    assert [(found_gid(r).dev, found_gid(r).port, found_gid(r).index) for r in found] == [
        ("rocep1s0f0", 1, 3),
        ("roceP2p1s0f0", 1, 3),
    ]
    assert found_gid(found[0]).type == "RoCE v2" and found_gid(found[0]).ipv4 == "192.168.100.1"
    assert rdma_devices(table, "enP2p1s0f0np0") == ["roceP2p1s0f0"]
    assert rdma_devices(table, "enp1s0f1np1") == ["rocep1s0f1"]  # no address: no IPv4 GID


def test_a_node_whose_roce_v2_ipv4_entry_moved_is_refused_with_its_table(tables):
    table, root = tables("spark-2-moved.gids.txt")
    found, problems = check_gids(table, RAILS_2, 3, root)
    assert [found_gid(r).index for r in found] == [5, 5]
    assert len(problems) == 2
    assert problems[0].startswith(
        "rail 1 (enp1s0f0np0, 192.168.100.2): the RoCE v2 GID of 192.168.100.2 is at index 5 "
        "on rocep1s0f0 port 1, not 3 (roce_gid_index)"
    )
    shown = problems[0].splitlines()[1:]
    assert shown[0].split() == ["DEV", "PORT", "INDEX", "GID", "IPv4", "VER", "DEV"]
    assert shown[-1].split() == [
        "rocep1s0f0",
        "1",
        "5",
        "0000:0000:0000:0000:0000:ffff:c0a8:6402",
        "192.168.100.2",
        "v2",
        "enp1s0f0np0",
    ]
    assert len(shown) == 7  # header and the six entries of rocep1s0f0 only


def test_auto_takes_the_index_found(tables):
    table, root = tables("spark-2-moved.gids.txt")
    found, problems = check_gids(table, RAILS_2, "auto", root)
    assert problems == [] and [found_gid(r).index for r in found] == [5, 5]
    _, problems = check_gids(table, RAILS_2, 5, root)
    assert problems == []


def test_address_without_a_roce_v2_entry(tables):
    table, root = tables("spark-1.gids.txt")
    _, problems = check_gids(table, [("enp1s0f0np0", "192.168.100.9")], "auto", root)
    [problem] = problems
    assert problem.startswith(
        "rail 1 (enp1s0f0np0, 192.168.100.9): no RoCE v2 GID carries 192.168.100.9 on rocep1s0f0:"
    )


def test_interface_without_an_rdma_device(tables):
    table, root = tables("spark-1.gids.txt")
    _, problems = check_gids(table, [("eth9", "10.0.0.1")], 3, root)
    assert problems == [
        f"rail 1 (eth9, 10.0.0.1): no RDMA device under {root}/class/infiniband lists eth9 in "
        "gid_attrs/ndevs; is the ConnectX-7 RDMA driver (mlx5_ib) loaded and the interface up?"
    ]


def test_no_infiniband_tree_at_all_is_an_empty_table(tmp_path):
    done = subprocess.run(
        ["sh", "-c", gid_table_command(str(tmp_path / "nothing"))],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0 and done.stdout == ""


def test_rails_at_different_indexes_cannot_share_one_nccl_index(tables):
    one, _ = tables("spark-1.gids.txt")
    two, root = tables("spark-2-moved.gids.txt")
    mixed = tuple(g for g in one if g.dev == "rocep1s0f0") + tuple(
        g for g in two if g.dev == "roceP2p1s0f0"
    )
    rails = [("enp1s0f0np0", "192.168.100.1"), ("enP2p1s0f0np0", "192.168.101.2")]
    _, problems = check_gids(mixed, rails, "auto", root)
    [problem] = problems
    assert problem.startswith(
        "the RoCE v2 GIDs of the rails are at different indexes (enp1s0f0np0: 3, "
        "enP2p1s0f0np0: 5); NCCL_IB_GID_INDEX takes one index for all of them"
    )


@pytest.mark.parametrize(
    "gid, ipv4",
    [
        ("0000:0000:0000:0000:0000:ffff:c0a8:6401", "192.168.100.1"),
        ("fe80:0000:0000:0000:4ebb:47ff:fe0a:1c2e", ""),
        ("not a gid", ""),
    ],
)
def test_ipv4_of_a_gid(gid, ipv4):
    assert Gid("d", 1, 0, gid, "RoCE v2", "n").ipv4 == ipv4


def test_format_table_without_entries():
    assert format_table((), ["rocep1s0f0"]) == "    (no GID entries)"
