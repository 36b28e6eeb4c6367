#!/usr/bin/env python3
"""Writes the Spark twins' model repos for the stand-in Hub (fake_hub.py) under a root folder.

    python3 seed.py ROOT

Deterministic stand-ins with the file layout of the real repos, tiny (a few KB each) but for
BIG; running it twice gives byte-identical repos, so commit shas are stable. Standard library
only; seeding takes well under a second.

- NVFP4: the quantised release. Two shards and their index, tokenizer_config.json,
  generation_config.json and README.md, but deliberately no config.json and no tokenizer.json:
  this release omits them, and the deploy repairs them from BASE.
- BASE: config.json, tokenizer.json, tokenizer_config.json, one shard and its index.
- EAGLE: the speculative-decoding draft head: config.json and model.safetensors.
- GATED: a gated repo that only GATED_TOKEN may read.
- BIG: a complete model (config.json, tokenizer.json, tokenizer_config.json, two shards and
  their index) whose shards hold about BIG_BYTES of incompressible tensor data: big enough that
  a throttled Hub (fake_hub.py --rate-file) is still sending a shard when a test interrupts the
  download.
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
import struct
import sys
from pathlib import Path
from typing import Any

NVFP4 = "mistralai/Mistral-Small-4-119B-2603-NVFP4"
BASE = "mistralai/Mistral-Small-4-119B-2603"
EAGLE = "mistralai/Mistral-Small-4-119B-2603-eagle"
GATED = "acme/gated-model"
GATED_TOKEN = "hf_twinGatedToken0123456789"
BIG = "spark-twin/big-model"
BIG_BYTES = 24 * 2**20  # tensor data of BIG's two shards together, about half in each
BIG_HIDDEN = 256

HIDDEN, LAYERS, VOCAB = 32, 2, 32
DTYPE_BYTES = {"BF16": 2, "F32": 4, "U8": 1, "F8_E4M3": 1}
# The Hub's default .gitattributes (abridged); Mistral's repos add tokenizer.json to it.
GITATTRIBUTES = [
    "*.bin",
    "*.gguf",
    "*.h5",
    "*.msgpack",
    "*.onnx",
    "*.ot",
    "*.pt",
    "*.pth",
    "*.safetensors",
    "*.tar.*",
    "*.zip",
    "saved_model/**/*",
    "*tfevents*",
]
SPECIAL_TOKENS = ["<unk>", "<s>", "</s>", "[INST]", "[/INST]"]

Tensors = dict[str, tuple[str, list[int]]]  # name -> (dtype, shape)


def gitattributes(*extra: str) -> str:
    return "".join(
        f"{pattern} filter=lfs diff=lfs merge=lfs -text\n" for pattern in [*GITATTRIBUTES, *extra]
    )


def as_json(data: Any) -> str:
    return json.dumps(data, indent=2) + "\n"


def noise(label: str, size: int) -> bytes:
    """`size` deterministic, incompressible bytes, different for every label (SHAKE-256)."""
    return hashlib.shake_256(label.encode()).digest(size)


def safetensors(label: str, tensors: Tensors) -> bytes:
    """A valid safetensors file: u64 little-endian header length, JSON header, tensor bytes."""
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, (dtype, shape) in tensors.items():
        size = nbytes(dtype, shape)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)  # the format pads the header to 8 bytes
    return struct.pack("<Q", len(encoded)) + encoded + noise(label, offset)


def nbytes(dtype: str, shape: list[int]) -> int:
    return DTYPE_BYTES[dtype] * math.prod(shape)


def tensor_bytes(tensors: Tensors) -> int:
    return sum(nbytes(dtype, shape) for dtype, shape in tensors.values())


def sharded(label: str, shards: list[Tensors]) -> dict[str, str | bytes]:
    """Shard files named as transformers names them, and their model.safetensors.index.json."""
    names = [f"model-{i:05d}-of-{len(shards):05d}.safetensors" for i in range(1, len(shards) + 1)]
    files: dict[str, str | bytes] = {
        name: safetensors(f"{label}/{name}", t) for name, t in zip(names, shards)
    }
    files["model.safetensors.index.json"] = as_json(
        {
            "metadata": {"total_size": sum(tensor_bytes(t) for t in shards)},
            "weight_map": {tensor: name for name, t in zip(names, shards) for tensor in t},
        }
    )
    return files


def layer(i: int, quantised: bool, hidden: int = HIDDEN) -> Tensors:
    """One decoder layer's tensors; NVFP4 packs two 4-bit weights a byte, with FP8 block scales."""
    tensors: Tensors = {}
    for proj in ("self_attn.q_proj", "self_attn.o_proj", "mlp.down_proj"):
        name = f"model.layers.{i}.{proj}"
        if quantised:
            tensors[f"{name}.weight"] = ("U8", [hidden, hidden // 2])
            tensors[f"{name}.weight_scale"] = ("F8_E4M3", [hidden, hidden // 16])
            tensors[f"{name}.weight_scale_2"] = ("F32", [])
        else:
            tensors[f"{name}.weight"] = ("BF16", [hidden, hidden])
    tensors[f"model.layers.{i}.input_layernorm.weight"] = ("BF16", [hidden])
    return tensors


def big_shards() -> list[Tensors]:
    """BIG's two shards: the embeddings and its one layer, then the output head and final norm.

    The vocabulary is what makes the embeddings and the head together about BIG_BYTES.
    """
    vocab = big_vocab()
    return [
        {"model.embed_tokens.weight": ("BF16", [vocab, BIG_HIDDEN]), **layer(0, False, BIG_HIDDEN)},
        {
            "lm_head.weight": ("BF16", [vocab, BIG_HIDDEN]),
            "model.norm.weight": ("BF16", [BIG_HIDDEN]),
        },
    ]


def big_vocab() -> int:
    """Rows of BIG's embeddings and head (BF16, BIG_HIDDEN wide) for BIG_BYTES of tensors."""
    rest = tensor_bytes(layer(0, False, BIG_HIDDEN)) + nbytes("BF16", [BIG_HIDDEN])
    return max((BIG_BYTES - rest) // (2 * nbytes("BF16", [BIG_HIDDEN])), len(SPECIAL_TOKENS))


def embeddings() -> Tensors:
    return {
        "model.embed_tokens.weight": ("BF16", [VOCAB, HIDDEN]),
        "model.norm.weight": ("BF16", [HIDDEN]),
    }


def model_config(**extra: Any) -> str:
    return as_json(
        {
            "architectures": ["MistralForCausalLM"],
            "model_type": "mistral",
            "hidden_size": HIDDEN,
            "intermediate_size": 2 * HIDDEN,
            "num_hidden_layers": LAYERS,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "vocab_size": VOCAB,
            "max_position_embeddings": 4096,
            "rope_theta": 1000000.0,
            "bos_token_id": 1,
            "eos_token_id": 2,
            "torch_dtype": "bfloat16",
            **extra,
        }
    )


def tokenizer() -> str:
    """A tokenizers-format tokenizer.json: a word-level vocabulary of VOCAB entries."""
    words = SPECIAL_TOKENS + [f"tok{i}" for i in range(VOCAB - len(SPECIAL_TOKENS))]
    return as_json(
        {
            "version": "1.0",
            "truncation": None,
            "padding": None,
            "added_tokens": [
                {
                    "id": i,
                    "content": t,
                    "single_word": False,
                    "lstrip": False,
                    "rstrip": False,
                    "normalized": False,
                    "special": True,
                }
                for i, t in enumerate(SPECIAL_TOKENS)
            ],
            "normalizer": None,
            "pre_tokenizer": {"type": "Whitespace"},
            "post_processor": None,
            "decoder": None,
            "model": {
                "type": "WordLevel",
                "vocab": {w: i for i, w in enumerate(words)},
                "unk_token": "<unk>",
            },
        }
    )


def tokenizer_config() -> str:
    return as_json(
        {
            "bos_token": "<s>",
            "eos_token": "</s>",
            "unk_token": "<unk>",
            "model_max_length": 4096,
            "tokenizer_class": "PreTrainedTokenizerFast",
            "clean_up_tokenization_spaces": False,
        }
    )


def readme(repo_id: str, base_model: str | None) -> str:
    front = [f"base_model: {base_model}"] if base_model else []
    return "\n".join(
        [
            "---",
            "license: apache-2.0",
            "library_name: transformers",
            *front,
            "---",
            "",
            f"# {repo_id.split('/')[1]}",
            "",
            "Spark twin fixture: a deterministic stand-in with this repo's file layout, not real weights.",
            "",
        ]
    )


def repos() -> dict[str, dict[str, str | bytes]]:
    """Every twin repo: repo id -> {path: content}."""
    return {
        NVFP4: {
            ".gitattributes": gitattributes("tokenizer.json"),
            **sharded(NVFP4, [{**embeddings(), **layer(0, True)}, layer(1, True)]),
            "tokenizer_config.json": tokenizer_config(),
            "generation_config.json": as_json(
                {"bos_token_id": 1, "eos_token_id": 2, "max_length": 4096}
            ),
            "README.md": readme(NVFP4, BASE),
        },
        BASE: {
            ".gitattributes": gitattributes("tokenizer.json"),
            "config.json": model_config(),
            "tokenizer.json": tokenizer(),
            "tokenizer_config.json": tokenizer_config(),
            **sharded(BASE, [{**embeddings(), **layer(0, False), **layer(1, False)}]),
            "README.md": readme(BASE, None),
        },
        EAGLE: {
            ".gitattributes": gitattributes(),
            "config.json": model_config(
                architectures=["EagleMistralForCausalLM"], num_hidden_layers=1
            ),
            "model.safetensors": safetensors(
                EAGLE, {"fc.weight": ("BF16", [HIDDEN, 2 * HIDDEN]), **layer(0, False)}
            ),
            "README.md": readme(EAGLE, BASE),
        },
        GATED: {
            ".gitattributes": gitattributes(),
            ".gated": GATED_TOKEN + "\n",
            "config.json": model_config(),
            "tokenizer.json": tokenizer(),
            "model.safetensors": safetensors(GATED, {**embeddings(), **layer(0, False)}),
        },
        BIG: {
            ".gitattributes": gitattributes(),
            "config.json": model_config(
                hidden_size=BIG_HIDDEN,
                intermediate_size=2 * BIG_HIDDEN,
                num_hidden_layers=1,
                vocab_size=big_vocab(),
                tie_word_embeddings=False,
            ),
            "tokenizer.json": tokenizer(),
            "tokenizer_config.json": tokenizer_config(),
            **sharded(BIG, big_shards()),
            "README.md": readme(BIG, None),
        },
    }


def seed(root: Path) -> dict[str, list[str]]:
    """Writes every twin repo under `root` afresh; returns repo id -> its file paths."""
    written = {}
    for repo_id, files in repos().items():
        folder = root / repo_id
        shutil.rmtree(folder, ignore_errors=True)
        for path, content in files.items():
            target = folder / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content.encode() if isinstance(content, str) else content)
        written[repo_id] = sorted(files)
    return written


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: seed.py ROOT", file=sys.stderr)
        return 2
    for repo_id, paths in seed(Path(argv[0])).items():
        print(f"{repo_id}: {', '.join(paths)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
