"""API misuse (word-level LSTM language model), holdout: the model's (output, hidden) pair used as the output.

Every 40 steps the script scores one held-out batch, written inline: it calls the model and
takes the result as the output, but `LSTMLanguageModel.forward` returns `(output, hidden)`; the loss line
then calls `.view` on a tuple.
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
    losses, heldout = [], []
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
            with torch.no_grad():
                x_val, y_val = lm.get_batch(valid_data, 0, BPTT)
                output_val = model(x_val, model.init_hidden(EVAL_BATCH))
                heldout.append(F.cross_entropy(output_val.view(-1, ntokens), y_val).item())
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
