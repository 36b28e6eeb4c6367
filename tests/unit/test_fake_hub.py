"""The stand-in Hub (tests/twins/standins/hf-hub), driven by the real huggingface_hub client.

The server runs as a subprocess with `python -I -S` (no site-packages: it must need nothing but
the standard library, as in a twin) over a seeded temporary root. The client runs both in
process (snapshot_download, hf_hub_download, HfApi) and as the `hf` console script with the
environment the deploy gives it.
"""

from __future__ import annotations

import hashlib
import http.client
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from huggingface_hub import HfApi, constants, hf_hub_download, snapshot_download
from huggingface_hub.errors import (
    GatedRepoError,
    HfHubHTTPError,
    RemoteEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.hf_api import RepoFile, RepoFolder

from tests.unit.standin_hub import hf_environment, load, running_hub

HF_CLI = Path(sys.executable).parent / "hf"
OTHER_TOKEN = "hf_twinOtherUserToken9876543210"  # a known user, not let into acme/gated-model
NESTED = "acme/nested"
SCRATCH = "acme/scratch"


seed = load("seed")


@dataclass
class StandIn:
    """A running stand-in Hub: its URL, repo root, request log and a client home."""

    url: str
    root: Path
    log: Path
    home: Path

    def mark(self) -> int:
        """Where the request log ends now."""
        return len(self.log.read_text().splitlines())

    def requests(self, since: int = 0) -> list[tuple[str, str, str, int, int]]:
        """(role, method, target, status, bytes) of each request logged after `since`."""
        lines = self.log.read_text().splitlines()[since:]
        return [
            (r, m, t, int(s), int(b)) for r, m, t, s, b, _ in (line.split(" ") for line in lines)
        ]

    def content_gets(self, since: int) -> list[str]:
        """Targets of the GETs since `since` that carried file content (Hub resolve or CDN)."""
        return [
            t
            for r, m, t, _, _ in self.requests(since)
            if m == "GET" and (r == "cdn" or "/resolve/" in t)
        ]

    def repo_files(self, repo_id: str) -> dict[str, bytes]:
        folder = self.root / repo_id
        return {
            p.relative_to(folder).as_posix(): p.read_bytes()
            for p in folder.rglob("*")
            if p.is_file() and p.name != ".gated"
        }


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandIn]:
    base = tmp_path_factory.mktemp("hub")
    root = base / "root"
    seed.seed(root)
    write(root / "acme/other-gated/.gated", OTHER_TOKEN)
    write(root / "acme/other-gated/config.json", "{}")
    write(root / NESTED / ".gitattributes", "*.safetensors filter=lfs diff=lfs merge=lfs -text\n")
    write(root / NESTED / "top.txt", "top\n")
    write(root / NESTED / "sub dir/deep/weights.safetensors", b"\x00\x01" * 700)
    write(root / NESTED / "sub dir/notes #1.txt", "notes\n")
    write(root / NESTED / "other/readme.md", "other\n")
    write(root / SCRATCH / "config.json", '{"v": 1}\n')
    log = base / "requests.log"
    # As the twin's environment does: no telemetry (nor its agent-registry call), no Xet.
    with running_hub(root, log, "--page-size", "4") as url, pytest.MonkeyPatch.context() as patch:
        patch.setattr(constants, "HF_HUB_DISABLE_TELEMETRY", True)
        patch.setattr(constants, "HF_HUB_DISABLE_XET", True)
        yield StandIn(url, root, log, base / "hf-home")


def write(path: Path, content: str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content.encode() if isinstance(content, str) else content)


def snapshot(
    hub: StandIn, repo_id: str, local_dir: Path, token: str | bool = False, **options: Any
) -> Path:
    """snapshot_download to `local_dir` from the stand-in, with the token given (none by default)."""
    return Path(
        snapshot_download(
            repo_id,
            local_dir=local_dir,
            cache_dir=hub.home / "cache",
            endpoint=hub.url,
            token=token,
            **options,
        )
    )


def download(
    hub: StandIn,
    repo_id: str,
    filename: str,
    local_dir: Path,
    token: str | bool = False,
    **options: Any,
) -> Path:
    """hf_hub_download of one file to `local_dir` from the stand-in."""
    return Path(
        hf_hub_download(
            repo_id,
            filename,
            local_dir=local_dir,
            cache_dir=hub.home / "cache",
            endpoint=hub.url,
            token=token,
            **options,
        )
    )


def hf(hub: StandIn, *args: str, token: str | None = None) -> subprocess.CompletedProcess[str]:
    """The `hf` console script, with the environment the deploy gives it in a twin."""
    env = hf_environment(hub.url, hub.home)
    if token is not None:
        env["HF_TOKEN"] = token
    return subprocess.run(
        [str(HF_CLI), *args], check=False, env=env, capture_output=True, text=True, timeout=60
    )


def local_files(folder: Path) -> dict[str, bytes]:
    """What a download left in `folder`, without the client's own .cache/ bookkeeping."""
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in folder.rglob("*")
        if p.is_file() and p.relative_to(folder).parts[0] != ".cache"
    }


def raw(url: str, method: str = "GET", **headers: str) -> tuple[int, dict[str, str], bytes]:
    """One plain HTTP request, redirects not followed: (status, headers, body)."""
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.netloc, timeout=10)
    try:
        connection.request(
            method, f"{parts.path}?{parts.query}" if parts.query else parts.path, headers=headers
        )
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


# --- Downloads -------------------------------------------------------------------------------


def test_snapshot_download_lands_every_file_with_its_bytes(hub: StandIn, tmp_path: Path) -> None:
    mark = hub.mark()
    folder = snapshot(hub, seed.NVFP4, tmp_path / "nvfp4")

    expected = hub.repo_files(seed.NVFP4)
    assert local_files(folder) == expected
    assert {
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
        "model.safetensors.index.json",
        ".gitattributes",
    } <= set(expected)
    assert "config.json" not in expected and "tokenizer.json" not in expected
    # LFS shards came from the CDN at signed URLs, everything else straight from the Hub.
    cdn = [(t, b) for r, m, t, s, b in hub.requests(mark) if r == "cdn" and m == "GET" and s == 200]
    assert sorted(b for _, b in cdn) == sorted(
        len(v) for k, v in expected.items() if k.endswith(".safetensors")
    )
    assert all("Signature=" in t for t, _ in cdn)


def test_a_complete_local_dir_is_never_downloaded_again(hub: StandIn, tmp_path: Path) -> None:
    snapshot(hub, seed.NVFP4, tmp_path / "nvfp4")
    mark = hub.mark()

    snapshot(hub, seed.NVFP4, tmp_path / "nvfp4")

    assert hub.content_gets(mark) == []
    assert [(m, t) for _, m, t, _, _ in hub.requests(mark)] == [
        ("GET", f"/api/models/{seed.NVFP4}/revision/main")
    ]


def test_single_file_download_lands_and_is_only_checked_the_second_time(
    hub: StandIn, tmp_path: Path
) -> None:
    tokenizer = hub.repo_files(seed.BASE)["tokenizer.json"]  # an LFS file in the Mistral repos
    assert download(hub, seed.BASE, "tokenizer.json", tmp_path).read_bytes() == tokenizer
    mark = hub.mark()

    assert download(hub, seed.BASE, "tokenizer.json", tmp_path).read_bytes() == tokenizer

    assert hub.content_gets(mark) == []
    assert [(m, s) for _, m, _, s, _ in hub.requests(mark)] == [("HEAD", 302)]


def test_cli_downloads_named_files_from_the_base_repo(hub: StandIn, tmp_path: Path) -> None:
    result = hf(
        hub,
        "download",
        seed.BASE,
        "config.json",
        "tokenizer.json",
        "--revision",
        "main",
        "--local-dir",
        str(tmp_path / "base"),
    )

    assert result.returncode == 0, result.stderr
    base = hub.repo_files(seed.BASE)
    assert local_files(tmp_path / "base") == {
        name: base[name] for name in ("config.json", "tokenizer.json")
    }


def test_cli_downloads_a_whole_snapshot_once(hub: StandIn, tmp_path: Path) -> None:
    first = hf(hub, "download", seed.EAGLE, "--local-dir", str(tmp_path / "eagle"))
    mark = hub.mark()
    second = hf(hub, "download", seed.EAGLE, "--local-dir", str(tmp_path / "eagle"))

    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    assert local_files(tmp_path / "eagle") == hub.repo_files(seed.EAGLE)
    assert {"config.json", "model.safetensors"} <= set(local_files(tmp_path / "eagle"))
    assert hub.content_gets(mark) == []


def test_subfolders_and_odd_names_download_and_list_across_pages(
    hub: StandIn, tmp_path: Path
) -> None:
    mark = hub.mark()
    folder = snapshot(hub, NESTED, tmp_path / "nested")

    assert local_files(folder) == hub.repo_files(NESTED)
    assert any("cursor=" in t for _, _, t, _, _ in hub.requests(mark))  # 9 entries, pages of 4
    tree = list(HfApi(endpoint=hub.url, token=False).list_repo_tree(NESTED, recursive=True))
    assert sorted(e.path for e in tree if isinstance(e, RepoFolder)) == [
        "other",
        "sub dir",
        "sub dir/deep",
    ]
    weights = next(e for e in tree if isinstance(e, RepoFile) and e.path.endswith(".safetensors"))
    content = (folder / weights.path).read_bytes()
    assert weights.lfs is not None and weights.lfs.sha256 == hashlib.sha256(content).hexdigest()
    assert weights.size == weights.lfs.size == len(content)
    assert all(e.lfs is None for e in tree if isinstance(e, RepoFile) and e is not weights)
    top = HfApi(endpoint=hub.url, token=False).list_repo_tree(NESTED)
    assert [e.path for e in top] == [".gitattributes", "other", "sub dir", "top.txt"]
    inside = HfApi(endpoint=hub.url, token=False).list_repo_tree(NESTED, path_in_repo="sub dir")
    assert [e.path for e in inside] == ["sub dir/deep", "sub dir/notes #1.txt"]


# --- Revisions ---------------------------------------------------------------------------------


def test_the_commit_sha_resolves_and_follows_the_content(hub: StandIn, tmp_path: Path) -> None:
    api = HfApi(endpoint=hub.url, token=False)
    sha = api.repo_info(SCRATCH).sha
    assert sha is not None and len(sha) == 40 and api.repo_info(SCRATCH, revision=sha).sha == sha
    assert local_files(snapshot(hub, SCRATCH, tmp_path / "pinned", revision=sha)) == hub.repo_files(
        SCRATCH
    )

    write(hub.root / SCRATCH / "config.json", '{"v": 2}\n')

    assert api.repo_info(SCRATCH).sha not in (None, sha)
    with pytest.raises(RevisionNotFoundError):
        download(hub, SCRATCH, "config.json", tmp_path / "stale", revision=sha)


# --- Refusals ------------------------------------------------------------------------------------


def test_gated_repo_files_need_its_token(hub: StandIn, tmp_path: Path) -> None:
    api = HfApi(endpoint=hub.url, token=False)
    assert api.model_info(seed.GATED).gated == "manual"  # metadata is public, as on the Hub
    with pytest.raises(GatedRepoError) as anonymous:
        snapshot(hub, seed.GATED, tmp_path / "anonymous")
    with pytest.raises(GatedRepoError) as outsider:
        snapshot(hub, seed.GATED, tmp_path / "outsider", token=OTHER_TOKEN)
    assert (anonymous.value.response.status_code, outsider.value.response.status_code) == (401, 403)
    assert not (tmp_path / "anonymous" / "model.safetensors").exists()

    folder = snapshot(hub, seed.GATED, tmp_path / "granted", token=seed.GATED_TOKEN)

    assert local_files(folder) == hub.repo_files(seed.GATED)
    assert ".gated" not in local_files(folder)


def test_cli_gated_repo_fails_without_token_and_works_with_it(hub: StandIn, tmp_path: Path) -> None:
    refused = hf(hub, "download", seed.GATED, "config.json", "--local-dir", str(tmp_path / "no"))
    granted = hf(
        hub, "download", seed.GATED, "--local-dir", str(tmp_path / "yes"), token=seed.GATED_TOKEN
    )

    assert refused.returncode != 0 and "gated-model" in refused.stderr
    assert not (tmp_path / "no" / "config.json").exists()
    assert granted.returncode == 0, granted.stderr
    assert local_files(tmp_path / "yes") == hub.repo_files(seed.GATED)


def test_unknown_repo_is_repo_not_found_like_the_hub(hub: StandIn, tmp_path: Path) -> None:
    with pytest.raises(RepositoryNotFoundError) as anonymous:
        snapshot(hub, "acme/no-such-model", tmp_path / "a")
    with pytest.raises(RepositoryNotFoundError) as signed_in:
        download(hub, "acme/no-such-model", "config.json", tmp_path / "b", token=seed.GATED_TOKEN)

    assert not isinstance(anonymous.value, GatedRepoError)
    assert (anonymous.value.response.status_code, signed_in.value.response.status_code) == (
        401,
        404,
    )


def test_unknown_file_and_revision_raise_the_clients_errors(hub: StandIn, tmp_path: Path) -> None:
    with pytest.raises(RemoteEntryNotFoundError):
        download(hub, seed.BASE, "no-such-file.json", tmp_path / "a")
    with pytest.raises(RevisionNotFoundError):
        snapshot(hub, seed.BASE, tmp_path / "b", revision="v9.9")
    with pytest.raises(RevisionNotFoundError):
        download(hub, seed.BASE, "config.json", tmp_path / "c", revision="refs/pr/1")


def test_an_invalid_token_is_refused_not_taken_for_a_missing_repo(
    hub: StandIn, tmp_path: Path
) -> None:
    with pytest.raises(HfHubHTTPError) as refused:
        download(hub, seed.BASE, "config.json", tmp_path / "a", token="hf_notAToken")

    assert not isinstance(refused.value, RepositoryNotFoundError)
    assert refused.value.response.status_code == 401
    assert "Invalid credentials" in str(refused.value)


# --- HTTP details --------------------------------------------------------------------------------


def test_ranges_redirects_and_signed_cdn_urls(hub: StandIn) -> None:
    config = hub.repo_files(seed.BASE)["config.json"]
    resolve = f"{hub.url}/{seed.BASE}/resolve/main"

    assert raw(f"{resolve}/config.json", Range="bytes=10-19")[::2] == (206, config[10:20])
    assert raw(f"{resolve}/config.json", Range="bytes=-5")[::2] == (206, config[-5:])
    status, headers, _ = raw(f"{resolve}/config.json", Range=f"bytes={len(config)}-")
    assert (status, headers["Content-Range"]) == (416, f"bytes */{len(config)}")

    status, headers, _ = raw(f"{resolve}/model-00001-of-00001.safetensors", "HEAD")
    shard = hub.repo_files(seed.BASE)["model-00001-of-00001.safetensors"]
    assert status == 302 and headers["X-Linked-Size"] == str(len(shard))
    assert headers["X-Linked-Etag"] == f'"{hashlib.sha256(shard).hexdigest()}"'
    assert raw(headers["Location"], Range="bytes=8-15")[::2] == (206, shard[8:16])
    assert raw(headers["Location"].replace("Signature=", "Signature=0"))[0] == 403
    assert raw(headers["Location"].split("?")[0])[0] == 403

    every_header = [
        name.lower()
        for url in (f"{resolve}/config.json", f"{resolve}/tokenizer.json")
        for name in raw(url, "HEAD")[1]
    ]
    assert not [name for name in every_header if name.startswith("x-xet")]


def test_whoami_through_the_api_and_the_cli(hub: StandIn) -> None:
    assert HfApi(endpoint=hub.url).whoami(token=seed.GATED_TOKEN)["name"] == "spark-twin"
    with pytest.raises(HfHubHTTPError):
        HfApi(endpoint=hub.url).whoami(token="hf_notAToken")

    result = hf(hub, "auth", "whoami", token=seed.GATED_TOKEN)

    assert result.returncode == 0, result.stderr
    assert "spark-twin" in result.stdout


def test_the_model_class_is_read_before_connecting_in_one_request(hub: StandIn, tmp_path: Path):
    """The deploy reads config.json on the laptop (the release lacks one: the base repo's),
    asking the Hub once per file and never retrying; an unreachable Hub leaves the class
    unknown with the reason, at once."""
    from sparkdeploy.config.model_source import read_model_class
    from sparkdeploy.config.spark import SparkSettings
    from sparkdeploy.knowledge.model_class import ModelClass, UnknownModel

    spark = SparkSettings.model_validate(
        {
            "ssh_host": "s1",
            "ssh_user": "nvidia",
            "model_repo": seed.NVFP4,
            "model_base_repo": seed.BASE,
            "hf_endpoint": hub.url,
            "hf_endpoint_allow_http": True,
        }
    )
    import socket

    from huggingface_hub.utils import _detect_agent

    resolve, reached = socket.getaddrinfo, []

    def recorded(host, port, *args, **kwargs):  # every connection starts here, DNS or not
        reached.append((host, str(port)))
        return resolve(host, port, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "cache"))  # nothing cached
        # No other host is asked (the client's agent registry came from huggingface.co).
        patch.setattr(constants, "AGENT_HARNESSES_PATH", str(tmp_path / "agents.json"))
        patch.setattr(_detect_agent, "_registry", None)
        patch.setattr(constants, "HF_HUB_DISABLE_TELEMETRY", False)  # as on a laptop
        patch.setattr(socket, "getaddrinfo", recorded)
        mark = hub.mark()
        found = read_model_class(spark, environ={})
        asked = [target for _, _, target, _, _ in hub.requests(mark)]
        gone = spark.model_copy(update={"hf_endpoint": "http://127.0.0.1:9"})
        unknown = read_model_class(gone, environ={})
    assert isinstance(found, ModelClass) and found.architectures == ("MistralForCausalLM",)
    assert found.source == f"{seed.BASE}@main config.json"
    assert asked == [
        f"/{seed.NVFP4}/resolve/main/config.json",
        f"/{seed.BASE}/resolve/main/config.json",
    ]
    assert isinstance(unknown, UnknownModel) and "could not be read" in unknown.why
    hub_address = tuple(hub.url.split("//")[1].split(":"))
    assert set(reached) <= {hub_address, ("127.0.0.1", "9")}  # the hub's may be pooled
