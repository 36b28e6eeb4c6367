"""The preflight fact's parsing and the GB10 refusal rule."""

from __future__ import annotations

from sparkdeploy.config.spark import SparkSettings
from sparkdeploy.deploys.host.preflight import summary
from sparkdeploy.facts.preflight import SparkPreflight
from sparkdeploy.fitness import gpu_refusals as refusals
from tests.unit.samples import docstring_sample

SPARK_OUTPUT = docstring_sample(SparkPreflight)


def facts(lines=SPARK_OUTPUT, **replace):
    lines = [line for line in lines if line.split("=", 1)[0] not in replace]
    lines += [f"{key}={value}" for key, value in replace.items()]
    return SparkPreflight().process(lines)


def settings(**keys) -> SparkSettings:
    return SparkSettings(ssh_host="spark", **keys)


def test_parses_a_spark():
    parsed = facts()
    assert parsed.gpu_name == "NVIDIA GB10"
    assert (parsed.driver, parsed.arch, parsed.kernel) == (
        "580.95.05",
        "aarch64",
        "6.11.0-1016-nvidia",
    )
    assert parsed.os == "Ubuntu 24.04.3 LTS"
    assert (parsed.mem_total_kb, parsed.mem_available_kb) == (125513548, 119203140)
    assert (parsed.disk_path, parsed.disk_free_kb) == ("/opt", 3401563204)
    assert parsed.drm_override is True and parsed.reboot_pending == ""


def test_missing_values_parse_as_empty_not_crash():
    parsed = facts(["gpu=", "drm_override=", "mem_total_kb=", "reboot_pending=drm removed"])
    assert parsed.gpu == "" and parsed.gpu_name == ""
    assert parsed.drm_override is False and parsed.mem_total_kb == 0
    assert parsed.reboot_pending == "drm removed"


def test_gb10_is_accepted_and_summarised():
    assert refusals(facts(), settings()) == []
    assert summary(facts()) == (
        "NVIDIA GB10, driver 580.95.05, aarch64, Ubuntu 24.04.3 LTS, kernel "
        "6.11.0-1016-nvidia, memory 122.1 GB available of 128.5 GB, 3483.2 GB free at /opt"
    )


def test_other_gpu_is_refused_with_its_name():
    other = facts(gpu="GPU 0: NVIDIA GeForce RTX 4090 (UUID: GPU-1)")
    [reason] = refusals(other, settings())
    assert "'NVIDIA GeForce RTX 4090', not an NVIDIA GB10" in reason
    assert refusals(other, settings(allow_non_gb10=True)) == []


def test_gb100_is_not_a_gb10():
    assert refusals(facts(gpu="GPU 0: NVIDIA GB100 (UUID: GPU-1)"), settings())


def test_no_gpu_is_refused():
    [reason] = refusals(facts(gpu=""), settings())
    assert "no NVIDIA GPU answered `nvidia-smi -L`" in reason
