"""
Prometheus alerts (engine.alerts): the plan turns SGLang's /metrics on, the rules and scrape
config render as valid YAML whose every metric name is one the pinned release exports
(metrics.yaml, checked against the cached wheels), and promtool accepts them and fires the
accept-rate alert on a collapsed rate, not on a healthy or idle engine.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest
import yaml

from sparkdeploy.config.errors import InventoryError
from sparkdeploy.engine_plan.alerts import template_values
from sparkdeploy.engine_plan.files import engine_files
from sparkdeploy.inventory import build_inventory
from sparkdeploy.knowledge.metrics import metrics
from sparkdeploy.render import render
from tools.catalogue.build import DEFAULT_WHEEL_DIR, find_wheel

SELECTOR = re.compile(r"([A-Za-z_:][A-Za-z0-9_:]*)\{")  # a metric name before its labels
PROMTOOL_PACKAGE = "prometheus"  # Debian/Ubuntu: promtool ships in it (19 MB, ~9 s to install)


def plan(engine: dict, draft: bool = True):
    keys = {
        "ssh_host": "a",
        "ssh_user": "nvidia",
        "engine": engine,
        "model_repo": "mistralai/Mistral-Small-4-119B-2603-NVFP4",
        "model_base_repo": "mistralai/Mistral-Small-4-119B-2603",
    }
    if draft:
        keys["draft_model_repo"] = "mistralai/Mistral-Small-4-119B-2603-eagle"
    return build_inventory({"sparks": {"spark-1": keys}}, "inventory/sparks.yml").engine_plans[
        "spark-1"
    ]


def rendered(engine: dict, draft: bool = True) -> tuple[str, str]:
    made = plan({**engine, "alerts": True}, draft)
    values = template_values(made.alerts, made.unit, made.port, "spark-1")
    return (
        render("prometheus-rules.yml.j2", alerts=values),
        render("prometheus-scrape.yml.j2", alerts=values),
    )


CASES = {
    "sglang": {"name": "sglang"},
    "sglang-0.5.12": {"name": "sglang", "image": "lmsysorg/sglang:v0.5.12-cu130"},
    "vllm": {"name": "vllm"},
}


def test_alerts_are_off_by_default_and_sglang_then_serves_metrics():
    off = plan({"name": "sglang"})
    assert off.alerts is None and not off.writes_alerts
    assert "--enable-metrics" not in off.argv
    on = plan({"name": "sglang", "alerts": True})
    assert "--enable-metrics" in on.argv
    assert on.alerts.speculative and (on.alerts.threshold, on.alerts.window) == (0.15, "15m")
    assert [f.path for f in engine_files(on)][-2:] == [
        "/etc/spark-deploy/prometheus/spark-engine-sglang.rules.yml",
        "/etc/spark-deploy/prometheus/spark-engine-sglang.scrape.yml",
    ]
    assert not plan({"name": "sglang", "alerts": True}, draft=False).alerts.speculative


def test_threshold_and_window_are_validated():
    with pytest.raises(InventoryError) as caught:
        plan({"name": "vllm", "alert_accept_rate": 1.5, "alert_window": "15 minutes"})
    problems = "\n".join(caught.value.problems)
    assert "engine.alert_accept_rate" in problems or "alert_accept_rate" in problems
    assert "alert_window" in problems


@pytest.mark.parametrize("case", list(CASES))
def test_rules_are_valid_and_name_only_exported_metrics(case):
    rules_text, scrape_text = rendered(CASES[case])
    engine = CASES[case]["name"]
    exported = {metric["exposed"] for metric in metrics()[engine]["metrics"]} | {"up"}
    [group] = yaml.safe_load(rules_text)["groups"]
    assert group["name"] == f"spark-engine-{engine}"
    alerts = {rule["alert"]: rule for rule in group["rules"]}
    assert set(alerts) == {"SparkEngineDown", "SparkEngineSpeculativeAcceptRateLow"}
    for rule in alerts.values():
        assert set(rule) == {"alert", "expr", "for", "labels", "annotations"}
        assert rule["labels"]["severity"] in ("critical", "warning")
        assert rule["annotations"]["summary"]
        names = set(SELECTOR.findall(rule["expr"]))
        assert names and names <= exported, names - exported
        assert f'job="spark-engine-{engine}"' in rule["expr"]
    assert "< 0.15" in alerts["SparkEngineSpeculativeAcceptRateLow"]["expr"]
    [job] = yaml.safe_load(scrape_text)["scrape_configs"]
    port = 30000 if engine == "sglang" else 8000
    assert job["job_name"] == f"spark-engine-{engine}"
    assert job["static_configs"][0]["targets"] == [f"127.0.0.1:{port}"]


def test_no_accept_rate_rule_without_speculative_decoding():
    rules_text, _ = rendered({"name": "vllm"}, draft=False)
    [group] = yaml.safe_load(rules_text)["groups"]
    assert [rule["alert"] for rule in group["rules"]] == ["SparkEngineDown"]


@pytest.mark.parametrize(
    "engine,version",
    [(engine, version) for engine, entry in metrics().items() for version in entry["versions"]],
)
def test_metric_names_are_declared_in_the_pinned_wheel(engine, version):
    wheel = find_wheel(engine, version, DEFAULT_WHEEL_DIR)
    if wheel is None:
        pytest.skip(
            f"no {engine} {version} wheel in {DEFAULT_WHEEL_DIR}; fetch it with "
            f"`python -m tools.catalogue {engine} {version}`"
        )
    entry = metrics()[engine]
    with zipfile.ZipFile(wheel) as archive:
        source = archive.read(entry["source"]).decode()
    for metric in entry["metrics"]:
        assert f'"{metric["declared"]}"' in source, (wheel.name, metric["declared"])


def promtool() -> str:
    """promtool, installed from the distribution when missing and possible, else a skip."""
    found = shutil.which("promtool")
    if found is None and os.geteuid() == 0 and shutil.which("apt-get"):
        subprocess.run(
            ["apt-get", "install", "-y", "-q", "--no-install-recommends", PROMTOOL_PACKAGE],
            capture_output=True,
            check=False,
            timeout=300,
            env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
        )
        found = shutil.which("promtool")
    if found is None:
        pytest.skip(
            f"promtool not found and not installable here: install the Debian/Ubuntu "
            f"package `{PROMTOOL_PACKAGE}` to check the rules with it"
        )
    return found


ACCEPT_RATE_TEST = """
rule_files: [rules.yml]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'sglang:spec_accept_rate{job="spark-engine-sglang"}'
        values: '0.35x20 0.08x40'
      - series: 'sglang:generation_tokens_total{job="spark-engine-sglang"}'
        values: '0+600x60'
      - series: 'up{job="spark-engine-sglang"}'
        values: '1x60'
    alert_rule_test:
      - {eval_time: 15m, alertname: SparkEngineSpeculativeAcceptRateLow, exp_alerts: []}
      - {eval_time: 15m, alertname: SparkEngineDown, exp_alerts: []}
      - eval_time: 58m
        alertname: SparkEngineSpeculativeAcceptRateLow
        exp_alerts:
          - exp_labels: {severity: warning, job: spark-engine-sglang}
            exp_annotations:
              summary: "Speculative accept rate of spark-engine-sglang.service on spark-1 below 0.15 over 15m"
              description: "The draft model no longer predicts this workload well, or it loaded degraded; restarting the engine is cheaper than an hour of slow decoding."
  - interval: 1m
    input_series:
      - series: 'sglang:spec_accept_rate{job="spark-engine-sglang"}'
        values: '0x60'
      - series: 'sglang:generation_tokens_total{job="spark-engine-sglang"}'
        values: '0x60'
    alert_rule_test:
      - {eval_time: 50m, alertname: SparkEngineSpeculativeAcceptRateLow, exp_alerts: []}
"""  # noqa: E501 -- promtool compares the annotations, one YAML line each


@pytest.mark.parametrize("case", list(CASES))
def test_promtool_accepts_rules_and_scrape_config(case, tmp_path: Path):
    tool = promtool()
    rules_text, scrape_text = rendered(CASES[case])
    (tmp_path / "rules.yml").write_text(rules_text)
    config = {"rule_files": ["rules.yml"], **yaml.safe_load(scrape_text)}
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    for command in (["check", "rules", "rules.yml"], ["check", "config", "prometheus.yml"]):
        done = subprocess.run([tool, *command], cwd=tmp_path, capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr
    if case == "sglang":
        (tmp_path / "test.yml").write_text(ACCEPT_RATE_TEST)
        done = subprocess.run(
            [tool, "test", "rules", "test.yml"], cwd=tmp_path, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stdout + done.stderr
