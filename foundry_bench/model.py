"""A Qwen3-architecture decoder for one decode step, in plain PyTorch, with a static KV cache.

It mirrors transformers' Qwen3 layer by layer (RMSNorm, q/k norms, rotary embeddings, grouped-query
attention, SwiGLU MLP) with seeded random weights: values do not matter for cold start, and a fixed
seed makes outputs comparable across processes. Every persistent tensor is allocated in __init__, in a
fixed order, so a LOAD process that builds the model the same way gets the same addresses.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .shapes import DecoderConfig

__all__ = ["QwenDecoder"]


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return F.rms_norm(x, (x.shape[-1],), weight, eps)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class QwenDecoder(torch.nn.Module):
    """One decode step: ``forward(input_ids[bs], positions[bs]) -> hidden[bs, hidden]`` (final norm
    applied); ``logits(hidden)`` projects to the vocabulary. As in vLLM, the graph covers the model body
    and the logits are computed outside it."""

    cos: torch.Tensor
    sin: torch.Tensor
    k_cache: torch.Tensor
    v_cache: torch.Tensor
    seq_idx: torch.Tensor

    def __init__(self, cfg: DecoderConfig, seed: int = 0, dtype: torch.dtype = torch.bfloat16) -> None:
        super().__init__()
        self.cfg = cfg
        dev = torch.device("cuda")
        gen = torch.Generator(device=dev).manual_seed(seed)

        def w(*shape: int, scale: float = 0.02) -> torch.nn.Parameter:
            t = torch.randn(*shape, generator=gen, device=dev, dtype=torch.float32).mul_(scale).to(dtype)
            return torch.nn.Parameter(t, requires_grad=False)

        def ones(n: int) -> torch.nn.Parameter:
            return torch.nn.Parameter(torch.ones(n, device=dev, dtype=dtype), requires_grad=False)

        h, d = cfg.hidden, cfg.head_dim
        self.embed = w(cfg.vocab, h)
        self.layer_params = torch.nn.ParameterList()
        for _ in range(cfg.layers):
            self.layer_params.extend([
                ones(h), w(cfg.heads * d, h), w(cfg.kv_heads * d, h), w(cfg.kv_heads * d, h), w(h, cfg.heads * d),
                ones(d), ones(d), ones(h), w(cfg.intermediate, h), w(cfg.intermediate, h), w(h, cfg.intermediate),
            ])  # fmt: skip
        self.final_norm = ones(h)
        self.lm_head = w(cfg.vocab, h)
        inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, d, 2, device=dev, dtype=torch.float32) / d))
        freqs = torch.outer(torch.arange(cfg.max_seq, device=dev, dtype=torch.float32), inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos", emb.cos().to(dtype), persistent=False)
        self.register_buffer("sin", emb.sin().to(dtype), persistent=False)
        cache = (cfg.layers, cfg.max_batch, cfg.kv_heads, cfg.max_seq, d)
        self.register_buffer("k_cache", torch.zeros(cache, device=dev, dtype=dtype), persistent=False)
        self.register_buffer("v_cache", torch.zeros(cache, device=dev, dtype=dtype), persistent=False)
        self.register_buffer("seq_idx", torch.arange(cfg.max_seq, device=dev), persistent=False)

    def _layer(self, i: int, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        cfg = self.cfg
        p = self.layer_params[i * 11 : (i + 1) * 11]
        in_norm, wq, wk, wv, wo, q_norm, k_norm, post_norm, w_gate, w_up, w_down = p
        bs = x.shape[0]
        h = _rms_norm(x, in_norm, cfg.eps)
        q = F.linear(h, wq).view(bs, cfg.heads, 1, cfg.head_dim)
        k = F.linear(h, wk).view(bs, cfg.kv_heads, 1, cfg.head_dim)
        v = F.linear(h, wv).view(bs, cfg.kv_heads, 1, cfg.head_dim)
        q, k = _rms_norm(q, q_norm, cfg.eps), _rms_norm(k, k_norm, cfg.eps)
        cos = self.cos[positions].view(bs, 1, 1, cfg.head_dim)
        sin = self.sin[positions].view(bs, 1, 1, cfg.head_dim)
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        index = positions.view(bs, 1, 1, 1).expand(bs, cfg.kv_heads, 1, cfg.head_dim)
        k_cache, v_cache = self.k_cache[i, :bs], self.v_cache[i, :bs]
        k_cache.scatter_(2, index, k)
        v_cache.scatter_(2, index, v)
        mask = self.seq_idx.view(1, 1, 1, -1) <= positions.view(bs, 1, 1, 1)
        attn = F.scaled_dot_product_attention(q, k_cache, v_cache, attn_mask=mask, enable_gqa=True)
        x = x + F.linear(attn.reshape(bs, cfg.heads * cfg.head_dim), wo)
        h = _rms_norm(x, post_norm, cfg.eps)
        x = x + F.linear(F.silu(F.linear(h, w_gate)) * F.linear(h, w_up), w_down)
        return x

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        x = F.embedding(input_ids, self.embed)
        for i in range(self.cfg.layers):
            x = self._layer(i, x, positions)
        return _rms_norm(x, self.final_norm, self.cfg.eps)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return F.linear(hidden, self.lm_head)
