"""Correct alternatives to the Part 4 exercises (see workbook/alternatives/__init__.py).

Each is written from the exercise's docstring alone, in a style the reference does not use.
"""

from __future__ import annotations

from functools import partial

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.distributions import Independent, Normal

from solutions.part1_ppo_core import calc_clipped_surrogate_objective
from solutions.part2_cartpole import layer_init
from solutions.part4_continuous import ContinuousAgent as _ReferenceAgent
from solutions.part4_continuous import ObservationNormalizer as _ReferenceNormalizer
from solutions.part4_continuous import RewardScaler as _ReferenceScaler
from solutions.part4_continuous import RunningMeanStd as _ReferenceRMS
from solutions.part4_continuous import clip_action as _reference_clip
from workbook.alternatives import alternative

part4 = partial(alternative, "part4_continuous")


@part4("GaussianActor", "cleanrl_style_layers",
       "three named Linear layers with F.tanh in forward (no nn.Sequential, no Tanh modules), CleanRL's (1, action_dim) "
       "log-std, and a scale that Normal broadcasts instead of expand_as")
class ActorExplicitLayers(nn.Module):
    def __init__(self, num_obs, action_dim, hidden_size=64, init_log_std=0.0):
        super().__init__()
        self.fc1 = layer_init(nn.Linear(num_obs, hidden_size))
        self.fc2 = layer_init(nn.Linear(hidden_size, hidden_size))
        self.head = layer_init(nn.Linear(hidden_size, action_dim), std=0.01)
        self.log_std = nn.Parameter(init_log_std * torch.ones(1, action_dim))

    def forward(self, obs):
        return self.head(F.tanh(self.fc2(F.tanh(self.fc1(obs)))))

    def dist(self, obs):
        return Independent(Normal(self.forward(obs), torch.exp(self.log_std)), reinterpreted_batch_ndims=1)


@part4("GaussianActor", "head_created_first",
       "the head and log σ created before the hidden layers (registration order differs from the order applied), "
       "layers initialised in a loop after construction")
class ActorHeadFirst(nn.Module):
    def __init__(self, num_obs, action_dim, hidden_size=64, init_log_std=0.0):
        super().__init__()
        self.log_std = nn.Parameter(torch.full((action_dim,), float(init_log_std)))
        self.head = nn.Linear(hidden_size, action_dim)
        self.hidden = nn.ModuleList([nn.Linear(num_obs, hidden_size), nn.Linear(hidden_size, hidden_size)])
        for layer in self.hidden:
            layer_init(layer)
        layer_init(self.head, std=0.01)

    def forward(self, obs):
        x = obs
        for layer in self.hidden:
            x = torch.tanh(layer(x))
        return self.head(x)

    def dist(self, obs):
        mean = self(obs)
        return Independent(Normal(mean, self.log_std.exp().expand_as(mean)), 1)


@part4("clip_action", "torch_clamp_with_tensor_bounds", "torch.clamp with tensor bounds on a copy, then .numpy()")
def clip_with_torch(actions, low, high):
    return torch.clamp(actions.clone(), torch.from_numpy(low), torch.from_numpy(high)).numpy()


@part4("clip_action", "numpy_minimum_maximum", "np.minimum(np.maximum(a, low), high) on a detached CPU copy")
def clip_with_minimum_maximum(actions, low, high):
    return np.minimum(np.maximum(actions.detach().cpu().numpy(), low), high)


@part4("RunningMeanStd", "welford_one_sample_at_a_time",
       "Welford's update, one sample at a time (the same statistics as the batch formula, in float64)")
class RMSWelford(_ReferenceRMS):
    def update(self, batch):
        for x in batch.double():
            self.count += 1
            d = x - self.mean
            self.mean = self.mean + d / self.count
            self.var = (self.var * (self.count - 1) + d * (x - self.mean)) / self.count


@part4("RunningMeanStd", "variance_form",
       "the combined variance written as weighted variances plus δ²·n_a·n_b/n², without forming M2")
class RMSVarianceForm(_ReferenceRMS):
    def update(self, batch):
        x = batch.to(torch.float64)
        n_a, n_b = self.count, x.shape[0]
        n = n_a + n_b
        m_b = x.mean(dim=0)
        v_b = ((x - m_b) ** 2).mean(dim=0)
        delta = m_b - self.mean
        self.var = (n_a * self.var + n_b * v_b) / n + delta**2 * n_a * n_b / n**2
        self.mean = (n_a * self.mean + n_b * m_b) / n
        self.count = n


@part4("ObservationNormalizer", "float32_arithmetic",
       "normalises in the observation's float32 (statistics cast down) with torch.clip")
class NormalizerFloat32(_ReferenceNormalizer):
    def __call__(self, obs, update=True):
        if update:
            self.rms.update(obs)
        mean, std = self.rms.mean.to(obs.dtype), (self.rms.var + self.epsilon).sqrt().to(obs.dtype)
        return torch.clip((obs - mean) / std, min=-self.clip, max=self.clip)


@part4("RewardScaler", "multiply_by_mask",
       "G reset by multiplying with the not-reset mask; statistics updated through boolean indexing of a float copy")
class ScalerMask(_ReferenceScaler):
    def __call__(self, rewards, reset_step):
        keep = (~reset_step).to(torch.float64)
        self.returns = (self.gamma * self.returns + rewards.to(torch.float64)) * keep
        live = self.returns[keep.bool()]
        if live.numel() > 0:
            self.return_rms.update(live)
        std = torch.sqrt(self.return_rms.var + self.epsilon)
        return torch.clamp(rewards / std.float(), -self.clip, self.clip)


@part4("ContinuousAgent", "bootstrap_with_where",
       "V of every new observation computed in the same inference block, the bootstrap added with torch.where")
class AgentWithWhere(_ReferenceAgent):
    def play_step(self):
        obs, dones = self.next_obs, self.next_done
        with torch.inference_mode():
            dist = self.actor.dist(obs)
            actions = dist.sample()
            logprobs = dist.log_prob(actions)
            values = self.critic(obs).squeeze(-1)
        step = self.envs.step(_reference_clip(actions, self.action_low, self.action_high))
        raw_obs, raw_rewards, terminated, truncated, infos = step
        next_obs = self.obs_normalizer(torch.from_numpy(np.asarray(raw_obs, dtype=np.float32)))
        rewards = self.reward_scaler(torch.from_numpy(np.asarray(raw_rewards, dtype=np.float32)), dones)
        terminated, truncated = torch.from_numpy(terminated), torch.from_numpy(truncated)
        with torch.inference_mode():
            future = self.gamma * self.critic(next_obs).squeeze(-1)
        rewards = torch.where(truncated & ~terminated, rewards + future, rewards)
        self.memory.add(obs, actions, logprobs, values, rewards, dones)
        self.next_obs, self.next_done = next_obs, terminated | truncated
        self.step += self.envs.num_envs
        return infos


@part4("compute_continuous_objective", "inline_value_and_entropy_terms",
       "the value loss as F.mse_loss and the entropy bonus written out, only the surrogate from Part 1")
def objective_inline(actor, critic, minibatch, args):
    dist = actor.dist(minibatch.obs)
    surrogate = calc_clipped_surrogate_objective(dist, minibatch.actions, minibatch.advantages, minibatch.logprobs,
                                                 args.clip_coef)
    value_loss = F.mse_loss(critic(minibatch.obs)[:, 0], minibatch.returns)
    return surrogate - args.vf_coef * value_loss + args.ent_coef * dist.entropy().mean()
