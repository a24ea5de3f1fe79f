"""`daifu demo`: a PyTorch training run that crashes three times and is repaired in place each time.

The run starts the repair bot (embedded rules backend) on a free loopback port, switches DaiFu to
automatic mode with `approve="auto"`, and trains a small classifier on generated data. It crashes
on purpose, in the three ways training runs often die:

1. epoch 0 ends by saving a checkpoint into a folder that does not exist;
2. epoch 1 holds a batch with NaN values, and the loop's own check raises;
3. epoch 2 switches to image-shaped batches that the first `Linear` layer cannot take.

Each crash goes to the bot over HTTP; DaiFu validates the suggestion, applies it and resumes at
the faulty statement, with the model, the optimizer and the step counter as they were.
"""

from __future__ import annotations

import difflib
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

import daifu
from daifu.state import RUN


def make_batches(epoch: int, count: int = 10, size: int = 32) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Generated data: the class of a 16-feature sample follows a fixed linear rule."""
    generator = torch.Generator().manual_seed(epoch)
    rule = torch.randn(16, 3, generator=torch.Generator().manual_seed(1234))
    batches = []
    for index in range(count):
        x = torch.randn(size, 16, generator=generator)
        y = (x @ rule).argmax(dim=1)
        if epoch == 1 and index == 3:
            x[0, 0] = float("nan")  # a corrupted sample
        if epoch >= 2:
            x = x.view(size, 1, 4, 4)  # from epoch 2 the loader yields 4x4 "images"
        batches.append((x, y))
    return batches


@daifu.transform
def train(model: nn.Module, optimizer: torch.optim.Optimizer, epochs: int, checkpoints: str, log: list) -> int:
    step = 0
    for epoch in range(epochs):
        for x, y in make_batches(epoch):
            logits = model(x)
            loss = F.cross_entropy(logits, y)
            if not torch.isfinite(loss):
                raise FloatingPointError(f"loss is {loss.item()} at step {step}")
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
            log.append((epoch, step, loss.item()))
        torch.save({"model": model.state_dict(), "step": step}, os.path.join(checkpoints, f"epoch{epoch}.pt"))
    return step


def main(epochs: int = 4, workdir: str | None = None) -> dict[str, Any]:
    """Run the demo; returns what happened (for tests), after printing it."""
    from loguru import logger

    from repairbot.server import start_in_thread

    try:
        logger.remove(0)  # the record still goes to its file; the terminal shows the summary below
    except ValueError:
        pass
    folder = Path(workdir or tempfile.mkdtemp(prefix="daifu-demo-"))
    checkpoints = folder / "checkpoints" / "run-1"  # does not exist yet: crash 1
    url, stop = start_in_thread(backend="rules")
    before = RUN.recorded
    daifu.configure(mode="automatic", approve="auto", bot_url=url, workspace=folder / "daifu_workspace")
    print(f"repair bot (rules backend) at {url}; DaiFu in automatic mode, approve=auto\n")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 3))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    log: list[tuple[int, int, float]] = []
    started = time.perf_counter()
    try:
        steps = train(model, optimizer, epochs, str(checkpoints), log)
    finally:
        stop()
        daifu.configure(mode=None, approve=None, bot_url=None, workspace=None)
    elapsed = time.perf_counter() - started
    repairs = RUN.repairs_since(before)
    for number, repair in enumerate(repairs, 1):
        print(f"crash {number}: {repair['exception_type']}: {repair['exception_message'][:90]}")
        print(f"  at line {repair['line']}: {repair['statement']}")
        print(f"  repaired by {repair['decision']} from the {repair['decided_by']}:")
        for line in _what_changed(repair):
            print(f"      {line}")
        print(f"  restored in {repair['duration_ms']:.1f} ms (report, bot over HTTP, validation, resume)\n")
    saved = sorted(p.name for p in checkpoints.glob("*.pt")) if checkpoints.exists() else []
    print(f"finished {steps} steps in {elapsed:.1f} s, loss {log[0][2]:.3f} -> {log[-1][2]:.3f}; checkpoints: {saved}")
    return {"steps": steps, "log": log, "repairs": repairs, "checkpoints": saved}


def _what_changed(repair: dict[str, Any]) -> list[str]:
    """The code of an action; for a surgery, the lines its new source changed."""
    code = repair["code"] or ""
    if repair["decision"] != "Surgery":
        return code.strip().splitlines()
    sources = [version.source for version in train.__daifu__.versions]  # type: ignore[attr-defined]
    index = sources.index(code) if code in sources else 0
    before = sources[index - 1] if index > 0 else code
    changes = difflib.ndiff(before.splitlines(), code.splitlines())
    return [f"{line[0]} {line[2:].strip()}" for line in changes if line[:1] in "+-"]


if __name__ == "__main__":
    main()
