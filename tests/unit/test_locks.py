"""The hash locks of the venvs the deploy makes as root (knowledge/locks.py, tools/lock):
every package pinned with the sha256 of its wheels, installed with pip's hash-checking mode
and wheels only."""

from __future__ import annotations

import re

import pytest

from sparkdeploy.knowledge.locks import (
    LOCKS,
    LockError,
    parse_lock,
    pip_install,
    read_lock,
    top_level,
)
from tools.lock import TARGETS, Target, render

SHIPPED = sorted(LOCKS.glob("*.txt"))


def test_a_lock_is_shipped_for_the_default_hf_and_mcp_releases():
    from sparkdeploy.config.spark import SparkSettings

    defaults = SparkSettings.model_fields
    for tool, key in (("hf-cli", "hf_cli_version"), ("mcp", "mcp_sdk_version")):
        assert read_lock(tool, str(defaults[key].default)).pins


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_every_line_of_a_shipped_lock_is_a_pin_with_a_hash_for_each_wheel(path):
    tool, version = path.stem.rsplit("-", 1)
    lock = read_lock(tool, version)
    assert lock.pins and set(lock.pins) == set(lock.hashes)
    for name, hashes in lock.hashes.items():
        assert hashes, f"{path.name}: {name} has no --hash"
        assert all(re.fullmatch(r"[0-9a-f]{64}", h) for h in hashes)
    for wanted in top_level(tool, version):
        name, _, release = wanted.partition("==")
        assert lock.pins[name.lower()] == release
    requirement_lines = [
        line for line in path.read_text().splitlines() if line and line[0] not in "# "
    ]
    assert len(requirement_lines) == len(lock.pins)
    assert all(re.search(r"==\S+( ;.*)? \\$", line) for line in requirement_lines)


def test_the_install_takes_hashes_and_wheels_only():
    command = pip_install("/opt/v", "/opt/v/spark-deploy.lock.new")
    assert "--require-hashes --only-binary :all: -r /opt/v/spark-deploy.lock.new" in command


def test_a_line_without_a_pin_or_a_lock_of_another_set_is_refused(tmp_path, monkeypatch):
    with pytest.raises(LockError, match="unreadable line"):
        parse_lock("hf-cli", "huggingface_hub>=2 \\\n    --hash=sha256:" + "a" * 64 + "\n")
    monkeypatch.setattr("sparkdeploy.knowledge.locks.LOCKS", tmp_path / "knowledge" / "locks")
    (tmp_path / "knowledge" / "locks").mkdir(parents=True)
    (tmp_path / "knowledge" / "locks" / "hf-cli-2.4.0.txt").write_text(
        "# top: huggingface_hub==2.3.0\nhuggingface_hub==2.3.0 \\\n    --hash=sha256:"
        + "a" * 64
        + "\n"
    )
    with pytest.raises(LockError, match=r"not huggingface_hub==2.4.0 .*tools.lock hf-cli"):
        read_lock("hf-cli", "2.4.0")


def test_the_tool_marks_a_package_only_some_targets_need(monkeypatch):
    monkeypatch.setattr("tools.lock.wheel_hashes", lambda name, version: ["b" * 64, "a" * 64])
    spark, twin = TARGETS[0], Target("3.10", "x86_64", "2_36", "old")
    text = render("hf-cli", ["x==1"], {spark: {"x": "1"}, twin: {"x": "1", "tomli": "2"}})
    lock = parse_lock("hf-cli", text)
    assert lock.pins == {"x": "1", "tomli": "2"} and set(lock.hashes["x"]) == {"a" * 64, "b" * 64}
    assert 'tomli==2 ; (python_version == "3.10" and platform_machine == "x86_64") \\' in text
    assert "x==1 \\" in text
