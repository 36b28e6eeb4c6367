"""
How to reach a Spark's engine API, said once after a successful deploy: an SSH tunnel and a
curl when the API binds to loopback (engine.bind 127.0.0.1, the default), the address and
a curl when it binds every interface; with the API key's header when it requires one (the
key stays in the laptop's variable engine.api_key_env and is never shown).
"""

from __future__ import annotations

from sparkdeploy.config.spark import SparkSettings
from sparkdeploy.engine_plan.plan import EnginePlan

LOOPBACK = "127.0.0.1"


def key_header(plan: EnginePlan) -> str:
    """The curl option that sends the API key from the laptop's variable ("" without a
    key): both engines take it as a bearer token."""
    if not plan.api_key:
        return ""
    return f' -H "Authorization: Bearer ${plan.api_key_env}"'


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
        target = f"{spark.ssh_user}@{spark.ssh_host}" if spark.ssh_user else spark.ssh_host
        ssh_port = f"-p {spark.ssh_port} " if spark.ssh_port != 22 else ""
        return (
            f"API of {plan.served_model_name} on {LOOPBACK}:{port} of the Spark only ({key}): "
            f"ssh -N -L {port}:{LOOPBACK}:{port} {ssh_port}{target} &  then  "
            + curl.format(host=LOOPBACK)
        )
    return f"API of {plan.served_model_name} bound to {plan.bind}:{port} ({key}): " + curl.format(
        host=spark.ssh_host
    )
