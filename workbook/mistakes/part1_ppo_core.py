"""Known-wrong versions of the Part 1 exercises (see workbook/mistakes/__init__.py)."""

from __future__ import annotations

import itertools
from functools import partial

import numpy as np
import torch
from torch import optim

from solutions.part1_ppo_core import PPOScheduler as _ReferenceScheduler
from workbook.mistakes import mistake

part1 = partial(mistake, "part1_ppo_core")


# --- compute_advantages ---------------------------------------------------------------

def _gae(next_value, next_terminated, rewards, values, terminated, gamma, gae_lambda, *,
         trace_decay=None, flag_shift=1, mask_delta=True, mask_trace=True, no_grad=True):
    """A configurable GAE so each mistake below is one switch away from the reference."""
    context = torch.no_grad() if no_grad else torch.enable_grad()
    with context:
        next_values = torch.cat([values[1:], next_value[None]])
        flags = torch.cat([terminated[1:], next_terminated[None]]) if flag_shift == 1 else terminated
        nonterminal = 1.0 - flags.to(values.dtype)
        deltas = rewards + gamma * next_values * (nonterminal if mask_delta else 1.0) - values
        decay = gamma * gae_lambda if trace_decay is None else trace_decay(gamma, gae_lambda)
        out, running = [], torch.zeros_like(next_value)
        for t in reversed(range(values.shape[0])):
            running = deltas[t] + decay * (nonterminal[t] if mask_trace else 1.0) * running
            out.append(running)
        return torch.stack(out[::-1])


@part1("compute_advantages", "gamma_instead_of_gamma_lambda", "γ was used where γ·λ belongs in the GAE recursion")
def gae_gamma_only(next_value, next_terminated, rewards, values, terminated, gamma, gae_lambda):
    return _gae(next_value, next_terminated, rewards, values, terminated, gamma, gae_lambda, trace_decay=lambda gamma, lam: gamma)


@part1("compute_advantages", "lambda_instead_of_gamma_lambda", "λ was used where γ·λ belongs in the GAE recursion")
def gae_lambda_only(next_value, next_terminated, rewards, values, terminated, gamma, gae_lambda):
    return _gae(next_value, next_terminated, rewards, values, terminated, gamma, gae_lambda, trace_decay=lambda gamma, lam: lam)


@part1("compute_advantages", "terminated_t_instead_of_t_plus_1",
       "terminated[t] was used where terminated[t + 1] belongs (the flag of the *next* observation)")
def gae_current_flag(next_value, next_terminated, rewards, values, terminated, gamma, gae_lambda):
    return _gae(next_value, next_terminated, rewards, values, terminated, gamma, gae_lambda, flag_shift=0)


@part1("compute_advantages", "no_reset_at_episode_boundary",
       "the GAE recursion was not reset at episode boundaries (missing (1 − d) on γλ·A_{t+1})")
def gae_no_trace_reset(next_value, next_terminated, rewards, values, terminated, gamma, gae_lambda):
    return _gae(next_value, next_terminated, rewards, values, terminated, gamma, gae_lambda, mask_trace=False)


@part1("compute_advantages", "ignores_termination",
       "termination was ignored entirely: values bootstrap across episode ends")
def gae_ignores_termination(next_value, next_terminated, rewards, values, terminated, gamma, gae_lambda):
    return _gae(next_value, next_terminated, rewards, values, terminated, gamma, gae_lambda, mask_delta=False, mask_trace=False)


@part1("compute_advantages", "nan_passes_the_range_check",
       "gamma or gae_lambda was checked with `x < 0 or x > 1`, which lets NaN through (every comparison with NaN is False)")
def gae_nan_accepted(next_value, next_terminated, rewards, values, terminated, gamma, gae_lambda):
    if gamma < 0 or gamma > 1 or gae_lambda < 0 or gae_lambda > 1:
        raise ValueError("gamma and gae_lambda must lie in [0, 1]")
    return _gae(next_value, next_terminated, rewards, values, terminated, gamma, gae_lambda)


@part1("compute_advantages", "gradient_leaks_into_advantages",
       "the advantages were computed with autograd on, so gradients flow into the critic through them")
def gae_with_grad(next_value, next_terminated, rewards, values, terminated, gamma, gae_lambda):
    return _gae(next_value, next_terminated, rewards, values, terminated, gamma, gae_lambda, no_grad=False)


@part1("compute_advantages", "next_value_not_detached",
       "values were detached but next_value was not: gradient still flows into the critic through V(s_T)")
def gae_next_value_attached(next_value, next_terminated, rewards, values, terminated, gamma, gae_lambda):
    return _gae(next_value, next_terminated, rewards, values.detach(), terminated, gamma, gae_lambda, no_grad=False)


# --- get_minibatch_indices ------------------------------------------------------------

@part1("get_minibatch_indices", "sampled_with_replacement",
       "indices were sampled with replacement, so some transitions repeat and others are skipped")
def minibatches_with_replacement(rng, batch_size, minibatch_size):
    if batch_size % minibatch_size:
        raise ValueError("batch_size is not a multiple of minibatch_size")
    return list(rng.integers(0, batch_size, size=batch_size).reshape(-1, minibatch_size))


@part1("get_minibatch_indices", "not_shuffled", "the indices were not shuffled (minibatches are consecutive steps)")
def minibatches_in_order(rng, batch_size, minibatch_size):
    if batch_size % minibatch_size:
        raise ValueError("batch_size is not a multiple of minibatch_size")
    return list(np.arange(batch_size).reshape(-1, minibatch_size))


@part1("get_minibatch_indices", "fresh_permutation_per_minibatch",
       "a fresh permutation was drawn for each minibatch, so minibatches overlap")
def minibatches_overlapping(rng, batch_size, minibatch_size):
    if batch_size % minibatch_size:
        raise ValueError("batch_size is not a multiple of minibatch_size")
    return [rng.permutation(batch_size)[:minibatch_size] for _ in range(batch_size // minibatch_size)]


@part1("get_minibatch_indices", "global_numpy_rng",
       "the global np.random state was used instead of the rng argument, so the seed does not fix the result")
def minibatches_global_rng(rng, batch_size, minibatch_size):
    if batch_size % minibatch_size:
        raise ValueError("batch_size is not a multiple of minibatch_size")
    return list(np.random.permutation(batch_size).reshape(-1, minibatch_size))


@part1("get_minibatch_indices", "silently_drops_remainder",
       "a batch_size that is not a multiple of minibatch_size was accepted silently (the remainder is dropped)")
def minibatches_drop_remainder(rng, batch_size, minibatch_size):
    n = batch_size // minibatch_size
    return list(rng.permutation(batch_size)[: n * minibatch_size].reshape(n, minibatch_size))


# --- calc_clipped_surrogate_objective -------------------------------------------------

def _surrogate(dist, mb_action, mb_advantages, mb_logprobs, clip_coef, eps=1e-8, *, normalise=True,
               ratio_fn=None, combine=torch.minimum, clip_advantage=False, sign=1.0, scale=None, detach_clipped=False):
    if scale is None:
        scale = mb_advantages.std() + eps
    adv = (mb_advantages - mb_advantages.mean()) / scale if normalise else mb_advantages
    new = dist.log_prob(mb_action)
    ratio = torch.exp(new - mb_logprobs) if ratio_fn is None else ratio_fn(new, mb_logprobs)
    if clip_advantage:
        clipped = ratio * torch.clamp(adv, 1 - clip_coef, 1 + clip_coef)
    else:
        clipped = torch.clamp(ratio, 1 - clip_coef, 1 + clip_coef) * adv
    if detach_clipped:
        clipped = clipped.detach()
    return sign * combine(ratio * adv, clipped).mean()


@part1("calc_clipped_surrogate_objective", "sign_flipped",
       "the objective's sign was flipped (a loss to minimise was returned, but the optimizer maximises)")
def surrogate_negated(dist, mb_action, mb_advantages, mb_logprobs, clip_coef, eps=1e-8):
    return _surrogate(dist, mb_action, mb_advantages, mb_logprobs, clip_coef, eps, sign=-1.0)


@part1("calc_clipped_surrogate_objective", "max_instead_of_min", "max was used where min belongs")
def surrogate_max(dist, mb_action, mb_advantages, mb_logprobs, clip_coef, eps=1e-8):
    return _surrogate(dist, mb_action, mb_advantages, mb_logprobs, clip_coef, eps, combine=torch.maximum)


@part1("calc_clipped_surrogate_objective", "clipped_advantage_not_ratio",
       "the advantage was clipped instead of the probability ratio")
def surrogate_clip_advantage(dist, mb_action, mb_advantages, mb_logprobs, clip_coef, eps=1e-8):
    return _surrogate(dist, mb_action, mb_advantages, mb_logprobs, clip_coef, eps, clip_advantage=True)


@part1("calc_clipped_surrogate_objective", "unnormalised_advantages",
       "the advantages were not normalised (mean 0, std 1) within the minibatch")
def surrogate_unnormalised(dist, mb_action, mb_advantages, mb_logprobs, clip_coef, eps=1e-8):
    return _surrogate(dist, mb_action, mb_advantages, mb_logprobs, clip_coef, eps, normalise=False)


@part1("calc_clipped_surrogate_objective", "inverse_ratio",
       "the ratio was inverted: exp(old − new) instead of exp(new − old)")
def surrogate_inverse_ratio(dist, mb_action, mb_advantages, mb_logprobs, clip_coef, eps=1e-8):
    return _surrogate(dist, mb_action, mb_advantages, mb_logprobs, clip_coef, eps, ratio_fn=lambda new, old: torch.exp(old - new))


@part1("calc_clipped_surrogate_objective", "logprob_difference_as_ratio",
       "the log-prob difference (new − old) was used as the ratio without exp()")
def surrogate_no_exp(dist, mb_action, mb_advantages, mb_logprobs, clip_coef, eps=1e-8):
    return _surrogate(dist, mb_action, mb_advantages, mb_logprobs, clip_coef, eps, ratio_fn=lambda new, old: new - old)


@part1("calc_clipped_surrogate_objective", "eps_argument_ignored",
       "eps was hard-coded (1e-8) in the normalisation instead of the eps argument")
def surrogate_fixed_eps(dist, mb_action, mb_advantages, mb_logprobs, clip_coef, eps=1e-8):
    return _surrogate(dist, mb_action, mb_advantages, mb_logprobs, clip_coef, 1e-8)


@part1("calc_clipped_surrogate_objective", "advantages_normalised_in_place",
       "the advantages were normalised in place (-=, /=), which overwrites the caller's tensor")
def surrogate_in_place(dist, mb_action, mb_advantages, mb_logprobs, clip_coef, eps=1e-8):
    std = mb_advantages.std()
    mb_advantages -= mb_advantages.mean()
    mb_advantages /= std + eps
    return _surrogate(dist, mb_action, mb_advantages, mb_logprobs, clip_coef, eps, normalise=False)


@part1("calc_clipped_surrogate_objective", "clipped_term_detached",
       "the clipped term was detached: where the ratio is inside [1 − ε, 1 + ε] the min's tie then passes "
       "only half the gradient")
def surrogate_detached_clip(dist, mb_action, mb_advantages, mb_logprobs, clip_coef, eps=1e-8):
    return _surrogate(dist, mb_action, mb_advantages, mb_logprobs, clip_coef, eps, detach_clipped=True)


# --- calc_value_function_loss ---------------------------------------------------------

@part1("calc_value_function_loss", "forgot_vf_coef", "vf_coef was not applied")
def value_loss_no_coef(values, mb_returns, vf_coef):
    return (values - mb_returns).pow(2).mean()


@part1("calc_value_function_loss", "sum_instead_of_mean", "the squared errors were summed instead of averaged")
def value_loss_sum(values, mb_returns, vf_coef):
    return vf_coef * (values - mb_returns).pow(2).sum()


@part1("calc_value_function_loss", "extra_half_factor",
       "a factor 0.5 was added (that belongs to the clipped form, not this one)")
def value_loss_half(values, mb_returns, vf_coef):
    return vf_coef * 0.5 * (values - mb_returns).pow(2).mean()


@part1("calc_value_function_loss", "absolute_error", "the absolute error was used instead of the squared error")
def value_loss_l1(values, mb_returns, vf_coef):
    return vf_coef * (values - mb_returns).abs().mean()


@part1("calc_clipped_surrogate_objective", "eps_inside_sqrt",
       "eps was added inside the square root (sqrt(var + eps)) where the docstring adds it to the std")
def surrogate_eps_inside(dist, mb_action, mb_advantages, mb_logprobs, clip_coef, eps=1e-8):
    return _surrogate(dist, mb_action, mb_advantages, mb_logprobs, clip_coef, eps,
                      scale=torch.sqrt(mb_advantages.var() + eps))


@part1("calc_clipped_surrogate_objective", "no_eps_in_normalisation",
       "the advantages were divided by their std without eps: equal advantages give 0/0 = NaN")
def surrogate_no_eps(dist, mb_action, mb_advantages, mb_logprobs, clip_coef, eps=1e-8):
    return _surrogate(dist, mb_action, mb_advantages, mb_logprobs, clip_coef, eps, scale=mb_advantages.std())


@part1("calc_value_function_loss", "values_detached",
       "the values were detached (it is the returns that carry no gradient): the critic never learns")
def value_loss_detached(values, mb_returns, vf_coef):
    return vf_coef * (values.detach() - mb_returns).pow(2).mean()


# --- calc_clipped_value_function_loss -------------------------------------------------

@part1("calc_clipped_value_function_loss", "min_instead_of_max",
       "min was used where max belongs (an optimistic instead of a pessimistic bound)")
def clipped_value_loss_min(values, old_values, mb_returns, vf_coef, clip_range):
    clipped = old_values + torch.clamp(values - old_values, -clip_range, clip_range)
    return vf_coef * 0.5 * torch.minimum((values - mb_returns) ** 2, (clipped - mb_returns) ** 2).mean()


@part1("calc_clipped_value_function_loss", "clipped_around_returns",
       "the values were clipped around the returns instead of around the old values")
def clipped_value_loss_around_returns(values, old_values, mb_returns, vf_coef, clip_range):
    clipped = mb_returns + torch.clamp(values - mb_returns, -clip_range, clip_range)
    return vf_coef * 0.5 * torch.maximum((values - mb_returns) ** 2, (clipped - mb_returns) ** 2).mean()


@part1("calc_clipped_value_function_loss", "missing_half", "the factor 0.5 of the clipped value loss was left out")
def clipped_value_loss_no_half(values, old_values, mb_returns, vf_coef, clip_range):
    clipped = old_values + torch.clamp(values - old_values, -clip_range, clip_range)
    return vf_coef * torch.maximum((values - mb_returns) ** 2, (clipped - mb_returns) ** 2).mean()


@part1("calc_clipped_value_function_loss", "clipped_to_fixed_range",
       "the values themselves were clipped to [−c, c] instead of to old_values ± c")
def clipped_value_loss_fixed_range(values, old_values, mb_returns, vf_coef, clip_range):
    clipped = torch.clamp(values, -clip_range, clip_range)
    return vf_coef * 0.5 * torch.maximum((values - mb_returns) ** 2, (clipped - mb_returns) ** 2).mean()


@part1("calc_clipped_value_function_loss", "values_detached_in_clipped_term",
       "the clipped values were built from values.detach(): inside the clip range the max's tie then passes "
       "only half the gradient")
def clipped_value_loss_detached_clip(values, old_values, mb_returns, vf_coef, clip_range):
    clipped = old_values + torch.clamp(values.detach() - old_values, -clip_range, clip_range)
    return vf_coef * 0.5 * torch.maximum((values - mb_returns) ** 2, (clipped - mb_returns) ** 2).mean()


# --- calc_entropy_bonus ---------------------------------------------------------------

@part1("calc_entropy_bonus", "forgot_ent_coef", "ent_coef was not applied")
def entropy_no_coef(dist, ent_coef):
    return dist.entropy().mean()


@part1("calc_entropy_bonus", "sign_flipped", "the entropy bonus was negated (it is added to the objective, positive)")
def entropy_negated(dist, ent_coef):
    return -ent_coef * dist.entropy().mean()


@part1("calc_entropy_bonus", "sum_instead_of_mean", "the entropies were summed over the minibatch instead of averaged")
def entropy_sum(dist, ent_coef):
    return ent_coef * dist.entropy().sum()


@part1("calc_entropy_bonus", "entropy_by_hand_nan_at_zero_probability",
       "the entropy was computed by hand as −Σ p·log p: an action with p = 0 gives 0·(−inf) = NaN")
def entropy_by_hand(dist, ent_coef):
    return ent_coef * (-(dist.probs * dist.probs.log()).sum(-1)).mean()


@part1("calc_entropy_bonus", "entropy_without_gradient",
       "the entropy was computed under torch.no_grad() (or detached): the bonus then never reaches the policy")
def entropy_no_grad(dist, ent_coef):
    with torch.no_grad():
        return ent_coef * dist.entropy().mean()


# --- PPOScheduler ---------------------------------------------------------------------

def _linear_lr(scheduler) -> float:
    """The reference's rate after ``n_step_calls`` calls (end_lr itself on the last one)."""
    if scheduler.n_step_calls == scheduler.total_phases:
        return scheduler.end_lr
    return scheduler.initial_lr + scheduler.n_step_calls / scheduler.total_phases * (scheduler.end_lr - scheduler.initial_lr)


@part1("PPOScheduler", "never_reaches_end_lr",
       "the schedule divides by total_phases + 1, so the scheduler never reaches end_lr")
class SchedulerNeverReachesEnd(_ReferenceScheduler):
    def step(self):
        self.n_step_calls += 1
        lr = self.initial_lr + self.n_step_calls / (self.total_phases + 1) * (self.end_lr - self.initial_lr)
        for group in self.optimizer.param_groups:
            group["lr"] = lr


@part1("PPOScheduler", "updates_before_counting",
       "the rate was computed before counting the call, so it lags one phase and never reaches end_lr")
class SchedulerLagsOnePhase(_ReferenceScheduler):
    def step(self):
        if self.n_step_calls >= self.total_phases:
            raise RuntimeError("called too often")
        lr = self.initial_lr + self.n_step_calls / self.total_phases * (self.end_lr - self.initial_lr)
        self.n_step_calls += 1
        for group in self.optimizer.param_groups:
            group["lr"] = lr


@part1("PPOScheduler", "first_param_group_only", "only the first param group's learning rate was updated")
class SchedulerFirstGroupOnly(_ReferenceScheduler):
    def step(self):
        if self.n_step_calls >= self.total_phases:
            raise RuntimeError("called too often")
        self.n_step_calls += 1
        self.optimizer.param_groups[0]["lr"] = _linear_lr(self)


@part1("PPOScheduler", "no_error_past_total_phases",
       "step() keeps decaying past total_phases instead of raising (an over-stepping loop goes unnoticed)")
class SchedulerNoGuard(_ReferenceScheduler):
    def step(self):
        self.n_step_calls += 1
        lr = _linear_lr(self) if self.n_step_calls <= self.total_phases else \
            self.initial_lr + self.n_step_calls / self.total_phases * (self.end_lr - self.initial_lr)
        for group in self.optimizer.param_groups:
            group["lr"] = lr


@part1("PPOScheduler", "decrements_current_lr",
       "each step subtracted (initial_lr − end_lr) / total_phases from the group's current rate, instead of "
       "setting lr_k from initial_lr: a group that held another rate never follows the schedule")
class SchedulerDecrements(_ReferenceScheduler):
    def step(self):
        if self.n_step_calls >= self.total_phases:
            raise RuntimeError("called too often")
        self.n_step_calls += 1
        for group in self.optimizer.param_groups:
            group["lr"] -= (self.initial_lr - self.end_lr) / self.total_phases


@part1("PPOScheduler", "formula_rounds_past_end_lr",
       "the last call computed initial_lr + 1.0·(end_lr − initial_lr), which can miss end_lr by a rounding "
       "(1e-3 → 1e-4 gives 1.0000000000000005e-4); set end_lr itself on that call")
class SchedulerFormulaOnly(_ReferenceScheduler):
    def step(self):
        if self.n_step_calls >= self.total_phases:
            raise RuntimeError("called too often")
        self.n_step_calls += 1
        for group in self.optimizer.param_groups:
            group["lr"] = self.initial_lr + self.n_step_calls / self.total_phases * (self.end_lr - self.initial_lr)


# --- make_optimizer -------------------------------------------------------------------

def _optimizer(params, initial_lr, **kwargs):
    settings = dict(lr=initial_lr, eps=1e-5, maximize=True) | kwargs
    cls = settings.pop("cls", optim.Adam)
    return cls(params, **settings)


@part1("make_optimizer", "actor_parameters_only", "only the actor's parameters were given to the optimizer")
def optimizer_actor_only(actor, critic, total_phases, initial_lr, end_lr=0.0):
    opt = _optimizer(actor.parameters(), initial_lr)
    return opt, _ReferenceScheduler(opt, initial_lr, end_lr, total_phases)


@part1("make_optimizer", "minimises_objective", "maximize=True was forgotten, so the optimizer minimises the objective")
def optimizer_minimises(actor, critic, total_phases, initial_lr, end_lr=0.0):
    opt = _optimizer(itertools.chain(actor.parameters(), critic.parameters()), initial_lr, maximize=False)
    return opt, _ReferenceScheduler(opt, initial_lr, end_lr, total_phases)


@part1("make_optimizer", "default_adam_eps", "Adam's default eps=1e-8 was kept instead of PPO's 1e-5")
def optimizer_default_eps(actor, critic, total_phases, initial_lr, end_lr=0.0):
    opt = _optimizer(itertools.chain(actor.parameters(), critic.parameters()), initial_lr, eps=1e-8)
    return opt, _ReferenceScheduler(opt, initial_lr, end_lr, total_phases)


@part1("make_optimizer", "adamw_weight_decay",
       "AdamW's default weight decay (0.01) was left on; PPO's networks are trained without weight decay")
def optimizer_weight_decay(actor, critic, total_phases, initial_lr, end_lr=0.0):
    opt = _optimizer(itertools.chain(actor.parameters(), critic.parameters()), initial_lr, cls=optim.AdamW)
    return opt, _ReferenceScheduler(opt, initial_lr, end_lr, total_phases)


@part1("calc_clipped_value_function_loss", "vf_coef_hardcoded", "a hard-coded coefficient 0.5 was used instead of vf_coef")
def clipped_value_loss_fixed_coef(values, old_values, mb_returns, vf_coef, clip_range):
    clipped = old_values + torch.clamp(values - old_values, -clip_range, clip_range)
    return 0.5 * 0.5 * torch.maximum((values - mb_returns) ** 2, (clipped - mb_returns) ** 2).mean()
