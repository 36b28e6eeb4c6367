"""NCCL's choice of network in a Spark twin's container (stand-in). Standard library only.

Placeholder of helper "linktest" for the contract of issue 14 (helper "rdma" owns this file;
its version replaces this one at the merge). A twin has no RDMA hardware: NCCL is taken to
use RDMA ("IB") when the docker stand-in passed the container the RDMA devices and the right
to lock memory, else TCP sockets:

    SPARK_TWIN_DEVICES     colon-separated container paths given with --device
    SPARK_TWIN_ULIMITS     comma-separated name=soft:hard given with --ulimit
    SPARK_TWIN_PRIVILEGED  1 with --privileged
"""

from __future__ import annotations

from collections.abc import Mapping

RDMA_DIR = "/dev/infiniband"


def transport(environ: Mapping[str, str]) -> tuple[str, str]:
    """("IB", detail) when the container has RDMA devices and may lock memory, else ("Socket", why)."""
    devices = [path for path in environ.get("SPARK_TWIN_DEVICES", "").split(":") if path]
    limits = [item for item in environ.get("SPARK_TWIN_ULIMITS", "").split(",") if item]
    privileged = environ.get("SPARK_TWIN_PRIVILEGED") == "1"
    if not privileged and not any(path.startswith(RDMA_DIR) for path in devices):
        return (
            "Socket",
            f"no RDMA device in the container ({RDMA_DIR} not given): NET/IB : No device found.",
        )
    if not privileged and not any(item.startswith("memlock=-1") for item in limits):
        return (
            "Socket",
            "no --ulimit memlock=-1: ibv_reg_mr_iova2 failed with error Cannot allocate memory",
        )
    return "IB", "[0]rocep1s0f0:1/RoCE"
