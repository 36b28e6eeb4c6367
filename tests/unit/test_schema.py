"""The inventory's JSON Schema (docs/inventory.schema.json): the committed file is what the
settings models generate, it is a valid JSON Schema, every example inventory (examples/, the
docs, inventory/sparks.example.yml) passes it, and it refuses what the loader refuses by
shape: an unknown top-level key such as `hosts:`, an unknown Spark key, a bad host name."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from tests.unit.test_docs import EXAMPLES, YAML_BLOCKS
from tools.schema.inventory import ROOT, TARGET, inventory_schema, main, schema_text

jsonschema = pytest.importorskip("jsonschema")

DOCUMENTS = [
    *(path.read_text(encoding="utf-8") for path in EXAMPLES),
    (ROOT / "inventory" / "sparks.example.yml").read_text(encoding="utf-8"),
    *(block for _, block in YAML_BLOCKS if "sparks" in (yaml.safe_load(block) or {})),
]


def errors(document: Any) -> list[str]:
    """What the committed schema says about ``document``."""
    schema = json.loads(TARGET.read_text(encoding="utf-8"))
    validator = jsonschema.Draft202012Validator(schema)
    return [
        detail.message
        for error in validator.iter_errors(document)
        for detail in [error, *error.context]  # an anyOf's failure says why in its context
    ]


def test_committed_schema_is_what_the_models_generate():
    assert TARGET.read_text(encoding="utf-8") == schema_text(), (
        "docs/inventory.schema.json is out of date: run .venv/bin/python -m tools.schema"
    )


def test_check_mode_says_whether_the_file_is_current(capsys):
    assert main(["--check"]) == 0
    assert "up to date" in capsys.readouterr().out


def test_it_is_a_valid_json_schema():
    jsonschema.Draft202012Validator.check_schema(inventory_schema())


@pytest.mark.parametrize("text", DOCUMENTS, ids=lambda text: text.splitlines()[0][:40])
def test_every_example_inventory_passes_it(text):
    assert errors(yaml.safe_load(text)) == []


def pair() -> dict[str, Any]:
    return {"defaults": {"ssh_user": "nvidia"}, "sparks": {"spark-1": {"ssh_host": "a"}}}


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (lambda d: d.update(hosts=d.pop("sparks")), "'sparks' is a required property"),
        (lambda d: d["sparks"]["spark-1"].update(ssh_prot=22), "'ssh_prot' was unexpected"),
        (lambda d: d["defaults"].update(ssh_host="a"), "'ssh_host' was unexpected"),
        (lambda d: d["sparks"].update(Spark_2={"ssh_host": "b"}), "'Spark_2' does not match"),
        (lambda d: d["sparks"]["spark-1"].update(ssh_port=70000), "greater than the maximum"),
        (lambda d: d["defaults"].update(engine={"name": "tgi"}), "'tgi' is not one of"),
        (lambda d: d["sparks"]["spark-1"].pop("ssh_host"), "'ssh_host' is a required property"),
    ],
)
def test_it_refuses_what_the_loader_refuses_by_shape(change, said):
    document = pair()
    change(document)
    assert any(said in message for message in errors(document)), errors(document)


def test_engine_defaults_a_validator_fills_in_are_said_per_engine():
    engine = inventory_schema()["$defs"]["EngineSettings"]["properties"]
    assert "default" not in engine["image"]
    assert "vllm: vllm/vllm-openai:v0.33.0" in engine["image"]["description"]
    assert "sglang: 30000; vllm: 8000" in engine["port"]["description"]
