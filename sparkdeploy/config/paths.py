"""
Where things live on a Spark, and the shape of a file the deploy writes whole.

Fixed paths are decided by DGX OS or by this project, never by the inventory. A managed file
is declared as a ``ManagedFile``: its path, mode, owner, which fact reads its checksum and
how it is checked before it goes live. ``host_files`` declares the Spark's own, from its
settings; the engine plan's are declared beside the plan (``engine_plan/files.py``, which
knows the plan's shape: nothing here does), and ``engine_plan.files.managed_files`` is the
only list of a Spark's managed files.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from sparkdeploy.config.spark import SparkSettings

# Paths DGX OS decides.
DRM_OVERRIDE_CONF = "/etc/modprobe.d/zz-nvidia-drm-override.conf"
GAI_CONF = "/etc/gai.conf"
SYSTEMD_DIR = "/etc/systemd/system"
# Run-time markers: tmpfs, so whatever is here is gone after a reboot.
RUN_DIR = "/run/spark-deploy"
REBOOT_PENDING = f"{RUN_DIR}/reboot-pending"
BOOT_MARKER = f"{RUN_DIR}/boot-marker"
# NetworkManager profile of a QSFP interface: qsfp-<interface>.
QSFP_PROFILE_PREFIX = "qsfp-"
# A netplan file the deploy took a QSFP interface over from is moved here (<name>.<sha>), and
# the profiles netplan rendered for it to NetworkManager are in NETPLAN_NM_DIR as
# netplan-<id>.nmconnection (netplan's NetworkManager renderer, src/nm.c).
NETPLAN_BACKUP = "/var/lib/spark-deploy/netplan-backup"
NETPLAN_NM_DIR = "/run/NetworkManager/system-connections"
# The hf command's own venv (not a managed file: pip writes it).
HF_CLI_VENV = "/opt/spark-deploy/hf-cli"
# The MCP server for local coding agents (mcp_server): its own venv (pip writes it) and the
# pure part of sparkdeploy it runs (a tar the deploy unpacks, with its digest), both under
# MCP_DIR; what it knows of the Spark (MCP_CONTEXT, managed) and its unit (managed). It runs as
# MCP_USER, a system user in the systemd-journal group (it reads the engines' journals and
# the kernel log) with no sudo right and no docker group.
MCP_DIR = "/opt/spark-deploy/mcp"
MCP_VENV = MCP_DIR + "/venv"
MCP_LIB = MCP_DIR + "/lib"
MCP_USER = "spark-mcp"
MCP_UNIT_NAME = "spark-mcp.service"
MCP_CONTEXT = "/etc/spark-deploy/mcp/context.json"
MCP_UNIT = SYSTEMD_DIR + "/" + MCP_UNIT_NAME
MCP_PATH = "/mcp"  # its Streamable HTTP endpoint (the SDK's default path)
# The bearer token every request to it must carry (issue 22: loopback alone let any local user
# read the journals through it): made on the Spark from /dev/urandom, read by the server
# (root:MCP_USER 0640), and the operator's copy, written by the operator under their home.
MCP_TOKEN = "/etc/spark-deploy/mcp/token"
MCP_OPERATOR_TOKEN = ".config/spark-deploy/mcp-token"  # under the operator's home
# Units kept alive under memory pressure, so a runaway engine cannot take the Spark offline.
OOM_PROTECTED_UNITS = ("ssh.service", "NetworkManager.service")

# The managed files, by the name the operations use.
NCCL_ENV = "/etc/spark-deploy/nccl.env"  # what multi-node engines source (NCCL, Gloo, Ray)
HF_ENV_FILE = "/etc/spark-deploy/hf.env"  # EnvironmentFile= for engine units
HF_PROFILE = "/etc/profile.d/spark-deploy-hf.sh"  # login shells
HF_TOKEN = "~/.cache/huggingface/token"  # under the operator's home (HF_HOME default)
MEMORY_GUARD = "/usr/local/sbin/spark-memory-guard"
MEMORY_GUARD_ENV = "/etc/spark-deploy/memory-guard.env"
DROP_CACHES = "/usr/local/sbin/spark-drop-caches"
ENGINE_HEALTH = "/usr/local/sbin/spark-engine-health"
# A unit whose last health check failed: spark-engine-health writes HEALTH_FAILED/UNIT (root's
# 0755 folder, a 0644 file) when its check of --unit fails and removes it when one passes; a
# deploy that finds it checks the unit again instead of taking "active" as serving (a
# crash-looping engine is active while it loads, between its restarts).
HEALTH_FAILED = "/var/lib/spark-deploy/health-failed"
MODEL_CHECK_BIN = "/usr/local/sbin/spark-model-check"
RAY_WAIT = "/usr/local/sbin/spark-ray-wait"
# The fabric guard (deploys/qsfp/guard.py): an nftables table of the deploy's own, loaded
# from FABRIC_GUARD by a oneshot unit at boot, that lets only the other Sparks reach the
# ports the Sparks use for control (rendezvous, ZMQ, Ray, the link test, the copy server).
FABRIC_GUARD = "/etc/spark-deploy/fabric-guard.nft"
FABRIC_GUARD_UNIT_NAME = "spark-fabric-guard.service"
FABRIC_GUARD_UNIT = SYSTEMD_DIR + "/" + FABRIC_GUARD_UNIT_NAME
FABRIC_GUARD_TABLE = "inet spark_deploy"  # the only table it creates or replaces
# The link test (linktest.py): the script, run in the engine image (mounted at the same path),
# and its last result, written by the test run itself (root, 0644, replaced atomically); the
# status table reads it without sudo.
LINK_TEST = "/usr/local/sbin/spark-link-test"
LINK_TEST_RESULT = "/var/lib/spark-deploy/linktest.json"
# Long work (model downloads, image pulls and readings) runs on the Spark as the systemd job
# spark-fetch@ID.service, independent of the deploy's SSH session: spark-fetch is the job,
# FETCH_JOBS holds each job's spec (ID.json) and progress (ID.status.json), IMAGE_READINGS
# what was read from each image, by image ID (<hex>.json).
FETCH_BIN = "/usr/local/sbin/spark-fetch"
# The modules spark-fetch imports (its job specs, files/fetch_spec.py, its parts,
# files/fetch_*.py, and its image pull through the Docker Engine API, files/docker_pull.py):
# a root-owned 0755 folder of their own, which spark-fetch puts on its sys.path by name.
# Each is shipped as files/<name>.py to FETCH_LIB/<name>.py.
FETCH_LIB = "/usr/local/lib/spark-deploy"
FETCH_SPEC = FETCH_LIB + "/fetch_spec.py"
FETCH_MODULES = (
    "fetch_spec",
    "fetch_errors",
    "fetch_progress",
    "fetch_names",
    "fetch_hub",
    "docker_pull",
    "fetch_docker",
    "fetch_channel",
    "fetch_serve",
    "fetch_copy",
    "fetch_copy_image",
)
FETCH_UNIT = SYSTEMD_DIR + "/spark-fetch@.service"
FETCH_JOBS = "/var/lib/spark-deploy/fetch"
IMAGE_READINGS = "/var/lib/spark-deploy/images"
# GPU services that take turns with the engine (gpu_services): a unit each, the map
# spark-gpu-switch reads (name -> unit, port, health path, memory), and a sudoers file per name
# that lets the operator hand the GPU to it (the engine's name is `engine`).
GPU_UNIT = SYSTEMD_DIR + "/{unit}"
GPU_SWITCH_BIN = "/usr/local/sbin/spark-gpu-switch"
GPU_SERVICES_MAP = "/etc/spark-deploy/gpu-services.json"
GPU_SUDOERS = "/etc/sudoers.d/spark-deploy-gpu-{name}"
# The last engine configuration that passed its health check, and the last rollback to it
# (engine.rollback): spark-engine-rollback keeps them under ROLLBACK_STATE (copies root-only,
# the manifest and the rollback record 0644 for the status table).
ROLLBACK_BIN = "/usr/local/sbin/spark-engine-rollback"
ROLLBACK_STATE = "/var/lib/spark-deploy/rollback"
ROLLBACK_KEPT = ROLLBACK_STATE + "/last-good/manifest.json"
OOM_DROP_IN = SYSTEMD_DIR + "/{unit}.d/spark-deploy-oom.conf"
CONTAINER_ENV = "/etc/spark-deploy/{name}.env"  # an engine container's --env-file, 0600 root
# The API key the engine requires (engine.api_key_env), root-only: vLLM reads VLLM_API_KEY
# from it as a second --env-file (.key.env), SGLang its api-key from it as its --config YAML
# (.key.yaml), mounted read-only at API_KEY_MOUNT. The health check reads it under sudo.
API_KEY_FILE = "/etc/spark-deploy/{name}.key.{kind}"
API_KEY_MOUNT = "/run/secrets/spark-api-key.yaml"
ENGINE_UNIT = SYSTEMD_DIR + "/{unit}"
# sudo skips files in sudoers.d whose names contain a dot: the staged copy never goes live.
ENGINE_SUDOERS = "/etc/sudoers.d/spark-deploy-{name}"
PROMETHEUS_DIR = "/etc/spark-deploy/prometheus"  # engine.alerts, beside the engine
PROMETHEUS_RULES = PROMETHEUS_DIR + "/{name}.rules.yml"
PROMETHEUS_SCRAPE = PROMETHEUS_DIR + "/{name}.scrape.yml"
# engine.files and engine.mods, shipped from the laptop: NN-<name> under the engine's folder,
# the mods in mods/, which the container sees read-only at MODS_MOUNT.
ENGINE_FILES_DIR = "/var/lib/spark-deploy/engine-files/{name}"
MODS_MOUNT = "/opt/spark-deploy/mods"
# Engine files the deploy wrote in an earlier run: retired when no longer planned. In the
# folders an admin shares with the deploy (sudoers.d, systemd's units) a file is the deploy's
# only when its first line is the header its templates write (MANAGED_HEADER): an admin's own
# /etc/sudoers.d/spark-deploy-mine is left alone (issue 22). The other globs are in folders
# only the deploy writes.
MANAGED_HEADER = "# Managed by spark-deploy"
SHARED_FOLDERS = ("/etc/sudoers.d/", SYSTEMD_DIR + "/")
ENGINE_FILE_GLOBS = (
    SYSTEMD_DIR + "/spark-engine-*.service",
    SYSTEMD_DIR + "/spark-gpu-*.service",
    "/etc/sudoers.d/spark-deploy-*",
    API_KEY_FILE.format(name="spark-engine-*", kind="*"),
    PROMETHEUS_DIR + "/spark-engine-*.yml",
    ENGINE_FILES_DIR.format(name="*") + "/[0-9][0-9]-*",
    ENGINE_FILES_DIR.format(name="*") + "/mods/[0-9][0-9]-*",
)


def shipped_path(plan_name: str, kind: str, name: str) -> str:
    """Where a file of engine.files (``kind`` file) or engine.mods (mod) lives on the Spark."""
    folder = ENGINE_FILES_DIR.format(name=plan_name)
    return f"{folder}/mods/{name}" if kind == "mod" else f"{folder}/{name}"


OPERATOR = "operator"  # owner/group placeholder: the Spark's operator user and its group
HOME = "~/"  # a path under the operator's home


@dataclass(frozen=True)
class ManagedFile:
    """
    One file the deploy owns whole.

    ``read_by`` names the fact that reads its checksum (``host_state``: the coarse
    preparation fact; ``qsfp_network``: the network fact, since the engine environment is
    written from what the QSFP proof finds). ``validate`` checks the staged copy before it
    replaces the file (``{path}`` stands for it); ``secret`` files are uploaded through a
    private folder and never shown.
    """

    path: str
    mode: str = "644"
    owner: str = "root"
    group: str = "root"
    read_by: Literal["host_state", "qsfp_network"] = "host_state"
    validate: str | None = None
    secret: bool = False

    @property
    def under_home(self) -> bool:
        return self.path.startswith(HOME)


def host_files(spark: SparkSettings) -> list[ManagedFile]:
    """The files the deploy writes whole on a Spark whatever its engine plan: the scripts,
    the hf environment and token, and those of the features ``spark`` turns on (the QSFP
    fabric, the MCP server, GPU services). The plan's own are ``engine_plan.files``."""
    files = [
        ManagedFile(HF_ENV_FILE),
        ManagedFile(HF_PROFILE),
        ManagedFile(HF_TOKEN, mode="600", owner=OPERATOR, group=OPERATOR, secret=True),
        ManagedFile(MEMORY_GUARD, mode="755"),
        ManagedFile(MEMORY_GUARD_ENV),
        ManagedFile(DROP_CACHES, mode="755"),
        ManagedFile(ENGINE_HEALTH, mode="755"),
        ManagedFile(MODEL_CHECK_BIN, mode="755"),
        ManagedFile(RAY_WAIT, mode="755"),
        ManagedFile(LINK_TEST, mode="755"),
        ManagedFile(ROLLBACK_BIN, mode="755"),
        ManagedFile(FETCH_BIN, mode="755"),
        *(ManagedFile(f"{FETCH_LIB}/{name}.py") for name in FETCH_MODULES),
        ManagedFile(FETCH_UNIT),
        *(ManagedFile(OOM_DROP_IN.format(unit=unit)) for unit in OOM_PROTECTED_UNITS),
    ]
    if spark.qsfp:
        files.append(ManagedFile(NCCL_ENV, read_by="qsfp_network"))
        files += [
            ManagedFile(FABRIC_GUARD, mode="600", validate="nft -c -f {path}"),
            ManagedFile(FABRIC_GUARD_UNIT),
        ]
    if spark.mcp_server:
        files += [ManagedFile(MCP_CONTEXT), ManagedFile(MCP_UNIT)]
    if spark.gpu_services:
        files += [ManagedFile(GPU_SWITCH_BIN, mode="755"), ManagedFile(GPU_SERVICES_MAP)]
        files += [ManagedFile(GPU_UNIT.format(unit=service.unit)) for service in spark.gpu_services]
        files += [
            ManagedFile(GPU_SUDOERS.format(name=name), mode="440", validate="visudo -cf {path}")
            for name in gpu_switch_names(spark)
        ]
    return files


def gpu_switch_names(spark: SparkSettings) -> list[str]:
    """The names spark-gpu-switch takes on this Spark: the engine's, then each service's."""
    names = ["engine"] if spark.engine is not None else []
    return names + [service.name for service in spark.gpu_services]
