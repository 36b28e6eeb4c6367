"""spark-fetch (files/fetch_job.py), the Spark-side job, in its parts: docker's terminal
output read as bytes, a model folder's bytes on disk, the disk check, the status file and the
status a laptop reads."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import socket
import stat
import sys
import time
from dataclasses import replace
from pathlib import Path
from types import ModuleType

import pytest

from sparkdeploy.config.paths import FETCH_MODULES
from sparkdeploy.render import FILES


def load_job(jobs: Path) -> ModuleType:
    """spark-fetch loaded as a file (as the Spark runs it), with its parts (the sibling
    modules it imports, FETCH_MODULES) imported afresh: their JOBS is ``jobs`` too. The job
    specs (fetch_spec) stay the deploy's own module."""
    os.environ["SPARK_FETCH_JOBS"] = str(jobs)
    for name in FETCH_MODULES:
        if name != "fetch_spec":
            sys.modules.pop(name, None)
    spec = importlib.util.spec_from_file_location("fetch_job", FILES / "fetch_job.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def part(name: str) -> ModuleType:
    """The part ``name`` of spark-fetch (files/<name>.py) as the last ``load_job`` imported
    it: patch a name where the part that uses it looks it up."""
    return sys.modules[name]


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
    progress = part("fetch_docker").PullProgress({})
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
    progress = part("fetch_docker").PullProgress(
        {"0123456789ab": 45_600_123, "fedcba987654": 2_500_001}
    )
    assert progress.total == 48_100_124 and progress.done == 0
    progress.feed("fedcba987654: Already exists\n0123456789ab: Downloading [>   ]  1MB/45.6MB\r")
    assert progress.done == 2_500_001 + 1_000_000
    assert progress.total == 48_100_124  # the bar's rounded size does not replace the manifest's


def test_a_narrow_terminal_shows_no_bar_and_the_bytes_are_read_all_the_same(job: ModuleType):
    progress = part("fetch_docker").PullProgress({})
    progress.feed("0123456789ab: Downloading   12.35MB/45.6MB\r\n")
    assert (progress.done, progress.total) == (12_350_000, 45_600_000)


def test_a_line_split_across_reads_is_read_once_whole(job: ModuleType):
    progress = part("fetch_docker").PullProgress({})
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
    assert part("fetch_hub").folder_bytes(folder, files) == 107


def test_the_disk_check_names_both_numbers_and_the_folder(job: ModuleType, tmp_path: Path):
    progress = part("fetch_progress")
    folder, free = progress.free_bytes(str(tmp_path / "not" / "yet"))
    assert folder == str(tmp_path)
    with pytest.raises(job.JobError) as caught:
        progress.check_room("o/m (66.0 GB)", str(tmp_path / "not" / "yet"), free)
    text = str(caught.value)
    assert text.startswith(
        f"not enough disk for o/m (66.0 GB): it needs {progress.human(free)} more"
    )
    assert f"at {tmp_path}, which has {progress.human(free)} free (keeping 2.1 GB spare)" in text
    progress.check_room("small", str(tmp_path), 1)  # fits: no error


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


def test_a_job_that_finishes_while_its_status_is_read_is_done_not_killed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    job = load_job(jobs)
    status = jobs / "image-x-1.status.json"
    status.write_text(json.dumps({"id": "image-x-1", "state": "running"}))
    fake_tools(tmp_path / "bin", "inactive", "last journal line")
    # The job writes "done" and exits just as its unit is read.
    (tmp_path / "bin" / "systemctl").write_text(
        f"#!/bin/sh\nprintf '%s' '{json.dumps({'id': 'image-x-1', 'state': 'done'})}'"
        f" > {status}\necho inactive\n"
    )
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    found = job.job_status("image-x-1")
    assert (found["unit"], found["state"]) == ("inactive", "done")


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
    (folder / part("fetch_names").MARKER).write_text("o/m@main\n")
    check = tmp_path / "spark-model-check"
    check.write_text(f'#!/bin/sh\nexec {sys.executable} {FILES / "model_check.py"} "$@"\n')
    check.chmod(0o755)
    monkeypatch.setattr(part("fetch_serve"), "IDLE", 3)
    port = free_port()
    token = tmp_path / "private" / "serve-x.token"
    token.parent.mkdir(mode=0o700)
    token.write_text(TOKEN + "\n")
    spec = job.ServeSpec(label="s", bind="127.0.0.1", allow="127.0.0.1", port=port,
                         models={"o/m@main": str(folder)}, images=[],
                         token_file=str(token))  # fmt: skip
    server = threading.Thread(target=job.serve, args=(spec, job.Status("serve-x", "s")))
    server.start()
    for _ in range(100):  # until it listens
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.05)
    yield folder, port, str(check), str(token)
    # The server stops once idle; rather than wait out IDLE, make any request the last one.
    monkeypatch.setattr(part("fetch_serve"), "IDLE", 0)
    with socket.socket() as poke:
        poke.connect_ex(("127.0.0.1", port))
    server.join(timeout=10)
    assert not server.is_alive()


TOKEN = "a-random-token-of-this-run"
# How often a hostile server's loop looks for shutdown(): socketserver's 0.5 s default held
# every test that stops one half a second.
POLL_S = 0.02


def copy_spec(job: ModuleType, head, target: Path, **values):
    """A copy's spec as the deploy writes it: the digests it read from the head over SSH
    (``spark-fetch digests``), the token file it wrote."""
    import pwd

    folder, port, check, token = head
    [found] = job.digests([{"want": "o/m@main", "folder": str(folder)}])
    assert found["ready"]
    return copy_model_spec(
        job, **{"source": "127.0.0.1", "port": port, "want": "o/m@main", "folder": str(target),
                "needs_tokenizer": False, "user": pwd.getpwuid(os.getuid()).pw_name,
                "model_check": check, "wait_limit": 30, "files": found["files"],
                "token_file": token, **values})  # fmt: skip


def copy_model_spec(job: ModuleType, **values):
    """A copy-model spec (fetch_spec.py) with ``values``, what the copy does not read left
    empty."""
    unread: dict[str, object] = {"label": "copy", "repo": "o/m", "revision": "main", "base_repo": None,
              "group": "", "env": {}, "hf_venv": "/nonexistent"}  # fmt: skip
    return job.CopyModelSpec(**{**unread, **values})


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
    assert (target / part("fetch_names").MARKER).read_text().strip() == "o/m@main"  # sealed here
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
    job_head = part("fetch_spec").Head(source="127.0.0.1", port=port, token_file=token)
    listing = part("fetch_channel").head_json(job_head, "/model", want="o/m@main")
    assert listing == {"ready": True, "files": {"config.json": 8, "w.safetensors": 3_000_000}}


def test_a_watched_command_ends_with_its_code_and_last_lines(job: ModuleType):
    samples = []
    code, lines = part("fetch_progress").watch(
        ["sh", "-c", "echo one; sleep 1.2; echo two; exit 3"], lambda: samples.append(1)
    )
    assert (code, lines) == (3, ["one", "two"])
    assert 1 <= len(samples) <= 6  # about once a second, and it returned


def test_a_copy_waits_for_the_head_only_so_long(job: ModuleType, tmp_path: Path):
    spec = part("fetch_spec").Head(source="127.0.0.1", port=free_port(), wait_limit=0)
    channel = part("fetch_channel")
    with pytest.raises(job.JobError) as caught:  # nothing listens
        channel.wait_for_head(spec, job.Status("copy-x", "c"), "/model", want="o/m@main")
    assert str(caught.value).startswith("the head (127.0.0.1) did not have")
    assert "within 0 s" in str(caught.value) and "Connection refused" in str(caught.value)


def test_the_head_answers_every_other_spark_it_was_told_and_no_one_else(job: ModuleType, head):
    import http.client

    assert part("fetch_serve").allowed("192.168.100.2") == {"192.168.100.2"}  # an older spec
    assert part("fetch_serve").allowed(["192.168.100.2", "192.168.100.3"]) == {
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


# --- the copy channel against a hostile head, a stranger, a planted symlink (issue 22) -----

from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


def answer(port: int, path: str, token: str | None = TOKEN) -> tuple[int, bytes]:
    import http.client

    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    connection.request("GET", path, headers=headers)
    response = connection.getresponse()
    body = response.read()
    connection.close()
    return response.status, body


def test_the_server_refuses_a_request_without_the_token_or_with_a_wrong_one(job, head):
    port = head[1]
    for token in (None, "", "a-random-token-of-this-rum", TOKEN + "x"):
        status, body = answer(port, "/model?want=o/m@main", token)
        assert status == 401 and b"token" in body, token
    assert answer(port, "/model?want=o/m@main")[0] == 200
    assert answer(port, "/model?want=o/m@main&x=" + "a" * 5000)[0] == 414  # bounded requests


def test_a_planted_symlink_and_a_symlinked_folder_are_not_listed_nor_served(job, head, tmp_path):
    folder, port, _, _ = head
    secret = tmp_path / "shadow"
    secret.write_text("root:$6$secret\n")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "x.bin").write_text("outside")
    (folder / "notes.txt").symlink_to(secret)  # notes.txt -> /etc/shadow
    (folder / "linked").symlink_to(tmp_path / "elsewhere")
    os.mkfifo(folder / "pipe")
    status, body = answer(port, "/model?want=o/m@main")
    assert status == 200
    assert json.loads(body)["files"] == {"config.json": 8, "w.safetensors": 3_000_000}
    for name in ("notes.txt", "linked/x.bin", "pipe", "sub/../config.json", "/etc/passwd"):
        status, body = answer(port, f"/file?want=o/m@main&path={name}")
        assert status == 404 and b"secret" not in body and b"outside" not in body, name
    assert job.digests([{"want": "o/m@main", "folder": str(folder)}])[0]["files"].keys() == {
        "config.json",
        "w.safetensors",
    }


class Hostile:
    """A server on the head's address that answers the copy's requests its own way."""

    def __init__(self, body: bytes, length: int | None = None):
        import http.server
        import threading

        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):  # noqa: N802
                listing = self.path.startswith("/model")
                data = b'{"ready": true, "files": {}}' if listing else outer.body
                self.send_response(200)
                size = (
                    len(data)
                    if outer.length is None or self.path.startswith("/model")
                    else outer.length
                )
                self.send_header("Content-Length", str(size))
                self.end_headers()
                self.wfile.write(data)

        self.body, self.length = body, length
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, args=(POLL_S,), daemon=True).start()

    def spec(self, job: ModuleType, target: Path, files: dict, tmp_path: Path):
        import pwd

        (tmp_path / "token").write_text(TOKEN)
        return copy_model_spec(
            job, **{"source": "127.0.0.1", "port": self.port, "want": "o/m@main",
                    "folder": str(target), "needs_tokenizer": False, "wait_limit": 1,
                    "user": pwd.getpwuid(os.getuid()).pw_name, "model_check": "/bin/false",
                    "files": files, "token_file": str(tmp_path / "token")})  # fmt: skip


def sha(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize("name", ["../x", "/etc/x", "a/../../x", "a\\..\\x", "a\x00b",
                                  ".cache/spark-copy/x", "./x", "a//x", ".spark-deploy-complete"])  # fmt: skip
def test_a_name_outside_the_folder_is_refused_before_anything_is_written(job, tmp_path, name):
    hostile = Hostile(b"owned")
    target = tmp_path / "other" / "m"
    spec = hostile.spec(job, target, {name: [5, sha(b"owned")]}, tmp_path)
    with pytest.raises(job.JobError, match="refused the file name"):
        job.copy_model(spec, job.Status("copy-x", "c"))
    assert not (tmp_path / "x").exists() and not (tmp_path / "other" / "x").exists()
    hostile.server.shutdown()


def test_a_symlinked_folder_in_the_copy_is_not_followed(job, tmp_path, monkeypatch):
    hostile = Hostile(b"owned")
    target, victim = tmp_path / "other" / "m", tmp_path / "victim"
    target.mkdir(parents=True)
    victim.mkdir()
    (target / "sub").symlink_to(victim)
    spec = hostile.spec(job, target, {"sub/x": [5, sha(b"owned")]}, tmp_path)
    with pytest.raises(job.JobError, match="symlink or not a folder"):
        job.copy_model(spec, job.Status("copy-x", "c"))
    assert list(victim.iterdir()) == []
    (target / "sub").unlink()
    (target / "x").symlink_to(victim / "y")  # a symlink where the file goes is replaced
    spec = hostile.spec(job, target, {"x": [5, sha(b"owned")]}, tmp_path)
    monkeypatch.setattr(part("fetch_copy"), "seal", lambda spec: None)
    job.copy_model(spec, job.Status("copy-x", "c"))
    assert not (target / "x").is_symlink() and (target / "x").read_bytes() == b"owned"
    assert not (victim / "y").exists()
    hostile.server.shutdown()


@pytest.mark.parametrize(
    "body, length, error",
    [
        (b"owned-and-more", None, "offers 14 bytes where 5"),  # declared longer
        (b"owned-and-more", 5, None),  # declares 5: no byte past them is read
        (b"own", 5, "sent 3 of its 5 bytes"),  # short
        (b"pwned", None, "not .* as the deploy read it over SSH"),  # same size, wrong digest
    ],
)
def test_a_body_longer_shorter_or_other_than_declared_is_refused(
    job, tmp_path, body, length, error, monkeypatch
):
    hostile = Hostile(body, length)
    target = tmp_path / "other" / "m"
    spec = hostile.spec(job, target, {"w.bin": [5, sha(b"owned")]}, tmp_path)
    monkeypatch.setattr(part("fetch_copy"), "seal", lambda spec: None)
    if error:
        with pytest.raises(job.JobError, match=error):
            job.copy_model(spec, job.Status("copy-x", "c"))
    else:
        job.copy_model(spec, job.Status("copy-x", "c"))
    partial = target / ".cache" / "spark-copy" / "w.bin"
    assert partial.stat().st_size <= 5 if partial.exists() else True
    assert (target / "w.bin").exists() == (error is None)  # only the right bytes are kept
    hostile.server.shutdown()


def test_the_copy_does_not_chown_through_a_planted_symlink(job, head, tmp_path, monkeypatch):
    monkeypatch.setattr(part("fetch_copy"), "seal", lambda spec: None)
    target, victim = tmp_path / "other" / "m", tmp_path / "victim"
    target.mkdir(parents=True)
    victim.write_text("root's")
    (target / "link").symlink_to(victim)
    job.copy_model(copy_spec(job, head, target, user="nobody"), job.Status("copy-x", "c"))
    nobody = 65534
    assert victim.stat().st_uid == 0  # the old rglob + os.chown gave it to the operator
    assert (target / "w.safetensors").stat().st_uid == nobody and target.stat().st_uid == nobody
    assert (target / ".cache" / "spark-copy").stat().st_uid == nobody


def test_hf_partial_files_are_removed_only_inside_the_folder(job, tmp_path):
    folder, outside = tmp_path / "m", tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.incomplete").write_text("x")
    (folder / ".cache" / "huggingface").mkdir(parents=True)
    (folder / ".cache" / "huggingface" / "download").symlink_to(outside)
    part("fetch_hub").remove_partial_files(folder)
    assert (outside / "keep.incomplete").exists()
    (folder / ".cache" / "huggingface" / "download").unlink()
    (folder / ".cache" / "huggingface" / "download" / "d").mkdir(parents=True)
    (folder / ".cache" / "huggingface" / "download" / "d" / "w.ab.incomplete").write_text("x")
    part("fetch_hub").remove_partial_files(folder)
    assert not (folder / ".cache" / "huggingface" / "download" / "d" / "w.ab.incomplete").exists()


def test_a_partial_file_hf_renames_while_the_job_counts_is_left_out(job, tmp_path, monkeypatch):
    download = tmp_path / "m" / ".cache" / "huggingface" / "download"
    (download / "d").mkdir(parents=True)
    for name in ("gone.ab.incomplete", "kept.cd.incomplete", "d/w.ef.incomplete"):
        (download / name).write_text("x")
    names = part("fetch_names")
    listed = names.os.scandir

    def scandir_then_rename(fd):  # hf completes files between the listing and their stat
        entries = list(listed(fd))
        for gone in ("gone.ab.incomplete", "d"):
            if any(entry.name == gone for entry in entries):
                (download / gone).rename(tmp_path / gone)
        return contextlib.nullcontext(entries)

    monkeypatch.setattr(names.os, "scandir", scandir_then_rename)
    root = os.open(download, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert list(names.regular_files(root)) == ["kept.cd.incomplete"]
    finally:
        os.close(root)
    monkeypatch.undo()
    (tmp_path / "gone.ab.incomplete").rename(download / "gone.ab.incomplete")
    listed_partials = part("fetch_hub").partial_files
    monkeypatch.setattr(
        part("fetch_hub"),
        "partial_files",
        lambda root: [*listed_partials(root), ("vanished.gh.incomplete", None)],
    )
    part("fetch_hub").remove_partial_files(tmp_path / "m")  # the vanished one is no error
    assert list(download.iterdir()) == []


def test_the_hub_file_list_must_name_plain_paths(job, monkeypatch):
    import subprocess

    def hub(listing):
        return lambda *a, **k: subprocess.CompletedProcess(a, 0, json.dumps(listing), "")

    spec = part("fetch_spec").ModelSpec(
        label="m", hf_venv="/x", repo="o/m", revision="main", user="root",
        want="o/m@main", folder="/x", needs_tokenizer=False, base_repo=None,
        group="root", env={}, model_check="/x")  # fmt: skip
    monkeypatch.setattr(job.subprocess, "run", hub({"config.json": 3, "sub/w.bin": 4}))
    assert part("fetch_hub").hub_files(spec) == {"config.json": 3, "sub/w.bin": 4}
    for name in ("../../etc/cron.d/x", "/etc/passwd", "a/./b"):
        monkeypatch.setattr(job.subprocess, "run", hub({name: 1}))
        with pytest.raises(job.JobError, match="refused the file name"):
            part("fetch_hub").hub_files(spec)


# names: the grammar a copied or listed file name must have

load_job(Path(os.environ.get("SPARK_FETCH_JOBS", "/nonexistent")))
NAMES = part("fetch_names")  # safe_name, and the JobError it raises
PART = st.text(st.characters(exclude_categories=["Cs"]), min_size=1, max_size=12)


@given(st.lists(PART, min_size=1, max_size=5).map("/".join))
def test_a_name_that_passes_stays_inside_the_folder(name):
    job = NAMES
    try:
        plain = job.safe_name(name)
    except job.JobError:
        return
    joined = os.path.normpath(os.path.join("/folder", plain))
    assert joined.startswith("/folder/") and joined == "/folder/" + plain
    assert "\x00" not in plain and "\\" not in plain and ".." not in plain.split("/")


GRAMMAR = st.sampled_from(["a", "b.bin", ".", "..", "", "c d", "\\", "\x00"])


@given(st.lists(GRAMMAR, min_size=1, max_size=6).map("/".join))
def test_dots_empty_parts_and_backslashes_never_pass(name):
    job = NAMES
    parts = name.split("/")
    bad = any(p in ("", ".", "..") or "\\" in p or "\x00" in p for p in parts)
    try:
        job.safe_name(name)
        assert not bad
    except job.JobError:
        assert bad


# --- the image from the head: only the expected image, tagged as planned ------------------


def image_tar(config: bytes, tags: list[str], extra: dict[str, bytes] | None = None,
              config_name: str | None = None) -> bytes:  # fmt: skip
    """A docker save tar (OCI layout) of one image whose config is ``config``."""
    import io
    import tarfile

    digest = sha(config)
    members = {
        f"blobs/sha256/{digest}": config,
        "manifest.json": json.dumps(
            [{"Config": config_name or f"blobs/sha256/{digest}", "RepoTags": tags, "Layers": []}]
        ).encode(),
        "index.json": json.dumps(
            {
                "manifests": [
                    {
                        "annotations": {
                            "io.containerd.image.name": f"docker.io/{tags[0]}" if tags else "x"
                        }
                    }
                ]
            }
        ).encode(),  # fmt: skip
        "repositories": b'{"ubuntu": {"latest": "x"}}',
        **(extra or {}),
    }
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w") as tar:
        for name, content in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
    return data.getvalue()


@pytest.mark.parametrize(
    "tar, error",
    [
        (lambda c: image_tar(c, ["o/engine:1"]), None),
        (lambda c: image_tar(b"{}other", ["o/engine:1"]), "another ID"),  # another image
        (lambda c: image_tar(c, ["o/engine:1", "ubuntu:latest"]), "naming other images"),
        (lambda c: image_tar(c, ["o/engine:1"], {f"blobs/sha256/{'0' * 64}": b"x"}), "not what"),
        (lambda c: image_tar(c, ["o/engine:1"], {"../x": b"x"}), "refused the file name"),
    ],
)
def test_the_image_tar_is_passed_only_when_it_is_the_expected_image(job, tar, error):
    import io
    import tarfile

    config = b'{"architecture": "arm64"}'
    sink = io.BytesIO()
    run = lambda: part("fetch_copy_image").pass_image(  # noqa: E731
        io.BytesIO(tar(config)), sink, "o/engine:1", f"sha256:{sha(config)}", lambda n: None
    )
    if error:
        with pytest.raises(job.JobError, match=error):
            run()
        return
    run()
    sink.seek(0)
    with tarfile.open(fileobj=sink) as passed:
        assert "repositories" not in passed.getnames()  # legacy tags are never loaded
        blob = passed.extractfile(f"blobs/sha256/{sha(config)}")
        assert blob is not None and blob.read() == config


# --- root's docker gets the operator's logins only ------------------------------------------


def test_the_private_docker_config_holds_only_the_registry_logins(job, tmp_path, capsys):
    home = tmp_path / ".docker"
    home.mkdir()
    (home / "config.json").write_text(json.dumps({
        "auths": {"nvcr.io": {"auth": "b64", "email": "x"}},
        "credsStore": "desktop", "credHelpers": {"gcr.io": "gcloud"},
        "cliPluginsExtraDirs": [str(tmp_path)], "aliases": {"builder": "buildx"},
        "proxies": {"default": {"httpProxy": "http://evil"}},
    }))  # fmt: skip
    spec = part("fetch_spec").ImageSpec(
        label="i", image="o/engine:1", engine="vllm", read_script="",
        readings="/x", docker_config=str(home), user="root")  # fmt: skip
    folder = part("fetch_docker").private_docker_config(spec)
    assert os.stat(folder).st_mode & 0o777 == 0o700 and os.stat(folder).st_uid == 0
    assert os.listdir(folder) == ["config.json"]
    written = Path(folder) / "config.json"
    assert written.stat().st_mode & 0o777 == 0o600
    assert json.loads(written.read_text()) == {"auths": {"nvcr.io": {"auth": "b64"}}}
    assert "must be in its auths (`docker login` with no credential helper)" in (
        capsys.readouterr().out
    )
    # a symlinked config, or one the operator does not own, is not read
    (tmp_path / "real.json").write_text(json.dumps({"auths": {"a": {"auth": "x"}}}))
    (home / "config.json").unlink()
    (home / "config.json").symlink_to(tmp_path / "real.json")
    assert part("fetch_docker").operator_auths(spec) == {}
    assert part("fetch_docker").operator_auths(replace(spec, user="nobody")) == {}


# --- the spec, typed once for the deploy and the job (files/fetch_spec.py) ------------------


def test_a_spec_reads_back_as_written_and_the_job_finds_its_modules_where_they_are_shipped(
    job: ModuleType,
):
    from sparkdeploy.config.paths import FETCH_LIB, FETCH_SPEC

    assert job.LIB == FETCH_LIB and f"{FETCH_LIB}/fetch_spec.py" == FETCH_SPEC
    spec = copy_model_spec(job, source="192.168.100.1", port=47471, want="o/m@main",
                           folder="/opt/models/m", needs_tokenizer=True, user="nvidia",
                           model_check="/x", wait_limit=60, files={"a": [1, "0" * 64]},
                           token_file="/private/x.token")  # fmt: skip
    data = json.loads(spec.to_json())
    assert data["kind"] == "copy-model" and "token_file" not in data  # never in the spec
    assert job.JobSpec.from_json(spec.to_json()) == job.replace(spec, token_file="")
    assert job.CopyModelSpec.from_json(spec.to_json()).head == part("fetch_spec").Head(
        "192.168.100.1", 47471, 60
    )


@pytest.mark.parametrize(
    "change, error",
    [
        (lambda d: {**d, "extra": 1}, r"unknown keys \['extra'\] and lacks \[\]"),
        (lambda d: {k: v for k, v in d.items() if k != "port"}, r"lacks \['port'\]"),
        (lambda d: {**d, "token_file": "/etc/shadow"}, r"unknown keys \['token_file'\]"),
        (lambda d: {**d, "kind": "other"}, "kind 'other' is not one of"),
        (lambda d: [d], "kind None is not one of"),
    ],
)
def test_a_spec_with_other_keys_than_its_kind_is_refused_naming_them(job, change, error):
    spec = job.ServeSpec(label="s", bind="192.168.100.1", allow=["192.168.100.2"], port=1,
                         models={}, images=[])  # fmt: skip
    with pytest.raises(job.SpecError, match=error):
        job.JobSpec.from_json(json.dumps(change(spec.to_dict())))
    with pytest.raises(job.SpecError, match="kind 'serve' is not one of"):
        part("fetch_spec").ModelSpec.from_json(spec.to_json())  # another kind than asked


def test_a_job_whose_spec_is_refused_fails_saying_why(tmp_path: Path):
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    job = load_job(jobs)
    (jobs / "serve-x.json").write_text(json.dumps({"kind": "serve", "label": "s"}))
    assert job.run("serve-x") == 1
    status = json.loads((jobs / "serve-x.status.json").read_text())
    assert status["state"] == "failed" and "lacks ['allow', 'bind'" in status["error"]
