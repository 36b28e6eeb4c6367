"""Driver branch rules and the host-state fact parsing they rely on."""

from __future__ import annotations

from sparkdeploy.facts.host_state import FileState, SparkHostState
from sparkdeploy.fitness import driver_packages, driver_refusals
from tests.unit.samples import docstring_sample
from tests.unit.test_preflight import facts, settings

STATE_OUTPUT = docstring_sample(SparkHostState)


def host_state(lines=STATE_OUTPUT):
    return SparkHostState().process(lines)


def test_host_state_parses_every_section():
    state = host_state()
    assert state.packages == {
        "nvidia-driver-580-open": "580.95.05-0ubuntu1",
        "python3-venv": "3.12.3-0ubuntu2",
    }
    assert state.holds == {"nvidia-driver-580-open"}
    assert state.files["/etc/spark-deploy/hf.env"] == FileState(
        "5d41402abc4b2a76b9719d911017c592", "644", "root", "root"
    )
    assert state.files["/usr/local/sbin/spark-memory-guard"] is None
    assert state.files["~/.cache/huggingface/token"].mode == "600"
    assert (state.gai_ipv4, state.hf_cli) == (True, "2.4.0")
    assert (state.user_home, state.user_group, state.ssh_home) == (
        "/home/nvidia",
        "nvidia",
        "/home/nvidia",
    )
    assert state.models["/opt/models/X"]["complete"] is True


def test_empty_values_parse_as_absent():
    state = host_state(["gai 0", "hfcli ", "user  ", "sshhome /root"])
    assert (state.gai_ipv4, state.hf_cli, state.user_home) == (False, "", "")
    assert state.packages == {} and state.models == {}


def test_580_open_is_fit():
    state = host_state()
    assert driver_packages(state) == {"nvidia-driver-580-open": 580}
    assert driver_refusals(state, facts(), settings()) == []


def test_590_installed_is_refused_naming_what_is_there():
    state = host_state(["pkg nvidia-driver-590-open 590.44.01-0ubuntu1"])
    [reason] = driver_refusals(state, facts(driver="590.44.01"), settings())
    assert "driver branch 580 is required (590 deadlocks CUDA graphs on GB10)" in reason
    assert "installed packages are: nvidia-driver-590-open 590.44.01-0ubuntu1" in reason
    assert "loaded driver: 590.44.01" in reason
    assert "install nvidia-driver-580-open, reboot" in reason


def test_580_package_but_590_loaded_is_refused():
    [reason] = driver_refusals(host_state(), facts(driver="590.44.01"), settings())
    assert "loaded driver: 590.44.01" in reason


def test_no_driver_package_is_refused():
    [reason] = driver_refusals(host_state(["pkg python3-venv 1"]), facts(), settings())
    assert "no nvidia-driver-580* package is installed (installed: none)" in reason


def test_branch_is_a_setting():
    state = host_state(["pkg nvidia-driver-590-open 590.44.01-0ubuntu1"])
    assert driver_refusals(state, facts(driver="590.44.01"), settings(driver_branch=590)) == []
    assert driver_packages(
        host_state(["pkg nvidia-driver-580-server-open 1", "pkg nvidia-driver-common 1"])
    ) == {"nvidia-driver-580-server-open": 580}
