"""
Settings for a Spark: every default in one place, validated before any host is touched.

Data flows one way: the inventory YAML is read here, merged (built-in defaults <
``defaults:`` < the host's own keys), validated, and handed to the operations as a frozen,
typed ``SparkSettings`` per host. Operations never read the YAML themselves.

The inventory file looks like::

    defaults:            # shared by every Spark; any per-host key except ssh_host
      ssh_user: nvidia
    sparks:              # one or two Sparks: name -> keys
      spark-1:
        ssh_host: 192.168.1.50
      spark-2:
        ssh_host: 192.168.1.51
        allow_reboot: true

Every key, its type, default and meaning is declared once, in ``SparkSettings`` below;
README.md documents the same table (a test keeps the two in step).
"""

from __future__ import annotations

import difflib
import posixpath
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

# Fixed paths on a Spark (not settings: DGX OS decides them).
DRM_OVERRIDE_CONF = "/etc/modprobe.d/zz-nvidia-drm-override.conf"
RUN_DIR = "/run/spark-deploy"  # tmpfs: whatever is here is gone after a reboot
REBOOT_PENDING = f"{RUN_DIR}/reboot-pending"
BOOT_MARKER = f"{RUN_DIR}/boot-marker"

HF_CLI_VENV = "/opt/spark-deploy/hf-cli"
HF_ENV_FILE = "/etc/spark-deploy/hf.env"  # EnvironmentFile= for engine units
HF_PROFILE = "/etc/profile.d/spark-deploy-hf.sh"  # login shells
GAI_CONF = "/etc/gai.conf"
MEMORY_GUARD = "/usr/local/sbin/spark-memory-guard"
MEMORY_GUARD_ENV = "/etc/spark-deploy/memory-guard.env"
DROP_CACHES = "/usr/local/sbin/spark-drop-caches"
# Units kept alive under memory pressure, so a runaway engine cannot take the Spark offline.
OOM_PROTECTED_UNITS = ("ssh.service", "NetworkManager.service")
OOM_DROP_IN = "/etc/systemd/system/{unit}.d/spark-deploy-oom.conf"
# Every file the deploy writes whole; one fact reads all their digests at once.
MANAGED_PATHS = (
    HF_ENV_FILE,
    HF_PROFILE,
    MEMORY_GUARD,
    MEMORY_GUARD_ENV,
    DROP_CACHES,
    *(OOM_DROP_IN.format(unit=unit) for unit in OOM_PROTECTED_UNITS),
)
REPO_ID = r"^[A-Za-z0-9][\w.-]*/[\w.-]+$"

MAX_SPARKS = 2
HOST_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
PER_HOST_ONLY = ("ssh_host",)


class SparkSettings(BaseModel):
    """The validated settings of one Spark. Field descriptions are the user documentation."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    ssh_host: str = Field(
        min_length=1,
        description="Address or DNS name the laptop reaches the Spark's SSH server at. "
        "Required, per host only.",
    )
    ssh_port: int = Field(22, ge=1, le=65535, description="SSH port of the Spark.")
    ssh_user: str | None = Field(
        None,
        min_length=1,
        description="SSH login; it needs sudo. Unset: your ~/.ssh/config or local user name.",
    )
    ssh_key: str | None = Field(
        None,
        min_length=1,
        description="Private key file for SSH. Unset: the SSH agent and ~/.ssh keys.",
    )
    ssh_known_hosts_file: str | None = Field(
        None,
        min_length=1,
        description="known_hosts file to check the Spark's host key against. "
        "Unset: ~/.ssh/known_hosts.",
    )
    ssh_strict_host_key_checking: Literal["yes", "accept-new", "no"] = Field(
        "accept-new",
        description="Host key policy: `yes` (known keys only), `accept-new` (trust on first "
        "use), `no` (never check; throwaway test hosts only).",
    )
    allow_reboot: bool = Field(
        False,
        description="May the deploy reboot the Spark when a change needs it (drm override "
        "removed)? If false, the run finishes and reports the pending reboot per host.",
    )
    reboot_timeout: int = Field(
        900,
        ge=60,
        le=3600,
        description="Seconds to wait for the Spark to come back after a reboot.",
    )
    allow_non_gb10: bool = Field(
        False,
        description="Deploy to a host whose GPU is not an NVIDIA GB10. Only for hosts you "
        "know are fit; the GB10 profiles may not suit them.",
    )
    operator_user: str | None = Field(
        None,
        min_length=1,
        description="The Spark user who runs models: owns the model folder and the HF token. "
        "Unset: ssh_user.",
    )
    driver_branch: int = Field(
        580,
        ge=500,
        le=999,
        description="NVIDIA driver branch to hold with apt-mark (590 deadlocks CUDA graphs on "
        "GB10). A host without it installed is refused.",
    )
    hf_disable_xet: bool = Field(
        True,
        description="Set HF_HUB_DISABLE_XET=1 for login shells and engine units (Xet downloads "
        "fail on a Spark).",
    )
    prefer_ipv4: bool = Field(
        True,
        description="Prefer IPv4 in name resolution (/etc/gai.conf precedence), since the Hub's "
        "IPv6 endpoint is unreachable from a Spark.",
    )
    hf_cli_version: str = Field(
        "2.4.0",
        pattern=r"^\d+\.\d+(\.\d+)?$",
        description="huggingface_hub release whose `hf` command is installed in its own venv "
        "(/opt/spark-deploy/hf-cli) and linked as /usr/local/bin/hf.",
    )
    hf_endpoint: str | None = Field(
        None,
        pattern=r"^https?://[^\s]+$",
        description="Hub URL (HF_ENDPOINT) for a mirror. Unset: https://huggingface.co.",
    )
    hf_token_env: str = Field(
        "HF_TOKEN",
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="Environment variable on the laptop holding the HF token. When it is set, "
        "the token lands in the operator's ~/.cache/huggingface/token (0600).",
    )
    model_dir: str = Field(
        "/opt/models",
        description="Absolute path of the model folder; preflight reports its free disk.",
    )
    model_repo: str | None = Field(
        None,
        pattern=REPO_ID,
        description="Hub repository of the model to serve, downloaded into model_dir/<name> "
        "unless that folder is already complete. Unset: no download.",
    )
    model_revision: str = Field(
        "main", min_length=1, description="Branch, tag or commit of model_repo to download."
    )
    model_base_repo: str | None = Field(
        None,
        pattern=REPO_ID,
        description="Repository to fetch config.json / tokenizer.json from when the model's "
        "release omits them (the Mistral Small 4 NVFP4 release does).",
    )
    draft_model_repo: str | None = Field(
        None,
        pattern=REPO_ID,
        description="Speculative-decoding draft model (EAGLE) repository, downloaded beside the "
        "model. Unset: none.",
    )
    memory_guard_gb: int = Field(
        70,
        ge=1,
        le=128,
        description="MemAvailable (GB) the memory guard waits for before an engine starts.",
    )
    memory_guard_timeout: int = Field(
        300,
        ge=10,
        le=3600,
        description="Seconds the memory guard waits before it gives up (exit 1).",
    )

    @field_validator("model_dir")
    @classmethod
    def _absolute_path(cls, value: str) -> str:
        if not value.startswith("/"):
            raise ValueError("must be an absolute path, such as /opt/models")
        return posixpath.normpath(value)

    @property
    def user(self) -> str:
        """The operator user on the Spark (validated to be known)."""
        return self.operator_user or self.ssh_user or ""

    def model_folder(self, repo: str) -> str:
        """Where a repository is downloaded: model_dir/<repository name>."""
        return posixpath.join(self.model_dir, repo.split("/")[-1])


KNOWN_KEYS = tuple(SparkSettings.model_fields)


class InventoryError(Exception):
    """Every problem found in an inventory file, listed at once."""

    def __init__(self, path: str, problems: list[str]):
        self.path = path
        self.problems = problems
        lines = [f"Invalid inventory {path} ({len(problems)} problem(s)); no host was contacted:"]
        lines += [f"  - {problem}" for problem in problems]
        super().__init__("\n".join(lines))


class Inventory(BaseModel):
    """The validated inventory: Spark name -> settings, in file order."""

    model_config = ConfigDict(frozen=True)

    path: str
    sparks: dict[str, SparkSettings]

    def pyinfra_hosts(self) -> list[tuple[str, dict[str, Any]]]:
        """The hosts as pyinfra wants them: (name, host data) with the settings attached."""
        hosts = []
        for name, spark in self.sparks.items():
            data: dict[str, Any] = {
                "ssh_hostname": spark.ssh_host,
                "ssh_port": spark.ssh_port,
                "ssh_strict_host_key_checking": spark.ssh_strict_host_key_checking,
                "spark": spark,
            }
            optional = {
                "ssh_user": spark.ssh_user,
                "ssh_key": spark.ssh_key,
                "ssh_known_hosts_file": spark.ssh_known_hosts_file,
            }
            data.update({key: value for key, value in optional.items() if value is not None})
            hosts.append((name, data))
        return hosts


SECRET_KEYS = ("hf_token", "token", "huggingface_token")


def _valid_keys_hint(key: str) -> str:
    if key in SECRET_KEYS:
        return (
            "secrets never go in the inventory; export the token on the laptop "
            "(HF_TOKEN, or the variable named by hf_token_env)"
        )
    close = difflib.get_close_matches(key, KNOWN_KEYS, n=1)
    hint = f"did you mean '{close[0]}'? " if close else ""
    return f"unknown key; {hint}valid keys: {', '.join(KNOWN_KEYS)}"


def _describe(error: dict[str, Any]) -> str:
    """One pydantic error as a sentence that says what would be valid."""
    key = str(error["loc"][0]) if error["loc"] else ""
    kind = error["type"]
    if kind == "extra_forbidden":
        return _valid_keys_hint(key)
    if kind == "missing":
        return "required: " + SparkSettings.model_fields[key].description.split(".")[0]
    got = error.get("input")
    message = error["msg"]
    if message.startswith("Value error, "):
        message = message[len("Value error, ") :]
    return f"{message} (got {got!r})"


def _source_of(key: str, own: dict[str, Any], defaults: dict[str, Any]) -> str:
    return " (set under defaults:)" if key in defaults and key not in own else ""


def _check_mapping(path: str, where: str, value: Any, problems: list[str]) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        problems.append(f"{path}: {where}: must be a mapping of key: value (got {value!r})")
        return {}
    return value


def validate_inventory(raw: Any, path: str) -> Inventory:
    """
    Validate a parsed inventory document and return the settings of each Spark.

    Raises ``InventoryError`` listing every problem (file, host, key and what is valid).
    """
    problems: list[str] = []
    if not isinstance(raw, dict):
        raise InventoryError(path, [f"{path}: the file must be a mapping with `sparks:`"])

    for key in raw:
        if key not in ("sparks", "defaults"):
            problems.append(f"{path}: top-level key '{key}': unknown; valid: sparks, defaults")

    defaults = _check_mapping(path, "defaults", raw.get("defaults"), problems)
    for key in defaults:
        if key in PER_HOST_ONLY:
            problems.append(f"{path}: defaults.{key}: per-host only; set it under each Spark")
        elif key not in KNOWN_KEYS:
            problems.append(f"{path}: defaults.{key}: {_valid_keys_hint(key)}")
    defaults = {k: v for k, v in defaults.items() if k in KNOWN_KEYS and k not in PER_HOST_ONLY}

    sparks_raw = _check_mapping(path, "sparks", raw.get("sparks"), problems)
    if not sparks_raw and not problems:
        problems.append(f"{path}: sparks: list one or two Sparks (name: {{ssh_host: ...}})")
    if len(sparks_raw) > MAX_SPARKS:
        problems.append(
            f"{path}: sparks: {len(sparks_raw)} hosts given; this project prepares one Spark "
            f"or a pair ({MAX_SPARKS} at most)"
        )

    sparks: dict[str, SparkSettings] = {}
    for name, own in sparks_raw.items():
        where = f"{path}: host '{name}'"
        if not isinstance(name, str) or not HOST_NAME.match(name):
            problems.append(
                f"{where}: name must be lower-case letters, digits and '-' (like spark-1)"
            )
            continue
        own = _check_mapping(path, f"host '{name}'", own, problems)
        merged = {**defaults, **own}
        try:
            sparks[name] = SparkSettings(**merged)
        except ValidationError as error:
            for item in error.errors():
                key = str(item["loc"][0]) if item["loc"] else "?"
                problems.append(f"{where}, key '{key}'{_source_of(key, own, defaults)}: {_describe(item)}")

    for name, spark in sparks.items():
        if not spark.user:
            problems.append(
                f"{path}: host '{name}', key 'operator_user': required when ssh_user is unset "
                "(the Spark user who owns the models and the HF token)"
            )
        if spark.model_base_repo and not spark.model_repo:
            problems.append(
                f"{path}: host '{name}', key 'model_base_repo': only used with model_repo; "
                "set model_repo or remove it"
            )

    endpoints: dict[tuple[str, int], str] = {}
    for name, spark in sparks.items():
        endpoint = (spark.ssh_host, spark.ssh_port)
        if endpoint in endpoints:
            problems.append(
                f"{path}: host '{name}', key 'ssh_host': {spark.ssh_host}:{spark.ssh_port} is "
                f"also host '{endpoints[endpoint]}'; each Spark needs its own address"
            )
        endpoints[endpoint] = name

    if problems:
        raise InventoryError(path, problems)
    return Inventory(path=path, sparks=sparks)


def load_inventory(path: str) -> Inventory:
    """Read and validate the inventory YAML at ``path``."""
    file = Path(path)
    if not file.is_file():
        raise InventoryError(
            path,
            [
                f"{path}: file not found; copy inventory/sparks.example.yml to "
                "inventory/sparks.yml and fill it in, or point SPARK_INVENTORY at your file"
            ],
        )
    try:
        raw = yaml.safe_load(file.read_text(encoding="utf-8"))
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else path
        problem = getattr(error, "problem", None) or str(error)
        raise InventoryError(path, [f"{where}: not valid YAML: {problem}"]) from None
    return validate_inventory(raw, path)
