"""An actor-critic agent on a cart-pole written in code (the classic control task, no gym needed).

`CartPole` follows the equations of the classic task (Barto, Sutton and Anderson 1983) and returns
NumPy float32 observations; `Policy` is the two-headed network of PyTorch's actor_critic example.
Episode `n` of a run starts from a state drawn from `(seed, n)`.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from DLFailureBenchmark.hosts.common import tail_mean

GAMMA = 0.99
MAX_STEPS = 200


class CartPole:
    gravity, cart_mass, pole_mass, half_length, force, tau = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02

    def __init__(self, seed: int, max_steps: int = MAX_STEPS) -> None:
        self.rng = np.random.default_rng(seed)
        self.max_steps = max_steps
        self.state = np.zeros(4)
        self.steps = 0

    def reset(self) -> np.ndarray:
        self.state = self.rng.uniform(-0.05, 0.05, size=4)
        self.steps = 0
        return self.state.astype(np.float32)

    def step(self, action: int) -> tuple[np.ndarray, float, bool]:
        x, x_dot, theta, theta_dot = self.state
        force = self.force if action == 1 else -self.force
        total = self.cart_mass + self.pole_mass
        cos, sin = math.cos(theta), math.sin(theta)
        temp = (force + self.pole_mass * self.half_length * theta_dot**2 * sin) / total
        theta_acc = (self.gravity * sin - cos * temp) / (
            self.half_length * (4.0 / 3.0 - self.pole_mass * cos**2 / total))
        x_acc = temp - self.pole_mass * self.half_length * theta_acc * cos / total
        self.state = np.array([x + self.tau * x_dot, x_dot + self.tau * x_acc,
                               theta + self.tau * theta_dot, theta_dot + self.tau * theta_acc])
        self.steps += 1
        done = abs(self.state[0]) > 2.4 or abs(self.state[2]) > 12 * 2 * math.pi / 360 or self.steps >= self.max_steps
        return self.state.astype(np.float32), 1.0, bool(done)


class NoisyCartPole(CartPole):
    """The same task with sensor noise on the observations (a harder curriculum stage)."""

    def step(self, action: int) -> tuple[np.ndarray, float, bool]:
        state, reward, done = super().step(action)
        return state + self.rng.normal(0.0, 0.01, size=4), reward, done  # NumPy's default dtype: float64


class Policy(nn.Module):
    def __init__(self, hidden: int = 64) -> None:
        super().__init__()
        self.affine = nn.Linear(4, hidden)
        self.action_head = nn.Linear(hidden, 2)
        self.value_head = nn.Linear(hidden, 1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = F.relu(self.affine(x))
        return F.softmax(self.action_head(x), dim=-1), self.value_head(x)


class ScoringPolicy(Policy):
    """A policy whose action head returns raw scores (logits), for numerically stable log-probabilities."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = F.relu(self.affine(x))
        return self.action_head(x), self.value_head(x)


def build(seed: int, model: nn.Module | None = None, lr: float = 1e-2) -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = model or Policy()
    return model, torch.optim.Adam(model.parameters(), lr=lr)


def discounted(rewards: list[float], gamma: float = GAMMA) -> torch.Tensor:
    """Normalized discounted returns, as a float32 tensor."""
    returns, running = [], 0.0
    for reward in reversed(rewards):
        running = reward + gamma * running
        returns.insert(0, running)
    result = torch.tensor(returns, dtype=torch.float32)
    return (result - result.mean()) / (result.std() + 1e-8) if len(result) > 1 else result


def a2c_loss(log_probs: list[torch.Tensor], values: list[torch.Tensor], returns: torch.Tensor) -> torch.Tensor:
    log_prob = torch.stack(log_probs)
    value = torch.cat(values)
    advantage = returns - value.detach()
    return -(log_prob * advantage).sum() + F.smooth_l1_loss(value, returns, reduction="sum")


@torch.no_grad()
def evaluate(model: nn.Module, seed: int, episodes: int = 5) -> float:
    """Mean return of greedy episodes from fixed starts."""
    total = 0.0
    for episode in range(episodes):
        env = CartPole(seed * 31 + 500_000 + episode)
        state, done = env.reset(), False
        while not done:
            out, _ = model(torch.from_numpy(state))
            state, reward, done = env.step(int(out.argmax()))
            total += reward
    return total / episodes


def metrics(model: nn.Module, seed: int, episode_returns: list[float], steps: int) -> dict[str, float]:
    return {"steps": steps, "mean_return": tail_mean(episode_returns), "eval_return": evaluate(model, seed)}


def chunked(model: nn.Module, states: torch.Tensor, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`model(states)` computed `size` states at a time (what fits on the device), concatenated."""
    parts = [model(states[i : i + size]) for i in range(0, len(states), size)]
    return torch.cat([p for p, _ in parts]), torch.cat([v for _, v in parts])
