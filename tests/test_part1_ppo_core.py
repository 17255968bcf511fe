"""Tests for Part 1 (exercises/part1_ppo_core.py).

Run: ``pytest tests/test_part1_ppo_core.py`` (your code) or add ``--impl=solutions``.
Every value is compared with the reference solution on seeded inputs; a wrong answer
names the known mistake it looks like (workbook/mistakes/part1_ppo_core.py).
Tolerances: float32 results within rtol=1e-5, atol=1e-5 unless a test says otherwise.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from torch.distributions.categorical import Categorical

from workbook.checking import (WrongAnswer, assert_close, check_call, check_exercise, check_inputs_untouched, describe_call,
                               explain, known_mistake, matching_mistakes, summarize)

PART = "part1_ppo_core"
POINTS = {
    "compute_advantages": 3,
    "get_minibatch_indices": 1,
    "calc_clipped_surrogate_objective": 3,
    "calc_value_function_loss": 1,
    "calc_clipped_value_function_loss": 2,
    "calc_entropy_bonus": 1,
    "PPOScheduler": 2,
    "make_optimizer": 1,
}
HYPOTHESIS = settings(max_examples=25, deadline=None, derandomize=True)


def mistake(exercise: str, name: str) -> str:
    return known_mistake(PART, exercise, name)


def diagnose(exercise: str, got, *args, **kwargs) -> list[str]:
    """Known mistakes that give ``got`` on these arguments."""
    return matching_mistakes(PART, exercise, lambda fn: fn(*args, **kwargs), got, rtol=1e-5, atol=1e-5)


# --- compute_advantages ---------------------------------------------------------------

def rollout(seed: int, buffer_size: int = 16, num_envs: int = 4, p_terminate: float = 0.15, requires_grad=False):
    g = torch.Generator().manual_seed(seed)
    values = torch.randn(buffer_size, num_envs, generator=g)
    return dict(
        next_value=torch.randn(num_envs, generator=g),
        next_terminated=torch.rand(num_envs, generator=g) < p_terminate,
        rewards=torch.randn(buffer_size, num_envs, generator=g),
        values=values.requires_grad_(requires_grad),
        terminated=torch.rand(buffer_size, num_envs, generator=g) < p_terminate,
    )


@pytest.mark.exercise("compute_advantages")
@pytest.mark.parametrize("seed", [0, 1])
def test_compute_advantages_matches_reference(impl, ref, seed):
    inputs = rollout(seed)
    check_call(impl, ref, "compute_advantages", **inputs, gamma=0.99, gae_lambda=0.95)


DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.exercise("compute_advantages")
@pytest.mark.parametrize("device", DEVICES)
def test_compute_advantages_stays_on_the_input_device(impl, ref, device):
    inputs = {k: v.to(device) for k, v in rollout(3).items()}
    got = check_call(impl, ref, "compute_advantages", **inputs, gamma=0.99, gae_lambda=0.95)
    assert got.device.type == device, f"advantages came back on {got.device}, inputs were on {device}"


@pytest.mark.exercise("compute_advantages")
def test_compute_advantages_hand_computed_example(impl):
    # One env, three steps, no terminations, γ=0.9, λ=0.8: every δ is 1 + 0.9·0.5 − 0.5 = 0.95,
    # and A_t = δ_t + 0.72·A_{t+1} from the back: 0.95, 1.634, 2.12648.
    kwargs = dict(next_value=torch.tensor([0.5]), next_terminated=torch.tensor([False]),
                  rewards=torch.ones(3, 1), values=torch.full((3, 1), 0.5),
                  terminated=torch.zeros(3, 1, dtype=torch.bool), gamma=0.9, gae_lambda=0.8)
    got = impl.compute_advantages(**kwargs)
    expected = torch.tensor([[2.12648], [1.634], [0.95]])
    assert_close(got, expected, rtol=1e-5, atol=1e-5, msg=lambda m: explain(
        describe_call("compute_advantages", **kwargs), m, diagnose("compute_advantages", got, **kwargs)))


@pytest.mark.exercise("compute_advantages")
@pytest.mark.parametrize("critic_output", ["values", "next_value"])
def test_compute_advantages_carries_no_gradient(impl, critic_output):
    # Both come from the critic: detaching `values` alone still lets gradient in through V(s_T).
    inputs = rollout(0)
    inputs[critic_output].requires_grad_(True)
    got = impl.compute_advantages(**inputs, gamma=0.99, gae_lambda=0.95)
    if got.requires_grad:
        only_values_detached = critic_output == "next_value" and not impl.compute_advantages(
            **rollout(0, requires_grad=True), gamma=0.99, gae_lambda=0.95).requires_grad
        name = "next_value_not_detached" if only_values_detached else "gradient_leaks_into_advantages"
        raise WrongAnswer(explain(describe_call("compute_advantages", **inputs),
                                  f"output requires grad when only {critic_output} does", [mistake("compute_advantages", name)]))


@pytest.mark.exercise("compute_advantages")
@HYPOTHESIS
@given(seed=st.integers(0, 10_000), gamma=st.floats(0.5, 1.0))
def test_gae_with_lambda_0_is_the_one_step_td_error(impl, seed, gamma):
    x = rollout(seed)
    next_values = torch.cat([x["values"][1:], x["next_value"][None]])
    next_nonterminal = 1.0 - torch.cat([x["terminated"][1:], x["next_terminated"][None]]).float()
    td_error = x["rewards"] + gamma * next_values * next_nonterminal - x["values"]
    got = impl.compute_advantages(**x, gamma=gamma, gae_lambda=0.0)
    assert_close(got, td_error, rtol=1e-5, atol=1e-5, msg=lambda m: explain(
        f"compute_advantages(..., gamma={gamma:g}, gae_lambda=0)",
        "λ=0 must give the one-step TD error δ_t = r_t + γV(s_{t+1})(1 − d_{t+1}) − V(s_t)\n  " + m,
        diagnose("compute_advantages", got, **x, gamma=gamma, gae_lambda=0.0)))


@pytest.mark.exercise("compute_advantages")
@HYPOTHESIS
@given(seed=st.integers(0, 10_000), gamma=st.floats(0.5, 1.0))
def test_gae_with_lambda_1_is_discounted_return_minus_value(impl, seed, gamma):
    x = rollout(seed, p_terminate=0.0)
    returns, running = torch.zeros_like(x["rewards"]), x["next_value"]
    for t in reversed(range(x["rewards"].shape[0])):
        running = x["rewards"][t] + gamma * running
        returns[t] = running
    got = impl.compute_advantages(**x, gamma=gamma, gae_lambda=1.0)
    assert_close(got, returns - x["values"], rtol=1e-4, atol=1e-4, msg=lambda m: explain(
        f"compute_advantages(..., gamma={gamma:g}, gae_lambda=1)",
        "λ=1 must give the bootstrapped discounted return minus V(s_t)\n  " + m,
        diagnose("compute_advantages", got, **x, gamma=gamma, gae_lambda=1.0)))


@pytest.mark.exercise("compute_advantages")
@HYPOTHESIS
@given(seed=st.integers(0, 10_000), boundary=st.integers(1, 11))
def test_no_episode_leaks_into_the_previous_one(impl, seed, boundary):
    # terminated[boundary] = True: steps < boundary belong to an episode that has ended.
    # Nothing from the next episode (its rewards, values, next_value) may change their advantages.
    x = rollout(seed, buffer_size=12, num_envs=1, p_terminate=0.0)
    x["terminated"][boundary, 0] = True
    before = impl.compute_advantages(**x, gamma=0.99, gae_lambda=0.95)
    g = torch.Generator().manual_seed(seed + 1)
    x["rewards"][boundary:] += 10 * torch.randn(x["rewards"][boundary:].shape, generator=g)
    x["values"][boundary:] += 10 * torch.randn(x["values"][boundary:].shape, generator=g)
    x["next_value"] += 10.0
    after = impl.compute_advantages(**x, gamma=0.99, gae_lambda=0.95)
    if not torch.allclose(before[:boundary], after[:boundary], atol=1e-5):
        raise WrongAnswer(explain(
            f"compute_advantages(...) with terminated[{boundary}] = True",
            f"advantages of steps 0..{boundary - 1} changed when only the next episode changed",
            diagnose("compute_advantages", after, **x, gamma=0.99, gae_lambda=0.95)))


# --- get_minibatch_indices ------------------------------------------------------------

@pytest.mark.exercise("get_minibatch_indices")
@pytest.mark.parametrize("batch_size,minibatch_size", [(64, 16), (12, 3), (8, 8), (1, 1)])
def test_minibatches_cover_every_index_exactly_once(impl, batch_size, minibatch_size):
    call = describe_call("get_minibatch_indices", np.random.default_rng(0), batch_size, minibatch_size)
    got = impl.get_minibatch_indices(np.random.default_rng(0), batch_size, minibatch_size)
    shapes = [np.asarray(mb).shape for mb in got]
    if len(got) != batch_size // minibatch_size or any(s != (minibatch_size,) for s in shapes):
        raise WrongAnswer(explain(call, f"expected {batch_size // minibatch_size} minibatches of shape ({minibatch_size},), got shapes {shapes}"))
    flat = np.concatenate([np.asarray(mb) for mb in got])
    if not np.issubdtype(flat.dtype, np.integer):
        raise WrongAnswer(explain(call, f"indices must be integers, got dtype {flat.dtype}"))
    if sorted(flat.tolist()) != list(range(batch_size)):
        within = any(len(set(np.asarray(mb).tolist())) < minibatch_size for mb in got)
        name = "sampled_with_replacement" if within else "fresh_permutation_per_minibatch"
        raise WrongAnswer(explain(call, "the minibatches do not contain every index exactly once",
                                  [mistake("get_minibatch_indices", name)]))


@pytest.mark.exercise("get_minibatch_indices")
def test_minibatches_are_shuffled(impl):
    got = np.concatenate(impl.get_minibatch_indices(np.random.default_rng(0), 64, 16))
    if np.array_equal(got, np.arange(64)):
        raise WrongAnswer(explain("get_minibatch_indices(rng, 64, 16)", "indices come out in order 0, 1, 2, ...",
                                  [mistake("get_minibatch_indices", "not_shuffled")]))


@pytest.mark.exercise("get_minibatch_indices")
def test_minibatches_depend_only_on_the_rng_given(impl):
    np.random.seed(1)
    first = impl.get_minibatch_indices(np.random.default_rng(7), 64, 16)
    np.random.seed(2)
    second = impl.get_minibatch_indices(np.random.default_rng(7), 64, 16)
    other = impl.get_minibatch_indices(np.random.default_rng(8), 64, 16)
    if not all(np.array_equal(a, b) for a, b in zip(first, second)):
        raise WrongAnswer(explain("get_minibatch_indices(np.random.default_rng(7), 64, 16), twice",
                                  "the same rng seed gave different minibatches",
                                  [mistake("get_minibatch_indices", "global_numpy_rng")]))
    assert not all(np.array_equal(a, b) for a, b in zip(first, other)), "different rng seeds gave the same minibatches"


@pytest.mark.exercise("get_minibatch_indices")
def test_minibatches_reject_a_batch_that_does_not_divide(impl):
    try:
        impl.get_minibatch_indices(np.random.default_rng(0), 10, 3)
    except ValueError:
        return
    raise WrongAnswer(explain("get_minibatch_indices(rng, 10, 3)", "expected a ValueError (10 is not a multiple of 3)",
                              [mistake("get_minibatch_indices", "silently_drops_remainder")]))


# --- calc_clipped_surrogate_objective -------------------------------------------------

def surrogate_inputs(seed: int, minibatch_size: int = 32, num_actions: int = 4, spread: float = 0.3):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(minibatch_size, num_actions, generator=g)
    actions = torch.multinomial(torch.softmax(logits, -1), 1, generator=g).squeeze(-1)
    new_logprobs = torch.log_softmax(logits, -1).gather(-1, actions[:, None]).squeeze(-1)
    old_logprobs = new_logprobs + spread * torch.randn(minibatch_size, generator=g)
    advantages = 2.0 + 3.0 * torch.randn(minibatch_size, generator=g)  # not normalised yet
    return logits, actions, advantages, old_logprobs


@pytest.mark.exercise("calc_clipped_surrogate_objective")
@pytest.mark.parametrize("seed,clip_coef,eps", [(0, 0.2, None), (1, 0.1, None), (2, 0.2, 0.5)])
def test_clipped_surrogate_matches_reference(impl, ref, seed, clip_coef, eps):
    # eps=None: left at its default (1e-8); 0.5 shows whether the eps given is the one used.
    logits, actions, advantages, old_logprobs = surrogate_inputs(seed)
    extra = () if eps is None else (eps,)

    def run(fn):
        return fn(Categorical(logits=logits.clone()), actions.clone(), advantages.clone(), old_logprobs.clone(), clip_coef,
                  *extra)

    call = describe_call("calc_clipped_surrogate_objective", Categorical(logits=logits), actions, advantages,
                         old_logprobs, clip_coef, *extra)
    check_exercise(impl, ref, "calc_clipped_surrogate_objective", run, call=call)
    args = (Categorical(logits=logits), actions, advantages, old_logprobs, clip_coef, *extra)
    try:
        check_inputs_untouched(impl, "calc_clipped_surrogate_objective", call, args, {})
    except WrongAnswer as error:
        raise WrongAnswer(explain(call, str(error), [mistake("calc_clipped_surrogate_objective",
                                                             "advantages_normalised_in_place")])) from None


def gradient_of(fn, logits: torch.Tensor, *args) -> torch.Tensor:
    """d fn(Categorical(logits), *args) / d logits."""
    return value_gradient(lambda x, *rest: fn(Categorical(logits=x), *rest), logits, *args)


@pytest.mark.exercise("calc_clipped_surrogate_objective")
@pytest.mark.parametrize("seed,clip_coef", [(0, 0.2), (1, 0.1)])
def test_clipped_surrogate_gradient_matches_reference(impl, ref, seed, clip_coef):
    # Some ratios are clipped (no gradient), the others inside [1 − ε, 1 + ε], where both terms
    # of the min are equal: the gradient there is the whole of d(r·Â), whichever term carries it.
    logits, actions, advantages, old_logprobs = surrogate_inputs(seed)
    check_exercise(impl, ref, "calc_clipped_surrogate_objective",
                   lambda fn: gradient_of(fn, logits, actions.clone(), advantages.clone(), old_logprobs.clone(), clip_coef),
                   call=f"gradient of calc_clipped_surrogate_objective(Categorical(logits), ..., clip_coef={clip_coef}) "
                        "w.r.t. the logits")


@pytest.mark.exercise("calc_clipped_surrogate_objective")
@HYPOTHESIS
@given(seed=st.integers(0, 10_000), clip_coef=st.floats(0.1, 0.3))
def test_clipping_changes_nothing_when_every_ratio_is_inside(impl, seed, clip_coef):
    logits, actions, advantages, old_logprobs = surrogate_inputs(seed)
    new_logprobs = torch.log_softmax(logits, -1).gather(-1, actions[:, None]).squeeze(-1)
    old_logprobs = new_logprobs + 0.5 * clip_coef * torch.tanh(old_logprobs - new_logprobs)  # |log r| < ε/2
    ratio = torch.exp(new_logprobs - old_logprobs)
    normalised = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
    unclipped = (ratio * normalised).mean()
    got = impl.calc_clipped_surrogate_objective(Categorical(logits=logits), actions, advantages, old_logprobs, clip_coef)
    assert_close(got, unclipped, rtol=1e-5, atol=1e-5, msg=lambda m: explain(
        "calc_clipped_surrogate_objective(...) with every ratio in [1−ε, 1+ε]",
        "must equal the unclipped mean(r · normalised A)\n  " + m))


@pytest.mark.exercise("calc_clipped_surrogate_objective")
@pytest.mark.parametrize("spread", [1e-7, 0.0])
def test_clipped_surrogate_with_near_zero_advantage_spread(impl, ref, spread):
    # std(A) ≈ 1e-7: (A − mean)/(std + 1e-8) is about ±1, /sqrt(var + 1e-8) about ±0.001.
    # std(A) = 0: every normalised advantage is 0/(0 + eps) = 0, and so is the objective.
    logits, actions, advantages, old_logprobs = surrogate_inputs(5)
    advantages = spread * (advantages - 2.0) / 3.0

    def run(fn):
        return fn(Categorical(logits=logits.clone()), actions.clone(), advantages.clone(), old_logprobs.clone(), 0.2)

    check_exercise(impl, ref, "calc_clipped_surrogate_objective", run, rtol=1e-4, atol=1e-5,
                   call=f"calc_clipped_surrogate_objective(..., advantages with std ≈ {spread:g}, clip_coef=0.2)")


@pytest.mark.exercise("calc_clipped_surrogate_objective")
def test_clipped_surrogate_is_differentiable(impl):
    logits, actions, advantages, old_logprobs = surrogate_inputs(0)
    logits.requires_grad_(True)
    got = impl.calc_clipped_surrogate_objective(Categorical(logits=logits), actions, advantages, old_logprobs, 0.2)
    assert got.requires_grad, "the objective has no gradient w.r.t. the policy's logits (was something detached?)"


# --- value losses and entropy ---------------------------------------------------------

def value_inputs(seed: int, n: int = 24):
    g = torch.Generator().manual_seed(seed)
    old_values = torch.randn(n, generator=g)
    values = old_values + 0.4 * torch.randn(n, generator=g)  # some moves larger than the clip range
    returns = old_values + torch.randn(n, generator=g)
    return values, old_values, returns


@pytest.mark.exercise("calc_value_function_loss")
@pytest.mark.parametrize("vf_coef", [0.5, 0.25])
def test_value_function_loss_matches_reference(impl, ref, vf_coef):
    values, _, returns = value_inputs(0)
    check_call(impl, ref, "calc_value_function_loss", values, returns, vf_coef)


@pytest.mark.exercise("calc_clipped_value_function_loss")
@pytest.mark.parametrize("seed,vf_coef,clip_range", [(0, 0.5, 0.2), (1, 0.5, 0.5), (2, 0.25, 0.3)])
def test_clipped_value_function_loss_matches_reference(impl, ref, seed, vf_coef, clip_range):
    values, old_values, returns = value_inputs(seed)
    check_call(impl, ref, "calc_clipped_value_function_loss", values, old_values, returns, vf_coef, clip_range)


def value_gradient(fn, values: torch.Tensor, *args) -> torch.Tensor:
    """d fn(values, *args) / d values (NaN where the loss carries no gradient at all, 0 where none reaches ``values``)."""
    values = values.detach().clone().requires_grad_(True)
    out = fn(values, *args)
    if not out.requires_grad:
        return torch.full_like(values, float("nan"))
    grad = torch.autograd.grad(out, values, allow_unused=True)[0]
    return torch.zeros_like(values) if grad is None else grad


@pytest.mark.exercise("calc_value_function_loss")
def test_value_function_loss_gradient_reaches_the_values(impl, ref):
    values, _, returns = value_inputs(1)
    check_exercise(impl, ref, "calc_value_function_loss", lambda fn: value_gradient(fn, values, returns.clone(), 0.5),
                   call="gradient of calc_value_function_loss(values, returns, 0.5) w.r.t. values")


@pytest.mark.exercise("calc_clipped_value_function_loss")
@pytest.mark.parametrize("clip_range", [0.2, 0.5])
def test_clipped_value_loss_gradient_matches_reference(impl, ref, clip_range):
    # Moves inside the clip range give two equal errors: the gradient there is the whole of d(values − R)²,
    # outside it only the unclipped error's when that is the larger one.
    values, old_values, returns = value_inputs(3)
    check_exercise(impl, ref, "calc_clipped_value_function_loss",
                   lambda fn: value_gradient(fn, values, old_values.clone(), returns.clone(), 0.5, clip_range),
                   call=f"gradient of calc_clipped_value_function_loss(values, ..., 0.5, {clip_range}) w.r.t. values")


@pytest.mark.exercise("calc_clipped_value_function_loss")
@HYPOTHESIS
@given(seed=st.integers(0, 10_000))
def test_clipped_value_loss_is_half_mse_when_nothing_moves_far(impl, seed):
    values, old_values, returns = value_inputs(seed)
    values = old_values + 0.1 * torch.tanh(values - old_values)  # every move inside ±0.1
    got = impl.calc_clipped_value_function_loss(values, old_values, returns, 0.5, 0.2)
    expected = 0.5 * 0.5 * (values - returns).pow(2).mean()
    assert_close(got, expected, rtol=1e-5, atol=1e-6, msg=lambda m: explain(
        "calc_clipped_value_function_loss(...) with every |values − old_values| < clip_range",
        "must equal vf_coef · 0.5 · mean((values − returns)²)\n  " + m))


@pytest.mark.exercise("calc_entropy_bonus")
def test_entropy_bonus_matches_reference(impl, ref):
    logits = torch.randn(32, 5, generator=torch.Generator().manual_seed(0)) * 2

    def run(fn):
        return fn(Categorical(logits=logits.clone()), 0.01)

    check_exercise(impl, ref, "calc_entropy_bonus", run,
                   call=describe_call("calc_entropy_bonus", Categorical(logits=logits), 0.01))


@pytest.mark.exercise("calc_entropy_bonus")
def test_entropy_bonus_with_actions_of_probability_zero(impl):
    # Masked actions (logit −inf) have p = 0: their term p·log p is 0, not 0·(−inf) = NaN.
    logits = torch.tensor([[0.0, 0.0, -math.inf, -math.inf], [0.0, 0.0, 0.0, -math.inf]])
    got = impl.calc_entropy_bonus(Categorical(logits=logits), 0.5)
    expected = torch.tensor(0.5 * (math.log(2) + math.log(3)) / 2)
    assert_close(got, expected, rtol=1e-5, atol=1e-6, msg=lambda m: explain(
        "calc_entropy_bonus(Categorical(logits=[[0, 0, -inf, -inf], [0, 0, 0, -inf]]), 0.5)",
        "must equal 0.5 · mean(log 2, log 3)\n  " + m,
        [mistake("calc_entropy_bonus", "entropy_by_hand_nan_at_zero_probability")] if torch.isnan(got).any() else []))


@pytest.mark.exercise("calc_entropy_bonus")
def test_entropy_bonus_gradient_reaches_the_policy(impl, ref):
    logits = torch.randn(16, 5, generator=torch.Generator().manual_seed(1))
    check_exercise(impl, ref, "calc_entropy_bonus", lambda fn: gradient_of(fn, logits, 0.5),
                   call="gradient of calc_entropy_bonus(Categorical(logits), 0.5) w.r.t. the logits")


@pytest.mark.exercise("calc_entropy_bonus")
@HYPOTHESIS
@given(n=st.integers(1, 50), batch=st.integers(1, 8), ent_coef=st.floats(0.001, 1.0))
def test_entropy_of_uniform_policy_is_log_n(impl, n, batch, ent_coef):
    got = impl.calc_entropy_bonus(Categorical(logits=torch.zeros(batch, n)), ent_coef)
    assert_close(got, torch.tensor(ent_coef * math.log(n)), rtol=1e-5, atol=1e-6, msg=lambda m: explain(
        f"calc_entropy_bonus(uniform over {n} actions, ent_coef={ent_coef:g})", "must equal ent_coef · log n\n  " + m))


# --- PPOScheduler and make_optimizer --------------------------------------------------

def lr_schedule(scheduler_cls, initial_lr=1e-3, end_lr=1e-4, total_phases=5):
    """Learning rates of both param groups after each step, and whether an extra step raises."""
    a, b = nn.Parameter(torch.zeros(1)), nn.Parameter(torch.zeros(1))
    # The second group starts at another rate: lr_k is set from initial_lr, whatever a group held.
    opt = torch.optim.Adam([{"params": [a]}, {"params": [b], "lr": 0.5}], lr=initial_lr)
    scheduler = scheduler_cls(opt, initial_lr, end_lr, total_phases)
    lrs = []
    for _ in range(total_phases):
        scheduler.step()
        lrs.append([group["lr"] for group in opt.param_groups])
    try:
        scheduler.step()
        raised = False
    except Exception:
        raised = True
    return {"lr after each step (both groups)": torch.tensor(lrs, dtype=torch.float64), "raises when over-stepped": raised}


@pytest.mark.exercise("PPOScheduler")
@pytest.mark.parametrize("initial_lr,end_lr,total_phases", [(1e-3, 1e-4, 5), (2.5e-4, 0.0, 3)])
def test_scheduler_decays_linearly_to_end_lr(impl, ref, initial_lr, end_lr, total_phases):
    check_exercise(impl, ref, "PPOScheduler", lambda cls: lr_schedule(cls, initial_lr, end_lr, total_phases),
                   call=f"PPOScheduler(optimizer with 2 param groups, {initial_lr}, {end_lr}, {total_phases}).step() × {total_phases + 1}",
                   rtol=1e-9, atol=1e-12)


@pytest.mark.exercise("PPOScheduler")
@pytest.mark.parametrize("initial_lr,end_lr,total_phases", [(1e-3, 1e-4, 5), (3e-4, 1e-5, 7)])
def test_scheduler_reaches_end_lr_exactly(impl, initial_lr, end_lr, total_phases):
    # 1e-3 + 1.0 · (1e-4 − 1e-3) is 1.0000000000000005e-4: the formula alone is one rounding off.
    got = lr_schedule(impl.PPOScheduler, initial_lr, end_lr, total_phases)["lr after each step (both groups)"][-1].tolist()
    if got != [end_lr, end_lr]:
        raise WrongAnswer(explain(f"PPOScheduler(optimizer, {initial_lr}, {end_lr}, {total_phases}).step() × {total_phases}",
                                  f"the last rates are {got!r}, not exactly end_lr={end_lr!r}",
                                  [mistake("PPOScheduler", "formula_rounds_past_end_lr")]
                                  if all(math.isclose(x, end_lr, rel_tol=1e-12) for x in got) else []))


def optimizer_summary(make_optimizer, total_phases: int = 4, initial_lr: float = 1e-3, end_lr: float = 1e-4):
    torch.manual_seed(0)
    actor, critic = nn.Linear(4, 2), nn.Linear(4, 1)
    opt, scheduler = make_optimizer(actor, critic, total_phases, initial_lr, end_lr)
    params = [p for group in opt.param_groups for p in group["params"]]
    wanted = list(actor.parameters()) + list(critic.parameters())
    group = opt.param_groups[0]
    summary = {
        "optimizes actor and critic parameters": {id(p) for p in params} == {id(p) for p in wanted} and len(params) == len(wanted),
        "lr": group["lr"], "eps": group.get("eps"), "maximize": group.get("maximize"),
        "weight_decay": group.get("weight_decay", 0.0),
        "is Adam": isinstance(opt, torch.optim.Adam),
    }
    lrs = []
    for _ in range(total_phases):
        scheduler.step()
        lrs.append(opt.param_groups[0]["lr"])
    summary["lr after each scheduler step"] = lrs
    return summary


@pytest.mark.exercise("make_optimizer")
@pytest.mark.parametrize("total_phases,initial_lr,end_lr", [(4, 1e-3, 1e-4), (3, 2.5e-4, 0.0)])
def test_make_optimizer_settings(impl, ref, total_phases, initial_lr, end_lr):
    check_exercise(impl, ref, "make_optimizer", lambda fn: optimizer_summary(fn, total_phases, initial_lr, end_lr),
                   call=f"make_optimizer(nn.Linear(4, 2), nn.Linear(4, 1), total_phases={total_phases}, "
                        f"initial_lr={initial_lr}, end_lr={end_lr})", rtol=1e-9, atol=1e-12)


# --- arguments the docstrings refuse ------------------------------------------------------------
# Each docstring names the values that are a ValueError; the boundary values just inside are fine.

def expect_value_error(call: str, fn, *args, named: tuple[str, str] | None = None) -> None:
    """``named``: (exercise, known mistake) to name on failure (looked up only then: the registry's first load costs)."""
    try:
        got = fn(*args)
    except ValueError:
        return
    raise WrongAnswer(explain(call, f"expected a ValueError, got a result ({summarize(got)})",
                              [mistake(*named)] if named else []))


@pytest.mark.exercise("compute_advantages")
@pytest.mark.parametrize("gamma,gae_lambda", [(-0.1, 0.95), (1.1, 0.95), (0.99, -0.1), (0.99, 1.1),
                                              (float("nan"), 0.95), (0.99, float("nan"))])
def test_compute_advantages_refuses_gamma_or_lambda_outside_0_1(impl, gamma, gae_lambda):
    # One of the two out of range at a time; NaN passes `x < 0 or x > 1` (every comparison with NaN is False).
    inputs = rollout(0) | {"gamma": gamma, "gae_lambda": gae_lambda}
    nan = math.isnan(gamma) or math.isnan(gae_lambda)
    expect_value_error(f"compute_advantages(..., gamma={gamma}, gae_lambda={gae_lambda})",
                       lambda: impl.compute_advantages(**inputs),
                       named=("compute_advantages", "nan_passes_the_range_check") if nan else None)


@pytest.mark.exercise("compute_advantages")
@pytest.mark.parametrize("gamma,gae_lambda", [(0.0, 0.0), (1.0, 1.0)])
def test_compute_advantages_accepts_gamma_and_lambda_at_the_bounds(impl, ref, gamma, gae_lambda):
    check_call(impl, ref, "compute_advantages", **(rollout(1) | {"gamma": gamma, "gae_lambda": gae_lambda}))


@pytest.mark.exercise("get_minibatch_indices")
@pytest.mark.parametrize("batch_size,minibatch_size", [(8, 0), (0, 4), (-8, 4), (8, -4)])
def test_minibatches_refuse_sizes_that_are_not_positive(impl, batch_size, minibatch_size):
    expect_value_error(f"get_minibatch_indices(rng, {batch_size}, {minibatch_size})",
                       lambda: impl.get_minibatch_indices(np.random.default_rng(0), batch_size, minibatch_size))


@pytest.mark.exercise("calc_clipped_surrogate_objective")
@pytest.mark.parametrize("clip_coef", [0.0, -0.2])
def test_clipped_surrogate_refuses_a_clip_coef_that_is_not_positive(impl, clip_coef):
    logits, actions, advantages, old_logprobs = surrogate_inputs(0)
    expect_value_error(f"calc_clipped_surrogate_objective(..., clip_coef={clip_coef})",
                       lambda: impl.calc_clipped_surrogate_objective(Categorical(logits=logits), actions, advantages,
                                                                     old_logprobs, clip_coef))


@pytest.mark.exercise("calc_clipped_value_function_loss")
@pytest.mark.parametrize("clip_range", [0.0, -0.2])
def test_clipped_value_loss_refuses_a_clip_range_that_is_not_positive(impl, clip_range):
    values, old_values, returns = value_inputs(0)
    expect_value_error(f"calc_clipped_value_function_loss(..., clip_range={clip_range})",
                       lambda: impl.calc_clipped_value_function_loss(values, old_values, returns, 0.5, clip_range))


@pytest.mark.exercise("make_optimizer")
def test_make_optimizer_decays_to_zero_by_default(impl, ref):
    # end_lr is 0.0 when left out (the signature is part of the docstring).
    check_exercise(impl, ref, "make_optimizer",
                   lambda fn: optimizer_summary(lambda a, c, t, lr, _end: fn(a, c, t, lr), 3, 1e-3, None),
                   call="make_optimizer(nn.Linear(4, 2), nn.Linear(4, 1), total_phases=3, initial_lr=1e-3)",
                   rtol=1e-9, atol=1e-12)
