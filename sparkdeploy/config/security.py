"""
"This inventory changes security settings": the settings of a validated inventory that loosen
what the deploy does by default, one line each, printed on the laptop (inventory.py, to
stderr) before pyinfra asks to apply. An operator who copied a recipe sees at a glance what it
opens: the Hub endpoint the HF token goes to, host keys not checked, the API on every
interface, host folders and devices given to the container, files shipped from the laptop,
and another account as the operator (issue 22, "What to build").
"""

from __future__ import annotations

from collections.abc import Mapping

from sparkdeploy.config.engine import EngineSettings
from sparkdeploy.config.spark import SparkSettings
from sparkdeploy.config.trust import HF_HUB, TRUST_ENDPOINT_ENV, token_endpoint_trusted
from sparkdeploy.knowledge.docker_options import parse_docker_args

# docker options that give the container more of the Spark than the deploy's defaults.
WIDENING_OPTIONS = (
    "--privileged", "--cap-add", "--device", "--device-cgroup-rule", "--security-opt",
    "--group-add", "--pid", "--uts", "--cgroupns", "--sysctl",
)  # fmt: skip
HEADER = "This inventory changes security settings (check them before you apply):"


def _endpoint(spark: SparkSettings, environ: Mapping[str, str]) -> list[str]:
    if spark.hf_endpoint is None or spark.hf_endpoint.rstrip("/") == HF_HUB:
        return []
    goes = (
        f"the HF token goes there ({TRUST_ENDPOINT_ENV} names it)"
        if token_endpoint_trusted(spark.hf_endpoint, environ)
        else "the HF token is not sent there"
    )
    clear = " over plain http" if spark.hf_endpoint.startswith("http:") else ""
    return [f"hf_endpoint {spark.hf_endpoint}{clear}: models come from this mirror; {goes}"]


def _engine(engine: EngineSettings, environ: Mapping[str, str]) -> list[str]:
    lines = []
    if engine.bind != "127.0.0.1":
        keyed = bool(environ.get(engine.api_key_env, "").strip())
        lines.append(
            f"engine.bind {engine.bind}: the API answers on every interface, "
            + (f"with the key in ${engine.api_key_env}" if keyed else "without a key")
        )
    if engine.api_open:
        lines.append("engine.api_open: true: the API is open to anyone who reaches it")
    if engine.mounts:
        shown = ", ".join(f"{mount.host} -> {mount.container}" for mount in engine.mounts)
        lines.append(f"engine.mounts: the container reads the Spark's {shown}")
    options = parse_docker_args(engine.docker_args)[0]
    widening = [
        name + (f"={value}" if value is not None else "")
        for name, value in options
        if name in WIDENING_OPTIONS
    ]
    if widening:
        lines.append(f"engine.docker_args: {' '.join(widening)}")
    shipped = [item.src for item in engine.files] + list(engine.mods)
    if shipped:
        lines.append(f"engine.files/mods: shipped from this laptop: {', '.join(shipped)}")
    return lines


def spark_changes(spark: SparkSettings, environ: Mapping[str, str]) -> list[str]:
    """What one Spark's settings change from the deploy's defaults, one line each."""
    lines = _endpoint(spark, environ)
    if spark.ssh_strict_host_key_checking == "no":
        lines.append("ssh_strict_host_key_checking no: the Spark's host key is never checked")
    if spark.operator_user and spark.operator_user != spark.ssh_user:
        lines.append(
            f"operator_user {spark.operator_user}: this account owns the models and the HF token"
        )
    if spark.engine is not None:
        lines += _engine(spark.engine, environ)
    return lines


def security_changes(sparks: Mapping[str, SparkSettings], environ: Mapping[str, str]) -> list[str]:
    """Every change of every Spark, one line each, as "spark-1, spark-2: ...": a line that
    several Sparks share is said once."""
    hosts: dict[str, list[str]] = {}
    for name, spark in sparks.items():
        for line in spark_changes(spark, environ):
            hosts.setdefault(line, []).append(name)
    return [f"{', '.join(names)}: {line}" for line, names in hosts.items()]


def security_summary(sparks: Mapping[str, SparkSettings], environ: Mapping[str, str]) -> str:
    """The summary as inventory.py prints it ("" when nothing changes)."""
    lines = security_changes(sparks, environ)
    return "\n".join([HEADER, *(f"  - {line}" for line in lines)]) if lines else ""
