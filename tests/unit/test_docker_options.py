"""engine.docker_args read with docker's own grammar (issue 24): one option at a time
(``read_option``: the decision), the problems said of what is refused (``docker_problem``:
the words), ``parse_docker_args`` composing them, and how an operator's RDMA device meets the
deploy's own on a pair (``fabric.rdma_options``)."""

from __future__ import annotations

import pytest

from sparkdeploy.knowledge.docker_options import (
    ReadOption,
    docker_flags,
    docker_problem,
    docker_values,
    docker_words,
    grammar,
    hardening_words,
    managed_options,
    parse_docker_args,
    read_option,
    split_short,
    unsafe_rules,
    warned_rules,
)
from sparkdeploy.knowledge.fabric import rdma_options
from tests.unit.test_engine_units import exec_start, units

RDMA_WORDS = ("--device=/dev/infiniband", "--ulimit=memlock=-1:-1")


@pytest.mark.parametrize(
    ("words", "verdict", "name", "value", "after"),
    [
        (["--shm-size=16g"], "allowed", "--shm-size", "16g", 1),
        (["--shm-size", "16g"], "allowed", "--shm-size", "16g", 2),
        (["--shm-size", "--privileged"], "needs_value", "--shm-size", None, 1),
        (["--shm-size=a b"], "refused", "--shm-size", "a b", 1),
        (["--privileged"], "allowed", "--privileged", None, 1),
        (["--privileged=true"], "allowed", "--privileged", None, 1),
        (["--privileged=false"], "off", "--privileged", None, 1),
        (["--privileged=yes"], "no_value", "--privileged", "yes", 1),
        (["--name", "x"], "managed", "--name", "x", 2),  # its value goes with it
        (["--rm", "x"], "managed", "--rm", None, 1),
        (["--nope", "x"], "unknown", "--nope", None, 1),
        (["image:tag"], "stray", "image:tag", None, 1),
        (["-u", "1000"], "allowed", "--user", "1000", 2),
        (["--oom-score-adj", "-500"], "unsafe", "--oom-score-adj", "-500", 2),
        (["--cap-add=cap_ipc_lock"], "allowed", "--cap-add", "IPC_LOCK", 1),
    ],
)
def test_each_option_is_read_with_the_value_it_takes(words, verdict, name, value, after):
    read, index = read_option(words, 0)
    assert (read.verdict, read.name, read.value, index) == (verdict, name, value, after)


def test_short_options_are_split_as_pflag_reads_them():
    assert split_short(["-it", "-m16g", "-m=8g", "-dit"]) == [
        "-i", "-t", "-m", "16g", "-m", "8g", "-d", "-i", "-t",
    ]  # fmt: skip
    options, problems, _ = parse_docker_args(["-m16g", "-u", "1000:1000", "-l", "a=b"])
    assert options == (("--memory", "16g"), ("--user", "1000:1000"), ("--label", "a=b"))
    assert problems == []


@pytest.mark.parametrize(
    "size",
    ["10.24gb", "16g", "16G", "1024m", "2tb", "512MiB", "1.5g", "4294967296", "64k", "1GB", "16 g"],
)
def test_sizes_follow_go_units(size):
    options, problems, _ = parse_docker_args([f"--shm-size={size}"])
    assert options == (("--shm-size", size),) and problems == []


@pytest.mark.parametrize("size", ["16  g", "g", "1.2.3g", "16gg", "-1", "16x", "1e9", " 16g"])
def test_sizes_docker_would_refuse_are_refused_with_the_grammar(size):
    [problem] = parse_docker_args([f"--shm-size={size}"])[1]
    assert "is not a value docker reads for --shm-size, so docker would refuse it" in problem
    assert problem.endswith("write it as --shm-size=16g")


@pytest.mark.parametrize(
    "words",
    [
        ["--ulimit", "nofile=1048576:1048576"],
        ["--ulimit=stack=67108864"],
        ["--ulimit=memlock=-1:-1"],
        ["--ulimit", "nproc=65535"],
        ["--cap-add=SYS_NICE", "--cap-drop=ALL"],
        ["--device=/dev/infiniband/uverbs0"],
        ["--device=/dev/infiniband:/dev/infiniband:rwm"],
        ["--device", "/dev/nvidia0:/dev/nvidia0:rw"],
        ["--tmpfs", "/scratch:size=1g"],
        ["--init", "--read-only=false", "--stop-timeout=60", "--pids-limit=4096"],
        ["--security-opt=no-new-privileges"],
        ["--pid=container:other"],
        ["--device-cgroup-rule", "c 231:* rwm"],
        ["--runtime=nvidia", "--group-add=video", "--cpuset-cpus=0-9", "--label=team=ml"],
    ],
)
def test_options_docker_knows_are_accepted(words):
    assert parse_docker_args(words)[1] == []


@pytest.mark.parametrize(
    ("words", "said"),
    [
        (["--cap-add=ALL"], "--cap-add 'ALL' is refused as unsafe"),
        (["--cap-add", "sys_admin"], "--cap-add 'SYS_ADMIN' is refused as unsafe"),
        (["--cap-add=CAP_NET_ADMIN"], "--cap-add 'NET_ADMIN' is refused as unsafe"),
        (["--pid=host"], "--pid 'host' is refused as unsafe: shares the Spark's process"),
        (["--userns=host"], "--userns 'host' is refused as unsafe"),
        (["--security-opt", "systempaths=unconfined"], "'systempaths=unconfined' is refused"),
        (["--device=/dev/sda"], "--device '/dev/sda' is refused as unsafe: hands the container"),
        (["--device=/dev/nvme0n1:/dev/x"], "--device '/dev/nvme0n1:/dev/x' is refused"),
        (["--device=/dev/mem"], "--device '/dev/mem' is refused"),
        (["--device=/dev/input/event3"], "--device '/dev/input/event3' is refused"),
        (["--device=/dev/disk/by-id/nvme-x:/dev/x:r"], "is refused as unsafe"),
        (["--device=/dev"], "--device '/dev' is refused"),
        (["--device=/dev/infiniband/../sda"], "is refused as unsafe"),
        (["--device-cgroup-rule=b *:* rwm"], "--device-cgroup-rule 'b *:* rwm' is refused"),
        (["--device-cgroup-rule=a"], "is refused as unsafe"),
        (["--oom-kill-disable"], "--oom-kill-disable is refused as unsafe"),
        (["--oom-score-adj=-1000"], "(a lockout)"),
        (["--cidfile=/etc/cron.d/x"], "--cidfile '/etc/cron.d/x' is refused as unsafe"),
        (["--label-file", "/etc/shadow"], "--label-file '/etc/shadow' is refused as unsafe"),
        (["--use-api-socket"], "--use-api-socket is refused as unsafe"),
    ],
)
def test_unsafe_options_are_refused_with_why_and_the_fix(words, said):
    [problem] = parse_docker_args(words)[1]
    assert said in problem
    assert "(sparkdeploy/knowledge/docker_options.yaml, unsafe); fix: " in problem


@pytest.mark.parametrize(
    ("words", "said"),
    [
        (["-e", "A=1"], "-e: use engine.env"),
        (["--env-file", "/etc/x"], "--env-file: use engine.env"),
        (["-v", "/:/host"], "-v: use engine.mounts"),
        (["--mount", "type=bind,src=/,dst=/h"], "--mount: use engine.mounts"),
        (["--gpus", "all"], "--gpus: managed by the deploy (--gpus all)"),
        (["--ipc=host"], "--ipc: managed by the deploy (--ipc host)"),
        (["--network", "host"], "--network: managed by the deploy"),
        (["--net=host"], "--net: managed by the deploy"),
        (["--pull=always"], "--pull: managed by the deploy (--pull never"),
        (["--log-driver", "syslog"], "--log-driver: managed by the unit"),
        (["-it"], "-i: managed by the unit (no terminal"),
        (["--name"], "--name: managed by the deploy"),
    ],
)
def test_managed_options_are_refused_naming_the_setting(words, said):
    problems = parse_docker_args(words)[1]
    assert said in problems[0] and all("remove it" in p or "use engine." in p for p in problems)


@pytest.mark.parametrize(
    ("words", "warned"),
    [
        (["--privileged"], "--privileged gives the container every device"),
        (["--security-opt=seccomp=unconfined"], "--security-opt seccomp=unconfined turns off"),
        (["--security-opt", "apparmor:unconfined"], "turns off one of Docker's confinements"),
        (["--cap-add=net_raw"], "--cap-add NET_RAW undoes the deploy's --cap-drop=NET_RAW"),
        (["--security-opt=no-new-privileges=false"], "undoes the deploy's --security-opt"),
        (["--memory=100g"], "--memory sets a cgroup limit"),
        (["--user=1000:1000"], "--user 1000:1000: the engine runs as this user"),
        (["--cap-add=SYS_PTRACE"], "--cap-add SYS_PTRACE lets the container trace"),
    ],
)
def test_accepted_with_a_warning(words, warned):
    options, problems, warnings = parse_docker_args(words)
    assert problems == [] and options and any(warned in w for w in warnings)


def test_undoing_the_hardening_is_never_silent():
    for words in (["--cap-add=NET_RAW"], ["--security-opt=no-new-privileges=false"]):
        options, _, warnings = parse_docker_args(words)
        assert len(hardening_words(docker_words(options))) == 1 and warnings
    assert hardening_words(docker_words(parse_docker_args(["--cap-add=cap_net_raw"])[0])) == (
        "--security-opt=no-new-privileges",
    )


@pytest.mark.parametrize(
    ("words", "said"),
    [
        (["--nope"], "--nope: docker run has no such option"),
        (["--shmsize=1g"], "did you mean --shm-size?"),
        (["-Z"], "-Z: docker run has no such option"),
    ],
)
def test_an_option_docker_does_not_know_is_refused_as_docker_would(words, said):
    [problem] = parse_docker_args(words)[1]
    assert said in problem and 'docker would stop with "unknown flag"' in problem


@pytest.mark.parametrize(
    "words", [["ubuntu"], ["--privileged", "ubuntu"], ["--init", "alpine:3"], ["busybox"]]
)
def test_a_word_that_is_no_options_value_is_refused_as_the_image(words):
    problems = parse_docker_args(words)[1]
    assert any("is no option's value: docker would read it as the image" in p for p in problems)


def test_the_problems_name_the_option_and_the_fix():
    assert docker_problem(ReadOption("needs_value", "--shm-size")) == (
        "--shm-size needs a value, such as --shm-size=16g"
    )
    assert docker_problem(ReadOption("managed", "--env", spelled="-e")).startswith(
        "-e: use engine.env"
    )
    options, problems, _ = parse_docker_args(["--shm-size=16g", "--nope", "--rm"])
    assert options == (("--shm-size", "16g"),) and len(problems) == 2


def test_the_yaml_is_whole_and_sourced():
    known = docker_flags() | docker_values()
    assert not docker_flags() & docker_values()
    for name in (*grammar(), *managed_options()):
        assert name in known, name
    for rule in (*unsafe_rules(), *warned_rules()):
        assert rule.option in known and len(rule.source) > 20 and rule.text, rule.option
    for rule in unsafe_rules():
        assert rule.fix, rule.option
    for form in grammar().values():
        assert len(form.source) > 40, form.name
        parsed, found, _ = parse_docker_args(form.example.split(" "))
        assert found == [] and parsed[0][0] == form.name, form.name


# --- RDMA devices on one Spark and on a pair ---------------------------------------------


@pytest.mark.parametrize(
    "device",
    [
        "/dev/infiniband/uverbs0",
        "/dev/infiniband:/dev/infiniband:rw",
        "/dev/infiniband/uverbs1:/dev/infiniband/uverbs1",
        "/dev/infiniband/rdma_cm",
    ],
)
def test_a_narrower_or_mapped_rdma_device_is_kept_next_to_the_deploys(device):
    options, problems, _ = parse_docker_args([f"--device={device}"])
    assert problems == []  # one Spark: the operator's device, nothing added
    words, problems, warnings = rdma_options(options)
    assert words == RDMA_WORDS and problems == []  # a pair: the deploy's stays
    [warning] = warnings
    assert warning.startswith(f"--device {device} is written after the deploy's")
    assert "NCCL must still find the IB devices" in warning and "link test" in warning


@pytest.mark.parametrize(
    "device",
    ["/dev/infiniband", "/dev/infiniband/", "/dev/infiniband:/dev/infiniband:rwm"],
)
def test_the_deploys_own_device_repeated_is_written_once(device):
    words, problems, warnings = rdma_options(parse_docker_args([f"--device={device}"])[0])
    assert (words, problems, warnings) == (RDMA_WORDS[1:], [], [])


def test_another_memlock_on_a_pair_is_refused_as_it_would_undo_the_deploys():
    words, problems, _ = rdma_options(parse_docker_args(["--ulimit=memlock=1024"])[0])
    assert words == RDMA_WORDS[:1]
    [problem] = problems
    assert problem.startswith("--ulimit memlock=1024: on a multi-node Spark the deploy gives")
    assert "docker keeps the last --ulimit" in problem
    assert problem.endswith("remove it from engine.docker_args")


# --- values reach the unit as one word each ----------------------------------------------


def test_a_value_with_spaces_quotes_and_specifiers_is_one_word_of_the_unit():
    health = "--health-cmd=curl -f http://127.0.0.1:8000/health || exit 1; reboot"
    label = "--label=note=it's $HOME at 100%"
    unit = units("s1", {"name": "sglang", "docker_args": [health, label]})
    words = exec_start(unit["spark-engine-sglang.service"])
    assert health in words  # one word: no second command, no directive
    assert "--label=note=it's $$HOME at 100%%" in words  # systemd reads back $HOME and %


def test_with_privileged_a_narrower_device_needs_no_warning_on_a_pair():
    options = parse_docker_args(["--privileged", "--device=/dev/infiniband/uverbs0"])[0]
    assert rdma_options(options) == (RDMA_WORDS[1:], [], [])  # every device is given already
