"""GPU services taking turns: the settings, the units and Conflicts= both ways, the switch's map
and sudoers, and the engine left alone while a service holds the GPU."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from sparkdeploy.config.errors import InventoryError
from sparkdeploy.config.paths import GPU_SUDOERS
from sparkdeploy.deploys.gpu import service_unit, switch_map
from sparkdeploy.engine_plan.files import managed_files
from sparkdeploy.facts.status import SparkStatus, Status
from sparkdeploy.inventory import Inventory, build_inventory
from sparkdeploy.render import render
from sparkdeploy.reports.status import Row, status_rows
from tests.twins import harness
from tests.unit.samples import docstring_sample
from tests.unit.test_ops_engine import serving_with

TTS = {"name": "tts", "image": "ghcr.io/remsky/kokoro-fastapi-gpu:v0.2.2", "port": 8880,
       "memory_gb": 12}  # fmt: skip
IMAGES = {**TTS, "name": "images", "port": 8188, "memory_gb": 40, "health": "/",
          "command": ["python3", "main.py", "--port", "8188"]}  # fmt: skip
PATH = "inventory/sparks.yml"


def inventory(services: list[dict[str, Any]], pair: bool = False, **keys: Any) -> Inventory:
    defaults = {"ssh_user": "nvidia", "model_repo": "org/model", "engine": {"name": "sglang"}}
    sparks = {
        f"s{node}": {"ssh_host": f"s{node}.local", "gpu_services": services}
        | ({"qsfp": harness.qsfp_plan(node)} if pair else {})
        for node in ((1, 2) if pair else (1,))
    }
    return build_inventory({"defaults": defaults | keys, "sparks": sparks}, PATH, environ={})


def refusal(services: list[dict[str, Any]], **keys: Any) -> str:
    with pytest.raises(InventoryError) as refused:
        inventory(services, **keys)
    return str(refused.value)


@pytest.mark.parametrize(
    "service, says",
    [
        ({**TTS, "name": "engine"}, "'engine' is the engine's own name"),
        ({**TTS, "name": "TTS svc"}, "must be a short name"),
        ({**TTS, "port": 30000}, "tts answers on port 30000, as the engine does"),
        ({**TTS, "memory_gb": 129}, "less than or equal to 128"),
        ({**TTS, "health": "/h?x=1"}, "must be a URL path"),
        ({**TTS, "command": ["sh", "-c", "a\nb"]}, "gpu_services"),
    ],
)
def test_a_service_that_cannot_take_turns_is_refused(service, says):
    message = refusal([service])
    assert says in message and "host 's1'" in message and "gpu_services" in message


def test_two_services_need_their_own_names_and_ports():
    assert "two services are named tts" in refusal([TTS, {**TTS, "port": 9000}])
    assert "as tts does" in refusal([TTS, {**IMAGES, "port": 8880}])


def test_not_yet_on_sparks_serving_one_model_together():
    with pytest.raises(InventoryError, match="key 'gpu_services': not yet on Sparks serving"):
        inventory([TTS], pair=True)


def test_the_engine_and_every_service_conflict_both_ways():
    found = inventory([TTS, IMAGES])
    spark, plan = found.sparks["s1"], found.engine_plans["s1"]
    assert plan is not None
    assert plan.conflicts == ("spark-gpu-tts.service", "spark-gpu-images.service")
    unit = service_unit(spark, plan, spark.gpu_services[1])
    assert "Conflicts=spark-engine-sglang.service spark-gpu-tts.service\n" in unit
    assert "ExecStartPre=/usr/local/sbin/spark-memory-guard 40 300\n" in unit
    assert "ExecStopPost=-/usr/local/sbin/spark-memory-guard 40 300\n" in unit
    assert (
        "ExecStart=/usr/bin/docker run --pull missing --name spark-gpu-images --gpus all "
        "--network host --ipc host --cap-drop=NET_RAW --security-opt=no-new-privileges "
        "ghcr.io/remsky/kokoro-fastapi-gpu:v0.2.2 python3 main.py "
        "--port 8188\n"
    ) in unit


def test_the_switch_map_names_the_engine_and_each_service():
    found = inventory([TTS])
    document = json.loads(switch_map(found.sparks["s1"], found.engine_plans["s1"]))
    assert document == {
        "memory_timeout": 300,
        "services": {
            "engine": {
                "unit": "spark-engine-sglang.service",
                "port": 30000,
                "health": "/health",
                "memory_gb": 70,
            },
            "tts": {
                "unit": "spark-gpu-tts.service",
                "port": 8880,
                "health": "/health",
                "memory_gb": 12,
            },  # fmt: skip
        },
    }


def test_each_name_gets_a_validated_sudoers_file_for_the_switch_alone():
    found = inventory([TTS], operator_user="ops")
    files = managed_files(found.sparks["s1"], found.engine_plans["s1"])
    for name in ("engine", "tts"):
        entry = files[GPU_SUDOERS.format(name=name)]
        assert (entry.mode, entry.validate) == ("440", "visudo -cf {path}")
    text = render("gpu-switch-sudoers.j2", user="ops", holder="tts", switch="/usr/local/sbin/x")
    assert text.splitlines()[-1] == (
        "ops ALL=(root) NOPASSWD: /usr/local/sbin/x tts, /usr/local/sbin/x --status"
    )


def test_no_services_no_switch():
    found = inventory([])
    assert not any("gpu" in path for path in managed_files(found.sparks["s1"], None))


def test_the_engine_is_left_stopped_while_a_service_holds_the_gpu():
    outcome = serving_with(("inactive", "disabled"), gpu_with="spark-gpu-tts.service")
    assert outcome.commands == []
    assert outcome.noop == (
        "the GPU is with spark-gpu-tts.service: `sudo spark-gpu-switch engine` gives it back"
    )


def status_of(active: list[str]) -> Status:
    sample = SparkStatus().process(docstring_sample(SparkStatus))
    units = {unit: {"ActiveState": "active", "UnitFileState": "enabled"} for unit in active}
    return replace(sample, units=units)


def test_status_says_who_holds_the_gpu_and_the_engine_is_stopped_on_purpose():
    found = inventory([TTS])
    spark, plan = found.sparks["s1"], found.engine_plans["s1"]
    held = status_rows(spark, plan, (), status_of(["spark-gpu-tts.service"]))
    rows = {row.check: row for row in held}
    assert rows["gpu holder"] == Row("gpu holder", "ok", "spark-gpu-tts.service")
    assert (
        rows["unit"].state == "-" and "the GPU is with spark-gpu-tts.service" in rows["unit"].detail
    )
    assert rows["engine"] == Row("engine", "-", "stopped: the GPU is with spark-gpu-tts.service")
    both = status_rows(
        spark, plan, (), status_of(["spark-engine-sglang.service", "spark-gpu-tts.service"])
    )
    assert [r.state for r in both if r.check == "gpu holder"] == ["FAIL"]
    free = status_rows(spark, plan, (), status_of([]))
    assert [r.state for r in free if r.check == "gpu holder"] == ["WARN"]


@pytest.mark.parametrize(
    ("image", "warned"),
    [
        ("ubuntu", "untagged (latest)"),
        ("ubuntu:latest", "is latest"),
        ("registry.local:5000/tts", "untagged (latest)"),  # the port is no tag
        ("ghcr.io/remsky/kokoro-fastapi-gpu:v0.2.2", None),
        ("ubuntu@sha256:" + "a" * 64, None),
    ],
)
def test_a_service_image_that_is_not_pinned_is_warned(image, warned):
    warnings = inventory([{**TTS, "image": image}]).warnings
    found = [w for w in warnings if "key 'gpu_services', 'tts'" in w]
    if warned is None:
        assert found == []
    else:
        assert len(found) == 1 and warned in found[0] and "pin a tag or a digest" in found[0]
