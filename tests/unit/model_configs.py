"""
config.json samples shaped as the public files are, trimmed to the fields the model class
reads (and a few neighbours). Where each comes from:

- QWEN3_DENSE: huggingface.co/Qwen/Qwen3-8B/blob/main/config.json
- QWEN3_MOE: huggingface.co/Qwen/Qwen3-30B-A3B/blob/main/config.json
- DEEPSEEK_V3: huggingface.co/deepseek-ai/DeepSeek-V3/blob/main/config.json
- GPT_OSS: huggingface.co/openai/gpt-oss-20b/blob/main/config.json
- MISTRAL_SMALL_4: huggingface.co/mistralai/Mistral-Small-4-119B-2603/blob/main/config.json,
  a mistral3 multimodal wrapper around a mistral4 text model; the text fields (36 layers, 32
  heads, kv_lora_rank 256, qk dims 64/64, v_head_dim 128, 128 routed experts) as third-party
  loaders quote them (public test fixtures of MLX ports and a params.json converter, found
  with the code search), since the Hub itself was not reachable from here.
- NVFP4_MODELOPT: the quantization_config NVIDIA ModelOpt writes into its NVFP4 exports
  (quant_method modelopt, quant_algo NVFP4).
- MINIMAX_M2_FP8: huggingface.co/MiniMaxAI/MiniMax-M2.5/blob/main/config.json, trimmed to the
  architecture and its block-scaled FP8 quantization_config: 62 layers, 256 experts (8 per
  token), float8_e4m3fn weights with 128x128 block scales, as third-party ports of M2.5
  (Tenstorrent's config helpers, MiniMax-M2 FP8 checkpoint analyses, found with the code
  search) describe it, since the Hub itself was not reachable from here.
"""

QWEN3_DENSE = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "hidden_size": 4096,
    "intermediate_size": 12288,
    "num_attention_heads": 32,
    "num_hidden_layers": 36,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "max_position_embeddings": 40960,
    "torch_dtype": "bfloat16",
    "vocab_size": 151936,
}

QWEN3_MOE = {
    "architectures": ["Qwen3MoeForCausalLM"],
    "model_type": "qwen3_moe",
    "hidden_size": 2048,
    "num_attention_heads": 32,
    "num_hidden_layers": 48,
    "num_key_value_heads": 4,
    "head_dim": 128,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "moe_intermediate_size": 768,
    "decoder_sparse_step": 1,
    "torch_dtype": "bfloat16",
}

DEEPSEEK_V3 = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "model_type": "deepseek_v3",
    "hidden_size": 7168,
    "num_hidden_layers": 61,
    "num_attention_heads": 128,
    "kv_lora_rank": 512,
    "q_lora_rank": 1536,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "n_routed_experts": 256,
    "n_shared_experts": 1,
    "num_experts_per_tok": 8,
    "quantization_config": {
        "activation_scheme": "dynamic",
        "fmt": "e4m3",
        "quant_method": "fp8",
        "weight_block_size": [128, 128],
    },
}

GPT_OSS = {
    "architectures": ["GptOssForCausalLM"],
    "model_type": "gpt_oss",
    "hidden_size": 2880,
    "num_hidden_layers": 24,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "num_local_experts": 32,
    "experts_per_token": 4,
    "quantization_config": {
        "modules_to_not_convert": [
            "model.layers.*.self_attn",
            "model.layers.*.mlp.router",
            "model.embed_tokens",
            "lm_head",
        ],
        "quant_method": "mxfp4",
    },
}

MISTRAL_SMALL_4 = {
    "architectures": ["Mistral3ForConditionalGeneration"],
    "model_type": "mistral3",
    "text_config": {
        "model_type": "mistral4",
        "num_hidden_layers": 36,
        "num_attention_heads": 32,
        "num_key_value_heads": 32,
        "head_dim": 128,
        "kv_lora_rank": 256,
        "qk_nope_head_dim": 64,
        "qk_rope_head_dim": 64,
        "v_head_dim": 128,
        "n_routed_experts": 128,
    },
    "vision_config": {"model_type": "pixtral"},
}

NVFP4_MODELOPT = {
    "architectures": ["Qwen3MoeForCausalLM"],
    "model_type": "qwen3_moe",
    "num_experts": 128,
    "quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4"},
}

MINIMAX_M2_FP8 = {
    "architectures": ["MiniMaxM2ForCausalLM"],
    "model_type": "minimax_m2",
    "num_hidden_layers": 62,
    "num_local_experts": 256,
    "num_experts_per_tok": 8,
    "quantization_config": {
        "activation_scheme": "dynamic",
        "fmt": "float8_e4m3fn",
        "quant_method": "fp8",
        "weight_block_size": [128, 128],
    },
}
