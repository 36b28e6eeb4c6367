"""
The host-state fact: everything host preparation manages, read in one round trip, with its
arguments built from the settings, the plan and the managed-file registry. It is composed of
probes (``facts/probes/``), one per feature: it runs their lines one after the other and
hands each output line to the probe that owns its kind.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypeVar

from pyinfra import host
from pyinfra.api import FactBase, Host

from sparkdeploy.config.paths import (
    ENGINE_FILE_GLOBS,
    FABRIC_GUARD_UNIT_NAME,
    MCP_UNIT_NAME,
)
from sparkdeploy.engine_plan.files import managed_files
from sparkdeploy.facts.probes import HostQuery, Probe, operator_home, owned_lines
from sparkdeploy.facts.probes.engine_files import EngineFiles
from sparkdeploy.facts.probes.fabric import FabricGuard
from sparkdeploy.facts.probes.files import FileState, ManagedFiles
from sparkdeploy.facts.probes.gai import GaiIpv4
from sparkdeploy.facts.probes.health import FailedChecks
from sparkdeploy.facts.probes.hf_cli import HfCliVenv
from sparkdeploy.facts.probes.image import Image
from sparkdeploy.facts.probes.mcp import McpServer
from sparkdeploy.facts.probes.models import ModelChecks
from sparkdeploy.facts.probes.packages import Packages
from sparkdeploy.facts.probes.units import Units
from sparkdeploy.facts.probes.user import UserHomes
from sparkdeploy.facts.store import gathered

__all__ = ["FileState", "HostState", "SparkHostState", "host_state"]
T = TypeVar("T")


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
    fabric: dict[str, str] = field(default_factory=dict)  # probes/fabric.py: "table", "present"
    # Units whose last health check failed (spark-engine-health's record): checked again
    unhealthy: frozenset[str] = frozenset()


PACKAGES = Packages()
FILES = ManagedFiles()
GAI = GaiIpv4()
HF_CLI = HfCliVenv()
USER = UserHomes()
ENGINE_FILES = EngineFiles()
UNITS = Units()
HEALTH = FailedChecks()
IMAGE = Image()
MCP = McpServer()
FABRIC = FabricGuard()
MODELS = ModelChecks()
# In the order their lines run; each owns its kinds, and a line no probe owns is ignored.
PROBES: tuple[Probe[object], ...] = (
    PACKAGES,
    FILES,
    GAI,
    HF_CLI,
    USER,
    ENGINE_FILES,
    UNITS,
    HEALTH,
    IMAGE,
    MCP,
    FABRIC,
    MODELS,
)


class SparkHostState(FactBase):
    """
    Returns the state of everything host preparation manages, in one round trip: driver
    packages and holds, the managed files (sha256, mode, owner; a ``~/`` path is under the
    operator's home, like the HF token), the gai.conf IPv4 line, the hf CLI version, the
    operator's home, the engine units (and those whose last health check failed) and files,
    and the model folders.

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
        unhealthy spark-engine-vllm.service
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
        query = HostQuery(user, paths, models, units, owned_globs, image)
        return "\n".join(
            [operator_home(user), *(line for probe in PROBES for line in probe.lines(query))]
        )

    def process(self, output: list[str]) -> HostState:
        def read(probe: Probe[T]) -> T:
            return probe.parse(owned_lines(probe, output))

        packages, holds = read(PACKAGES)
        owned, foreign = read(ENGINE_FILES)
        hf, homes, image = read(HF_CLI), read(USER), read(IMAGE)
        return HostState(
            packages=packages,
            holds=holds,
            files=read(FILES),
            gai_ipv4=read(GAI),
            hf_cli=hf.version,
            user_home=homes.user_home,
            user_group=homes.user_group,
            ssh_home=homes.ssh_home,
            models=read(MODELS),
            units=read(UNITS),
            owned=owned,
            foreign=foreign,
            image_id=image.image_id,
            image_reading=image.reading,
            kept=image.kept,
            mcp=read(MCP),
            hf_lock=hf.lock,
            fabric=read(FABRIC),
            unhealthy=read(HEALTH),
        )


def host_state(target: Host | None = None) -> HostState:
    """The preparation state of the current host (or of ``target``, its peer), gathered
    once per run."""
    # Not `target or host`: pyinfra's `host` (what a prefetch passes) is a context proxy whose
    # truth test asks the Host for its len() and raises, so the prefetch never ran.
    target = host if target is None else target
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
