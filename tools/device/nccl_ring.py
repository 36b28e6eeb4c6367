"""
Real NCCL against the deploy's NCCL-facing code, on one host with two GPUs (run by hand on a
GPU machine; the suite has no GPU): two ranks with peer-to-peer and shared memory disabled, so
NCCL must use its network transport, started with the settings a four-Spark ring's nccl.env
carries (knowledge/ring.yaml) and the deploy's NCCL logging. It reports which of those
settings NCCL says it read ("... set by environment to ..."), the network it chose, and what
the engine health check's parser (files/spark-engine-health, nccl_transport) makes of the log.

    python -m tools.device.nccl_ring OUT_DIR
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from sparkdeploy.knowledge.ring import ring_env

ROOT = Path(__file__).resolve().parents[2]
HEALTH = ROOT / "sparkdeploy" / "files" / "spark-engine-health"
RANK = r"""
import os, torch, torch.distributed as dist
rank = int(os.environ["RANK"])
torch.cuda.set_device(rank)
dist.init_process_group("nccl", rank=rank, world_size=2)
x = torch.ones(1 << 20, device="cuda") * (rank + 1)
dist.all_reduce(x)
torch.cuda.synchronize()
print(f"rank {rank} all_reduce {x[0].item()}", flush=True)
dist.destroy_process_group()
"""


def health_module():
    loader = importlib.machinery.SourceFileLoader("spark_engine_health", str(HEALTH))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def run_ranks(extra: dict[str, str]) -> str:
    env = {
        **os.environ,
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29511",
        "NCCL_P2P_DISABLE": "1",
        "NCCL_SHM_DISABLE": "1",
        "NCCL_DEBUG": "INFO",
        "NCCL_DEBUG_SUBSYS": "INIT,NET,ENV",
        **extra,
    }
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RANK],
            env={**env, "RANK": str(rank)},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in (0, 1)
    ]
    return "".join(proc.communicate(timeout=300)[0] for proc in procs)


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    health = health_module()
    settings = {setting.name: setting.value for setting in ring_env(4)}
    report = {}
    for name, extra in (("ring4", settings), ("plain", {})):
        log = run_ranks(extra)
        (out / f"nccl-{name}.log").write_text(log)
        lines = log.splitlines()
        network, evidence, causes = health.nccl_transport(lines)
        read = {key: bool(re.search(rf"{key} set by environment to", log)) for key in settings}
        report[name] = {
            "nccl_version": next(iter(re.findall(r"NCCL version (\S+)", log)), ""),
            "all_reduce_ok": "all_reduce 3.0" in log,
            "read_by_nccl": read,
            "channels": sorted(set(re.findall(r"via (NET/\w+/\d+)", log)))[:4],
            "using_network": sorted(set(re.findall(r"Using network (\w+)", log))),
            "health_parser": {"network": network, "evidence": evidence[-4:], "causes": causes},
        }
    (out / "report.json").write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
