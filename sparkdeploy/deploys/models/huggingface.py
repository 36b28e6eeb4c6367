"""
The Hugging Face environment that works on a Spark: Xet off, IPv4 preferred, the `hf`
command in its own venv, and the operator's token (never in output, argv or a
world-readable file).
"""

from __future__ import annotations

import os

from pyinfra import host
from pyinfra.api import deploy, operation

from sparkdeploy.config.paths import GAI_CONF, HF_CLI_VENV, HF_ENV_FILE, HF_PROFILE, HF_TOKEN
from sparkdeploy.config.spark import SparkSettings
from sparkdeploy.deploys.managed import managed_file
from sparkdeploy.deploys.venv import PYTHON3_VENV
from sparkdeploy.escape import shell
from sparkdeploy.facts.host_state import host_state
from sparkdeploy.render import render

GAI_LINE = "precedence ::ffff:0:0/96  100"
GAI_COMMENT = "# spark-deploy: prefer IPv4 (the Hub's IPv6 endpoint is unreachable from a Spark)"


@operation()
def ipv4_preferred(enabled: bool = True):
    """
    Prefer IPv4 addresses in name resolution (glibc's /etc/gai.conf precedence table).

    + enabled: add the precedence line when true, remove the deploy's line when false

    **Example:**

    .. code:: python

        huggingface.ipv4_preferred(enabled=True)
    """
    present = host_state().gai_ipv4
    if present == enabled:
        host.noop(f"IPv4 preference in {GAI_CONF} already {'on' if enabled else 'off'}")
        return
    if enabled:
        yield f"printf '%s\\n' {shell(GAI_COMMENT)} {shell(GAI_LINE)} >> {GAI_CONF}"
    else:
        yield (
            f"sed -i -e '/^# spark-deploy: prefer IPv4/d' "
            f"-e '/^precedence[[:space:]]\\+::ffff:0:0\\/96[[:space:]]\\+100$/d' {GAI_CONF}"
        )


@operation()
def hf_cli(version: str, venv: str = HF_CLI_VENV):
    """
    Install the ``hf`` command (huggingface_hub) in its own venv and link it onto the PATH,
    away from the system Python (Ubuntu 24.04 refuses system-wide pip installs).

    + version: huggingface_hub release to install
    + venv: folder of the venv

    **Example:**

    .. code:: python

        huggingface.hf_cli(version="2.4.0")
    """
    state = host_state()
    if state.hf_cli == version:
        host.noop(f"hf {version} is installed in {venv}")
        return
    if "python3-venv" not in state.packages:
        yield PYTHON3_VENV
    yield (
        f"python3 -I -m venv {venv} && "
        f"{venv}/bin/pip install --quiet --disable-pip-version-check "
        f"huggingface_hub=={version} && ln -sfn {venv}/bin/hf /usr/local/bin/hf"
    )


def laptop_token(spark: SparkSettings) -> str:
    """The HF token from the laptop's environment ("" when not given)."""
    return os.environ.get(spark.hf_token_env, "").strip()


@deploy("Set up the Hugging Face environment")
def configure_huggingface() -> None:
    spark: SparkSettings = host.data.spark
    values = {"hf_disable_xet": spark.hf_disable_xet, "hf_endpoint": spark.hf_endpoint}
    managed_file(
        name="Write the Hugging Face environment for login shells",
        path=HF_PROFILE,
        content=render("hf-profile.sh.j2", **values),
    )
    managed_file(
        name="Write the Hugging Face environment for engine units",
        path=HF_ENV_FILE,
        content=render("hf.env.j2", **values),
    )
    ipv4_preferred(name="Prefer IPv4 for name resolution", enabled=spark.prefer_ipv4)
    hf_cli(name=f"Install the hf command ({spark.hf_cli_version})", version=spark.hf_cli_version)

    if laptop_token(spark):
        managed_file(
            name="Install the operator's Hugging Face token (0600)",
            path=HF_TOKEN,
            content=laptop_token(spark),
        )
