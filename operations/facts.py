"""
Facts about a Spark. Each is one SSH round trip that answers many questions at once.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from gevent.event import AsyncResult
from pyinfra import host, state
from pyinfra.api import FactBase, Host

from operations.settings import (
    DRM_OVERRIDE_CONF,
    ENGINE_ENV_FILE,
    ENGINE_SUDOERS,
    ENGINE_SUDOERS_GLOB,
    ENGINE_UNIT_GLOB,
    GAI_CONF,
    HF_CLI_VENV,
    MANAGED_PATHS,
    PROMETHEUS_GLOB,
    PROMETHEUS_RULES,
    PROMETHEUS_SCRAPE,
    REBOOT_PENDING,
)


@dataclass(frozen=True)
class Preflight:
    gpu: str  # the `nvidia-smi -L` line of GPU 0, "" when nvidia-smi is missing or fails
    driver: str
    arch: str
    os: str
    kernel: str
    mem_total_kb: int
    mem_available_kb: int
    disk_path: str  # the model folder, or its nearest existing parent
    disk_free_kb: int
    drm_override: bool
    reboot_pending: str  # the reason recorded when a reboot became pending, "" if none

    @property
    def gpu_name(self) -> str:
        """"GPU 0: NVIDIA GB10 (UUID: GPU-...)" -> "NVIDIA GB10"."""
        name = self.gpu.split(":", 1)[1] if ":" in self.gpu else self.gpu
        return name.split("(UUID:", 1)[0].strip()


class SparkPreflight(FactBase):
    """
    Returns what the deploy must know about a Spark before it changes anything, in one
    round trip: GPU, driver, architecture, OS, kernel, memory, free disk at the model
    folder, the drm override conf and a pending reboot.

    Sample output of the command::

        gpu=GPU 0: NVIDIA GB10 (UUID: GPU-5b2e0c3a-8f41-4d7e-9a36-1c0f6e2d9b71)
        driver=580.95.05
        arch=aarch64
        kernel=6.11.0-1016-nvidia
        os=Ubuntu 24.04.3 LTS
        mem_total_kb=125513548
        mem_available_kb=119203140
        disk_path=/opt
        disk_free_kb=3401563204
        drm_override=1
        reboot_pending=

    .. code:: python

        Preflight(gpu="GPU 0: NVIDIA GB10 (UUID: ...)", driver="580.95.05", arch="aarch64",
                  ..., drm_override=True, reboot_pending="")
    """

    def command(self, model_dir: str) -> str:
        folder = shlex.quote(model_dir)
        return "; ".join(
            [
                "printf 'gpu=%s\\n' \"$(nvidia-smi -L 2>/dev/null | head -n1)\"",
                "printf 'driver=%s\\n' \"$(nvidia-smi --query-gpu=driver_version"
                " --format=csv,noheader 2>/dev/null | head -n1)\"",
                "printf 'arch=%s\\nkernel=%s\\n' \"$(uname -m)\" \"$(uname -r)\"",
                "printf 'os=%s\\n' \"$(. /etc/os-release && echo \"$PRETTY_NAME\")\"",
                "awk '/^MemTotal:/{print \"mem_total_kb=\"$2}"
                " /^MemAvailable:/{print \"mem_available_kb=\"$2}' /proc/meminfo",
                f"d={folder}",
                'while [ ! -d "$d" ]; do d=$(dirname "$d"); done',
                "printf 'disk_path=%s\\n' \"$d\"",
                "df -Pk \"$d\" | awk 'NR==2{print \"disk_free_kb=\"$4}'",
                f"printf 'drm_override=%s\\n' \"$(test -e {DRM_OVERRIDE_CONF} && echo 1)\"",
                "printf 'reboot_pending=%s\\n'"
                f" \"$(head -n1 {REBOOT_PENDING} 2>/dev/null)\"",
            ]
        )

    def process(self, output: list[str]) -> Preflight:
        values = dict(line.split("=", 1) for line in output if "=" in line)

        def number(key: str) -> int:
            text = values.get(key, "").strip()
            return int(text) if text.isdigit() else 0

        return Preflight(
            gpu=values.get("gpu", "").strip(),
            driver=values.get("driver", "").strip(),
            arch=values.get("arch", ""),
            os=values.get("os", ""),
            kernel=values.get("kernel", ""),
            mem_total_kb=number("mem_total_kb"),
            mem_available_kb=number("mem_available_kb"),
            disk_path=values.get("disk_path", ""),
            disk_free_kb=number("disk_free_kb"),
            drm_override=values.get("drm_override") == "1",
            reboot_pending=values.get("reboot_pending", "").strip(),
        )


T = TypeVar("T")
_PLANNED: dict[tuple[int, str, type], AsyncResult] = {}


def planned(target: Host, fact: type[FactBase[T]], **arguments: Any) -> T:
    """
    A fact of ``target`` (the current host or its peer), gathered once per run: pyinfra 3
    runs a fact again at every call, and every operation must plan from the same snapshot,
    taken before any change (operation bodies run again at execution). Hosts are planned
    in parallel greenlets, and a peer's fact may be asked for by both: the first asker
    gathers it, the other waits for that answer.
    """
    key = (id(state), target.name, fact)
    if key not in _PLANNED:
        _PLANNED[key] = answer = AsyncResult()
        try:
            answer.set(target.get_fact(fact, **arguments))
        except BaseException as error:
            answer.set_exception(error)
            raise
    return _PLANNED[key].get()


def preflight() -> Preflight:
    """The current host's preflight fact, gathered once per run."""
    return planned(host, SparkPreflight, model_dir=host.data.spark.model_dir)


@dataclass(frozen=True)
class FileState:
    sha256: str
    mode: str  # octal, as stat prints it: "644"
    user: str
    group: str


@dataclass(frozen=True)
class HostState:
    packages: dict[str, str]  # installed package -> version (driver packages, python3-venv)
    holds: frozenset[str]
    files: dict[str, FileState | None]  # managed path -> state, None when absent
    gai_ipv4: bool
    hf_cli: str  # huggingface_hub version in the hf venv, "" when absent
    user_home: str
    user_group: str
    ssh_home: str  # home of the SSH login user (private upload staging lives there)
    models: dict[str, dict]  # model folder -> model_check.py result
    units: dict[str, tuple[str, str]]  # unit -> (is-active, is-enabled)
    owned: frozenset[str]  # engine units, sudoers and Prometheus files the deploy wrote earlier


# Installed driver packages (and python3-venv) with their versions, and apt-mark's holds,
# as `pkg NAME VERSION` and `hold NAME` lines; read without sudo.
PACKAGE_LINES = (
    "dpkg-query -W -f='${db:Status-Abbrev} ${Package} ${Version}\\n'"
    " 'nvidia-driver-*' python3-venv 2>/dev/null"
    " | awk '$1 ~ /^[ih]i/ {print \"pkg\", $2, $3}'",
    "apt-mark showhold 2>/dev/null | sed 's/^/hold /'",
)


def parse_packages(output: list[str]) -> tuple[dict[str, str], frozenset[str]]:
    """The `pkg` and `hold` lines of PACKAGE_LINES: package -> version, and the held ones."""
    packages: dict[str, str] = {}
    holds: set[str] = set()
    for line in output:
        kind, _, rest = line.partition(" ")
        fields = rest.split()
        if kind == "pkg" and len(fields) == 2:
            packages[fields[0]] = fields[1]
        elif kind == "hold" and fields:
            holds.add(fields[0])
    return packages, frozenset(holds)


MODEL_CHECK = (Path(__file__).resolve().parents[1] / "files" / "model_check.py").read_text()
TOKEN_PATH = ".cache/huggingface/token"  # under the operator's home (HF_HOME default)
GAI_LINE_RE = r"^precedence[[:space:]]+::ffff:0:0/96[[:space:]]+100$"


class SparkHostState(FactBase):
    """
    Returns the state of everything host preparation manages, in one round trip: driver
    packages and holds, managed files and the HF token (sha256, mode, owner), the
    gai.conf IPv4 line, the hf CLI version, the operator's home, and the model folders.

    Sample output of the command::

        pkg nvidia-driver-580-open 580.95.05-0ubuntu1
        pkg python3-venv 3.12.3-0ubuntu2
        hold nvidia-driver-580-open
        file /etc/spark-deploy/hf.env 5d41402abc4b2a76b9719d911017c592 644 root root
        file /usr/local/sbin/spark-memory-guard -
        file /home/nvidia/.cache/huggingface/token 9f86d081884c7d65 600 nvidia nvidia
        gai 1
        hfcli 2.4.0
        user /home/nvidia nvidia
        sshhome /home/nvidia
        model {"folder": "/opt/models/X", "exists": true, "marker": "o/X@main", "missing": [], "empty": [], "complete": true}
        unit spark-engine-sglang.service active enabled
        owned /etc/systemd/system/spark-engine-sglang.service
        owned /etc/sudoers.d/spark-deploy-spark-engine-sglang
        owned /etc/spark-deploy/prometheus/spark-engine-sglang.rules.yml
    """

    def command(
        self,
        user: str,
        paths: tuple[str, ...],
        models: tuple[str, ...],
        units: tuple[str, ...] = (),
    ) -> str:
        quoted_user = shlex.quote(user)
        files = " ".join(shlex.quote(path) for path in paths)
        return "\n".join(
            [
                *PACKAGE_LINES,
                'st() { if [ -e "$1" ]; then printf "file %s %s %s\\n" "$1"'
                ' "$(sha256sum < "$1" | cut -d" " -f1)" "$(stat -c "%a %U %G" "$1")";'
                ' else printf "file %s -\\n" "$1"; fi; }',
                f"for f in {files}; do st \"$f\"; done",
                f"home=$(getent passwd {quoted_user} | cut -d: -f6)",
                f'[ -z "$home" ] || st "$home/{TOKEN_PATH}"',
                f"grep -qE '{GAI_LINE_RE}' {GAI_CONF} 2>/dev/null && echo 'gai 1' || echo 'gai 0'",
                f"v=$(ls -d {HF_CLI_VENV}/lib/python3*/site-packages/huggingface_hub-*.dist-info"
                " 2>/dev/null | head -n1)",
                'printf "hfcli %s\\n" "$(basename "$v" .dist-info | sed -n "s/^huggingface_hub-//p")"',
                f'printf "user %s %s\\n" "$home" "$(id -gn {quoted_user} 2>/dev/null)"',
                'printf "sshhome %s\\n" "$(getent passwd "${SUDO_USER:-$(id -un)}" | cut -d: -f6)"',
                f"for f in {ENGINE_UNIT_GLOB} {ENGINE_SUDOERS_GLOB} {PROMETHEUS_GLOB}; do"
                ' [ ! -e "$f" ] || printf "owned %s\\n" "$f"; done',
                *(
                    f'printf "unit %s %s %s\\n" {shlex.quote(unit)}'
                    f' "$(systemctl is-active {shlex.quote(unit)})"'
                    f' "$(systemctl is-enabled {shlex.quote(unit)} 2>/dev/null || echo absent)"'
                    for unit in units
                ),
                *(
                    [f"python3 -c {shlex.quote(MODEL_CHECK)} {' '.join(map(shlex.quote, models))}"
                     " | sed 's/^/model /'"]
                    if models
                    else []
                ),
            ]
        )

    def process(self, output: list[str]) -> HostState:
        packages, holds = parse_packages(output)
        files: dict[str, FileState | None] = {}
        values: dict[str, str] = {}
        models: dict[str, dict] = {}
        units: dict[str, tuple[str, str]] = {}
        owned: set[str] = set()
        for line in output:
            kind, _, rest = line.partition(" ")
            fields = rest.split()
            if kind in ("pkg", "hold"):
                continue  # parse_packages
            if kind == "file" and fields:
                files[fields[0]] = FileState(*fields[1:5]) if len(fields) == 5 else None
            elif kind == "model":
                result = json.loads(rest)
                models[result["folder"]] = result
            elif kind == "unit" and len(fields) == 3:
                units[fields[0]] = (fields[1], fields[2])
            elif kind == "owned" and fields:
                owned.add(fields[0])
            else:
                values[kind] = rest.strip()
        home, _, group = values.get("user", "").partition(" ")
        return HostState(
            packages=packages,
            holds=holds,
            files=files,
            gai_ipv4=values.get("gai") == "1",
            hf_cli=values.get("hfcli", ""),
            user_home=home,
            user_group=group,
            ssh_home=values.get("sshhome", ""),
            models=models,
            units=units,
            owned=frozenset(owned),
        )


def model_folders(spark) -> list[tuple[str, str, bool]]:
    """(folder, "repo@revision", needs tokenizer.json) for each model the host should have."""
    folders = []
    if spark.model_repo:
        want = f"{spark.model_repo}@{spark.model_revision}"
        folders.append((spark.model_folder(spark.model_repo), want, True))
    if spark.draft_model_repo:
        folders.append((spark.model_folder(spark.draft_model_repo), f"{spark.draft_model_repo}@main", False))
    return folders


def host_state() -> HostState:
    """The current host's preparation state."""
    spark = host.data.spark
    models = tuple(
        part
        for folder, want, tokenizer in model_folders(spark)
        for part in (folder, want, "1" if tokenizer else "0")
    )
    plan = host.data.get("engine_plan")
    units = plan.units if plan else ()
    paths = MANAGED_PATHS + engine_paths(plan) + alert_paths(plan)
    return planned(
        host, SparkHostState, user=spark.user, paths=paths, models=models, units=units
    )


def alert_paths(plan) -> tuple[str, ...]:
    """The Prometheus rules and scrape config of a plan with alerts (its API-serving Spark)."""
    if plan is None or plan.alerts is None or not plan.serves_api:
        return ()
    return (PROMETHEUS_RULES.format(name=plan.name),
            PROMETHEUS_SCRAPE.format(name=plan.name))


def engine_paths(plan) -> tuple[str, ...]:
    """The files the deploy writes for an engine plan: the container environment, and a
    unit and a sudoers file per service."""
    if plan is None:
        return ()
    return (
        ENGINE_ENV_FILE.format(name=plan.name),
        *(path for service in plan.services for path in (
            f"/etc/systemd/system/{service.unit}",
            ENGINE_SUDOERS.format(name=service.unit_base),
        )),
    )


JOURNAL_MARK = "@@spark-deploy@@"  # starts the fact's own lines; journal lines never do
UNIT_PROPERTIES = ("LoadState", "ActiveState", "SubState", "Result", "ExecMainStatus",
                   "NRestarts", "StateChangeTimestamp")


@dataclass(frozen=True)
class UnitJournal:
    unit: str
    properties: dict[str, str]  # `systemctl show` of UNIT_PROPERTIES
    lines: tuple[str, ...]  # the unit's last journal lines, oldest first

    @property
    def installed(self) -> bool:
        return self.properties.get("LoadState") == "loaded"

    @property
    def active(self) -> bool:
        return self.properties.get("ActiveState") == "active"

    def summary(self) -> str:
        """"failed (exit-code, exit status 1) since Mon 2026-03-23 10:12:05 UTC, 3 restarts"."""
        if not self.installed:
            return f"not installed ({self.properties.get('LoadState') or 'unknown'})"
        get = self.properties.get
        state = f"{get('ActiveState', '?')} ({get('SubState', '?')}"
        if get("Result", "success") != "success":
            state += f", {get('Result')}, exit status {get('ExecMainStatus', '?')}"
        since = f" since {get('StateChangeTimestamp')}" if get("StateChangeTimestamp") else ""
        return f"{state}){since}, {get('NRestarts', '0')} restarts"


class EngineJournals(FactBase):
    """
    Returns, in one round trip, the state and the last journal lines of each engine unit.
    Read-only: ``systemctl show`` and ``journalctl`` (message text only, ``-o cat``).

    Sample output of the command::

        @@spark-deploy@@ unit spark-engine-sglang.service
        @@spark-deploy@@ state LoadState=loaded
        @@spark-deploy@@ state ActiveState=failed
        @@spark-deploy@@ state SubState=failed
        @@spark-deploy@@ state Result=exit-code
        @@spark-deploy@@ state ExecMainStatus=1
        @@spark-deploy@@ state NRestarts=3
        @@spark-deploy@@ state StateChangeTimestamp=Mon 2026-03-23 10:12:05 UTC
        [2026-03-23 10:12:03 TP0] Load weight begin. avail mem=119.62 GB
        RuntimeError: CUDA error: invalid device function
        spark-engine-sglang.service: Failed with result 'exit-code'.

    .. code:: python

        [UnitJournal(unit="spark-engine-sglang.service",
                     properties={"LoadState": "loaded", "ActiveState": "failed", ...},
                     lines=("[2026-03-23 10:12:03 TP0] Load weight begin. ...", ...))]
    """

    def command(self, units: tuple[str, ...], lines: int) -> str:
        properties = ",".join(UNIT_PROPERTIES)
        commands = []
        for unit in units:
            quoted = shlex.quote(unit)
            commands += [
                f"printf '{JOURNAL_MARK} unit %s\\n' {quoted}",
                f"systemctl show {quoted} -p {properties} | sed 's/^/{JOURNAL_MARK} state /'",
                f"journalctl -u {quoted} -n {int(lines)} --no-pager -q -o cat",
            ]
        return "\n".join([*commands, "true"])

    def process(self, output: list[str]) -> list[UnitJournal]:
        found: list[tuple[str, dict[str, str], list[str]]] = []
        for line in output:
            kind, rest = "", ""
            if line.startswith(f"{JOURNAL_MARK} "):
                kind, _, rest = line[len(JOURNAL_MARK) + 1 :].partition(" ")
            if kind == "unit":
                found.append((rest.strip(), {}, []))
            elif kind == "state" and found:
                key, _, value = rest.partition("=")
                found[-1][1][key] = value.strip()
            elif found:
                found[-1][2].append(line)
        return [UnitJournal(unit, properties, tuple(lines)) for unit, properties, lines in found]
