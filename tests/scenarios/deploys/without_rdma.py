"""
The whole deploy, with the RDMA options taken out of the engine plans of the Sparks named in
$SPARK_TWIN_WITHOUT_RDMA (comma-separated): their containers start without /dev/infiniband
and the memlock limit, as an engine started by hand often does. Run by
tests/scenarios/test_engine_rdma.py: NCCL must fall back to sockets there and the health
check must fail saying so.
"""

import dataclasses
import os

from pyinfra import host, local

WITHOUT = {name for name in os.environ.get("SPARK_TWIN_WITHOUT_RDMA", "").split(",") if name}

plan = host.data.get("engine_plan")
if plan is not None and host.name in WITHOUT:
    host.data.engine_plan = dataclasses.replace(plan, rdma_args=())

local.include("deploy.py")
