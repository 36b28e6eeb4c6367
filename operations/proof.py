"""
Proof that the QSFP path works, and the engine environment written from what it found.

On every rail: a full-size ping to the peer with the don't-fragment bit (payload MTU - 28),
and the RoCE GID index of the rail's IPv4 address read from the kernel's GID table. Neither
is a change. When this run changes the network of either Spark of the pair, the proof must
follow those changes, so it runs at execution (the first command of the environment
operation); otherwise the network fact taken at planning already holds the pings and the
tables and the proof runs there, so a converged run stays one fact per host.
"""

from __future__ import annotations

import hashlib
import time

from pyinfra import host, logger, state
from pyinfra.api import DeployError, FunctionCommand, Host, OperationError, StringCommand
from pyinfra.api import deploy, operation

from operations.engine_env import render, write_command
from operations.network import IP_HEADERS, changes_planned, fact_arguments, network, peer_of
from operations.network_facts import LINK, Network, QsfpNetwork
from operations.roce import RailGid, check_gids
from operations.settings import ENGINE_ENV, SparkSettings

PROOF_TIMEOUT = 20  # seconds for fresh addresses to answer and GID tables to be rebuilt


class PathNotProven(DeployError):
    """A rail does not pass a jumbo frame or its RoCE GID is not the expected one."""


def proof(
    name: str, spark: SparkSettings, facts: Network, peer: Host | None, peer_mtus: dict[str, int]
) -> tuple[list[RailGid], list[str]]:
    """What the GID tables say about each rail, and every problem: the rails that drop a
    full don't-fragment frame (naming both ends and the MTUs seen there) and the GID
    index problems (showing the table)."""
    problems = []
    if peer is not None:
        for number, (mine, theirs) in enumerate(zip(spark.qsfp, peer.data.spark.qsfp), 1):
            ping = facts.pings.get(mine.interface)
            if ping is not None and ping.ok:
                continue
            link = facts.links.get(mine.interface)
            problems.append(
                f"rail {number}: {name} {mine.interface} {mine.ip} "
                f"(MTU {link.mtu if link else '?'}) got no reply from {peer.name} "
                f"{theirs.interface} {theirs.ip} (MTU {peer_mtus.get(theirs.interface, '?')}) "
                f"to a {mine.mtu - IP_HEADERS}-byte don't-fragment ping "
                f"({ping.detail if ping else 'not run'})"
            )
    rails = [(rail.interface, rail.ip) for rail in spark.qsfp]
    found, gid_problems = check_gids(facts.gids, rails, spark.roce_gid_index, spark.sysfs_root)
    return found, problems + gid_problems


def mtus(facts: Network) -> dict[str, int]:
    return {name: link.mtu for name, link in facts.links.items()}


def read_mtus(target: Host) -> dict[str, int]:
    """The MTUs the peer shows right now (only for the message of a failed proof)."""
    ok, output = target.run_shell_command(StringCommand("ip", "-o", "link", "show"))
    matches = (LINK.match(line) for line in output.stdout_lines) if ok else ()
    return {match["name"]: int(match["mtu"]) for match in matches if match}


def summary(found: list[RailGid], peer: Host | None) -> str:
    partner = f", jumbo path to {peer.name} proven" if peer else ""
    return "; ".join(
        f"rail {number} {rail.interface} {rail.ip}: RoCE v2 GID index {rail.gid.index} on "
        f"{rail.gid.dev} port {rail.gid.port}"
        for number, rail in enumerate(found, start=1)
        if rail.gid
    ) + partner


_PROVEN: dict[tuple[int, str], list[RailGid]] = {}


def record(target: Host, found: list[RailGid]) -> None:
    _PROVEN[(id(state), target.name)] = found
    logger.info(f"{target.print_prefix}QSFP proven: {summary(found, peer_of(target))}")


def prove_at_planning() -> None:
    """The proof from the network facts taken at planning (nothing changes in this run)."""
    spark: SparkSettings = host.data.spark
    peer = peer_of(host)
    found, problems = proof(
        host.name, spark, network(host), peer, mtus(network(peer)) if peer else {}
    )
    if problems:
        raise PathNotProven(
            f"{host.name}: the QSFP path is not proven, nothing was changed on any host:\n  - "
            + "\n  - ".join(problems)
        )
    record(host, found)


def prove_now(state, host) -> None:
    """The proof at execution, after this run's changes: retried while fresh addresses
    settle and the kernel rebuilds the GID tables."""
    spark: SparkSettings = host.data.spark
    peer = peer_of(host)
    deadline = time.monotonic() + PROOF_TIMEOUT
    while True:
        facts = host.get_fact(QsfpNetwork, **fact_arguments(host))
        found, problems = proof(host.name, spark, facts, peer, {})
        if not problems:
            record(host, found)
            return
        if time.monotonic() > deadline:
            break
        time.sleep(1)
    _, problems = proof(host.name, spark, facts, peer, read_mtus(peer) if peer else {})
    raise OperationError(
        f"{host.name}: the QSFP path is not proven after configuring it "
        f"({PROOF_TIMEOUT}s):\n  - " + "\n  - ".join(problems)
    )


@operation()
def engine_environment(path: str = ENGINE_ENV, prove_first: bool = False):
    """
    Write the environment file multi-node engines read (NCCL_IB_GID_INDEX, NCCL_IB_HCA,
    the socket interfaces, this node's and the peer's QSFP addresses, Ray settings) from
    what the QSFP proof found, only when its content differs.

    + path: the file to write
    + prove_first: run the proof now, at execution (this run changes the network), and
      write from what it finds; otherwise it was proven at planning

    **Example:**

    .. code:: python

        proof.engine_environment(
            name="Prove every rail, then write the engine environment",
            prove_first=True,
        )
    """
    if prove_first:
        # Planning stops at this first command; at execution the body goes on after it
        # has run, with what it recorded.
        yield FunctionCommand(prove_now, (), {})
    content = render(host, _PROVEN[(id(state), host.name)])
    if hashlib.sha256(content.encode()).hexdigest() == network(host).env_sha256:
        host.noop(f"{path} is up to date")
        return
    yield write_command(path, content)


@deploy("Prove the QSFP path and write the engine environment")
def prove_qsfp_path() -> None:
    """
    Prove every rail (jumbo ping to the peer, RoCE GID index) and write the engine
    environment. Nothing at all when ``qsfp`` is empty.
    """
    spark: SparkSettings = host.data.spark
    if not spark.qsfp:
        return
    peer = peer_of(host)
    if peer is not None and not peer.connected:
        raise PathNotProven(
            f"{host.name}: its peer {peer.name} did not connect, so the QSFP path between them "
            "cannot be proven; nothing was changed on any host. Run again when both answer."
        )
    prove_first = changes_planned(host) or (peer is not None and changes_planned(peer))
    if not prove_first:
        prove_at_planning()
    engine_environment(
        name=f"Write {ENGINE_ENV} from what the proof found", prove_first=prove_first
    )
