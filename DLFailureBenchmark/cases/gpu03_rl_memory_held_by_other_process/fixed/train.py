"""GPU contention (actor-critic agent): another process holds the GPU's memory for a moment.

At the agent's 1500th forward pass another job on the shared GPU allocates 14.9 of its 15.77 GiB
and frees it 0.5 s later; meanwhile this run's forward pass cannot allocate (simulated).

Fixed: wait and retry the forward pass when another process holds the memory.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch.distributions import Categorical

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint
from DLFailureBenchmark.hosts import rl
from DLFailureBenchmark.faults import MiB, SimulatedDevice
from DLFailureBenchmark.hosts.common import retrying

EPISODES, CKPT_EVERY = 60, 10


@daifu.transform
def train(model, optimizer, ckpt_dir, start, stop, seed):
    episode_returns = []
    for step in range(start, stop):
        env = rl.CartPole(seed * 1000 + step)
        state = env.reset()
        log_probs, values, rewards = [], [], []
        done = False
        while not done:
            probs, value = retrying(model, torch.from_numpy(state), wait=0.2, errors=(torch.OutOfMemoryError,))
            m = Categorical(probs)
            action = m.sample()
            state, reward, done = env.step(action.item())
            log_probs.append(m.log_prob(action))
            values.append(value)
            rewards.append(reward)
        loss = rl.a2c_loss(log_probs, values, rl.discounted(rewards))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        episode_returns.append(sum(rewards))
        if (step + 1) % CKPT_EVERY == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    return rl.metrics(model, seed, episode_returns, len(episode_returns))


def main(workdir, seed=0, resume=None, until=None):
    model, optimizer = rl.build(seed)
    device = SimulatedDevice(bytes_per_element=1 * MiB).attach(model)  # the shared GPU
    device.hold_by_other_process(from_call=1500, seconds=0.5)
    start = load_checkpoint(resume, model, optimizer)
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    return train(model, optimizer, ckpt_dir, start, EPISODES if until is None else until, seed)
