"""
What a twin's "prepared" image has that its plain image lacks, each installed by the deploy's
own operation: the hf command in its venv (python3-venv from apt, the venv from the shipped
hash lock), and nftables, which the fabric guard installs where a Spark has other Sparks
(DGX OS ships it; the twin's Debian does not, and every converge of Sparks with others ran
apt-get for it).
tests/twins/prepared.py runs this once on a fresh twin and commits the result, so that
scenarios about other things start where a second deploy on a Spark would.
"""

from pyinfra import config, host

from sparkdeploy.deploys.models.huggingface import hf_cli
from sparkdeploy.deploys.qsfp.guard import nftables_installed

config.SUDO = True

version = host.data.spark.hf_cli_version
hf_cli(name=f"Install the hf command ({version})", version=version)
nftables_installed(name="Install nftables (the fabric guard's)")
