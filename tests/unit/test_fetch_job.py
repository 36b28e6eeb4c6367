"""spark-fetch (files/fetch_job.py), the Spark-side job, in its parts: docker's terminal
output read as bytes, a model folder's bytes on disk, the disk check, the status file and the
status a laptop reads."""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import stat
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def load_job(jobs: Path) -> ModuleType:
    os.environ["SPARK_FETCH_JOBS"] = str(jobs)
    spec = importlib.util.spec_from_file_location("fetch_job", ROOT / "files" / "fetch_job.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def job(tmp_path: Path) -> ModuleType:
    return load_job(tmp_path)


# docker 28's terminal output for a pull of two layers: each layer's line rewritten in place
# (cursor up, clear line), bars as moby's JSONProgress.String prints them.
UP, CLEAR = "\x1b[2A", "\x1b[2K"
PULL = [
    "v0.33.0: Pulling from vllm/vllm-openai\r\n",
    "0123456789ab: Pulling fs layer \r\n",
    "fedcba987654: Pulling fs layer \r\n",
    f"{UP}{CLEAR}\r0123456789ab: Downloading [=>                                                 ]"
    "  1.049MB/45.6MB\r\n",
    f"{CLEAR}\rfedcba987654: Downloading [==========>                                        ]"
    "  512kB/2.5MB\r\n",
    f"{UP}{CLEAR}\r0123456789ab: Downloading [=========================>                         ]"
    "   22.8MB/45.6MB\r\n",
    f"{CLEAR}\rfedcba987654: Download complete \r\n",
]


def test_docker_bars_are_read_as_bytes_per_layer(job: ModuleType):
    progress = job.PullProgress({})
    shown = []
    for chunk in PULL[:3]:
        shown += progress.feed(chunk)
    assert shown == [
        "v0.33.0: Pulling from vllm/vllm-openai",
        "0123456789ab: Pulling fs layer",
        "fedcba987654: Pulling fs layer",
    ]
    assert progress.feed(PULL[3]) == [] and progress.feed(PULL[4]) == []  # bars are not lines
    assert (progress.done, progress.total) == (1_049_000 + 512_000, 45_600_000 + 2_500_000)
    progress.feed(PULL[5] + PULL[6])
    assert progress.done == 22_800_000 + 2_500_000  # a finished layer counts whole


def test_the_manifest_sizes_are_the_total_and_layers_present_count_as_done(job: ModuleType):
    progress = job.PullProgress({"0123456789ab": 45_600_123, "fedcba987654": 2_500_001})
    assert progress.total == 48_100_124 and progress.done == 0
    progress.feed("fedcba987654: Already exists\n0123456789ab: Downloading [>   ]  1MB/45.6MB\r")
    assert progress.done == 2_500_001 + 1_000_000
    assert progress.total == 48_100_124  # the bar's rounded size does not replace the manifest's


def test_a_narrow_terminal_shows_no_bar_and_the_bytes_are_read_all_the_same(job: ModuleType):
    progress = job.PullProgress({})
    progress.feed("0123456789ab: Downloading   12.35MB/45.6MB\r\n")
    assert (progress.done, progress.total) == (12_350_000, 45_600_000)


def test_a_line_split_across_reads_is_read_once_whole(job: ModuleType):
    progress = job.PullProgress({})
    assert progress.feed("0123456789ab: Down") == []
    progress.feed("loading [=>   ]  2MB/4MB\r")
    assert progress.done == 2_000_000


def test_a_folder_counts_finished_files_and_partial_ones(job: ModuleType, tmp_path: Path):
    folder = tmp_path / "m"
    (folder / ".cache/huggingface/download").mkdir(parents=True)
    (folder / "config.json").write_bytes(b"x" * 100)
    (folder / ".cache/huggingface/download/ab12.cd34.0a1b2c3d.incomplete").write_bytes(b"y" * 7)
    (folder / "unrelated.bin").write_bytes(b"z" * 1000)  # not a file of the revision
    files = {"config.json": 100, "model.safetensors": 50}
    assert job.folder_bytes(folder, files) == 107


def test_the_disk_check_names_both_numbers_and_the_folder(job: ModuleType, tmp_path: Path):
    folder, free = job.free_bytes(str(tmp_path / "not" / "yet"))
    assert folder == str(tmp_path)
    with pytest.raises(job.JobError) as caught:
        job.check_room("o/m (66.0 GB)", str(tmp_path / "not" / "yet"), free)
    text = str(caught.value)
    assert text.startswith(f"not enough disk for o/m (66.0 GB): it needs {job.human(free)} more")
    assert f"at {tmp_path}, which has {job.human(free)} free (keeping 2.1 GB spare)" in text
    job.check_room("small", str(tmp_path), 1)  # fits: no error


def test_the_status_file_is_whole_at_every_write_and_carries_a_rate(
    job: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    clock = iter([100.0, 101.0, 103.0])
    monkeypatch.setattr(job.time, "time", lambda: next(clock))
    status = job.Status("model-x-1", "model o/x")
    status.update(force=True, done=0, total=10)
    status.update(done=4)
    status.update(done=10)
    written = json.loads((tmp_path / "model-x-1.status.json").read_text())
    assert written["done"] == 10 and written["rate"] == pytest.approx(10 / 3)
    assert not list(tmp_path.glob("*.tmp"))


def fake_tools(folder: Path, active: str, journal: str) -> None:
    """systemctl and journalctl as the status command asks them (show -p, -u -n)."""
    folder.mkdir()
    for name, output in (("systemctl", active), ("journalctl", journal)):
        path = folder / name
        path.write_text(f"#!/bin/sh\nprintf '%s\\n' '{output}'\n")
        path.chmod(path.stat().st_mode | stat.S_IEXEC)


@pytest.mark.parametrize(
    "active, written, state",
    [
        ("active", {"state": "running"}, "running"),
        ("inactive", {"state": "running"}, "failed"),  # killed before it could say so
        ("inactive", {"state": "done"}, "done"),
        ("inactive", None, "none"),  # never started: the laptop decides
    ],
)
def test_the_status_a_laptop_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, active, written, state
):
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    job = load_job(jobs)
    fake_tools(tmp_path / "bin", active, "last journal line")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    if written:
        (jobs / "image-x-1.status.json").write_text(json.dumps({"id": "image-x-1", **written}))
    found = job.job_status("image-x-1")
    assert (found["unit"], found["state"]) == (active, state)
    if state == "failed":
        assert found["error"] == "spark-fetch@image-x-1.service stopped before it finished"
        assert found["lines"] == ["last journal line"]


def test_the_command_line(job: ModuleType, capsys: pytest.CaptureFixture[str]):
    assert job.main([]) == 2
    assert "spark-fetch run ID" in capsys.readouterr().err
    assert sys.modules.get("fetch_job") is None  # loaded as a file, as the Spark runs it


# --- the pair's copy, between two folders of this machine --------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def head(job: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A sealed folder on the 'head', served on 127.0.0.1 to 127.0.0.1 (in a thread)."""
    import threading

    folder = tmp_path / "head" / "m"
    (folder / "sub").mkdir(parents=True)
    (folder / "config.json").write_text('{"a": 1}')
    (folder / "w.safetensors").write_bytes(os.urandom(3_000_000))
    (folder / ".cache" / "huggingface").mkdir(parents=True)
    (folder / ".cache" / "huggingface" / "x.metadata").write_text("hf's own")
    (folder / job.MARKER).write_text("o/m@main\n")
    check = tmp_path / "spark-model-check"
    check.write_text(f'#!/bin/sh\nexec {sys.executable} {ROOT / "files" / "model_check.py"} "$@"\n')
    check.chmod(0o755)
    monkeypatch.setattr(job, "IDLE", 3)
    port = free_port()
    token = tmp_path / "private" / "serve-x.token"
    token.parent.mkdir(mode=0o700)
    token.write_text(TOKEN + "\n")
    spec = {"bind": "127.0.0.1", "allow": "127.0.0.1", "port": port,
            "models": {"o/m@main": str(folder)}, "images": [],
            "token_file": str(token)}  # fmt: skip
    server = threading.Thread(target=job.serve, args=(spec, job.Status("serve-x", "s")))
    server.start()
    for _ in range(100):  # until it listens
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.05)
    yield folder, port, str(check), str(token)
    server.join(timeout=10)


TOKEN = "a-random-token-of-this-run"


def copy_spec(job: ModuleType, head, target: Path, **values) -> dict:
    """A copy's spec as the deploy writes it: the digests it read from the head over SSH
    (``spark-fetch digests``), the token file it wrote."""
    import pwd

    folder, port, check, token = head
    [found] = job.digests([{"want": "o/m@main", "folder": str(folder)}])
    assert found["ready"]
    return {"source": "127.0.0.1", "port": port, "want": "o/m@main", "folder": str(target),
            "needs_tokenizer": False, "user": pwd.getpwuid(os.getuid()).pw_name,
            "model_check": check, "wait_limit": 30, "files": found["files"],
            "token_file": token, **values}  # fmt: skip


def test_a_folder_is_copied_whole_resumed_and_sealed(job: ModuleType, head, tmp_path: Path):
    folder = head[0]
    target = tmp_path / "other" / "m"
    partial = target / ".cache" / "spark-copy" / "w.safetensors"
    partial.parent.mkdir(parents=True)
    partial.write_bytes((folder / "w.safetensors").read_bytes()[:1_000_000])
    spec = copy_spec(job, head, target)
    status = job.Status("copy-model-x", "copy")
    job.copy_model(spec, status)
    assert (target / "w.safetensors").read_bytes() == (folder / "w.safetensors").read_bytes()
    assert (target / "config.json").read_text() == '{"a": 1}'
    assert (target / job.MARKER).read_text().strip() == "o/m@main"  # sealed here
    assert not (target / ".cache" / "huggingface").exists()  # hf's files stay on the head
    assert status.data["done"] == status.data["total"] == 3_000_000 + 8


def test_the_head_answers_only_the_other_spark_and_only_what_was_planned(job: ModuleType, head):
    import urllib.error
    import urllib.request

    _, port, _, token = head
    for path in ("/model?want=o/other@main", "/file?want=o/m@main&path=../../etc/passwd"):
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}{path}", headers={"Authorization": f"Bearer {TOKEN}"}
        )
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(request, timeout=5)
        assert caught.value.code == 404
    job_spec = {"source": "127.0.0.1", "port": port, "token_file": token}
    listing = job.head_json(job_spec, "/model", want="o/m@main")
    assert listing == {"ready": True, "files": {"config.json": 8, "w.safetensors": 3_000_000}}


def test_a_watched_command_ends_with_its_code_and_last_lines(job: ModuleType):
    samples = []
    code, lines = job.watch(
        ["sh", "-c", "echo one; sleep 1.2; echo two; exit 3"], lambda: samples.append(1)
    )
    assert (code, lines) == (3, ["one", "two"])
    assert 1 <= len(samples) <= 6  # about once a second, and it returned


def test_a_copy_waits_for_the_head_only_so_long(job: ModuleType, tmp_path: Path):
    spec = {"source": "127.0.0.1", "port": free_port(), "wait_limit": 0}  # nothing listens
    with pytest.raises(job.JobError) as caught:
        job.wait_for_head(spec, job.Status("copy-x", "c"), "/model", want="o/m@main")
    assert str(caught.value).startswith("the head (127.0.0.1) did not have")
    assert "within 0 s" in str(caught.value) and "Connection refused" in str(caught.value)


def test_the_head_answers_every_other_spark_it_was_told_and_no_one_else(job: ModuleType, head):
    import http.client

    assert job.allowed({"allow": "192.168.100.2"}) == {"192.168.100.2"}  # an older spec
    assert job.allowed({"allow": ["192.168.100.2", "192.168.100.3"]}) == {
        "192.168.100.2",
        "192.168.100.3",
    }
    _, port, _, _ = head
    stranger = http.client.HTTPConnection(
        "127.0.0.1", port, timeout=5, source_address=("127.0.0.2", 0)
    )
    stranger.request("GET", "/model?want=o/m@main")
    answer = stranger.getresponse()
    assert answer.status == 403
    assert json.loads(answer.read()) == {"error": "only the other Sparks of this deploy may copy"}
    stranger.close()
