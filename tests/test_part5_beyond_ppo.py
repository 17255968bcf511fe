"""Tests for Part 5 (exercises/part5_beyond_ppo.py): GRPO, RLOO and DPO.

Run: ``pytest tests/test_part5_beyond_ppo.py`` (your code) or add ``--impl=solutions``.
Every value is compared with the reference solution on seeded inputs, across every setting
the docstrings offer (each scale, each normalisation, β = 0 and β > 0, several clip ranges,
bool / int64 / float masks); a wrong answer names the known mistake it looks like
(workbook/mistakes/part5_beyond_ppo.py). Padding holds garbage on purpose: it must never
reach a number. Tolerances: rtol=1e-5, atol=1e-5 unless a test says otherwise.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from workbook.checking import (WrongAnswer, assert_close, check_call, check_exercise, compare, describe_call, explain,
                               known_mistake, matching_mistakes)
from workbook.lm.model import GPT, GPTConfig
from workbook.promises import assert_no_graph, check_call_documented_keys

PART = "part5_beyond_ppo"
POINTS = {
    "repeat_for_groups": 1,
    "grpo_advantages": 2,
    "grpo_loss": 3,
    "rloo_advantages": 2,
    "dpo_loss": 2,
}
HYPOTHESIS = settings(max_examples=20, deadline=None, derandomize=True)
MASK_DTYPES = [torch.bool, torch.int64, torch.float32]
# The stats keys the docstrings document; a learner may return more (the docstrings do not say "exactly").
GRPO_STATS = ("loss/policy", "loss/kl", "policy/clipfrac", "policy/ratio", "policy/approxkl")
DPO_STATS = ("rewards/chosen", "rewards/rejected", "rewards/margins", "rewards/accuracies")


def mistake(exercise: str, name: str) -> str:
    return known_mistake(PART, exercise, name)


def diagnose(exercise: str, got, *args, **kwargs) -> list[str]:
    return matching_mistakes(PART, exercise, lambda fn: fn(*args, **kwargs), got, rtol=1e-5, atol=1e-5)


def expect_value_error(impl, exercise: str, call: str, mistake_name: str | None, *args, **kwargs) -> None:
    try:
        getattr(impl, exercise)(*args, **kwargs)
    except ValueError:
        return
    raise WrongAnswer(explain(call, "expected a ValueError", [mistake(exercise, mistake_name)] if mistake_name else []))


def randn(seed: int, *shape: int, scale: float = 1.0) -> torch.Tensor:
    return scale * torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def ragged_mask(seed: int, batch: int, resp: int, dtype=torch.float32) -> torch.Tensor:
    """Right-padded mask: lengths in [1, resp], one row full length, one row a single token."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, resp + 1, (batch,), generator=g)
    lengths[0], lengths[-1] = resp, 1
    return (torch.arange(resp)[None] < lengths[:, None]).to(dtype)


def with_padding_garbage(x: torch.Tensor, mask: torch.Tensor, value: float = 7.0) -> torch.Tensor:
    return torch.where(mask.bool(), x, torch.full_like(x, value))


# --- repeat_for_groups ------------------------------------------------------------------

PROMPTS = ["the plot", "i thought the", "the acting", "this film"]


@pytest.mark.exercise("repeat_for_groups")
@pytest.mark.parametrize("n,group_size", [(3, 2), (4, 3), (1, 5), (2, 8)])
def test_repeat_for_groups_matches_reference(impl, ref, n, group_size):
    check_call(impl, ref, "repeat_for_groups", PROMPTS[:n], group_size)


@pytest.mark.exercise("repeat_for_groups")
def test_a_view_of_the_batch_gives_one_row_per_prompt(impl):
    n, g = 3, 4
    repeated, index = impl.repeat_for_groups(PROMPTS[:n], g)
    rows = [repeated[i * g:(i + 1) * g] for i in range(n)]
    ok = all(row == [PROMPTS[i]] * g for i, row in enumerate(rows)) and torch.equal(
        index.view(n, g), torch.arange(n)[:, None].expand(n, g))
    if not ok:
        raise WrongAnswer(explain(describe_call("repeat_for_groups", PROMPTS[:n], g),
                                  f"row i of a (num_prompts, G) view must be G copies of prompt i; got {repeated} and {index.tolist()}",
                                  diagnose("repeat_for_groups", (repeated, index), PROMPTS[:n], g)))


@pytest.mark.exercise("repeat_for_groups")
@pytest.mark.parametrize("group_size", [1, 0])
def test_repeat_for_groups_rejects_groups_without_a_baseline(impl, group_size):
    expect_value_error(impl, "repeat_for_groups", f"repeat_for_groups(prompts, group_size={group_size})",
                       "group_of_one_accepted", PROMPTS[:2], group_size)


@pytest.mark.exercise("repeat_for_groups")
def test_repeat_for_groups_rejects_no_prompts(impl):
    expect_value_error(impl, "repeat_for_groups", "repeat_for_groups([], 4)", None, [], 4)


# --- grpo_advantages --------------------------------------------------------------------

def group_rewards(seed: int, groups: int, group_size: int, tied_group: int | None = 1) -> torch.Tensor:
    """Rewards in groups, each group on its own level; one group tied (all rewards equal)."""
    r = randn(seed, groups, group_size, scale=0.5) + randn(seed + 1, groups, 1, scale=2.0)
    if tied_group is not None:
        r[tied_group] = 0.5  # a mean that is exact in float32: the reference's 0 here is every correct version's (the
        # rounding of a mean that is not, which the docstring allows either way, is test_a_tied_group_gets_zero_…'s)
    return r.reshape(-1)


@pytest.mark.exercise("grpo_advantages")
@pytest.mark.parametrize("scale", ["group", "batch", "none"])
@pytest.mark.parametrize("seed,groups,group_size", [(0, 3, 4), (1, 4, 2), (2, 2, 8)])
def test_grpo_advantages_matches_reference(impl, ref, scale, seed, groups, group_size):
    check_call(impl, ref, "grpo_advantages", group_rewards(seed, groups, group_size), group_size, scale)


@pytest.mark.exercise("grpo_advantages")
@pytest.mark.parametrize("scale", ["group", "batch"])
def test_grpo_advantages_with_another_eps(impl, ref, scale):
    check_call(impl, ref, "grpo_advantages", group_rewards(3, 3, 4, tied_group=None), 4, scale, eps=0.5)


# (rewards, G): a tied group of 0.7s next to an untied one; eight 0.3s, whose float32 mean is not 0.3 (a formula
# centred on the mean leaves ±3e-8, which / (std + eps) makes 3e-4: allowed, as exact zeros are); a whole batch tied
# (rewards.std() = 0 too). "0" is within TIE_ATOL: above the rounding / eps, far below a real advantage or NaN.
TIE_ATOL = 1e-3
TIES = {"one group of four": ([0.7] * 4 + [-0.2, 0.1, 0.4, 0.9], 4),
        "eight 0.3s": ([0.3] * 8 + [-0.2, 0.1, 0.4, 0.9, 1.3, -0.6, 0.0, 0.25], 8),
        "the whole batch": ([0.3] * 12, 3)}


@pytest.mark.exercise("grpo_advantages")
@pytest.mark.parametrize("scale", ["group", "batch", "none"])
@pytest.mark.parametrize("tie", list(TIES))
def test_a_tied_group_gets_zero_advantage_not_nan(impl, scale, tie):
    values, g = TIES[tie]
    rewards = torch.tensor(values)
    tied = 12 if tie == "the whole batch" else g
    got = impl.grpo_advantages(rewards, g, scale)
    if not torch.isfinite(got).all() or got[:tied].abs().max() > TIE_ATOL:
        raise WrongAnswer(explain(describe_call("grpo_advantages", rewards, g, scale),
                                  f"a group of equal rewards must get advantage 0 (finite, |a| ≤ {TIE_ATOL:g}: float "
                                  f"rounding divided by eps is allowed); got {got[:tied].tolist()}",
                                  diagnose("grpo_advantages", got, rewards, g, scale)))


@pytest.mark.exercise("grpo_advantages")
@HYPOTHESIS
@given(seed=st.integers(0, 10_000), groups=st.integers(1, 5), group_size=st.integers(2, 6),
       scale=st.sampled_from(["group", "batch", "none"]))
def test_each_groups_advantages_sum_to_zero(impl, seed, groups, group_size, scale):
    rewards = group_rewards(seed, groups, group_size, tied_group=None)
    got = impl.grpo_advantages(rewards, group_size, scale)
    sums = got.view(groups, group_size).sum(dim=1)
    assert_close(sums, torch.zeros(groups), rtol=0, atol=1e-4, msg=lambda m: explain(
        describe_call("grpo_advantages", rewards, group_size, scale),
        "within each group (a row of view(-1, G)) the advantages must sum to 0\n  " + m,
        diagnose("grpo_advantages", got, rewards, group_size, scale)))


@pytest.mark.exercise("grpo_advantages")
@pytest.mark.parametrize("n,group_size,scale", [(8, 1, "group"), (10, 4, "group"), (8, 4, "std")])
def test_grpo_advantages_rejects_bad_arguments(impl, n, group_size, scale):
    expect_value_error(impl, "grpo_advantages", f"grpo_advantages(Tensor[{n}], {group_size}, {scale!r})", None,
                       torch.randn(n), group_size, scale)


@pytest.mark.exercise("grpo_advantages")
def test_grpo_advantages_carry_no_gradient(impl):
    got = impl.grpo_advantages(group_rewards(0, 2, 4).requires_grad_(True), 4)
    if got.requires_grad:
        raise WrongAnswer(explain("grpo_advantages(rewards requiring grad, 4)", "the advantages require grad",
                                  [mistake("grpo_advantages", "advantages_keep_gradient")]))


# --- grpo_loss --------------------------------------------------------------------------

def grpo_inputs(seed: int, batch: int = 6, resp: int = 7, mask_dtype=torch.float32):
    mask = ragged_mask(seed, batch, resp, mask_dtype)
    old = -torch.rand(batch, resp, generator=torch.Generator().manual_seed(seed)) * 3
    logprobs = old + 0.3 * randn(seed + 1, batch, resp)  # many ratios outside [0.8, 1.2]
    ref = old + 0.5 * randn(seed + 2, batch, resp)
    advantages = randn(seed + 3, batch)
    return (with_padding_garbage(logprobs, mask), with_padding_garbage(old, mask, -3.0), with_padding_garbage(ref, mask, 2.0),
            advantages, mask)


@pytest.mark.exercise("grpo_loss")
@pytest.mark.parametrize("normalisation", ["sequence", "token", "constant"])
@pytest.mark.parametrize("seed,cliprange,beta", [(0, 0.2, 0.04), (1, 0.1, 0.0), (2, 0.3, 0.5)])
def test_grpo_loss_matches_reference(impl, ref, normalisation, seed, cliprange, beta):
    max_len = 10 if normalisation == "constant" else None
    check_call_documented_keys(impl, ref, "grpo_loss", *grpo_inputs(seed), cliprange, beta, normalisation, max_len,
                               keys=GRPO_STATS)


@pytest.mark.exercise("grpo_loss")
@pytest.mark.parametrize("mask_dtype", MASK_DTYPES, ids=str)
@pytest.mark.parametrize("normalisation", ["sequence", "token", "constant"])
def test_grpo_loss_takes_any_mask_dtype(impl, ref, mask_dtype, normalisation):
    check_call_documented_keys(impl, ref, "grpo_loss", *grpo_inputs(4, mask_dtype=mask_dtype), 0.2, 0.1, normalisation, 7,
                               keys=GRPO_STATS)


@pytest.mark.exercise("grpo_loss")
@pytest.mark.parametrize("normalisation", ["sequence", "token", "constant"])
def test_grpo_loss_gradient_matches_reference(impl, ref, normalisation):
    def run(fn):
        logprobs, old, ref_lp, adv, mask = grpo_inputs(5)
        logprobs.requires_grad_(True)
        loss, _ = fn(logprobs, old, ref_lp, adv, mask, 0.2, 0.1, normalisation, 9)
        loss.backward()
        return logprobs.grad
    check_exercise(impl, ref, "grpo_loss", run, call=f"grpo_loss(...).backward(), normalisation={normalisation!r}: d loss / d logprobs")


@pytest.mark.exercise("grpo_loss")
def test_how_each_normalisation_weighs_long_and_short_responses(impl):
    # Two responses on-policy (ratio 1), equal to the reference (KL 0): the loss is −Σ A·(weights).
    # Lengths 1 and 3, advantages +1 and −1. Per token the loss is −A.
    #   sequence: mean(−1/1, +3/3) = 0          (each response weighs the same, whatever its length)
    #   token:    (−1 + 3) / 4 = 0.5             (each token weighs the same: the long one dominates)
    #   constant: (−1 + 3) / (2 · 4) = 0.25      (a fixed denominator, max_len = 4)
    logprobs = torch.tensor([[-1.0, 0.0, 0.0], [-0.5, -0.7, -0.2]])
    mask = torch.tensor([[1.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    args = (logprobs, logprobs.clone(), logprobs.clone(), torch.tensor([1.0, -1.0]), mask, 0.2, 0.3)
    for normalisation, expected in (("sequence", 0.0), ("token", 0.5), ("constant", 0.25)):
        loss, _ = impl.grpo_loss(*args, normalisation, 4)
        if abs(loss.item() - expected) > 1e-5:
            raise WrongAnswer(explain(describe_call("grpo_loss", *args, normalisation, 4),
                                      f"expected {expected} (see the comment in this test), got {loss.item():.6g}",
                                      diagnose("grpo_loss", (loss, impl.grpo_loss(*args, normalisation, 4)[1]), *args,
                                               normalisation, 4)))


@pytest.mark.exercise("grpo_loss")
@HYPOTHESIS
@given(seed=st.integers(0, 10_000), normalisation=st.sampled_from(["sequence", "token", "constant"]))
def test_beta_zero_drops_the_reference_and_the_kl_term_is_never_negative(impl, seed, normalisation):
    logprobs, old, ref_lp, adv, mask = grpo_inputs(seed)
    a, _ = impl.grpo_loss(logprobs, old, ref_lp, adv, mask, 0.2, 0.0, normalisation, 8)
    b, _ = impl.grpo_loss(logprobs, old, ref_lp + 1.5, adv, mask, 0.2, 0.0, normalisation, 8)
    c, _ = impl.grpo_loss(logprobs, old, ref_lp, adv, mask, 0.2, 0.5, normalisation, 8)
    call = describe_call("grpo_loss", logprobs, old, ref_lp, adv, mask, 0.2, "β", normalisation, 8)
    if abs(a.item() - b.item()) > 1e-5:
        raise WrongAnswer(explain(call, "with β = 0 the loss must not depend on the reference log-probs"))
    if c.item() < a.item() - 1e-6:
        raise WrongAnswer(explain(call, f"β > 0 lowered the loss ({a.item():.5g} → {c.item():.5g}): the k3 KL is ≥ 0 and is added",
                                  diagnose("grpo_loss", impl.grpo_loss(logprobs, old, ref_lp, adv, mask, 0.2, 0.5, normalisation, 8),
                                           logprobs, old, ref_lp, adv, mask, 0.2, 0.5, normalisation, 8)))


@pytest.mark.exercise("grpo_loss")
def test_grpo_loss_stats_hold_no_graph(impl):
    logprobs, old, ref_lp, adv, mask = grpo_inputs(6)
    loss, stats = impl.grpo_loss(logprobs.requires_grad_(True), old, ref_lp, adv, mask, 0.2, 0.1)
    if not loss.requires_grad:
        raise WrongAnswer(explain("grpo_loss(logprobs requiring grad, ...)", "the loss has no gradient (was it detached?)"))
    assert_no_graph(stats, "grpo_loss(logprobs requiring grad, ...)", what="stats",
                    labels=[mistake("grpo_loss", "stats_not_detached")])


@pytest.mark.exercise("grpo_loss")
@pytest.mark.parametrize("normalisation,max_len", [("constant", None), ("constant", 0), ("mean", None)])
def test_grpo_loss_rejects_bad_normalisation(impl, normalisation, max_len):
    expect_value_error(impl, "grpo_loss", f"grpo_loss(..., normalisation={normalisation!r}, max_len={max_len})", None,
                       *grpo_inputs(0), 0.2, 0.04, normalisation, max_len)


@pytest.mark.exercise("grpo_loss")
def test_grpo_loss_constant_accepts_max_len_1(impl, ref):
    # The smallest max_len the docstring allows (a fixed denominator B · 1).
    check_call_documented_keys(impl, ref, "grpo_loss", *grpo_inputs(3), 0.2, 0.04, "constant", 1, keys=GRPO_STATS)


# --- rloo_advantages --------------------------------------------------------------------

def rloo_inputs(seed: int, groups: int = 3, group_size: int = 4, resp: int = 6, mask_dtype=torch.float32):
    batch = groups * group_size
    mask = ragged_mask(seed, batch, resp, mask_dtype)
    logprobs = -torch.rand(batch, resp, generator=torch.Generator().manual_seed(seed)) * 3
    ref = logprobs - 0.4 * randn(seed + 1, batch, resp).abs()
    scores = randn(seed + 2, batch)
    return scores, with_padding_garbage(logprobs, mask), with_padding_garbage(ref, mask, -5.0), mask


@pytest.mark.exercise("rloo_advantages")
@pytest.mark.parametrize("seed,groups,group_size,kl_coef", [(0, 3, 4, 0.1), (1, 2, 2, 0.05), (2, 1, 8, 0.0), (3, 4, 3, 1.0)])
def test_rloo_advantages_matches_reference(impl, ref, seed, groups, group_size, kl_coef):
    check_call(impl, ref, "rloo_advantages", *rloo_inputs(seed, groups, group_size), group_size, kl_coef)


@pytest.mark.exercise("rloo_advantages")
@pytest.mark.parametrize("mask_dtype", MASK_DTYPES, ids=str)
def test_rloo_advantages_takes_any_mask_dtype(impl, ref, mask_dtype):
    check_call(impl, ref, "rloo_advantages", *rloo_inputs(4, mask_dtype=mask_dtype), 4, 0.2)


@pytest.mark.exercise("rloo_advantages")
def test_rloo_worked_example(impl):
    # One group of k = 3 with zero KL: rewards 1, 2, 6. Leave-one-out baselines are
    # (2+6)/2 = 4, (1+6)/2 = 3.5, (1+2)/2 = 1.5, so the advantages are −3, −1.5, 4.5.
    # (The plain group mean 3 would give −2, −1, 3: every advantage shrunk by (k−1)/k.)
    logprobs = torch.full((3, 2), -1.0)
    args = (torch.tensor([1.0, 2.0, 6.0]), logprobs, logprobs.clone(), torch.ones(3, 2), 3, 0.1)
    got, rewards = impl.rloo_advantages(*args)
    expected = torch.tensor([-3.0, -1.5, 4.5])
    assert_close(got, expected, rtol=0, atol=1e-5, msg=lambda m: explain(
        describe_call("rloo_advantages", *args), "see the worked example in this test\n  " + m,
        diagnose("rloo_advantages", (got, rewards), *args)))


@pytest.mark.exercise("rloo_advantages")
@pytest.mark.parametrize("with_grad,name", [("logprobs", "kl_keeps_gradient"), ("scores", "only_the_kl_detached")])
def test_rloo_advantages_carry_no_gradient(impl, with_grad, name):
    # "No gradient" whichever input carries one: the log-probs (the policy's), or the scores (a reward model's).
    inputs = dict(zip(("scores", "logprobs", "ref_logprobs", "mask"), rloo_inputs(0)))
    inputs[with_grad].requires_grad_(True)
    out = impl.rloo_advantages(*inputs.values(), 4, 0.1)
    if any(t.requires_grad for t in out):
        raise WrongAnswer(explain(f"rloo_advantages(..., {with_grad} requiring grad, ...)",
                                  "the advantages or rewards require grad", [mistake("rloo_advantages", name)]))


@pytest.mark.exercise("rloo_advantages")
@pytest.mark.parametrize("batch,group_size", [(8, 1), (10, 4)])
def test_rloo_advantages_rejects_bad_groups(impl, batch, group_size):
    scores, logprobs, ref_lp, mask = rloo_inputs(0, groups=1, group_size=batch)
    expect_value_error(impl, "rloo_advantages", f"rloo_advantages(Tensor[{batch}], ..., group_size={group_size})", None,
                       scores, logprobs, ref_lp, mask, group_size, 0.1)


# --- dpo_loss ---------------------------------------------------------------------------

def dpo_inputs(seed: int, batch: int = 6, resp_c: int = 7, resp_r: int = 5, mask_dtype=torch.float32, spread: float = 0.5):
    cm, rm = ragged_mask(seed, batch, resp_c, mask_dtype), ragged_mask(seed + 1, batch, resp_r, mask_dtype)
    ref_c = -torch.rand(batch, resp_c, generator=torch.Generator().manual_seed(seed)) * 3
    ref_r = -torch.rand(batch, resp_r, generator=torch.Generator().manual_seed(seed + 1)) * 3
    pol_c = ref_c + spread * randn(seed + 2, batch, resp_c)
    pol_r = ref_r + spread * randn(seed + 3, batch, resp_r)
    return (with_padding_garbage(pol_c, cm), with_padding_garbage(pol_r, rm), with_padding_garbage(ref_c, cm, -4.0),
            with_padding_garbage(ref_r, rm, 3.0), cm, rm)


@pytest.mark.exercise("dpo_loss")
@pytest.mark.parametrize("seed,beta", [(0, 0.1), (1, 0.5), (2, 2.0)])
def test_dpo_loss_matches_reference(impl, ref, seed, beta):
    check_call_documented_keys(impl, ref, "dpo_loss", *dpo_inputs(seed), beta, keys=DPO_STATS)


@pytest.mark.exercise("dpo_loss")
@pytest.mark.parametrize("mask_dtype", MASK_DTYPES, ids=str)
def test_dpo_loss_takes_any_mask_dtype(impl, ref, mask_dtype):
    check_call_documented_keys(impl, ref, "dpo_loss", *dpo_inputs(3, mask_dtype=mask_dtype), 0.3, keys=DPO_STATS)


@pytest.mark.exercise("dpo_loss")
def test_dpo_loss_gradient_matches_reference(impl, ref):
    def run(fn):
        pol_c, pol_r, ref_c, ref_r, cm, rm = dpo_inputs(4)
        pol_c.requires_grad_(True)
        pol_r.requires_grad_(True)
        loss, _ = fn(pol_c, pol_r, ref_c, ref_r, cm, rm, 0.2)
        loss.backward()
        return pol_c.grad, pol_r.grad
    check_exercise(impl, ref, "dpo_loss", run, call="dpo_loss(..., beta=0.2).backward(): gradients of the policy log-probs")


@pytest.mark.exercise("dpo_loss")
def test_dpo_loss_stats_hold_no_graph(impl):
    pol_c, pol_r, ref_c, ref_r, cm, rm = dpo_inputs(8)
    loss, stats = impl.dpo_loss(pol_c.requires_grad_(True), pol_r.requires_grad_(True), ref_c, ref_r, cm, rm, 0.2)
    assert_no_graph(stats, "dpo_loss(policy log-probs requiring grad, ...)", what="stats",
                    labels=[mistake("dpo_loss", "stats_not_detached")])


@pytest.mark.exercise("dpo_loss")
def test_a_policy_equal_to_its_reference_has_loss_log_2_and_no_accuracy(impl):
    pol_c, pol_r, _, _, cm, rm = dpo_inputs(5)
    args = (pol_c, pol_r, pol_c.clone(), pol_r.clone(), cm, rm, 0.1)
    loss, stats = impl.dpo_loss(*args)
    got = torch.stack([loss.detach(), stats["rewards/accuracies"], stats["rewards/margins"]])
    assert_close(got, torch.tensor([math.log(2.0), 0.0, 0.0]), rtol=0, atol=1e-5, msg=lambda m: explain(
        describe_call("dpo_loss", *args),
        "with π = π_ref every implicit reward is 0: loss log 2, margins 0, accuracy 0 (ties do not count)\n  " + m,
        diagnose("dpo_loss", (loss, stats), *args)))


@pytest.mark.exercise("dpo_loss")
def test_dpo_loss_stays_finite_for_a_huge_wrong_margin(impl, ref):
    # The policy prefers the rejected responses by hundreds of nats: the loss is large, not inf.
    pol_c, pol_r, ref_c, ref_r, cm, rm = dpo_inputs(6)
    args = (pol_c - 100.0, pol_r + 100.0, ref_c, ref_r, cm, rm, 1.0)
    loss, stats = impl.dpo_loss(*args)
    expected, _ = ref.dpo_loss(*args)
    if not torch.isfinite(loss) or abs(loss.item() - expected.item()) > 1e-3 * abs(expected.item()):
        raise WrongAnswer(explain(describe_call("dpo_loss", *args), f"expected a finite loss {expected.item():.6g}, got {loss.item()}",
                                  diagnose("dpo_loss", (loss, stats), *args)))


@pytest.mark.exercise("dpo_loss")
def test_raising_chosen_and_lowering_rejected_lowers_the_loss(impl):
    pol_c, pol_r, ref_c, ref_r, cm, rm = dpo_inputs(7)
    pol_c.requires_grad_(True)
    pol_r.requires_grad_(True)
    loss, _ = impl.dpo_loss(pol_c, pol_r, ref_c, ref_r, cm, rm, 0.5)
    loss.backward()
    real_c, real_r = pol_c.grad[cm.bool()], pol_r.grad[rm.bool()]
    if not ((real_c < 0).all() and (real_r > 0).all()):
        raise WrongAnswer(explain("dpo_loss(...).backward()",
                                  "on real tokens d loss / d chosen log-probs must be < 0 and d loss / d rejected log-probs > 0",
                                  diagnose("dpo_loss", impl.dpo_loss(pol_c, pol_r, ref_c, ref_r, cm, rm, 0.5),
                                           pol_c, pol_r, ref_c, ref_r, cm, rm, 0.5)))


# --- the documented defaults ------------------------------------------------------------------

@pytest.mark.exercise("grpo_advantages")
def test_grpo_advantages_defaults(impl, ref):
    # scale="group", eps=1e-4 when left out (the signature is part of the docstring).
    check_call(impl, ref, "grpo_advantages", group_rewards(5, 3, 4), 4)


@pytest.mark.exercise("grpo_loss")
def test_grpo_loss_defaults(impl, ref):
    # cliprange=0.2, beta=0.04, normalisation="sequence" when left out.
    check_call_documented_keys(impl, ref, "grpo_loss", *grpo_inputs(7), keys=GRPO_STATS)


@pytest.mark.exercise("dpo_loss")
def test_dpo_loss_defaults(impl, ref):
    # beta=0.1 when left out.
    check_call_documented_keys(impl, ref, "dpo_loss", *dpo_inputs(9), keys=DPO_STATS)


# --- tokens a tool wrote (Part 9's response_masks) --------------------------------------------
# In Part 9 a calculator writes some tokens of a response: context the policy reads, not actions.
# The masks then hold 0 *inside* responses too, and every per-response mean must count the
# policy's tokens only. GroupTrainer (given code) takes response_masks and folds them into its masks.

def holey_mask(batch: int = 6, resp: int = 7) -> torch.Tensor:
    """Rows with the tool's tokens inside, at the end, alternating, and none (float, 0/1)."""
    rows = ["1100111", "1010101", "1111100", "1111111", "1000001", "1110000"]
    return torch.tensor([[float(c) for c in rows[b % len(rows)][:resp]] for b in range(batch)])


@pytest.mark.exercise("grpo_loss")
@pytest.mark.parametrize("normalisation", ["sequence", "token", "constant"])
def test_grpo_loss_counts_only_masked_in_tokens_inside_a_row(impl, ref, normalisation):
    logprobs, old, ref_logprobs, advantages, _ = grpo_inputs(5)
    check_call_documented_keys(impl, ref, "grpo_loss", logprobs, old, ref_logprobs, advantages, holey_mask(), 0.2, 0.1,
                               normalisation, 7, keys=GRPO_STATS)


VOCAB = 38
TOOL_ROWS = ("1100111111", "1010101010", "end", "1111111111", "1000000001", "1000000000")
TRAILING_ROWS = ("end", "1111111111", "end", "1000000000", "1111111111", "1000000000")


def tiny_policy(ref, seed: int):
    torch.manual_seed(seed)
    lm = GPT(GPTConfig(vocab_size=VOCAB, block_size=32, n_layer=1, n_head=2, d_model=16, dropout=0.0))
    with torch.no_grad():
        for p in lm.parameters():
            p.mul_(8.0) if p.dim() >= 2 else None
    return ref.LanguageModelPolicy(lm.eval())


def token_rows(seed: int, n: int, low: int, high: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(low, high + 1, (n,), generator=g)
    return [torch.randint(3, VOCAB, (int(k),), generator=g) for k in lengths]


def row_mask(pattern: str, length: int) -> torch.Tensor:
    """True where the policy wrote the token; "end": all but the last two (the tool's)."""
    if pattern == "end":
        return torch.arange(length) < length - 2
    return torch.tensor([c == "1" for c in pattern[:length]])


def group_run(module, ref, *, algo: str = "grpo", rows=TOOL_ROWS, truncate: bool = False, **overrides) -> dict:
    """Two GroupTrainer steps on 6 responses (2 groups of 3) with the tool's tokens masked out, then the
    policy's log-probs on fixed text. ``truncate``: cut each response after the policy's last token, no masks."""
    policy, reference = tiny_policy(ref, 0), tiny_policy(ref, 7).requires_grad_(False).eval()
    config = module.GroupConfig(**(dict(algo=algo, group_size=3, learning_rate=3e-3, mini_batch_size=3, epochs=2,
                                        beta=0.1, temperature=0.7, seed=0) | overrides))
    trainer = module.GroupTrainer(config, policy, reference, 0)
    queries, responses = token_rows(40, 6, 1, 6), token_rows(41, 6, 5, 9)
    masks = [row_mask(rows[b], len(r)) for b, r in enumerate(responses)]
    scores = 0.1 + torch.randn(6, generator=torch.Generator().manual_seed(42))
    if truncate:
        responses = [r[:int(m.nonzero().max()) + 1] for r, m in zip(responses, masks)]
    out = {}
    for i in range(2):
        stats = trainer.step(queries, responses, scores) if truncate else trainer.step(queries, responses, scores, masks)
        documented = set(GRPO_STATS) | {"policy/entropy"}
        out.update({f"step {i + 1}: {k}": v for k, v in stats.items()
                    if k.split("/", 1)[0] not in ("grpo", "rloo") or k.split("/", 1)[1] in documented
                    or k.split("/", 1)[1] in ("mean_scores", "advantages_abs_mean")})
    probe_q, probe_r = token_rows(98, 4, 1, 6), token_rows(99, 4, 2, 8)
    with torch.no_grad():
        out["log-probs after the steps"] = ref.batched_forward_pass(policy, probe_q, probe_r, pad_id=0)[0]
    return out


GROUP_CASES = {
    "grpo, sequence": dict(algo="grpo", normalisation="sequence"),
    "grpo, token, entropy bonus": dict(algo="grpo", normalisation="token", ent_coef=0.05),
    "grpo, constant": dict(algo="grpo", normalisation="constant", scale="none", max_len=9),
    "rloo": dict(algo="rloo"),
}


def check_group_trainer(impl, ref, case: str, **kwargs) -> None:
    overrides = GROUP_CASES[case] | kwargs
    got = group_run(impl, ref, **overrides)
    expected = group_run(ref, ref, **overrides)
    problem = compare(got, expected, rtol=1e-3, atol=1e-4)
    if problem is not None:
        raise WrongAnswer(explain(
            f"GroupTrainer({case}).step(queries, responses, scores, response_masks with the tool's tokens) × 2",
            f"differs from the reference's (GroupTrainer is given code: it calls your functions)\n  {problem}"))


@pytest.mark.slow
@pytest.mark.exercise("grpo_loss")
@pytest.mark.parametrize("case", [c for c in GROUP_CASES if c != "rloo"])
def test_group_trainer_with_tool_tokens_matches_reference(impl, ref, case):
    check_group_trainer(impl, ref, case)


@pytest.mark.slow
@pytest.mark.exercise("rloo_advantages")
def test_rloo_trainer_with_tool_tokens_matches_reference(impl, ref):
    check_group_trainer(impl, ref, "rloo")


@pytest.mark.exercise("grpo_loss")
@pytest.mark.parametrize("case", list(GROUP_CASES))
def test_group_trainer_with_a_response_the_policy_never_wrote(impl, ref, case):
    # A response whose mask is all False (say, an episode cut off and masked out): its score still counts in its
    # group's baseline, it trains nothing, and nothing becomes NaN — the same as the reference.
    rows = TOOL_ROWS[:5] + ("0000000000",)
    got = group_run(impl, ref, rows=rows, **GROUP_CASES[case])
    not_finite = sorted(k for k, v in got.items() if not torch.isfinite(torch.as_tensor(v)).all())
    call = f"GroupTrainer({case}).step(..., response_masks with one row all False)"
    if not_finite:
        raise WrongAnswer(explain(call, f"NaN or inf in {not_finite[:4]}"))
    problem = compare(got, group_run(ref, ref, rows=rows, **GROUP_CASES[case]), rtol=1e-3, atol=1e-4)
    if problem is not None:
        raise WrongAnswer(explain(call, problem))


def trailing_tool_problem(module, ref, case: str) -> str | None:
    """How a step with the tool's tokens only at the end of responses differs from the reference's step on the
    responses cut after the policy's last token, without masks (None: it does not)."""
    got = group_run(module, ref, rows=TRAILING_ROWS, **GROUP_CASES[case])
    expected = group_run(ref, ref, rows=TRAILING_ROWS, truncate=True, **GROUP_CASES[case])
    return compare(got, expected, rtol=1e-3, atol=1e-4)


@pytest.mark.exercise("grpo_loss")
@pytest.mark.parametrize("case", ["grpo, sequence", "rloo"])
def test_group_trainer_tool_tokens_after_the_policys_last_token_change_nothing(impl, ref, case):
    # The policy never read them before acting: the loss, the KL, the stats (tokens/responses_len_mean,
    # objective/kl, ...) and the weights after the step are those of the responses without them.
    problem = trailing_tool_problem(impl, ref, case)
    if problem is not None:
        raise WrongAnswer(explain(f"GroupTrainer({case}).step(..., response_masks False on the last two tokens of "
                                  "some responses)", "differs from the reference's step on the responses cut after "
                                  f"the policy's last token\n  {problem}"))


class _TrainerIgnoringMasks:
    """The reference's GroupTrainer, but response_masks dropped (or kept out of the stats): the wrong trainers
    the checks above must reject."""

    def __init__(self, ref, drop_from: str):
        import types

        base = ref.GroupTrainer

        class Wrong(base):
            def step(self, queries, responses, scores, response_masks=None):
                if drop_from == "everything":
                    return base.step(self, queries, responses, scores)
                # masks in the loss only: the rollout's masks (KL, advantages, stats) left whole
                forward = self._forward
                calls = {"n": 0}

                def first_pass_unmasked(model, q, r, return_logits=False):
                    calls["n"] += 1
                    out = forward(model, q, r, return_logits)
                    if calls["n"] <= 2:  # the rollout's two passes: leave their masks whole
                        return out
                    rows = [next(i for i, x in enumerate(responses) if x is y) for y in r]
                    return (*out[:3], ref.model_token_masks(out[3], r, [response_masks[i] for i in rows]))

                self._forward = first_pass_unmasked
                try:
                    return base.step(self, queries, responses, scores)
                finally:
                    del self._forward

        self.module = types.SimpleNamespace(**{**vars(ref), "GroupTrainer": Wrong})


@pytest.mark.parametrize("drop_from", ["everything", "the rollout"])
def test_the_tool_token_checks_reject_a_trainer_that_ignores_response_masks(ref, drop_from):
    # Given code has no known-mistake registry: this proves the check above fails on the two wrong trainers.
    wrong = _TrainerIgnoringMasks(ref, drop_from).module
    assert trailing_tool_problem(ref, ref, "grpo, sequence") is None
    assert trailing_tool_problem(wrong, ref, "grpo, sequence") is not None
