"""Flag catalogues: the extractors on stand-in wheels, the CLI offline, the committed data."""

from __future__ import annotations

import json
import re

import pytest

from sparkdeploy.knowledge.flags import FLAGS_DIR, available_versions, load_catalogue
from sparkdeploy.knowledge.spec import FlagSpec
from tools.catalogue import build as catalogue
from tools.catalogue import extract_sglang, extract_vllm
from tools.catalogue.pysource import WheelSource

from .engine_wheels import SGLANG_FILES, VLLM_FILES, make_wheel


@pytest.fixture
def sglang_flags(tmp_path):
    wheel = make_wheel(tmp_path, "sglang-9.9.9-py3-none-any.whl", SGLANG_FILES)
    flags, unresolved = extract_sglang.extract(WheelSource(wheel))
    assert unresolved == []
    return flags


@pytest.fixture
def vllm_flags(tmp_path):
    wheel = make_wheel(tmp_path, "vllm-9.9.9-py3-none-any.whl", VLLM_FILES)
    flags, unresolved = extract_vllm.extract(WheelSource(wheel))
    assert unresolved == []
    return flags


def test_sglang_types_defaults_and_choices_are_read_from_source(sglang_flags):
    assert sglang_flags["--port"] == FlagSpec("int", default=30000)
    assert sglang_flags["--mem-fraction-static"] == FlagSpec("float")
    assert sglang_flags["--attention-backend"].choices == ["triton", "flashinfer", "fa3"]
    assert sglang_flags["--kv-cache-dtype"] == FlagSpec("str", ["auto", "fp8_e4m3"], "auto")
    assert sglang_flags["--capacity"].default == 10000
    assert sglang_flags["--reasoning-parser"].choices == ["qwen3", "mistral"]  # dict keys
    assert sglang_flags["--context-length"] == FlagSpec("int", human_readable=True)
    assert sglang_flags["--labels"].type == "json"
    assert sglang_flags["--cuda-graph-bs"] == FlagSpec("int", nargs="+")
    assert sglang_flags["--checksum"].nargs == "?"


def test_sglang_aliases_booleans_and_deprecations(sglang_flags):
    assert sglang_flags["--model"].alias_of == "--model-path"
    assert sglang_flags["--enable-metrics"] == FlagSpec("bool", default=False)
    assert sglang_flags["--stream-output"].deprecated
    assert sglang_flags["--stream-output"].replaced_by == "--incremental-streaming-output"
    assert sglang_flags["--old-knob"] == FlagSpec("bool", default=False, deprecated=True)
    assert sglang_flags["--no-shared-loras"].negates == "--shared-loras"


def test_sglang_layout_without_add_argument_is_refused_not_catalogued_empty(tmp_path):
    files = {
        "sglang/srt/server_args.py": "class ServerArgs:\n    pass\n",
        "sglang/srt/arg_groups/fields/memory.py": "",
    }
    wheel = make_wheel(tmp_path, "sglang-1.0.0-py3-none-any.whl", files)
    with pytest.raises(extract_sglang.ExtractionError, match="arg_groups/fields"):
        extract_sglang.extract(WheelSource(wheel))


def test_vllm_config_fields_become_flags_like_compute_kwargs(vllm_flags):
    assert vllm_flags["--model"] == FlagSpec("str", default="Qwen/Qwen3-0.6B")
    assert vllm_flags["--max-model-len"] == FlagSpec("int", human_readable=True)
    assert vllm_flags["--enforce-eager"] == FlagSpec("bool", default=False)
    assert vllm_flags["--no-enforce-eager"].negates == "--enforce-eager"
    assert vllm_flags["--dtype"].choices == ["auto", "half", "bfloat16"]
    assert vllm_flags["--gpu-memory-utilization"] == FlagSpec("float", default=0.9)
    assert vllm_flags["--device-memory-utilization"].alias_of == "--gpu-memory-utilization"
    assert vllm_flags["-tp"].alias_of == "--tensor-parallel-size"
    assert vllm_flags["--hf-token"] == FlagSpec("str", nargs="?")  # bool | str | None


def test_vllm_literal_enum_collection_and_dataclass_fields(vllm_flags):
    assert vllm_flags["--kv-cache-dtype"].choices == ["auto", "fp8"]  # .remove("fp8_inc")
    assert vllm_flags["--hash-algo"].choices is None  # Literal | str: any string
    backend = vllm_flags["--attention-backend"]
    assert backend.choices == ["FLASH_ATTN", "TRITON_MLA"] and backend.ignore_case
    assert vllm_flags["--cudagraph-capture-sizes"] == FlagSpec("int", nargs="+")
    assert vllm_flags["--moe-backend"].choices == ["auto", "marlin"]  # type override keeps choices
    assert vllm_flags["--compilation-config"].type == "json"
    assert vllm_flags["-cc"].alias_of == "--compilation-config"
    assert vllm_flags["--no-enable-prefix-caching"].negates == "--enable-prefix-caching"
    assert vllm_flags["--enable-log-requests"].default is False


def test_vllm_frontend_fields_and_customisations(vllm_flags):
    assert vllm_flags["--host"] == FlagSpec("str")
    assert vllm_flags["--port"].default == 8000
    assert vllm_flags["-p"].alias_of == "--port"  # extra "flags" from _customize_cli_kwargs
    assert vllm_flags["--allowed-origins"] == FlagSpec("json", default=["*"])  # nargs deleted
    assert vllm_flags["--lora-modules"] == FlagSpec("str", nargs="+")
    assert vllm_flags["--uvicorn-log-level"].choices == ["info", "debug"]
    assert vllm_flags["--headless"] == FlagSpec("bool", default=False)
    assert "model_tag" not in vllm_flags  # positional


def test_vllm_wheel_without_serve_parser_is_refused(tmp_path):
    wheel = make_wheel(tmp_path, "vllm-1.0.0-py3-none-any.whl", {"vllm/__init__.py": ""})
    with pytest.raises(extract_vllm.ExtractionError, match="make_arg_parser|expected"):
        extract_vllm.extract(WheelSource(wheel))


def test_cli_reuses_a_downloaded_wheel_and_writes_json(tmp_path, capsys):
    wheels, out = tmp_path / "wheels", tmp_path / "out"
    wheel = make_wheel(wheels, "sglang-9.9.9-py3-none-any.whl", SGLANG_FILES)
    assert catalogue.main(["sglang", "9.9.9", "--wheel-dir", str(wheels), "--out", str(out)]) == 0
    document = json.loads((out / "sglang-9.9.9.json").read_text())
    assert document["engine"] == "sglang" and document["version"] == "9.9.9"
    assert document["source"] == {"wheel": wheel.name, "sha256": WheelSource(wheel).sha256}
    assert document["flags"]["--port"] == {"type": "int", "choices": None, "default": 30000}
    assert "sglang-9.9.9.json" in capsys.readouterr().out


def test_cli_reports_a_layout_it_cannot_read(tmp_path, capsys):
    wheels = tmp_path / "wheels"
    make_wheel(wheels, "vllm-1.0.0-py3-none-any.whl", {"vllm/__init__.py": ""})
    code = catalogue.main(["vllm", "1.0.0", "--wheel-dir", str(wheels), "--out", str(tmp_path)])
    assert code == 1 and "error:" in capsys.readouterr().err


# -- the committed catalogues ------------------------------------------------------------

COMMITTED = [
    (engine, version) for engine in ("sglang", "vllm") for version in available_versions(engine)
]
KNOWN = {
    "sglang": [
        "--model-path", "--tokenizer-path", "--host", "--port", "--attention-backend",
        "--moe-runner-backend", "--mem-fraction-static", "--context-length", "--cuda-graph-max-bs",
        "--max-running-requests", "--speculative-algorithm", "--speculative-eagle-topk",
        "--speculative-num-steps", "--speculative-num-draft-tokens", "--nnodes", "--node-rank",
        "--dist-init-addr", "--tp-size", "--kv-cache-dtype", "--served-model-name",
    ],
    "vllm": [
        "--gpu-memory-utilization", "--max-model-len", "--attention-backend", "--enforce-eager",
        "--load-format", "--tensor-parallel-size", "--distributed-executor-backend", "--host",
        "--port", "--served-model-name", "--kv-cache-dtype", "--max-num-seqs",
        "--no-enable-prefix-caching", "--no-enable-flashinfer-autotune", "--cudagraph-capture-sizes",
        "--max-cudagraph-capture-size", "--tool-call-parser", "--enable-auto-tool-choice",
        "--reasoning-parser", "--max-num-batched-tokens", "--moe-backend", "--headless",
    ],
}  # fmt: skip


def test_both_engines_and_the_sglang_rename_pair_are_catalogued():
    assert available_versions("sglang") == ["0.5.10", "0.5.12"]
    assert available_versions("vllm") == ["0.33.0"]


@pytest.mark.parametrize(("engine", "version"), COMMITTED)
def test_committed_catalogue_records_its_wheel_and_known_flags(engine, version):
    document = json.loads((FLAGS_DIR / f"{engine}-{version}.json").read_text())
    assert document["engine"] == engine and document["version"] == version
    assert document["source"]["wheel"].startswith(f"{engine}-{version}-")
    assert re.fullmatch(r"[0-9a-f]{64}", document["source"]["sha256"])
    assert "unresolved" not in document
    flags = load_catalogue(engine, version).flags
    assert len(flags) > 300
    assert [flag for flag in KNOWN[engine] if flag not in flags] == []
    for name, spec in flags.items():
        assert spec.alias_of is None or spec.alias_of in flags, name
        assert spec.negates is None or spec.negates in flags, name


def test_catalogues_hold_the_values_the_reports_use():
    sglang = load_catalogue("sglang", "0.5.10")
    assert sglang.accepts("--attention-backend", "triton")
    assert sglang.accepts("--moe-runner-backend", "flashinfer_cutlass")
    assert sglang.accepts("--speculative-algorithm", "EAGLE")
    vllm = load_catalogue("vllm", "0.33.0")
    assert vllm.accepts("--attention-backend", "TRITON_MLA")  # report 002
    assert vllm.accepts("--moe-backend", "marlin")  # report 004
    assert vllm.accepts("--cudagraph-capture-sizes", [1, 2, 4, 8, 16, 32, 64, 128, 256])
