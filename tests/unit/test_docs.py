"""The documentation: the generated key reference matches the settings models, every YAML
example in README.md, docs/ and examples/ is a valid inventory (or an engine mapping that
plans, each engine example against every release it names), read by the real loader with
the model class stubbed offline, and every relative link in README.md, docs/ and examples/
leads somewhere."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkdeploy.config.spark import SparkSettings
from sparkdeploy.inventory import Inventory, build_inventory, load_inventory
from sparkdeploy.knowledge.flags import available_versions, check_flags
from sparkdeploy.knowledge.model_class import ModelClass, UnknownModel
from tests.unit import model_configs as cfg
from tools.docs.inventory import EXAMPLE, ROOT, TARGET, inventory_reference, main, tables

PAGES = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    *sorted((ROOT / "examples").glob("*.md")),
]
EXAMPLES = sorted((ROOT / "examples").glob("*.yml"))
SCHEMA_LINE = "# yaml-language-server: $schema=../docs/inventory.schema.json"
# The laptop's environment as the docs assume it: the API key exported (docs/api-key.md).
ENVIRON = {"SPARK_API_KEY": "0123456789abcdef" * 4}

# config.json samples of the models the examples name (tests/unit/model_configs.py), so the
# GB10 rules scoped to a model class judge them as on a laptop that reaches the Hub; other
# models read as unknown, as offline (those rules then warn).
MODELS: dict[str, dict[str, Any]] = {
    "mistralai/Mistral-Small-4-119B-2603-NVFP4": cfg.MISTRAL_SMALL_4,  # from model_base_repo
    "Qwen/Qwen3-8B": cfg.QWEN3_DENSE,
    "MiniMaxAI/MiniMax-M2.5": cfg.MINIMAX_M2_FP8,
}


def read_model(spark: SparkSettings) -> ModelClass | UnknownModel:
    """The model class stand-in for ``config/model_source.read_model_class``: no network."""
    config = MODELS.get(spark.model_repo or "")
    if config is None:
        return UnknownModel("offline test: no config.json sample for this model")
    return ModelClass.from_config(config, source=f"{spark.model_repo} (tests/unit/model_configs)")


LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def test_committed_reference_is_what_the_models_generate():
    assert TARGET.read_text(encoding="utf-8") == inventory_reference(), (
        "docs/inventory.md is out of date: run .venv/bin/python -m tools.docs"
    )


def test_check_mode_says_whether_the_file_is_current(capsys):
    assert main(["--check"]) == 0
    assert "up to date" in capsys.readouterr().out


def sections(text: str) -> dict[str, str]:
    """Level-2 heading -> the text under it."""
    parts = re.split(r"^## (.+)$", text, flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2]))


@pytest.mark.parametrize("table", tables(), ids=lambda table: table.model.__name__)
def test_every_field_has_a_row_in_its_section(table):
    text = sections(TARGET.read_text(encoding="utf-8"))[table.heading]
    for key in table.model.model_fields:
        assert f"\n| `{key}` | " in text, f"docs/inventory.md, {table.heading}: no row for {key}"


def test_computed_defaults_show_what_each_engine_gets():
    engine = sections(TARGET.read_text(encoding="utf-8"))["Engine keys"]
    assert "| `port` | int (1 to 65535) | sglang: `30000`; vllm: `8000` |" in engine
    assert "| `version` | str | sglang: `0.5.10`; vllm: `0.33.0` |" in engine


def test_example_inventory_is_valid():
    inventory = build_inventory(yaml.safe_load(EXAMPLE), "docs/inventory.md", read_model)
    assert list(inventory.sparks) == ["spark-1", "spark-2"]
    assert all(plan is not None for plan in inventory.engine_plans.values())


def anchors(page: Path) -> set[str]:
    """The anchors GitHub gives a page's headings."""
    headings = re.findall(
        r"^#+ (.+)$", FENCE.sub("", page.read_text(encoding="utf-8")), flags=re.MULTILINE
    )
    return {re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-") for heading in headings}


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_relative_links_point_to_files_that_exist(page):
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    targets = [target for target in LINK.findall(text) if not re.match(r"[a-z]+:", target)]
    assert targets or page.name != "README.md"
    for target in targets:
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        assert linked.exists(), f"{page.name}: link to {target}: no such file"
        if anchor:
            assert anchor in anchors(linked), f"{page.name}: link to {target}: no such heading"


RELEASES = re.compile(r"^# releases: (sglang|vllm) ([\w.]+)(?: - ([\w.]+))?$", re.MULTILINE)
YAML_FENCE = re.compile(r"^```yaml\n(.*?)^```", re.MULTILINE | re.DOTALL)
DOC_EXAMPLES = [
    (page, block)
    for page in PAGES
    for block in YAML_FENCE.findall(page.read_text(encoding="utf-8"))
    if RELEASES.search(block)
]


def test_the_engine_docs_have_examples_with_their_releases():
    assert len([page for page, _ in DOC_EXAMPLES if page.name == "engines.md"]) >= 4


@pytest.mark.parametrize(
    ("page", "block"),
    DOC_EXAMPLES,
    ids=[f"{page.name}-{i}" for i, (page, _) in enumerate(DOC_EXAMPLES)],
)
def test_every_engine_example_passes_each_release_it_names(page, block, tmp_path):
    """An example's flags pass the catalogue of every release in its `# releases:` range,
    and the example itself plans (files it ships are made beside a stand-in inventory)."""
    engine_name, first, last = RELEASES.search(block).groups()  # type: ignore[union-attr]
    example = yaml.safe_load(block)
    engine = example["engine"]
    versions = available_versions(engine_name)
    start, end = versions.index(first), versions.index(last or first)
    assert end >= start, block
    for version in versions[start : end + 1]:
        assert check_flags(engine_name, version, engine.get("args") or {}) == [], version
    assert plan_engine_example(engine, tmp_path).engine_plans["spark-1"] is not None


def plan_engine_example(engine: dict[str, Any], folder: Path) -> Inventory:
    """An engine mapping planned on one Spark of a stand-in inventory in ``folder``, with
    the files and mods it ships made there."""
    for item in [*(f["src"] for f in engine.get("files", [])), *engine.get("mods", [])]:
        (folder / item).parent.mkdir(parents=True, exist_ok=True)
        (folder / item).write_text("# shipped by the example\n")
    document = {
        "defaults": {"ssh_user": "nvidia", "model_repo": "org/model", "engine": engine},
        "sparks": {"spark-1": {"ssh_host": "spark-1.local"}},
    }
    return build_inventory(document, str(folder / "sparks.yml"), read_model, ENVIRON)


YAML_BLOCKS = [
    (page, textwrap.dedent(block))
    for page in PAGES
    for block in YAML_FENCE.findall(page.read_text(encoding="utf-8"))
]


def test_the_docs_have_yaml_examples():
    pages = {page.name for page, _ in YAML_BLOCKS}
    assert {"clusters.md", "engines.md", "gpu-services.md", "inventory.md", "mcp.md"} <= pages


@pytest.mark.parametrize(
    ("page", "block"),
    YAML_BLOCKS,
    ids=[f"{page.name}-{i}" for i, (page, _) in enumerate(YAML_BLOCKS)],
)
def test_every_yaml_example_in_the_docs_is_valid(page, block, tmp_path):
    """A whole inventory (top-level `sparks:`) is read as written; an `engine:` mapping
    alone (a fragment of one) is planned on one Spark. Anything else is neither, and fails,
    so a wrong top-level key (`hosts:`) cannot hide in an example."""
    example = yaml.safe_load(block)
    assert isinstance(example, dict), f"{page.name}: not a mapping:\n{block}"
    if "sparks" in example:
        inventory = build_inventory(example, str(tmp_path / "sparks.yml"), read_model, ENVIRON)
        assert inventory.sparks
    else:
        assert set(example) == {"engine"}, (
            f"{page.name}: a YAML example is a whole inventory (with sparks:) or an engine: "
            f"mapping; this one has {sorted(example)}"
        )
        assert plan_engine_example(example["engine"], tmp_path).engine_plans["spark-1"]


def test_the_examples_are_there():
    names = {path.name for path in EXAMPLES}
    assert {
        "one-spark-vllm.yml",
        "sglang-pair.yml",
        "four-sparks-switch.yml",
        "gpu-services.yml",
    } <= names


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda path: path.name)
def test_every_example_loads_through_the_real_loader(path):
    """Read from its file (the strict YAML reader), validated and planned, with no error;
    every Spark with an engine has its plan."""
    inventory = load_inventory(str(path), read_model)
    for name, spark in inventory.sparks.items():
        assert spark.engine is None or inventory.engine_plans.get(name) is not None, name


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda path: path.name)
def test_every_example_points_the_editor_at_the_schema(path):
    first = path.read_text(encoding="utf-8").splitlines()[0]
    assert first == SCHEMA_LINE
    assert (path.parent / first.partition("$schema=")[2]).is_file()


def test_the_examples_readme_names_every_example():
    text = (ROOT / "examples" / "README.md").read_text(encoding="utf-8")
    for path in EXAMPLES:
        assert f"]({path.name})" in text, f"examples/README.md does not link {path.name}"
