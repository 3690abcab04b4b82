"""A single-device Llama-3-style decoder (RMSNorm, RoPE, GQA via SDPA, SwiGLU).

Readable in one sitting and free of distributed code (torchtitan / gpt-fast
habit): tensor parallelism is applied by ``parallel.py`` and the Domino schedule
by ``schedule.py``. The forward is split into the pieces a TP schedule needs:
each sub-layer is ``x + core(norm(x))`` where ``core`` starts with a
column-parallelisable projection (``wqkv`` / ``w13``) and ends with a
row-parallelisable one (``wo`` / ``w2``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from domino_prof.reference_model.config import ModelConfig


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # one fused op (accumulates in fp32 for bf16 inputs); fewer host launches matter:
        # a TP layer split into micro-batches is easily host-bound
        return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)


def rope_tables(head_dim: int, seq: int, theta: float, device=None) -> torch.Tensor:
    """Rotations e^{i·t·θ_k} as complex64 [S, head_dim/2] (Llama reference layout)."""
    inv = 1.0 / theta ** (torch.arange(0, head_dim, 2, device=device).float() / head_dim)
    t = torch.arange(seq, device=device).float()
    return torch.polar(torch.ones(seq, head_dim // 2, device=device), torch.outer(t, inv))


def apply_rope(x: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
    # x: [B, S, H, D]; interleaved pairs (x0, x1) as complex x0 + i·x1, rotated by freqs
    xc = torch.view_as_complex(x.float().unflatten(-1, (-1, 2)))  # [B, S, H, D/2]
    out = torch.view_as_real(xc * freqs[None, :, None, :]).flatten(-2)  # [B, S, H, D]
    return out.type_as(x)


class Attention(nn.Module):
    """GQA attention. ``n_heads`` / ``n_kv_heads`` are the heads *this module computes*
    (all of them on one device; a TP shard's share after ``parallel.shard_model``)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.head_dim = cfg.head_dim
        self.n_heads = cfg.n_heads
        self.n_kv_heads = cfg.n_kv_heads
        self.wqkv = nn.Linear(
            cfg.dim, (cfg.n_heads + 2 * cfg.n_kv_heads) * cfg.head_dim, bias=False
        )
        self.wo = nn.Linear(cfg.n_heads * cfg.head_dim, cfg.dim, bias=False)

    def forward(self, x: torch.Tensor, rope: torch.Tensor) -> torch.Tensor:
        # x: [B, S, dim] (already normalised)
        B, S, _ = x.shape
        hd = self.head_dim
        qkv = self.wqkv(x)  # [B, S, (H + 2 Hkv) * D]
        q, k, v = qkv.split([self.n_heads * hd, self.n_kv_heads * hd, self.n_kv_heads * hd], -1)
        q = apply_rope(q.view(B, S, self.n_heads, hd), rope)  # [B, S, H, D]
        k = apply_rope(k.view(B, S, self.n_kv_heads, hd), rope)  # [B, S, Hkv, D]
        v = v.view(B, S, self.n_kv_heads, hd)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # [B, H(kv), S, D]
        # GQA without materialising repeated k/v
        o = F.scaled_dot_product_attention(
            q, k, v, is_causal=True, enable_gqa=self.n_kv_heads != self.n_heads
        )
        o = o.transpose(1, 2).reshape(B, S, self.n_heads * hd)
        return self.wo(o)  # [B, S, dim]


class FeedForward(nn.Module):
    """SwiGLU: w2(silu(x w1) * (x w3)), with w1 and w3 fused as ``w13`` = [w1; w3]."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.ffn_dim = cfg.ffn_dim  # this module's share (all of it on one device)
        self.w13 = nn.Linear(cfg.dim, 2 * cfg.ffn_dim, bias=False)
        self.w2 = nn.Linear(cfg.ffn_dim, cfg.dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.w13(x).split([self.ffn_dim, self.ffn_dim], -1)  # [B, S, F] each
        return self.w2(F.silu(gate) * up)


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.attention_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.attention = Attention(cfg)
        self.ffn_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.feed_forward = FeedForward(cfg)

    def forward(self, x: torch.Tensor, rope) -> torch.Tensor:
        h = x + self.attention(self.attention_norm(x), rope)
        return h + self.feed_forward(self.ffn_norm(h))


class Transformer(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.tok_embeddings = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.output = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        # tokens: [B, S] -> logits [B, S, V]
        S = tokens.shape[1]
        rope = rope_tables(self.cfg.head_dim, S, self.cfg.rope_theta, tokens.device)
        h = self.tok_embeddings(tokens)
        for layer in self.layers:
            h = layer(h, rope)
        return self.output(self.norm(h))

    def loss(self, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        logits = self.forward(tokens)
        return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())
