"""Non-deterministic runtime error (actor-critic agent): a checkpoint read hits a stale NFS handle.

Every 20 episodes the script scores the latest checkpoint with a separate evaluation copy of the
policy, read back from the shared file system as an evaluation worker would. The second read
fails with ESTALE, because the file was being replaced; read again, it is there.

Fixed: retry the read (`retrying(torch.load, ...)`).
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch.distributions import Categorical

import daifu
from DLFailureBenchmark.checkpoint import load_checkpoint, save_checkpoint
from DLFailureBenchmark.hosts import rl
from DLFailureBenchmark import faults
from DLFailureBenchmark.hosts.common import retrying

EPISODES, CKPT_EVERY = 60, 10
EVAL_EVERY = 20


@daifu.transform
def train(model, optimizer, ckpt_dir, start, stop, seed):
    episode_returns = []
    evaluator, scores = rl.Policy(), []
    for step in range(start, stop):
        env = rl.CartPole(seed * 1000 + step)
        state = env.reset()
        log_probs, values, rewards = [], [], []
        done = False
        while not done:
            probs, value = model(torch.from_numpy(state))
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
        if (step + 1) % EVAL_EVERY == 0:
            snapshot = retrying(torch.load, ckpt_dir / "last.pt")
            evaluator.load_state_dict(snapshot["model"])
            scores.append(rl.evaluate(evaluator, seed, episodes=2))
        if (step + 1) % CKPT_EVERY == 0:
            save_checkpoint(ckpt_dir, step + 1, model, optimizer)
    return rl.metrics(model, seed, episode_returns, len(episode_returns))


def main(workdir, seed=0, resume=None, until=None):
    model, optimizer = rl.build(seed)
    start = load_checkpoint(resume, model, optimizer)
    faults.flaky("torch.load", fail_on={2}, error=faults.stale_handle)  # the shared file system
    ckpt_dir = Path(workdir) / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    return train(model, optimizer, ckpt_dir, start, EPISODES if until is None else until, seed)
