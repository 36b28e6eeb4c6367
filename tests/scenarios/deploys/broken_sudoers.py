"""
A deploy that tries to install a broken sudoers file through the same operation the engine
uses. Run by tests/scenarios/test_engine.py: visudo must stop it before it goes live.
"""

from pyinfra import config

from operations.files import managed_file

config.SUDO = True

managed_file(
    name="Install a broken sudoers file",
    path="/etc/sudoers.d/spark-deploy-broken",
    content="ops ALL=(root) NOPASSWD /usr/bin/systemctl restart x\n",  # the colon is missing
    mode="440",
    validate="visudo -cf {path}",
)
