"""
A deploy that tries to install a broken sudoers file through the same operation the engine
uses, at the engine's registered sudoers path. Run by tests/scenarios/test_engine.py:
visudo (the registry's check for sudoers files) must stop it before it goes live.
"""

from pyinfra import config

from sparkdeploy.config.paths import ENGINE_SUDOERS
from sparkdeploy.deploys.managed import managed_file

config.SUDO = True

managed_file(
    name="Install a broken sudoers file",
    path=ENGINE_SUDOERS.format(name="spark-engine-sglang"),
    content="ops ALL=(root) NOPASSWD /usr/bin/systemctl restart x\n",  # the colon is missing
)
