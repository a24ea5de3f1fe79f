"""A WikiText-style word-level language model: a generated corpus in `wiki.*.tokens` files, an LSTM.

The corpus is text written by a fixed random Markov chain over a few hundred words, one sentence
per line with `<eos>`, as in WikiText; `Corpus` reads the files and numbers the words the way
PyTorch's word_language_model example does, and `batchify`, `get_batch` and `repackage_hidden` are
that example's.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from DLFailureBenchmark.hosts.common import tail_mean

WORDS = 300
Hidden = tuple[torch.Tensor, torch.Tensor]
UNK = "<unk>"


def _chain(seed: int = 1234) -> tuple[list[str], np.ndarray]:
    """The words, and the cumulative transition probabilities of the chain writing them."""
    rng = np.random.default_rng(seed)
    vocab = [UNK, "<eos>"] + [f"w{i}" for i in range(WORDS - 2)]
    logits = rng.standard_normal((WORDS, WORDS)) * 3.0
    probabilities = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    return vocab, np.cumsum(probabilities, axis=1)


def write_corpus(folder: Path, train_words: int = 30_000, valid_words: int = 3_000, seed: int = 0) -> Path:
    """Write `wiki.train.tokens` and `wiki.valid.tokens` into `folder` (made if missing); returns it."""
    folder.mkdir(parents=True, exist_ok=True)
    vocab, cumulative = _chain()
    rng = np.random.default_rng(seed + 77)
    for name, count in (("train", train_words), ("valid", valid_words)):
        ids = [2]
        for u in rng.random(count - 1):
            ids.append(min(int(np.searchsorted(cumulative[ids[-1]], u)), WORDS - 1))
        words = [vocab[i] for i in ids]
        lines, line = [], []
        for word in words:
            if word == "<eos>":
                lines.append(" ".join(line))
                line = []
            else:
                line.append(word)
        (folder / f"wiki.{name}.tokens").write_text("\n".join(" " + text + " " for text in lines) + "\n")
    return folder


class Dictionary:
    def __init__(self) -> None:
        self.word2idx: dict[str, int] = {}
        self.idx2word: list[str] = []
        self.add_word(UNK)

    def add_word(self, word: str) -> int:
        if word not in self.word2idx:
            self.idx2word.append(word)
            self.word2idx[word] = len(self.idx2word) - 1
        return self.word2idx[word]

    def __len__(self) -> int:
        return len(self.idx2word)


def tokenize(path: Path, dictionary: Dictionary, grow: bool = True) -> torch.Tensor:
    """The words of the file at `path`, each line ended by `<eos>`, as int64 ids."""
    ids = []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            for word in line.split() + ["<eos>"]:
                ids.append(dictionary.add_word(word) if grow else dictionary.word2idx.get(word, 0))
    return torch.tensor(ids, dtype=torch.int64)


class Corpus:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.dictionary = Dictionary()
        self.train = tokenize(folder / "wiki.train.tokens", self.dictionary)
        self.valid = tokenize(folder / "wiki.valid.tokens", self.dictionary, grow=False)


def batchify(data: torch.Tensor, bsz: int) -> torch.Tensor:
    nbatch = data.size(0) // bsz
    data = data.narrow(0, 0, nbatch * bsz)
    return data.view(bsz, -1).t().contiguous()


def get_batch(source: torch.Tensor, i: int, bptt: int) -> tuple[torch.Tensor, torch.Tensor]:
    seq_len = min(bptt, len(source) - 1 - i)
    return source[i : i + seq_len], source[i + 1 : i + 1 + seq_len].reshape(-1)


def repackage_hidden(h: torch.Tensor | tuple[torch.Tensor, ...]) -> torch.Tensor | tuple[torch.Tensor, ...]:
    """Wraps hidden states in new tensors, to detach them from their history."""
    if isinstance(h, torch.Tensor):
        return h.detach()
    return tuple(repackage_hidden(v) for v in h)  # type: ignore[misc]


class RNNModel(nn.Module):
    """Embedding - LSTM - Linear decoder, as in PyTorch's word_language_model."""

    def __init__(self, ntoken: int, ninp: int = 48, nhid: int = 64, nlayers: int = 1) -> None:
        super().__init__()
        self.ntoken, self.nhid, self.nlayers = ntoken, nhid, nlayers
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = nn.LSTM(ninp, nhid, nlayers)
        self.decoder = nn.Linear(nhid, ntoken)

    def forward(self, x: torch.Tensor, hidden: Hidden) -> tuple[torch.Tensor, Hidden]:
        output, hidden = self.rnn(self.encoder(x), hidden)
        return self.decoder(output), hidden

    def init_hidden(self, bsz: int) -> Hidden:
        weight = next(self.parameters())
        return (weight.new_zeros(self.nlayers, bsz, self.nhid), weight.new_zeros(self.nlayers, bsz, self.nhid))


def build(seed: int, ntokens: int, lr: float = 3e-3) -> tuple[RNNModel, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = RNNModel(ntokens)
    return model, torch.optim.Adam(model.parameters(), lr=lr)


def corpus(workdir: Path) -> Corpus:
    """The corpus files in `workdir/data` (written there first), read back."""
    return Corpus(write_corpus(Path(workdir) / "data"))


@torch.no_grad()
def evaluate(model: RNNModel, source: torch.Tensor, bptt: int = 20) -> float:
    """Mean cross-entropy per word over `source`, ids already batchified (one column per stream)."""
    model.eval()
    hidden = model.init_hidden(source.size(1))
    total, count = 0.0, 0
    for i in range(0, source.size(0) - 1, bptt):
        x, y = get_batch(source, i, bptt)
        output, hidden = model(x, hidden)
        total += len(y) * F.cross_entropy(output.view(-1, model.ntoken), y).item()
        count += len(y)
    model.train()
    return total / count


def metrics(model: RNNModel, data: Corpus, losses: list[float], steps: int) -> dict[str, float]:
    valid = evaluate(model, batchify(data.valid, 10))
    return {"steps": steps, "final_loss": tail_mean(losses), "valid_loss": valid, "valid_ppl": math.exp(valid)}
