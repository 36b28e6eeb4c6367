"""
A recipe the field runs, end to end on a twin: vLLM in NVIDIA's NGC container (its wrapper
entrypoint kept, `vllm serve` as the command), flags in the spellings operators publish
(`_` for `-`, dotted keys of --speculative-config), and a chat template shipped from the
laptop and mounted read-only. The stand-in engine parses the command line with the flag
catalogue of vLLM 0.20.1, the release the image holds, so a flag that release does not take
would stop it. A second run changes nothing.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.scenarios.conftest import assert_idempotent
from tests.twins import harness

UNIT = "spark-engine-vllm.service"
IMAGE = "nvcr.io/nvidia/vllm:26.05-py3"  # vLLM 0.20.1 (NGC release notes)
TEMPLATE = Path(__file__).with_name("files") / "chat-template.jinja"
SHIPPED = "/var/lib/spark-deploy/engine-files/spark-engine-vllm/01-chat-template.jinja"


class TestNgcRecipe:
    twins = {
        "ngc": {
            # n-gram speculation needs no draft model
            **{key: value for key, value in harness.MODEL.items() if key != "draft_model_repo"},
            "engine": {
                "name": "vllm",
                "image": IMAGE,
                "args": {
                    "--max_num_seqs": 4,
                    "--speculative-config.method": "ngram",
                    "--speculative-config.num_speculative_tokens": 4,
                    "--speculative-config.prompt_lookup_max": 4,
                    "--chat-template": "/templates/chat.jinja",
                },
                "files": [{"src": str(TEMPLATE), "dest": "/templates/chat.jinja"}],
            },
        }
    }

    def test_converge(self, scenario):
        # files are shipped only from below the inventory's folder (docs/security.md): the
        # operator keeps the template beside the inventory, as the recipe's folder has it
        beside = scenario.inventory.parent / TEMPLATE.name
        shutil.copyfile(TEMPLATE, beside)
        twin = scenario.twins["ngc"]
        engine = {
            **twin.data["engine"],
            "files": [{"src": str(beside), "dest": "/templates/chat.jinja"}],
        }
        twin.data = {**twin.data, "engine": engine}
        scenario.write_inventory()
        run = scenario.deploy(env=harness.HUB_TOKEN_ENV)
        assert run.returncode == 0, run.explain()
        assert "[ngc] spark-engine-health: ready after" in run.stderr

    def test_idempotence(self, scenario):
        assert_idempotent(scenario.deploy(env=harness.HUB_TOKEN_ENV))

    def test_the_wrapper_runs_vllm_serve_with_the_flags_as_the_release_reads_them(self, scenario):
        twin = scenario.twins["ngc"]
        unit = twin.exec(f"systemctl cat {UNIT}").stdout
        start = next(line for line in unit.splitlines() if line.startswith("ExecStart="))
        assert f" {IMAGE} vllm serve --model " in start and "--entrypoint" not in start
        assert "--max-num-seqs 4" in start and "--max_num_seqs" not in start
        assert f"-v {SHIPPED}:/templates/chat.jinja:ro" in start
        engine = twin.exec("pgrep -af '[e]ngine.py vllm serve'").stdout
        assert "--max-num-seqs 4" in engine and "--chat-template /templates/chat.jinja" in engine
        speculative = '{"method":"ngram","num_speculative_tokens":4,"prompt_lookup_max":4}'
        assert f"--speculative-config {speculative}" in engine

    def test_the_template_is_shipped_whole_and_read_only_for_the_engine(self, scenario):
        twin = scenario.twins["ngc"]
        assert twin.exec(f"cat {SHIPPED}").stdout == TEMPLATE.read_text()
        assert twin.exec(f"stat -c '%a %U' {SHIPPED}").stdout.strip() == "644 root"
