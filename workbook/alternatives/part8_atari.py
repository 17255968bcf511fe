"""Correct alternatives to the Part 8 exercises (see workbook/alternatives/__init__.py).

Each is written from the exercise's docstring alone, in a style the reference does not use.
"""

from __future__ import annotations

from functools import partial

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.distributions.categorical import Categorical

from solutions.part1_ppo_core import calc_clipped_surrogate_objective, calc_entropy_bonus, calc_value_function_loss
from solutions.part2_cartpole import layer_init
from solutions.part8_atari import NatureCNN as _ReferenceCNN
from workbook.alternatives import alternative

part8 = partial(alternative, "part8_atari")


class _Trunk(nn.Module):
    """The Nature CNN trunk as named layers with F.relu in forward (no nn.Sequential, no ReLU modules)."""

    def __init__(self, frame_stack: int) -> None:
        super().__init__()
        self.conv1 = layer_init(nn.Conv2d(frame_stack, 32, kernel_size=8, stride=4), std=np.sqrt(2))
        self.conv2 = layer_init(nn.Conv2d(32, 64, kernel_size=4, stride=2), std=np.sqrt(2))
        self.conv3 = layer_init(nn.Conv2d(64, 64, kernel_size=3, stride=1), std=np.sqrt(2))
        self.fc = layer_init(nn.Linear(3136, 512), std=np.sqrt(2))

    def forward(self, x):
        x = F.relu(self.conv3(F.relu(self.conv2(F.relu(self.conv1(x))))))
        return F.relu(self.fc(x.flatten(start_dim=1)))


@part8("NatureCNN", "named_layers_functional_relu",
       "a trunk module of named layers with F.relu, heads built before the trunk, uint8 turned to float first and "
       "scaled by a multiplication")
class CNNNamedLayers(_ReferenceCNN):
    def __init__(self, num_actions, frame_stack=4):
        nn.Module.__init__(self)
        self.actor_head = layer_init(nn.Linear(512, num_actions), std=0.01)
        self.critic_head = layer_init(nn.Linear(512, 1), std=1.0)
        self.trunk = _Trunk(frame_stack)

    def features(self, obs):
        return self.trunk(obs.float() * (1.0 / 255))

    def forward(self, obs):
        return self.logits_and_value(obs)[0]

    def value(self, obs):
        return self.logits_and_value(obs)[1]

    def logits_and_value(self, obs):
        hidden = self.features(obs)
        return self.actor_head(hidden), self.critic_head(hidden)


class _TopDownTrunk(nn.Module):
    """The trunk with its layers registered from the top (fc first, conv1 last) and applied bottom-up."""

    def __init__(self, frame_stack: int) -> None:
        super().__init__()
        self.fc = layer_init(nn.Linear(64 * 7 * 7, 512))
        self.conv3 = layer_init(nn.Conv2d(64, 64, 3))
        self.conv2 = layer_init(nn.Conv2d(32, 64, 4, stride=2))
        self.conv1 = layer_init(nn.Conv2d(frame_stack, 32, 8, stride=4))

    def forward(self, x):
        for conv in (self.conv1, self.conv2, self.conv3):
            x = torch.relu(conv(x))
        return torch.relu(self.fc(x.reshape(len(x), -1)))


@part8("NatureCNN", "layers_registered_top_down",
       "the trunk's layers registered from the last to the first (applied first to last), division by 255 with "
       "torch.div, and value/forward written on logits_and_value")
class CNNTopDown(CNNNamedLayers):  # forward/value/logits_and_value as CNNNamedLayers writes them
    def __init__(self, num_actions, frame_stack=4):
        nn.Module.__init__(self)
        self.critic_head = layer_init(nn.Linear(512, 1), std=1.0)
        self.actor_head = layer_init(nn.Linear(512, num_actions), std=0.01)
        self.trunk = _TopDownTrunk(frame_stack)

    def features(self, obs):
        return self.trunk(torch.div(obs, 255.0))


class _Scale(nn.Module):
    def forward(self, x):
        return x.float() / 255.0


@part8("NatureCNN", "scaling_inside_the_trunk",
       "the scaling as the trunk's first module (the class docstring's 'trunk: obs / 255 → conv …'), so features is "
       "the trunk alone")
class CNNScalingInTrunk(_ReferenceCNN):
    def __init__(self, num_actions, frame_stack=4):
        super().__init__(num_actions, frame_stack)
        self.trunk = nn.Sequential(_Scale(), *self.trunk)

    def features(self, obs):
        return self.trunk(obs)


@part8("EpisodicLife", "real_done_flag_and_early_return",
       "CleanRL's shape: a was_real_done flag, lives compared through a local, and reset with early returns")
class LifeEarlyReturns(gym.Wrapper):
    def __init__(self, env):
        super().__init__(env)
        self.lives = 0
        self.game_over = True

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        was_real_done = terminated or truncated
        current = int(info["lives"])
        life_lost = current < self.lives
        self.lives, self.game_over = current, bool(was_real_done)
        return obs, reward, bool(terminated or life_lost), truncated, info

    def reset(self, *, seed=None, options=None):
        self.game_over, real = False, self.game_over
        if not real:
            obs, _, terminated, truncated, info = self.env.step(0)
            if not (terminated or truncated):
                self.lives = int(info["lives"])
                return obs, info
        obs, info = self.env.reset(seed=seed, options=options)
        self.lives = int(info["lives"])
        return obs, info


@part8("compute_atari_objective", "softmax_probs_and_summed_terms",
       "one logits_and_value call, a Categorical built from softmax probabilities, the values flattened with "
       "view(-1), and the terms summed from a list")
def objective_probs_and_summed_terms(network, critic, minibatch, args):
    logits, values = network.logits_and_value(minibatch.obs)
    dist = Categorical(probs=torch.softmax(logits, dim=-1))
    terms = [calc_clipped_surrogate_objective(dist, minibatch.actions, minibatch.advantages, minibatch.logprobs,
                                              args.clip_coef),
             -calc_value_function_loss(values.view(-1), minibatch.returns, args.vf_coef),
             calc_entropy_bonus(dist, args.ent_coef)]
    return torch.stack(terms).sum()
