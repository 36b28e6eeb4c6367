"""
How to reach a Spark's engine API, said once after a successful deploy: an SSH tunnel and a
curl when the API binds to loopback (engine.bind 127.0.0.1, the default), the address and
a curl when it binds every interface; with the API key's header when it requires one (the
key stays in the laptop's variable engine.api_key_env and is never shown). The tunnel's ssh
line carries the inventory's SSH key, known-hosts file, host key policy and port, so that
it connects as the deploy did when pasted.
"""

from __future__ import annotations

import shlex

from sparkdeploy.config.spark import SparkSettings
from sparkdeploy.engine_plan.plan import EnginePlan

LOOPBACK = "127.0.0.1"
SSH_PORT = 22
DEFAULT_HOST_KEY_POLICY = "accept-new"  # the inventory's default (config/spark.py)


def key_header(plan: EnginePlan) -> str:
    """The curl option that sends the API key from the laptop's variable ("" without a
    key): both engines take it as a bearer token."""
    if not plan.api_key:
        return ""
    return f' -H "Authorization: Bearer ${plan.api_key_env}"'


def path_word(path: str) -> str:
    """A file path as a shell word; a leading ~/ stays unquoted, so the shell expands it."""
    if path.startswith("~/"):
        return "~/" + shlex.quote(path[2:])
    return shlex.quote(path)


def ssh_options(spark: SparkSettings) -> list[str]:
    """ssh's words that reach ``spark`` as the deploy did: the inventory's key, known-hosts
    file, host key policy (when not the default, accept-new) and port, then user@host."""
    words = [f"-i {path_word(spark.ssh_key)}"] if spark.ssh_key else []
    if spark.ssh_known_hosts_file:
        words.append(f"-o UserKnownHostsFile={path_word(spark.ssh_known_hosts_file)}")
    if spark.ssh_strict_host_key_checking != DEFAULT_HOST_KEY_POLICY:
        words.append(f"-o StrictHostKeyChecking={spark.ssh_strict_host_key_checking}")
    if spark.ssh_port != SSH_PORT:
        words.append(f"-p {spark.ssh_port}")
    words.append(f"{spark.ssh_user}@{spark.ssh_host}" if spark.ssh_user else spark.ssh_host)
    return words


def api_access(spark: SparkSettings, plan: EnginePlan) -> str:
    """One line: where the API of ``plan`` on ``spark`` answers and how to ask it from the
    laptop ("" on a Spark that serves no API, the other ranks of a pair or cluster)."""
    if not plan.serves_api:
        return ""
    port = plan.port
    curl = f"curl{key_header(plan)} http://{{host}}:{port}/v1/models"
    key = (
        f"requires the API key in ${plan.api_key_env}"
        if plan.api_key
        else "no API key: engine.api_open"
        if plan.bind != LOOPBACK
        else "no API key"
    )
    if plan.bind == LOOPBACK:
        return (
            f"API of {plan.served_model_name} on {LOOPBACK}:{port} of the Spark only ({key}): "
            f"ssh -N -L {port}:{LOOPBACK}:{port} {' '.join(ssh_options(spark))} &  then  "
            + curl.format(host=LOOPBACK)
        )
    return f"API of {plan.served_model_name} bound to {plan.bind}:{port} ({key}): " + curl.format(
        host=spark.ssh_host
    )
