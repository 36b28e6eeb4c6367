"""
Proof that the QSFP path works, and the engine environment written from what it found.

On every rail: a full-size ping with the don't-fragment bit (payload MTU - 28) to the other
Sparks' ends the proof pings (``qsfp_proof``: a pair pings each other; through a switch each
Spark pings the head, and the head every other Spark, or every Spark every other one with
``all``), and the RoCE GID index of the rail's IPv4 address read from the kernel's GID table,
per Spark. Neither is a change. When this run changes the network of this Spark or of a Spark
it pings, the proof must follow those changes, so it runs at execution (the first command of
the environment operation); otherwise the network fact taken at planning already holds the
pings and the tables and the proof runs there, so a converged run stays one fact per host.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping

from pyinfra import host, logger, state
from pyinfra.api import FunctionCommand, Host, OperationError, StringCommand, deploy, operation

from sparkdeploy.config.paths import NCCL_ENV
from sparkdeploy.config.spark import SparkSettings
from sparkdeploy.config.topology import Place
from sparkdeploy.deploys.managed import registered
from sparkdeploy.deploys.qsfp.cabling import End, cabling_fix
from sparkdeploy.deploys.qsfp.nccl_env import nccl_env, write_command
from sparkdeploy.deploys.qsfp.network import changes_planned
from sparkdeploy.deploys.refuse import refuse
from sparkdeploy.facts.network import (
    IP_HEADERS,
    LINK,
    Network,
    QsfpNetwork,
    RingNeighbours,
    fact_arguments,
    network,
    pinged,
)
from sparkdeploy.facts.roce import RailGid, check_gids
from sparkdeploy.facts.store import gathered, run_store
from sparkdeploy.reports.failures import expected, status_command

PROOF_TIMEOUT = 20  # seconds for fresh addresses to answer and GID tables to be rebuilt
PROVEN = "qsfp-proven"  # the run store's result key: what the proof found on a host


def proof(
    spark: SparkSettings,
    place: Place,
    facts: Network,
    their_mtus: Mapping[str, Mapping[str, int]],
) -> tuple[list[RailGid], list[str]]:
    """What the GID tables say about each rail, and every problem: the paths that drop a
    full don't-fragment frame (naming both ends and the MTUs seen there: ``their_mtus``,
    Spark -> interface -> MTU, where known) and the GID index problems (showing the
    table)."""
    problems = []
    switch = (
        "; through a switch, the switch ports' MTU must allow jumbo frames too"
        if place.switched
        else ""
    )
    for rail in place.rails:
        for end in place.ping_ends(rail, spark.qsfp_proof):
            ping = facts.pings.get((rail.interface, end.ip))
            if ping is not None and ping.ok:
                continue
            link = facts.links.get(rail.interface)
            problems.append(
                f"rail {rail.number}: {place.name} {rail.interface} {rail.ip} "
                f"(MTU {link.mtu if link else '?'}) got no reply from {end.name} "
                f"{end.interface} {end.ip} "
                f"(MTU {their_mtus.get(end.name, {}).get(end.interface, '?')}) "
                f"to a {rail.mtu - IP_HEADERS}-byte don't-fragment ping "
                f"({ping.detail if ping else 'not run'}){switch}"
            )
    rails = [(rail.interface, rail.ip) for rail in place.rails]
    found, gid_problems = check_gids(facts.gids, rails, spark.roce_gid_index, spark.sysfs_root)
    return found, problems + gid_problems


def mtus(facts: Network) -> dict[str, int]:
    return {name: link.mtu for name, link in facts.links.items()}


def read_mtus(target: Host) -> dict[str, int]:
    """The MTUs the peer shows right now (only for the message of a failed proof)."""
    ok, output = target.run_shell_command(StringCommand("ip", "-o", "link", "show"))
    matches = (LINK.match(line) for line in output.stdout_lines) if ok else ()
    return {match["name"]: int(match["mtu"]) for match in matches if match}


def summary(found: list[RailGid], others: list[Host]) -> str:
    names = ", ".join(other.name for other in others)
    partner = f", jumbo path to {names} proven" if others else ""
    return (
        "; ".join(
            f"rail {number} {rail.interface} {rail.ip}: RoCE v2 GID index {rail.gid.index} on "
            f"{rail.gid.dev} port {rail.gid.port}"
            for number, rail in enumerate(found, start=1)
            if rail.gid
        )
        + partner
    )


def record(target: Host, found: list[RailGid]) -> None:
    run_store(target.state).results[(target.name, PROVEN)] = found
    logger.info(f"{target.print_prefix}QSFP proven: {summary(found, pinged(target))}")


def ring_members(target: Host) -> list[Host]:
    """The Sparks of this Spark's ring, in inventory order ([] when it is in none)."""
    place: Place = target.data.place
    names = {cable.a for cable in place.cables}
    return [target.inventory.get_host(name) for name in target.inventory.hosts if name in names]


def ring_cabling(target: Host) -> list[str]:
    """
    In a ring whose proof failed: which port each Spark's ports really reach (every other
    address of the ring asked through each of its interfaces, the answering MAC looked up
    in the Sparks' own links) and the exact move that fixes the cabling (cabling.py).
    Empty outside a ring, or when every port that answered is where the ring wants it.
    """
    place: Place = target.data.place
    members = ring_members(target)
    if not place.ringed or not members:
        return []
    macs: dict[str, End] = {}
    for member in members:
        links = network(member).links
        for rail in member.data.place.rails:
            link = links.get(rail.interface)
            if link is not None and link.mac and rail.port is not None:
                macs[link.mac] = (member.name, rail.port)
    seen: dict[End, End] = {}
    for member in members:
        rails = member.data.place.rails
        others = [r.ip for m in members if m is not member for r in m.data.place.rails]
        # once per run however many Sparks' proofs failed: each probe flushes the member's
        # neighbour caches, so two at once on one Spark would spoil each other's answers
        found = gathered(member, RingNeighbours, asked=[(r.interface, others) for r in rails])
        for rail in rails:
            for _, mac in found.get(rail.interface, ()):
                if mac in macs and rail.port is not None:
                    seen[(member.name, rail.port)] = macs[mac]
    return cabling_fix(place.cables, seen)


def prove_at_planning() -> None:
    """The proof from the network facts taken at planning (nothing changes in this run)."""
    their_mtus = {other.name: mtus(network(other)) for other in pinged(host)}
    found, problems = proof(host.data.spark, host.data.place, network(host), their_mtus)
    if problems:
        problems = ring_cabling(host) + problems
        refuse(problems, lead=f"{host.name}: the QSFP path is not proven")
    record(host, found)


@expected("QSFP proof", then=(status_command("{host}") + "   (its rails and RoCE GIDs)",))
def prove_now(state, host) -> None:
    """The proof at execution, after this run's changes: retried while fresh addresses
    settle and the kernel rebuilds the GID tables."""
    spark: SparkSettings = host.data.spark
    place: Place = host.data.place
    deadline = time.monotonic() + PROOF_TIMEOUT
    while True:
        facts = host.get_fact(QsfpNetwork, **fact_arguments(host))
        found, problems = proof(spark, place, facts, {})
        if not problems:
            record(host, found)
            return
        if time.monotonic() > deadline:
            break
        time.sleep(1)
    _, problems = proof(
        spark, place, facts, {other.name: read_mtus(other) for other in pinged(host)}
    )
    problems = ring_cabling(host) + problems
    raise OperationError(
        f"{host.name}: the QSFP path is not proven after configuring it "
        f"({PROOF_TIMEOUT}s):\n  - " + "\n  - ".join(problems)
    )


@operation()
def engine_environment(path: str = NCCL_ENV, prove_first: bool = False):
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
    registered(path)  # declared in the registry, read by the QSFP network fact
    if prove_first:
        # Planning stops at this first command; at execution the body goes on after it
        # has run, with what it recorded.
        yield FunctionCommand(prove_now, (), {})
    content = nccl_env(host.data.place, run_store(state).results[(host.name, PROVEN)])
    if hashlib.sha256(content.encode()).hexdigest() == network(host).env_sha256:
        host.noop(f"{path} is up to date")
        return
    yield write_command(path, content)


@deploy("Prove the QSFP path and write the engine environment")
def prove_qsfp_path() -> None:
    """
    Prove every rail (jumbo pings to the other Sparks, RoCE GID index) and write the engine
    environment. Nothing at all when ``qsfp`` is empty.
    """
    spark: SparkSettings = host.data.spark
    if not spark.qsfp:
        return
    others = pinged(host)
    absent = [other.name for other in others if not other.connected]
    if absent:
        pair = host.data.place.peer is not None
        refuse(
            [
                f"its peer {absent[0]} did not connect, so the QSFP path between them "
                "cannot be proven"
                if pair
                else f"{', '.join(absent)} did not connect, so the QSFP path to "
                f"{'it' if len(absent) == 1 else 'them'} cannot be proven"
            ],
            fix="Run again when both answer." if pair else "Run again when all answer.",
            lead=f"{host.name}: the QSFP path is not proven",
        )
    prove_first = changes_planned(host) or any(changes_planned(other) for other in others)
    if not prove_first:
        prove_at_planning()
    engine_environment(name=f"Write {NCCL_ENV} from what the proof found", prove_first=prove_first)
