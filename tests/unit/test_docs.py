"""The documentation: the generated key reference matches the settings models, its example
is a valid inventory, and every relative link in README.md and docs/ leads somewhere."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from sparkdeploy.inventory import build_inventory
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
