"""serve_model as a whole: the operations it calls, in order, with their arguments, for a
Spark alone, a pair, a Spark with no engine, an API key, alerts, GPU services, and files
that changed or did not. The operations themselves are tested in test_ops_engine.py and
test_ops_managed.py; here each is recorded, not run."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

import pytest
from pyinfra.api import Host
from pyinfra.context import ctx_host, ctx_state

from sparkdeploy.config.paths import CONTAINER_ENV, ENGINE_UNIT
from sparkdeploy.deploys.engine import serve
from sparkdeploy.deploys.managed import registered, wanted_state
from sparkdeploy.facts.host_state import SparkHostState
from tests.unit.operations import given, host_state, pair, spark

REPO = {"model_repo": "o/m"}
SGLANG = {**REPO, "engine": {"name": "sglang"}}
RAY = {**REPO, "engine": {"name": "vllm", "args": {"--distributed-executor-backend": "ray"}}}
TTS = {"name": "tts", "image": "ghcr.io/remsky/kokoro-fastapi-gpu:v0.2.2", "port": 8880,
       "memory_gb": 12}  # fmt: skip


@dataclass
class Call:
    operation: str
    arguments: dict[str, Any]
    changed: bool = False


@dataclass
class Recorded:
    calls: list[Call] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)

    def names(self) -> list[str]:
        return [call.arguments.get("name", call.operation) for call in self.calls]

    def of(self, operation: str) -> list[Call]:
        return [call for call in self.calls if call.operation == operation]


OPERATIONS = ("managed_file", "image_accepts", "retired", "kept_before_change", "serving")


def recorder(recorded: Recorded, operation: str) -> Any:
    def record(*args: Any, **arguments: Any) -> Call:
        call = Call(operation, {"args": args, **arguments} if args else arguments)
        recorded.calls.append(call)
        return call

    return record


@pytest.fixture
def recording() -> Iterator[Recorded]:
    recorded = Recorded()
    patches = [mock.patch.object(serve, name, recorder(recorded, name)) for name in OPERATIONS]
    patches += [
        mock.patch.object(serve.systemd, "daemon_reload", recorder(recorded, "daemon_reload")),
        mock.patch.object(
            serve, "link_test_before_start", recorder(recorded, "link_test_before_start")
        ),
        mock.patch.object(serve, "any_changed", lambda *calls: [call.operation for call in calls]),
    ]
    for patch in patches:
        patch.start()
    yield recorded
    for patch in patches:
        patch.stop()


def serve_on(host: Host, recorded: Recorded, **state: Any) -> Recorded:
    given(host, SparkHostState, host_state(**state))
    with ctx_state.use(host.state), ctx_host.use(host):
        serve.serve_model._inner()
    return recorded


SCRIPTS = [
    "Install spark-engine-health",
    "Install spark-ray-wait",
    "Install spark-link-test",
    "Install spark-engine-rollback",
]


def test_a_spark_alone_installs_judges_retires_writes_and_serves_in_that_order(recording):
    host = spark(**SGLANG)
    plan = host.data.engine_plan
    serve_on(host, recording, owned=frozenset(), foreign=frozenset())
    assert recording.names() == [
        *SCRIPTS,
        f"Check the plan against {plan.image}",
        "Retire engine files no longer planned",
        "Keep the configuration that serves now as the last good one",
        "Write the sglang container environment",
        "Write spark-engine-sglang.service",
        "Let nvidia start, stop, restart and see spark-engine-sglang.service (sudoers)",
        "Reload systemd units",
        "link_test_before_start",
        "Run spark-engine-sglang.service and check it answers",
    ]
    [reload] = recording.of("daemon_reload")
    assert reload.arguments["_if"] == ["managed_file"]
    [kept] = recording.of("kept_before_change")
    assert kept.arguments["unit"] == "spark-engine-sglang.service"
    assert kept.arguments["changing"] is True  # nothing written yet on the sample host
    [run] = recording.of("serving")
    arguments = run.arguments
    assert arguments["keep"] is kept.arguments["keep"]
    assert (arguments["restart"], arguments["follows"], arguments["health"]) == (True, False, True)
    assert (arguments["nccl"], arguments["key_file"], arguments["gpu_with"]) == (False, "", "")
    assert arguments["container"] == "spark-engine-sglang" and arguments["port"] == plan.port
    assert arguments["unit"] == "spark-engine-sglang.service"


def test_files_as_planned_restart_nothing(recording):
    host = spark(**SGLANG)
    plan = host.data.engine_plan
    spark_settings = host.data.spark
    env_file = CONTAINER_ENV.format(name=plan.name)
    env_text = serve.render("engine.env.j2", plan=plan)
    unit_text = serve.unit_text(plan, plan.services[0], spark_settings, env_file)
    planned = {env_file: env_text, ENGINE_UNIT.format(unit=plan.unit): unit_text}
    given(host, SparkHostState, host_state())
    with ctx_state.use(host.state), ctx_host.use(host):
        files = {
            path: wanted_state(registered(path), text, host_state())
            for path, text in planned.items()
        }
    serve_on(host, recording, files=files, owned=frozenset(), foreign=frozenset())
    [kept] = recording.of("kept_before_change")
    assert kept.arguments["changing"] is False
    [run] = recording.of("serving")
    assert (run.arguments["restart"], run.arguments["follows"]) == (False, False)


def test_a_ray_pair_starts_the_head_then_the_server_that_follows_it(recording):
    hosts = pair(**RAY)
    serve_on(hosts["spark-1"], recording, owned=frozenset(), foreign=frozenset())
    runs = recording.of("serving")
    [kept_call] = recording.of("kept_before_change")
    plan = hosts["spark-1"].data.engine_plan
    assert [run.arguments["unit"] for run in runs] == [service.unit for service in plan.services]
    assert len(runs) == len(plan.services) > 1
    for run, service in zip(runs, plan.services):
        follows = bool(service.part_of)
        assert run.arguments["follows"] is follows
        assert run.arguments["restart"] is (not follows)
        assert run.arguments["health"] is service.serves_api
        assert run.arguments["nccl"] is (service.role == "server")
        kept = kept_call.arguments["keep"] if service.unit == plan.unit else None
        assert run.arguments["keep"] is kept
    units = [call for call in recording.of("managed_file") if "(sudoers)" in call.arguments["name"]]
    assert len(units) == len(plan.services)
    [reload] = recording.of("daemon_reload")
    assert reload.arguments["_if"] == ["managed_file"] * len(plan.services)


def test_no_engine_retires_what_the_deploy_wrote_and_stops(recording):
    host = spark(**REPO)
    owned = frozenset({"/etc/systemd/system/spark-engine-sglang.service"})
    serve_on(host, recording, owned=owned, foreign=frozenset({"/etc/sudoers.d/spark-deploy-x"}))
    assert recording.names() == [*SCRIPTS, "Retire engine files no longer planned"]
    [retire] = recording.of("retired")
    assert retire.arguments["paths"] == sorted(owned)


def test_a_ray_plan_without_ray_says_the_ray_units_retire(recording):
    hosts = pair(**{**REPO, "engine": {"name": "vllm"}})
    old = "/etc/systemd/system/spark-engine-vllm-ray-head.service"
    with mock.patch.object(serve.notices, "add") as add:
        serve_on(hosts["spark-1"], recording, owned=frozenset({old}), foreign=frozenset())
    [retire] = recording.of("retired")
    assert retire.arguments["paths"] == [old]
    said = [call.args[1] for call in add.call_args_list]
    assert any("spark-engine-vllm-ray-head.service retired" in text for text in said)


def test_an_api_key_is_written_before_the_units_and_checked_with(recording):
    with mock.patch.dict("os.environ", {"SPARK_API_KEY": "k" * 40}):
        host = spark(**REPO, engine={"name": "sglang", "api_key_env": "SPARK_API_KEY"})
        plan = host.data.engine_plan
        serve_on(host, recording, owned=frozenset(), foreign=frozenset())
    names = recording.names()
    key = names.index("Install the engine's API key (0600)")
    assert names[key - 1] == "Keep the configuration that serves now as the last good one"
    assert names[key + 1] == "Write the sglang container environment"
    written = recording.of("managed_file")[len(SCRIPTS)]
    assert written.arguments["path"] == plan.api_key_file
    assert written.arguments["content"] == serve.api_key_text("sglang", "k" * 40)
    [run] = recording.of("serving")
    assert run.arguments["key_file"] == plan.api_key_file


def test_alerts_are_written_after_the_units_are_reloaded(recording):
    host = spark(**REPO, engine={"name": "sglang", "alerts": True})
    serve_on(host, recording, owned=frozenset(), foreign=frozenset())
    names = recording.names()
    reload = names.index("Reload systemd units")
    assert names[reload + 1 : reload + 3] == [
        "Write spark-engine-sglang.rules.yml (Prometheus)",
        "Write spark-engine-sglang.scrape.yml (Prometheus)",
    ]


def test_an_active_gpu_service_holds_the_engine(recording):
    host = spark(**SGLANG, gpu_services=[TTS])
    [service] = host.data.spark.gpu_services
    units = {service.unit: ("active", "enabled")}
    serve_on(host, recording, units=units, owned=frozenset(), foreign=frozenset())
    [run] = recording.of("serving")
    assert run.arguments["gpu_with"] == service.unit


@pytest.mark.parametrize(
    ("now", "restart", "follows", "recheck", "commands"),
    [
        (("active", "enabled"), False, False, False, None),  # nothing to do
        (("active", "enabled"), False, True, False, []),  # only the health check
        (("active", "enabled"), False, False, True, []),  # its last check failed: again
        (("active", "enabled"), True, False, False, ["systemctl restart u"]),
        (("inactive", "enabled"), False, False, False, ["systemctl start u"]),
        (("inactive", "enabled"), False, False, True, ["systemctl start u"]),
        (("inactive", "absent"), False, False, False, ["systemctl enable u", "systemctl start u"]),
        (("active", "disabled"), False, False, False, ["systemctl enable u"]),
    ],
)
def test_a_unit_is_enabled_and_started_or_restarted_only_when_needed(
    now, restart, follows, recheck, commands
):
    assert serve.unit_commands("u", now, restart, follows, recheck) == commands


def test_a_new_api_key_or_shipped_file_restarts_every_unit():
    changes = serve.Changes(env=True, units={"a": False})
    assert changes.any and not serve.Changes(env=False, units={"a": False}).any
    assert serve.Changes(env=False, units={"a": True}).any
