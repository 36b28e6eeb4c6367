"""
The status of every Spark, read-only: one SSH command per Spark, as the SSH user (no
sudo), reads the GPU and its temperature, the driver and its hold, the drm override and a
pending reboot, MemAvailable against the memory guard, every QSFP rail with a fresh
don't-fragment ping and the RoCE GID index, the engine plan's units and the engine's API.
The only operation judges the Spark: it fails (pyinfra exits 1) when a check of it FAILs.
When the run ends: a matrix of every Spark (a line per check, a column per Spark), the
detail of what is not ok, each FAIL with the command that explains it, and a last line
naming the Sparks that need a look; with SPARK_STATUS_JSON=FILE (or - for stdout), the
same as JSON too.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from pyinfra import host, state
from pyinfra.api import Host

from sparkdeploy import __version__
from sparkdeploy.config.invocation import STATUS_JSON_ENV, command
from sparkdeploy.config.paths import DRM_OVERRIDE_CONF, MEMORY_GUARD
from sparkdeploy.config.spark import QsfpInterface, SparkSettings
from sparkdeploy.config.topology import Rail
from sparkdeploy.engine_plan.plan import EnginePlan
from sparkdeploy.facts.network import IP_HEADERS, Network, is_up_as_configured
from sparkdeploy.facts.roce import check_gids
from sparkdeploy.facts.status import API_HOST, Api, SparkStatus, Status, status_arguments
from sparkdeploy.facts.store import run_store
from sparkdeploy.fitness import driver_packages, driver_refusals, gpu_refusals
from sparkdeploy.render import aligned
from sparkdeploy.reports import notices
from sparkdeploy.reports.failures import diagnose_command, judged, status_command
from sparkdeploy.reports.linktest import status_detail

KIB_PER_GIB = 1024 * 1024  # /proc/meminfo counts KiB; the guard counts GiB as `free -g`
OK, WARN, FAIL, NONE = "ok", "WARN", "FAIL", "-"
CURL_HTTP_ERROR = 22  # curl -f: the server answered with an HTTP error (curl's man page)

# ---------------------------------------------------------------------------------------
# The rows of the table: one function per check, from settings, plan and status only.


@dataclass(frozen=True)
class Row:
    check: str
    state: str  # OK, WARN (works, but look), FAIL (broken), NONE (not applicable)
    detail: str


def gpu_row(spark: SparkSettings, status: Status) -> Row:
    facts = status.preflight
    problems = gpu_refusals(facts, spark)
    if problems:
        return Row("gpu", FAIL, problems[0])
    temperature = f", {status.temperature} C" if status.temperature else ", temperature ?"
    return Row("gpu", OK, f"{facts.gpu_name or 'no GPU'}{temperature}")


def driver_row(spark: SparkSettings, status: Status) -> Row:
    facts = status.preflight
    problems = driver_refusals(status, facts, spark)
    if problems:
        return Row("driver", FAIL, problems[0])
    names = sorted(driver_packages(status))
    loose = [name for name in names if name not in status.holds]
    detail = f"{facts.driver or 'not loaded'}, " + ", ".join(
        f"{name} {status.packages[name]}" for name in names
    )
    if loose:
        return Row("driver", WARN, f"{detail} NOT held (the deploy holds it)")
    return Row("driver", OK, f"{detail} held")


def drm_row(status: Status) -> Row:
    facts = status.preflight
    if facts.drm_override:
        return Row(
            "drm override",
            WARN,
            f"{DRM_OVERRIDE_CONF} present: CUDA sees about 62 GB (the deploy removes it)",
        )
    if facts.reboot_pending:
        return Row("drm override", WARN, f"absent; REBOOT PENDING: {facts.reboot_pending}")
    return Row("drm override", OK, "absent, no reboot pending")


def memory_row(spark: SparkSettings, status: Status) -> Row:
    facts = status.preflight
    detail = (
        f"MemAvailable {facts.mem_available_kb / KIB_PER_GIB:.1f} of "
        f"{facts.mem_total_kb / KIB_PER_GIB:.1f} GiB, guard {spark.memory_guard_gb} GiB"
    )
    if facts.mem_available_kb // KIB_PER_GIB >= spark.memory_guard_gb:
        return Row("memory", OK, detail)
    return Row("memory", WARN, f"{detail}: an engine start would wait for the guard")


def rail_rows(spark: SparkSettings, rails: tuple[Rail, ...], network: Network) -> list[Row]:
    """One row per QSFP rail: addresses, MTU, link, NetworkManager profile, jumbo ping. In a
    ring, one row per cable this Spark is an end of (``cable N``), its logical links in it."""
    rows: dict[str, Row] = {}
    for (number, rail), ends in zip(enumerate(spark.qsfp, start=1), rails):
        check = f"cable {ends.cable}" if ends.cable else f"rail {number}"
        row = _rail_row(check, rail, ends, network)
        if check in rows:  # another logical link of the same cable
            before = rows[check]
            state = FAIL if FAIL in (before.state, row.state) else OK
            row = Row(check, state, f"{before.detail}; {row.detail}")
        rows[check] = row
    return list(rows.values())


def _rail_row(check: str, rail: QsfpInterface, ends: Rail, network: Network) -> Row:
    link = network.links.get(rail.interface)
    if link is None:
        return Row(check, FAIL, f"{rail.interface}: no such interface")
    fine = is_up_as_configured(rail, network)
    detail = (
        f"{rail.interface} {', '.join(link.addresses) or 'no IPv4'}, MTU {link.mtu}, "
        f"{'up' if link.up else 'DOWN'}"
        + (
            ""
            if fine
            else f", not as configured ({rail.address}, MTU {rail.mtu}, "
            f"profile qsfp-{rail.interface} active)"
        )
    )
    for end in ends.ends:  # the pings the proof made to the other Sparks on this rail
        ping = network.pings.get((rail.interface, end.ip))
        if ping is None:
            continue
        result = "ok" if ping.ok else f"FAILED ({ping.detail})"
        to = f"{end.name} {end.ip}" if ends.cable else end.ip
        detail += f", {rail.mtu - IP_HEADERS}-byte don't-fragment ping to {to} {result}"
        fine = fine and ping.ok
    return Row(check, OK if fine else FAIL, detail)


def gid_rows(spark: SparkSettings, network: Network) -> list[Row]:
    """The RoCE v2 GID index of the rails' addresses (no row without QSFP rails)."""
    if not spark.qsfp:
        return []
    rails = [(rail.interface, rail.ip) for rail in spark.qsfp]
    found, problems = check_gids(network.gids, rails, spark.roce_gid_index, spark.sysfs_root)
    if problems:
        return [Row("roce gid", FAIL, "; ".join(p.split("\n")[0].rstrip(":") for p in problems))]
    indexes = sorted({rail.gid.index for rail in found if rail.gid})
    where = ", ".join(f"{rail.gid.dev} ({rail.interface})" for rail in found if rail.gid)
    return [Row("roce gid", OK, f"index {', '.join(map(str, indexes))} on {where}")]


def link_test_rows(rails: tuple[Rail, ...], status: Status) -> list[Row]:
    """The last link test between the Sparks (linktest.py), for a Spark with QSFP rails:
    when, the all-gather bus bandwidth at the largest size, passed or failed."""
    if not rails:
        return []
    state, detail = status_detail(status.link_test)
    return [Row("link test", state, detail)]


def gpu_holders(spark: SparkSettings, status: Status) -> list[str]:
    """The GPU services (gpu_services) that are active: the one holding the GPU, if any."""
    return [
        service.unit
        for service in spark.gpu_services
        if status.units.get(service.unit, {}).get("ActiveState") == "active"
    ]


def gpu_holder_row(spark: SparkSettings, plan: EnginePlan | None, status: Status) -> list[Row]:
    """Who holds the GPU when GPU services take turns with the engine: exactly one."""
    if not spark.gpu_services:
        return []
    units = [*(plan.units[:1] if plan else ()), *(s.unit for s in spark.gpu_services)]
    holding = [u for u in units if status.units.get(u, {}).get("ActiveState") == "active"]
    if len(holding) > 1:
        return [Row("gpu holder", FAIL, f"{' and '.join(holding)} are active at once")]
    if not holding:
        return [Row("gpu holder", WARN, "free: no GPU service runs (spark-gpu-switch NAME)")]
    return [Row("gpu holder", OK, f"{holding[0]}")]


def unit_rows(plan: EnginePlan | None, status: Status, lent_to: Sequence[str] = ()) -> list[Row]:
    """Every unit of the engine plan: active, enabled, since when; stopped on purpose while
    a GPU service holds the GPU (``lent_to``)."""
    rows = []
    if plan is not None and lent_to:
        return [
            Row("unit", NONE, f"{unit} stopped: the GPU is with {lent_to[0]}")
            for unit in plan.units
        ]
    for unit in plan.units if plan else ():
        shown = status.units.get(unit, {})
        active = shown.get("ActiveState") or "unknown"
        enabled = shown.get("UnitFileState") or "not installed"
        since = shown.get("ActiveEnterTimestamp", "")
        when = f"since {since}" if active == "active" else f"last active {since or 'never'}"
        state = OK if (active, enabled) == ("active", "enabled") else FAIL
        rows.append(Row("unit", state, f"{unit} {active}, {enabled}, {when}"))
    return rows


def engine_row(plan: EnginePlan | None, status: Status) -> Row:
    """Is the engine ready: /v1/models answers on its port and lists the served model."""
    if plan is None:
        return Row("engine", NONE, "none (no engine: in the inventory)")
    if not plan.serves_api:
        return Row("engine", NONE, f"rank {plan.rank} of {plan.nodes}: the head serves the API")
    where = f"http://{API_HOST}:{plan.port}/v1/models"
    api = status.api or Api(-1, (), "not asked")
    if plan.api_key and api.status == CURL_HTTP_ERROR and "error: 401" in api.detail:
        # status runs without sudo, so without the root-only key: a 401 is the engine
        # answering as it must (the deploy's health check asks with the key)
        return Row("engine", OK, f"up, requires its API key ({where} answers 401 without it)")
    if api.status != 0:
        return Row("engine", FAIL, f"not ready: {where} {api.detail or f'curl exit {api.status}'}")
    if plan.served_model_name not in api.models:
        listed = ", ".join(api.models) or api.detail or "no model"
        return Row("engine", FAIL, f"{where} lists {listed}, not {plan.served_model_name}")
    return Row("engine", OK, f"ready, serving {plan.served_model_name} on {API_HOST}:{plan.port}")


def config_row(plan: EnginePlan | None, status: Status) -> list[Row]:
    """Which engine configuration is live: the last one that passed its health check
    (engine.rollback keeps it) or a changed one not yet healthy; and the last rollback."""
    if plan is None or not plan.rollback:
        return []
    said = status.rollback
    if said is None:
        return [Row("config", WARN, "spark-engine-rollback did not answer (deploy again)")]
    back = said.get("rollback")
    last = ""
    if back:
        healthy = "healthy again" if back.get("healthy") else "NOT healthy"
        last = f"; rolled back {back.get('time')} ({back.get('why')}): {healthy}"
    kept = said.get("kept")
    if kept is None:
        return [Row("config", WARN, "nothing kept yet: no configuration passed a health check")]
    if back and not back.get("healthy"):
        return [Row("config", FAIL, f"last good kept {kept.get('saved')}{last}")]
    if kept.get("live"):
        return [Row("config", OK, f"live = last good (kept {kept.get('saved')}){last}")]
    return [
        Row("config", WARN, f"live differs from the last good (kept {kept.get('saved')}){last}")
    ]


def release_row(status: Status) -> list[Row]:
    """The release that last deployed this Spark (its managed files' header) against this
    laptop's: a Spark deployed by another release is told how to match them."""
    if status.release is None:
        return []
    if not status.release:
        return [Row("release", NONE, f"not deployed yet (no {MEMORY_GUARD})")]
    if status.release == __version__:
        return [Row("release", OK, f"deployed by spark-deploy {__version__}, as this laptop's")]
    return [
        Row(
            "release",
            WARN,
            f"deployed by spark-deploy {status.release}; this laptop has {__version__}: "
            f"{command('deploy')} brings the Spark to it",
        )
    ]


def status_rows(
    spark: SparkSettings, plan: EnginePlan | None, rails: tuple[Rail, ...], status: Status
) -> list[Row]:
    """Every row of one Spark, in the order the deploy prepares them."""
    lent = gpu_holders(spark, status)
    return [
        gpu_row(spark, status),
        driver_row(spark, status),
        drm_row(status),
        memory_row(spark, status),
        *rail_rows(spark, rails, status.network),
        *gid_rows(spark, status.network),
        *link_test_rows(rails, status),
        *gpu_holder_row(spark, plan, status),
        *unit_rows(plan, status, lent),
        *config_row(plan, status),
        Row("engine", NONE, f"stopped: the GPU is with {lent[0]}")
        if lent and plan
        else engine_row(plan, status),
        *release_row(status),
    ]


def labels(rows: Sequence[Row]) -> list[str]:
    """Each row's line in the matrix: its check, numbered when a Spark has several rows of
    it (the units of a Ray engine)."""
    counts = Counter(row.check for row in rows)
    seen: Counter[str] = Counter()
    found = []
    for row in rows:
        seen[row.check] += 1
        found.append(row.check if counts[row.check] == 1 else f"{row.check} {seen[row.check]}")
    return found


def check_order(sections: Mapping[str, Sequence[Row]]) -> list[str]:
    """Every check of every Spark once, in the order the deploy prepares them (a check only
    some Sparks have comes after the one it follows on them)."""
    order: list[str] = []
    for rows in sections.values():
        after = -1
        for label in labels(rows):
            if label in order:
                after = order.index(label)
            else:
                after += 1
                order.insert(after, label)
    return order


def explained_by(check: str, name: str) -> str:
    """The command that explains a FAIL of ``check`` on Spark ``name``."""
    kind = check.rstrip("0123456789 ")
    if kind in ("rail", "roce gid"):
        return "on the Spark: nmcli -f NAME,DEVICE,STATE connection show; ip -br addr; rdma link"
    if kind == "cable":  # a ring's: the proof names a miscabled ring's exchange
        return f"{command('deploy', '--limit', name, '--dry')}   (the QSFP proof of the ring)"
    if kind == "link test":
        return command("linktest")
    if kind == "driver":
        return f"{command('deploy', '--limit', name, '--dry')}   (its refusal names the fix)"
    if kind == "status":
        return f"{status_command(name)} -v"
    return diagnose_command(name)


def failing(sections: Mapping[str, Sequence[Row]], level: str) -> dict[str, list[str]]:
    """The Sparks with a row in ``level``, and those rows' checks."""
    found: dict[str, list[str]] = {}
    for name, rows in sections.items():
        checks = [label for label, row in zip(labels(rows), rows) if row.state == level]
        if checks:
            found[name] = checks
    return found


def verdict(sections: Mapping[str, Sequence[Row]]) -> str:
    """The last line: how many Sparks, and which need a look for what, failures first. The
    counts are of Sparks ("FAIL on 1 Spark"), their checks named in brackets."""
    said = []
    for level in (FAIL, WARN):
        found = failing(sections, level)
        if found:
            sparks = f"{len(found)} Spark{'s' if len(found) > 1 else ''}"
            named = "; ".join(f"{name}: {', '.join(checks)}" for name, checks in found.items())
            said.append(f"{level} on {sparks} ({named})")
    return f"{len(sections)} Spark(s): {', '.join(said) or 'all ok'}"


def details(sections: Mapping[str, Sequence[Row]]) -> list[tuple[str, str, str, str]]:
    """The rows that are not ok, each with its detail; a FAIL names what explains it."""
    table = []
    for name, rows in sections.items():
        for label, row in zip(labels(rows), rows):
            if row.state in (FAIL, WARN):
                table.append((name, label, row.state, row.detail))
            if row.state == FAIL:
                table.append(("", "", "", f"explained by: {explained_by(label, name)}"))
    return table


HEADER = f"--> Status (read-only; nothing was changed; spark-deploy {__version__}):"


def format_status(sections: Mapping[str, Sequence[Row]]) -> str:
    """The matrix (a line per check, a column per Spark), then the detail of what is not
    ok, then a last line naming the Sparks and checks that need a look."""
    order = check_order(sections)
    cells = {name: dict(zip(labels(rows), rows)) for name, rows in sections.items()}
    matrix = [("CHECK", *sections)]
    for label in order:
        found = [cells[name].get(label) for name in sections]
        matrix.append((label, *(row.state if row else "" for row in found)))
    lines = [HEADER, aligned(matrix, indent="    ")]
    shown = details(sections)
    if shown:
        lines += ["", aligned([("SPARK", "CHECK", "STATE", "DETAIL"), *shown], indent="    ")]
    return "\n".join([*lines, f"    {verdict(sections)}"])


def status_json(sections: Mapping[str, Sequence[Row]]) -> str:
    """The status as JSON: every Spark's rows (check, state, detail, and what explains a
    FAIL), and the Sparks that failed or need a look."""
    sparks = {
        name: [
            {
                "check": label,
                "state": row.state,
                "detail": row.detail,
                **({"explained_by": explained_by(label, name)} if row.state == FAIL else {}),
            }
            for label, row in zip(labels(rows), rows)
        ]
        for name, rows in sections.items()
    }
    return json.dumps(
        {
            "version": __version__,  # this laptop's spark-deploy (release rows: the Sparks')
            "sparks": sparks,
            "fail": sorted(failing(sections, FAIL)),
            "warn": sorted(failing(sections, WARN)),
            "verdict": verdict(sections),
        },
        indent=2,
    )


# ---------------------------------------------------------------------------------------
# The run: gather on each host, print once at the end.

STATUS = "status"  # the run store's result key
JSON_ENV = STATUS_JSON_ENV  # a file to write the status to as JSON, or - for stdout
NOT_READ = Row("status", FAIL, "not read (no connection, or the status command failed; see above)")


def rows_of(target: Host, status: Status | None) -> list[Row]:
    """The rows of one Spark of the run from its status (one FAIL row when not read)."""
    if status is None:
        return [NOT_READ]
    return status_rows(
        target.data.spark, target.data.get("engine_plan"), target.data.place.rails, status
    )


def report() -> str:
    """The matrix of every Spark of this run (the inventory within --limit), in order; with
    SPARK_STATUS_JSON set, the same as JSON too: written to that file, or on stdout for
    ``-`` (pyinfra logs on stderr)."""
    results = run_store(state).results
    sections = {
        target.name: rows_of(target, results.get((target.name, STATUS)))
        for target in filter(state.is_host_in_limit, state.inventory)
    }
    where = os.environ.get(JSON_ENV, "")
    if where == "-":
        print(status_json(sections), flush=True)
    elif where:
        Path(where).write_text(status_json(sections) + "\n", encoding="utf-8")
    return format_status(sections)


def show_status() -> None:
    """Read this Spark's status (one SSH command, no sudo), print the matrix of every Spark
    when the run ends, and fail this Spark when a check of it fails (pyinfra exits 1)."""
    status = host.get_fact(SparkStatus, **status_arguments(host))
    run_store(state).results[(host.name, STATUS)] = status
    notices.install(final_only=False)
    notices.at_end("status", report)
    rows = rows_of(host, status)
    failed = [(label, row) for label, row in zip(labels(rows), rows) if row.state == FAIL]
    judged(
        name="Judge the status",
        failed="; ".join(f"{label} FAIL: {row.detail}" for label, row in failed),
        then=list(dict.fromkeys(explained_by(label, host.name) for label, _ in failed)),
        unexplained="status reads no journal; the command below reads it and names a known "
        "GB10 failure when one matches",
    )
