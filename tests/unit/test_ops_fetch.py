"""Fetch jobs (image and model folders): facts in, the jobs started out; the laptop's watch
of them against statuses as spark-fetch prints them; the plan against its image."""

from __future__ import annotations

import inspect
import json
from dataclasses import dataclass, field, replace
from typing import Any
from unittest import mock

import pytest
from pyinfra.api import OperationError

from sparkdeploy.config.paths import FETCH_BIN, FETCH_JOBS
from sparkdeploy.deploys.engine.serve import image_accepts
from sparkdeploy.deploys.fetch import jobs as fetch
from sparkdeploy.deploys.fetch.progress import job_line, progress_line
from sparkdeploy.engine_plan.image_check import ImageReading, flag_names, image_problems
from sparkdeploy.facts.host_state import SparkHostState
from sparkdeploy.render import FILES
from tests.unit.operations import given, host_state, run, spark

MODEL = "/opt/models/Mistral-Small-4-119B-2603-NVFP4"
DRAFT = "/opt/models/Mistral-Small-4-119B-2603-eagle"
REPOS = {
    "model_repo": "mistralai/Mistral-Small-4-119B-2603-NVFP4",
    "model_base_repo": "mistralai/Mistral-Small-4-119B-2603",
    "draft_model_repo": "mistralai/Mistral-Small-4-119B-2603-eagle",
}
IMAGE = "lmsysorg/sglang:nightly-dev-cu13-20260323-999bad5a"


def jobs_of(host) -> list[fetch.FetchJob]:
    plan = host.data.get("engine_plan")
    return [
        *([fetch.image_job(plan)] if plan else []),
        *fetch.model_jobs(host.data.spark, "nvidia"),
    ]


def complete(*folders: str) -> dict[str, dict]:
    return {folder: {"folder": folder, "complete": True} for folder in folders}


# --- which jobs start --------------------------------------------------------------------


def test_everything_on_the_spark_is_a_noop():
    host = spark(**REPOS, engine={"name": "sglang"})
    reading = {"id": "sha256:ab", "engine": "sglang", "flags": []}
    given(
        host,
        SparkHostState,
        host_state(models=complete(MODEL, DRAFT), image_id="sha256:ab", image_reading=reading),
    )
    outcome = run(fetch.fetched, host, jobs=jobs_of(host))
    assert outcome.commands == []
    assert outcome.noop == "every image and model folder is on the Spark"


def test_only_what_is_missing_is_fetched():
    host = spark(**REPOS, engine={"name": "sglang"})
    reading = {"id": "sha256:ab", "engine": "sglang", "flags": []}
    given(
        host,
        SparkHostState,
        host_state(models=complete(MODEL), image_id="sha256:ab", image_reading=reading),
    )
    outcome = run(fetch.fetched, host, jobs=jobs_of(host), timeout=60)
    assert outcome.commands == ["call _fetch"]
    [callback] = outcome.callbacks
    missing, timeout, serving, head = callback.args
    assert [job.spec.get("folder") for job in missing] == [DRAFT] and timeout == 60
    assert serving == [] and head == ""


@pytest.mark.parametrize(
    "image_id, reading",
    [
        ("", None),  # not pulled
        ("sha256:ab", None),  # pulled (or loaded by hand) but never read
        ("sha256:ab", {"id": "sha256:ab", "engine": "vllm"}),  # read for another engine
    ],
)
def test_an_image_not_there_or_not_read_for_this_engine_is_fetched(image_id, reading):
    host = spark(**REPOS, engine={"name": "sglang"})
    given(
        host,
        SparkHostState,
        host_state(models=complete(MODEL, DRAFT), image_id=image_id, image_reading=reading),
    )
    outcome = run(fetch.fetched, host, jobs=jobs_of(host))
    [callback] = outcome.callbacks
    assert [job.kind for job in callback.args[0]] == ["image"]


def test_the_specs_say_what_each_job_fetches_and_how():
    host = spark(**REPOS, engine={"name": "sglang"}, hf_endpoint="https://hub.example.org")
    image, model, draft = jobs_of(host)
    assert image.spec == {
        "kind": "image",
        "label": f"image {IMAGE}",
        "image": IMAGE,
        "engine": "sglang",
        "read_script": image.spec["read_script"],
        "readings": "/var/lib/spark-deploy/images",
        "docker_config": "",
        "user": "",
    }
    # their docker logins, read only from a regular file the operator owns (issue 22: the
    # spec had no user, and root's docker read their whole ~/.docker)
    with_home = fetch.image_job(host.data.engine_plan, "/home/nvidia", "nvidia")
    assert with_home.spec["docker_config"] == "/home/nvidia/.docker"
    assert with_home.spec["user"] == "nvidia"
    assert "python3 -m sglang.launch_server --help" in image.spec["read_script"]
    assert model.spec["repo"] == REPOS["model_repo"] and model.spec["folder"] == MODEL
    assert model.spec["base_repo"] == REPOS["model_base_repo"] and model.spec["needs_tokenizer"]
    assert draft.spec["base_repo"] is None and not draft.spec["needs_tokenizer"]
    assert model.spec["env"] == {
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "HF_HUB_DISABLE_UPDATE_CHECK": "1",
        "HF_HUB_DISABLE_XET": "1",
        "HF_ENDPOINT": "https://hub.example.org",
    }
    assert model.spec["user"] == host.data.spark.user
    assert model.spec["hf_venv"] == "/opt/spark-deploy/hf-cli"
    assert model.spec["model_check"] == "/usr/local/sbin/spark-model-check"


def test_job_ids_are_plain_unit_instances_unique_to_what_they_fetch():
    first = fetch.job_id("model", "/opt/models/Org.Model_v2")
    second = fetch.job_id("model", "/opt/models/org-model-v2")
    assert first.startswith("model-org-model-v2-") and second.startswith("model-org-model-v2-")
    assert first != second
    for value in (first, second, fetch.job_id("image", "nvcr.io/nvidia/vllm:26.05-py3")):
        assert all(c.isdigit() or c == "-" or "a" <= c <= "z" for c in value)
        assert len(value) <= 64


def test_the_start_command_writes_each_spec_and_starts_only_a_job_not_running():
    host = spark(**REPOS)
    [model, _] = fetch.model_jobs(host.data.spark, "nvidia")
    command = fetch.start_command([model])
    spec = f"{FETCH_JOBS}/{model.id}.json"
    lines = command.splitlines()
    assert lines[0] == "set -e" and lines[1] == f"install -d -m 755 {FETCH_JOBS}"
    assert lines[2].startswith("printf '%s\\n' '{") and lines[2].endswith(f"' > {spec}.tmp")
    assert lines[3] == f"mv -f {spec}.tmp {spec}"
    assert lines[4] == (
        f"systemctl is-active -q {model.unit} || {{ rm -f {FETCH_JOBS}/{model.id}.status.json;"
        f" systemctl reset-failed {model.unit} 2>/dev/null || true; systemctl start {model.unit}; }}"
    )


# --- the watch -------------------------------------------------------------------------


@dataclass
class Output:
    stdout: str = ""
    stderr: str = ""


@dataclass
class Spark:
    """A host whose spark-fetch answers with the given statuses, one list per look."""

    looks: list[list[dict[str, Any]]]
    name: str = "spark-1"
    print_prefix: str = "[spark-1] "
    commands: list[str] = field(default_factory=list)

    def run_shell_command(self, command, _sudo=False):
        text = command.get_raw_value() if hasattr(command, "get_raw_value") else str(command)
        self.commands.append(text)
        if text.startswith(FETCH_BIN):
            statuses = self.looks.pop(0) if len(self.looks) > 1 else self.looks[0]
            return True, Output("\n".join(json.dumps(s) for s in statuses))
        return True, Output()


# The fetch itself, raising: pyinfra runs it through reports.failures.expected, which turns
# the raise into a failed operation without a traceback.
fetch_raising = inspect.unwrap(fetch._fetch)


def watching(looks, jobs, timeout=600, clock=None):
    spark_ = Spark(looks)
    logged: list[str] = []
    sink = mock.Mock(info=logged.append, warning=logged.append)
    with (
        mock.patch.object(fetch, "logger", sink),
        mock.patch.object(fetch.gevent, "sleep", lambda _: None),
        mock.patch.object(fetch.time, "monotonic", clock or iter(range(0, 10**6, 10)).__next__),
    ):
        fetch_raising(mock.Mock(failed_hosts=set()), spark_, jobs, timeout, [])
    return spark_, logged


def a_model_job() -> fetch.FetchJob:
    return fetch.model_jobs(spark(**REPOS).data.spark, "nvidia")[0]


def status(job, **values) -> dict[str, Any]:
    return {"id": job.id, "label": job.label, "unit": "active", **values}


def test_progress_is_shown_until_the_job_is_done():
    job = a_model_job()
    looks = [
        [status(job, unit="inactive", state="none")],  # before the start
        [status(job, state="running", phase="download", done=10**9, total=4 * 10**9, rate=10**8)],
        [
            status(
                job,
                unit="inactive",
                state="done",
                phase="done",
                total=4 * 10**9,
                started=0,
                finished=40,
            )
        ],  # fmt: skip
    ]
    spark_, logged = watching(looks, [job])
    assert any(command.startswith("set -e") for command in spark_.commands)
    assert any(
        "model mistralai/Mistral-Small-4-119B-2603-NVFP4: 1.0 GB of 4.0 GB (25%), "
        "100.0 MB/s, 30s left" in line
        for line in logged
    ), logged
    assert logged[-1].endswith("done, 4.0 GB in 40s (100.0 MB/s)")


def test_off_a_terminal_a_long_fetch_logs_a_line_a_minute_not_one_per_look():
    job = a_model_job()
    running = [
        status(job, state="running", phase="download", done=n * 10**8, total=4 * 10**9, rate=1)
        for n in range(30)
    ]  # 30 looks, the clock 10 s further at each reading of it: 20 s a look, 10 minutes
    done = status(job, unit="inactive", state="done", phase="done", total=4 * 10**9)
    _, logged = watching([[s] for s in running] + [[done]], [job], timeout=10**5)
    progress = [line for line in logged if "% " in line or "%)" in line]
    assert 9 <= len(progress) <= 11, progress


def test_a_running_job_is_attached_to_and_an_earlier_failure_reported_before_the_retry():
    job, other = fetch.model_jobs(spark(**REPOS).data.spark, "nvidia")
    before = [
        status(job, state="running", phase="download", done=10**9, total=4 * 10**9, rate=10**8),
        status(other, unit="failed", state="failed", error="hf download failed", lines=["boom"]),
    ]
    done = [status(j, unit="inactive", state="done") for j in (job, other)]
    _, logged = watching([before, done], [job, other])
    # where it stands, at once: the job may end before the first progress line
    assert logged[0].endswith(
        f"attaching to {job.unit}, still running: model {REPOS['model_repo']}: "
        "1.0 GB of 4.0 GB (25%), 100.0 MB/s, 30s left"
    ), logged[0]
    assert "the last attempt: model" in logged[1] and "hf download failed" in logged[1]
    assert "\n    boom" in logged[1] and "retrying now" in logged[1]


def test_a_failed_job_fails_the_run_with_its_lines_and_how_to_follow_it():
    job = a_model_job()
    failed = status(
        job, unit="failed", state="failed", error="not enough disk", lines=["line one", "line two"]
    )
    with pytest.raises(OperationError) as caught:
        watching([[status(job, unit="inactive", state="none")], [failed]], [job])
    text = str(caught.value)
    assert "failed on the Spark: not enough disk" in text
    assert "\n    line one\n    line two" in text
    assert f"journalctl -u {job.unit}" in text and "retries it from where it stopped" in text


def test_a_job_that_never_wrote_a_status_and_stopped_is_a_failure():
    job = a_model_job()
    with pytest.raises(OperationError, match="did not start"):
        watching([[status(job, unit="inactive", state="none")]], [job])


def test_the_wait_is_bounded_and_says_how_to_follow_and_attach():
    job = a_model_job()
    running = status(job, state="running", phase="download", done=1, total=10, rate=1)
    with pytest.raises(OperationError) as caught:
        watching([[running]], [job], timeout=25)
    text = str(caught.value)
    assert "still fetching after 25 s (fetch_timeout)" in text
    assert f"journalctl -f -u {job.unit}" in text and "run the deploy again to attach" in text


# --- progress lines --------------------------------------------------------------------


def test_a_terminal_gets_a_bar_and_a_log_plain_text():
    line = {"label": "image x", "phase": "pull", "done": 5 * 10**8, "total": 10**9, "rate": 0}
    assert job_line(line, terminal=True) == (
        "image x: [##########..........] 500.0 MB of 1.0 GB (50%), waiting for data"
    )
    assert job_line(line, terminal=False) == "image x: 500.0 MB of 1.0 GB (50%), waiting for data"
    assert progress_line([line, {"label": "model y", "phase": "listing"}], terminal=False).endswith(
        " | model y: reading the Hub's file list"
    )


def test_a_copy_shows_its_bytes_and_a_wait_for_the_head_says_so():
    copying = {"label": "m (from a)", "phase": "copy", "done": 10**9, "total": 2 * 10**9,
               "rate": 10**9}  # fmt: skip
    assert (
        job_line(copying, terminal=False) == "m (from a): 1.0 GB of 2.0 GB (50%), 1.0 GB/s, 1s left"
    )
    waiting = {"label": "m (from a)", "phase": "waiting"}
    assert job_line(waiting, terminal=False) == ("m (from a): waiting until the head has it whole")


def test_a_total_not_known_yet_shows_the_bytes_and_rate_only():
    line = {"label": "m", "phase": "download", "done": 1234567, "total": None, "rate": 2.5e6}
    assert job_line(line, terminal=True) == "m: 1.2 MB, 2.5 MB/s"


# --- the plan against its image ---------------------------------------------------------


def sglang_plan():
    host = spark(**REPOS, engine={"name": "sglang"})
    return host, host.data.engine_plan


def reading_of(plan, **changes) -> dict[str, Any]:
    flags = sorted({word.split("=")[0] for word in plan.flags if word.startswith("--")})
    return {
        "id": "sha256:" + "ab" * 32,
        "engine": "sglang",
        "release": plan.version,
        "ray": False,
        "flags": flags,
        **changes,
    }


def test_an_image_whose_engine_takes_every_flag_is_a_noop():
    host, plan = sglang_plan()
    given(host, SparkHostState, host_state(image_reading=reading_of(plan)))
    outcome = run(image_accepts, host, plan=plan)
    assert outcome.commands == []
    assert outcome.noop == f"{plan.image} (sha256:abababababab) takes every flag of the plan"


def test_a_flag_the_image_does_not_list_is_refused_naming_flag_image_and_release():
    host, plan = sglang_plan()
    reading = reading_of(plan, release="0.5.9")
    reading["flags"].remove("--speculative-eagle-topk")
    given(host, SparkHostState, host_state(image_reading=reading))
    with pytest.raises(OperationError) as caught:
        run(image_accepts, host, plan=plan)
    text = str(caught.value)
    assert "the engine unit was not written" in text
    assert (
        f"--speculative-eagle-topk: the engine in {plan.image} (sha256:abababababab, sglang "
        "0.5.9) does not accept it"
    ) in text
    assert "Fix: set engine.version: '0.5.9', the release the image holds" in text


def test_a_flag_no_catalogue_knows_is_judged_by_the_images_own_list():
    """Issue 24: a fork's flag passes the check before connecting with a warning; on the
    Spark the image's --help decides it: listed, the unit is written; not listed, refused
    before any unit changes, saying that the catalogue left it to the image."""
    _, plan = sglang_plan()
    forked = replace(plan, flags=(*plan.flags, "--weight-loader-b12x", "on"))
    listed = reading_of(forked)
    assert image_problems(forked, ImageReading.of(listed))[0] == []
    problems, _ = image_problems(forked, ImageReading.of(reading_of(plan)))
    assert problems == [
        f"--weight-loader-b12x: the engine in {plan.image} (sha256:abababababab, sglang "
        f"{plan.version}) does not accept it (its --help lists no such flag); the "
        f"{plan.version} catalogue does not know it either, and left it to the image. Fix: "
        "remove it from engine.args, or choose an image whose release has it"
    ]


def test_without_the_images_flag_list_the_flags_no_catalogue_knows_are_named():
    _, plan = sglang_plan()
    forked = replace(plan, flags=(*plan.flags, "--weight-loader-b12x", "on"))
    reading = reading_of(forked, flags=None, help_error="ImportError: libcuda")
    problems, warnings = image_problems(forked, ImageReading.of(reading))
    assert problems == []
    assert warnings[-1].endswith(
        "only the catalogue check stands; nothing vouches for --weight-loader-b12x: the "
        "engine's own parser decides them when it starts"
    )


def test_a_dotted_key_is_checked_as_its_json_flag():
    assert flag_names(("--compilation-config.mode", "3", "--tp-size=2", "-cc.mode")) == [
        "--compilation-config",
        "--tp-size",
    ]


def test_an_image_release_whose_nearest_catalogue_planned_it_does_not_warn():
    _, plan = sglang_plan()
    assert plan.version == "0.5.10"
    reading = reading_of(plan, release="0.5.10.dev0")
    assert image_problems(plan, ImageReading.of(reading)) == ([], [])


def test_an_image_read_in_this_run_is_read_at_execution():
    host, plan = sglang_plan()
    given(host, SparkHostState, host_state(image_id="", image_reading=None))
    outcome = run(image_accepts, host, plan=plan)
    assert outcome.commands == ["call _read_and_judge"]


def test_a_release_other_than_the_catalogue_warns_and_no_help_keeps_the_catalogue_check():
    _, plan = sglang_plan()
    problems, warnings = image_problems(plan, ImageReading.of(reading_of(plan, release="0.5.12")))
    assert problems == []
    assert (
        "holds sglang 0.5.12, but the plan was checked against the 0.5.10 catalogue"
        in (warnings[0])
    )
    assert "engine.version: '0.5.12'" in warnings[0]
    problems, warnings = image_problems(
        plan, ImageReading.of(reading_of(plan, flags=None, help_error="ImportError: libcuda"))
    )
    assert problems == [] and "ImportError: libcuda" in warnings[0]


def test_a_ray_pair_refuses_an_image_without_ray_and_a_native_pair_does_not():
    from tests.unit.operations import pair

    ray = {"name": "vllm", "args": {"--distributed-executor-backend": "ray"}}
    hosts = pair(**REPOS, engine=ray)
    plan = hosts["spark-1"].data.engine_plan
    assert any(service.role.startswith("ray-") for service in plan.services)
    reading = reading_of(plan, engine="vllm", ray=False)
    problems, _ = image_problems(plan, ImageReading.of(reading))
    assert problems == [
        f"{plan.image} (sha256:abababababab, vllm {plan.version}) has no `ray` program, which "
        "the Ray units engine.args ask for (--distributed-executor-backend ray) run: drop that "
        "flag to run vLLM's own multi-node mode, which needs no Ray, or choose an image with Ray"
    ]
    # vLLM's own multi-node mode (the default) runs in the same image without Ray.
    native = pair(**REPOS, engine={"name": "vllm"})["spark-1"].data.engine_plan
    assert (
        image_problems(native, ImageReading.of(reading_of(native, engine="vllm", ray=False)))[0]
        == []
    )


def test_a_ray_pair_whose_mods_install_ray_is_warned_not_refused():
    from dataclasses import replace

    from sparkdeploy.config.shipped import Shipped
    from tests.unit.operations import pair

    ray = {"name": "vllm", "args": {"--distributed-executor-backend": "ray"}}
    plan = pair(**REPOS, engine=ray)["spark-2"].data.engine_plan
    assert [service.role for service in plan.services] == ["ray-worker"]
    mod = Shipped(kind="mod", name="01-install-ray.sh", content="pip install 'ray[default]'\n")
    reading = ImageReading.of(reading_of(plan, engine="vllm", ray=False))
    problems, warnings = image_problems(replace(plan, shipped=(mod,)), reading)
    assert problems == []
    assert any(
        "has no `ray` program: engine.mods run before `ray start` in every Ray container and "
        "must install it" in warning
        for warning in warnings
    )


# --- a pair: fetched once, copied over the link ---------------------------------------------


def planned_for(hosts, name: str, **state_changes):
    from pyinfra.context import ctx_host, ctx_state

    host = hosts[name]
    with ctx_state.use(host.state), ctx_host.use(host):
        return fetch.fetch_plan(fetch.jobs_of(host, "nvidia"))


def pair_with(head_state: dict, other_state: dict):
    from tests.unit.operations import pair

    hosts = pair(**REPOS, engine={"name": "sglang"})
    given(hosts["spark-1"], SparkHostState, host_state(**head_state))
    given(hosts["spark-2"], SparkHostState, host_state(**other_state))
    return hosts


FRESH: dict[str, Any] = {"models": {}, "image_id": "", "image_reading": None}


def test_the_head_fetches_and_serves_what_the_other_lacks_on_its_fabric_address():
    hosts = pair_with(FRESH, FRESH)
    arguments = planned_for(hosts, "spark-1")
    assert [job.kind for job in arguments["jobs"]] == ["image", "model", "model"]
    [server] = arguments["serving"]
    assert server.spec == {
        "kind": "serve",
        "label": "copies for the other Spark (192.168.100.2)",
        "bind": "192.168.100.1",
        "allow": ["192.168.100.2"],
        "port": fetch.PAIR_COPY_PORT,
        "models": {
            f"{REPOS['model_repo']}@main": MODEL,
            f"{REPOS['draft_model_repo']}@main": DRAFT,
        },
        "images": [IMAGE],
    }


def test_the_other_copies_everything_the_head_has_from_the_head():
    hosts = pair_with(FRESH, FRESH)
    arguments = planned_for(hosts, "spark-2")
    assert arguments["head"] == "spark-1"
    copies = arguments["jobs"]
    assert [job.kind for job in copies] == ["copy-image", "copy-model", "copy-model"]
    assert {job.spec["source"] for job in copies} == {"192.168.100.1"}
    assert {job.spec["wait_limit"] for job in copies} == {21600}  # fetch_timeout
    assert copies[1].spec["folder"] == MODEL and copies[1].label.endswith("(from spark-1)")
    assert all(job.id.startswith(job.kind + "-") for job in copies)


def test_what_the_other_has_already_is_not_served():
    reading = {"id": "sha256:ab", "engine": "sglang", "flags": []}
    has_all = {"models": complete(MODEL, DRAFT), "image_id": "sha256:ab", "image_reading": reading}
    hosts = pair_with(FRESH, has_all)
    assert planned_for(hosts, "spark-1")["serving"] == []
    has_model = {**FRESH, "models": complete(MODEL)}
    hosts = pair_with(FRESH, has_model)
    [server] = planned_for(hosts, "spark-1")["serving"]
    assert list(server.spec["models"]) == [f"{REPOS['draft_model_repo']}@main"]
    assert server.spec["images"] == [IMAGE]


def test_the_server_is_stopped_after_the_copies_and_only_when_started():
    host = spark()
    assert run(fetch.serving_stopped, host, jobs=[]).noop == "no copy was served in this run"
    hosts = pair_with(FRESH, FRESH)
    [server] = planned_for(hosts, "spark-1")["serving"]
    outcome = run(fetch.serving_stopped, hosts["spark-1"], jobs=[server])
    assert outcome.commands == [f"systemctl stop {server.unit}"]


def test_a_copy_stops_waiting_when_the_head_failed():
    job = a_model_job()
    running = status(job, state="running", phase="waiting")
    head = mock.Mock()
    head.name = "spark-1"
    spark_ = Spark([[running]])
    with (
        mock.patch.object(fetch, "logger", mock.Mock()),
        mock.patch.object(fetch.gevent, "sleep", lambda _: None),
        pytest.raises(OperationError, match="spark-1, which fetches what this Spark copies"),
    ):
        fetch_raising(mock.Mock(failed_hosts={head}), spark_, [job], 600, [], "spark-1")


# --- three Sparks through a switch: fetched once by the head, copied over rail 1 ----------


def switch_with(*states: dict):
    """Three Sparks on a switch (rail N of each in one subnet), their host states."""
    from tests.twins import harness
    from tests.unit.operations import sparks

    hosts = sparks(
        **{
            f"spark-{node}": {
                "qsfp": harness.qsfp_plan(node),
                **REPOS,
                "engine": {"name": "sglang"},
            }
            for node in (1, 2, 3)
        }
    )
    for node, state in enumerate(states, start=1):
        given(hosts[f"spark-{node}"], SparkHostState, host_state(**state))
    return hosts


def test_the_head_serves_every_other_spark_on_rail_1():
    hosts = switch_with(FRESH, FRESH, FRESH)
    link = fetch.copy_link(hosts["spark-3"].data.place)
    assert link == fetch.CopyLink(
        "spark-1", "192.168.100.1", ("192.168.100.2", "192.168.100.3"), ("spark-2", "spark-3")
    )
    arguments = planned_for(hosts, "spark-1")
    assert [job.kind for job in arguments["jobs"]] == ["image", "model", "model"]
    [server] = arguments["serving"]
    assert server.spec["bind"] == "192.168.100.1"
    assert server.spec["allow"] == ["192.168.100.2", "192.168.100.3"]
    assert server.label == "copies for the other Sparks (192.168.100.2, 192.168.100.3)"
    assert server.spec["images"] == [IMAGE] and len(server.spec["models"]) == 2


def test_every_other_spark_copies_from_the_head():
    hosts = switch_with(FRESH, FRESH, FRESH)
    for name in ("spark-2", "spark-3"):
        arguments = planned_for(hosts, name)
        assert arguments["head"] == "spark-1"
        copies = arguments["jobs"]
        assert [job.kind for job in copies] == ["copy-image", "copy-model", "copy-model"]
        assert {job.spec["source"] for job in copies} == {"192.168.100.1"}
        assert "serving" not in arguments


def test_the_head_serves_what_any_other_spark_lacks_and_nothing_when_none_does():
    reading = {"id": "sha256:ab", "engine": "sglang", "flags": []}
    has_all = {"models": complete(MODEL, DRAFT), "image_id": "sha256:ab", "image_reading": reading}
    assert planned_for(switch_with(FRESH, has_all, has_all), "spark-1")["serving"] == []
    has_model = {**has_all, "models": complete(MODEL)}
    [server] = planned_for(switch_with(FRESH, has_all, has_model), "spark-1")["serving"]
    assert list(server.spec["models"]) == [f"{REPOS['draft_model_repo']}@main"]
    assert server.spec["images"] == []


def test_a_spark_alone_or_without_rails_copies_nothing():
    assert fetch.copy_link(spark().data.place) is None
    from tests.unit.operations import sparks

    unlinked = sparks(**{f"spark-{node}": {} for node in (1, 2, 3)})
    assert fetch.copy_link(unlinked["spark-2"].data.place) is None


# --- four Sparks in a ring: the head's neighbours copy from it, the opposite Spark from ---
# --- the head's port-0 neighbour, which passes on what it copied (issue 26) ---------------


def ring_with(*states: dict):
    """Four Sparks in a ring (eugr's addresses, harness.ring_plan), their host states."""
    from tests.twins import harness
    from tests.unit.operations import sparks

    hosts = sparks(
        **{
            f"spark-{node}": {
                "qsfp": harness.ring_plan(node, 4),
                "qsfp_topology": "ring",
                "management_address": f"10.0.0.{node}",
                **REPOS,
                "engine": {"name": "sglang"},
            }
            for node in (1, 2, 3, 4)
        }
    )
    for node, state in enumerate(states, start=1):
        given(hosts[f"spark-{node}"], SparkHostState, host_state(**state))
    return hosts


def test_in_a_ring_of_four_each_byte_crosses_each_cable_once():
    hosts = ring_with(FRESH, FRESH, FRESH, FRESH)
    head = planned_for(hosts, "spark-1")
    assert "head" not in head and [job.kind for job in head["jobs"]] == ["image", "model", "model"]
    assert [(s.spec["bind"], s.spec["allow"]) for s in head["serving"]] == [
        ("10.20.0.11", ["10.20.0.12"]),  # cable 1: port 0 to spark-2's port 1
        ("10.20.6.11", ["10.20.6.14"]),  # cable 4: port 1 from spark-4's port 0
    ]
    two = planned_for(hosts, "spark-2")
    assert two["head"] == "spark-1"
    assert {job.spec["source"] for job in two["jobs"]} == {"10.20.0.11"}
    [passed_on] = two["serving"]  # spark-2 passes its copies on to spark-3, over cable 2
    assert (passed_on.spec["bind"], passed_on.spec["allow"]) == ("10.20.2.12", ["10.20.2.13"])
    assert passed_on.spec["images"] == [IMAGE] and len(passed_on.spec["models"]) == 2
    three = planned_for(hosts, "spark-3")
    assert three["head"] == "spark-2" and "serving" not in three
    assert {job.spec["source"] for job in three["jobs"]} == {"10.20.2.12"}
    assert [job.kind for job in three["jobs"]] == ["copy-image", "copy-model", "copy-model"]
    four = planned_for(hosts, "spark-4")
    assert four["head"] == "spark-1" and "serving" not in four
    assert {job.spec["source"] for job in four["jobs"]} == {"10.20.6.11"}
    tokens = {job.token for plan in (head, two, three, four) for job in plan["jobs"] if job.token}
    tokens |= {job.token for plan in (head, two) for job in plan["serving"]}
    assert len(tokens) == 1  # one secret for the ring's whole run


def test_a_spark_passing_copies_on_serves_only_what_the_next_lacks():
    reading = {"id": "sha256:ab", "engine": "sglang", "flags": []}
    has_all = {"models": complete(MODEL, DRAFT), "image_id": "sha256:ab", "image_reading": reading}
    hosts = ring_with(FRESH, FRESH, has_all, FRESH)
    assert planned_for(hosts, "spark-2")["serving"] == []


# --- the copy channel's token and digests (issue 22) -------------------------------------


def test_the_token_is_one_per_run_for_the_head_and_its_copies_and_never_in_a_spec():
    hosts = pair_with(FRESH, FRESH)
    [server] = planned_for(hosts, "spark-1")["serving"]
    copies = planned_for(hosts, "spark-2")["jobs"]
    assert len(server.token) >= 40 and {job.token for job in copies} == {server.token}
    for job in (server, *copies):
        assert server.token not in json.dumps(job.spec) and server.token not in repr(job)
    assert server.token not in fetch.start_command([server, *copies])


@dataclass
class Head:
    """The head as the deploy reaches it over SSH: ``spark-fetch digests`` answers."""

    answers: list[dict[str, Any]]
    name: str = "spark-1"
    asked: list[str] = field(default_factory=list)

    def run_shell_command(self, command, _sudo=False):
        self.asked.append(command.get_raw_value())
        return True, Output(json.dumps(self.answers) + "\n")


def test_a_copy_starts_with_the_digests_read_from_the_head_and_its_token_uploaded_privately():
    hosts = pair_with(FRESH, FRESH)
    image_copy, model_copy, _ = planned_for(hosts, "spark-2")["jobs"]
    digest = "ab" * 32
    head = Head([{"want": model_copy.key, "ready": True, "files": {"config.json": [8, digest]}}])
    with mock.patch.object(fetch, "jobs_of", lambda target: []):
        [ready] = fetch.with_digests(head, [model_copy])
    assert ready.spec["files"] == {"config.json": [8, digest]} and ready.token == model_copy.token
    assert head.asked[0].startswith(f'{FETCH_BIN} digests \'[{{"want": ')
    head.answers = [{"image": IMAGE, "ready": False, "id": ""}]
    with mock.patch.object(fetch, "jobs_of", lambda target: []):
        assert fetch.with_digests(head, [image_copy]) == []  # the head is still pulling
    spark_ = Spark([[]])
    uploads: list[tuple] = []

    def put_file(data, path, remote_temp_filename, _sudo):
        uploads.append((data.getvalue(), path, remote_temp_filename))
        return True

    spark_.put_file = put_file  # type: ignore[attr-defined]
    fetch.upload_tokens(spark_, [ready], "/home/ops")
    assert uploads == [(
        ready.token + "\n",
        f"{FETCH_JOBS}/private/{ready.id}.token",
        f"/home/ops/.spark-deploy-upload/{ready.id}.token",
    )]  # fmt: skip
    assert "install -d -m 700 /var/lib/spark-deploy/fetch/private" in spark_.commands[0]
    assert all(ready.token not in command for command in spark_.commands)


# --- spark-fetch and its parts, shipped --------------------------------------------------


def shipped_imports(name: str = "fetch_job") -> set[str]:
    """The modules of files/ that files/<name>.py imports, and theirs (read with ast)."""
    import ast

    found: set[str] = set()
    tree = ast.parse((FILES / f"{name}.py").read_text())
    for node in ast.walk(tree):
        names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
        names += [str(node.module)] if isinstance(node, ast.ImportFrom) else []
        for module in (m for m in names if (FILES / f"{m}.py").is_file()):
            found |= {module} | shipped_imports(module)
    return found


def test_the_deploy_ships_spark_fetch_and_every_module_it_imports():
    """spark-fetch imports its parts by name from FETCH_LIB (files/fetch_job.py): the deploy
    installs each one it imports, as files/ holds it, and the managed-file registry knows
    each (so the host-state fact reads it and a re-run changes nothing)."""
    from pyinfra.context import ctx_host, ctx_state

    from sparkdeploy.config.paths import FETCH_LIB
    from sparkdeploy.engine_plan.files import managed_files
    from sparkdeploy.render import file_text

    host = spark(**REPOS)
    installed: dict[str, str] = {}

    def install(name: str, path: str, content: str) -> mock.Mock:
        installed[path] = content
        return mock.Mock()

    with (
        ctx_state.use(host.state),
        ctx_host.use(host),
        mock.patch.multiple(
            fetch,
            managed_file=install,
            fetched=mock.DEFAULT,
            serving_stopped=mock.DEFAULT,
            host_state=host_state,
            jobs_of=lambda *args: [],
            systemd=mock.DEFAULT,
        ),  # fmt: skip
    ):
        fetch.fetch_everything._inner()
    modules = shipped_imports()
    assert {"fetch_spec", "fetch_errors", "fetch_copy", "fetch_serve", "docker_pull"} <= modules
    assert installed[FETCH_BIN] == file_text("fetch_job.py")
    for name in modules:
        assert installed[f"{FETCH_LIB}/{name}.py"] == file_text(f"{name}.py"), name
    registry = managed_files(host.data.spark, None)
    assert set(installed) <= set(registry)
    assert registry[f"{FETCH_LIB}/fetch_copy.py"].mode == "644"
