"""Foundation scenarios: preflight, drm override removal, reboot only when allowed."""

from __future__ import annotations

from sparkdeploy.config.paths import DRM_OVERRIDE_CONF, REBOOT_PENDING
from tests.scenarios.conftest import assert_idempotent
from tests.twins import harness

DRM_OP = "Remove the memory-capping drm override | Remove the drm override conf (caps CUDA memory at ~62 GB)"
REBOOT_OP = "Reboot when a change needs it | Reboot to apply the changes that need it"


def changed_ops(run, host: str) -> set[str]:
    return set(run.changed().get(host, []))


def exists(twin: harness.Twin, path: str) -> bool:
    return twin.exec(f"test -e {path}", check=False).returncode == 0


class TestFreshPair:
    """Two freshly imaged Sparks, reboot not allowed: the override goes, the reboot waits."""

    twins: dict[str, dict] = {"fresh-a": {}, "fresh-b": {}}

    def test_converge(self, scenario):
        assert all(exists(t, DRM_OVERRIDE_CONF) for t in scenario.twins.values())
        run = scenario.deploy()
        assert run.returncode == 0, run.explain()
        assert set(run.changed()) == {"fresh-a", "fresh-b"}
        assert DRM_OP in changed_ops(run, "fresh-a") and DRM_OP in changed_ops(run, "fresh-b")
        assert REBOOT_OP not in changed_ops(run, "fresh-a") | changed_ops(run, "fresh-b")
        for name in scenario.twins:
            assert f"[{name}] REBOOT PENDING: {DRM_OVERRIDE_CONF} was removed" in run.stderr
            assert f"[{name}] preflight: NVIDIA GB10, driver 580.95.05" in run.stderr

    def test_idempotence(self, scenario):
        run = scenario.deploy()
        assert_idempotent(run)
        # The reboot is still pending, and the run still says so, per host.
        for name in scenario.twins:
            assert f"[{name}] REBOOT PENDING" in run.stderr
        assert run.remote_commands() == {"fresh-a": 2, "fresh-b": 2}

    def test_verify(self, scenario):
        for twin in scenario.twins.values():
            assert not exists(twin, DRM_OVERRIDE_CONF)
            assert "was removed" in twin.read(REBOOT_PENDING)
            assert exists(twin, "/run/reboot-required")
            assert harness.reboot_count(twin) == 0, "rebooted although not allowed"


class TestRebootAllowed:
    """One Spark may reboot, its peer may not: only the first reboots, once."""

    twins = {"boot-a": {"allow_reboot": True, "reboot_timeout": 120}, "boot-b": {}}

    def test_converge(self, scenario):
        run = scenario.deploy()
        assert run.returncode == 0, run.explain()
        assert {DRM_OP, REBOOT_OP} <= changed_ops(run, "boot-a")
        assert DRM_OP in changed_ops(run, "boot-b")
        assert REBOOT_OP not in changed_ops(run, "boot-b")
        assert "[boot-a] REBOOT PENDING" not in run.stderr
        assert "[boot-b] REBOOT PENDING" in run.stderr

    def test_idempotence(self, scenario):
        assert_idempotent(scenario.deploy())

    def test_verify(self, scenario):
        a, b = scenario.twins["boot-a"], scenario.twins["boot-b"]
        assert harness.reboot_count(a) == 1, "the allowed reboot did not happen exactly once"
        assert harness.reboot_count(b) == 0
        assert a.exec("systemctl is-system-running").stdout.strip() == "running"
        assert not exists(a, DRM_OVERRIDE_CONF) and not exists(b, DRM_OVERRIDE_CONF)
        assert not exists(a, REBOOT_PENDING), "/run survived the reboot"
        assert exists(b, REBOOT_PENDING)


class TestNotAGB10:
    """A host whose GPU is not a GB10 is refused and nothing changes on either host,
    until the operator sets the override for it."""

    twins: dict[str, dict] = {"gpu-a": {}, "gpu-b": {}}
    prepare = {
        "gpu-b": "sed -i 's/^name=.*/name=NVIDIA GeForce RTX 4090/' /etc/spark-twin/gpu.conf"
    }

    def test_refused(self, scenario):
        run = scenario.deploy()
        assert run.returncode != 0
        assert "gpu-b refused, nothing was changed on any host" in run.stderr
        assert "its GPU is 'NVIDIA GeForce RTX 4090', not an NVIDIA GB10" in run.stderr
        assert "set allow_non_gb10: true for gpu-b" in run.stderr
        assert run.changed() == {}
        for twin in scenario.twins.values():
            assert exists(twin, DRM_OVERRIDE_CONF), f"{twin.name} was changed"
            assert not exists(twin, REBOOT_PENDING)

    def test_override_converges(self, scenario):
        scenario.twins["gpu-b"].data["allow_non_gb10"] = True
        scenario.write_inventory()
        run = scenario.deploy()
        assert run.returncode == 0, run.explain()
        assert set(run.changed()) == {"gpu-a", "gpu-b"}

    def test_idempotence(self, scenario):
        assert_idempotent(scenario.deploy())


class TestNoDriver:
    """No nvidia-smi answering (driver missing): refused with the reason."""

    twins: dict[str, dict] = {"nodrv": {}}

    def test_refused(self, scenario):
        scenario.twins["nodrv"].exec("chmod -x /usr/bin/nvidia-smi")
        run = scenario.deploy()
        assert run.returncode != 0
        assert "no NVIDIA GPU answered `nvidia-smi -L`" in run.stderr
        assert exists(scenario.twins["nodrv"], DRM_OVERRIDE_CONF)

    def test_refused_again_and_still_unchanged(self, scenario):
        run = scenario.deploy()
        assert run.returncode != 0 and run.changed() == {}
        assert "no NVIDIA GPU answered" in run.stderr
        assert exists(scenario.twins["nodrv"], DRM_OVERRIDE_CONF)
