"""
The host-state fact: everything host preparation manages, read in one round trip, with its
arguments built from the settings, the plan and the managed-file registry.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from pyinfra import host
from pyinfra.api import FactBase, Host

from sparkdeploy.config.paths import (
    ENGINE_FILE_GLOBS,
    FABRIC_GUARD,
    FABRIC_GUARD_TABLE,
    FABRIC_GUARD_UNIT,
    FABRIC_GUARD_UNIT_NAME,
    GAI_CONF,
    HF_CLI_VENV,
    HOME,
    IMAGE_READINGS,
    MANAGED_HEADER,
    MCP_CONTEXT,
    MCP_DIR,
    MCP_LIB,
    MCP_OPERATOR_TOKEN,
    MCP_TOKEN,
    MCP_UNIT,
    MCP_UNIT_NAME,
    MCP_USER,
    MCP_VENV,
    ROLLBACK_KEPT,
    SHARED_FOLDERS,
    managed_files,
)
from sparkdeploy.escape import shell
from sparkdeploy.facts.store import gathered
from sparkdeploy.render import file_text


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
    # Files matching those names in shared folders that the deploy did not write (no managed
    # header on their first line): an admin's own, never removed.
    foreign: frozenset[str] = frozenset()
    image_id: str = ""  # ID of the engine image on the Spark, "" when it is not there
    image_reading: dict | None = None  # what spark-fetch read from that image, once per ID
    kept: bool = False  # a last good engine configuration is kept (spark-engine-rollback)
    # The MCP server: "venv" the sha256 of the lock its venv was made from, "lib" the digest of the
    # code unpacked, "user" spark-mcp's groups, "present" 1 when any of its files is on the
    # Spark ("" when not), "token" its token's mode and owner, "copy" the mode of the
    # operator's copy when it holds that token; its unit's state is in ``units`` when wanted
    mcp: dict[str, str] = field(default_factory=dict)
    hf_lock: str = ""  # sha256 of the lock the hf venv was made from, "" when none
    fabric: dict[str, str] = field(default_factory=dict)  # FABRIC_LINES: "table", "present"


# Installed driver packages (and python3-venv, nftables) with their versions, and apt-mark's holds,
# as `pkg NAME VERSION` and `hold NAME` lines; read without sudo.
PACKAGE_LINES = (
    "dpkg-query -W -f='${db:Status-Abbrev} ${Package} ${Version}\\n'"
    " 'nvidia-driver-*' python3-venv nftables 2>/dev/null"
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


MODEL_CHECK = file_text("model_check.py")
# The MCP server's state (HostState.mcp), read whether it is wanted or not (to retire it).
# The hash lock a venv was made from (knowledge/locks.py), kept in it once pip installed
# everything it lists (deploys/venv.py): read as its sha256, "" when absent.
LOCK_STAMP = "spark-deploy.lock"
HF_CLI_STAMP = HF_CLI_VENV + "/" + LOCK_STAMP
MCP_STAMP = MCP_VENV + "/" + LOCK_STAMP
MCP_DIGEST = MCP_LIB + "/DIGEST"


def stamp_line(label: str, stamp: str) -> str:
    """`LABEL SHA256` of a venv's lock stamp (`LABEL ` alone when there is none)."""
    return f"printf '{label} %s\\n' \"$([ -f {stamp} ] && sha256sum < {stamp} | cut -d' ' -f1)\""


MCP_LINES = (
    stamp_line("mcp venv", MCP_STAMP),
    f"printf 'mcp lib %s\\n' \"$(cat {MCP_DIGEST} 2>/dev/null)\"",
    f"printf 'mcp user %s\\n' \"$(id -nG {MCP_USER} 2>/dev/null)\"",
    f"[ -e {MCP_DIR} ] || [ -e {MCP_UNIT} ] || [ -e {MCP_CONTEXT} ] || [ -e {MCP_TOKEN} ]"
    " && echo 'mcp present 1' || echo 'mcp present 0'",
    # the token's mode and owner when it is a file with content ("" when not), and the mode
    # of the operator's copy when it holds the same (sha256 compared as root; a symlink or
    # other non-file there is never opened). $home is the operator's home, read above.
    f't={MCP_TOKEN}; c="$home"/{MCP_OPERATOR_TOKEN}; tok() {{ [ -f "$1" ] && [ ! -L "$1" ]'
    ' && [ -s "$1" ]; }',
    "printf 'mcp token %s\\n' \"$(tok $t && stat -c '%a %U %G' $t)\"",
    'printf \'mcp copy %s\\n\' "$([ -n "$home" ] && tok $t && tok "$c"'
    ' && [ "$(sha256sum < $t)" = "$(sha256sum < "$c")" ] && stat -c %a "$c")"',
)
# The fabric guard (HostState.fabric): "table" 1 when its nftables table is loaded, "present"
# 1 when its file or unit is on the Spark (read whether it is wanted or not, to retire it).
FABRIC_LINES = (
    f"nft list table {FABRIC_GUARD_TABLE} >/dev/null 2>&1"
    " && echo 'fabric table 1' || echo 'fabric table 0'",
    f"{{ [ -e {FABRIC_GUARD} ] || [ -e {FABRIC_GUARD_UNIT} ]; }}"
    " && echo 'fabric present 1' || echo 'fabric present 0'",
)
GAI_LINE_RE = r"^precedence[[:space:]]+::ffff:0:0/96[[:space:]]+100$"


class SparkHostState(FactBase):
    """
    Returns the state of everything host preparation manages, in one round trip: driver
    packages and holds, the managed files (sha256, mode, owner; a ``~/`` path is under the
    operator's home, like the HF token), the gai.conf IPv4 line, the hf CLI version, the
    operator's home, the engine units and files, and the model folders.

    Sample output of the command::

        pkg nvidia-driver-580-open 580.95.05-0ubuntu1
        pkg python3-venv 3.12.3-0ubuntu2
        hold nvidia-driver-580-open
        file /etc/spark-deploy/hf.env 5d41402abc4b2a76b9719d911017c592 644 root root
        file /usr/local/sbin/spark-memory-guard -
        file ~/.cache/huggingface/token 9f86d081884c7d65 600 nvidia nvidia
        gai 1
        hfcli 2.4.0
        hflock f508cbfeba33e3feabdc7432f30e030ca582b470d0e746345a5821b36942cf70
        user /home/nvidia nvidia
        sshhome /home/nvidia
        model {"folder": "/opt/models/X", "exists": true, "marker": "o/X@main", "missing": [], "empty": [], "complete": true}
        unit spark-engine-sglang.service active enabled
        owned /etc/systemd/system/spark-engine-sglang.service
        owned /etc/sudoers.d/spark-deploy-spark-engine-sglang
        owned /etc/spark-deploy/prometheus/spark-engine-sglang.rules.yml
        foreign /etc/sudoers.d/spark-deploy-admin
        image sha256:9f2a6c1e0b7d4c5a8e3f1b2d6c7a8e9f0a1b2c3d4e5f60718293a4b5c6d7e8f9
        reading {"id": "sha256:9f2a...", "engine": "sglang", "release": "0.5.10", "ray": false, "flags": ["--port"]}
        kept 1
        mcp venv 7fd1759a17995a0ba555a7532e66469c069155812919aff4ddf7151e42051db1
        mcp lib 3f79bb7b435b05321651daefd374cdc681dc06faa65e374e38337b88ca046dea
        mcp user spark-mcp systemd-journal
        mcp present 1
        mcp token 640 root spark-mcp
        mcp copy 600
        fabric table 1
        fabric present 1
    """  # noqa: E501 -- the sample output is verbatim (tests parse it)

    def command(
        self,
        user: str,
        paths: tuple[str, ...],
        models: tuple[str, ...],
        units: tuple[str, ...] = (),
        owned_globs: tuple[str, ...] = (),
        image: str = "",
    ) -> str:
        quoted_user = shell(user)
        files = " ".join(shell(path) for path in paths if not path.startswith(HOME))
        at_home = [path[len(HOME) :] for path in paths if path.startswith(HOME)]
        return "\n".join(
            [
                *PACKAGE_LINES,
                # st PATH [NAME]: the state of a file, printed under NAME (default PATH); a
                # symlink reads as absent (it is replaced, never followed: root reads no file
                # another account points it at, and no FIFO that would hang the fact)
                'st() { if [ -f "$1" ] && [ ! -L "$1" ]; then printf "file %s %s %s\\n" "${2:-$1}"'
                ' "$(sha256sum < "$1" | cut -d" " -f1)" "$(stat -c "%a %U %G" "$1")";'
                ' else printf "file %s -\\n" "${2:-$1}"; fi; }',
                f'for f in {files}; do st "$f"; done',
                f"home=$(getent passwd {quoted_user} | cut -d: -f6)",
                *(
                    f'[ -z "$home" ] || st "$home"/{shell(path)} {shell(HOME + path)}'
                    for path in at_home
                ),
                f"grep -qE '{GAI_LINE_RE}' {GAI_CONF} 2>/dev/null && echo 'gai 1' || echo 'gai 0'",
                f"v=$(ls -d {HF_CLI_VENV}/lib/python3*/site-packages/huggingface_hub-*.dist-info"
                " 2>/dev/null | head -n1)",
                'printf "hfcli %s\\n" "$(basename "$v" .dist-info | sed -n "s/^huggingface_hub-//p")"',
                stamp_line("hflock", HF_CLI_STAMP),
                f'printf "user %s %s\\n" "$home" "$(id -gn {quoted_user} 2>/dev/null)"',
                'printf "sshhome %s\\n" "$(getent passwd "${SUDO_USER:-$(id -un)}" | cut -d: -f6)"',
                *(
                    [
                        f"for f in {' '.join(owned_globs)}; do"
                        ' [ -e "$f" ] || continue; case "$f" in'
                        f" {'|'.join(folder + '*' for folder in SHARED_FOLDERS)})"
                        f' head -n 1 "$f" | grep -qF {shell(MANAGED_HEADER)}'
                        ' || { printf "foreign %s\\n" "$f"; continue; };; esac;'
                        ' printf "owned %s\\n" "$f"; done'
                    ]
                    if owned_globs
                    else []
                ),
                *(
                    f'printf "unit %s %s %s\\n" {shell(unit)}'
                    f' "$(systemctl is-active {shell(unit)})"'
                    f' "$(systemctl is-enabled {shell(unit)} 2>/dev/null || echo absent)"'
                    for unit in units
                ),
                *(
                    [
                        # the engine image: its ID, and what was read from it (by ID)
                        f"id=$(docker image inspect -f '{{{{.Id}}}}' {shell(image)} 2>/dev/null)",
                        'printf "image %s\\n" "${id:--}"',
                        f'r={IMAGE_READINGS}/"${{id#sha256:}}".json',
                        '[ -z "$id" ] || [ ! -s "$r" ] || printf "reading %s\\n" "$(cat "$r")"',
                        f"[ -e {ROLLBACK_KEPT} ] && echo 'kept 1' || echo 'kept 0'",
                    ]
                    if image
                    else []
                ),
                *MCP_LINES,
                *FABRIC_LINES,
                *(
                    [
                        f"python3 -I -c {shell(MODEL_CHECK)} {' '.join(map(shell, models))}"
                        " | sed 's/^/model /'"
                    ]
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
        foreign: set[str] = set()
        reading: dict | None = None
        mcp: dict[str, str] = {}
        fabric: dict[str, str] = {}
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
            elif kind == "foreign" and fields:
                foreign.add(fields[0])
            elif kind in ("mcp", "fabric"):
                key, _, value = rest.partition(" ")
                (mcp if kind == "mcp" else fabric)[key] = value.strip()
            elif kind == "reading":
                try:
                    reading = json.loads(rest)
                except ValueError:
                    reading = None  # a torn cache file: read the image again
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
            foreign=frozenset(foreign),
            image_id="" if values.get("image", "-") == "-" else values["image"],
            image_reading=reading,
            kept=values.get("kept") == "1",
            mcp=mcp,
            hf_lock=values.get("hflock", ""),
            fabric=fabric,
        )


def host_state(target: Host | None = None) -> HostState:
    """The preparation state of the current host (or of ``target``, its peer), gathered
    once per run."""
    target = target or host
    spark = target.data.spark
    plan = target.data.get("engine_plan")
    models = tuple(
        part
        for folder, want, tokenizer in spark.model_folders()
        for part in (folder, want, "1" if tokenizer else "0")
    )
    paths = tuple(
        path for path, file in managed_files(spark, plan).items() if file.read_by == "host_state"
    )
    return gathered(
        target,
        SparkHostState,
        user=spark.user,
        paths=paths,
        models=models,
        units=(
            *(plan.units if plan else ()),
            *(s.unit for s in spark.gpu_services),
            *([MCP_UNIT_NAME] if spark.mcp_server else []),
            *([FABRIC_GUARD_UNIT_NAME] if spark.qsfp else []),
        ),
        owned_globs=ENGINE_FILE_GLOBS,
        image=plan.image if plan else "",
    )
