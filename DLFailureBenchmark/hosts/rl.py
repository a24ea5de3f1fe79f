"""An actor-critic agent balancing a pole on a cart, simulated in code (no gym needed).

`CartPole` integrates the cart and pole equations of motion (Barto, Sutton and Anderson 1983)
with Euler steps of 20 ms and returns NumPy float32 observations (position, velocity, angle,
angular velocity); an episode ends when the cart leaves the track, the pole leans past 12
degrees, or after `max_steps`. `Policy` shares one hidden layer between an actor (action
probabilities) and a critic (the state's value). Episode `n` of a run starts from `(seed, n)`.
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
GRAVITY, CART_MASS, POLE_MASS, HALF_POLE, PUSH, DT = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02
TRACK_LIMIT, ANGLE_LIMIT = 2.4, math.pi / 15  # metres from the centre; 12 degrees from upright


def accelerations(angle: float, spin: float, force: float) -> tuple[float, float]:
    """The cart's and the pole's accelerations under `force` (newtons), pole at `angle` turning at `spin`."""
    mass = CART_MASS + POLE_MASS
    cos, sin = math.cos(angle), math.sin(angle)
    lean = (force + POLE_MASS * HALF_POLE * spin**2 * sin) / mass
    pole = (GRAVITY * sin - cos * lean) / (HALF_POLE * (4.0 / 3.0 - POLE_MASS * cos**2 / mass))
    cart = lean - POLE_MASS * HALF_POLE * pole * cos / mass
    return cart, pole


class CartPole:
    """The balancing task: action 1 pushes the cart right, 0 left; every step the pole stays up earns 1."""

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
        position, velocity, angle, spin = self.state
        cart, pole = accelerations(angle, spin, PUSH if action == 1 else -PUSH)
        self.state = np.array([position + DT * velocity, velocity + DT * cart, angle + DT * spin, spin + DT * pole])
        self.steps += 1
        fallen = abs(self.state[0]) > TRACK_LIMIT or abs(self.state[2]) > ANGLE_LIMIT
        return self.state.astype(np.float32), 1.0, bool(fallen or self.steps >= self.max_steps)


class NoisyCartPole(CartPole):
    """The same task with sensor noise on the observations (a harder curriculum stage)."""

    def step(self, action: int) -> tuple[np.ndarray, float, bool]:
        state, reward, done = super().step(action)
        return state + self.rng.normal(0.0, 0.01, size=4), reward, done  # NumPy's default dtype: float64


class Policy(nn.Module):
    """Observation -> shared ReLU layer -> (action probabilities, state value)."""

    def __init__(self, hidden: int = 64) -> None:
        super().__init__()
        self.shared = nn.Linear(4, hidden)
        self.actor = nn.Linear(hidden, 2)
        self.critic = nn.Linear(hidden, 1)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.shared(x))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.features(x)
        return self.actor(h).softmax(dim=-1), self.critic(h)


class ScoringPolicy(Policy):
    """A policy whose actor returns raw scores (logits), for numerically stable log-probabilities."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.features(x)
        return self.actor(h), self.critic(h)


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
