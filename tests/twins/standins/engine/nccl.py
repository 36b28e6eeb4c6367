"""NCCL's choice of network in a Spark twin's container (stand-in). Standard library only.

A twin has no RDMA hardware, so which network NCCL would use is decided from what the
container was given, as the docker stand-in (./docker) passes it to the container process:

    SPARK_TWIN_DEVICES     colon-separated container paths given with --device
    SPARK_TWIN_ULIMITS     comma-separated name=soft:hard given with --ulimit
    SPARK_TWIN_CAPS        comma-separated --cap-add values
    SPARK_TWIN_PRIVILEGED  1 with --privileged (every device, every capability)

NCCL uses RDMA ("IB": its IB transport, RoCE included) when the container can open the RDMA
devices (/dev/infiniband, or a uverbs device under it) and may pin memory for them (memlock
unlimited, or CAP_IPC_LOCK, which --privileged includes); otherwise it runs over TCP sockets.
Real NCCL without the devices logs "Call to ibv_open_device failed" and "NET/IB : No device
found." and falls back (NVIDIA/nccl#451); with the devices but a memlock limit, its memory
registration fails ("ibv_reg_mr_iova2 failed with error Cannot allocate memory") once it
connects. The stand-in gives both as a socket fallback with that reason, so the health check
and the link test see the network they would have to refuse.

    transport(environ)            -> ("IB", "[0]rocep1s0f0:1/RoCE [1]...") or ("Socket", why)
    init_lines(environ, host)     -> NCCL's INFO/WARN lines for that choice, as NCCL_DEBUG and
                                     NCCL_DEBUG_SUBSYS let NCCL print them
"""

from __future__ import annotations

import fcntl
import os
import socket
import struct
from collections.abc import Mapping

RDMA_DIR = "/dev/infiniband"
DEFAULT_HCA = "rocep1s0f0"  # the first RoCE device of a Spark (ibdev2netdev, NVIDIA playbook)
SIOCGIFADDR = 0x8915  # linux/sockios.h
# The subsystems NCCL's init lines are logged under (INFO(NCCL_INIT|NCCL_NET, ...)); NCCL's
# default NCCL_DEBUG_SUBSYS is INIT,BOOTSTRAP,ENV (NCCL docs, NCCL_DEBUG_SUBSYS).
LINE_SUBSYSTEMS = frozenset({"INIT", "NET"})
DEFAULT_SUBSYSTEMS = "INIT,BOOTSTRAP,ENV"
LEVELS = ("VERSION", "WARN", "INFO", "ABORT", "TRACE")


def _items(text: str, separator: str) -> list[str]:
    return [item.strip() for item in text.split(separator) if item.strip()]


def rdma_devices(environ: Mapping[str, str]) -> bool:
    """Whether the container can open the RDMA devices."""
    if environ.get("SPARK_TWIN_PRIVILEGED") == "1":
        return True
    return any(
        path.rstrip("/") == RDMA_DIR or path.startswith(f"{RDMA_DIR}/uverbs")
        for path in _items(environ.get("SPARK_TWIN_DEVICES", ""), ":")
    )


def memlock_unlimited(environ: Mapping[str, str]) -> bool:
    """Whether the container may pin as much memory as RDMA registration needs."""
    if environ.get("SPARK_TWIN_PRIVILEGED") == "1":
        return True
    if "IPC_LOCK" in {
        cap.upper().removeprefix("CAP_") for cap in _items(environ.get("SPARK_TWIN_CAPS", ""), ",")
    }:
        return True
    for item in _items(environ.get("SPARK_TWIN_ULIMITS", ""), ","):
        name, _, limits = item.partition("=")
        soft, _, hard = limits.partition(":")
        if name == "memlock" and soft == "-1" and (hard or soft) == "-1":
            return True
    return False


def hcas(environ: Mapping[str, str]) -> list[str]:
    """The RDMA devices NCCL would use: NCCL_IB_HCA's (without ports or ^/= marks)."""
    names = [
        item.lstrip("=^").split(":")[0] for item in _items(environ.get("NCCL_IB_HCA", ""), ",")
    ]
    return [name for name in names if name] or [DEFAULT_HCA]


def interface(environ: Mapping[str, str]) -> str:
    """The interface NCCL_SOCKET_IFNAME names (its first, without the =/^ marks)."""
    names = _items(environ.get("NCCL_SOCKET_IFNAME", ""), ",")
    return names[0].lstrip("=^") if names else "eth0"


def interface_address(name: str, environ: Mapping[str, str]) -> str:
    """The IPv4 address of ``name`` in this network namespace (the twin's, with host network),
    else the engine's pinned host address."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            packed = struct.pack("256s", name.encode()[:15])
            return socket.inet_ntoa(fcntl.ioctl(probe.fileno(), SIOCGIFADDR, packed)[20:24])
    except OSError:
        return environ.get("SGLANG_HOST_IP") or environ.get("VLLM_HOST_IP") or "127.0.0.1"


def transport(environ: Mapping[str, str]) -> tuple[str, str]:
    """("IB", detail) when the container has RDMA devices and may lock memory, else ("Socket", why)."""
    if not rdma_devices(environ):
        return (
            "Socket",
            f"no RDMA device in the container ({RDMA_DIR} not given with --device): "
            "NET/IB : No device found.",
        )
    if not memlock_unlimited(environ):
        return (
            "Socket",
            "the container's locked-memory limit (no --ulimit memlock=-1): Call to "
            "ibv_reg_mr_iova2 failed with error Cannot allocate memory",
        )
    devices = " ".join(f"[{index}]{name}:1/RoCE" for index, name in enumerate(hcas(environ)))
    return "IB", devices


def _subsystems(environ: Mapping[str, str]) -> set[str]:
    text = environ.get("NCCL_DEBUG_SUBSYS", DEFAULT_SUBSYSTEMS).upper()
    invert = text.startswith("^")
    named = set(_items(text.removeprefix("^"), ","))
    if "ALL" in named:
        return set() if invert else set(LINE_SUBSYSTEMS)
    return set(LINE_SUBSYSTEMS) - named if invert else named & LINE_SUBSYSTEMS


def init_lines(environ: Mapping[str, str], host: str = "", pid: int = 0) -> list[str]:
    """NCCL's lines about its network at communicator init, as it prints them: INFO lines
    only with NCCL_DEBUG=INFO or TRACE and INIT or NET among NCCL_DEBUG_SUBSYS, WARN lines
    from NCCL_DEBUG=WARN on, nothing by default (NCCL docs, logging)."""
    level = environ.get("NCCL_DEBUG", "").upper()
    rank = LEVELS.index(level) if level in LEVELS else -1
    warn, info = rank >= LEVELS.index("WARN"), rank >= LEVELS.index("INFO")
    info = info and bool(_subsystems(environ))
    host = host or socket.gethostname()
    pid = pid or os.getpid()
    prefix = f"{host}:{pid}:{pid + 13} [0]"
    name = interface(environ)
    oob = f"{name}:{interface_address(name, environ)}<0>"
    network, detail = transport(environ)
    lines: list[str] = []
    if network == "IB":
        if info:
            lines += [
                f"{prefix} NCCL INFO NCCL_IB_HCA set to {environ.get('NCCL_IB_HCA', '')}"
                if environ.get("NCCL_IB_HCA")
                else "",
                f"{prefix} NCCL INFO NET/IB : Using {detail}; OOB {oob}",
                f"{prefix} NCCL INFO Using network IB",
            ]
        return [line for line in lines if line]
    if "locked-memory" in detail:
        # Real NCCL picks IB here and fails when it registers memory; logged as NCCL logs it.
        if warn:
            lines.append(
                f"{prefix} misc/ibvwrap.cc:278 NCCL WARN Call to ibv_reg_mr_iova2 failed with "
                "error Cannot allocate memory"
            )
    else:
        device = hcas(environ)[0]
        if warn:
            lines += [
                f"{prefix} misc/ibvwrap.cc:212 NCCL WARN Call to ibv_open_device failed",
                f"{prefix} transport/net_ib.cc:148 NCCL WARN NET/IB : Unable to open device "
                f"{device}",
            ]
        if info:
            lines.append(f"{prefix} NCCL INFO NET/IB : No device found.")
    if info:
        lines += [
            f"{prefix} NCCL INFO NET/Socket : Using [0]{oob}",
            f"{prefix} NCCL INFO Using network Socket",
        ]
    return lines
