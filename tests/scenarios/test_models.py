"""Model folders against the twin's stand-in Hub: download once, repair, verify, never again."""

from __future__ import annotations

from tests.scenarios.conftest import assert_idempotent
from tests.twins import harness

NVFP4 = "/opt/models/Mistral-Small-4-119B-2603-NVFP4"
EAGLE = "/opt/models/Mistral-Small-4-119B-2603-eagle"
HUB = "/opt/spark-twin/hub"
BASE = f"{HUB}/mistralai/Mistral-Small-4-119B-2603"
HUB_LOG = "/var/log/spark-twin-hub.log"
TOKEN_ENV = harness.HUB_TOKEN_ENV
REIMAGE = (
    "rm -rf /opt/spark-deploy /usr/local/bin/hf /etc/spark-deploy /home/spark/.cache"
    " /etc/profile.d/spark-deploy-hf.sh /usr/local/sbin/spark-*"
    " && apt-mark unhold nvidia-driver-580-open >/dev/null"
    " && cp /opt/spark-twin/standins/zz-nvidia-drm-override.conf /etc/modprobe.d/"
)


def hub_requests(twin: harness.Twin) -> list[str]:
    return (twin.read(HUB_LOG) or "").splitlines()


def content_downloads(lines: list[str]) -> list[str]:
    """Requests that fetched file content (not metadata)."""
    return [
        line
        for line in lines
        if line.startswith(("hub GET", "cdn GET"))
        and ("/resolve/" in line or line.startswith("cdn GET"))
    ]


class TestModelFolder:
    twins = {"models": dict(harness.MODEL)}

    def test_converge(self, scenario):
        run = scenario.deploy(env=TOKEN_ENV)
        assert run.returncode == 0, run.explain()
        twin = scenario.twins["models"]
        for name in ("config.json", "tokenizer.json"):  # the release omits them: repaired
            assert twin.read(f"{NVFP4}/{name}") == twin.read(f"{BASE}/{name}")
        for shard in ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"):
            assert (
                twin.exec(
                    f"cmp {NVFP4}/{shard} {HUB}/mistralai/Mistral-Small-4-119B-2603-NVFP4/{shard}"
                ).returncode
                == 0
            )
        assert twin.read(f"{NVFP4}/.spark-deploy-complete").strip() == (
            "mistralai/Mistral-Small-4-119B-2603-NVFP4@main"
        )
        assert twin.read(f"{EAGLE}/.spark-deploy-complete").strip() == (
            "mistralai/Mistral-Small-4-119B-2603-eagle@main"
        )
        assert twin.exec(f"stat -c %U {NVFP4}/config.json").stdout.strip() == "spark"

    def test_idempotence_contacts_no_hub(self, scenario):
        twin = scenario.twins["models"]
        before = hub_requests(twin)
        assert_idempotent(scenario.deploy(env=TOKEN_ENV))
        assert hub_requests(twin) == before

    def test_reimage_keeps_the_model_disk(self, scenario):
        twin = scenario.twins["models"]
        twin.exec(REIMAGE)
        before = hub_requests(twin)
        run = scenario.deploy(env=TOKEN_ENV)
        assert run.returncode == 0, run.explain()
        assert "Install the hf command (2.4.0)" in " ".join(run.changed()["models"])
        assert hub_requests(twin) == before, "a complete folder was fetched again"
        assert_idempotent(scenario.deploy(env=TOKEN_ENV))

    def test_repair_fetches_only_what_is_missing(self, scenario):
        twin = scenario.twins["models"]
        twin.exec(f"rm {NVFP4}/config.json")
        tokenizer_before = twin.exec(f"stat -c '%i %Y' {NVFP4}/tokenizer.json").stdout
        before = len(hub_requests(twin))
        run = scenario.deploy(env=TOKEN_ENV)
        assert run.returncode == 0, run.explain()
        fetched = content_downloads(hub_requests(twin)[before:])
        assert len(fetched) == 1 and "Mistral-Small-4-119B-2603/resolve/" in fetched[0]
        assert fetched[0].split()[2].endswith("/config.json")
        assert twin.read(f"{NVFP4}/config.json") == twin.read(f"{BASE}/config.json")
        assert twin.exec(f"stat -c '%i %Y' {NVFP4}/tokenizer.json").stdout == tokenizer_before
        assert_idempotent(scenario.deploy(env=TOKEN_ENV))


class TestIncompleteRelease:
    """Without a base repository the NVFP4 release cannot be completed: a clear error, no seal;
    naming the base repository fixes it."""

    twins = {"norepair": {"model_repo": harness.MODEL["model_repo"]}}

    def test_verify_names_what_is_missing(self, scenario):
        run = scenario.deploy(env=TOKEN_ENV)
        assert run.returncode != 0
        assert (
            f"model folder {NVFP4} is incomplete after download: config.json, tokenizer.json"
        ) in run.stderr
        twin = scenario.twins["norepair"]
        assert twin.exec(f"test -e {NVFP4}/.spark-deploy-complete", check=False).returncode != 0

    def test_base_repo_repairs_it(self, scenario):
        scenario.twins["norepair"].data["model_base_repo"] = harness.MODEL["model_base_repo"]
        scenario.write_inventory()
        run = scenario.deploy(env=TOKEN_ENV)
        assert run.returncode == 0, run.explain()
        assert_idempotent(scenario.deploy(env=TOKEN_ENV))


class TestGatedModel:
    """A gated repository downloads with the operator's token, and not without it."""

    twins = {"gated": {"model_repo": "acme/gated-model"}}

    def test_refused_without_token(self, scenario):
        run = scenario.deploy()
        assert run.returncode != 0
        assert "GatedRepo" in run.stderr or "gated" in run.stderr.lower(), run.stderr[-2000:]

    def test_downloads_with_token(self, scenario):
        run = scenario.deploy(env=TOKEN_ENV)
        assert run.returncode == 0, run.explain()
        assert_idempotent(scenario.deploy(env=TOKEN_ENV))
