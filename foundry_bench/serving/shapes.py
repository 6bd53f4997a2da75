"""The model shapes the serving benchmarks run: real architectures as weightless model folders (``config.json``
only; vLLM and SGLang fill seeded random weights with ``load_format="dummy"``). Values do not matter for
start-up, and a fixed seed makes every process's tokens comparable."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["MATRIX", "SHAPES", "make_model", "prompt_vocab"]

_QWEN3: dict[str, Any] = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "head_dim": 128,
    "vocab_size": 151936,
    "max_position_embeddings": 40960,
    "rope_theta": 1000000,
    "rope_scaling": None,
    "rms_norm_eps": 1e-06,
    "hidden_act": "silu",
    "attention_bias": False,
    "attention_dropout": 0.0,
    "use_sliding_window": False,
    "sliding_window": None,
    "initializer_range": 0.02,
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "use_cache": True,
    "torch_dtype": "bfloat16",
}

# The published Qwen3 configs' shapes.
SHAPES: dict[str, dict[str, Any]] = {
    "qwen3-0.6b": {
        **_QWEN3,
        "hidden_size": 1024,
        "intermediate_size": 3072,
        "num_hidden_layers": 28,
        "max_window_layers": 28,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "tie_word_embeddings": True,
    },
    "qwen3-8b": {
        **_QWEN3,
        "hidden_size": 4096,
        "intermediate_size": 12288,
        "num_hidden_layers": 36,
        "max_window_layers": 36,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "tie_word_embeddings": False,
    },
}

# Qwen3-235B-A22B (the paper's headline model): its published config, 94 layers of 128 experts, top 8, for eight
# GPUs (attention tensor parallel, experts parallel over the same GPUs; 470 GB of bf16 weights, 59 GB a GPU), and
# its rehearsals on four and two: the same layers, 24 or 12 of them (120 or 60 GB, 30 GB a GPU), everything else
# alike.
# What every Qwen3-MoE shape here shares with the published Qwen3-MoE configs: the router's settings, every
# layer an MoE one.
_QWEN3_MOE = {
    **_QWEN3,
    "architectures": ["Qwen3MoeForCausalLM"],
    "model_type": "qwen3_moe",
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
    "norm_topk_prob": True,
    "router_aux_loss_coef": 0.001,
    "output_router_logits": False,
    "tie_word_embeddings": False,
}
SHAPES["qwen3-235b-a22b"] = {
    **_QWEN3_MOE,
    "hidden_size": 4096,
    "intermediate_size": 12288,
    "moe_intermediate_size": 1536,
    "num_hidden_layers": 94,
    "max_window_layers": 94,
    "num_attention_heads": 64,
    "num_key_value_heads": 4,
    "num_experts": 128,
    "num_experts_per_tok": 8,
}
SHAPES["qwen3-235b-a22b-24l"] = {**SHAPES["qwen3-235b-a22b"], "num_hidden_layers": 24, "max_window_layers": 24}
# and on two GPUs (12 layers, 60 GB: the same 30 GB a GPU as the four-GPU rehearsal), where no four are lent
SHAPES["qwen3-235b-a22b-12l"] = {**SHAPES["qwen3-235b-a22b"], "num_hidden_layers": 12, "max_window_layers": 12}

# The architecture matrix: small shapes of the architectures users serve, each with its features on (a few layers
# and dummy weights keep every run short; what LOAD must reproduce is the architecture's kernels and state, not
# its size). Hidden sizes and head layouts are the published models'.
SHAPES.update(
    {
        "llama-3.2-1b": {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "hidden_size": 2048,
            "intermediate_size": 8192,
            "num_hidden_layers": 16,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "head_dim": 64,
            "vocab_size": 128256,
            "max_position_embeddings": 131072,
            "rope_theta": 500000.0,
            "rope_scaling": {
                "factor": 32.0,
                "high_freq_factor": 4.0,
                "low_freq_factor": 1.0,
                "original_max_position_embeddings": 8192,
                "rope_type": "llama3",
            },
            "rms_norm_eps": 1e-05,
            "hidden_act": "silu",
            "tie_word_embeddings": True,
            "bos_token_id": 128000,
            "eos_token_id": 128001,
            "torch_dtype": "bfloat16",
        },
        # Soft-capped attention and final logits, sliding-window layers alternating with global ones, pre- and
        # post-feed-forward norms: greedy ties are common, so a last-bit difference shows in the tokens.
        "gemma2-small": {
            "architectures": ["Gemma2ForCausalLM"],
            "model_type": "gemma2",
            "hidden_size": 2048,
            "intermediate_size": 8192,
            "num_hidden_layers": 18,
            "num_attention_heads": 8,
            "num_key_value_heads": 4,
            "head_dim": 256,
            "vocab_size": 256000,
            "max_position_embeddings": 8192,
            "rope_theta": 10000.0,
            "rms_norm_eps": 1e-06,
            # Both names, as the published config.json has them: vLLM reads the second, SGLang the first.
            "hidden_act": "gelu_pytorch_tanh",
            "hidden_activation": "gelu_pytorch_tanh",
            "query_pre_attn_scalar": 256,
            "attn_logit_softcapping": 50.0,
            "final_logit_softcapping": 30.0,
            "sliding_window": 1024,
            "tie_word_embeddings": True,
            "bos_token_id": 2,
            "eos_token_id": 1,
            "pad_token_id": 0,
            "torch_dtype": "bfloat16",
        },
        # Sliding-window attention on every layer (Mistral-7B-v0.1's), fewer layers.
        "mistral-small": {
            "architectures": ["MistralForCausalLM"],
            "model_type": "mistral",
            "hidden_size": 4096,
            "intermediate_size": 14336,
            "num_hidden_layers": 8,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "vocab_size": 32000,
            "max_position_embeddings": 32768,
            "rope_theta": 10000.0,
            "sliding_window": 1024,
            "rms_norm_eps": 1e-05,
            "hidden_act": "silu",
            "tie_word_embeddings": False,
            "bos_token_id": 1,
            "eos_token_id": 2,
            "torch_dtype": "bfloat16",
        },
        # Qwen3-MoE (Qwen3-30B-A3B's experts: 128 of them, top 8, at its hidden size), fewer layers and experts.
        "qwen3-moe-small": {
            **_QWEN3_MOE,
            "hidden_size": 2048,
            "intermediate_size": 6144,
            "moe_intermediate_size": 768,
            "num_hidden_layers": 8,
            "max_window_layers": 8,
            "num_attention_heads": 32,
            "num_key_value_heads": 4,
            "num_experts": 64,
            "num_experts_per_tok": 8,
        },
        # Mixtral: 8 experts, top 2 (Mixtral-8x7B's hidden size), fewer layers.
        "mixtral-small": {
            "architectures": ["MixtralForCausalLM"],
            "model_type": "mixtral",
            "hidden_size": 4096,
            "intermediate_size": 14336,
            "num_hidden_layers": 4,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "num_local_experts": 8,
            "num_experts_per_tok": 2,
            "vocab_size": 32000,
            "max_position_embeddings": 32768,
            "rope_theta": 1000000.0,
            "sliding_window": None,
            "rms_norm_eps": 1e-05,
            "hidden_act": "silu",
            "router_aux_loss_coef": 0.02,
            "output_router_logits": False,
            "tie_word_embeddings": False,
            "bos_token_id": 1,
            "eos_token_id": 2,
            "torch_dtype": "bfloat16",
        },
        # Multi-head latent attention and shared plus routed experts (DeepSeek-V2-Lite's), fewer layers.
        "deepseek-v2-lite-small": {
            "architectures": ["DeepseekV2ForCausalLM"],
            "model_type": "deepseek_v2",
            "hidden_size": 2048,
            "intermediate_size": 10944,
            "moe_intermediate_size": 1408,
            "num_hidden_layers": 4,
            "first_k_dense_replace": 1,
            "num_attention_heads": 16,
            "num_key_value_heads": 16,
            "kv_lora_rank": 512,
            "q_lora_rank": None,
            "qk_nope_head_dim": 128,
            "qk_rope_head_dim": 64,
            "v_head_dim": 128,
            "n_routed_experts": 64,
            "n_shared_experts": 2,
            "num_experts_per_tok": 6,
            "moe_layer_freq": 1,
            "routed_scaling_factor": 1.0,
            "topk_method": "greedy",
            "n_group": 1,
            "topk_group": 1,
            "scoring_func": "softmax",
            "norm_topk_prob": False,
            "vocab_size": 102400,
            "max_position_embeddings": 163840,
            "rope_theta": 10000,
            "rope_scaling": {
                "beta_fast": 32,
                "beta_slow": 1,
                "factor": 40,
                "mscale": 0.707,
                "mscale_all_dim": 0.707,
                "original_max_position_embeddings": 4096,
                "type": "yarn",
            },
            "rms_norm_eps": 1e-06,
            "hidden_act": "silu",
            "tie_word_embeddings": False,
            "bos_token_id": 100000,
            "eos_token_id": 100001,
            "torch_dtype": "bfloat16",
        },
    }
)

# The matrix's rows, in the order they run: dense first, then sliding windows, then experts, then MLA.
MATRIX = (
    "llama-3.2-1b",
    "qwen3-0.6b",
    "gemma2-small",
    "mistral-small",
    "qwen3-moe-small",
    "mixtral-small",
    "deepseek-v2-lite-small",
)

# Token IDs the workload draws from: below every shape's vocabulary (and below 150,000, which the Qwen3 runs
# have always used, so that their prompts stay what they were).
PROMPT_VOCAB_CAP = 150000


def prompt_vocab(shape: str) -> int:
    """The exclusive upper bound of the prompt token IDs for ``shape``."""
    return min(int(SHAPES[shape]["vocab_size"]), PROMPT_VOCAB_CAP)


def make_model(folder: Path, shape: str) -> Path:
    """A weightless model folder of ``shape`` (one of SHAPES) at ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(SHAPES[shape], indent=1) + "\n")
    return folder
