"""Out-of-memory bug (word-level LSTM language model): a sequence-length warm-up that overshoots.

Short sequences first, long ones later: at the start of the second epoch the script multiplies
its BPTT length by 8. The GPU (simulated: 15.77 GiB, 8 MiB of activations per token) holds 1780
tokens a batch; 16 streams of 160 tokens raise `torch.OutOfMemoryError`.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch.nn import functional as F

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint
from DLFailureBenchmark.hosts import lm
from DLFailureBenchmark.faults import MiB, SimulatedDevice

STEPS, BATCH, BPTT, EVAL_BATCH, EVAL_EVERY, CKPT_EVERY, CLIP = 150, 16, 20, 10, 40, 25, 0.25


@daifu.transform
def train(model, optimizer, data, ckpt_dir, start, stop):
    ntokens = len(data.dictionary)
    train_data = lm.batchify(data.train, BATCH)
    valid_data = lm.batchify(data.valid, EVAL_BATCH)
    per_epoch = (train_data.size(0) - 1) // BPTT
    bptt = BPTT if start < per_epoch else BPTT * 8
    position = (start % per_epoch) * BPTT
    hidden = model.init_hidden(BATCH)
    losses, valid_losses = [], []
    for step in range(start, stop):
        if step == per_epoch:
            bptt = bptt * 8
        if position >= train_data.size(0) - 1:
            position = 0
            hidden = model.init_hidden(BATCH)
        x, targets = lm.get_batch(train_data, position, bptt)
        hidden = lm.repackage_hidden(hidden)
        output, hidden = model(x, hidden)
        loss = F.cross_entropy(output.view(-1, ntokens), targets)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        optimizer.step()
        losses.append(loss.item())
        position += bptt
        if (step + 1) % EVAL_EVERY == 0:
            valid_losses.append(lm.evaluate(model, valid_data))
        if (step + 1) % CKPT_EVERY == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    return lm.metrics(model, data, losses, len(losses))


def main(workdir, seed=0, resume=None, until=None):
    data = lm.corpus(Path(workdir))
    model, optimizer = lm.build(seed, len(data.dictionary))
    SimulatedDevice(bytes_per_element=8 * MiB).attach(model)  # the GPU this script was written for
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    return train(model, optimizer, data, ckpt_dir, start, STEPS if until is None else until)
