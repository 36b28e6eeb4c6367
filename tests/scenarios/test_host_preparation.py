"""Host preparation: driver hold, Hugging Face environment and token, memory guard, OOM."""

from __future__ import annotations

from sparkdeploy.config.paths import DRM_OVERRIDE_CONF, HF_PROFILE, MEMORY_GUARD
from tests.scenarios.conftest import assert_idempotent
from tests.twins import harness

TOKEN = "hf_twinSecretToken0123456789abcdef"
TOKEN_ENV = {harness.TWIN_TOKEN_ENV: TOKEN}
TOKEN_FILE = "/home/spark/.cache/huggingface/token"


def sh(twin: harness.Twin, command: str) -> str:
    return twin.exec(command).stdout.strip()


def login_shell(twin: harness.Twin, command: str) -> str:
    return sh(twin, f"su - spark -c '{command}'")


class TestPrepareSpark:
    """A fresh Spark with an HF token on the laptop: everything lands once, secrets stay put."""

    twins: dict[str, dict] = {"prep": {}}
    fresh = True  # the hf command's install is part of what lands

    def test_converge(self, scenario):
        run = scenario.deploy("-v", env=TOKEN_ENV)  # -vvv: commands and their output
        assert run.returncode == 0, run.explain()
        names = set(run.changed()["prep"])
        assert "Hold the NVIDIA driver branch | Hold the 580 driver packages" in names
        assert "Set up the Hugging Face environment | Install the hf command (2.4.0)" in names
        assert TOKEN not in run.stdout + run.stderr, "the token leaked into pyinfra output"

    def test_idempotence(self, scenario):
        run = scenario.deploy(env=TOKEN_ENV)
        assert_idempotent(run)
        assert run.remote_commands() == {"prep": 2}

    def test_verify_driver_hold(self, scenario):
        twin = scenario.twins["prep"]
        assert sh(twin, "apt-mark showhold") == "nvidia-driver-580-open"

    def test_verify_hf_environment(self, scenario):
        twin = scenario.twins["prep"]
        assert login_shell(twin, "echo $HF_HUB_DISABLE_XET") == "1"
        assert "HF_HUB_DISABLE_XET=1" in twin.read("/etc/spark-deploy/hf.env")
        assert "\nprecedence ::ffff:0:0/96  100\n" in twin.read("/etc/gai.conf")
        assert login_shell(twin, "command -v hf") == "/usr/local/bin/hf"
        assert "version: 2.4.0" in login_shell(twin, "hf version 2>/dev/null")
        # the system Python was left alone
        assert twin.exec("python3 -c 'import huggingface_hub'", check=False).returncode != 0

    def test_verify_token_is_private(self, scenario):
        twin = scenario.twins["prep"]
        assert sh(twin, f"stat -c '%a %U %G' {TOKEN_FILE}") == "600 spark spark"
        assert sh(twin, "stat -c '%a %U' /home/spark/.cache/huggingface") == "700 spark"
        assert twin.read(TOKEN_FILE) == TOKEN
        holders = sh(twin, f"grep -rlsF {TOKEN} /etc /home /root /tmp /var/tmp /opt /run || true")
        assert holders.split() == [TOKEN_FILE]

    def test_verify_memory_guard_runs_on_the_spark(self, scenario):
        twin = scenario.twins["prep"]
        ready = twin.exec(f"{MEMORY_GUARD} 1 5", check=False)
        assert ready.returncode == 0 and "GiB available (need 1)" in ready.stdout
        starved = twin.exec(f"SPARK_MEMORY_GUARD_INTERVAL=1 {MEMORY_GUARD} 100000 2", check=False)
        assert starved.returncode == 1 and "giving up" in starved.stderr
        # the twins inventory sets memory_guard_gb: 1 (a twin has far less than 128 GB)
        assert "SPARK_MEMORY_GUARD_GB=1\n" in twin.read("/etc/spark-deploy/memory-guard.env")
        assert sh(twin, "stat -c %a /usr/local/sbin/spark-drop-caches") == "755"

    def test_verify_sshd_and_networkmanager_survive_oom(self, scenario):
        twin = scenario.twins["prep"]
        for unit in ("ssh", "NetworkManager"):
            assert sh(twin, f"systemctl show {unit} -p OOMScoreAdjust") == "OOMScoreAdjust=-1000"

    def test_settings_turned_off_converge_back(self, scenario):
        scenario.twins["prep"].data.update(hf_disable_xet=False, prefer_ipv4=False)
        scenario.write_inventory()
        run = scenario.deploy(env=TOKEN_ENV)
        assert run.returncode == 0, run.explain()
        twin = scenario.twins["prep"]
        assert "HF_HUB_DISABLE_XET" not in twin.read(HF_PROFILE)
        assert "\nprecedence ::ffff:0:0/96" not in twin.read("/etc/gai.conf")
        assert_idempotent(scenario.deploy(env=TOKEN_ENV))

    def test_new_token_replaces_the_old_one(self, scenario):
        run = scenario.deploy(env={harness.TWIN_TOKEN_ENV: TOKEN + "2"})
        assert run.returncode == 0, run.explain()
        assert scenario.twins["prep"].read(TOKEN_FILE) == TOKEN + "2"
        assert_idempotent(scenario.deploy(env={harness.TWIN_TOKEN_ENV: TOKEN + "2"}))


SWAP_TO_590 = (
    "dpkg -i /opt/spark-twin/debs/nvidia-driver-590-open.deb >/dev/null"
    " && dpkg -P nvidia-driver-580-open >/dev/null"
    " && sed -i 's/^driver=.*/driver=590.44.01/' /etc/spark-twin/gpu.conf"
)


class TestDriver590:
    """A Spark on the 590 driver is refused, with what is installed and what to do."""

    twins: dict[str, dict] = {"drv590": {}}
    prepare = {"drv590": SWAP_TO_590}

    def test_refused(self, scenario):
        for _ in range(2):  # and again: still refused, still unchanged
            run = scenario.deploy()
            assert run.returncode != 0
            assert "drv590 refused, nothing was changed on any host" in run.stderr
            assert "nvidia-driver-590-open 590.44.01-0ubuntu1" in run.stderr
            assert "install nvidia-driver-580-open, reboot" in run.stderr
            assert run.changed() == {}

    def test_nothing_changed(self, scenario):
        twin = scenario.twins["drv590"]
        assert sh(twin, "apt-mark showhold") == ""
        assert twin.exec(f"test -e {DRM_OVERRIDE_CONF}", check=False).returncode == 0
        assert twin.exec(f"test -e {HF_PROFILE}", check=False).returncode != 0
