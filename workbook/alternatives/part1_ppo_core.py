"""Correct alternatives to the Part 1 exercises (see workbook/alternatives/__init__.py).

Each is written from the exercise's docstring alone, in a style the reference does not use.
"""

from __future__ import annotations

from functools import partial

import numpy as np
import torch
import torch.nn.functional as F
from torch import optim

from workbook.alternatives import alternative

part1 = partial(alternative, "part1_ppo_core")


@part1("compute_advantages", "forward_weighted_sums",
       "each A_t as the explicit sum Σ_k (Π γλ(1 − d)) δ_{t+k} with cumprod weights, no backward recursion; "
       "detach() instead of torch.no_grad()")
def gae_as_weighted_sums(next_value, next_terminated, rewards, values, terminated, gamma, gae_lambda):
    if not (0.0 <= gamma <= 1.0 and 0.0 <= gae_lambda <= 1.0):
        raise ValueError("gamma and gae_lambda must lie in [0, 1]")
    values, next_value = values.detach(), next_value.detach()
    done_next = torch.cat([terminated[1:], next_terminated.unsqueeze(0)]).float()
    v_next = torch.cat([values[1:], next_value.unsqueeze(0)])
    deltas = rewards + gamma * v_next * (1.0 - done_next) - values
    decay = gamma * gae_lambda * (1.0 - done_next)  # decay[s]: the weight from step s to step s + 1
    steps = values.shape[0]
    advantages = torch.empty_like(values)
    for t in range(steps):
        weights = torch.cumprod(torch.cat([torch.ones_like(decay[:1]), decay[t:steps - 1]]), dim=0)
        advantages[t] = (weights * deltas[t:]).sum(dim=0)
    return advantages


@part1("get_minibatch_indices", "choice_without_replacement_and_slices",
       "the order drawn with rng.choice(..., replace=False) and cut with slices")
def minibatches_by_choice(rng, batch_size, minibatch_size):
    if batch_size <= 0 or minibatch_size <= 0 or batch_size % minibatch_size:
        raise ValueError(f"batch_size={batch_size} must be a positive multiple of minibatch_size={minibatch_size}")
    order = rng.choice(batch_size, size=batch_size, replace=False)
    return [order[start:start + minibatch_size] for start in range(0, batch_size, minibatch_size)]


@part1("calc_clipped_surrogate_objective", "where_by_advantage_sign",
       "torch.where on the sign of the advantage (cap the ratio at 1 + ε when A ≥ 0, floor it at 1 − ε "
       "when A < 0) instead of min(r·A, clip(r)·A)")
def surrogate_with_where(dist, mb_action, mb_advantages, mb_logprobs, clip_coef, eps=1e-8):
    if clip_coef <= 0:
        raise ValueError("clip_coef must be positive")
    adv = (mb_advantages - mb_advantages.mean()) / (torch.std(mb_advantages, unbiased=True) + eps)
    ratio = (dist.log_prob(mb_action) - mb_logprobs).exp()
    bounded = torch.where(adv >= 0, torch.minimum(ratio, torch.tensor(1.0 + clip_coef)),
                          torch.maximum(ratio, torch.tensor(1.0 - clip_coef)))
    return (bounded * adv).mean()


@part1("calc_value_function_loss", "mse_loss", "F.mse_loss (mean reduction) times vf_coef")
def value_loss_mse(values, mb_returns, vf_coef):
    return F.mse_loss(values, mb_returns) * vf_coef


@part1("calc_clipped_value_function_loss", "clamp_with_tensor_bounds_and_stack",
       "torch.clamp with tensor bounds old ± c, then the max over a stacked pair")
def clipped_value_loss_stacked(values, old_values, mb_returns, vf_coef, clip_range):
    if clip_range <= 0:
        raise ValueError("clip_range must be positive")
    clipped = torch.clamp(values, old_values - clip_range, old_values + clip_range)
    errors = torch.stack([(values - mb_returns) ** 2, (clipped - mb_returns) ** 2])
    return 0.5 * vf_coef * errors.max(dim=0).values.mean()


@part1("calc_entropy_bonus", "sum_over_count", "dist.entropy() summed, divided by the count, then scaled")
def entropy_sum_over_count(dist, ent_coef):
    entropy = dist.entropy()
    return entropy.sum() / entropy.numel() * ent_coef


@part1("PPOScheduler", "precomputed_linspace",
       "the whole schedule precomputed with np.linspace; over-stepping raises from the exhausted list")
class SchedulerFromLinspace:
    def __init__(self, optimizer, initial_lr, end_lr, total_phases):
        if total_phases <= 0 or initial_lr < 0 or end_lr < 0:
            raise ValueError("need total_phases > 0 and non-negative learning rates")
        self.optimizer = optimizer
        self.schedule = list(np.linspace(initial_lr, end_lr, total_phases + 1)[1:])
        self.n_step_calls = 0

    def step(self):
        if not self.schedule:
            raise RuntimeError("PPOScheduler.step() called more than total_phases times")
        lr = float(self.schedule.pop(0))
        self.n_step_calls += 1
        for group in self.optimizer.param_groups:
            group["lr"] = lr


@part1("PPOScheduler", "lerp_exact_at_both_ends",
       "the rate written as (1 − f)·initial_lr + f·end_lr (exact at f = 0 and f = 1), the guard on == total_phases")
class SchedulerLerp:
    def __init__(self, optimizer, initial_lr, end_lr, total_phases):
        if total_phases <= 0 or min(initial_lr, end_lr) < 0:
            raise ValueError("need total_phases > 0 and non-negative learning rates")
        self.optimizer, self.initial_lr, self.end_lr, self.total_phases = optimizer, initial_lr, end_lr, total_phases
        self.n_step_calls = 0

    def step(self):
        if self.n_step_calls == self.total_phases:
            raise RuntimeError("PPOScheduler.step() called more than total_phases times")
        self.n_step_calls += 1
        f = self.n_step_calls / self.total_phases
        for group in self.optimizer.param_groups:
            group["lr"] = (1.0 - f) * self.initial_lr + f * self.end_lr


@part1("calc_clipped_surrogate_objective", "probability_ratio_and_negated_max",
       "the ratio as a quotient of probabilities, the min written as −max(−r·Â, −clip(r)·Â)")
def surrogate_negated_max(dist, mb_action, mb_advantages, mb_logprobs, clip_coef, eps=1e-8):
    if not clip_coef > 0:
        raise ValueError("clip_coef must be positive")
    adv = (mb_advantages - mb_advantages.mean()) / (mb_advantages.std() + eps)
    ratio = dist.log_prob(mb_action).exp() / mb_logprobs.exp()
    return -torch.max(-ratio * adv, -ratio.clamp(1 - clip_coef, 1 + clip_coef) * adv).mean()


@part1("calc_entropy_bonus", "probs_times_clamped_logits",
       "−Σ p·log p by hand, with the log-probabilities clamped to a finite minimum first (p = 0 gives 0, not NaN)")
def entropy_clamped_logits(dist, ent_coef):
    logp = dist.logits.clamp(min=torch.finfo(dist.logits.dtype).min)
    return ent_coef * (-(dist.probs * logp).sum(-1)).mean()


@part1("make_optimizer", "one_param_group_per_network",
       "Adam with two param groups (actor, critic) sharing the same settings")
def optimizer_two_groups(actor, critic, total_phases, initial_lr, end_lr=0.0):
    from solutions.part1_ppo_core import PPOScheduler

    optimizer = optim.Adam([{"params": actor.parameters()}, {"params": critic.parameters()}],
                           lr=initial_lr, eps=1e-5, maximize=True, weight_decay=0.0)
    return optimizer, PPOScheduler(optimizer, initial_lr, end_lr, total_phases)
