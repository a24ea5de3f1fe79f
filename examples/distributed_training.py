"""A 2-rank data-parallel training job on gloo (CPU), crashing as the first argument says.

    python -m torch.distributed.run --nproc_per_node=2 --standalone examples/distributed_training.py SCENARIO OUT_DIR

SCENARIO: `none` (the fixed program), `shape` (the same shape bug on every rank, repaired by one
surgery that rank 0's policy decides after a trial), `rank1` (an exceptional batch on rank 1 only,
repaired there by an action after a trial), `allreduce` (a transient all-reduce fault on rank 1, retried), `fatal` (an
unrepairable error on rank 1), `restart` (no crash: load OUT_DIR/checkpoint.pt and redo
`DAIFU_LOST_STEPS` steps — what restarting from the last checkpoint costs). Rank 0 saves a
checkpoint every 3 steps; each rank saves its final parameters to OUT_DIR/rank<r>.pt.
"""

from __future__ import annotations

import json
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn

import daifu

SCENARIO, OUT = sys.argv[1], sys.argv[2]
PROCESS_GROUP_TIMEOUT_S = 300


class FlakyAllReduce:
    """`dist.all_reduce` that fails once on rank 1 at the given call, as a broken link would."""

    def __init__(self, fail_at: int) -> None:
        self.calls, self.fail_at = 0, fail_at

    def __call__(self, tensor: torch.Tensor) -> None:
        self.calls += 1
        if SCENARIO == "allreduce" and dist.get_rank() == 1 and self.calls == self.fail_at:
            raise RuntimeError("[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer")
        dist.all_reduce(tensor)


def batches(rank: int, epoch: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(100 * epoch + rank)
    data = []
    for index in range(4):
        x = torch.randn(8, 6, generator=generator)
        y = x.sum(dim=1, keepdim=True)
        if SCENARIO == "rank1" and rank == 1 and epoch == 1 and index == 2:
            x[3, 1] = float("inf")  # one exceptional sample, on rank 1 only
        data.append((x, y))
    return data


def finite_loss(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    loss = nn.functional.mse_loss(output, target)
    if not torch.isfinite(loss):
        raise FloatingPointError(f"loss is {loss.item()}")
    return loss


@daifu.transform
def train(
    model: nn.Module, optimizer: torch.optim.Optimizer, all_reduce: FlakyAllReduce, epochs: int, max_steps: int = 10**9
) -> int:
    rank, world = dist.get_rank(), dist.get_world_size()
    step = 0
    for epoch in range(epochs):
        for x, y in batches(rank, epoch):
            if SCENARIO == "fatal" and rank == 1 and epoch == 1:
                raise KeyError("checkpoint_config")
            inputs = x.view(x.shape[0], 2, 3) if SCENARIO == "shape" and epoch == 1 else x
            loss = finite_loss(model(inputs), y)
            optimizer.zero_grad()
            loss.backward()
            for parameter in model.parameters():
                all_reduce(parameter.grad)
                parameter.grad /= world
            optimizer.step()
            step += 1
            if rank == 0 and step % 3 == 0:
                checkpoint = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step}
                torch.save(checkpoint, os.path.join(OUT, "checkpoint.pt"))
            if step >= max_steps:
                return step
    return step


def tried(crash: daifu.Crash, decision: daifu.Decision) -> daifu.Decision:
    """`decision` if its trial on a copy of this rank passes (the copy never touches the process
    group: its collective stops it); the verdict is kept in OUT_DIR/trial.rank<r>.json."""
    verdict = crash.trial(decision)
    with open(os.path.join(OUT, f"trial.rank{dist.get_rank()}.json"), "w") as stream:
        json.dump(verdict.to_data(), stream)
    return decision if verdict.passed else daifu.Raise()


def policy(crash: daifu.Crash) -> daifu.Decision | None:
    if SCENARIO == "shape" and dist.get_rank() == 0:  # only rank 0 has a policy: rank 1 follows it
        return tried(crash, daifu.Surgery(crash.source.replace("x.view(x.shape[0], 2, 3) if", "x if")))
    if SCENARIO == "rank1":
        return tried(crash, daifu.Action("inputs = torch.nan_to_num(inputs, posinf=0.0)"))
    if SCENARIO == "allreduce":
        return daifu.Retry()
    return None


def main() -> None:
    # Generous: on a loaded machine the ranks may start a minute apart (importing torch), and a collective
    # waits while its peer decides a crash; the timeout is what ends a job whose peer is truly stuck.
    dist.init_process_group("gloo", timeout=timedelta(seconds=PROCESS_GROUP_TIMEOUT_S))
    daifu.set_policy(policy)
    torch.manual_seed(0)
    model = nn.Linear(6, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    os.makedirs(OUT, exist_ok=True)
    if SCENARIO == "restart":
        state = torch.load(os.path.join(OUT, "checkpoint.pt"))
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        steps = train(model, optimizer, FlakyAllReduce(fail_at=0), 1, int(os.environ.get("DAIFU_LOST_STEPS", "1")))
    else:
        steps = train(model, optimizer, FlakyAllReduce(fail_at=9), 3)
    torch.save({k: v.detach() for k, v in model.state_dict().items()}, os.path.join(OUT, f"rank{dist.get_rank()}.pt"))
    print(f"rank {dist.get_rank()} finished {steps} steps", flush=True)
    dist.barrier()  # no rank tears the group down while a peer may still have a collective in flight
    dist.destroy_process_group()  # before the interpreter ends: gloo's threads never outlive it


if __name__ == "__main__":
    main()
