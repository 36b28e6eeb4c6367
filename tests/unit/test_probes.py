"""
The host-state fact's probes, the pyinfra way: each probe's lines from a query, and its
sample output (its docstring's) in, its value out; then the fact that composes them: one
owner per kind, and its sample output the union of the probes'.
"""

from __future__ import annotations

import grp
import os
import pwd
import subprocess
from pathlib import Path

import pytest

from sparkdeploy.config.paths import ENGINE_FILE_GLOBS, MANAGED_HEADER
from sparkdeploy.facts.host_state import PROBES, SparkHostState
from sparkdeploy.facts.probes import HostQuery, health, kind_of, operator_home, owned_lines
from sparkdeploy.facts.probes.engine_files import EngineFiles
from sparkdeploy.facts.probes.fabric import FabricGuard
from sparkdeploy.facts.probes.files import FileState, ManagedFiles, stat_all
from sparkdeploy.facts.probes.gai import GaiIpv4
from sparkdeploy.facts.probes.hf_cli import HfCli, HfCliVenv
from sparkdeploy.facts.probes.image import EngineImage, Image
from sparkdeploy.facts.probes.mcp import McpServer
from sparkdeploy.facts.probes.models import ModelChecks
from sparkdeploy.facts.probes.packages import Packages
from sparkdeploy.facts.probes.units import Units
from sparkdeploy.facts.probes.user import Homes, UserHomes
from tests.unit.samples import docstring_sample

QUERY = HostQuery(
    user="nvidia",
    paths=("/etc/spark-deploy/hf.env", "~/.cache/huggingface/token"),
    models=("/opt/models/X", "o/X@main", "1"),
    units=("spark-engine-sglang.service",),
    owned_globs=ENGINE_FILE_GLOBS,
    image="lmsysorg/sglang:spark",
)
SHA = "f508cbfeba33e3feabdc7432f30e030ca582b470d0e746345a5821b36942cf70"


def sample(probe: object) -> list[str]:
    return docstring_sample(type(probe))


def test_packages():
    probe = Packages()
    assert probe.parse(sample(probe)) == (
        {"nvidia-driver-580-open": "580.95.05-0ubuntu1", "python3-venv": "3.12.3-0ubuntu2"},
        frozenset({"nvidia-driver-580-open"}),
    )
    assert probe.parse(["pkg half", "hold"]) == ({}, frozenset())
    assert "dpkg-query" in probe.lines(QUERY)[0]


def test_packages_read_on_a_real_shell_holds_from_dpkgs_selection(tmp_path: Path):
    """The line runs through awk: installed ("ii") and held ("hi", what `apt-mark hold`
    sets) packages are listed, held ones also as holds; removed ("rc") or not-installed held
    ("hn") ones are neither. dpkg-query here prints what dpkg prints on a twin."""
    (tmp_path / "dpkg-query").write_text(
        "#!/bin/sh\nprintf '%s\\n' 'hi  nvidia-driver-580-open 580.95.05-0ubuntu1'"
        " 'ii  python3-venv 3.12.3-0ubuntu2' 'rc  nvidia-driver-590-open 590.1-0ubuntu1'"
        " 'hn  nftables '\n"
    )
    (tmp_path / "dpkg-query").chmod(0o755)
    script = "\n".join(Packages().lines(QUERY))
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin"}
    output = subprocess.run(["sh", "-c", script], capture_output=True, text=True, env=env)
    assert Packages().parse(output.stdout.splitlines()) == (
        {"nvidia-driver-580-open": "580.95.05-0ubuntu1", "python3-venv": "3.12.3-0ubuntu2"},
        frozenset({"nvidia-driver-580-open"}),
    )


def test_managed_files():
    probe = ManagedFiles()
    files = probe.parse(sample(probe))
    assert files["/etc/spark-deploy/hf.env"] == FileState(
        "5d41402abc4b2a76b9719d911017c592", "644", "root", "root"
    )
    assert files["/usr/local/sbin/spark-memory-guard"] is None
    assert files["~/.cache/huggingface/token"].mode == "600"  # type: ignore[union-attr]
    lines = probe.lines(QUERY)
    assert lines[0] == stat_all("/etc/spark-deploy/hf.env")
    home_token = stat_all(".cache/huggingface/token", "~/")
    assert lines[1] == f'( if [ -n "$home" ] && cd "$home" 2>/dev/null; then {home_token}; fi )'
    assert len(lines) == 2  # one sha256sum and one stat for each side, however many files


def test_managed_files_read_on_a_real_shell(tmp_path: Path):
    """The lines run: a file reads as its sha256, mode and owner, a symlink, a FIFO (which
    would hang sha256sum) and a missing file as absent, a ``~/`` path under $home; the files
    are read by one sha256sum and one stat, whose outputs are joined by path."""
    (tmp_path / "a").write_text("hello")
    (tmp_path / "a").chmod(0o640)
    (tmp_path / "b").write_text("")
    (tmp_path / "b").chmod(0o604)
    (tmp_path / "link").symlink_to(tmp_path / "a")
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "token").write_text("t")
    (tmp_path / "home" / "token").chmod(0o600)
    (tmp_path / "home" / "linked").symlink_to(tmp_path / "a")
    names = ("a", "link", "fifo", "gone", "b")
    at_home = ("~/token", "~/linked", "~/gone")
    paths = tuple(str(tmp_path / name) for name in names) + at_home
    script = "\n".join([f"home={tmp_path / 'home'}", *ManagedFiles().lines(HostQuery("x", paths))])
    output = subprocess.run(
        ["sh", "-c", script], capture_output=True, text=True, check=True, timeout=10
    )
    files = ManagedFiles().parse(output.stdout.splitlines())
    owner = (pwd.getpwuid(os.getuid()).pw_name, grp.getgrgid(os.getgid()).gr_name)
    assert files[str(tmp_path / "a")] == FileState(
        "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824", "640", *owner
    )
    assert files[str(tmp_path / "b")] == FileState(
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", "604", *owner
    )
    for absent in ("link", "fifo", "gone"):
        assert files[str(tmp_path / absent)] is None, absent
    assert files["~/token"] is not None
    assert files["~/token"] == FileState(
        "e3b98a4da31a127d4bde6e43033f66ba274cab0eb7eb1c70ec41402bf6273dd8", "600", *owner
    )
    assert files["~/linked"] is None and files["~/gone"] is None  # a link under home too
    assert len(output.stdout.splitlines()) == len(paths)
    with pytest.raises(ValueError, match="fixed prefix"):
        stat_all("x", "$(id)/")


def test_gai():
    probe = GaiIpv4()
    assert probe.parse(sample(probe)) is True
    assert probe.parse(["gai 0"]) is False and probe.parse([]) is False


def test_hf_cli():
    probe = HfCliVenv()
    assert probe.parse(sample(probe)) == HfCli("2.4.0", SHA)
    assert probe.parse(["hfcli ", "hflock "]) == HfCli("", "")
    assert probe.lines(QUERY)[-1].startswith("printf 'hflock %s\\n'")


def test_user_homes():
    probe = UserHomes()
    assert probe.parse(sample(probe)) == Homes("/home/nvidia", "nvidia", "/home/nvidia")
    assert probe.parse(["user  ", "sshhome /root"]) == Homes("", "", "/root")
    assert '"$home"' in probe.lines(QUERY)[0]
    assert operator_home("o'k") == "home=$(getent passwd 'o'\"'\"'k' | cut -d: -f6)"


def test_engine_files():
    probe = EngineFiles()
    owned, foreign = probe.parse(sample(probe))
    assert "/etc/systemd/system/spark-engine-sglang.service" in owned and len(owned) == 3
    assert foreign == {"/etc/sudoers.d/spark-deploy-admin"}
    assert probe.lines(HostQuery("nvidia")) == []
    [line] = probe.lines(QUERY)
    assert f"grep -qF '{MANAGED_HEADER}'" in line


def test_units():
    probe = Units()
    assert probe.parse(sample(probe)) == {"spark-engine-sglang.service": ("active", "enabled")}
    assert probe.parse(["unit a b"]) == {}
    assert probe.lines(HostQuery("nvidia")) == []
    assert "systemctl is-enabled spark-engine-sglang.service" in probe.lines(QUERY)[0]


def test_failed_checks():
    probe = health.FailedChecks()
    assert probe.parse(sample(probe)) == {"spark-engine-vllm.service"}
    assert probe.parse(["unhealthy a b", "unhealthy"]) == frozenset()
    assert probe.lines(HostQuery("nvidia")) == []


def test_failed_checks_read_on_a_real_shell(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Only a unit's own regular file counts: not a folder, not a partial record, not a unit
    that was not asked; and the line ends well when none failed (the fact's last status)."""
    monkeypatch.setattr(health, "HEALTH_FAILED", str(tmp_path))
    (tmp_path / "a.service").write_text("2026-11-27T07:00:00Z exit 1\n")
    (tmp_path / "b.service.123.partial").write_text("")
    (tmp_path / "c.service").mkdir()
    (tmp_path / "d.service").write_text("")
    query = HostQuery("nvidia", units=("a.service", "b.service", "c.service", "e.service"))
    [line] = health.FailedChecks().lines(query)
    done = subprocess.run(["sh", "-c", line], capture_output=True, text=True, check=True)
    assert health.FailedChecks().parse(done.stdout.splitlines()) == {"a.service"}
    (tmp_path / "a.service").unlink()
    done = subprocess.run(["sh", "-c", line], capture_output=True, text=True, check=True)
    assert done.stdout == ""


def test_image():
    probe = Image()
    image = probe.parse(sample(probe))
    assert image.image_id.startswith("sha256:9f2a6c1e") and image.kept
    assert image.reading is not None and image.reading["engine"] == "sglang"
    # a torn cache file reads as no reading (the image is read again); no image, no ID
    assert probe.parse(["image -", "reading {torn", "kept 0"]) == EngineImage()
    assert probe.lines(HostQuery("nvidia")) == []
    assert "lmsysorg/sglang:spark" in probe.lines(QUERY)[0]


def test_mcp_server():
    probe = McpServer()
    assert probe.parse(sample(probe))["user"] == "spark-mcp systemd-journal"
    assert probe.parse(["mcp venv ", "mcp present 0"]) == {"venv": "", "present": "0"}
    assert len(probe.lines(HostQuery("nvidia"))) == 7  # venv, lib, user, present, token x3


def test_fabric_guard():
    probe = FabricGuard()
    assert probe.parse(sample(probe)) == {"table": "1", "present": "1"}
    assert "nft list table inet spark_deploy" in probe.lines(QUERY)[0]


def test_model_checks():
    probe = ModelChecks()
    assert probe.parse(sample(probe))["/opt/models/X"]["complete"] is True
    assert probe.lines(HostQuery("nvidia")) == []
    assert probe.lines(QUERY)[0].endswith("/opt/models/X o/X@main 1 | sed 's/^/model /'")


def test_each_kind_has_one_probe():
    kinds = [kind for probe in PROBES for kind in probe.kinds]
    assert len(kinds) == len(set(kinds))


def test_the_facts_sample_is_the_probes_samples():
    """Every line of the fact's sample is owned by a probe and every probe's sample is in it:
    no catch-all."""
    fact = docstring_sample(SparkHostState)
    assert sorted(fact) == sorted(line for probe in PROBES for line in sample(probe))
    for probe in PROBES:
        assert owned_lines(probe, fact) == sample(probe)


@pytest.mark.parametrize("probe", PROBES, ids=lambda probe: type(probe).__name__)
def test_a_probe_owns_only_its_kinds(probe):
    assert {kind_of(line) for line in sample(probe)} <= set(probe.kinds)


def test_the_fact_runs_the_operators_home_first_then_every_probe_in_order():
    command = SparkHostState().command(
        QUERY.user, QUERY.paths, QUERY.models, QUERY.units, QUERY.owned_globs, QUERY.image
    )
    expected = [operator_home("nvidia"), *(line for p in PROBES for line in p.lines(QUERY))]
    assert command == "\n".join(expected)
