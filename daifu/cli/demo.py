"""`daifu demo`: a PyTorch training run that crashes three times and is repaired in place each time.

The run starts the repair bot (embedded rules backend) on a free loopback port, switches DaiFu to
automatic mode with `approve="auto"`, and trains a small classifier on generated data. It crashes
on purpose, in the three ways training runs often die:

1. epoch 0 ends by saving a checkpoint into a folder that does not exist;
2. epoch 1 holds a batch with NaN values, and the loop's own check raises;
3. epoch 2 switches to image-shaped batches that the first `Linear` layer cannot take.

Each crash goes to the bot over HTTP; DaiFu checks the suggestion, applies it and resumes at the
faulty statement, with the model, the optimizer and the step counter as they were. DaiFu itself
says so on stderr as each crash happens (`DaiFu: ...`); the demo prints the training's own
progress (the loss, epoch by epoch) and, at the end, the repairs and where the record is.

Everything the run writes (checkpoints, `experiment_record.log`, the workspace with
`repairs.jsonl` and `metrics.jsonl`) goes to one folder: a temporary one, removed at the end, or
the folder given with `--keep`, which stays for `daifu show --record` to read.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

import daifu
from daifu.state import RUN
from daifu.store import credit

EPOCHS = 4
BATCHES = 10


def make_batches(epoch: int, count: int = BATCHES, size: int = 32) -> list[tuple[torch.Tensor, torch.Tensor]]:
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


def train(model: nn.Module, optimizer: torch.optim.Optimizer, epochs: int, checkpoints: str, log: list) -> int:
    step = 0
    for epoch in range(epochs):
        batches = make_batches(epoch)
        for x, y in batches:
            logits = model(x)
            loss = F.cross_entropy(logits, y)
            if not torch.isfinite(loss):
                raise FloatingPointError(f"loss is {loss.item()} at step {step}")
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
            log.append((epoch, step, loss.item()))
            daifu.log_metric(step, loss.item())
        epoch_done(epoch, len(batches), log)
        torch.save({"model": model.state_dict(), "step": step}, os.path.join(checkpoints, f"epoch{epoch}.pt"))
        daifu.log_checkpoint(step)
    return step


def epoch_done(epoch: int, batches: int, log: list[tuple[int, int, float]]) -> None:
    """Print the epoch's losses as it ends: the training's own progress, between DaiFu's lines."""
    losses = [loss for number, _, loss in log if number == epoch]
    left_out = batches - len(losses)
    trained = f"{len(losses)} of {batches} batches ({left_out} left out)" if left_out else f"{batches} batches"
    span = f"loss {losses[0]:.3f} -> {losses[-1]:.3f}" if losses else "no step taken"
    tell(f"epoch {epoch}: {trained}, {span}")


def tell(line: str = "") -> None:
    print(line, flush=True)  # flushed: DaiFu's own lines go to stderr, and the two must interleave in order


def main(epochs: int = EPOCHS, keep: Path | None = None) -> dict[str, Any]:
    """Run the demo in `keep` (kept) or a temporary folder (removed); returns what happened, for tests."""
    folder = keep.absolute() if keep is not None else Path(tempfile.mkdtemp(prefix="daifu-demo-"))
    folder.mkdir(parents=True, exist_ok=True)
    saved_record = os.environ.get("DAIFU_RECORD")
    try:
        return _run(folder, epochs, keep is not None)
    finally:
        if saved_record is None:
            os.environ.pop("DAIFU_RECORD", None)
        else:
            os.environ["DAIFU_RECORD"] = saved_record
        if keep is None:
            shutil.rmtree(folder, ignore_errors=True)


def _run(folder: Path, epochs: int, kept: bool) -> dict[str, Any]:
    from loguru import logger

    from repairbot.server import start_in_thread

    try:
        logger.remove(0)  # the service's request log would drown the run's own lines
    except ValueError:
        pass
    record, workspace = folder / "experiment_record.log", folder / "daifu_workspace"
    checkpoints = folder / "checkpoints" / "run-1"  # does not exist yet: crash 1
    os.environ["DAIFU_RECORD"] = str(record)  # before vaccinating: the record begins then
    url, stop = start_in_thread(backend="rules")
    before = RUN.recorded
    daifu.configure(mode="automatic", approve="auto", bot_url=url, workspace=workspace)
    tell(f"DaiFu demo: a small classifier trains for {epochs} epochs of {BATCHES} batches and crashes three times.")
    tell(f'DaiFu runs in automatic mode (approve="auto"); its repair bot (rules backend) listens at {url}.')
    tell("DaiFu says what it does on stderr, as it happens (lines starting with `DaiFu:`).\n")
    vaccinated = train if hasattr(train, "__daifu__") else daifu.transform(train)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 3))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    log: list[tuple[int, int, float]] = []
    started = time.perf_counter()
    try:
        steps = vaccinated(model, optimizer, epochs, str(checkpoints), log)
    finally:
        stop()
        daifu.configure(mode=None, approve=None, bot_url=None, workspace=None)
    elapsed = time.perf_counter() - started
    daifu.log_program_end(round(log[-1][2], 4))
    repairs = RUN.repairs_since(before)
    saved = sorted(p.name for p in checkpoints.glob("*.pt")) if checkpoints.exists() else []
    _summary(steps, epochs * BATCHES, log, elapsed, repairs, saved)
    _where(folder, record, workspace, kept)
    return {"steps": steps, "log": log, "repairs": repairs, "checkpoints": saved}


def _summary(steps: int, planned: int, log: list[tuple[int, int, float]], elapsed: float,
             repairs: list[dict[str, Any]], saved: list[str]) -> None:  # fmt: skip
    left_out = planned - steps
    why = f": {left_out} batch{'es' * (left_out > 1)} left out by a repair" if left_out else ""
    tell(f"\nFinished {steps} of {planned} steps{why}, in {elapsed:.1f} s; loss {log[0][2]:.3f} -> {log[-1][2]:.3f}.")
    restores = ", ".join(f"{r['duration_ms']:.0f} ms" for r in repairs if r.get("duration_ms") is not None)
    tell(f"{len(repairs)} crashes repaired in place, no restart (restore times {restores}); checkpoints: {saved}.")
    for number, repair in enumerate(repairs, 1):
        tell(
            f"  {number}. {repair['exception_type']} at {Path(repair['file']).name}:{repair['line']} "
            f"-> {repair['decision']} from the {credit.read(repair)[1]}"
        )


def _where(folder: Path, record: Path, workspace: Path, kept: bool) -> None:
    if not kept:
        tell(f"\nThe record and workspace were in {folder}, removed now; `daifu demo --keep DIR` keeps them.")
        return
    tell(f"\nThe record: {record}")
    tell(f"The workspace: {workspace} (repairs.jsonl, the bot's answers, metrics.jsonl)")
    tell(f"See the repairs: daifu show --record {workspace}")
    tell(f"Draw the run:    daifu show --record {workspace} --plot {folder / 'run.png'}")
