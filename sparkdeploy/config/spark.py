"""
The settings of one Spark, as the inventory gives them: every key, its type, default and
meaning declared once (the field descriptions are the user documentation, rendered into
docs/inventory.md by ``python -m tools.docs``), validated strictly and frozen.
"""

from __future__ import annotations

import ipaddress
import posixpath
import re
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from sparkdeploy.config.engine import EngineSettings
from sparkdeploy.config.gpu_services import GpuService
from sparkdeploy.config.jsondata import PyinfraJson
from sparkdeploy.config.trust import HfTokenVariable, ModelDir, same_folder_problem
from sparkdeploy.config.values import (
    AbsolutePath,
    HostName,
    HubUrl,
    RepoId,
    Revision,
    Text,
    UserName,
    ipv4_network_ok,
)

NETDEV_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,14}")
# The port of a ConnectX-7 interface name: enp1s0f0np0 -> 0, enP2p1s0f1np1 -> 1.
CX7_PORT = re.compile(r"np([01])$")
# A size as nccl-tests' -b/-e take it: a number with K, M or G for powers of 1024
# (NVIDIA/nccl-tests src/common.cu parsesize).
SIZE = re.compile(r"(?P<number>[0-9]{1,12})(?P<unit>[KMG]?)")
SIZE_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}


# Addresses no host may have on a rail (RFC 6890): "this network" 0.0.0.0/8, loopback,
# multicast 224.0.0.0/4, reserved 240.0.0.0/4 with the limited broadcast 255.255.255.255.
NOT_UNICAST = tuple(
    ipaddress.IPv4Network(net) for net in ("0.0.0.0/8", "127.0.0.0/8", "224.0.0.0/4", "240.0.0.0/4")
)


def unicast_host(ip: ipaddress.IPv4Address) -> bool:
    """Whether ``ip`` can be a host's own address on a rail."""
    return not any(ip in network for network in NOT_UNICAST)


def size_bytes(size: str) -> int:
    """A size as nccl-tests writes it, in bytes: 16G is 17179869184."""
    match = SIZE.fullmatch(size)
    if match is None:
        raise ValueError(f"not a size: {size!r}")
    return int(match["number"]) * SIZE_UNITS[match["unit"]]


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
    port: Literal[0, 1] | None = Field(
        None,
        description="The physical QSFP port the interface belongs to, in a ring only: 0 (next "
        "to the RJ45 port) or 1. Unset: read from the ConnectX-7 name, `...np0` or `...np1` "
        "(each port has two logical interfaces: enp1s0f0np0 and enP2p1s0f0np0 are port 0).",
    )

    @field_validator("interface")
    @classmethod
    def _netdev(cls, value: str) -> str:
        if not NETDEV_NAME.fullmatch(value) or value == "lo":
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
        if not unicast_host(address.ip):
            raise ValueError(
                "must be a unicast host address (not loopback 127/8, this-network 0/8, "
                f"multicast 224/4, reserved 240/4 or broadcast 255.255.255.255), {example}"
            )
        if not ipv4_network_ok(network):
            raise ValueError(
                f"prefix /{network.prefixlen} is not a rail subnet: give /16 to /31, {example}"
            )
        if network.prefixlen < 31 and address.ip in (
            network.network_address,
            network.broadcast_address,
        ):
            raise ValueError(f"is the network or broadcast address of {network}; {example}")
        return str(address)

    @property
    def ip(self) -> str:
        return str(ipaddress.IPv4Interface(self.address).ip)

    @property
    def cx7_port(self) -> int | None:
        """The QSFP port of the interface: ``port`` when given, else the ConnectX-7 name's
        ``np<N>`` suffix (NVIDIA connect-three-sparks: ``enp1s0f0np0``/``enP2p1s0f0np0`` on
        Port0, ``enp1s0f1np1``/``enP2p1s0f1np1`` on Port1); None when neither says."""
        if self.port is not None:
            return self.port
        match = CX7_PORT.search(self.interface)
        return int(match[1]) if match else None

    @property
    def network(self) -> ipaddress.IPv4Network:
        return ipaddress.IPv4Interface(self.address).network


class SparkSettings(PyinfraJson, BaseModel):
    """The validated settings of one Spark. Field descriptions are the user documentation."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    ssh_host: HostName = Field(
        description="Address or DNS name the laptop reaches the Spark's SSH server at. "
        "Required, per host only.",
    )
    ssh_port: int = Field(22, ge=1, le=65535, description="SSH port of the Spark.")
    ssh_user: UserName | None = Field(
        None,
        description="SSH login; it needs sudo. It is also the operator when operator_user is "
        "unset, so it must be a plain user name. Unset: your ~/.ssh/config or local user name.",
    )
    ssh_key: Text | None = Field(
        None,
        min_length=1,
        description="Private key file for SSH. Unset: the SSH agent and ~/.ssh keys.",
    )
    ssh_known_hosts_file: Text | None = Field(
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
    operator_user: UserName | None = Field(
        None,
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
    hf_endpoint_allow_http: bool = Field(
        False,
        description="Accept an http:// hf_endpoint. The hf client sends the HF token to the "
        "endpoint, so over http it travels in clear text: only for a mirror on a trusted "
        "network.",
    )
    hf_endpoint: HubUrl | None = Field(
        None,
        description="Hub URL (HF_ENDPOINT) for a mirror, https. Unset: https://huggingface.co.",
    )
    hf_token_env: HfTokenVariable = Field(
        "HF_TOKEN",
        description="Environment variable on the laptop holding the HF token. When it is set, "
        "the token lands in the operator's ~/.cache/huggingface/token (0600).",
    )
    fetch_timeout: int = Field(
        21600,
        ge=60,
        le=7 * 86400,
        description="Seconds the deploy waits for the engine image and model downloads, which "
        "run on the Spark as spark-fetch@ jobs. They go on after it; the next run attaches "
        "to them.",
    )
    model_dir: ModelDir = Field(
        "/opt/models",
        description="Absolute path of the folder the models go in (not a system tree such as "
        "/usr or /etc); preflight reports its free disk.",
    )
    model_repo: RepoId | None = Field(
        None,
        description="Hub repository of the model to serve, downloaded into model_dir/<name> "
        "unless that folder is already complete. Unset: no download.",
    )
    model_revision: Revision = Field(
        "main", description="Branch, tag or commit of model_repo to download."
    )
    model_base_repo: RepoId | None = Field(
        None,
        description="Repository to fetch config.json / tokenizer.json from when the model's "
        "release omits them (the Mistral Small 4 NVFP4 release does).",
    )
    draft_model_repo: RepoId | None = Field(
        None,
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
        "`{name: sglang|vllm, image, args, env, port, bind, ...}` (see Engine keys). Unset: none.",
    )
    gpu_services: list[GpuService] = Field(
        default_factory=list,
        description="GPU services that take turns with the engine for the GPU and the unified "
        "memory (a TTS model, an image generator): `{name, image, command, port, memory_gb, "
        "health}` each (see GPU service keys). Each gets a unit spark-gpu-NAME.service that "
        "conflicts with the engine and the others; the engine holds the GPU after a deploy, "
        "`sudo spark-gpu-switch NAME` (allowed to operator_user) hands it over.",
    )
    qsfp_topology: Literal["auto", "ring"] = Field(
        "auto",
        description="How the Sparks' QSFP ports are cabled. `auto`: a pair cabled rail to rail, "
        "or three to eight Sparks through a switch. `ring`: three or four Sparks cabled to "
        "each other without a switch, port 0 of each Spark to port 1 of the next in inventory "
        "order and the last back to the first (NVIDIA's connect-three-sparks playbook; four "
        "as eugr's four-node ring): each Spark lists the interfaces of both ports, the two "
        "ends of each cable share its subnet (one per cable, or one per logical interface "
        "pair), and the engines meet on the management network (management_address). The "
        "same on every Spark: set it under defaults.",
    )
    qsfp: list[QsfpInterface] = Field(
        default_factory=list,
        description="The Spark's QSFP interfaces, one entry per rail: "
        "`{interface, address (CIDR), mtu (9000), ipv6 (false)}`. A pair: rail N of one Spark "
        "is cabled to rail N of the other. Three to eight Sparks: every Spark's rail N is on "
        "the switch in one subnet (the switch ports must allow jumbo frames). Each rail of a "
        "Spark has its own subnet. Empty: the network is left alone.",
    )
    management_interface: str = Field(
        "enP7s7",
        description="In a ring: the Spark's management (RJ45) interface, where the engines' "
        "rendezvous, NCCL's bootstrap and Gloo run, since not every Spark of a ring shares a "
        "cable with every other (NVIDIA's cluster script and three-Spark NCCL test use "
        "enP7s7). Unused otherwise.",
    )
    management_address: str = Field(
        "",
        description="In a ring: the IPv4 address the other Sparks reach this Spark at on its "
        "management interface. Unset: ssh_host, when that is an IPv4 address other than "
        "loopback. Unused otherwise.",
    )
    qsfp_proof: Literal["head", "all"] = Field(
        "head",
        description="Which jumbo paths the QSFP proof pings (full-size, don't fragment) on "
        "every rail: `head`, this Spark to the head (the head to every other Spark; a pair "
        "pings each other either way); `all`, this Spark to every other Spark, which finds "
        "a bad switch port between two non-head Sparks at the cost of N-1 pings per rail. "
        "Default `head`: the paths the engines' rendezvous and the copies from the head use, "
        "as NVIDIA's switch playbook checks them (multi-sparks-through-switch).",
    )
    qsfp_netplan: Literal["take_over", "refuse"] = Field(
        "take_over",
        description="A netplan file that configures a listed QSFP interface (NVIDIA's "
        "playbook writes /etc/netplan/40-cx7.yaml, which DGX OS renders to NetworkManager "
        "profiles netplan-<interface> that fight the deploy's qsfp-<interface>): `take_over` "
        "moves the file to /var/lib/spark-deploy/netplan-backup and removes the profiles it "
        "rendered, without `netplan apply`, and says so; `refuse` stops with the exact fix. "
        "Either way a file that also configures another interface is refused. Default "
        "`take_over`: the playbook's file configures only the QSFP ports, with the "
        "addresses the inventory lists again.",
    )
    roce_gid_index: Annotated[int, Field(ge=0)] | Literal["auto"] = Field(
        3,
        description="RoCE GID index the RoCE v2 entry of each QSFP address must have (what "
        "NCCL_IB_GID_INDEX gets), or `auto` to use whatever index it has.",
    )
    sysfs_root: AbsolutePath = Field(
        "/sys",
        description="Where sysfs is mounted; the RoCE GID tables are read under "
        "<sysfs_root>/class/infiniband, the rails' link speed at "
        "<sysfs_root>/class/net/<interface>/speed.",
    )
    link_test_min_busbw: float = Field(
        21.875,
        gt=0,
        allow_inf_nan=False,  # .inf could never be reached, .nan never compared
        description="Link test (linktest.py): the all-gather bus bandwidth (GB/s, as nccl-tests "
        "computes it) at the largest size below which the test fails. 21.875 GB/s (175 Gb/s) is "
        "`MIN_NCCL_TEST_BW` of NVIDIA's cluster script (dgx-spark-playbooks "
        "spark_cluster_setup.py, all_gather_perf at 16G); unset in a ring, 10 GB/s, its "
        "`MIN_NCCL_TEST_BW_RING`.",
    )
    link_test_sizes: list[str] = Field(
        default_factory=lambda: ["1M", "16M", "256M", "1G", "4G", "16G"],
        min_length=1,
        description="Link test: the sizes timed, as nccl-tests writes them (K, M, G: powers of "
        "1024); the largest is the one judged. 16G is NVIDIA's cluster script's "
        "(`all_gather_perf -b 16G -e 16G`).",
    )
    link_test_memory_floor_gb: int = Field(
        8,
        ge=1,
        le=64,
        description="Link test: a size whose buffers (S + S/n bytes on each Spark, unified "
        "memory) would leave MemAvailable under this many GiB is skipped on every Spark, and "
        "the verdict says it was sized down. 8 GiB is the floor Spark users' MemAvailable "
        "watchdogs keep (field notes 2026-11, section 5).",
    )
    link_test_port: int = Field(
        29500,
        ge=1024,
        le=65535,
        description="Link test: the rendezvous port on the head's fabric address "
        "(MASTER_PORT). 29500 is torch.distributed's default; the engines rendezvous "
        "elsewhere (SGLang 20000 in profiles.yaml, vLLM --master-port 29501, Ray 6379).",
    )
    link_test_timeout: int = Field(
        900,
        ge=60,
        le=7200,
        description="Link test: seconds one run may take on a Spark, rendezvous included, "
        "before it is stopped.",
    )
    link_test_before_start: bool = Field(
        False,
        description="Run the link test once before the engine units of a pair or cluster are "
        "first started (no engine unit of any of its Sparks ever active); the deploy stops "
        "when it fails. Every Spark of the pair or cluster must set the same.",
    )

    mcp_server: bool = Field(
        False,
        description="Run the read-only MCP server for local coding agents on the Spark "
        "(spark-mcp.service, its own unprivileged user spark-mcp, bound to 127.0.0.1:mcp_port): "
        "tools status, diagnose, explain_rule and check_command. Each request carries the bearer "
        "token made on the Spark (/etc/spark-deploy/mcp/token), of which the operator gets a copy "
        "in ~/.config/spark-deploy/mcp-token. See docs/mcp.md. Turning it off stops it and "
        "removes its files and the token; the user stays.",
    )
    mcp_port: int = Field(
        8765,
        validate_default=True,  # the default, too, must be free
        ge=1024,
        le=65535,
        description="Port of the MCP server on 127.0.0.1 (Streamable HTTP at /mcp).",
    )
    mcp_sdk_version: str = Field(
        "2.3.0",
        pattern=r"^\d+\.\d+(\.\d+)?$",
        description="Release of the `mcp` Python SDK installed in the MCP server's own venv "
        "(/opt/spark-deploy/mcp/venv), with the pydantic, PyYAML and packaging releases the "
        "laptop runs; the server is written for the 2.x API.",
    )

    @field_validator("hf_endpoint")
    @classmethod
    def _clear_text_token(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value and value.startswith("http:") and not info.data.get("hf_endpoint_allow_http"):
            raise ValueError(
                "is http: the hf client would send the HF token in clear text; use https, or "
                "set hf_endpoint_allow_http: true for a mirror on a trusted network"
            )
        return value

    @property
    def user(self) -> str:
        """The operator user on the Spark (validated to be known)."""
        return self.operator_user or self.ssh_user or ""

    def model_folder(self, repo: str) -> str:
        """Where a repository is downloaded: model_dir/<repository name>."""
        return posixpath.join(self.model_dir, repo.split("/")[-1])

    def model_folders(self) -> list[tuple[str, str, bool]]:
        """(folder, "repo@revision", needs tokenizer.json) for each model the Spark has:
        the model, and the draft model (EAGLE) beside it."""
        folders = []
        if self.model_repo:
            want = f"{self.model_repo}@{self.model_revision}"
            folders.append((self.model_folder(self.model_repo), want, True))
        if self.draft_model_repo:
            folders.append(
                (self.model_folder(self.draft_model_repo), f"{self.draft_model_repo}@main", False)
            )
        return folders

    @field_validator("draft_model_repo")
    @classmethod
    def _own_folder(cls, value: str | None, info: ValidationInfo) -> str | None:
        """The draft model's folder is not the model's (both are model_dir/<repo name>)."""
        model = info.data.get("model_repo")
        problem = (
            value
            and model
            and same_folder_problem({"model_repo": model, "draft_model_repo": value})
        )
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("engine")
    @classmethod
    def _key_is_not_the_token(
        cls, engine: EngineSettings | None, info: ValidationInfo
    ) -> EngineSettings | None:
        """engine.api_key_env is not hf_token_env: the API key would be the HF token, stored
        where the engine reads it and sent by every client (sparkdeploy/config/trust.py)."""
        token_env = info.data.get("hf_token_env")
        if engine is not None and token_env and engine.api_key_env == token_env:
            raise ValueError(
                f"engine.api_key_env {token_env} is also hf_token_env: the API key would be the "
                "HF token. Give the API key a variable of its own, such as SPARK_API_KEY"
            )
        return engine

    @field_validator("link_test_sizes")
    @classmethod
    def _link_test_sizes(cls, sizes: list[str]) -> list[str]:
        for size in sizes:
            if not SIZE.fullmatch(size) or size_bytes(size) == 0:
                raise ValueError(
                    f"{size!r} is not a size as nccl-tests writes it, such as 64K, 256M or 16G"
                )
        return sizes

    @property
    def link_test_size_bytes(self) -> list[int]:
        """The link test's sizes in bytes, smallest first, each once."""
        return sorted({size_bytes(size) for size in self.link_test_sizes})

    @field_validator("roce_gid_index", mode="wrap")
    @classmethod
    def _gid_index(cls, value: Any, handler) -> int | str:
        try:
            return handler(value)
        except ValidationError:
            raise ValueError("must be a GID index (0 or more) or auto") from None

    @field_validator("gpu_services")
    @classmethod
    def _services_apart(cls, services: list[GpuService], info: ValidationInfo) -> list[GpuService]:
        """Each service has its own name and port, and none takes the engine's port."""
        engine = info.data.get("engine")
        taken: dict[int, str] = {engine.port: "the engine"} if engine is not None else {}
        names: set[str] = set()
        for service in services:
            if service.name in names:
                raise ValueError(f"two services are named {service.name}")
            names.add(service.name)
            if service.port in taken:
                raise ValueError(
                    f"{service.name} answers on port {service.port}, as {taken[service.port]} "
                    "does: give each its own port"
                )
            taken[service.port] = service.name
        return services

    @field_validator("mcp_port")
    @classmethod
    def _mcp_port_free(cls, port: int, info: ValidationInfo) -> int:
        """The MCP server takes a port no engine, GPU service or link test answers on."""
        engine = info.data.get("engine")
        taken = {engine.port: "the engine"} if engine is not None else {}
        taken |= {service.port: service.name for service in info.data.get("gpu_services") or []}
        taken[info.data.get("link_test_port", 0)] = "the link test (link_test_port)"
        if port in taken:
            raise ValueError(f"port {port} is {taken[port]}'s: give the MCP server another")
        return port

    @field_validator("qsfp")
    @classmethod
    def _rails_apart(cls, rails: list[QsfpInterface], info: ValidationInfo) -> list[QsfpInterface]:
        ring = info.data.get("qsfp_topology") == "ring"
        for i, rail in enumerate(rails):
            for other in rails[:i]:
                if rail.interface == other.interface:
                    raise ValueError(f"interface {rail.interface} is listed twice")
                one_port = ring and rail.cx7_port is not None and rail.cx7_port == other.cx7_port
                if rail.network.overlaps(other.network) and not (
                    one_port and rail.network == other.network
                ):
                    raise ValueError(
                        f"{other.interface} ({other.address}) and {rail.interface} "
                        f"({rail.address}) share a subnet; give each rail its own, such as "
                        "192.168.100.0/24 and 192.168.101.0/24"
                        + (
                            " (in a ring only the two interfaces of one port may share "
                            "their cable's subnet)"
                            if ring
                            else ""
                        )
                    )
        return rails

    @field_validator("management_interface")
    @classmethod
    def _management_netdev(cls, value: str) -> str:
        if not NETDEV_NAME.fullmatch(value) or value == "lo":
            raise ValueError("must be a network interface name (not lo), such as enP7s7")
        return value

    @field_validator("management_address")
    @classmethod
    def _management_ip(cls, value: str) -> str:
        if not value:
            return value
        try:
            address = ipaddress.IPv4Address(value)
        except ValueError:
            raise ValueError("must be an IPv4 address, such as 192.168.1.50") from None
        if not unicast_host(address):
            raise ValueError("must be a unicast host address (not loopback or multicast)")
        return value

    @property
    def meeting_address(self) -> str:
        """The address the other Sparks of a ring reach this one at: management_address,
        else ssh_host when it is a unicast IPv4 address; "" when neither is."""
        if self.management_address:
            return self.management_address
        try:
            address = ipaddress.IPv4Address(self.ssh_host)
        except ValueError:
            return ""
        return self.ssh_host if unicast_host(address) else ""
