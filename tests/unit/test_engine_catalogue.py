"""Flag catalogues: the extractors on stand-in wheels, the CLI offline, the committed data."""

from __future__ import annotations

import json
import re

import pytest

from sparkdeploy.knowledge.flags import (
    FLAGS_DIR,
    available_versions,
    load_catalogue,
    version_key,
)
from sparkdeploy.knowledge.spec import FlagSpec
from tools.catalogue import build as catalogue
from tools.catalogue import extract_sglang, extract_vllm
from tools.catalogue.pysource import WheelSource

from .engine_wheels import (
    SGLANG_ANNOTATED_FILES,
    SGLANG_FIELDS_FILES,
    SGLANG_FILES,
    SGLANG_UNKNOWN_FILES,
    VLLM_FILES,
    make_wheel,
)


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


@pytest.fixture
def sglang_fields_wheel(tmp_path):
    wheel = make_wheel(tmp_path, "sglang-9.9.8-py3-none-any.whl", SGLANG_FIELDS_FILES)
    return WheelSource(wheel)


def test_sglang_layout_is_chosen_by_what_the_wheel_contains(tmp_path, sglang_fields_wheel):
    old = make_wheel(tmp_path, "sglang-1.0.0-py3-none-any.whl", SGLANG_FILES)
    annotated = make_wheel(tmp_path, "sglang-1.0.1-py3-none-any.whl", SGLANG_ANNOTATED_FILES)
    layouts = [
        extract_sglang.extract_with_layout(WheelSource(wheel))[2] for wheel in (old, annotated)
    ] + [extract_sglang.extract_with_layout(sglang_fields_wheel)[2]]
    assert layouts == ["add_argument", "annotated-fields", "arg-groups-fields"]


def test_sglang_namespace_fields_become_flags_like_add_cli_args_from_dataclass(
    sglang_fields_wheel,
):
    flags, unresolved = extract_sglang.extract(sglang_fields_wheel)
    assert unresolved == []
    assert flags["--model-path"] == FlagSpec("str")  # no default: required
    assert flags["--model"].alias_of == "--model-path"
    assert flags["--port"] == FlagSpec("int", default=30000)
    assert flags["--attention-backend"].choices == ["triton", "flashinfer", "fa4"]  # choices.py
    assert flags["--context-length"] == FlagSpec("int", human_readable=True)
    assert flags["--kv-cache-dtype"] == FlagSpec("str", ["auto", "fp8_e4m3"], "auto")  # alias
    assert flags["--enable-metrics"] == FlagSpec("bool", default=False)  # store_true
    assert flags["--tp-size"] == FlagSpec("int", default=1)
    assert flags["--tensor-parallel-size"].alias_of == "--tp-size"
    assert flags["--nccl-init-addr"].alias_of == "--dist-init-addr"  # str | None
    # Namespace classes, their bases, Literal choices overridden by Arg.choices
    assert flags["--cuda-graph-max-bs-decode"] == FlagSpec("int")  # from the base class
    assert flags["--cuda-graph-bs-decode"] == FlagSpec("int", nargs="+")  # Optional[List[int]]
    assert flags["--cuda-graph-backend-decode"].choices == ["full", "breakable", "disabled"]
    assert flags["--cuda-graph-config"].type == "json"
    assert flags["--enable-tf32-matmul"] == FlagSpec("bool")
    assert flags["--no-enable-tf32-matmul"].negates == "--enable-tf32-matmul"
    assert flags["--lora-paths"] == FlagSpec("str", nargs="*")  # action + action_kwargs
    # Arg(no_cli=True), un-annotated fields and ClassVars have no flag
    assert not {"--internal-only", "--registry", "--ns-path"} & set(flags)
    assert flags["--disable-cuda-graph"] == FlagSpec(
        "bool",
        default=False,
        deprecated=True,
        replaced_by="--cuda-graph-backend-{decode,prefill}=disabled",
    )


def test_sglang_flags_registered_by_hand_next_to_the_fields(sglang_fields_wheel):
    flags, _ = extract_sglang.extract(sglang_fields_wheel)
    # choices from a helper function's last return, default from the field declaration
    assert flags["--reasoning-parser"] == FlagSpec("str", ["auto", "qwen3", "deepseek-r1"], "qwen3")
    assert flags["--kv-canary-real-data"] == FlagSpec("str", default="none")  # a plain field
    # DeprecatedStoreConstAction with nargs=None takes a value
    assert flags["--monokernel-backend"] == FlagSpec(
        "str", ["amd"], deprecated=True, replaced_by="--enable-amd-monokernel"
    )


def test_sglang_annotated_serverargs_keeps_the_deprecated_alias(tmp_path):
    wheel = make_wheel(tmp_path, "sglang-1.0.1-py3-none-any.whl", SGLANG_ANNOTATED_FILES)
    flags, _ = extract_sglang.extract(WheelSource(wheel))
    assert flags["--cuda-graph-max-bs-decode"] == FlagSpec("int")
    assert flags["--cuda-graph-max-bs"] == FlagSpec(
        "int", deprecated=True, replaced_by="--cuda-graph-max-bs-decode"
    )


def test_sglang_wheel_in_neither_layout_is_refused_naming_the_file(tmp_path):
    wheel = make_wheel(tmp_path, "sglang-2.0.0-py3-none-any.whl", SGLANG_UNKNOWN_FILES)
    with pytest.raises(extract_sglang.ExtractionError, match=r"sglang/srt/server_args\.py"):
        extract_sglang.extract(WheelSource(wheel))


def test_sglang_fields_folder_without_namespace_list_is_refused(tmp_path):
    files = dict(SGLANG_FIELDS_FILES)
    files["sglang/srt/server_args.py"] = files["sglang/srt/server_args.py"].replace(
        "_INPUT_NAMESPACES = [Model, ExecGraph, Parallel]", ""
    )
    wheel = make_wheel(tmp_path, "sglang-2.0.1-py3-none-any.whl", files)
    with pytest.raises(extract_sglang.ExtractionError, match="_INPUT_NAMESPACES"):
        extract_sglang.extract(WheelSource(wheel))


def test_sglang_read_that_misses_the_basic_flags_is_refused_not_partial(tmp_path):
    files = dict(SGLANG_FIELDS_FILES)
    files["sglang/srt/server_args.py"] = files["sglang/srt/server_args.py"].replace(
        "[Model, ExecGraph, Parallel]", "[ExecGraph, Parallel]"
    )
    wheel = make_wheel(tmp_path, "sglang-2.0.2-py3-none-any.whl", files)
    with pytest.raises(extract_sglang.ExtractionError, match="--model-path.*partial"):
        extract_sglang.extract(WheelSource(wheel))


def test_sglang_layout_without_add_argument_is_refused_not_catalogued_empty(tmp_path):
    files = {
        "sglang/srt/server_args.py": "class ServerArgs:\n    pass\n",
        "sglang/srt/arg_groups/fields/memory.py": "",
    }
    wheel = make_wheel(tmp_path, "sglang-1.0.0-py3-none-any.whl", files)
    with pytest.raises(extract_sglang.ExtractionError, match="server_args.py"):
        extract_sglang.extract(WheelSource(wheel))


def test_sglang_parser_is_read_from_prepare_server_args(tmp_path, sglang_fields_wheel):
    assert extract_sglang.parser_facts(sglang_fields_wheel) == {
        "prog": "sglang serve",
        "allow_abbrev": True,  # argparse's default: not set in the call
        "underscores": False,
        "dotted_json": False,
        "source": "sglang/srt/server_args.py prepare_server_args (line 58)",
    }
    old = make_wheel(tmp_path, "sglang-1.0.0-py3-none-any.whl", SGLANG_FILES)
    facts = extract_sglang.parser_facts(WheelSource(old))
    assert facts["allow_abbrev"] is False  # the last parser built, with its keyword


def test_sglang_environment_is_the_registry_plus_reads(sglang_fields_wheel):
    assert extract_sglang.environment(sglang_fields_wheel) == [
        "SGLANG_DEFAULTED",  # os.environ.setdefault
        "SGLANG_DEPTH",  # os.environ[...]
        "SGLANG_ENABLE_SPEC_V2",  # read only to warn: still read
        "SGLANG_ENABLE_TORCH_COMPILE",  # Envs
        "SGLANG_LAZY_FLAG",  # through a package function that reads its parameter
        "SGLANG_NEW_NAME",
        "SGLANG_OLD_NAME",  # deprecated_name of an alias field
        "SGLANG_PRESENT",  # "X" in os.environ
        "SGLANG_RETIRED",  # _DEPRECATED_ENVS
        "SGL_LEGACY_SWITCH",  # get_bool_env_var
    ]


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


def test_vllm_parser_and_environment(tmp_path):
    wheel = make_wheel(tmp_path, "vllm-9.9.9-py3-none-any.whl", VLLM_FILES)
    facts = extract_vllm.parser_facts(WheelSource(wheel))
    assert facts["prog"] == "vllm serve"  # console script + ServeSubcommand.name
    assert facts["allow_abbrev"] is True
    assert facts["underscores"] is True and facts["dotted_json"] is True
    assert facts["source"].startswith("vllm/utils/argparse_utils.py FlexibleArgumentParser")
    env = extract_vllm.environment(WheelSource(wheel))
    assert env == ["VLLM_ATTENTION_BACKEND", "VLLM_HOST_IP"]


def test_vllm_allow_abbrev_set_by_the_parser_class_is_read(tmp_path):
    files = dict(VLLM_FILES)
    files["vllm/utils/argparse_utils.py"] = files["vllm/utils/argparse_utils.py"].replace(
        "super().__init__(*args, **kwargs)",
        'kwargs.setdefault("allow_abbrev", False)\n                super().__init__(*args, **kwargs)',
    )
    wheel = make_wheel(tmp_path, "vllm-9.9.9-py3-none-any.whl", files)
    assert extract_vllm.parser_facts(WheelSource(wheel))["allow_abbrev"] is False


def test_cli_reuses_a_downloaded_wheel_and_writes_json(tmp_path, capsys):
    wheels, out = tmp_path / "wheels", tmp_path / "out"
    wheel = make_wheel(wheels, "sglang-9.9.9-py3-none-any.whl", SGLANG_FILES)
    assert catalogue.main(["sglang", "9.9.9", "--wheel-dir", str(wheels), "--out", str(out)]) == 0
    document = json.loads((out / "sglang-9.9.9.json").read_text())
    assert document["engine"] == "sglang" and document["version"] == "9.9.9"
    assert document["source"] == {"wheel": wheel.name, "sha256": WheelSource(wheel).sha256}
    assert document["flags"]["--port"] == {"type": "int", "choices": None, "default": 30000}
    assert document["layout"] == "add_argument"
    assert document["parser"]["prog"] == "sglang serve"
    assert document["env"] == []  # the old stand-in reads no environment
    assert "sglang-9.9.9.json" in capsys.readouterr().out


def test_cli_refreshes_several_releases_and_reports_each_failure(tmp_path, capsys):
    wheels, out = tmp_path / "wheels", tmp_path / "out"
    make_wheel(wheels, "sglang-9.9.8-py3-none-any.whl", SGLANG_FIELDS_FILES)
    make_wheel(wheels, "sglang-9.9.9-py3-none-any.whl", SGLANG_FILES)
    make_wheel(wheels, "sglang-2.0.0-py3-none-any.whl", SGLANG_UNKNOWN_FILES)
    argv = ["sglang", "9.9.8", "2.0.0", "9.9.9", "--wheel-dir", str(wheels), "--out", str(out)]
    assert catalogue.main(argv) == 1
    assert sorted(p.name for p in out.iterdir()) == ["sglang-9.9.8.json", "sglang-9.9.9.json"]
    assert "error: sglang 2.0.0: " in capsys.readouterr().err
    document = json.loads((out / "sglang-9.9.8.json").read_text())
    assert document["layout"] == "arg-groups-fields"
    assert "SGLANG_ENABLE_SPEC_V2" in document["env"]


def test_cli_reports_a_layout_it_cannot_read(tmp_path, capsys):
    wheels = tmp_path / "wheels"
    make_wheel(wheels, "vllm-1.0.0-py3-none-any.whl", {"vllm/__init__.py": ""})
    code = catalogue.main(["vllm", "1.0.0", "--wheel-dir", str(wheels), "--out", str(tmp_path)])
    assert code == 1 and "error:" in capsys.readouterr().err


# -- the committed catalogues ------------------------------------------------------------

COMMITTED = [
    (engine, version) for engine in ("sglang", "vllm") for version in available_versions(engine)
]
KNOWN = {  # in every catalogued release; flags that come or go: the edge tests below
    "sglang": [
        "--model-path", "--tokenizer-path", "--host", "--port", "--attention-backend",
        "--moe-runner-backend", "--mem-fraction-static", "--context-length",
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
        "--reasoning-parser", "--max-num-batched-tokens", "--headless", "-tp", "-pp",
    ],
}  # fmt: skip


SGLANG_RELEASES = [
    "0.5.3.post3",  # lmsysorg/sglang:spark (NVIDIA/dgx-spark-playbooks#68)
    "0.5.4.post3",
    "0.5.5.post3",
    "0.5.6.post2",
    "0.5.7",
    "0.5.8.post1",
    "0.5.9",
    "0.5.10",
    "0.5.10.post1",
    "0.5.11",
    "0.5.12",
    "0.5.12.post1",
    "0.5.13.post1",
    "0.5.14",
    "0.5.15.post1",
    "0.5.16",
    "0.5.17",
    "0.5.18",
    "0.5.19",
    "0.5.20",
    "0.5.21",
    "0.5.22",
    "0.5.23",
]
VLLM_RELEASES = [
    "0.16.0", "0.17.1", "0.18.1", "0.19.1", "0.20.1", "0.20.2", "0.21.0", "0.22.1", "0.23.0",
    "0.24.0", "0.25.1", "0.26.0", "0.27.1", "0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0",
    "0.33.0",
]  # fmt: skip


def test_the_releases_operators_run_are_catalogued():
    assert available_versions("sglang") == SGLANG_RELEASES
    assert available_versions("vllm") == VLLM_RELEASES


def _document(engine: str, version: str) -> dict:
    return json.loads((FLAGS_DIR / f"{engine}-{version}.json").read_text())


def _first_and_last(engine: str, has) -> tuple[str | None, str | None]:
    """The first release for which ``has(document)`` holds and the last one."""
    found = [v for v in available_versions(engine) if has(_document(engine, v))]
    return (found[0], found[-1]) if found else (None, None)


@pytest.mark.parametrize(("engine", "version"), COMMITTED)
def test_committed_catalogue_records_its_wheel_and_known_flags(engine, version):
    document = json.loads((FLAGS_DIR / f"{engine}-{version}.json").read_text())
    assert document["engine"] == engine and document["version"] == version
    assert document["source"]["wheel"].startswith(f"{engine}-{version}-")
    assert re.fullmatch(r"[0-9a-f]{64}", document["source"]["sha256"])
    assert "unresolved" not in document
    assert set(document["parser"]) == {
        "prog",
        "allow_abbrev",
        "underscores",
        "dotted_json",
        "source",
    }
    # SGLang set prog="sglang serve" from 0.5.10; before, argparse shows the script name
    old_sglang = engine == "sglang" and version_key(version) < (0, 5, 10)
    prog = None if old_sglang else {"sglang": "sglang serve", "vllm": "vllm serve"}[engine]
    assert document["parser"]["prog"] == prog
    assert document["env"] == sorted(set(document["env"])) and len(document["env"]) > 100
    assert document["layout"]
    flags = load_catalogue(engine, version).flags
    assert len(flags) > 250
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


def test_sglang_layouts_per_release():
    layouts = {v: _document("sglang", v)["layout"] for v in available_versions("sglang")}
    assert [v for v, layout in layouts.items() if layout == "annotated-fields"] == [
        "0.5.14", "0.5.15.post1", "0.5.16", "0.5.17", "0.5.18", "0.5.19",
    ]  # fmt: skip
    assert layouts["0.5.13.post1"] == "add_argument" and layouts["0.5.20"] == "arg-groups-fields"


def test_sglang_cuda_graph_flags_at_the_edges():
    """``--cuda-graph-max-bs`` is a deprecated alias from 0.5.14 and gone from 0.5.20."""
    assert _first_and_last("sglang", lambda d: "--cuda-graph-max-bs" in d["flags"]) == (
        "0.5.3.post3",
        "0.5.19",
    )
    assert _first_and_last("sglang", lambda d: "--cuda-graph-max-bs-decode" in d["flags"]) == (
        "0.5.14",
        "0.5.23",
    )
    old = load_catalogue("sglang", "0.5.19").flags["--cuda-graph-max-bs"]
    assert old.deprecated and old.replaced_by == "--cuda-graph-max-bs-decode"
    assert not load_catalogue("sglang", "0.5.13.post1").flags["--cuda-graph-max-bs"].deprecated
    # --disable-cuda-graph stays, deprecated, as the only spelling of a no_cli field
    disable = load_catalogue("sglang", "0.5.23").flags["--disable-cuda-graph"]
    assert disable.deprecated and "disabled" in (disable.replaced_by or "")


def test_vllm_moe_backend_flag_since_0_17():
    assert _first_and_last("vllm", lambda d: "--moe-backend" in d["flags"]) == ("0.17.1", "0.33.0")


def test_vllm_attention_backend_environment_variable_is_not_read():
    """VLLM_ATTENTION_BACKEND is in no catalogued release's envs.py (use --attention-backend)."""
    assert _first_and_last("vllm", lambda d: "VLLM_ATTENTION_BACKEND" in d["env"]) == (None, None)


def test_sglang_spec_v2_environment_variable_at_the_edges():
    """Registry field until 0.5.13.post1; read only to refuse it until 0.5.20 (PR #27964)."""
    in_env = _first_and_last("sglang", lambda d: "SGLANG_ENABLE_SPEC_V2" in d["env"])
    assert in_env == ("0.5.4.post3", "0.5.20")  # 0.5.3.post3 does not read it yet
    assert "SGLANG_ENABLE_SPEC_V2" not in _document("sglang", "0.5.21")["env"]


def test_parser_facts_per_engine():
    for version in available_versions("sglang"):
        parser = _document("sglang", version)["parser"]
        assert parser["allow_abbrev"] and not parser["underscores"] and not parser["dotted_json"]
    for version in available_versions("vllm"):
        parser = _document("vllm", version)["parser"]
        assert parser["allow_abbrev"] and parser["underscores"] and parser["dotted_json"]


def test_settings_carry_the_catalogue_of_the_release_they_pin():
    """The one lookup a plan and its checks share: the release the validator chose, its
    nearest catalogued one for a release without a catalogue."""
    from sparkdeploy.config.engine import EngineSettings

    pinned = EngineSettings(name="vllm", image="vllm/vllm-openai:v0.20.0")
    assert (pinned.catalogue.engine, pinned.catalogue.version) == ("vllm", pinned.version)
    assert pinned.catalogue is load_catalogue("vllm", pinned.version)  # cached, not re-read
