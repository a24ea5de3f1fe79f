"""Word-level LSTM language model trained with truncated back-propagation through time.

The token stream is cut into `batch` parallel rows and read in chunks of `bptt` tokens; the
LSTM state is carried from one chunk to the next so that the model sees long context. The
state is carried with its autograd history: the second chunk's `backward()` walks back into
the first chunk's graph, whose buffers the first `backward()` already freed.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import torch
from torch import nn

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint


def options() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--emb", type=int, default=32)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--bptt", type=int, default=16)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--clip", type=float, default=0.5)
    parser.add_argument("--log-every", type=int, default=10)
    return parser.parse_args([])


def corpus(seed: int, n_tokens: int, vocab: int = 40) -> torch.Tensor:
    """A token stream from a small Markov chain: each token prefers a few successors."""
    gen = torch.Generator().manual_seed(seed)
    successors = torch.randint(0, vocab, (vocab, 3), generator=gen)
    tokens = [0]
    for _ in range(n_tokens - 1):
        pick = int(torch.randint(0, 4, (1,), generator=gen))
        nxt = int(successors[tokens[-1], pick]) if pick < 3 else int(torch.randint(0, vocab, (1,), generator=gen))
        tokens.append(nxt)
    return torch.tensor(tokens)


def batchify(stream: torch.Tensor, rows: int) -> torch.Tensor:
    usable = stream.numel() // rows * rows
    return stream[:usable].view(rows, -1).t().contiguous()  # (time, rows)


class LanguageModel(nn.Module):
    def __init__(self, vocab: int, emb: int, hidden: int) -> None:
        super().__init__()
        self.hidden_size = hidden
        self.embed = nn.Embedding(vocab, emb)
        self.rnn = nn.LSTM(emb, hidden)
        self.out = nn.Linear(hidden, vocab)

    def init_hidden(self, rows: int):
        zeros = torch.zeros(1, rows, self.hidden_size)
        return zeros, zeros.clone()

    def forward(self, tokens, hidden):
        output, hidden = self.rnn(self.embed(tokens), hidden)
        return self.out(output), hidden


@torch.no_grad()
def evaluate(model: LanguageModel, data: torch.Tensor, bptt: int) -> float:
    model.eval()
    hidden = model.init_hidden(data.size(1))
    total, count = 0.0, 0
    for i in range(0, data.size(0) - 1, bptt):
        n = min(bptt, data.size(0) - 1 - i)
        logits, hidden = model(data[i:i + n], hidden)
        total += nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), data[i + 1:i + 1 + n].reshape(-1),
                                             reduction="sum").item()
        count += n * data.size(1)
    model.train()
    return math.exp(total / count)


@daifu.transform
def train(model, optimizer, train_data, val_data, args, ckpt_dir, start, stop):
    criterion = nn.CrossEntropyLoss()
    hidden = model.init_hidden(args.batch)
    log = []
    n_chunks = (train_data.size(0) - 1) // args.bptt
    for step in range(start, stop):
        i = (step % n_chunks) * args.bptt
        inputs, targets = train_data[i:i + args.bptt], train_data[i + 1:i + 1 + args.bptt]
        logits, hidden = model(inputs, hidden)
        loss = criterion(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        optimizer.step()
        log.append(loss.item())
        if (step + 1) % args.log_every == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    return {"steps": len(log), "train_loss": sum(log[-10:]) / max(len(log[-10:]), 1),
            "val_ppl": evaluate(model, val_data, args.bptt)}


def main(workdir, seed=0, resume=None, until=None):
    args = options()
    torch.manual_seed(seed)
    stream = corpus(seed, 12000)
    train_data, val_data = batchify(stream[:10000], args.batch), batchify(stream[10000:], 4)
    model = LanguageModel(40, args.emb, args.hidden)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "ckpt"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    return train(model, optimizer, train_data, val_data, args, ckpt_dir, start, 80 if until is None else until)
