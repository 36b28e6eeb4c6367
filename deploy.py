"""
Prepare one or two DGX Sparks to serve large language models:

    pyinfra inventory.py deploy.py

This file is the table of contents of the whole deploy: each line is a named deploy from
operations/, run in order on every Spark. A second run on a prepared Spark changes nothing.
"""

from pyinfra import config

from operations import (
    drm,
    driver,
    engine,
    huggingface,
    memory,
    models,
    network,
    notices,
    preflight,
    proof,
    reboot,
)

config.SUDO = True
notices.install()

preflight.check_spark()
driver.hold_driver()
drm.remove_drm_override()
network.configure_qsfp_network()
proof.prove_qsfp_path()
huggingface.configure_huggingface()
models.prepare_models()
memory.guard_memory()
engine.serve_model()
reboot.reboot_when_needed()
