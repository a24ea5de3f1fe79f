"""A WikiText-style word-level language model: a generated corpus in `wiki.*.tokens` files, an LSTM.

The corpus is text written by a fixed random Markov chain over a few hundred words, one sentence
per line with `<eos>`, as in WikiText. `Corpus` numbers the words in order of first appearance
(`<unk>` is 0); `batchify` lays the ids out as parallel streams, one column each, `get_batch` cuts
a window of them with its next-word targets, and `repackage_hidden` cuts the carried LSTM state off
the graph of the batches before it (truncated backpropagation through time).
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


class Vocabulary:
    """Words and their ids, in order of first appearance; `<unk>` is id 0 and stands for any unknown word."""

    def __init__(self) -> None:
        self.words: list[str] = [UNK]
        self.ids: dict[str, int] = {UNK: 0}

    def id_of(self, word: str, grow: bool) -> int:
        """The word's id; a new one if the word is new and `grow`, else `<unk>`'s."""
        known = self.ids.get(word)
        if known is not None:
            return known
        if not grow:
            return 0
        self.ids[word] = len(self.words)
        self.words.append(word)
        return self.ids[word]

    def __len__(self) -> int:
        return len(self.words)


def tokenize(path: Path, dictionary: Vocabulary, grow: bool = True) -> torch.Tensor:
    """The words of the file at `path` as int64 ids, `<eos>` closing each line; new words join if `grow`."""
    text = Path(path).read_text(encoding="utf-8")
    words = [word for line in text.splitlines() for word in [*line.split(), "<eos>"]]
    return torch.tensor([dictionary.id_of(word, grow) for word in words], dtype=torch.int64)


class Corpus:
    """The training and validation ids of the files in `folder`; validation words unseen in training are `<unk>`."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.dictionary = Vocabulary()
        self.train = tokenize(folder / "wiki.train.tokens", self.dictionary)
        self.valid = tokenize(folder / "wiki.valid.tokens", self.dictionary, grow=False)


def batchify(data: torch.Tensor, bsz: int) -> torch.Tensor:
    """`data` as `bsz` parallel streams, one per column (time along dim 0); the ids that do not fill a row go."""
    length = len(data) // bsz
    return data[: length * bsz].reshape(bsz, length).T.contiguous()


def get_batch(source: torch.Tensor, i: int, bptt: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows `i` to `i + bptt` of `source` (fewer at its end), and the word after each, flattened."""
    end = min(i + bptt, len(source) - 1)
    return source[i:end], source[i + 1 : end + 1].flatten()


def repackage_hidden(h: torch.Tensor | tuple[torch.Tensor, ...]) -> torch.Tensor | tuple[torch.Tensor, ...]:
    """The carried state with the same values and no history: the next backward stops at this batch."""
    if isinstance(h, tuple):
        return tuple(t.detach() for t in h)
    return h.detach()


class LSTMLanguageModel(nn.Module):
    """Word embeddings, a stacked LSTM, and a linear layer scoring the next word over the vocabulary."""

    def __init__(self, ntoken: int, ninp: int = 48, nhid: int = 64, nlayers: int = 1) -> None:
        super().__init__()
        self.ntoken, self.nhid, self.nlayers = ntoken, nhid, nlayers
        self.embed = nn.Embedding(ntoken, ninp)
        self.lstm = nn.LSTM(ninp, nhid, nlayers)
        self.scores = nn.Linear(nhid, ntoken)

    def forward(self, x: torch.Tensor, hidden: Hidden) -> tuple[torch.Tensor, Hidden]:
        states, hidden = self.lstm(self.embed(x), hidden)
        return self.scores(states), hidden

    def init_hidden(self, bsz: int) -> Hidden:
        """Zero state and cell for `bsz` streams, with the model's dtype and device."""
        like = self.scores.weight
        shape = (self.nlayers, bsz, self.nhid)
        return (torch.zeros(shape, dtype=like.dtype, device=like.device),
                torch.zeros(shape, dtype=like.dtype, device=like.device))


def build(seed: int, ntokens: int, lr: float = 3e-3) -> tuple[LSTMLanguageModel, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = LSTMLanguageModel(ntokens)
    return model, torch.optim.Adam(model.parameters(), lr=lr)


def corpus(workdir: Path) -> Corpus:
    """The corpus files in `workdir/data` (written there first), read back."""
    return Corpus(write_corpus(Path(workdir) / "data"))


@torch.no_grad()
def evaluate(model: LSTMLanguageModel, source: torch.Tensor, bptt: int = 20) -> float:
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


def metrics(model: LSTMLanguageModel, data: Corpus, losses: list[float], steps: int) -> dict[str, float]:
    valid = evaluate(model, batchify(data.valid, 10))
    return {"steps": steps, "final_loss": tail_mean(losses), "valid_loss": valid, "valid_ppl": math.exp(valid)}
