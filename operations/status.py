"""
The status of every Spark, read-only: one SSH command per Spark, as the SSH user (no
sudo), reads the GPU and its temperature, the driver and its hold, the drm override and a
pending reboot, MemAvailable against the memory guard, every QSFP rail with a fresh
don't-fragment ping and the RoCE GID index, the engine plan's units and the engine's API.
No operation is planned; one table of every Spark is printed at the end of the run.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass

from pyinfra import host, state
from pyinfra.api import FactBase, Host

from operations import notices
from operations.driver import driver_packages, driver_refusals
from operations.engines.plan import EnginePlan
from operations.facts import PACKAGE_LINES, Preflight, SparkPreflight, parse_packages
from operations.network import IP_HEADERS, fact_arguments, is_up_as_configured, peer_of
from operations.network_facts import Network, QsfpNetwork, captured, parse_captured
from operations.preflight import refusals as gpu_refusals
from operations.roce import check_gids
from operations.settings import DRM_OVERRIDE_CONF, SparkSettings

STATUS_UNIT_PROPERTIES = ("ActiveState", "UnitFileState", "ActiveEnterTimestamp")
API_HOST = "127.0.0.1"  # the engine binds there (or to every address): ask from the Spark
API_TIMEOUT = 5  # seconds curl may take for /v1/models
KIB_PER_GIB = 1024 * 1024  # /proc/meminfo counts KiB; the guard counts GiB as `free -g`
OK, WARN, FAIL, NONE = "ok", "WARN", "FAIL", "-"


@dataclass(frozen=True)
class Api:
    """What /v1/models answered: curl's exit status (0 answered, 7 refused, 22 an HTTP
    error, 28 timed out), the model ids listed, or why there are none."""

    status: int
    models: tuple[str, ...]
    detail: str


@dataclass(frozen=True)
class Status:
    preflight: Preflight  # GPU, driver, memory, drm override, pending reboot
    packages: dict[str, str]  # installed driver package -> version
    holds: frozenset[str]
    temperature: str  # of GPU 0, as nvidia-smi prints it (°C), "" when it does not answer
    units: dict[str, dict[str, str]]  # unit -> STATUS_UNIT_PROPERTIES as systemctl shows them
    api: Api | None  # None when this Spark serves no API
    network: Network  # empty when the Spark has no QSFP rails


def parse_api(value: str) -> Api:
    """The ``api=`` line: curl's exit status and the body of /v1/models (or its error)."""
    status, text = parse_captured(value)
    if status != 0:
        return Api(status, (), text)
    try:
        models = tuple(str(model["id"]) for model in json.loads(text)["data"])
    except (ValueError, KeyError, TypeError):
        return Api(status, (), f"not a model list: {text[:80]}")
    return Api(status, models, "")


class SparkStatus(FactBase):
    """
    Returns the status of a Spark in one round trip, without sudo: the preflight fact's
    lines (GPU, driver, memory, drm override, pending reboot), the driver packages and
    holds, the GPU temperature, ``systemctl show`` of each unit, /v1/models asked with
    curl, and, for a Spark with QSFP rails, the network fact's lines (links, addresses,
    profiles, a don't-fragment ping on every rail, the RoCE GID tables).

    Sample output of the command::

        gpu=GPU 0: NVIDIA GB10 (UUID: GPU-5b2e0c3a-8f41-4d7e-9a36-1c0f6e2d9b71)
        driver=580.95.05
        arch=aarch64
        kernel=6.11.0-1016-nvidia
        os=Ubuntu 24.04.3 LTS
        mem_total_kb=125513548
        mem_available_kb=119203140
        disk_path=/opt/models
        disk_free_kb=3401563204
        drm_override=
        reboot_pending=/etc/modprobe.d/zz-nvidia-drm-override.conf was removed; CUDA sees only about 62 GB of memory until the Spark reboots
        pkg nvidia-driver-580-open 580.95.05-0ubuntu1
        hold nvidia-driver-580-open
        temperature=41
        unit.spark-engine-sglang.service=ActiveState=active
        unit.spark-engine-sglang.service=UnitFileState=enabled
        unit.spark-engine-sglang.service=ActiveEnterTimestamp=Tue 2026-03-24 10:12:03 UTC
        api=0 {"object":"list","data":[{"id":"Mistral-Small-4-119B-2603-NVFP4","object":"model"}]}
        nm=running
        link=4: enp1s0f0np0: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 9000 qdisc mq state UP mode DEFAULT
        link=5: enP2p1s0f0np0: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 qdisc mq state UP mode DEFAULT
        addr=4: enp1s0f0np0    inet 192.168.100.1/24 brd 192.168.100.255 scope global noprefixroute enp1s0f0np0
        addr=5: enP2p1s0f0np0    inet 192.168.101.1/24 brd 192.168.101.255 scope global noprefixroute enP2p1s0f0np0
        nmdev.enp1s0f0np0=GENERAL.STATE:100 (connected)
        nmdev.enp1s0f0np0=GENERAL.CONNECTION:qsfp-enp1s0f0np0
        profile.qsfp-enp1s0f0np0=GENERAL.STATE:activated
        nmdev.enP2p1s0f0np0=GENERAL.STATE:100 (connected)
        nmdev.enP2p1s0f0np0=GENERAL.CONNECTION:qsfp-enP2p1s0f0np0
        profile.qsfp-enP2p1s0f0np0=GENERAL.STATE:activated
        ping.enp1s0f0np0=0 2 packets transmitted, 2 received, 0% packet loss, time 201ms
        ping.enP2p1s0f0np0=1 ping: local error: message too long, mtu=1500 2 packets transmitted, 0 received, +2 errors, 100% packet loss, time 203ms
        gid=/sys/class/infiniband/rocep1s0f0/ports/1/gids/3:0000:0000:0000:0000:0000:ffff:c0a8:6401
        gid=/sys/class/infiniband/rocep1s0f0/ports/1/gid_attrs/types/3:RoCE v2
        gid=/sys/class/infiniband/rocep1s0f0/ports/1/gid_attrs/ndevs/3:enp1s0f0np0
        gid=/sys/class/infiniband/roceP2p1s0f0/ports/1/gids/3:0000:0000:0000:0000:0000:ffff:c0a8:6501
        gid=/sys/class/infiniband/roceP2p1s0f0/ports/1/gid_attrs/types/3:RoCE v2
        gid=/sys/class/infiniband/roceP2p1s0f0/ports/1/gid_attrs/ndevs/3:enP2p1s0f0np0
        env_sha256=9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
    """

    def command(
        self,
        model_dir: str,
        units: list[str],
        api_url: str,
        interfaces: list[str],
        pings: list[tuple[str, str, int]],
        sysfs_root: str,
        env_file: str,
    ) -> str:
        q = shlex.quote
        lines = [
            SparkPreflight().command(model_dir),
            *PACKAGE_LINES,
            "printf 'temperature=%s\\n' \"$(nvidia-smi --query-gpu=temperature.gpu"
            " --format=csv,noheader 2>/dev/null | head -n1)\"",
            *(
                f"systemctl show -p {','.join(STATUS_UNIT_PROPERTIES)} {q(unit)} 2>/dev/null"
                f" | sed {q(f's/^/unit.{unit}=/')}"
                for unit in units
            ),
            *(captured("api", f"curl -sS -f -m {API_TIMEOUT} {q(api_url)}") if api_url else []),
        ]
        if interfaces:
            lines.append(QsfpNetwork().command(interfaces, pings, sysfs_root, env_file))
        return "\n".join(lines)

    def process(self, output: list[str]) -> Status:
        units: dict[str, dict[str, str]] = {}
        values: dict[str, str] = {}
        for line in output:
            key, separator, value = line.partition("=")
            kind, _, unit = key.partition(".")
            if separator and kind == "unit" and unit:
                name, _, text = value.partition("=")
                units.setdefault(unit, {})[name] = text.strip()
            elif separator:
                values.setdefault(key, value)
        packages, holds = parse_packages(output)
        return Status(
            preflight=SparkPreflight().process(output),
            packages=packages,
            holds=holds,
            temperature=values.get("temperature", "").strip(),
            units=units,
            api=parse_api(values["api"]) if "api" in values else None,
            network=QsfpNetwork().process(output),
        )


def status_arguments(target: Host) -> dict:
    """The SparkStatus arguments of a Spark, from its settings and engine plan."""
    spark: SparkSettings = target.data.spark
    plan: EnginePlan | None = target.data.get("engine_plan")
    serves = plan is not None and plan.serves_api
    return {
        "model_dir": spark.model_dir,
        "units": list(plan.units) if plan else [],
        "api_url": f"http://{API_HOST}:{plan.port}/v1/models" if serves else "",
        **fact_arguments(target),
    }


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
        return Row("drm override", WARN, f"{DRM_OVERRIDE_CONF} present: CUDA sees about 62 GB "
                   "(the deploy removes it)")
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


def rail_rows(spark: SparkSettings, peer: SparkSettings | None, network: Network) -> list[Row]:
    """One row per QSFP rail: addresses, MTU, link, NetworkManager profile, jumbo ping."""
    rows = []
    theirs = peer.qsfp if peer else []
    for number, rail in enumerate(spark.qsfp, start=1):
        check = f"rail {number}"
        link = network.links.get(rail.interface)
        if link is None:
            rows.append(Row(check, FAIL, f"{rail.interface}: no such interface"))
            continue
        fine = is_up_as_configured(rail, network)
        detail = (
            f"{rail.interface} {', '.join(link.addresses) or 'no IPv4'}, MTU {link.mtu}, "
            f"{'up' if link.up else 'DOWN'}"
            + ("" if fine else f", not as configured ({rail.address}, MTU {rail.mtu}, "
                               f"profile qsfp-{rail.interface} active)")
        )
        ping = network.pings.get(rail.interface)
        if ping is not None and number <= len(theirs):
            result = "ok" if ping.ok else f"FAILED ({ping.detail})"
            detail += (f", {rail.mtu - IP_HEADERS}-byte don't-fragment ping to "
                       f"{theirs[number - 1].ip} {result}")
            fine = fine and ping.ok
        rows.append(Row(check, OK if fine else FAIL, detail))
    return rows


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


def unit_rows(plan: EnginePlan | None, status: Status) -> list[Row]:
    """Every unit of the engine plan: active, enabled, since when."""
    rows = []
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
    if api.status != 0:
        return Row("engine", FAIL, f"not ready: {where} {api.detail or f'curl exit {api.status}'}")
    if plan.served_model_name not in api.models:
        listed = ", ".join(api.models) or api.detail or "no model"
        return Row("engine", FAIL, f"{where} lists {listed}, not {plan.served_model_name}")
    return Row("engine", OK, f"ready, serving {plan.served_model_name} on {API_HOST}:{plan.port}")


def status_rows(
    spark: SparkSettings, plan: EnginePlan | None, peer: SparkSettings | None, status: Status
) -> list[Row]:
    """Every row of one Spark, in the order the deploy prepares them."""
    return [
        gpu_row(spark, status),
        driver_row(spark, status),
        drm_row(status),
        memory_row(spark, status),
        *rail_rows(spark, peer, status.network),
        *gid_rows(spark, status.network),
        *unit_rows(plan, status),
        engine_row(plan, status),
    ]


def format_status(sections: dict[str, list[Row]]) -> str:
    """The table: one section of rows per Spark, the Spark's name on its first row, and a
    last line counting what needs a look."""
    table = [("SPARK", "CHECK", "STATE", "DETAIL")]
    for name, rows in sections.items():
        table += [(name if i == 0 else "", r.check, r.state, r.detail) for i, r in enumerate(rows)]
    states = [row.state for rows in sections.values() for row in rows]
    verdict = ", ".join(
        f"{states.count(state)} {state}" for state in (FAIL, WARN) if state in states
    )
    return (
        "--> Status (read-only; nothing was changed):\n"
        + notices.aligned(table, indent="    ")
        + f"\n    {len(sections)} Spark(s): {verdict or 'all ok'}"
    )


# ---------------------------------------------------------------------------------------
# The run: gather on each host, print once at the end.

_STATUS: dict[tuple[int, str], Status] = {}


def report() -> str:
    """The table of every Spark of this run (the inventory within --limit), in order."""
    sections = {}
    for target in filter(state.is_host_in_limit, state.inventory):
        status = _STATUS.get((id(state), target.name))
        if status is None:
            sections[target.name] = [Row("status", FAIL, "not read (no connection, or the "
                                                         "status command failed; see above)")]
            continue
        peer = peer_of(target)
        sections[target.name] = status_rows(
            target.data.spark, target.data.get("engine_plan"),
            peer.data.spark if peer else None, status,
        )
    return format_status(sections)


def show_status() -> None:
    """Read this Spark's status (one SSH command, no sudo, no operation) and print the
    table of every Spark when the run ends."""
    _STATUS[(id(state), host.name)] = host.get_fact(SparkStatus, **status_arguments(host))
    notices.install()
    notices.at_end("status", report)
