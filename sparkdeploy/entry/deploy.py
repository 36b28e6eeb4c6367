"""
Prepare one to eight DGX Sparks (alone, a pair, or through a switch) to serve LLMs:

    pyinfra inventory.py deploy.py        # in a checkout (the root deploy.py runs this file)
    spark-deploy deploy INVENTORY         # installed (pip install .)

This file is the table of contents of the whole deploy: each line is a named deploy from
sparkdeploy/deploys/, run in order on every Spark. A second run on a prepared Spark changes
nothing.
"""

from pyinfra import config

from sparkdeploy import PYINFRA_VERSIONS
from sparkdeploy.deploys import agent, gpu
from sparkdeploy.deploys.engine import serve
from sparkdeploy.deploys.fetch import jobs as fetch
from sparkdeploy.deploys.host import driver, drm, memory, preflight, reboot
from sparkdeploy.deploys.models import huggingface
from sparkdeploy.deploys.qsfp import guard, network, proof
from sparkdeploy.reports import notices, quiet

config.REQUIRE_PYINFRA_VERSION = PYINFRA_VERSIONS  # pyinfra refuses to run on another release
config.SUDO = True
notices.install()
quiet.install()  # without -v: no "No changes" lines, a count per Spark at the end

preflight.check_spark()
driver.hold_driver()
drm.remove_drm_override()
network.configure_qsfp_network()
proof.prove_qsfp_path()
guard.guard_fabric()
huggingface.configure_huggingface()
fetch.fetch_everything()
memory.guard_memory()
serve.serve_model()
gpu.take_turns()
agent.serve_agent_tools()
reboot.reboot_when_needed()
