"""The GPU checks of issue 31: what only a CUDA device can show.

    python benchmarks/gpu_check.py [--sizes 100MB,2GB]

1. A real CUDA out-of-memory in a training step (the process's share of the device capped with
   `torch.cuda.set_per_process_memory_fraction`, so that the whole batch's activations do not fit):
   the repair bot's micro-batch candidates tried in process (a fork cannot carry a CUDA context),
   the first that passes applied; the parameters compared with the same training on the CPU.
2. A device-side assert (a label out of range on the device), in a child process: DaiFu says that the
   CUDA context is unusable and attempts no repair; the user's exception goes on.
3. The in-process trial's cost on the device: snapshot, trial and rollback for each model size.

Without a CUDA device it says so and exits 0 ("no CUDA device: GPU checks not run").
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import textwrap
import time
from typing import Any

import torch
from torch import nn

import daifu
from daifu.core import trial_memory

SIZES = {"100MB": 100 * 2**20, "2GB": 2 * 2**30}


def train(model, optimizer, batches):
    for x, y in batches:
        out = model(x)
        loss = nn.functional.cross_entropy(out, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return float(loss)


def make(device: str, width: int = 8192) -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(512, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 10))
    model = model.to(device)
    return model, torch.optim.SGD(model.parameters(), lr=0.01)


def out_of_memory_check() -> bool:
    """A real CUDA OOM recovered by micro-batches after an in-process trial, the update the CPU's."""
    from daifu.report.build import build_report
    from repairbot.generate import generate

    generator = torch.Generator().manual_seed(0)
    rows = 16384
    data = [(torch.randn(rows, 512, generator=generator), torch.randint(0, 10, (rows,), generator=generator))]
    model, optimizer = make("cuda")
    torch.cuda.synchronize()
    held = torch.cuda.memory_allocated()
    activations = rows * 8192 * 4 * 4  # two hidden layers, their outputs and ReLU's
    fraction = (held * 2.2 + activations / 3) / torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(min(fraction, 1.0))
    said: list[str] = []

    def policy(crash: daifu.Crash) -> Any:
        found, _ = generate(build_report(crash))
        for candidate in (c for c in found if c.family == "accumulate"):
            verdict = crash.trial(daifu.Surgery(candidate.code), 120.0)
            said.append(verdict.describe())
            if verdict.passed:
                return daifu.Surgery(candidate.code)
        return daifu.Raise()

    daifu.configure(trial_iterations=0)
    daifu.set_policy(policy)
    batches = [(x.cuda(), y.cuda()) for x, y in data]
    try:
        loss = daifu.transform(train)(model, optimizer, batches)
    except torch.OutOfMemoryError as error:
        print(f"  not recovered: {error}".splitlines()[0])
        return False
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0)
    for line in said:
        print(f"  {line}")
    reference, reference_optimizer = make("cpu")
    expected = train(reference, reference_optimizer, data)
    close = all(torch.allclose(a.cpu(), b, atol=1e-4) for a, b in zip(model.parameters(), reference.parameters()))
    print(f"  loss {loss:.5f} (CPU, whole batch: {expected:.5f}); parameters within 1e-4 of the CPU's: {close}")
    return close and any("in process" in line for line in said)


ASSERTING = textwrap.dedent("""
    import torch, daifu
    daifu.set_policy(lambda crash: daifu.Skip())

    @daifu.transform
    def train(logits, labels):
        loss = torch.nn.functional.cross_entropy(logits, labels)
        torch.cuda.synchronize()
        return loss

    train(torch.randn(8, 3, device="cuda"), torch.full((8,), 7, device="cuda"))
""")


def device_assert_check() -> bool:
    """A device-side assert in a child process: recognised, no repair attempted, said."""
    done = subprocess.run([sys.executable, "-c", ASSERTING], capture_output=True, text=True, timeout=300)
    said = [line for line in done.stderr.splitlines() if line.startswith("DaiFu:")]
    for line in said:
        print(f"  {line}")
    return done.returncode != 0 and any("CUDA context unusable" in line for line in said)


def timing(size_bytes: int) -> str:
    """Snapshot, trial and rollback of an in-process trial for a model of `size_bytes` on the device."""
    side = int((size_bytes / 4) ** 0.5)
    torch.manual_seed(0)
    model = nn.Linear(side, side, bias=False).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)
    batches = [torch.randn(4, side, device="cuda") for _ in range(3)]
    labels = [torch.randn(4, side, device="cuda"), torch.randn(4, side + 1, device="cuda"),
              torch.randn(4, side, device="cuda")]
    found: dict[str, Any] = {}

    def step(model, optimizer, batches, labels):
        for x, y in zip(batches, labels):
            loss = nn.functional.mse_loss(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

    def policy(crash: daifu.Crash) -> Any:
        fix = daifu.Action("y = y[:, :-1]")
        started = time.perf_counter()
        found["verdict"] = crash.trial(fix, 600.0, horizon=0)
        found["total"] = time.perf_counter() - started
        return fix

    daifu.set_policy(policy)
    daifu.transform(step)(model, optimizer, batches, labels)
    verdict = found["verdict"]
    return (f"snapshot {verdict.snapshot_ms:.0f} ms ({trial_memory.size(verdict.snapshot_bytes)}), trial "
            f"{verdict.seconds * 1000:.0f} ms, rollback {verdict.rollback_ms:.0f} ms, crash.trial "
            f"{found['total'] * 1000:.0f} ms, passed {verdict.passed}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100MB,2GB")
    arguments = parser.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device: GPU checks not run")
        return 0
    daifu.configure(mode="interactive", trial_seconds=600)
    print(f"device: {torch.cuda.get_device_name(0)}, torch {torch.__version__}")
    print("1. CUDA out of memory in training, micro-batches tried in process:")
    recovered = out_of_memory_check()
    print("2. device-side assert:")
    recognised = device_assert_check()
    print("3. in-process trial on the device:")
    for name in arguments.sizes.split(","):
        print(f"  {name}: {timing(SIZES[name])}")
    print(f"out of memory recovered: {recovered}; device-side assert recognised: {recognised}")
    return 0 if recovered and recognised else 1


if __name__ == "__main__":
    sys.exit(main())
