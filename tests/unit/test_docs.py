"""The documentation: the generated key reference matches the settings models, its examples
are valid inventories (each engine example against every release it names), and every
relative link in README.md and docs/ leads somewhere."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from sparkdeploy.inventory import build_inventory
from sparkdeploy.knowledge.flags import available_versions, check_flags
from tools.docs.inventory import EXAMPLE, ROOT, TARGET, inventory_reference, main, tables

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
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
    inventory = build_inventory(yaml.safe_load(EXAMPLE), "docs/inventory.md")
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
    for item in [*(f["src"] for f in engine.get("files", [])), *engine.get("mods", [])]:
        (tmp_path / item).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / item).write_text("# shipped by the example\n")
    document = {
        "defaults": {"ssh_user": "nvidia", "model_repo": "org/model", "engine": engine},
        "sparks": {"spark-1": {"ssh_host": "spark-1.local"}},
    }
    inventory = build_inventory(document, str(tmp_path / "sparks.yml"))
    assert inventory.engine_plans["spark-1"] is not None
