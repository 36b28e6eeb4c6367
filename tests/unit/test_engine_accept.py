"""engine.accept: one GB10 rule accepted by id with a reason, shown in the plan's warnings and
written into the engine unit; unknown ids refused; no global skip."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from sparkdeploy.config.engine import EngineSettings
from sparkdeploy.config.errors import InventoryError
from sparkdeploy.deploys.engine.units import unit_text
from sparkdeploy.engine_plan.rules import rule_ids
from sparkdeploy.inventory import build_inventory
from sparkdeploy.knowledge.model_class import ModelClass
from tests.unit import model_configs as cfg

QWEN = ModelClass.from_config(cfg.QWEN3_DENSE, source="Qwen/Qwen3-8B@main config.json")
REASON = "vLLM 0.33.0 with this model tested on spark-1 (100% of 2026-11 runs), see ticket 42"


def inventory(engine: dict[str, Any], model: ModelClass = QWEN):
    return build_inventory(
        {
            "defaults": {"ssh_user": "nvidia", "engine": engine, "model_repo": "Qwen/Qwen3-8B"},
            "sparks": {"s1": {"ssh_host": "a"}},
        },
        "inventory/sparks.yml",
        read_model=lambda spark: model,
    )


MLA_ON_DENSE = {"name": "vllm", "args": {"--attention-backend": "TRITON_MLA"}}


def test_the_model_class_read_before_planning_refuses_a_mismatched_backend():
    with pytest.raises(InventoryError) as caught:
        inventory(MLA_ON_DENSE)
    assert "error [vllm-mla-backend-non-mla-model] --attention-backend TRITON_MLA" in str(
        caught.value
    )


def test_an_accepted_error_becomes_a_notice_and_a_unit_comment():
    inv = inventory(MLA_ON_DENSE | {"accept": {"vllm-mla-backend-non-mla-model": REASON}})
    plan = inv.engine_plans["s1"]
    assert plan.accepted_rules == (("vllm-mla-backend-non-mla-model", REASON),)
    [notice] = [w for w in inv.warnings if "accepted [vllm-mla-backend-non-mla-model]" in w]
    assert "--attention-backend TRITON_MLA" in notice and REASON in notice
    unit = unit_text(plan, plan.main, inv.sparks["s1"], "/etc/spark-deploy/x.env")
    assert f"# Accepted rule vllm-mla-backend-non-mla-model: {REASON}\n" in unit
    assert unit.index("# Accepted rule") < unit.index("[Unit]")


def test_without_accepted_rules_the_unit_has_no_such_comment():
    inv = inventory({"name": "vllm"})
    plan = inv.engine_plans["s1"]
    assert "Accepted rule" not in unit_text(plan, plan.main, inv.sparks["s1"], "/x.env")


def test_accepting_one_rule_leaves_the_others_refusing():
    engine = {
        "name": "vllm",
        "image": "vllm/vllm-openai:v0.25.1",  # DFlash at the default --max-num-seqs: 0.25
        "args": {
            "--attention-backend": "TRITON_MLA",
            "--speculative-config": {"method": "dflash", "num_speculative_tokens": 4},
        },
        "accept": {"vllm-mla-backend-non-mla-model": REASON},
    }
    with pytest.raises(InventoryError) as caught:
        inventory(engine)
    assert "[vllm-dflash-max-num-seqs]" in str(caught.value)
    assert "error [vllm-mla-backend-non-mla-model]" not in str(caught.value)


def test_an_unknown_rule_id_is_refused_with_the_rules_there_are():
    with pytest.raises(InventoryError) as caught:
        inventory({"name": "vllm", "accept": {"sglang-eagle-topk": "r"}})
    message = str(caught.value)
    assert "'sglang-eagle-topk' is not a GB10 rule for vllm; the rules are:" in message
    assert all(rule_id in message for rule_id in rule_ids("vllm"))


def test_an_accepted_rule_that_does_not_fire_is_a_warning():
    inv = inventory({"name": "vllm", "accept": {"enforce-eager": "r"}})
    assert any("rule enforce-eager does not fire" in w for w in inv.warnings)
    assert inv.engine_plans["s1"].accepted_rules == ()


@pytest.mark.parametrize(
    ("accept", "problem"),
    [
        ({"Not An Id": "r"}, "a rule id is lower-case letters"),
        ({"enforce-eager": "line\nExecStartPre=/bin/sh"}, "control characters"),
        ({"enforce-eager": "   "}, "one line of 1-300 characters"),
        ({"enforce-eager": "ends in \\"}, "not ending in"),
        ({"enforce-eager": "x" * 301}, "one line of 1-300 characters"),
    ],
)
def test_accept_entries_are_validated(accept, problem):
    with pytest.raises(ValidationError) as caught:
        EngineSettings(name="vllm", accept=accept)
    assert problem in str(caught.value)
