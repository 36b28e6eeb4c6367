"""
What a twin's "prepared" image has that a reimaged Spark lacks: the hf command in its venv,
installed by the deploy's own operation (python3-venv from apt, the venv from the shipped
hash lock). tests/twins/prepared.py runs this once on a fresh twin and commits the result,
so that scenarios about other things start where a second deploy on a Spark would.
"""

from pyinfra import config, host

from sparkdeploy.deploys.models.huggingface import hf_cli

config.SUDO = True

version = host.data.spark.hf_cli_version
hf_cli(name=f"Install the hf command ({version})", version=version)
