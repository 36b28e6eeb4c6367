"""
The fabric guard: the engines' rendezvous (torch's TCPStore, SGLang's and vLLM's ZMQ, which
unpickle what they receive), Ray (GCS, workers), the link test's rendezvous and the copy
server listen on the host network of a pair or cluster, and their protocols run code for
whoever connects. An nftables table of the deploy's own (``inet spark_deploy``, in
/etc/spark-deploy/fabric-guard.nft, loaded at boot by spark-fabric-guard.service) lets only
the other Sparks' rail addresses and loopback reach those ports, and the ephemeral ports the
engines' other listeners take; SSH and the ports that serve clients are never dropped.

On one Spark there is nothing to guard: the engines rendezvous on loopback (SGLang's
PortArgs use ipc:// sockets for one node, vLLM's single-node init method is 127.0.0.1), and
neither the link test nor the copy server runs; a guard left from a pair is retired.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyinfra import host
from pyinfra.api import deploy, operation

from sparkdeploy.config.paths import (
    FABRIC_GUARD,
    FABRIC_GUARD_TABLE,
    FABRIC_GUARD_UNIT,
    FABRIC_GUARD_UNIT_NAME,
)
from sparkdeploy.config.spark import SparkSettings
from sparkdeploy.config.topology import Place
from sparkdeploy.deploys.fetch.jobs import PAIR_COPY_PORT
from sparkdeploy.deploys.managed import managed_file
from sparkdeploy.engine_plan.plan import EnginePlan
from sparkdeploy.facts.host_state import host_state
from sparkdeploy.render import render

# Linux's default net.ipv4.ip_local_port_range (Documentation/networking/ip-sysctl.rst):
# where a listener bound to port 0 lands.
EPHEMERAL = (32768, 60999)
SSH_PORT = 22  # besides the inventory's ssh_port: the operator's own logins
NFTABLES = (
    "export DEBIAN_FRONTEND=noninteractive; "
    "apt-get install -y -q --no-install-recommends nftables "
    "|| { apt-get update -q && apt-get install -y -q --no-install-recommends nftables; }"
)


@dataclass(frozen=True)
class Guard:
    """What the table says: who may connect, which ports it closes, which it never does."""

    peers: tuple[str, ...]
    control: tuple[tuple[int, int], ...]  # (first, last) port ranges, merged
    kept: tuple[int, ...]
    reasons: tuple[str, ...]  # where each control range comes from


def _merged(spans: list[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """Overlapping or adjacent ranges as one (an nftables interval set refuses overlaps)."""
    merged: list[tuple[int, int]] = []
    for first, last in sorted(spans):
        if merged and first <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(last, merged[-1][1]))
        else:
            merged.append((first, last))
    return tuple(merged)


def guard_of(spark: SparkSettings, place: Place, plan: EnginePlan | None) -> Guard | None:
    """The guard of a Spark among others (None alone): the control ports of its engine plan,
    the link test's and the copy server's, open to the other Sparks' rail addresses."""
    if not place.linked:
        return None
    # In a ring the engines meet on the management network (Place.meet_interface).
    peers = sorted({end.ip for rail in place.rails for end in rail.ends} | set(place.meeting_peers))
    engine = list(plan.control_ports) if plan else []
    spans = [*engine, (spark.link_test_port,) * 2, (PAIR_COPY_PORT,) * 2]
    reasons = [
        *([f"the engine's rendezvous, ZMQ and Ray ports {_words(engine)}"] if engine else []),
        f"the link test's rendezvous {spark.link_test_port} (link_test_port)",
        f"the copy server {PAIR_COPY_PORT} (fetch/jobs.py PAIR_COPY_PORT)",
    ]
    kept = {SSH_PORT, spark.ssh_port, *(service.port for service in spark.gpu_services)}
    if plan is not None:
        kept.add(plan.port)  # engine.bind decides who reaches the API, not the guard
    return Guard(tuple(peers), _merged(spans), tuple(sorted(kept)), tuple(reasons))


def _words(spans: list[tuple[int, int]] | tuple[tuple[int, int], ...]) -> str:
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def guard_text(place: Place, guard: Guard) -> str:
    """The nftables file of the guard."""
    return render(
        "fabric-guard.nft.j2",
        host=place.name,
        layout="pair" if place.nodes == 2 else "ring" if place.ringed else "cluster",
        table=FABRIC_GUARD_TABLE,
        peers=guard.peers,
        kept=guard.kept,
        control=_words(guard.control).split(", "),
        reasons=guard.reasons,
        ephemeral=f"{EPHEMERAL[0]}-{EPHEMERAL[1]}",
    )


@operation()
def nftables_installed():
    """
    Install the nftables package (DGX OS has it; a minimal image may not).

    **Example:**

    .. code:: python

        guard.nftables_installed()
    """
    if "nftables" in host_state().packages:
        host.noop("nftables is installed")
        return
    yield NFTABLES


@operation()
def guard_loaded(reload: bool = False):
    """
    Enable the guard's unit and load its table: only when the file or unit changed
    (``reload``), the table is not loaded (an operator's `flush ruleset`), or the unit is not
    enabled; reloading replaces the table in one transaction.

    + reload: the file or unit changed in this run

    **Example:**

    .. code:: python

        guard.guard_loaded(reload=True)
    """
    state = host_state()
    enabled = state.units.get(FABRIC_GUARD_UNIT_NAME, ("", ""))[1] == "enabled"
    if not reload and enabled and state.fabric.get("table") == "1":
        host.noop(f"table {FABRIC_GUARD_TABLE} is loaded from {FABRIC_GUARD}")
        return
    unit = FABRIC_GUARD_UNIT_NAME
    yield (
        f"systemctl daemon-reload && systemctl enable {unit} && systemctl reload-or-restart {unit}"
    )


@operation()
def guard_retired():
    """
    Remove the guard (one Spark: nothing listens for other Sparks): its unit, table and file.

    **Example:**

    .. code:: python

        guard.guard_retired()
    """
    if host_state().fabric.get("present") != "1":
        host.noop("no fabric guard on this Spark")
        return
    unit = FABRIC_GUARD_UNIT_NAME
    yield (
        f"systemctl disable --now {unit} 2>/dev/null; "
        f"nft delete table {FABRIC_GUARD_TABLE} 2>/dev/null; "
        f"rm -f {FABRIC_GUARD} {FABRIC_GUARD_UNIT} && systemctl daemon-reload"
    )


@deploy("Let only the other Sparks reach the control ports")
def guard_fabric() -> None:
    spark: SparkSettings = host.data.spark
    place: Place = host.data.place
    guard = guard_of(spark, place, host.data.get("engine_plan"))
    if guard is None:
        guard_retired(name="Retire the fabric guard (one Spark)")
        return
    nftables_installed(name="Install nftables")
    table = managed_file(
        name=f"Write the fabric guard ({FABRIC_GUARD})",
        path=FABRIC_GUARD,
        content=guard_text(place, guard),
    )
    unit = managed_file(
        name=f"Install {FABRIC_GUARD_UNIT_NAME}",
        path=FABRIC_GUARD_UNIT,
        content=render(
            "spark-fabric-guard.service.j2", table=FABRIC_GUARD_TABLE, path=FABRIC_GUARD
        ),
    )
    guard_loaded(
        name=f"Load the fabric guard (table {FABRIC_GUARD_TABLE})",
        reload=table.will_change or unit.will_change,
    )
