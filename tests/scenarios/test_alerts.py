"""
Alerts on a twin: engine.alerts renders the Prometheus rules and scrape config beside the
engine, whose /metrics (SGLang with --enable-metrics) exports every metric the rules name; a
second run changes nothing; turning alerts off removes both files.
"""

from __future__ import annotations

import re

from tests.scenarios.conftest import assert_idempotent
from tests.twins import harness

RULES = "/etc/spark-deploy/prometheus/spark-engine-sglang.rules.yml"
SCRAPE = "/etc/spark-deploy/prometheus/spark-engine-sglang.scrape.yml"
METRICS = (
    'python3 -c "import urllib.request as u; '
    "print(u.urlopen('http://127.0.0.1:30000/metrics', timeout=5).read().decode())\""
)


class TestAlerts:
    twins = {"alerts-1": {**harness.MODEL, "engine": {"name": "sglang", "alerts": True}}}

    def test_converge_writes_rules_the_engine_can_answer(self, scenario):
        run = scenario.deploy(env=harness.HUB_TOKEN_ENV)
        assert run.returncode == 0, run.explain()
        twin = scenario.twins["alerts-1"]
        rules = twin.read(RULES)
        print(rules, twin.read(SCRAPE), sep="\n")
        assert "127.0.0.1:30000" in twin.read(SCRAPE)
        exported = twin.exec(METRICS).stdout
        for name in set(re.findall(r"([A-Za-z_:][A-Za-z0-9_:]*)\{", rules)) - {"up"}:
            assert re.search(rf"^{re.escape(name)}\{{", exported, re.M), name

    def test_idempotence(self, scenario):
        assert_idempotent(scenario.deploy(env=harness.HUB_TOKEN_ENV))

    def test_alerts_off_removes_the_files(self, scenario):
        twin = scenario.twins["alerts-1"]
        twin.data["engine"] = {"name": "sglang"}
        scenario.write_inventory()
        run = scenario.deploy(env=harness.HUB_TOKEN_ENV)
        assert run.returncode == 0, run.explain()
        for path in (RULES, SCRAPE):
            assert twin.exec(f"test -e {path}", check=False).returncode != 0
        assert_idempotent(scenario.deploy(env=harness.HUB_TOKEN_ENV))
