"""
Moving bytes on the twins: the engine image and the model folders come from the stand-in
registry and Hub (throttled, each logging the bytes it sent), fetched by Spark-side jobs that
outlive the deploy; a pair fetches each byte once and copies it over the veth "QSFP cable".
"""

from __future__ import annotations

import os
import re
import signal
import time
from collections import Counter

from tests.scenarios.conftest import assert_idempotent
from tests.twins import harness
from tests.twins.fetched import (
    HUB_LOG,
    REGISTRY_LOG,
    blob_size,
    folder_bytes,
    hub_content,
    log_lines,
    registry_blobs,
)
from tests.twins.runner import start_deploy

TOKEN_ENV = harness.HUB_TOKEN_ENV
BIG = "spark-twin/big-model"
BIG_FOLDER = "/opt/models/big-model"
MISTRAL = "/opt/models/Mistral-Small-4-119B-2603-NVFP4"
EAGLE = "/opt/models/Mistral-Small-4-119B-2603-eagle"
# 1 MB/s a request: the 25 MB model and the image's layers take long enough (about 12 s after
# the first bytes) that the next run still finds the jobs at work on a loaded machine (at
# 2 MB/s they had once finished before a deploy started under four workers could attach).
SLOW = "echo 1000000 > /etc/spark-twin/hub-rate && echo 1000000 > /etc/spark-twin/registry-rate"


def checksums(twin: harness.Twin, *folders: str) -> str:
    return twin.exec(
        f"cd / && find {' '.join(folders)} -type f ! -path '*/.cache/*' -print0 | sort -z "
        "| xargs -0 sha256sum"
    ).stdout


def image_id(twin: harness.Twin, image: str) -> str:
    return twin.exec(f"docker image inspect -f '{{{{.Id}}}}' {image}").stdout.strip()


def fetch_units(twin: harness.Twin) -> list[str]:
    listed = twin.exec(
        "systemctl list-units --state=active --plain --no-legend 'spark-fetch@*'", check=False
    ).stdout
    return [line.split()[0] for line in listed.splitlines() if line.strip()]


def wait_for(condition, what: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.5)


class TestPairFetchesEachByteOnce:
    """A fresh pair: the head fetches the image and the model folders from the internet
    once; the other Spark copies them from the head over the link, not from the internet."""

    twins = {
        name: {
            **harness.MODEL,
            "sysfs_root": harness.TWIN_SYSFS,
            "qsfp": harness.qsfp_plan(node),
            "engine": {"name": "sglang"},
        }
        for node, name in ((1, "spark-a"), (2, "spark-b"))
    }

    def test_converge(self, scenario):
        run = scenario.deploy(env=TOKEN_ENV)
        assert run.returncode == 0, run.explain()
        head, other = scenario.twins["spark-a"], scenario.twins["spark-b"]
        # what the head downloaded is its folders, byte for byte, and nothing twice
        assert sum(hub_content(head).values()) == folder_bytes(head, MISTRAL, EAGLE)
        blobs = registry_blobs(head)
        assert blobs and all(sent == blob_size(head, d) for d, sent in blobs.items()), blobs
        # the other Spark asked the internet for nothing
        assert hub_content(other) == Counter() and registry_blobs(other) == Counter()
        assert checksums(other, MISTRAL, EAGLE) == checksums(head, MISTRAL, EAGLE)
        image = "lmsysorg/sglang:nightly-dev-cu13-20260323-999bad5a"
        assert image_id(other, image) == image_id(head, image)
        for line in (
            f"[spark-a] image {image}: done",
            f"[spark-b] image {image} (from spark-a): done",
            f"[spark-b] model {harness.MODEL['model_repo']} (from spark-a): done",
        ):
            assert line in run.stderr, run.stderr[-4000:]
        # the head's server of the copies is gone once the run is done
        assert fetch_units(head) == []

    def test_idempotence_fetches_and_copies_nothing(self, scenario):
        before = {name: (hub_content(t), registry_blobs(t)) for name, t in scenario.twins.items()}
        assert_idempotent(scenario.deploy(env=TOKEN_ENV))
        after = {name: (hub_content(t), registry_blobs(t)) for name, t in scenario.twins.items()}
        assert after == before

    def test_a_folder_lost_on_the_other_spark_comes_from_the_head_again(self, scenario):
        head, other = scenario.twins["spark-a"], scenario.twins["spark-b"]
        before = {name: (hub_content(t), registry_blobs(t)) for name, t in scenario.twins.items()}
        other.exec(f"rm -rf {EAGLE}")
        run = scenario.deploy(env=TOKEN_ENV)
        assert run.returncode == 0, run.explain()
        assert checksums(other, EAGLE) == checksums(head, EAGLE)
        after = {name: (hub_content(t), registry_blobs(t)) for name, t in scenario.twins.items()}
        assert after == before  # nothing from the internet: the head had it
        assert f"[spark-b] model {harness.MODEL['draft_model_repo']} (from spark-a): done" in (
            run.stderr
        )
        assert fetch_units(head) == []  # and the head's server stopped again
        assert_idempotent(scenario.deploy(env=TOKEN_ENV))


class TestInterruptedFetch:
    """A slow link: the laptop goes away in the middle (the jobs go on, the next run attaches);
    then the jobs themselves are killed in the middle (the next run reports it and goes on
    from where they stopped: finished files and layers are not fetched again)."""

    twins = {
        "solo": {
            "model_repo": BIG,
            "engine": {"name": "vllm", "image": "vllm/vllm-openai:v0.33.0"},
        }
    }
    prepare = {"solo": SLOW}

    def test_the_work_goes_on_when_the_laptop_leaves(self, scenario):
        twin = scenario.twins["solo"]
        laptop = start_deploy(scenario.inventory, env=TOKEN_ENV)
        try:
            wait_for(lambda: len(fetch_units(twin)) == 2, "both fetch jobs to run")
            wait_for(lambda: sum(hub_content(twin).values()) > 0, "the first model bytes")
        finally:
            os.killpg(laptop.pid, signal.SIGKILL)  # the laptop is gone, no goodbye
            laptop.wait()
        time.sleep(2)
        assert len(fetch_units(twin)) == 2, "a job stopped with the deploy that started it"
        run = scenario.deploy(env=TOKEN_ENV)
        assert run.returncode == 0, run.explain()
        assert "attaching to spark-fetch@" in run.stderr
        # progress with a total (in kB while the first megabyte is not yet there)
        assert re.search(r"\d (B|kB|MB|GB) of [\d.]+ (kB|MB|GB) \(\d+%\)", run.stderr)
        assert " left" in run.stderr
        # every byte came once: the model's files and the image's blobs
        assert sum(hub_content(twin).values()) == folder_bytes(twin, BIG_FOLDER)
        blobs = registry_blobs(twin)
        assert all(sent == blob_size(twin, digest) for digest, sent in blobs.items()), blobs

    def test_killed_jobs_go_on_from_where_they_stopped(self, scenario):
        twin = scenario.twins["solo"]
        image = "vllm/vllm-openai:v0.33.0"
        twin.exec(
            "systemctl stop spark-engine-vllm.service && docker rm -f spark-engine-vllm"
            f" && docker rmi {image} && rm -rf {BIG_FOLDER} /var/lib/spark-deploy/images"
            f" && : > {HUB_LOG} && : > {REGISTRY_LOG}"
        )
        laptop = start_deploy(scenario.inventory, env=TOKEN_ENV)
        # the first (2 MB) layer is whole, the bigger two are not
        wait_for(lambda: len(registry_blobs(twin)) >= 2, "a whole layer")
        finished_files = set(
            twin.exec(f"cd {BIG_FOLDER} && ls", check=False).stdout.split()
        )  # hf renames a file to its name once it is whole
        finished_blobs = set(registry_blobs(twin))
        twin.exec("systemctl kill --signal=SIGKILL 'spark-fetch@*'")
        output, _ = laptop.communicate(timeout=120)
        assert laptop.returncode != 0
        assert "failed on the Spark" in output and "journalctl -u spark-fetch@" in output
        hub_before, registry_before = (
            len(log_lines(twin, HUB_LOG)),
            len(log_lines(twin, REGISTRY_LOG)),
        )
        run = scenario.deploy(env=TOKEN_ENV)
        assert run.returncode == 0, run.explain()
        assert "the last attempt:" in run.stderr and "retrying now" in run.stderr
        hub_after = [line[2] for line in log_lines(twin, HUB_LOG)[hub_before:]]
        for name in finished_files:  # a finished file is not fetched again
            assert not any(target.endswith(f"/{name}") for target in hub_after), name
        registry_after = log_lines(twin, REGISTRY_LOG)[registry_before:]
        again = {path.rsplit("/", 1)[1]: rng for _, path, _, _, rng in registry_after}
        layers = {d for d in finished_blobs if blob_size(twin, d) > 100_000}  # not configs
        assert not layers & {d for d, rng in again.items() if rng == "-"}
        assert any(rng.startswith("bytes=") for rng in again.values()), registry_after
        # a resumed blob is sent from its offset to its end, once: the bytes the killed
        # pull had not yet written (in the sockets' buffers) are the only ones sent twice
        for _, path, status, sent, rng in registry_after:
            if rng.startswith("bytes="):
                digest, start = path.rsplit("/", 1)[1], int(rng[6:].split("-")[0])
                assert status == "206" and start > 0, (path, rng, status)
                assert int(sent) == blob_size(twin, digest) - start, (path, rng, sent)

    def test_idempotence(self, scenario):
        assert_idempotent(scenario.deploy(env=TOKEN_ENV))


class TestDiskTooSmall:
    """A model folder on a file system without room for the model is refused before any
    download, with both numbers."""

    twins = {"small": {"model_repo": BIG}}
    prepare = {"small": "mkdir -p /opt/models && mount -t tmpfs -o size=16m tmpfs /opt/models"}

    def test_refused_before_any_download(self, scenario):
        run = scenario.deploy(env=TOKEN_ENV)
        assert run.returncode != 0
        assert f"not enough disk for {BIG} (" in run.stderr, run.stderr[-3000:]
        assert "more at /opt/models, which has " in run.stderr and " free (keeping" in run.stderr
        assert hub_content(scenario.twins["small"]) == Counter()


class TestImageRefusesAFlag:
    """An image whose engine is older than the release the inventory names: the flag the
    newer release has and the image's engine does not is refused before the unit is
    written; naming the right release fixes it."""

    engine = {
        "name": "sglang",
        "image": "spark-twin/sglang-custom:2026-04",
        "version": "0.5.14",
        "launch": "command",
    }
    twins = {"custom": {**harness.MODEL, "engine": engine}}
    unit = "/etc/systemd/system/spark-engine-sglang.service"

    def test_refused_before_the_unit_changes(self, scenario):
        run = scenario.deploy(env=TOKEN_ENV)
        assert run.returncode != 0
        assert (
            "--cuda-graph-max-bs-decode: the engine in spark-twin/sglang-custom:2026-04"
        ) in run.stderr, run.stderr[-3000:]
        assert "sglang 0.5.10) does not accept it" in run.stderr
        assert scenario.twins["custom"].read(self.unit) is None

    def test_the_release_the_image_holds_serves(self, scenario):
        twin = scenario.twins["custom"]
        twin.data["engine"] = {**self.engine, "version": "0.5.10"}
        scenario.write_inventory()
        run = scenario.deploy(env=TOKEN_ENV)
        assert run.returncode == 0, run.explain()
        assert "--cuda-graph-max-bs " in twin.read(self.unit)
        assert_idempotent(scenario.deploy(env=TOKEN_ENV))
