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
import ipaddress
import posixpath
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from operations.engines.plan import EnginePlan, plan_sparks
from operations.engines.settings import EngineSettings
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
)

# Fixed paths on a Spark (not settings: DGX OS decides them).
DRM_OVERRIDE_CONF = "/etc/modprobe.d/zz-nvidia-drm-override.conf"
RUN_DIR = "/run/spark-deploy"  # tmpfs: whatever is here is gone after a reboot
REBOOT_PENDING = f"{RUN_DIR}/reboot-pending"
BOOT_MARKER = f"{RUN_DIR}/boot-marker"
ENGINE_ENV = "/etc/spark-deploy/nccl.env"  # what multi-node engines source (NCCL, Gloo, Ray)
QSFP_PROFILE_PREFIX = "qsfp-"  # NetworkManager profile of a QSFP interface: qsfp-<interface>

HF_CLI_VENV = "/opt/spark-deploy/hf-cli"
HF_ENV_FILE = "/etc/spark-deploy/hf.env"  # EnvironmentFile= for engine units
HF_PROFILE = "/etc/profile.d/spark-deploy-hf.sh"  # login shells
GAI_CONF = "/etc/gai.conf"
MEMORY_GUARD = "/usr/local/sbin/spark-memory-guard"
MEMORY_GUARD_ENV = "/etc/spark-deploy/memory-guard.env"
DROP_CACHES = "/usr/local/sbin/spark-drop-caches"
ENGINE_HEALTH = "/usr/local/sbin/spark-engine-health"
MODEL_CHECK_BIN = "/usr/local/sbin/spark-model-check"
RAY_WAIT = "/usr/local/sbin/spark-ray-wait"
ENGINE_UNIT_GLOB = "/etc/systemd/system/spark-engine-*.service"
ENGINE_ENV_FILE = "/etc/spark-deploy/{name}.env"  # the container's --env-file
# sudo skips files in sudoers.d whose names contain a dot: the staged copy never goes live.
ENGINE_SUDOERS = "/etc/sudoers.d/spark-deploy-{name}"
ENGINE_SUDOERS_GLOB = "/etc/sudoers.d/spark-deploy-*"
# engine.alerts: Prometheus alert rules and scrape config, beside the engine on its Spark.
PROMETHEUS_DIR = "/etc/spark-deploy/prometheus"
PROMETHEUS_RULES = PROMETHEUS_DIR + "/{name}.rules.yml"
PROMETHEUS_SCRAPE = PROMETHEUS_DIR + "/{name}.scrape.yml"
PROMETHEUS_GLOB = PROMETHEUS_DIR + "/spark-engine-*.yml"
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
    ENGINE_HEALTH,
    MODEL_CHECK_BIN,
    RAY_WAIT,
    *(OOM_DROP_IN.format(unit=unit) for unit in OOM_PROTECTED_UNITS),
)
REPO_ID = r"^[A-Za-z0-9][\w.-]*/[\w.-]+$"

MAX_SPARKS = 2
HOST_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
PER_HOST_ONLY = ("ssh_host",)


NETDEV_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,14}$")


class QsfpInterface(BaseModel):
    """One QSFP interface (one rail of the 400G cable) of a Spark."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    interface: str = Field(
        description="Network interface of the rail, such as enp1s0f0np0 or enP2p1s0f0np0."
    )
    address: str = Field(
        description="Static IPv4 address with prefix length (CIDR), such as 192.168.100.1/24."
    )
    mtu: int = Field(9000, ge=1280, le=9978, description="MTU of the rail (jumbo frames).")
    ipv6: bool = Field(False, description="IPv6 link-local addresses on the rail.")

    @field_validator("interface")
    @classmethod
    def _netdev(cls, value: str) -> str:
        if not NETDEV_NAME.match(value) or value == "lo":
            raise ValueError(
                "must be a network interface name (up to 15 letters, digits, '.', '-', '_'; "
                "not lo), such as enp1s0f0np0"
            )
        return value

    @field_validator("address")
    @classmethod
    def _cidr(cls, value: str) -> str:
        example = "such as 192.168.100.1/24"
        if "/" not in value:
            raise ValueError(f"must give the prefix length too, {example}")
        try:
            address = ipaddress.IPv4Interface(value)
        except ValueError:
            raise ValueError(f"must be an IPv4 address with prefix length, {example}") from None
        network = address.network
        if address.ip.is_loopback or address.ip.is_multicast or address.ip.is_unspecified:
            raise ValueError(f"must be a unicast host address, {example}")
        if network.prefixlen < 31 and address.ip in (network.network_address,
                                                      network.broadcast_address):
            raise ValueError(f"is the network or broadcast address of {network}; {example}")
        return str(address)

    @property
    def ip(self) -> str:
        return str(ipaddress.IPv4Interface(self.address).ip)

    @property
    def network(self) -> ipaddress.IPv4Network:
        return ipaddress.IPv4Interface(self.address).network


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
        pattern=r"^[a-z_][a-z0-9_-]{0,31}$",
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
        description="MemAvailable (GiB, as `free -g` counts) the memory guard waits for before an "
        "engine starts.",
    )
    memory_guard_timeout: int = Field(
        300,
        ge=10,
        le=3600,
        description="Seconds the memory guard waits before it gives up (exit 1).",
    )

    engine: EngineSettings | None = Field(
        None,
        description="The inference engine this Spark serves its model with, as a systemd unit: "
        "`{name: sglang|vllm, image, args, env, port, bind, ...}` (see Engines). Unset: none.",
    )
    qsfp: list[QsfpInterface] = Field(
        default_factory=list,
        description="The Spark's QSFP interfaces, one entry per rail of the cable to its peer: "
        "`{interface, address (CIDR), mtu (9000), ipv6 (false)}`. Rail N of one Spark is "
        "cabled to rail N of the other; each rail has its own subnet. Empty: the network is "
        "left alone.",
    )
    roce_gid_index: Annotated[int, Field(ge=0)] | Literal["auto"] = Field(
        3,
        description="RoCE GID index the RoCE v2 entry of each QSFP address must have (what "
        "NCCL_IB_GID_INDEX gets), or `auto` to use whatever index it has.",
    )
    sysfs_root: str = Field(
        "/sys",
        description="Where sysfs is mounted; the RoCE GID tables are read under "
        "<sysfs_root>/class/infiniband.",
    )

    @field_validator("model_dir", "sysfs_root")
    @classmethod
    def _absolute_path(cls, value: str, info: ValidationInfo) -> str:
        if not value.startswith("/"):
            example = cls.model_fields[info.field_name].default
            raise ValueError(f"must be an absolute path, such as {example}")
        return posixpath.normpath(value)

    @property
    def user(self) -> str:
        """The operator user on the Spark (validated to be known)."""
        return self.operator_user or self.ssh_user or ""

    def model_folder(self, repo: str) -> str:
        """Where a repository is downloaded: model_dir/<repository name>."""
        return posixpath.join(self.model_dir, repo.split("/")[-1])

    @field_validator("roce_gid_index", mode="wrap")
    @classmethod
    def _gid_index(cls, value: Any, handler) -> int | str:
        try:
            return handler(value)
        except ValidationError:
            raise ValueError("must be a GID index (0 or more) or auto") from None

    @field_validator("qsfp")
    @classmethod
    def _rails_apart(cls, rails: list[QsfpInterface]) -> list[QsfpInterface]:
        for i, rail in enumerate(rails):
            for other in rails[:i]:
                if rail.interface == other.interface:
                    raise ValueError(f"interface {rail.interface} is listed twice")
                if rail.network.overlaps(other.network):
                    raise ValueError(
                        f"{other.interface} ({other.address}) and {rail.interface} "
                        f"({rail.address}) share a subnet; give each rail its own, such as "
                        "192.168.100.0/24 and 192.168.101.0/24"
                    )
        return rails


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

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    path: str
    sparks: dict[str, SparkSettings]
    engine_plans: dict[str, EnginePlan] = {}
    warnings: list[str] = []

    def pyinfra_hosts(self) -> list[tuple[str, dict[str, Any]]]:
        """The hosts as pyinfra wants them: (name, host data) with the settings attached."""
        hosts = []
        for name, spark in self.sparks.items():
            data: dict[str, Any] = {
                "ssh_hostname": spark.ssh_host,
                "ssh_port": spark.ssh_port,
                "ssh_strict_host_key_checking": spark.ssh_strict_host_key_checking,
                "spark": spark,
                "engine_plan": self.engine_plans.get(name),
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


def _valid_keys_hint(key: str, known: tuple[str, ...] = KNOWN_KEYS) -> str:
    if key in SECRET_KEYS:
        return (
            "secrets never go in the inventory; export the token on the laptop "
            "(HF_TOKEN, or the variable named by hf_token_env)"
        )
    close = difflib.get_close_matches(key, known, n=1)
    hint = f"did you mean '{close[0]}'? " if close else ""
    return f"unknown key; {hint}valid keys: {', '.join(known)}"


def _where(loc: tuple) -> str:
    """("qsfp", 0, "address") -> "key 'qsfp', rail 1, 'address'" (rails count from 1)."""
    parts = [f"key '{loc[0]}'" if loc else "key '?'"]
    for part in loc[1:]:
        parts.append(f"rail {part + 1}" if isinstance(part, int) else f"'{part}'")
    return ", ".join(parts)


def _describe(error: dict[str, Any]) -> str:
    """One pydantic error as a sentence that says what would be valid."""
    loc = error["loc"]
    nested_models = {"qsfp": (QsfpInterface, 3), "engine": (EngineSettings, 2)}
    model, depth = nested_models.get(loc[0] if loc else "", (SparkSettings, 1))
    nested = len(loc) >= depth > 1
    model = model if nested else SparkSettings
    key = str(loc[-1] if nested else loc[0]) if loc else ""
    kind = error["type"]
    if kind == "extra_forbidden":
        return _valid_keys_hint(key, tuple(model.model_fields))
    if kind == "missing":
        return "required: " + model.model_fields[key].description.split(".")[0]
    got = error.get("input")
    message = error["msg"]
    if message.startswith("Value error, "):
        message = message[len("Value error, ") :]
    if isinstance(got, (list, dict)):  # a whole list of rails: the message names the rails
        return message
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
                problems.append(
                    f"{where}, {_where(item['loc'])}{_source_of(key, own, defaults)}: "
                    f"{_describe(item)}"
                )

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
    problems += _rail_problems(path, sparks)
    plans, engine_problems, warnings = plan_sparks(sparks)
    problems += [f"{path}: {problem}" for problem in engine_problems]

    if problems:
        raise InventoryError(path, problems)
    return Inventory(
        path=path,
        sparks=sparks,
        engine_plans=plans,
        warnings=[f"{path}: {warning}" for warning in warnings],
    )


def _rail_problems(path: str, sparks: dict[str, SparkSettings]) -> list[str]:
    """The QSFP address plan of a pair: rail N of one Spark is cabled to rail N of the
    other, so both ends share one subnet, and no address is used twice."""
    if len(sparks) != 2:
        return []
    (first, one), (second, two) = sparks.items()
    where = f"{path}: host '{second}', key 'qsfp'"
    if len(one.qsfp) != len(two.qsfp):
        return [
            f"{where}: {len(two.qsfp)} rail(s), but host '{first}' has {len(one.qsfp)}; rail N "
            "of one Spark is cabled to rail N of the other, so list the same number of rails "
            "on both (or none on either)"
        ]
    problems = []
    addresses = {rail.ip: number for number, rail in enumerate(one.qsfp, start=1)}
    for number, (a, b) in enumerate(zip(one.qsfp, two.qsfp), start=1):
        if b.ip in addresses:
            problems.append(
                f"{where}, rail {number}, 'address': {b.ip} is also the address of host "
                f"'{first}' on rail {addresses[b.ip]}; each Spark needs its own address"
            )
        elif a.network != b.network:
            problems.append(
                f"{where}, rail {number}, 'address': {b.address} is not in {a.network}, the "
                f"subnet of rail {number} on host '{first}' ({a.address}); both ends of a rail "
                "share one subnet"
            )
    return problems


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
