"""engine.docker_args read one option at a time (``read_option``: the decision) and the
problems said of what is refused (``docker_problem``: the words); ``parse_docker_args``
composes them."""

from __future__ import annotations

import pytest

from sparkdeploy.knowledge.docker_options import (
    ReadOption,
    allowed_options,
    docker_problem,
    parse_docker_args,
    read_option,
)


@pytest.mark.parametrize(
    ("words", "verdict", "name", "value", "after"),
    [
        (["--shm-size=16g"], "allowed", "--shm-size", "16g", 1),
        (["--shm-size", "16g"], "allowed", "--shm-size", "16g", 2),
        (["--shm-size", "--privileged"], "needs_value", "--shm-size", None, 1),
        (["--shm-size=a b"], "refused", "--shm-size", "a b", 1),
        (["--privileged"], "allowed", "--privileged", None, 1),
        (["--privileged=true"], "no_value", "--privileged", None, 1),
        (["--name", "x"], "managed", "--name", None, 2),  # its value goes with it
        (["--rm", "x"], "managed", "--rm", None, 1),
        (["--nope", "x"], "unknown", "--nope", None, 1),
        (["image:tag"], "stray", "image:tag", None, 1),
    ],
)
def test_each_option_is_read_with_the_value_it_takes(words, verdict, name, value, after):
    read, index = read_option(words, 0)
    assert (read.verdict, read.name, read.value, index) == (verdict, name, value, after)


def test_the_problems_name_the_option_and_the_fix():
    shm = allowed_options()["--shm-size"]
    assert docker_problem(ReadOption("needs_value", "--shm-size", None, shm)) == (
        f"--shm-size needs a value, such as {shm.example}"
    )
    assert docker_problem(ReadOption("managed", "--env")).startswith("--env: use engine.env")
    assert "not an allowed docker option" in docker_problem(ReadOption("unknown", "--nope"))
    options, problems, _ = parse_docker_args(["--shm-size=16g", "--nope", "--rm"])
    assert options == (("--shm-size", "16g"),) and len(problems) == 2
