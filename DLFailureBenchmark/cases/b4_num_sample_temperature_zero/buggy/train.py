"""A tiny causal transformer language model that logs generated samples while it trains.

Every `sample_every` steps the script writes one sample per temperature in
`sample_temperatures`; the list ends with 0.0, meant as "greedy". `generate` divides the
logits by the temperature, so 0.0 gives inf/nan probabilities and `torch.multinomial` refuses.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint

CONFIG = {"vocab": 24, "block": 24, "dim": 48, "heads": 4, "steps": 120, "batch": 24, "lr": 3e-3,
          "sample_every": 30, "sample_len": 16, "sample_temperatures": [1.0, 0.7, 0.0], "ckpt_every": 30}


def token_stream(seed: int, n: int, vocab: int) -> torch.Tensor:
    """Counting patterns with noise: after token t usually comes t + 1 (mod vocab)."""
    gen = torch.Generator().manual_seed(seed)
    out = [0]
    for _ in range(n - 1):
        jump = int(torch.randint(0, 10, (1,), generator=gen))
        out.append((out[-1] + 1) % vocab if jump < 8 else int(torch.randint(0, vocab, (1,), generator=gen)))
    return torch.tensor(out)


class Block(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def attention(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(c // self.heads)
        causal = torch.ones(t, t, dtype=torch.bool).tril()
        att = att.masked_fill(~causal, float("-inf")).softmax(-1)
        return self.proj((att @ v).transpose(1, 2).reshape(b, t, c))

    def forward(self, x):
        x = x + self.attention(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class TinyLM(nn.Module):
    def __init__(self, vocab: int, block: int, dim: int, heads: int) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(block, dim)
        self.blocks = nn.Sequential(Block(dim, heads), Block(dim, heads))
        self.head = nn.Linear(dim, vocab)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.size(1)))
        return self.head(self.blocks(x))


@torch.no_grad()
def generate(model: TinyLM, prompt: torch.Tensor, length: int, temperature: float, gen: torch.Generator):
    idx = prompt
    for _ in range(length):
        logits = model(idx[:, -CONFIG["block"]:])[:, -1]
        probs = F.softmax(logits / temperature, dim=-1)
        nxt = torch.multinomial(probs, 1, generator=gen)
        idx = torch.cat([idx, nxt], dim=1)
    return idx[0].tolist()


def get_batch(data: torch.Tensor, gen: torch.Generator):
    starts = torch.randint(0, data.numel() - CONFIG["block"] - 1, (CONFIG["batch"],), generator=gen)
    x = torch.stack([data[s:s + CONFIG["block"]] for s in starts])
    y = torch.stack([data[s + 1:s + 1 + CONFIG["block"]] for s in starts])
    return x, y


@torch.no_grad()
def val_loss(model: TinyLM, data: torch.Tensor) -> float:
    gen = torch.Generator().manual_seed(4242)
    losses = []
    for _ in range(8):
        x, y = get_batch(data, gen)
        losses.append(F.cross_entropy(model(x).flatten(0, 1), y.flatten()).item())
    return sum(losses) / len(losses)


@daifu.transform
def train(model, optimizer, train_data, val_data, ckpt_dir, start, stop, seed):
    batch_gen = torch.Generator().manual_seed(seed)
    sample_gen = torch.Generator().manual_seed(seed + 3)
    sample_log = []
    losses = []
    for step in range(start, stop):
        x, y = get_batch(train_data, batch_gen)
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if (step + 1) % CONFIG["sample_every"] == 0:
            model.eval()
            prompt = train_data[:4].unsqueeze(0)
            for temperature in CONFIG["sample_temperatures"]:
                text = generate(model, prompt, CONFIG["sample_len"], temperature, sample_gen)
                sample_log.append({"step": step + 1, "temperature": temperature, "tokens": text})
            model.train()
        if (step + 1) % CONFIG["ckpt_every"] == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    greedy = [s for s in sample_log if s["temperature"] == 0.0]
    pairs = [(a, b) for s in greedy for a, b in zip(s["tokens"][3:], s["tokens"][4:])]  # the generated part
    counting = sum((b - a) % CONFIG["vocab"] == 1 for a, b in pairs) / max(len(pairs), 1)
    return {"steps": len(losses), "val_loss": val_loss(model, val_data), "samples_logged": len(sample_log),
            "greedy_samples": len(greedy), "greedy_counting_rate": counting}


def main(workdir, seed=0, resume=None, until=None):
    torch.manual_seed(seed)
    stream = token_stream(seed, 6000, CONFIG["vocab"])
    model = TinyLM(CONFIG["vocab"], CONFIG["block"], CONFIG["dim"], CONFIG["heads"])
    optimizer = torch.optim.AdamW(model.parameters(), lr=CONFIG["lr"])
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "ckpt"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    return train(model, optimizer, stream[:5000], stream[5000:], ckpt_dir, start,
                 CONFIG["steps"] if until is None else until, seed)
