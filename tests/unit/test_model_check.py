"""files/model_check.py: what makes a model folder complete."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

CHECK = Path(__file__).resolve().parents[2] / "sparkdeploy" / "files" / "model_check.py"
WANT = "org/model@main"


def run(*args: str):
    return subprocess.run([sys.executable, str(CHECK), *args], capture_output=True, text=True)


def check(folder: Path, tokenizer: bool = True) -> dict:
    done = run(str(folder), WANT, "1" if tokenizer else "0")
    return json.loads(done.stdout)


def sharded(folder: Path) -> Path:
    folder.mkdir()
    (folder / "model.safetensors.index.json").write_text(
        json.dumps(
            {
                "weight_map": {
                    "a": "model-00001-of-00002.safetensors",
                    "b": "model-00002-of-00002.safetensors",
                }
            }
        )
    )
    for name in (
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
        "config.json",
        "tokenizer.json",
    ):
        (folder / name).write_text("x")
    return folder


def test_missing_folder(tmp_path):
    assert check(tmp_path / "none") == {
        "folder": str(tmp_path / "none"),
        "exists": False,
        "marker": "",
        "missing": [],
        "empty": [],
    }


def test_complete_only_after_sealing(tmp_path):
    folder = sharded(tmp_path / "m")
    before = check(folder)
    assert before["missing"] == [] and before["empty"] == [] and before["complete"] is False
    sealed = run("--seal", str(folder), WANT, "1")
    assert sealed.returncode == 0, sealed.stderr
    assert check(folder)["complete"] is True
    assert check(folder)["marker"] == WANT
    assert run(str(folder), "org/model@v2", "1").stdout.count('"complete": false') == 1


def test_missing_shard_and_empty_tokenizer_block_the_seal(tmp_path):
    folder = sharded(tmp_path / "m")
    (folder / "model-00002-of-00002.safetensors").unlink()
    (folder / "tokenizer.json").write_text("")
    result = check(folder)
    assert result["missing"] == ["model-00002-of-00002.safetensors"]
    assert result["empty"] == ["tokenizer.json"]
    sealed = run("--seal", str(folder), WANT, "1")
    assert sealed.returncode == 1
    assert "model-00002-of-00002.safetensors, tokenizer.json (empty)" in sealed.stderr
    assert not (folder / ".spark-deploy-complete").exists()


def test_draft_needs_no_tokenizer_but_weights(tmp_path):
    folder = tmp_path / "draft"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    assert check(folder, tokenizer=False)["missing"] == ["*.safetensors"]
    (folder / "model.safetensors").write_text("x")
    assert check(folder, tokenizer=False)["missing"] == []
    assert check(folder, tokenizer=True)["missing"] == ["tokenizer.json"]
