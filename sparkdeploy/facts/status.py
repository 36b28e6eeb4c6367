"""
The status fact: everything the status table shows about a Spark, in one round trip and
without sudo (the preflight and network facts' lines, driver packages and holds, the GPU
temperature, the plan's units, the engine's API).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from pyinfra.api import FactBase, Host

from sparkdeploy.config.paths import MANAGED_HEADER, MEMORY_GUARD, ROLLBACK_BIN
from sparkdeploy.config.spark import SparkSettings
from sparkdeploy.engine_plan.plan import EnginePlan
from sparkdeploy.escape import shell
from sparkdeploy.facts.linktest import LinkResult, parse_result, result_line
from sparkdeploy.facts.network import (
    Network,
    QsfpNetwork,
    captured,
    fact_arguments,
    parse_captured,
)
from sparkdeploy.facts.preflight import Preflight, SparkPreflight
from sparkdeploy.facts.probes.packages import PACKAGE_LINES, parse_packages

STATUS_UNIT_PROPERTIES = ("ActiveState", "UnitFileState", "ActiveEnterTimestamp")
API_HOST = "127.0.0.1"  # the engine binds there (or to every address): ask from the Spark
API_TIMEOUT = 5  # seconds curl may take for /v1/models


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
    link_test: LinkResult | None = None  # the last stored link test result (linktest.py)
    # spark-engine-rollback state: the kept configuration and the last rollback, or None
    # when the Spark does not say (no engine with rollback, or the script not installed)
    rollback: dict | None = None
    # The release in the header of a file every deploy writes (the memory guard): its
    # version, BEFORE_STAMPS for a file of a release before headers named one, "" when the
    # file is absent (not deployed yet); None when not asked.
    release: str | None = None


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


BEFORE_STAMPS = "before 0.1.0"  # a header without a release, or none (render.py STAMP)
UNSTAMPED = "unstamped"  # the release line's value for a guard without a header


def release_line() -> str:
    """The shell line printing ``release=`` and the memory guard's header line (the
    release that last deployed this Spark; every deploy writes the guard, world-readable)."""
    header = shell(f"^{MANAGED_HEADER}")
    guard = shell(MEMORY_GUARD)
    return (
        "printf 'release=%s\\n' \"$({ head -n 3 "
        f'{guard} 2>/dev/null | grep -m1 {header}; }} || {{ test -e {guard} && echo {UNSTAMPED}; }})"'
    )


def parse_release(value: str) -> str:
    """The ``release=`` line: the release its header names, BEFORE_STAMPS, or ""."""
    value = value.strip()
    if not value:
        return ""
    if not value.startswith(MANAGED_HEADER):
        return BEFORE_STAMPS
    return value[len(MANAGED_HEADER) :].split(":", 1)[0].strip() or BEFORE_STAMPS


def parse_rollback(value: str) -> dict | None:
    """The ``rollback=`` line: what spark-engine-rollback state printed, None when nothing."""
    try:
        found = json.loads(value)
    except ValueError:
        return None
    return found if isinstance(found, dict) else None


class SparkStatus(FactBase):
    """
    Returns the status of a Spark in one round trip, without sudo: the preflight fact's
    lines (GPU, driver, memory, drm override, pending reboot), the driver packages and
    holds, the GPU temperature, ``systemctl show`` of each unit, /v1/models asked with
    curl, and, for a Spark with QSFP rails, the last link test result and the network
    fact's lines (links, addresses, profiles, a don't-fragment ping on every rail, the RoCE
    GID tables).

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
        rollback={"kept": {"live": true, "saved": "2026-11-24T03:10:00Z", "units": ["spark-engine-sglang.service"]}, "rollback": null}
        linktest={"when": "2026-11-23T10:00:00Z", "passed": true, "verdict": "...", "nodes": 2, "min_busbw": 21.875, "results": [{"op": "all_gather", "size": 17179869184, "busbw": 23.41}]}
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
        ping.enp1s0f0np0@192.168.100.2=0 2 packets transmitted, 2 received, 0% packet loss, time 201ms
        ping.enP2p1s0f0np0@192.168.101.2=1 ping: local error: message too long, mtu=1500 2 packets transmitted, 0 received, +2 errors, 100% packet loss, time 203ms
        gid=/sys/class/infiniband/rocep1s0f0/ports/1/gids/3:0000:0000:0000:0000:0000:ffff:c0a8:6401
        gid=/sys/class/infiniband/rocep1s0f0/ports/1/gid_attrs/types/3:RoCE v2
        gid=/sys/class/infiniband/rocep1s0f0/ports/1/gid_attrs/ndevs/3:enp1s0f0np0
        gid=/sys/class/infiniband/roceP2p1s0f0/ports/1/gids/3:0000:0000:0000:0000:0000:ffff:c0a8:6501
        gid=/sys/class/infiniband/roceP2p1s0f0/ports/1/gid_attrs/types/3:RoCE v2
        gid=/sys/class/infiniband/roceP2p1s0f0/ports/1/gid_attrs/ndevs/3:enP2p1s0f0np0
        env_sha256=9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
    """  # noqa: E501 -- the sample output is verbatim (tests parse it)

    def command(
        self,
        model_dir: str,
        units: list[str],
        api_url: str,
        interfaces: list[str],
        pings: list[tuple[str, str, int]],
        sysfs_root: str,
        env_file: str,
        rollback: bool = False,
    ) -> str:
        q = shell
        lines = [
            SparkPreflight().command(model_dir),
            *PACKAGE_LINES,
            "printf 'temperature=%s\\n' \"$(nvidia-smi --query-gpu=temperature.gpu"
            ' --format=csv,noheader 2>/dev/null | head -n1)"',
            *(
                f"systemctl show -p {','.join(STATUS_UNIT_PROPERTIES)} {q(unit)} 2>/dev/null"
                f" | sed {q(f's/^/unit.{unit}=/')}"
                for unit in units
            ),
            *(captured("api", f"curl -sS -f -m {API_TIMEOUT} {q(api_url)}") if api_url else []),
            *(
                [f"printf 'rollback=%s\\n' \"$({ROLLBACK_BIN} state 2>/dev/null)\""]
                if rollback
                else []
            ),
            release_line(),
        ]
        if interfaces:
            lines.append(result_line())
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
            link_test=parse_result(values.get("linktest", "")),
            rollback=parse_rollback(values.get("rollback", "")),
            release=parse_release(values["release"]) if "release" in values else None,
        )


def status_arguments(target: Host) -> dict:
    """The SparkStatus arguments of a Spark, from its settings and engine plan."""
    spark: SparkSettings = target.data.spark
    plan: EnginePlan | None = target.data.get("engine_plan")
    return {
        "model_dir": spark.model_dir,
        "units": [*(plan.units if plan else ()), *(s.unit for s in spark.gpu_services)],
        "rollback": plan is not None and plan.rollback,
        "api_url": (
            f"http://{API_HOST}:{plan.port}/v1/models"
            if plan is not None and plan.serves_api
            else ""
        ),
        **fact_arguments(target),
    }
