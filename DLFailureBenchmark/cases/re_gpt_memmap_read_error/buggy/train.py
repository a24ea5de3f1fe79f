"""Realistic set, non-deterministic runtime error: a small GPT whose memory-mapped training data fails one read.

A complete character-level GPT training script: a preparation step that writes the token ids of
a generated corpus to `train.bin` and `val.bin` (uint16) in its data folder, batches read from
them through `np.memmap` (mapped again for every batch, so that pages do not pile up), a decoder
of pre-norm transformer blocks with tied embeddings, AdamW with weight decay on the matrices
only, a learning rate warmed up linearly then decayed on a cosine, gradient clipping, periodic
loss estimates on both splits, a checkpoint (`ckpt.pt`) whenever the validation loss improves,
and a sample of generated text at the end.

What goes wrong is the environment: the data folder is on a network file system, and at
iteration 80 the mapping of `train.bin` fails with EIO ("Input/output error"). Read again, the
file is there.
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

import daifu
from DLFailureBenchmark import faults
from DLFailureBenchmark.hosts import stories

STEP_NAME = "iteration"
CHECKPOINT_NAME = "ckpt.pt"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Train a small character-level GPT.")
    parser.add_argument("--out-dir", default="runs/char_gpt")
    parser.add_argument("--sentences", type=int, default=3000, help="size of the generated corpus")
    parser.add_argument("--n-layer", type=int, default=2)
    parser.add_argument("--n-head", type=int, default=4)
    parser.add_argument("--n-embd", type=int, default=64)
    parser.add_argument("--block-size", type=int, default=64, help="context length in characters")
    parser.add_argument("--dropout", type=float, default=0.0)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--max-iters", type=int, default=150)
    parser.add_argument("--eval-interval", type=int, default=50)
    parser.add_argument("--eval-iters", type=int, default=8, help="batches per loss estimate")
    parser.add_argument("--learning-rate", type=float, default=2e-3)
    parser.add_argument("--min-lr", type=float, default=2e-4)
    parser.add_argument("--warmup-iters", type=int, default=15)
    parser.add_argument("--weight-decay", type=float, default=0.1)
    parser.add_argument("--beta2", type=float, default=0.99)
    parser.add_argument("--grad-clip", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=1337)
    parser.add_argument("--resume", default=None)
    parser.add_argument("--until", type=int, default=None, help="stop at this iteration")
    return parser.parse_args(argv)


# -- data --------------------------------------------------------------------------------------------


def prepare(data_dir: Path, sentences: int, seed: int) -> dict:
    """Write the corpus's character ids to `train.bin` (90%) and `val.bin`, and the vocabulary to `meta.json`."""
    data_dir.mkdir(parents=True, exist_ok=True)
    text = "\n".join(stories.text(sentences, seed)) + "\n"
    chars = sorted(set(text))
    ids = np.array([chars.index(c) for c in text], dtype=np.uint16)
    cut = int(0.9 * len(ids))
    for name, part in (("train", ids[:cut]), ("val", ids[cut:])):
        out = np.memmap(data_dir / f"{name}.bin", dtype=np.uint16, mode="w+", shape=part.shape)
        out[:] = part
        out.flush()
        del out
    meta = {"vocab_size": len(chars), "chars": chars}
    (data_dir / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
    return meta


def get_batch(data_dir: Path, split: str, batch_size: int, block_size: int,
              generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """`batch_size` windows of `block_size` ids from `split`, and the same windows one character on."""
    data = np.memmap(data_dir / f"{split}.bin", dtype=np.uint16, mode="r")
    starts = torch.randint(len(data) - block_size, (batch_size,), generator=generator).tolist()
    x = torch.stack([torch.from_numpy(data[i : i + block_size].astype(np.int64)) for i in starts])
    y = torch.stack([torch.from_numpy(data[i + 1 : i + 1 + block_size].astype(np.int64)) for i in starts])
    return x, y


# -- model -------------------------------------------------------------------------------------------


@dataclass
class GPTConfig:
    vocab_size: int
    block_size: int
    n_layer: int
    n_head: int
    n_embd: int
    dropout: float


class SelfAttention(nn.Module):
    """Multi-head attention of each position over itself and the positions before it."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.heads, self.dropout = config.n_head, config.dropout
        self.qkv = nn.Linear(config.n_embd, 3 * config.n_embd)
        self.out = nn.Linear(config.n_embd, config.n_embd)
        self.drop = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, time, width = x.shape
        q, k, v = (t.reshape(batch, time, self.heads, width // self.heads).transpose(1, 2)
                   for t in self.qkv(x).split(width, dim=2))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                           dropout_p=self.dropout if self.training else 0.0)
        return self.drop(self.out(y.transpose(1, 2).reshape(batch, time, width)))


class Block(nn.Module):
    """Pre-norm residual block: attention, then a 4x-wide GELU feed-forward layer."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(config.n_embd)
        self.attention = SelfAttention(config)
        self.norm2 = nn.LayerNorm(config.n_embd)
        self.feed_forward = nn.Sequential(nn.Linear(config.n_embd, 4 * config.n_embd), nn.GELU(),
                                          nn.Linear(4 * config.n_embd, config.n_embd), nn.Dropout(config.dropout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.norm1(x))
        return x + self.feed_forward(self.norm2(x))


class CharGPT(nn.Module):
    """Token and position embeddings, `n_layer` blocks, a final norm, and a head sharing the token embedding."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = config
        self.tokens = nn.Embedding(config.vocab_size, config.n_embd)
        self.positions = nn.Embedding(config.block_size, config.n_embd)
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.norm = nn.LayerNorm(config.n_embd)
        self.head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.head.weight = self.tokens.weight
        self.apply(self._init)
        for name, parameter in self.named_parameters():  # residual projections: smaller, by depth
            if name.endswith("attention.out.weight") or name.endswith("feed_forward.2.weight"):
                nn.init.normal_(parameter, 0.0, 0.02 / math.sqrt(2 * config.n_layer))

    @staticmethod
    def _init(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, 0.0, 0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        positions = torch.arange(idx.shape[1], device=idx.device)
        x = self.drop(self.tokens(idx) + self.positions(positions))
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.norm(x))
        if targets is None:
            return logits, None
        return logits, F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))

    def optimizer(self, lr: float, weight_decay: float, betas: tuple[float, float]) -> torch.optim.AdamW:
        """AdamW decaying the matrices (weights of linear layers, embeddings) and not the biases and norms."""
        matrices = [p for p in self.parameters() if p.dim() >= 2]
        others = [p for p in self.parameters() if p.dim() < 2]
        groups = [{"params": matrices, "weight_decay": weight_decay}, {"params": others, "weight_decay": 0.0}]
        return torch.optim.AdamW(groups, lr=lr, betas=betas)

    @torch.no_grad()
    def generate(self, idx: torch.Tensor, length: int, generator: torch.Generator, temperature: float = 0.8):
        for _ in range(length):
            logits, _ = self(idx[:, -self.config.block_size :])
            probs = F.softmax(logits[:, -1, :] / temperature, dim=-1)
            idx = torch.cat([idx, torch.multinomial(probs, 1, generator=generator)], dim=1)
        return idx


# -- training ----------------------------------------------------------------------------------------


def learning_rate(iteration: int, args: argparse.Namespace) -> float:
    """Linear warm-up to `learning_rate`, then a cosine down to `min_lr` at `max_iters`."""
    if iteration < args.warmup_iters:
        return args.learning_rate * (iteration + 1) / args.warmup_iters
    progress = min(1.0, (iteration - args.warmup_iters) / max(1, args.max_iters - args.warmup_iters))
    return args.min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (args.learning_rate - args.min_lr)


@torch.no_grad()
def estimate_loss(model: CharGPT, args: argparse.Namespace, data_dir: Path) -> dict[str, float]:
    """The mean loss of `eval_iters` batches of each split (the same batches at every estimate)."""
    model.eval()
    losses = {}
    for split in ("train", "val"):
        generator = torch.Generator().manual_seed(args.seed + (1 if split == "train" else 2))
        total = 0.0
        for _ in range(args.eval_iters):
            x, y = get_batch(data_dir, split, args.batch_size, args.block_size, generator)
            total += model(x, y)[1].item()
        losses[split] = total / args.eval_iters
    model.train()
    return losses


def save_checkpoint(path: Path, model: CharGPT, optimizer: torch.optim.Optimizer, iteration: int,
                    best_val_loss: float) -> None:
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "iteration": iteration,
                "best_val_loss": best_val_loss, "config": asdict(model.config)}, path)


@daifu.transform
def train(model, optimizer, args, data_dir, out_dir, start, best_val_loss):
    stop = args.max_iters if args.until is None else args.until
    log = []
    for iteration in range(start, stop):
        lr = learning_rate(iteration, args)
        for group in optimizer.param_groups:
            group["lr"] = lr
        if iteration % args.eval_interval == 0:
            losses = estimate_loss(model, args, data_dir)
            log.append({"iteration": iteration, **losses, "lr": lr})
            if iteration > start and losses["val"] < best_val_loss:
                best_val_loss = losses["val"]
                save_checkpoint(out_dir / CHECKPOINT_NAME, model, optimizer, iteration, best_val_loss)
        batch_source = torch.Generator().manual_seed(args.seed * 100_003 + iteration)
        x, y = get_batch(data_dir, "train", args.batch_size, args.block_size, batch_source)
        _, loss = model(x, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if args.grad_clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
        optimizer.step()
    if args.until is not None:
        return {"steps": stop - start}
    final = estimate_loss(model, args, data_dir)
    return {"steps": stop - start, "train_loss": final["train"], "val_loss": final["val"],
            "best_val_loss": min(best_val_loss, final["val"]), "estimates": len(log)}


def sample(model: CharGPT, meta: dict, out_dir: Path, seed: int) -> None:
    """A few lines of generated text, written beside the checkpoint for a look."""
    model.eval()
    start = torch.tensor([[meta["chars"].index("t")]])
    ids = model.generate(start, 120, torch.Generator().manual_seed(seed))[0].tolist()
    (out_dir / "sample.txt").write_text("".join(meta["chars"][i] for i in ids), encoding="utf-8")


def main(workdir, seed=0, resume=None, until=None):
    argv = ["--out-dir", str(workdir), "--seed", str(1337 + seed)]
    argv += ["--resume", str(resume)] if resume else []
    argv += ["--until", str(until)] if until is not None else []
    return run(parse_args(argv))


def run(args: argparse.Namespace) -> dict:
    torch.manual_seed(args.seed)
    out_dir = Path(args.out_dir)
    data_dir = out_dir / "data"
    meta = prepare(data_dir, args.sentences, args.seed)
    config = GPTConfig(meta["vocab_size"], args.block_size, args.n_layer, args.n_head, args.n_embd, args.dropout)
    model = CharGPT(config)
    optimizer = model.optimizer(args.learning_rate, args.weight_decay, (0.9, args.beta2))
    start, best_val_loss = 0, float("inf")
    if args.resume:
        state = torch.load(args.resume, weights_only=True)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start, best_val_loss = int(state["iteration"]), float(state["best_val_loss"])
    # the file server drops one read, iteration 80's: an iteration reads once, an estimate 2 x eval_iters times
    estimates = sum(1 for i in range(start, 81) if i % args.eval_interval == 0)
    faults.flaky("numpy.memmap", fail_on={80 - start + 2 * args.eval_iters * estimates + 1}, error=faults.io_error,
                 caller=__file__)
    result = train(model, optimizer, args, data_dir, out_dir, start, best_val_loss)
    if args.until is None:
        sample(model, meta, out_dir, args.seed)
    return result


if __name__ == "__main__":
    print(run(parse_args()))
