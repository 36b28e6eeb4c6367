"""The preflight fact's parsing and the GB10 refusal rule."""

from __future__ import annotations

from sparkdeploy.config.spark import SparkSettings
from sparkdeploy.deploys.host.preflight import summary
from sparkdeploy.facts.preflight import SparkPreflight
from sparkdeploy.fitness import gpu_refusals as refusals
from sparkdeploy.fitness import runtime_refusals
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
        "6.11.0-1016-nvidia, memory 122.1 GB available of 128.5 GB, 3483.2 GB free at /opt, "
        "docker 28.5.1 (overlay2, 3483.2 GB free at /var/lib/docker)"
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


# --- the container runtime ----------------------------------------------------------------


def test_parses_the_container_runtime():
    parsed = facts()
    assert parsed.docker == "/usr/bin/docker"
    assert (parsed.docker_server, parsed.docker_driver, parsed.docker_root) == (
        "28.5.1",
        "overlay2",
        "/var/lib/docker",
    )
    assert parsed.docker_runtimes == ("io.containerd.runc.v2", "nvidia", "runc")
    assert parsed.docker_free_kb == 3401563204 and parsed.docker_error == ""
    assert runtime_refusals(parsed) == []


def test_no_docker_is_refused_with_what_to_install():
    [problem] = runtime_refusals(facts(docker="", docker_info=""))
    assert problem.startswith("docker is not installed; the engine runs in a container")
    assert "nvidia-ctk runtime configure --runtime=docker" in problem


def test_a_daemon_that_does_not_answer_is_refused_with_its_error():
    error = (
        "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. "
        "Is the docker daemon running?"
    )
    [problem] = runtime_refusals(facts(docker_info=error))
    assert problem == (
        f"the Docker daemon does not answer ({error}): run `sudo systemctl enable --now "
        "docker` and run the deploy again"
    )


def test_the_gpu_reaches_containers_by_the_hook_a_runtime_or_cdi():
    runc_only = '28.5.1|overlay2|/var/lib/docker|{"runc":{"path":"runc"}}'
    none = facts(docker_info=runc_only, gpu_hook="", gpu_cdi="")
    [problem] = runtime_refusals(none)
    assert "cannot give a container the GPU (`--gpus all`)" in problem
    assert "sudo apt-get install -y nvidia-container-toolkit" in problem
    assert runtime_refusals(facts(docker_info=runc_only, gpu_cdi="")) == []  # the hook
    assert runtime_refusals(facts(docker_info=runc_only, gpu_hook="")) == []  # CDI
    assert runtime_refusals(facts(gpu_hook="", gpu_cdi="")) == []  # the nvidia runtime


def test_the_summary_leaves_out_a_daemon_that_does_not_answer():
    assert summary(facts(docker_info="Cannot connect")).endswith("3483.2 GB free at /opt")
