"""External (pytorch/examples, reinforcement_learning/reinforce.py), exceptional data: one NaN observation.

Adapted from pytorch/examples reinforcement_learning/reinforce.py (BSD-3-Clause, Copyright (c)
2017 the PyTorch contributors). `Policy`, `select_action`, `finish_episode` and the episode loop
(upstream's `main`, here `run`) are upstream's; changed to run here: gymnasium's CartPole-v1 is
the cart-pole of `hosts/rl.py` behind gymnasium's API (`external.GymCartPole`), argparse is a
namespace of its options, and the loop stops after 60 episodes (or at the harness's `until`)
rather than only when solved. The program writes no checkpoint.

The fault is the environment's: in episode 30 the pole's angle sensor drops out for one reading
and the observation is NaN. The policy's probabilities become NaN and `Categorical` refuses
them in `select_action`.
"""

import argparse
from itertools import count
from collections import deque

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.distributions import Categorical

import daifu
from DLFailureBenchmark.hosts import external

STEP_NAME = "i_episode"
EPISODES, GLITCH = 60, (30, 12)


class Policy(nn.Module):
    def __init__(self):
        super(Policy, self).__init__()
        self.affine1 = nn.Linear(4, 128)
        self.dropout = nn.Dropout(p=0.6)
        self.affine2 = nn.Linear(128, 2)

        self.saved_log_probs = []
        self.rewards = []

    def forward(self, x):
        x = self.affine1(x)
        x = self.dropout(x)
        x = F.relu(x)
        action_scores = self.affine2(x)
        return F.softmax(action_scores, dim=1)


def select_action(state):
    state = torch.from_numpy(state).float().unsqueeze(0)
    probs = policy(state)
    m = Categorical(probs)
    action = m.sample()
    policy.saved_log_probs.append(m.log_prob(action))
    return action.item()


def finish_episode():
    R = 0
    policy_loss = []
    returns = deque()
    for r in policy.rewards[::-1]:
        R = r + args.gamma * R
        returns.appendleft(R)
    returns = torch.tensor(returns)
    returns = (returns - returns.mean()) / (returns.std() + eps)
    for log_prob, R in zip(policy.saved_log_probs, returns):
        policy_loss.append(-log_prob * R)
    optimizer.zero_grad()
    policy_loss = torch.cat(policy_loss).sum()
    policy_loss.backward()
    optimizer.step()
    del policy.rewards[:]
    del policy.saved_log_probs[:]


@daifu.transform
def run():
    running_reward = 10
    rewards = []
    for i_episode in count(1):
        if i_episode > args.episodes or (args.until is not None and i_episode > args.until):
            return i_episode - 1, running_reward, rewards
        state, _ = env.reset()
        ep_reward = 0
        for t in range(1, 10000):  # Don't infinite loop while learning
            action = select_action(state)
            state, reward, terminated, truncated, _ = env.step(action)
            if args.render:
                env.render()
            policy.rewards.append(reward)
            ep_reward += reward
            if terminated or truncated:
                break

        running_reward = 0.05 * ep_reward + (1 - 0.05) * running_reward
        rewards.append(ep_reward)
        finish_episode()
        if i_episode % args.log_interval == 0:
            print(f'Episode {i_episode}\tLast reward: {ep_reward:.2f}\tAverage reward: {running_reward:.2f}')
        if running_reward > env.spec.reward_threshold:
            print(f"Solved! Running reward is now {running_reward} and the last episode runs to {t} time steps!")
            break
    return i_episode, running_reward, rewards


def main(workdir, seed=0, resume=None, until=None):
    global args, env, policy, optimizer, eps
    if resume is not None:
        raise ValueError("reinforce.py writes no checkpoint: there is nothing to resume from")
    args = argparse.Namespace(gamma=0.99, seed=543 + seed, render=False, log_interval=10, episodes=EPISODES,
                              until=until)
    env = external.GymCartPole(args.seed, glitch=GLITCH)  # gym.make('CartPole-v1')
    env.reset(seed=args.seed)
    torch.manual_seed(args.seed)
    policy = Policy()
    optimizer = optim.Adam(policy.parameters(), lr=1e-2)
    eps = np.finfo(np.float32).eps.item()

    episodes, running_reward, rewards = run()
    return {"steps": episodes, "running_reward": running_reward, "mean_return": sum(rewards[-10:]) / len(rewards[-10:])}
