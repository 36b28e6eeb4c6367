"""
Hostile inventory values, as properties: whatever text goes into a string setting that
reaches a Spark, the inventory is either refused with an ``InventoryError`` that names file,
host and key (never another exception, never the raw value when it holds a control
character or a token), or everything the deploy writes and runs comes back, read strictly
as systemd, the shell, docker and sudo read it (tests/unit/hostile.py), exactly as it does
for a plain value with the new value in its place: the same directives, words, variables,
rules and commands, and nothing else.

The escape functions themselves are checked the same way, one property each.

Deterministic (derandomized, no example database: the examples follow from each test's
source, so CI sees the same ones on every run) and bounded (``EXAMPLES`` per setting), so
the file runs in about ten seconds on one core.
"""

from __future__ import annotations

import copy
import posixpath
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from sparkdeploy.config.engine import Mount
from sparkdeploy.config.errors import InventoryError
from sparkdeploy.config.shipped import secret_line
from sparkdeploy.config.trust import credential_variable, model_dir
from sparkdeploy.config.values import looks_like_secret, redact, shown
from sparkdeploy.escape import (
    UnsafeValue,
    docker_env,
    env_value,
    shell,
    sudoers_user,
    systemd_text,
    systemd_word,
)
from sparkdeploy.inventory import Inventory, build_inventory
from tests.unit.hostile import (
    TOKEN,
    Malformed,
    control_characters,
    exec_command,
    read_unit,
    shell_words,
    split_words,
    strings_in,
    substituted,
    systemd_reads_literally,
    unspecify,
    written,
)
from tests.unit.hostile import systemd_word as read_word

PATH = "inventory/hostile.yml"
EXAMPLES = 80  # per setting; about 20 settings
ESCAPE_EXAMPLES = 400  # per escape function (cheap)

deterministic = settings(
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# --- hostile text --------------------------------------------------------------------------

# Pieces a hostile recipe would use: line breaks and other control characters, quotes,
# escapes, specifiers and variables, shell operators, flags, sudoers words, a token.
PIECES = [
    "\n", "\r", "\r\n", "\t", "\x00", "\x0b", "\x0c", "\x1b", "\x7f", "\x85", "\x9b",
    "\u2028", "\u2029", "\xa0", "\u202e", "\ufeff", " ", '"', "'", "`", "\\", "\\\n",
    "%", "%h", "%Z", "%%", "$", "$$", "${X}", "$X", "$(id)", ";", " ; ", "&", "&&", "|",
    "<", ">", "(", ")", "{", "}", "[", "]", "#", "*", "?", "!", "~", "^", "=", "@", ":",
    ",", "/", ".", "..", "/../", "-", "--", "--host=0.0.0.0", "-v=/:/host", "ALL", "%sudo",
    " ALL=(ALL) NOPASSWD: ALL", "\nExecStartPre=/some/script\n#", "\nLD_PRELOAD=/tmp/x.so",
    # A token always after a non-word character: one glued to a word character before it
    # (a letter, a digit, '_', any Unicode one: values.SECRET starts with \b) is a known
    # hole (test_hostile_cases.py, "token glued to a word"), not tried again here.
    TOKEN, f"={TOKEN}", f" {TOKEN}", f"/{TOKEN}", f"\n{TOKEN}", f"-{TOKEN}",
]  # fmt: skip
GLUED = re.compile(r"\w" + re.escape(TOKEN))
ALPHABET = st.one_of(st.sampled_from(sorted(set("".join(PIECES)))), st.characters())
hostile_text = st.text(ALPHABET, max_size=40)
piece = st.one_of(st.sampled_from(PIECES), st.text(ALPHABET, min_size=1, max_size=4))


def _insert(valid: str, at: int, pieces: list[str]) -> str:
    at %= len(valid) + 1
    value = valid[:at] + "".join(pieces) + valid[at:]
    return GLUED.sub(lambda match: match.group()[0] + " " + TOKEN, value)


def near(valid: list[str]) -> st.SearchStrategy[str]:
    """A valid value with hostile pieces put in somewhere (none: the valid value itself)."""
    return st.builds(
        _insert, st.sampled_from(valid), st.integers(0, 200), st.lists(piece, max_size=3)
    )


def values(valid: list[str]) -> st.SearchStrategy[str]:
    """Arbitrary text, hostile text, and valid values made hostile; built once per list of
    valid values (a test draws it in each of its examples, and building the strategy anew
    each time was a third of this file's time)."""
    return _values(tuple(valid))


@cache
def _values(valid: tuple[str, ...]) -> st.SearchStrategy[str]:
    return st.one_of(st.text(max_size=40), hostile_text, near(list(valid)), near(list(valid)))


# --- the settings that reach a Spark -----------------------------------------------------

SPARK: dict[str, Any] = {
    "ssh_host": "192.0.2.10",
    "ssh_user": "zquser",
    "model_dir": "/srv/zqdir",
    "model_repo": "zqorg/zqmodel",
    "model_revision": "zqrev",
    "model_base_repo": "zqorg/zqbase",
    "draft_model_repo": "zqorg/zqdraft",
    "hf_endpoint": "https://zqhub.example/zqpath?a=1&b=2",
    "hf_token_env": "ZQ_LAPTOP_VAR",
    "sysfs_root": "/zqsys",
    "engine": {
        "name": "sglang",
        "image": "zqregistry.example/zqimage:zqtag-cu13",
        "version": "0.5.10",
        "served_model_name": "zqserved",
        "args": {"--chat-template": "zqtemplate", "--lora-paths": ["zqlora1", "zqlora2"]},
        "env": {"ZQNAME": "zqvalue"},
        "docker_args": ["--label=zqopt"],
        "mounts": [{"host": "/srv/zqhost", "container": "/zqmnt"}],
        "other_gpu_services": ["zqunit.service"],
    },
}
PAIR: dict[str, Any] = {
    "defaults": {"ssh_user": "nvidia", "model_repo": "org/model", "engine": {"name": "sglang"}},
    "sparks": {
        f"s{n}": {
            "ssh_host": f"192.0.2.{n}",
            "qsfp": [
                {"interface": "zqif0", "address": f"192.168.100.{n}/24"},
                {"interface": "enP2p1s0f0np0", "address": f"192.168.101.{n}/24"},
            ],
        }
        for n in (1, 2)
    },
}


def _set(document: dict[str, Any], path: tuple[Any, ...], value: Any) -> None:
    for part in path[:-1]:
        document = document[part]
    document[path[-1]] = value


@dataclass(frozen=True)
class Setting:
    """A string setting: where it goes in the document, the plain value the baseline
    holds there (its mark), what the mark stands for in what is written once the value is
    accepted, and valid values to make hostile."""

    name: str
    key: str  # the top-level key a refusal names
    path: tuple[Any, ...]  # under the Spark (or, pair, under each Spark)
    mark: str
    valid: list[str]
    pair: bool = False
    commands: bool = False  # reaches the model-folder commands
    wrap: Callable[[str], Any] | None = None  # the value as the document holds it
    # mark -> what it stands for, from the settings the value was accepted as
    stands_for: Callable[[Inventory, str], dict[str, str]] | None = None
    as_read: Callable[[Inventory], Any] | None = None  # the value as the settings hold it

    def document(self, value: str) -> dict[str, Any]:
        item = self.wrap(value) if self.wrap else value
        if self.pair:
            document = copy.deepcopy(PAIR)
            for spark in document["sparks"].values():
                _set(spark, self.path, item)
            return document
        spark = copy.deepcopy(SPARK)
        _set(spark, self.path, item)
        return {"sparks": {"s1": spark}}

    def marks(self, inventory: Inventory, value: str) -> dict[str, str]:
        if self.stands_for:
            return self.stands_for(inventory, value)
        return {self.mark: value}


def _spark(key: str) -> Callable[[Inventory], Any]:
    return lambda inventory: getattr(inventory.sparks["s1"], key)


def _engine(key: str) -> Callable[[Inventory], Any]:
    return lambda inventory: getattr(inventory.sparks["s1"].engine, key)


def _engine_item(key: str, *path: Any) -> Callable[[Inventory], Any]:
    """``engine.<key>[path...]`` (a flag's value, a list item, a variable)."""

    def read(inventory: Inventory) -> Any:
        item: Any = getattr(inventory.sparks["s1"].engine, key)
        for part in path:
            item = item[part]
        return item

    return read


def _mount(mark: str, side: str) -> Callable[[Inventory, str], dict[str, str]]:
    """A mount path stands for itself as the settings normalized it."""

    def stands_for(inventory: Inventory, _: str) -> dict[str, str]:
        engine = inventory.sparks["s1"].engine
        assert engine is not None
        return {mark: getattr(engine.mounts[0], side)}

    return stands_for


def _repo(mark: str) -> Callable[[Inventory, str], dict[str, str]]:
    """A repository stands for itself, and its name for the model folder's name."""
    return lambda _, value: {mark: value, mark.split("/")[1]: value.split("/")[-1]}


REPOS = ["mistralai/Mistral-Small-4-119B-2603", "org/model.v2", "zqorg/zqmodel"]
USERS = ["nvidia", "svc_llm", "_svc", "llm-ops"]
PATHS = ["/opt/models", "/home/nvidia/models", "/srv/zqdir"]

SETTINGS = [
    Setting(
        "model_dir", "model_dir", ("model_dir",), "/srv/zqdir", PATHS, commands=True,
        stands_for=lambda inventory, _: {"/srv/zqdir": inventory.sparks["s1"].model_dir},
        as_read=_spark("model_dir"),  # normalized: /opt/models/ is /opt/models
    ),
    Setting(
        "model_repo", "model_repo", ("model_repo",), "zqorg/zqmodel", REPOS, commands=True,
        stands_for=_repo("zqorg/zqmodel"), as_read=_spark("model_repo"),
    ),
    Setting(
        "model_revision", "model_revision", ("model_revision",), "zqrev",
        ["main", "refs/pr/1", "v1.0", "0123456789abcdef0123456789abcdef01234567"],
        commands=True, as_read=_spark("model_revision"),
    ),
    Setting(
        "model_base_repo", "model_base_repo", ("model_base_repo",), "zqorg/zqbase", REPOS,
        commands=True, as_read=_spark("model_base_repo"),
    ),
    Setting(
        # not zqorg/zqmodel: the model's own folder (trust.same_folder_problem refuses it)
        "draft_model_repo", "draft_model_repo", ("draft_model_repo",), "zqorg/zqdraft",
        [*REPOS[:2], "zqorg/zqdraft"],
        commands=True, stands_for=_repo("zqorg/zqdraft"), as_read=_spark("draft_model_repo"),
    ),
    Setting(
        "ssh_user", "ssh_user", ("ssh_user",), "zquser", USERS, commands=True,
        as_read=_spark("ssh_user"),
    ),
    Setting(
        "operator_user", "operator_user", ("operator_user",), "zqoperator", USERS, commands=True,
        as_read=_spark("operator_user"),
    ),
    Setting(
        "hf_endpoint", "hf_endpoint", ("hf_endpoint",), "https://zqhub.example/zqpath?a=1&b=2",
        ["https://huggingface.co", "https://hf-mirror.example/a/b?x=1&y=2#f",
         "https://[2001:db8::1]:8443/hub", "https://zqhub.example/zqpath?a=1&b=2"],
        commands=True, as_read=_spark("hf_endpoint"),
    ),  # fmt: skip
    Setting(
        "hf_token_env", "hf_token_env", ("hf_token_env",), "ZQ_LAPTOP_VAR",
        ["HF_TOKEN", "MY_HF_TOKEN", "_X1"], as_read=_spark("hf_token_env"),
    ),
    Setting(
        "sysfs_root", "sysfs_root", ("sysfs_root",), "/zqsys", ["/sys", "/host/sys"],
        # the command joins <sysfs_root without a final '/'>/class/infiniband: / gives /class
        stands_for=lambda inventory, _: {"/zqsys": inventory.sparks["s1"].sysfs_root.rstrip("/")},
        as_read=_spark("sysfs_root"),  # normalized like model_dir
    ),
    Setting(
        "engine.image", "engine", ("engine", "image"), "zqregistry.example/zqimage:zqtag-cu13",
        ["zqregistry.example/zqimage:zqtag-cu13",
         "lmsysorg/sglang:nightly-dev-cu13-20260323-999bad5a",
         f"registry.example:5000/a/b:x-cu13@sha256:{'0' * 64}"],
        as_read=_engine("image"),
    ),  # fmt: skip
    Setting(
        "engine.served_model_name", "engine", ("engine", "served_model_name"), "zqserved",
        ["mistral-small-4", "org/model:v1@x+y", "zqserved"], as_read=_engine("served_model_name"),
    ),
    Setting(
        "engine.args string flag", "engine", ("engine", "args", "--chat-template"),
        "zqtemplate", ["zqtemplate", "/opt/t.jinja", "a b", "{{ x }}"],
        as_read=_engine_item("args", "--chat-template"),
    ),
    Setting(
        "engine.args list item", "engine", ("engine", "args", "--lora-paths", 1), "zqlora2",
        ["zqlora2", "/opt/lora/a", "name=/opt/lora/a"],
        as_read=_engine_item("args", "--lora-paths", 1),
    ),
    Setting(
        "engine.env name", "engine", ("engine", "env"), "ZQNAME",
        ["ZQNAME", "SGLANG_X", "_A1"], wrap=lambda value: {value: "zqvalue"},
        as_read=lambda inventory: next(iter(_engine("env")(inventory))),
    ),
    Setting(
        "engine.env value", "engine", ("engine", "env", "ZQNAME"), "zqvalue",
        ["zqvalue", "a b = c # d", "True", ""],
        as_read=_engine_item("env", "ZQNAME"),
    ),
    Setting(
        "engine.docker_args item", "engine", ("engine", "docker_args", 0), "--label=zqopt",
        # --privileged also drops the deploy's hardening (--cap-drop=NET_RAW, no-new-privileges),
        # so it is not written back alone: test_engine_images.py checks it.
        ["--label=zqopt", "--shm-size=16g", "--ulimit=memlock=-1", "--label=a b",
         "--device=/dev/infiniband", "--cpuset-cpus=0-9"],
        as_read=_engine_item("docker_args", 0),
    ),
    Setting(
        "engine.mounts host", "engine", ("engine", "mounts", 0, "host"), "/srv/zqhost",
        ["/srv/zqhost", "/srv/kernels", "/home/nvidia/kernels"],
        stands_for=_mount("/srv/zqhost", "host"),  # normalized like model_dir
    ),
    Setting(
        "engine.mounts container", "engine", ("engine", "mounts", 0, "container"), "/zqmnt",
        ["/zqmnt", "/workspace/kernels", "/opt/extra"],
        stands_for=_mount("/zqmnt", "container"),
    ),
    Setting(
        "engine.other_gpu_services item", "engine", ("engine", "other_gpu_services", 0),
        "zqunit.service", ["zqunit.service", "tts.service", "comfy-ui@1.service"],
        as_read=_engine_item("other_gpu_services", 0),
    ),
    Setting(
        "qsfp interface", "qsfp", ("qsfp", 0, "interface"), "zqif0",
        ["zqif0", "enp1s0f0np0", "eth0.100"], pair=True,
        as_read=lambda inventory: inventory.sparks["s1"].qsfp[0].interface,
    ),
]  # fmt: skip


@cache
def baseline(name: str) -> dict[str, Any]:
    """What the deploy writes with the setting's plain mark in place."""
    setting = next(s for s in SETTINGS if s.name == name)
    return written(build_inventory(setting.document(setting.mark), PATH), setting.commands)


def assert_refusal_names_it(error: InventoryError, setting: Setting, hosts: list[str]) -> None:
    """Every problem names the file; one names a host and the key; none carries a control
    character or anything token-shaped."""
    assert error.problems
    assert all(problem.startswith(f"{PATH}:") for problem in error.problems), error.problems
    assert any(
        any(f"'{host}'" in problem for host in hosts)
        and re.search(rf"\b{re.escape(setting.key)}\b", problem)
        for problem in error.problems
    ), error.problems
    for problem in error.problems:
        assert not control_characters(problem), problem
    assert TOKEN not in str(error)
    assert not re.search(r"hf_[A-Za-z0-9]{20,}", str(error)), str(error)


@pytest.mark.parametrize("setting", SETTINGS, ids=[s.name for s in SETTINGS])
@settings(deterministic, max_examples=EXAMPLES)
@given(data=st.data())
def test_a_hostile_value_is_refused_or_written_back_exactly(setting: Setting, data: Any) -> None:
    value = data.draw(values(setting.valid), label=setting.name)
    try:
        inventory = build_inventory(setting.document(value), PATH)
    except InventoryError as error:
        event("refused")
        assert_refusal_names_it(error, setting, ["s1", "s2"] if setting.pair else ["s1"])
        return
    event("accepted" if value in setting.valid else "accepted, not a listed valid value")
    if setting.as_read is not None:
        expected = (
            posixpath.normpath(value) if setting.key in ("model_dir", "sysfs_root") else value
        )
        assert setting.as_read(inventory) == expected
    assert written(inventory, setting.commands) == substituted(
        baseline(setting.name), setting.marks(inventory, value)
    )


@pytest.mark.parametrize("setting", SETTINGS, ids=[s.name for s in SETTINGS])
def test_the_baseline_carries_each_mark_where_it_lands(setting: Setting) -> None:
    """The comparison above is not empty: the plain value is in what is written (except
    hf_token_env, which stays on the laptop), and each accepted valid value is too."""
    found = [text for text in strings_in(baseline(setting.name)) if setting.mark in text]
    if setting.name == "hf_token_env":
        assert found == []
    else:
        assert found, setting.name
    for valid in setting.valid:
        inventory = build_inventory(setting.document(valid), PATH)
        assert written(inventory, setting.commands) == substituted(
            baseline(setting.name), setting.marks(inventory, valid)
        )


def test_the_marks_are_distinct() -> None:
    """No mark is part of another setting's, so replacing one never touches another."""
    marks = {s.name: {s.mark, s.mark.rsplit("/", 1)[-1]} for s in SETTINGS}
    for name, own in marks.items():
        for other, theirs in marks.items():
            if other != name:
                assert not any(a in b for a in own for b in theirs), (name, other)


def test_a_value_that_reaches_exec_lines_is_one_whole_word() -> None:
    """Spelled out once for the engine settings: the value is exactly one word of
    ExecStart, and the unit's directives are the baseline's, no ExecStartPre= more."""
    value = "a b;c\"d\\e%h${X}$HOME 'f' \\"
    setting = next(s for s in SETTINGS if s.name == "engine.args string flag")
    inventory = build_inventory(setting.document(value), PATH)
    unit = written(inventory)["s1: spark-engine-sglang.service"]
    [(_, words)] = [v for _, key, v in unit if key == "ExecStart"]
    assert words[words.index("--chat-template") + 1] == value
    base = baseline(setting.name)["s1: spark-engine-sglang.service"]
    assert [key for _, key, _ in unit] == [key for _, key, _ in base]


# --- the escape functions ------------------------------------------------------------------

anything = st.one_of(st.text(), hostile_text, st.lists(piece, max_size=6).map("".join))


@settings(deterministic, max_examples=ESCAPE_EXAMPLES)
@given(anything)
def test_shell_quotes_any_text_as_one_word(value: str) -> None:
    assert shlex.split(shell(value)) == [value]
    assert shell_words(shell(value)) == (value,)


@settings(deterministic, max_examples=ESCAPE_EXAMPLES)
@given(anything)
def test_systemd_word_reads_back_or_refuses_control_characters(value: str) -> None:
    if control_characters(value):
        with pytest.raises(UnsafeValue):
            systemd_word(value)
        return
    word = systemd_word(value)
    assert read_word(word) == value
    assert exec_command(f"/bin/x {word} {word}") == ("", ("/bin/x", value, value))


@settings(deterministic, max_examples=ESCAPE_EXAMPLES)
@given(anything)
def test_systemd_text_reads_back_or_refuses_control_characters(value: str) -> None:
    if control_characters(value):
        with pytest.raises(UnsafeValue):
            systemd_text(value)
        return
    assert unspecify(systemd_text(value)) == value


@settings(deterministic, max_examples=ESCAPE_EXAMPLES)
@given(anything)
def test_env_value_is_the_value_as_both_readers_read_it_or_refused(value: str) -> None:
    try:
        written_value = env_value(value)
    except UnsafeValue:
        return
    assert written_value == value
    assert not control_characters(value)
    assert systemd_reads_literally(value)


@settings(deterministic, max_examples=ESCAPE_EXAMPLES)
@given(anything)
def test_docker_env_is_the_value_unless_it_holds_a_control_character(value: str) -> None:
    if control_characters(value):
        with pytest.raises(UnsafeValue):
            docker_env(value)
    else:
        assert docker_env(value) == value


user_like = st.one_of(
    anything, near(USERS), st.from_regex(r"[a-z_][a-z0-9_-]{0,40}", fullmatch=True)
)


@settings(deterministic, max_examples=ESCAPE_EXAMPLES)
@given(user_like)
def test_sudoers_user_is_a_plain_user_name_or_refused(value: str) -> None:
    try:
        written_value = sudoers_user(value)
    except UnsafeValue:
        return
    assert written_value == value
    # Ubuntu's rule (adduser, with '_' first allowed): nothing sudoers reads as ALL, a
    # %group, a +netgroup, a #uid, a list, an alias or a second field
    assert re.fullmatch(r"[a-z_][a-z0-9_-]*", value) and len(value) <= 32


# --- the readers themselves ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("a b", ("a", "b")),
        ('"a b" c', ("a b", "c")),
        ('"a\\\\b\\"c"', ('a\\b"c',)),
        ('""', ("",)),
        ("%%h $$X", ("%h", "$X")),
        ('"%%{$${X}}"', ("%{${X}}",)),
    ],
)
def test_the_exec_reader_reads_systemd_quoting(text: str, words: tuple[str, ...]) -> None:
    assert exec_command(text) == ("", words)


@pytest.mark.parametrize(
    "text",
    ["a %h", "a ${X}", "a $X", "a;", "a ; b", "'a b'", '"a', '"a"b', "a\\b", '"\\n"', "100%"],
)
def test_the_exec_reader_refuses_what_the_escape_never_writes(text: str) -> None:
    """Specifiers, variables, a ';' (a lone one separates commands), single quotes,
    escapes other than \\\\ and \\" (systemd reads \\n as a line feed), words running
    into quotes."""
    with pytest.raises(Malformed):
        exec_command(text)


@pytest.mark.parametrize(
    "unit",
    [
        "[Service]\nExecStart=/bin/true \\\n",
        "[Service]\nExecStart=/bin/true\nnot an assignment\n",
        "ExecStart=/bin/true\n",
        "[Service]\nDescription=a\rExecStartPre=/x\n",
        "[Service]\nDescription=%h\n",
        "[Service]\nDescription=x\u2028ExecStartPre=/x\n",
        "[Service]\nExecStart=/bin/true",
    ],
)
def test_the_unit_reader_refuses_what_is_no_plain_unit(unit: str) -> None:
    with pytest.raises(Malformed):
        read_unit(unit)


def test_split_words_keeps_a_quoted_semicolon_as_a_word() -> None:
    assert split_words('a ";" b') == ["a", ";", "b"]


# --- the laptop's trust rules (sparkdeploy/config/trust.py) --------------------------------

# Paths a mount may not be or hold, and model_dir may not be, be in or hold.
SENSITIVE = [
    "/etc/shadow", "/root/.ssh", "/home/nvidia/.ssh/id_ed25519",
    "/home/nvidia/.cache/huggingface/token", "/tmp/ssh-abc/agent.1", "/var/tmp/x",
    "/run/user/1000/gnupg", "/var/run/docker.sock", "/var/lib/docker/volumes",
    "/proc/1/environ", "/sys/kernel", "/dev/shm", "/boot/grub",
    "/var/lib/spark-deploy/rollback", "/opt/spark-deploy/hf-cli/bin/pip",
]  # fmt: skip
_DECORATION = st.sampled_from(["/", "//", "/./", "///"])


def _spelled(draw: st.DrawFn, parts: list[str]) -> str:
    """``parts`` as a path with doubled slashes, `.` segments and a trailing slash."""
    text = "".join(draw(_DECORATION) + part for part in parts)
    return (text or "/") + draw(st.sampled_from(["", "/", "//"]))


@st.composite
def parent_spellings(draw: st.DrawFn) -> str:
    """A parent (or the path itself) of a sensitive path, spelled as an inventory may."""
    parts = draw(st.sampled_from(SENSITIVE)).strip("/").split("/")
    return _spelled(draw, parts[: draw(st.integers(0, len(parts)))])


@st.composite
def below_spellings(draw: st.DrawFn) -> str:
    """A path at or below a sensitive path, spelled as an inventory may."""
    parts = draw(st.sampled_from(SENSITIVE)).strip("/").split("/")
    return _spelled(
        draw, parts + draw(st.lists(st.sampled_from(["models", "a", "x.y"]), max_size=2))
    )


@settings(deterministic, max_examples=ESCAPE_EXAMPLES)
@given(path=parent_spellings())
def test_no_spelling_of_a_sensitive_path_or_its_parent_is_mounted(path: str) -> None:
    with pytest.raises(ValidationError):
        Mount(host=path, container="/workspace/x")


@settings(deterministic, max_examples=ESCAPE_EXAMPLES)
@given(path=st.one_of(parent_spellings(), below_spellings()))
def test_model_dir_is_never_a_sensitive_path_its_parent_or_below_one(path: str) -> None:
    with pytest.raises(ValueError):
        model_dir(path)


@settings(deterministic, max_examples=ESCAPE_EXAMPLES)
@given(path=below_spellings())
def test_nothing_below_a_sensitive_path_is_mounted(path: str) -> None:
    with pytest.raises(ValidationError):
        Mount(host=path, container="/workspace/x")


SECRET_SHAPES = {
    "hf": ("hf_", 34, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"),
    "openai": ("sk-", 24, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-"),
    "github": ("ghp_", 36, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"),
    "github_pat": ("github_pat_", 40, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_"),
    "nvapi": ("nvapi-", 40, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-"),
    "aws": ("AKIA", 16, "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"),
    "glpat": ("glpat-", 20, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-"),
}  # fmt: skip


@st.composite
def secrets_in_text(draw: st.DrawFn) -> tuple[str, str, int]:
    """(text, secret, line): a secret of a known shape on a line of some text."""
    prefix, length, alphabet = SECRET_SHAPES[draw(st.sampled_from(sorted(SECRET_SHAPES)))]
    extra = 0 if prefix == "AKIA" else 8  # an AWS key id is exactly 20 characters
    secret = prefix + draw(st.text(alphabet, min_size=length, max_size=length + extra))
    if draw(st.booleans()):
        secret = (
            "-----BEGIN "
            + draw(st.sampled_from(["", "RSA ", "EC ", "OPENSSH "]))
            + "PRIVATE KEY-----"
        )
    plain = st.text("abc xyz={}()#:/.\t", max_size=30)
    before = draw(st.lists(plain, max_size=5))
    around = draw(st.sampled_from(["{}", "X={}", "key: '{}'", "--token {}", '"{}"']))
    text = "\n".join([*before, around.format(secret), *draw(st.lists(plain, max_size=3))])
    return text, secret, len(before) + 1


@settings(deterministic, max_examples=ESCAPE_EXAMPLES)
@given(case=secrets_in_text())
def test_a_secret_of_any_known_shape_is_found_on_its_line_and_never_shown(
    case: tuple[str, str, int],
) -> None:
    text, secret, line = case
    assert looks_like_secret(text) and secret_line(text) == line
    assert secret not in shown(secret) and secret not in redact(text)
    with pytest.raises(ValueError) as caught:
        credential_variable(secret, "HF_TOKEN")
    assert secret not in str(caught.value)
