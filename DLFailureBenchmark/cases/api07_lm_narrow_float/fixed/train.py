"""API misuse (word-level LSTM language model): a stream split written for Python 2's `/`.

The validation words are cut into EVAL_BATCH streams at each evaluation with
`narrow(0, 0, nbatch * bsz)`; `nbatch` came from true division, and `narrow` wants an int.

Fixed: floor division, `data.valid.size(0) // EVAL_BATCH`.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint
from DLFailureBenchmark.hosts import lm

STEPS, BATCH, BPTT, EVAL_BATCH, EVAL_EVERY, CKPT_EVERY, CLIP = 150, 16, 20, 10, 40, 25, 0.25


@daifu.transform
def train(model, optimizer, data, ckpt_dir, start, stop):
    ntokens = len(data.dictionary)
    train_data = lm.batchify(data.train, BATCH)
    valid_data = lm.batchify(data.valid, EVAL_BATCH)
    per_epoch = (train_data.size(0) - 1) // BPTT
    hidden = model.init_hidden(BATCH)
    losses, valid_losses = [], []
    for step in range(start, stop):
        i = (step % per_epoch) * BPTT
        if i == 0:
            hidden = model.init_hidden(BATCH)
        x, targets = lm.get_batch(train_data, i, BPTT)
        hidden = lm.repackage_hidden(hidden)
        output, hidden = model(x, hidden)
        loss = F.cross_entropy(output.view(-1, ntokens), targets)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        optimizer.step()
        losses.append(loss.item())
        if (step + 1) % EVAL_EVERY == 0:
            nbatch = data.valid.size(0) // EVAL_BATCH
            streams = data.valid.narrow(0, 0, nbatch * EVAL_BATCH).view(EVAL_BATCH, -1).t().contiguous()
            valid_losses.append(lm.evaluate(model, streams))
        if (step + 1) % CKPT_EVERY == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    return lm.metrics(model, data, losses, len(losses))


def main(workdir, seed=0, resume=None, until=None):
    data = lm.corpus(Path(workdir))
    model, optimizer = lm.build(seed, len(data.dictionary))
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    return train(model, optimizer, data, ckpt_dir, start, STEPS if until is None else until)
