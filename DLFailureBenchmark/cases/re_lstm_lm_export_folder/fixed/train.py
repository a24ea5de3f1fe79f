"""Realistic set, path problem: a word-level LSTM language model exports its best model into a folder nobody made.

A complete language-model script: a corpus of generated sentences in `train.txt`, `valid.txt`
and `test.txt`, a vocabulary built from the training file, the ids laid out as parallel streams,
a two-layer LSTM with dropout and tied input and output embeddings, truncated backpropagation
through time (the hidden state carried from one window to the next, detached from the graph
between them), gradient clipping, Adam with the learning rate halved when the validation loss
stops improving, checkpoints every few steps, the best model exported after each epoch, and a
test perplexity at the end.

The bug: the run was started with `--export exports/word_lstm/best.pt`, a folder that nobody
created; the first export, after the first epoch's validation, fails with "Parent directory
.../exports/word_lstm does not exist."

Fixed: the export's folder is made first.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.hosts import stories

CHECKPOINT_NAME = "ckpt.pt"
Hidden = tuple[torch.Tensor, torch.Tensor]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="A word-level LSTM language model.")
    parser.add_argument("--workdir", default="runs/word_lstm")
    parser.add_argument("--data", default="data", help="corpus folder, inside the workdir")
    parser.add_argument("--export", default="exports/word_lstm/best.pt", help="best model, inside the workdir")
    parser.add_argument("--emsize", type=int, default=64)
    parser.add_argument("--nhid", type=int, default=64)
    parser.add_argument("--nlayers", type=int, default=2)
    parser.add_argument("--dropout", type=float, default=0.2)
    parser.add_argument("--tied", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--clip", type=float, default=0.5)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=20)
    parser.add_argument("--eval-batch-size", type=int, default=10)
    parser.add_argument("--bptt", type=int, default=25, help="window of truncated backpropagation")
    parser.add_argument("--checkpoint-every", type=int, default=20, help="steps between checkpoints")
    parser.add_argument("--seed", type=int, default=1111)
    parser.add_argument("--resume", default=None)
    parser.add_argument("--until", type=int, default=None, help="stop once this many steps are done in all")
    return parser.parse_args(argv)


# -- data --------------------------------------------------------------------------------------------


class Vocab:
    """The training file's words, numbered by frequency (ties in order of first appearance); `<unk>` is 0."""

    def __init__(self, path: Path) -> None:
        counts: dict[str, int] = {}
        for line in path.read_text(encoding="utf-8").splitlines():
            for word in line.split() + ["<eos>"]:
                counts[word] = counts.get(word, 0) + 1
        self.words = ["<unk>"] + sorted(counts, key=lambda w: -counts[w])
        self.index = {word: i for i, word in enumerate(self.words)}

    def __len__(self) -> int:
        return len(self.words)

    def encode(self, path: Path) -> torch.Tensor:
        ids = [self.index.get(word, 0) for line in path.read_text(encoding="utf-8").splitlines()
               for word in line.split() + ["<eos>"]]
        return torch.tensor(ids, dtype=torch.long)


def as_streams(ids: torch.Tensor, streams: int) -> torch.Tensor:
    """`ids` cut into `streams` equal parallel streams, one per column: (time, streams)."""
    length = len(ids) // streams
    return ids[: length * streams].view(streams, length).t().contiguous()


def window(source: torch.Tensor, start: int, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows `start` to `start + size` (fewer at the end), and the next word of each as flat targets."""
    size = min(size, len(source) - 1 - start)
    return source[start : start + size], source[start + 1 : start + 1 + size].reshape(-1)


# -- model -------------------------------------------------------------------------------------------


class WordLSTM(nn.Module):
    """Embedding -> dropout -> stacked LSTM -> dropout -> scores over the vocabulary (tied to the embedding)."""

    def __init__(self, vocab_size: int, emsize: int, nhid: int, nlayers: int, dropout: float, tied: bool) -> None:
        super().__init__()
        self.nhid, self.nlayers = nhid, nlayers
        self.embedding = nn.Embedding(vocab_size, emsize)
        self.lstm = nn.LSTM(emsize, nhid, nlayers, dropout=dropout)
        self.drop = nn.Dropout(dropout)
        self.scores = nn.Linear(nhid, vocab_size)
        if tied:
            if emsize != nhid:
                raise ValueError("tied embeddings need --emsize equal to --nhid")
            self.scores.weight = self.embedding.weight
        nn.init.uniform_(self.embedding.weight, -0.1, 0.1)
        nn.init.zeros_(self.scores.bias)

    def forward(self, words: torch.Tensor, hidden: Hidden) -> tuple[torch.Tensor, Hidden]:
        states, hidden = self.lstm(self.drop(self.embedding(words)), hidden)
        return self.scores(self.drop(states)), hidden

    def initial_state(self, streams: int) -> Hidden:
        shape = (self.nlayers, streams, self.nhid)
        return torch.zeros(shape), torch.zeros(shape)


def detached(hidden: Hidden) -> Hidden:
    """The state's values without their history: backpropagation stops at the window's start."""
    return hidden[0].detach(), hidden[1].detach()


@torch.no_grad()
def evaluate(model: WordLSTM, source: torch.Tensor, bptt: int) -> float:
    """Mean cross-entropy per word over `source` (already in streams)."""
    model.eval()
    hidden = model.initial_state(source.size(1))
    total, words = 0.0, 0
    for start in range(0, source.size(0) - 1, bptt):
        inputs, targets = window(source, start, bptt)
        scores, hidden = model(inputs, hidden)
        total += F.cross_entropy(scores.view(-1, scores.size(-1)), targets, reduction="sum").item()
        words += len(targets)
    model.train()
    return total / words


def save_checkpoint(path: Path, model: nn.Module, optimizer: torch.optim.Optimizer,
                    plateau: torch.optim.lr_scheduler.ReduceLROnPlateau, step: int, best: float) -> None:
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "plateau": plateau.state_dict(),
                "step": step, "best_valid_loss": best}, path)


def export(path: Path, model: WordLSTM, vocab: Vocab, args: argparse.Namespace) -> None:
    """The model as it is, with what it takes to use it: the vocabulary and the sizes."""
    torch.save({"model": model.state_dict(), "words": vocab.words,
                "sizes": {"emsize": args.emsize, "nhid": args.nhid, "nlayers": args.nlayers}}, path)


# -- training ----------------------------------------------------------------------------------------


@daifu.transform
def train(model, optimizer, plateau, vocab, train_data, valid_data, args, start_step, best_valid_loss, workdir):
    ckpt_dir = workdir / "checkpoints"
    ckpt_dir.mkdir(exist_ok=True)
    export_path = workdir / args.export
    export_path.parent.mkdir(parents=True, exist_ok=True)
    steps_per_epoch = math.ceil((train_data.size(0) - 1) / args.bptt)
    stop = args.epochs * steps_per_epoch if args.until is None else args.until
    step = start_step
    history = []
    for epoch in range(start_step // steps_per_epoch, args.epochs):
        hidden = model.initial_state(args.batch_size)
        epoch_loss, windows = 0.0, 0
        for index, start in enumerate(range(0, train_data.size(0) - 1, args.bptt)):
            if epoch * steps_per_epoch + index < start_step:
                continue  # trained on before the checkpoint this run resumed from
            if step >= stop:
                break
            torch.manual_seed(args.seed * 100_003 + step)  # the step's own dropout masks
            inputs, targets = window(train_data, start, args.bptt)
            hidden = detached(hidden)
            scores, hidden = model(inputs, hidden)
            loss = F.cross_entropy(scores.view(-1, len(vocab)), targets)
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), args.clip)
            optimizer.step()
            step += 1
            epoch_loss += loss.item()
            windows += 1
            if step % args.checkpoint_every == 0:
                save_checkpoint(ckpt_dir / CHECKPOINT_NAME, model, optimizer, plateau, step, best_valid_loss)
        if step >= stop and step % steps_per_epoch != 0:
            return {"steps": step - start_step}
        valid_loss = evaluate(model, valid_data, args.bptt)
        plateau.step(valid_loss)
        history.append({"epoch": epoch + 1, "train_loss": epoch_loss / max(windows, 1), "valid_loss": valid_loss,
                        "lr": optimizer.param_groups[0]["lr"]})
        if valid_loss < best_valid_loss:
            best_valid_loss = valid_loss
            export(export_path, model, vocab, args)
        save_checkpoint(ckpt_dir / CHECKPOINT_NAME, model, optimizer, plateau, step, best_valid_loss)
        if step >= stop:
            break
    last = history[-1]
    return {"steps": step - start_step, "train_loss": last["train_loss"], "valid_loss": last["valid_loss"],
            "valid_ppl": math.exp(last["valid_loss"]), "best_valid_loss": best_valid_loss}


def main(workdir, seed=0, resume=None, until=None):
    argv = ["--workdir", str(workdir), "--seed", str(1111 + seed)]
    argv += ["--resume", str(resume)] if resume else []
    argv += ["--until", str(until)] if until is not None else []
    return run(parse_args(argv))


def run(args: argparse.Namespace) -> dict:
    torch.manual_seed(args.seed)
    workdir = Path(args.workdir)
    data = stories.write_corpus(workdir / args.data, seed=args.seed)
    vocab = Vocab(data / "train.txt")
    train_data = as_streams(vocab.encode(data / "train.txt"), args.batch_size)
    valid_data = as_streams(vocab.encode(data / "valid.txt"), args.eval_batch_size)
    test_data = as_streams(vocab.encode(data / "test.txt"), args.eval_batch_size)
    model = WordLSTM(len(vocab), args.emsize, args.nhid, args.nlayers, args.dropout, args.tied)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, factor=0.5, patience=0)
    start_step, best_valid_loss = 0, float("inf")
    if args.resume:
        state = torch.load(args.resume, weights_only=True)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        plateau.load_state_dict(state["plateau"])
        start_step, best_valid_loss = int(state["step"]), float(state["best_valid_loss"])
    result = train(model, optimizer, plateau, vocab, train_data, valid_data, args, start_step, best_valid_loss,
                   workdir)
    if args.until is None:
        best = torch.load(workdir / args.export, weights_only=True)
        model.load_state_dict(best["model"])
        result["test_loss"] = evaluate(model, test_data, args.bptt)
        result["test_ppl"] = math.exp(result["test_loss"])
    return result


if __name__ == "__main__":
    print(run(parse_args()))
