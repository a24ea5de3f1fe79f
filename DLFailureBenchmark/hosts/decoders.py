"""The larger language models, scaled to a CPU: a GPT-2-style and a LLaMA-style decoder on bytes.

`GPT2`: learned positions, pre-LayerNorm blocks, GELU MLP, tied input and output embeddings.
`Llama`: RMSNorm, rotary position embeddings, SwiGLU feed-forward, no biases, untied head.
The text is the word corpus of `lm`, as bytes; step `n`'s batch is drawn from `(seed, n)`.
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

from DLFailureBenchmark.hosts import lm
from DLFailureBenchmark.hosts.common import tail_mean

VOCAB = 256


def corpus() -> torch.Tensor:
    """The training text as byte ids (written once per process)."""
    with tempfile.TemporaryDirectory() as folder:
        text = (lm.write_corpus(Path(folder), train_words=40_000, valid_words=10) / "wiki.train.tokens").read_bytes()
    return torch.frombuffer(bytearray(text), dtype=torch.uint8).long()


def batch(data: torch.Tensor, seed: int, step: int, size: int, context: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed * 100_043 + step)
    starts = torch.randint(0, len(data) - context - 1, (size,), generator=g)
    x = torch.stack([data[s : s + context] for s in starts.tolist()])
    y = torch.stack([data[s + 1 : s + 1 + context] for s in starts.tolist()])
    return x, y


class CausalSelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int, bias: bool = True, rotary: bool = False) -> None:
        super().__init__()
        self.heads, self.rotary = heads, rotary
        self.qkv = nn.Linear(dim, 3 * dim, bias=bias)
        self.proj = nn.Linear(dim, dim, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        if self.rotary:
            q, k = rope(q), rope(k)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, c))


def rope(x: torch.Tensor, base: float = 10_000.0) -> torch.Tensor:
    """Rotary position embedding over the last dimension of (batch, heads, time, head_dim)."""
    t, d = x.shape[-2], x.shape[-1]
    freqs = base ** (-torch.arange(0, d, 2, dtype=torch.float32) / d)
    angles = torch.arange(t, dtype=torch.float32)[:, None] * freqs[None, :]
    cos, sin = angles.cos(), angles.sin()
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).flatten(-2)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps, self.weight = eps, nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)


class GPT2Block(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = CausalSelfAttention(dim, heads)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(approximate="tanh"), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT2(nn.Module):
    def __init__(self, dim: int = 64, depth: int = 3, heads: int = 4, context: int = 128) -> None:
        super().__init__()
        self.wte, self.wpe = nn.Embedding(VOCAB, dim), nn.Embedding(context, dim)
        self.blocks = nn.ModuleList(GPT2Block(dim, heads) for _ in range(depth))
        self.ln_f = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, VOCAB, bias=False)
        self.head.weight = self.wte.weight  # tied, as in GPT-2

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


class SwiGLU(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.gate, self.up = nn.Linear(dim, hidden, bias=False), nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.silu(self.gate(x)) * self.up(x))


class LlamaBlock(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.norm1, self.norm2 = RMSNorm(dim), RMSNorm(dim)
        self.attn = CausalSelfAttention(dim, heads, bias=False, rotary=True)
        self.mlp = SwiGLU(dim, int(8 * dim / 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class Llama(nn.Module):
    def __init__(self, dim: int = 64, depth: int = 3, heads: int = 4) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, dim)
        self.blocks = nn.ModuleList(LlamaBlock(dim, heads) for _ in range(depth))
        self.norm = RMSNorm(dim)
        self.head = nn.Linear(dim, VOCAB, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.embed(idx)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def build(seed: int, model: nn.Module, lr: float = 3e-3) -> tuple[nn.Module, torch.optim.Optimizer]:
    return model, torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.1)


@torch.no_grad()
def metrics(model: nn.Module, data: torch.Tensor, seed: int, losses: list[float], steps: int) -> dict[str, float]:
    x, y = batch(data, seed + 7, -1, 16, 64)
    model.eval()
    loss = float(F.cross_entropy(model(x).reshape(-1, VOCAB), y.reshape(-1)))
    model.train()
    return {"steps": steps, "final_loss": tail_mean(losses), "eval_loss": loss,
            "eval_bits_per_byte": loss / math.log(2)}
