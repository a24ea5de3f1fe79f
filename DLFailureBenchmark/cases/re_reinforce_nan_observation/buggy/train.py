"""Realistic set, exceptional data: a policy-gradient agent whose range sensor reports NaN once.

A complete REINFORCE script: a small simulated task (a robot on a 2-D field steering towards a
beacon, its observation the beacon's offset, its own velocity and a range-sensor reading), a
two-layer policy giving the logits of five actions, episodes sampled from it, discounted and
normalised returns, an entropy bonus, Adam, a running reward, checkpoints every few episodes
and a greedy evaluation at the end.

The bug is in the data: now and then the range sensor drops out and reports NaN, as real
sensors do. The script feeds the observation to the policy as it comes; the logits become NaN
and `Categorical` refuses them ("Expected parameter logits ... but found invalid values").
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.distributions import Categorical

import daifu

STEP_NAME = "episode"
CHECKPOINT_NAME = "ckpt.pt"
ACTIONS = np.array([[0.0, 0.0], [1.0, 0.0], [-1.0, 0.0], [0.0, 1.0], [0.0, -1.0]])  # coast, E, W, N, S


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="REINFORCE on the beacon task.")
    parser.add_argument("--episodes", type=int, default=150)
    parser.add_argument("--max-steps", type=int, default=50, help="steps before an episode is cut off")
    parser.add_argument("--gamma", type=float, default=0.97, help="discount factor")
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--entropy-bonus", type=float, default=0.01)
    parser.add_argument("--sensor-dropout", type=float, default=0.0015, help="chance a range reading is lost")
    parser.add_argument("--eval-episodes", type=int, default=20)
    parser.add_argument("--checkpoint-every", type=int, default=25, help="episodes between checkpoints")
    parser.add_argument("--seed", type=int, default=543)
    parser.add_argument("--workdir", default="runs/beacon_reinforce")
    parser.add_argument("--resume", default=None)
    parser.add_argument("--until", type=int, default=None, help="stop once this many episodes are done in all")
    return parser.parse_args(argv)


class BeaconField:
    """A point robot with momentum on a 2-D field; an episode ends when it comes within 0.1 of the beacon.

    Each step: velocity = 0.85 velocity + 0.04 thrust, position += velocity. The reward is the
    distance gained towards the beacon, minus 0.01 a step, plus 1 for arriving. The range
    sensor loses a reading with probability `dropout`, and then reports NaN.
    """

    def __init__(self, seed: int, episode: int, max_steps: int, dropout: float) -> None:
        self.rng = np.random.default_rng([seed, episode])  # an episode is the same whenever it is run
        self.sensor = np.random.default_rng([seed, episode, 1])  # the range sensor's own noise and dropouts
        self.max_steps, self.dropout = max_steps, dropout
        self.position = self.rng.uniform(-0.2, 0.2, size=2)
        self.velocity = np.zeros(2)
        angle, distance = self.rng.uniform(0.0, 2 * np.pi), self.rng.uniform(0.6, 1.0)
        self.beacon = self.position + distance * np.array([np.cos(angle), np.sin(angle)])
        self.steps = 0

    def distance(self) -> float:
        return float(np.linalg.norm(self.beacon - self.position))

    def observe(self) -> np.ndarray:
        reading = self.distance() + self.sensor.normal(0.0, 0.01)
        if self.sensor.random() < self.dropout:
            reading = float("nan")  # the sensor lost the echo
        offset = self.beacon - self.position
        return np.array([*offset, *(10.0 * self.velocity), reading], dtype=np.float32)

    def step(self, action: int) -> tuple[np.ndarray, float, bool]:
        before = self.distance()
        self.velocity = 0.85 * self.velocity + 0.04 * ACTIONS[action]
        self.position = self.position + self.velocity
        self.steps += 1
        after = self.distance()
        arrived = after < 0.1
        reward = (before - after) - 0.01 + (1.0 if arrived else 0.0)
        return self.observe(), reward, arrived or self.steps >= self.max_steps


class Policy(nn.Module):
    """Observation (5) -> two tanh layers -> logits of the five actions."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(5, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(),
                                 nn.Linear(hidden, len(ACTIONS)))

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        return self.net(observation)


def select_action(policy: Policy, observation: np.ndarray) -> tuple[int, torch.Tensor, torch.Tensor]:
    """An action sampled from the policy, its log-probability and the distribution's entropy."""
    logits = policy(torch.from_numpy(observation).unsqueeze(0))
    distribution = Categorical(logits=logits)
    action = distribution.sample()
    return int(action.item()), distribution.log_prob(action)[0], distribution.entropy()[0]


def returns_of(rewards: list[float], gamma: float) -> torch.Tensor:
    """Discounted returns from each step on, normalised to mean 0 and spread 1 (when there are two or more)."""
    returns, running = [], 0.0
    for reward in reversed(rewards):
        running = reward + gamma * running
        returns.append(running)
    result = torch.tensor(returns[::-1], dtype=torch.float32)
    if len(result) > 1:
        result = (result - result.mean()) / (result.std() + 1e-6)
    return result


@torch.no_grad()
def evaluate(policy: Policy, args: argparse.Namespace) -> float:
    """The mean return of greedy episodes on fixed starts, with a clean sensor (the simulator's own)."""
    total = 0.0
    for index in range(args.eval_episodes):
        env = BeaconField(args.seed + 1, index, args.max_steps, dropout=0.0)
        observation, done = env.observe(), False
        while not done:
            action = int(policy(torch.from_numpy(observation).unsqueeze(0)).argmax())
            observation, reward, done = env.step(action)
            total += reward
    return total / args.eval_episodes


def save_checkpoint(path: Path, policy: Policy, optimizer: torch.optim.Optimizer, episode: int,
                    running_reward: float) -> None:
    torch.save({"policy": policy.state_dict(), "optimizer": optimizer.state_dict(), "episode": episode,
                "running_reward": running_reward}, path)


@daifu.transform
def train(policy, optimizer, args, start, running_reward, ckpt_path):
    stop = args.episodes if args.until is None else args.until
    returns_seen, arrivals = [], 0
    for episode in range(start, stop):
        torch.manual_seed(args.seed * 10_007 + episode)  # the actions sampled in an episode are its own
        env = BeaconField(args.seed, episode, args.max_steps, args.sensor_dropout)
        observation, done = env.observe(), False
        log_probs, entropies, rewards = [], [], []
        while not done:
            action, log_prob, entropy = select_action(policy, observation)
            observation, reward, done = env.step(action)
            log_probs.append(log_prob)
            entropies.append(entropy)
            rewards.append(reward)
        episode_return = sum(rewards)
        running_reward = 0.05 * episode_return + 0.95 * running_reward
        returns_seen.append(episode_return)
        arrivals += env.distance() < 0.1
        returns = returns_of(rewards, args.gamma)
        loss = -(torch.stack(log_probs) * returns).sum() - args.entropy_bonus * torch.stack(entropies).sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if (episode + 1) % args.checkpoint_every == 0:
            save_checkpoint(ckpt_path, policy, optimizer, episode + 1, running_reward)
    if args.until is not None:
        return {"steps": stop - start}
    recent = returns_seen[-20:]
    return {"steps": stop - start, "running_reward": running_reward, "arrived": arrivals / max(stop - start, 1),
            "recent_return": sum(recent) / max(len(recent), 1), "eval_return": evaluate(policy, args)}


def main(workdir, seed=0, resume=None, until=None):
    argv = ["--workdir", str(workdir), "--seed", str(543 + seed)]
    argv += ["--resume", str(resume)] if resume else []
    argv += ["--until", str(until)] if until is not None else []
    return run(parse_args(argv))


def run(args: argparse.Namespace) -> dict:
    torch.manual_seed(args.seed)
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    policy = Policy(args.hidden)
    optimizer = torch.optim.Adam(policy.parameters(), lr=args.lr)
    start, running_reward = 0, 0.0
    if args.resume:
        state = torch.load(args.resume, weights_only=True)
        policy.load_state_dict(state["policy"])
        optimizer.load_state_dict(state["optimizer"])
        start, running_reward = int(state["episode"]), float(state["running_reward"])
    return train(policy, optimizer, args, start, running_reward, workdir / CHECKPOINT_NAME)


if __name__ == "__main__":
    print(run(parse_args()))
