"""Tests for Part 3 (exercises/part3_rlhf.py).

Run: ``pytest tests/test_part3_rlhf.py`` (your code) or add ``--impl=solutions``.
Every value is compared with the reference solution on seeded inputs; a wrong answer names
the known mistake it looks like (workbook/mistakes/part3_rlhf/). The models are tiny GPTs
with fixed random weights (no pretraining), so the whole file runs in seconds.
Tolerances: float32 results within rtol=1e-5, atol=1e-5 unless a test says otherwise.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from workbook.checking import (WrongAnswer, assert_close, check_call, check_exercise, compare, describe_call, explain,
                               known_mistake, matching_mistakes)
from workbook.lm.model import GPT, GPTConfig
from workbook.promises import check_call_documented_keys

PART = "part3_rlhf"
POINTS = {
    "logprobs_from_logits": 1,
    "entropy_from_logits": 1,
    "whiten": 1,
    "masked_mean": 1,
    "masked_var": 1,
    "masked_whiten": 1,
    "clip_by_value": 1,
    "kl_penalty": 2,
    "compute_rewards": 2,
    "AdaptiveKLController": 1,
    "compute_advantages": 3,
    "ppo_loss": 3,
    "GPTWithValueHead": 2,
    "create_reference_model": 1,
    "batched_forward_pass": 3,
    "preference_loss": 1,
    "RewardModel": 2,
    "PPOTrainer": 3,
}
HYPOTHESIS = settings(max_examples=20, deadline=None, derandomize=True)
VOCAB = 38


def mistake(exercise: str, name: str) -> str:
    return known_mistake(PART, exercise, name)


def diagnose(exercise: str, got, *args, **kwargs) -> list[str]:
    return matching_mistakes(PART, exercise, lambda fn: fn(*args, **kwargs), got, rtol=1e-5, atol=1e-5)


def randn(seed: int, *shape: int, scale: float = 1.0) -> torch.Tensor:
    return scale * torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def ragged_mask(seed: int, batch: int = 5, resp: int = 7) -> torch.Tensor:
    """Right-padded float mask: row lengths in [2, resp], at least one row full length."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(2, resp + 1, (batch,), generator=g)
    lengths[int(torch.randint(batch, (1,), generator=g))] = resp
    return (torch.arange(resp)[None] < lengths[:, None]).float()


def tiny_lm(seed: int = 0, dropout: float = 0.0) -> GPT:
    """A ~5k-parameter GPT with fixed random weights (scaled up so its outputs are not all alike)."""
    torch.manual_seed(seed)
    lm = GPT(GPTConfig(vocab_size=VOCAB, block_size=32, n_layer=1, n_head=2, d_model=16, dropout=dropout))
    with torch.no_grad():
        for p in lm.parameters():
            p.mul_(8.0) if p.dim() >= 2 else None
    return lm.eval()


def expect_value_error(call: str, fn, named: tuple[str, str] | None = None) -> None:
    """``fn()`` must raise ValueError; a result or another exception is the learner's to fix.

    ``named``: (exercise, known mistake) to name on failure (looked up only then: the registry's first load costs)."""
    try:
        fn()
    except NotImplementedError:
        raise
    except ValueError:
        return
    except Exception as e:  # noqa: BLE001 - any other exception is the wrong answer under test
        raise WrongAnswer(explain(call, f"expected a ValueError, got {type(e).__name__}: {e}",
                                  [mistake(*named)] if named else [])) from None
    raise WrongAnswer(explain(call, "expected a ValueError, got a result", [mistake(*named)] if named else []))


def token_rows(seed: int, n: int, low: int, high: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(low, high + 1, (n,), generator=g)
    return [torch.randint(3, VOCAB, (int(k),), generator=g) for k in lengths]


# --- logprobs_from_logits and entropy_from_logits ---------------------------------------

@pytest.mark.exercise("logprobs_from_logits")
@pytest.mark.parametrize("seed,scale", [(0, 1.0), (1, 60.0)])
def test_logprobs_from_logits_matches_reference(impl, ref, seed, scale):
    logits = randn(seed, 3, 6, 11, scale=scale)
    labels = torch.randint(0, 11, (3, 6), generator=torch.Generator().manual_seed(seed))
    check_call(impl, ref, "logprobs_from_logits", logits, labels)


@pytest.mark.exercise("logprobs_from_logits")
@HYPOTHESIS
@given(seed=st.integers(0, 10_000), vocab=st.integers(2, 20))
def test_probabilities_of_all_labels_sum_to_one(impl, seed, vocab):
    logits = randn(seed, 4, vocab, scale=3.0)
    every = torch.stack([impl.logprobs_from_logits(logits, torch.full((4,), v)) for v in range(vocab)], dim=-1)
    total = every.exp().sum(-1)
    assert_close(total, torch.ones(4), rtol=1e-5, atol=1e-5, msg=lambda m: explain(
        "logprobs_from_logits(logits, label) for every label", "exp(log-probs) over all labels must sum to 1\n  " + m,
        diagnose("logprobs_from_logits", impl.logprobs_from_logits(logits, torch.zeros(4, dtype=torch.long)),
                 logits, torch.zeros(4, dtype=torch.long))))


@pytest.mark.exercise("entropy_from_logits")
@pytest.mark.parametrize("seed,scale,atol", [(0, 1.0, 1e-5), (1, 200.0, 1e-4)])
def test_entropy_from_logits_matches_reference(impl, ref, seed, scale, atol):
    # Logits of ±600: logsumexp(x) − Σ p·x cancels two numbers of ~600 in float32 (an error of ~1e-5, the reference's
    # own), while −Σ p·log_softmax(x) does not; atol 1e-4 accepts both (naive p·log p still gives NaN here).
    check_call(impl, ref, "entropy_from_logits", randn(seed, 3, 5, 9, scale=scale), atol=atol)


@pytest.mark.exercise("entropy_from_logits")
@HYPOTHESIS
@given(vocab=st.integers(2, 50), shift=st.floats(-50, 50))
def test_entropy_of_uniform_is_log_v_and_of_a_certainty_is_zero(impl, vocab, shift):
    uniform = torch.full((2, vocab), shift)
    certain = torch.zeros(2, vocab)
    certain[:, 0] = 1000.0
    got = impl.entropy_from_logits(torch.stack([uniform, certain]))
    expected = torch.tensor([[math.log(vocab)] * 2, [0.0, 0.0]])
    assert_close(got, expected, rtol=1e-5, atol=1e-4, msg=lambda m: explain(
        f"entropy_from_logits(uniform over {vocab} / one logit 1000 above the rest)",
        "expected log V for the uniform rows and 0 for the certain ones\n  " + m,
        diagnose("entropy_from_logits", got, torch.stack([uniform, certain]))))


# --- whiten, masked statistics, clip_by_value --------------------------------------------

@pytest.mark.exercise("whiten")
@pytest.mark.parametrize("shift_mean", [True, False])
def test_whiten_matches_reference(impl, ref, shift_mean):
    values = 3.0 + 2.0 * randn(0, 4, 6) + torch.arange(4.0)[:, None]
    check_call(impl, ref, "whiten", values, shift_mean=shift_mean)


@pytest.mark.exercise("whiten")
@HYPOTHESIS
@given(seed=st.integers(0, 10_000), n=st.integers(2, 40))
def test_whitened_values_have_mean_0_and_std_1(impl, seed, n):
    values = 5.0 + 3.0 * randn(seed, n)
    got = impl.whiten(values)
    assert_close(torch.stack([got.mean(), got.std()]), torch.tensor([0.0, 1.0]), rtol=1e-4, atol=1e-4,
                               msg=lambda m: explain(f"whiten(Tensor[{n}])", "mean must be 0 and (unbiased) std 1\n  " + m,
                                                     diagnose("whiten", got, values)))


@pytest.mark.exercise("masked_mean")
@pytest.mark.parametrize("axis", [None, 1, 0])
def test_masked_mean_matches_reference(impl, ref, axis):
    check_call(impl, ref, "masked_mean", randn(0, 5, 7) + 2.0, ragged_mask(0), axis=axis)


@pytest.mark.exercise("masked_mean")
def test_masked_mean_ignores_padding_values(impl):
    mask = ragged_mask(3)
    values = randn(3, 5, 7)
    garbage = values + 100.0 * (1 - mask)
    got, again = impl.masked_mean(values, mask), impl.masked_mean(garbage, mask)
    if not torch.allclose(got, again, atol=1e-5):
        raise WrongAnswer(explain("masked_mean(values, mask) with different values at padding",
                                  f"the result changed from {got.item():.5g} to {again.item():.5g}",
                                  diagnose("masked_mean", again, garbage, mask)))


@pytest.mark.exercise("masked_var")
@pytest.mark.parametrize("unbiased", [True, False])
def test_masked_var_matches_reference(impl, ref, unbiased):
    check_call(impl, ref, "masked_var", 2.0 * randn(1, 5, 7) + 1.0, ragged_mask(1), unbiased=unbiased)


@pytest.mark.exercise("masked_var")
@pytest.mark.parametrize("count,unbiased", [(1, True), (0, True), (0, False)])
def test_masked_var_rejects_a_mask_that_is_too_small(impl, count, unbiased):
    mask = torch.zeros(3, 4)
    mask.view(-1)[:count] = 1.0
    call = f"masked_var(values, mask holding {count} element(s), unbiased={unbiased})"
    try:
        impl.masked_var(randn(0, 3, 4), mask, unbiased=unbiased)
    except ValueError:
        return
    raise WrongAnswer(explain(call, "expected a ValueError", [mistake("masked_var", "no_error_on_tiny_mask")]))


@pytest.mark.exercise("masked_whiten")
@pytest.mark.parametrize("shift_mean", [True, False])
def test_masked_whiten_matches_reference(impl, ref, shift_mean):
    check_call(impl, ref, "masked_whiten", 3.0 * randn(2, 5, 7) + 1.5, ragged_mask(2), shift_mean=shift_mean)


@pytest.mark.exercise("masked_whiten")
@HYPOTHESIS
@given(seed=st.integers(0, 10_000), shift_mean=st.booleans())
def test_masked_whiten_equals_whiten_of_the_real_part(impl, ref, seed, shift_mean):
    mask = ragged_mask(seed)
    values = 2.0 * randn(seed, 5, 7) - 1.0 + 50.0 * (1 - mask)  # wild padding
    got = impl.masked_whiten(values, mask, shift_mean=shift_mean)
    expected = ref.whiten(values[mask.bool()], shift_mean=shift_mean)
    assert_close(got[mask.bool()], expected, rtol=1e-5, atol=1e-5, msg=lambda m: explain(
        "masked_whiten(values, mask)", "on the masked-in positions it must equal whiten(values[mask == 1])\n  " + m,
        diagnose("masked_whiten", got, values, mask, shift_mean=shift_mean)))


@pytest.mark.exercise("clip_by_value")
def test_clip_by_value_matches_reference(impl, ref):
    x, centre = 2.0 * randn(0, 4, 6), randn(1, 4, 6)
    check_call(impl, ref, "clip_by_value", x, centre - 0.3, centre + 0.3)


@pytest.mark.exercise("clip_by_value")
def test_clip_by_value_keeps_the_gradient(impl):
    x = randn(0, 4, 6).requires_grad_(True)
    out = impl.clip_by_value(x, torch.full((4, 6), -0.5), torch.full((4, 6), 0.5))
    if not out.requires_grad:
        raise WrongAnswer(explain("clip_by_value(x requiring grad, ...)", "the output has no gradient",
                                  [mistake("clip_by_value", "gradient_cut")]))
    out.sum().backward()
    inside = (x.detach().abs() < 0.5).float()
    assert_close(x.grad, inside, msg=lambda m: "gradient must be 1 inside the bounds, 0 outside\n  " + m)


# --- kl_penalty and compute_rewards --------------------------------------------------------

def logprob_pair(seed: int, shape=(4, 6), spread: float = 0.5):
    logprob = -torch.rand(*shape, generator=torch.Generator().manual_seed(seed)) * 3
    return logprob, logprob + spread * randn(seed + 1, *shape)


def full_logprob_pair(seed: int, shape=(4, 6, 9)):
    return F.log_softmax(randn(seed, *shape, scale=2.0), -1), F.log_softmax(randn(seed + 1, *shape, scale=2.0), -1)


@pytest.mark.exercise("kl_penalty")
@pytest.mark.parametrize("kind", ["kl", "abs", "mse", "k3", "full"])
def test_kl_penalty_matches_reference(impl, ref, kind):
    logprob, ref_logprob = full_logprob_pair(0) if kind == "full" else logprob_pair(0)
    check_call(impl, ref, "kl_penalty", logprob, ref_logprob, kind)


@pytest.mark.exercise("kl_penalty")
@pytest.mark.parametrize("kind", ["kl", "abs", "mse", "k3", "full"])
def test_kl_of_identical_policies_is_zero(impl, kind):
    logprob = full_logprob_pair(3)[0] if kind == "full" else logprob_pair(3)[0]
    got = impl.kl_penalty(logprob, logprob.clone(), kind)
    assert_close(got, torch.zeros_like(got), rtol=0, atol=1e-6, msg=lambda m: explain(
        f"kl_penalty(x, x, {kind!r})", "the KL of a policy to itself must be 0\n  " + m))


@pytest.mark.exercise("kl_penalty")
@HYPOTHESIS
@given(seed=st.integers(0, 10_000))
def test_full_and_k3_kl_are_never_negative(impl, seed):
    lp, ref_lp = full_logprob_pair(seed)
    full = impl.kl_penalty(lp, ref_lp, "full")
    k3 = impl.kl_penalty(*logprob_pair(seed, spread=2.0), "k3")
    for kind, got in (("full", full), ("k3", k3)):
        if got.min() < -1e-6:
            raise WrongAnswer(explain(f"kl_penalty(..., {kind!r})", f"a KL estimate was negative ({got.min().item():.4g})"))


@pytest.mark.exercise("kl_penalty")
def test_full_kl_is_kl_of_the_policy_to_the_reference(impl):
    lp, ref_lp = full_logprob_pair(5, shape=(3, 9))
    expected = torch.distributions.kl_divergence(torch.distributions.Categorical(logits=lp),
                                                 torch.distributions.Categorical(logits=ref_lp))
    got = impl.kl_penalty(lp, ref_lp, "full")
    assert_close(got, expected, rtol=1e-5, atol=1e-5, msg=lambda m: explain(
        "kl_penalty(logprob, ref_logprob, 'full')", "must equal KL(π ‖ π_ref) per position\n  " + m,
        diagnose("kl_penalty", got, lp, ref_lp, "full")))


@pytest.mark.exercise("kl_penalty")
def test_kl_penalty_rejects_an_unknown_kind(impl):
    try:
        impl.kl_penalty(*logprob_pair(0), "reverse")
    except ValueError:
        return
    raise WrongAnswer(explain("kl_penalty(..., kind='reverse')", "expected a ValueError",
                              [mistake("kl_penalty", "unknown_kind_accepted")]))


def reward_inputs(seed: int, batch: int = 5, resp: int = 7):
    masks = ragged_mask(seed, batch, resp)
    logprobs, ref_logprobs = logprob_pair(seed, (batch, resp))
    return randn(seed + 2, batch), logprobs, ref_logprobs, masks  # values at padding are not zero


@pytest.mark.exercise("compute_rewards")
@pytest.mark.parametrize("seed,kl_coef,kind", [(0, 0.2, "kl"), (1, 0.05, "k3")])
def test_compute_rewards_matches_reference(impl, ref, seed, kl_coef, kind):
    check_call(impl, ref, "compute_rewards", *reward_inputs(seed), kl_coef, kind)


@pytest.mark.exercise("compute_rewards")
def test_compute_rewards_with_full_kl(impl, ref):
    scores, _, _, masks = reward_inputs(4, resp=6)
    lp, ref_lp = full_logprob_pair(4)
    check_call(impl, ref, "compute_rewards", scores[:4], lp, ref_lp, masks[:4], 0.1, "full")


@pytest.mark.exercise("compute_rewards")
def test_identical_policies_get_only_the_score_on_the_last_real_token(impl):
    # Rows of length 3, 1 and 4: the scores 0.5, -1, 2 belong at columns 2, 0 and 3.
    masks = torch.tensor([[1.0, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1]])
    logprobs = -torch.rand(3, 4, generator=torch.Generator().manual_seed(0))
    scores = torch.tensor([0.5, -1.0, 2.0])
    args = (scores, logprobs, logprobs.clone(), masks, 0.3)
    rewards, non_score, kls = impl.compute_rewards(*args)
    expected = torch.tensor([[0.0, 0, 0.5, 0], [-1.0, 0, 0, 0], [0, 0, 0, 2.0]])
    assert_close(rewards, expected, rtol=0, atol=1e-6, msg=lambda m: explain(
        describe_call("compute_rewards", *args), "with zero KL the rewards are the scores at each row's last real token\n  " + m,
        diagnose("compute_rewards", (rewards, non_score, kls), *args)))


# --- AdaptiveKLController -----------------------------------------------------------------

def kl_trajectory(cls, init=0.2, target=6.0, horizon=10_000.0):
    ctl = cls(init, target, horizon)
    values = []
    for current, n_steps in [(6.0, 64), (12.0, 64), (30.0, 256), (4.5, 64), (0.5, 128), (5.9, 32)]:
        ctl.update(current, n_steps)
        values.append(ctl.value)
    return torch.tensor(values, dtype=torch.float64)


@pytest.mark.exercise("AdaptiveKLController")
@pytest.mark.parametrize("init,target,horizon", [(0.2, 6.0, 10_000.0), (0.05, 2.0, 500.0)])
def test_adaptive_kl_controller_matches_reference(impl, ref, init, target, horizon):
    check_exercise(impl, ref, "AdaptiveKLController", lambda cls: kl_trajectory(cls, init, target, horizon),
                   call=f"AdaptiveKLController({init}, {target}, {horizon}).update(current, n_steps) × 6 (β after each)",
                   rtol=1e-9, atol=1e-12)


@pytest.mark.exercise("AdaptiveKLController")
def test_kl_coefficient_grows_when_kl_is_above_target(impl):
    ctl = impl.AdaptiveKLController(0.1, 6.0, 1000.0)
    ctl.update(600.0, 100)  # far above target: the step is capped at +20% · 100/1000
    assert_close(torch.tensor(ctl.value, dtype=torch.float64), torch.tensor(0.1 * 1.02, dtype=torch.float64),
                               msg=lambda m: explain("AdaptiveKLController(0.1, 6, 1000).update(600, 100)",
                                                     "expected β = 0.1 · (1 + 0.2 · 100/1000) = 0.102\n  " + m,
                                                     matching_mistakes(PART, "AdaptiveKLController",
                                                                       lambda cls: kl_trajectory(cls), kl_trajectory(type(ctl)),
                                                                       rtol=1e-9, atol=1e-12)))


# --- compute_advantages ------------------------------------------------------------------

def advantage_inputs(seed: int, batch: int = 5, resp: int = 7):
    mask = ragged_mask(seed, batch, resp)
    return randn(seed, batch, resp), 0.3 * randn(seed + 1, batch, resp), mask  # garbage at padding


@pytest.mark.exercise("compute_advantages")
@pytest.mark.parametrize("seed,gamma,lam", [(0, 1.0, 0.95), (1, 0.9, 0.8)])
def test_compute_advantages_matches_reference(impl, ref, seed, gamma, lam):
    check_call(impl, ref, "compute_advantages", *advantage_inputs(seed), gamma, lam)


# A worked example (TRL's PPO internals on GPT-2/IMDB, one 9-token response, γ = 1, λ = 0.95).
EXAMPLE_VALUES = [0.6227, 0.1640, 1.4412, 0.2018, -0.0613, 1.0342, 1.4121, 0.5708, 0.7421]
EXAMPLE_REWARDS = [-0.0084, 0.0823, 0.1289, -0.1553, -0.1648, 0.0288, 0.0549, 0.0689, 1.1831]
EXAMPLE_RAW_ADVANTAGES = [0.4185, 0.9322, -0.4498, 0.6954, 1.1724, 0.2545, -0.1602, 0.6591, 0.4410]
EXAMPLE_RETURNS = [1.0412, 1.0962, 0.9914, 0.8972, 1.1112, 1.2887, 1.2519, 1.2299, 1.1831]


@pytest.mark.exercise("compute_advantages")
def test_compute_advantages_worked_example(impl):
    # The same response twice, once with two padded columns of garbage: same numbers.
    values = torch.tensor([EXAMPLE_VALUES + [5.0, -5.0], EXAMPLE_VALUES + [0.0, 0.0]])
    rewards = torch.tensor([EXAMPLE_REWARDS + [3.0, 3.0], EXAMPLE_REWARDS + [0.0, 0.0]])
    mask = torch.tensor([[1.0] * 9 + [0.0, 0.0]] * 2)
    args = (values, rewards, mask, 1.0, 0.95)
    got_values, advantages, returns = impl.compute_advantages(*args)
    raw = torch.tensor(EXAMPLE_RAW_ADVANTAGES)
    expected_adv = (raw - raw.repeat(2).mean()) / raw.repeat(2).std()
    call = "compute_advantages(TRL's 9-token example twice, 2 padded columns, gamma=1, lam=0.95)"
    for name, got, want in (("returns", returns[:, :9], torch.tensor([EXAMPLE_RETURNS] * 2)),
                            ("whitened advantages", advantages[:, :9], expected_adv.repeat(2, 1)),
                            ("anything at padding", torch.cat([got_values, advantages, returns])[:, 9:], torch.zeros(6, 2))):
        assert_close(got, want, rtol=0, atol=2e-3, msg=lambda m: explain(
            call, f"{name} differ from the worked example\n  " + m, diagnose("compute_advantages", (got_values, advantages, returns), *args)))


@pytest.mark.exercise("compute_advantages")
@HYPOTHESIS
@given(seed=st.integers(0, 10_000))
def test_advantages_ignore_what_is_in_the_padding(impl, seed):
    values, rewards, mask = advantage_inputs(seed)
    clean = impl.compute_advantages(values * mask, rewards * mask, mask, 1.0, 0.95)
    noisy = impl.compute_advantages(values + 10 * (1 - mask), rewards - 10 * (1 - mask), mask, 1.0, 0.95)
    for name, a, b in zip(("values", "advantages", "returns"), clean, noisy):
        if not torch.allclose(a * mask, b * mask, atol=1e-5):
            raise WrongAnswer(explain("compute_advantages(values, rewards, mask, 1.0, 0.95)",
                                      f"the {name} of real tokens changed when only the padding changed",
                                      diagnose("compute_advantages", noisy, values + 10 * (1 - mask), rewards - 10 * (1 - mask), mask, 1.0, 0.95)))


@pytest.mark.exercise("compute_advantages")
def test_compute_advantages_carries_no_gradient(impl):
    values, rewards, mask = advantage_inputs(0)
    out = impl.compute_advantages(values.requires_grad_(True), rewards, mask, 1.0, 0.95)
    assert not any(t.requires_grad for t in out), "compute_advantages must not let gradients flow (use torch.no_grad())"


@pytest.mark.exercise("compute_advantages")
def test_compute_advantages_of_one_token_responses(impl, ref):
    # Every response one token long: the batch is one column wide.
    check_call(impl, ref, "compute_advantages", randn(4, 3, 1), randn(5, 3, 1), torch.ones(3, 1), 0.9, 0.8)


@pytest.mark.exercise("compute_advantages")
@pytest.mark.parametrize("score,lengths", [(0.1, [7]), (-0.7, [7, 4, 6]), (0.1, [5, 7, 2, 7, 3]), (0.5, [7, 4, 6])])
def test_compute_advantages_when_every_token_has_the_same_advantage(impl, ref, score, lengths):
    # The value head still 0 and every response scored alike (γ = λ = 1): every raw advantage is the score, so the
    # whitened ones are 0 up to rounding (~1e-4). With scores like 0.1 or −0.7 the float32 mean differs from them by
    # ~1e-8, and a 1e-8 added to the std instead of the variance turns that noise into ±1. One row and several.
    mask = (torch.arange(7)[None] < torch.tensor(lengths)[:, None]).float()
    rewards = torch.zeros(len(lengths), 7)
    rewards[torch.arange(len(lengths)), torch.tensor(lengths) - 1] = score
    check_call(impl, ref, "compute_advantages", torch.zeros(len(lengths), 7), rewards, mask, 1.0, 1.0,
               rtol=1e-5, atol=1e-3)


@pytest.mark.exercise("compute_advantages")
@pytest.mark.parametrize("gamma,lam", [(-0.1, 0.95), (1.1, 0.95), (1.0, -0.1), (1.0, 1.1),
                                       (float("nan"), 0.95), (1.0, float("nan"))])
def test_compute_advantages_refuses_gamma_or_lam_outside_0_1(impl, gamma, lam):
    # One of the two out of range at a time; NaN passes `x < 0 or x > 1` (every comparison with NaN is False).
    nan = math.isnan(gamma) or math.isnan(lam)
    expect_value_error(f"compute_advantages(values, rewards, mask, gamma={gamma}, lam={lam})",
                       lambda: impl.compute_advantages(*advantage_inputs(0), gamma, lam),
                       ("compute_advantages", "nan_passes_the_range_check") if nan else None)


@pytest.mark.exercise("compute_advantages")
@pytest.mark.parametrize("gamma,lam", [(0.0, 0.0), (1.0, 1.0)])
def test_compute_advantages_accepts_gamma_and_lam_at_the_bounds(impl, ref, gamma, lam):
    check_call(impl, ref, "compute_advantages", *advantage_inputs(2), gamma, lam)


# --- ppo_loss -----------------------------------------------------------------------------

# The stats the docstring documents (TRL's names); a learner may return more.
PPO_STATS = ("loss/policy", "loss/value", "loss/total", "policy/approxkl", "policy/policykl", "policy/clipfrac",
             "policy/advantages_mean", "policy/ratio", "returns/mean", "returns/var", "val/vpred", "val/error",
             "val/clipfrac", "val/mean", "val/var")

def ppo_inputs(seed: int, batch: int = 5, resp: int = 7):
    mask = ragged_mask(seed, batch, resp)
    old_logprobs = -torch.rand(batch, resp, generator=torch.Generator().manual_seed(seed)) * 3
    logprobs = old_logprobs + 0.3 * randn(seed + 1, batch, resp)  # many ratios outside [0.8, 1.2]
    values = randn(seed + 2, batch, resp)
    vpreds = values + 0.4 * randn(seed + 3, batch, resp)
    advantages = randn(seed + 4, batch, resp)
    returns = values + randn(seed + 5, batch, resp)
    return old_logprobs, values, logprobs, vpreds, mask, advantages, returns


@pytest.mark.exercise("ppo_loss")
@pytest.mark.parametrize("seed,cliprange,cliprange_value,vf_coef", [(0, 0.2, 0.2, 0.1), (1, 0.1, 0.5, 0.5)])
def test_ppo_loss_matches_reference(impl, ref, seed, cliprange, cliprange_value, vf_coef):
    check_call_documented_keys(impl, ref, "ppo_loss", *ppo_inputs(seed), cliprange, cliprange_value, vf_coef,
                               keys=PPO_STATS)


@pytest.mark.exercise("ppo_loss")
def test_ppo_loss_before_any_update_is_minus_the_mean_advantage(impl):
    old_logprobs, values, _, _, mask, advantages, returns = ppo_inputs(2)
    args = (old_logprobs, values, old_logprobs.clone(), values.clone(), mask, advantages, returns, 0.2, 0.2, 0.1)
    pg_loss, vf_loss, stats = impl.ppo_loss(*args)
    n = mask.sum()
    expected = torch.stack([-(advantages * mask).sum() / n, 0.1 * 0.5 * ((values - returns) ** 2 * mask).sum() / n,
                            stats["policy/clipfrac"] * 0, stats["val/clipfrac"] * 0])
    got = torch.stack([pg_loss, vf_loss, stats["policy/clipfrac"], stats["val/clipfrac"]])
    assert_close(got, expected, rtol=1e-5, atol=1e-6, msg=lambda m: explain(
        "ppo_loss(...) with logprobs == old_logprobs and vpreds == values",
        "expected pg_loss = −masked_mean(A), vf_loss = vf_coef · ½ · masked_mean((V − R)²), no clipping\n  " + m,
        diagnose("ppo_loss", (pg_loss, vf_loss, stats), *args)))


@pytest.mark.exercise("ppo_loss")
def test_ppo_loss_has_gradients_and_ignores_padding(impl):
    old_logprobs, values, logprobs, vpreds, mask, advantages, returns = ppo_inputs(3)
    args = [old_logprobs, values, logprobs.requires_grad_(True), vpreds.requires_grad_(True), mask, advantages, returns]
    pg_loss, vf_loss, stats = impl.ppo_loss(*args, 0.2, 0.2, 0.1)
    (pg_loss + vf_loss).backward()
    assert logprobs.grad is not None and vpreds.grad is not None, "no gradient reached logprobs/vpreds"
    pad = (1 - mask).bool()
    if logprobs.grad[pad].abs().max() > 0 or vpreds.grad[pad].abs().max() > 0:
        raise WrongAnswer(explain("ppo_loss(...)", "the loss depends on padding positions",
                                  [mistake("ppo_loss", "unmasked_mean")]))


# --- models: value head, reference, forward pass, reward model ------------------------------

def batch_ids(seed: int = 0):
    """Right- and left-padded versions of the same 4 rows, with their masks."""
    from workbook.lm.tokenizer import pad_batch

    rows = token_rows(seed, 4, 2, 9)
    right = pad_batch(rows, side="right", pad_id=0)
    left = pad_batch(rows, side="left", pad_id=0)
    return rows, right, left


def value_head_summary(cls):
    lm = tiny_lm(0)
    model = cls(lm)
    _, (ids, mask), _ = batch_ids(0)
    logits, values = model(ids, mask)
    with torch.no_grad():
        model.value_head.weight.normal_(generator=torch.Generator().manual_seed(1))
    _, values_after = model(ids, mask)
    (values_after * mask).sum().backward()
    trunk_grad = sum(p.grad.abs().sum() for n, p in model.named_parameters() if n.startswith("lm.") and p.grad is not None)
    return {"logits": logits.detach(), "values at init": values.detach(), "values with a random head": values_after.detach(),
            "trunk gets gradient from values": bool(trunk_grad > 0), "is the lm kept as .lm": model.lm is lm}


@pytest.mark.exercise("GPTWithValueHead")
def test_value_head_model_matches_reference(impl, ref):
    check_exercise(impl, ref, "GPTWithValueHead", value_head_summary,
                   call="GPTWithValueHead(tiny GPT)(input_ids, attention_mask), then with a random head", atol=1e-5)


@pytest.mark.exercise("GPTWithValueHead")
def test_value_head_starts_at_zero(impl):
    model = impl.GPTWithValueHead(tiny_lm(0))
    _, (ids, mask), _ = batch_ids(1)
    logits, values = model(ids, mask)
    if values.shape != ids.shape:
        raise WrongAnswer(explain("GPTWithValueHead(lm)(input_ids [4, T], mask)", f"values have shape {tuple(values.shape)}, expected {tuple(ids.shape)}",
                                  [mistake("GPTWithValueHead", "values_not_squeezed")]))
    if values.abs().max() > 0:
        raise WrongAnswer(explain("GPTWithValueHead(lm)", "the values of a fresh model are not all 0",
                                  [mistake("GPTWithValueHead", "value_head_not_zero_initialised")]))


def reference_summary(create):
    torch.manual_seed(0)
    policy = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Dropout(0.5), torch.nn.Linear(4, 2)).train()
    before = [p.detach().clone() for p in policy.parameters()]
    reference = create(policy)
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(1.0)
    return {
        "is a different object": reference is not policy,
        "shares no parameter tensor": not {p.data_ptr() for p in reference.parameters()} & {p.data_ptr() for p in policy.parameters()},
        "keeps the policy's initial weights": all(torch.equal(a, b) for a, b in zip(reference.parameters(), before)),
        "parameters frozen": all(not p.requires_grad for p in reference.parameters()),
        "in eval mode": all(not m.training for m in reference.modules()),
        "policy still trainable": all(p.requires_grad for p in policy.parameters()),
        "policy still in train mode": policy.training,
    }


@pytest.mark.exercise("create_reference_model")
def test_create_reference_model(impl, ref):
    check_exercise(impl, ref, "create_reference_model", reference_summary,
                   call="create_reference_model(policy), then the policy's weights are changed")


def forward_inputs(seed: int = 0, n: int = 5):
    return token_rows(seed, n, 1, 6), token_rows(seed + 1, n, 1, 9)


@pytest.mark.exercise("batched_forward_pass")
@pytest.mark.parametrize("temperature,return_logits", [(0.7, True), (1.0, False)])
def test_batched_forward_pass_matches_reference(impl, ref, temperature, return_logits):
    model = ref.GPTWithValueHead(tiny_lm(0))
    with torch.no_grad():
        model.value_head.weight.normal_(generator=torch.Generator().manual_seed(0))
    queries, responses = forward_inputs(0)

    def run(fn):
        with torch.no_grad():
            return fn(model, [q.clone() for q in queries], [r.clone() for r in responses],
                      temperature=temperature, pad_id=0, return_logits=return_logits)

    check_exercise(impl, ref, "batched_forward_pass", run,
                   call=f"batched_forward_pass(tiny GPTWithValueHead, 5 queries, 5 responses, temperature={temperature}, "
                        f"pad_id=0, return_logits={return_logits})", cache_key=f"forward pass {temperature} {return_logits}")


@pytest.mark.exercise("batched_forward_pass")
@pytest.mark.parametrize("case", ["no rows", "one response more than queries", "an empty query", "an empty response",
                                  "temperature 0", "temperature -0.5"])
def test_batched_forward_pass_refuses_bad_arguments(impl, ref, case):
    model = ref.GPTWithValueHead(tiny_lm(0))
    queries, responses = forward_inputs(3, n=3)
    temperature = 1.0
    if case == "no rows":
        queries, responses = [], []
    elif case == "one response more than queries":
        responses = responses + [responses[0]]
    elif case == "an empty query":
        queries[1] = torch.tensor([], dtype=torch.long)
    elif case == "an empty response":
        responses[2] = torch.tensor([], dtype=torch.long)
    else:
        temperature = float(case.split()[-1])
    with torch.no_grad():
        expect_value_error(f"batched_forward_pass(tiny GPTWithValueHead, queries, responses, temperature={temperature}) "
                           f"with {case}",
                           lambda: impl.batched_forward_pass(model, queries, responses, temperature=temperature))


@pytest.mark.exercise("batched_forward_pass")
def test_batched_forward_pass_defaults(impl, ref):
    model = ref.GPTWithValueHead(tiny_lm(1))
    queries, responses = forward_inputs(2)

    def run(fn):
        with torch.no_grad():
            return fn(model, [q.clone() for q in queries], [r.clone() for r in responses])

    check_exercise(impl, ref, "batched_forward_pass", run,
                   call="batched_forward_pass(tiny GPTWithValueHead, 5 queries, 5 responses) — the defaults: "
                        "temperature=1.0, pad_id=0, return_logits=False")


@pytest.mark.exercise("batched_forward_pass")
def test_forward_pass_keeps_the_gradient(impl, ref):
    # "Don't wrap this in torch.no_grad(): the PPO update calls it for gradients too."
    model = ref.GPTWithValueHead(tiny_lm(2))
    queries, responses = forward_inputs(1, n=3)
    logprobs, _, values, _ = impl.batched_forward_pass(model, queries, responses)
    if not (logprobs.requires_grad and values.requires_grad):
        raise WrongAnswer(explain("batched_forward_pass(GPTWithValueHead whose parameters require grad, 3 queries, ...)",
                                  f"logprobs.requires_grad={logprobs.requires_grad}, values.requires_grad="
                                  f"{values.requires_grad}: both must carry the model's gradient",
                                  [mistake("batched_forward_pass", "wrapped_in_no_grad")]))


@pytest.mark.exercise("batched_forward_pass")
def test_forward_pass_log_probs_are_the_models_own(impl, ref):
    model = ref.GPTWithValueHead(tiny_lm(1))
    query, response = torch.tensor([1, 5, 9]), torch.tensor([12, 7, 2])
    with torch.no_grad():
        out = impl.batched_forward_pass(model, [query], [response], temperature=0.5)
        logits, _ = model(torch.cat([query, response])[None])
        # Positions 2, 3, 4 predict tokens 3, 4, 5 (the response).
        expected = F.log_softmax(logits[0, 2:5] / 0.5, -1).gather(-1, response[:, None]).squeeze(-1)
    logprobs = out[0]
    assert_close(logprobs[0], expected, msg=lambda m: explain(
        "batched_forward_pass(model, [query of 3], [response of 3], temperature=0.5)",
        "log-probs must be log softmax(logits / T) at the position *before* each response token\n  " + m,
        diagnose("batched_forward_pass", out, model, [query], [response], temperature=0.5)))


@pytest.mark.exercise("batched_forward_pass")
@settings(max_examples=10, deadline=None, derandomize=True)  # five splits, each a handful of forward passes
@given(seed=st.integers(0, 10_000), split=st.integers(1, 5))
def test_forward_pass_is_the_same_whatever_the_batch(impl, ref, seed, split):
    model = ref.GPTWithValueHead(tiny_lm(2))
    with torch.no_grad():
        model.value_head.weight.normal_(generator=torch.Generator().manual_seed(seed))
        queries, responses = forward_inputs(seed, 6)
        together = impl.batched_forward_pass(model, queries, responses, temperature=0.8)
        parts = [impl.batched_forward_pass(model, queries[i:i + split], responses[i:i + split], temperature=0.8)
                 for i in range(0, 6, split)]
    for name, k in (("logprobs", 0), ("values", 2), ("masks", 3)):
        pieces = [p[k] for p in parts]
        width = together[k].shape[1]
        joined = torch.cat([F.pad(p, (0, width - p.shape[1])) for p in pieces])
        if not torch.allclose(joined, together[k], atol=1e-5):
            raise WrongAnswer(explain(f"batched_forward_pass on 6 rows at once vs in chunks of {split}",
                                      f"the {name} differ (padding or other rows leak into a row's result)",
                                      diagnose("batched_forward_pass", together, model, queries, responses, temperature=0.8)))


def reward_model_summary(cls):
    torch.manual_seed(3)
    model = cls(tiny_lm(3))
    rows, (right, right_mask), (left, left_mask) = batch_ids(2)
    with torch.no_grad():
        return {"right-padded": model(right, right_mask), "left-padded": model(left, left_mask),
                "one row at a time": torch.cat([model(r[None], torch.ones(1, len(r), dtype=torch.long)) for r in rows])}


@pytest.mark.exercise("RewardModel")
def test_reward_model_reads_the_last_real_token(impl, ref):
    check_exercise(impl, ref, "RewardModel", reward_model_summary,
                   call="RewardModel(tiny GPT)(4 rows, right-padded / left-padded / one at a time)")


@pytest.mark.exercise("RewardModel")
def test_reward_model_with_a_one_token_row(impl, ref):
    from workbook.lm.tokenizer import pad_batch

    rows = [torch.tensor([5]), torch.tensor([7, 4, 9, 3, 8])]

    def run(cls):
        torch.manual_seed(3)
        model = cls(tiny_lm(3))
        with torch.no_grad():
            return {"right-padded": model(*pad_batch(rows, side="right", pad_id=0)),
                    "left-padded": model(*pad_batch(rows, side="left", pad_id=0)),
                    "one row at a time": torch.cat([model(r[None], torch.ones(1, len(r), dtype=torch.long)) for r in rows])}

    check_exercise(impl, ref, "RewardModel", run,
                   call="RewardModel(tiny GPT)(a row of one token and a row of five: right-padded / left-padded / "
                        "one at a time)")


@pytest.mark.exercise("RewardModel")
def test_reward_model_refuses_a_row_without_real_tokens(impl, ref):
    from workbook.lm.tokenizer import pad_batch

    torch.manual_seed(3)
    model = impl.RewardModel(tiny_lm(3))
    ids, mask = pad_batch([torch.tensor([5, 6, 7]), torch.tensor([7, 4, 9, 3])], side="right", pad_id=0)
    mask[0] = 0
    with torch.no_grad():
        expect_value_error("RewardModel(tiny GPT)(2 rows, the first with an all-0 attention_mask)",
                           lambda: model(ids, mask), ("RewardModel", "no_error_on_an_empty_row"))


@pytest.mark.exercise("RewardModel")
def test_reward_model_trains_its_trunk_and_head(impl):
    # preference_loss fine-tunes the whole reward model: every parameter the reward reads must get a gradient.
    from workbook.lm.tokenizer import pad_batch

    torch.manual_seed(3)
    model = impl.RewardModel(tiny_lm(3))
    ids, mask = pad_batch([torch.tensor([5, 6, 7]), torch.tensor([7, 4, 9, 3])], side="right", pad_id=0)
    rewards = model(ids, mask)
    if rewards.requires_grad:
        rewards.sum().backward()
    starved = [name for name, p in model.named_parameters()  # the trunk's blocks and final norm, and the head
               if name.startswith(("lm.blocks", "lm.ln_f", "head")) and (p.grad is None or not p.grad.abs().sum() > 0)]
    if starved:
        raise WrongAnswer(explain("RewardModel(tiny GPT)(2 rows), then rewards.sum().backward()",
                                  f"no gradient reached {', '.join(starved[:4])}{' ...' if len(starved) > 4 else ''}: "
                                  "preference training must move the trunk and the head",
                                  [mistake("RewardModel", "trunk_detached")]))


@pytest.mark.exercise("RewardModel")
def test_reward_is_the_same_whatever_the_padding(impl):
    got = reward_model_summary(impl.RewardModel)
    for name in ("right-padded", "left-padded"):
        if not torch.allclose(got[name], got["one row at a time"], atol=1e-5):
            raise WrongAnswer(explain("RewardModel(tiny GPT)(...)", f"{name} rewards differ from rewards of one row at a time",
                                      matching_mistakes(PART, "RewardModel", reward_model_summary, got, rtol=1e-5, atol=1e-5)))


# --- preference_loss ------------------------------------------------------------------------

@pytest.mark.exercise("preference_loss")
@pytest.mark.parametrize("with_margin", [False, True])
def test_preference_loss_matches_reference(impl, ref, with_margin):
    margin = torch.rand(6, generator=torch.Generator().manual_seed(2)) if with_margin else None
    check_call(impl, ref, "preference_loss", randn(0, 6), randn(1, 6), margin)


@pytest.mark.exercise("preference_loss")
def test_preference_loss_is_stable_and_log2_at_a_tie(impl, ref):
    check_call(impl, ref, "preference_loss", torch.tensor([-100.0, 3.0, 0.0]), torch.tensor([100.0, 3.0, 0.0]))
    got = impl.preference_loss(torch.zeros(4), torch.zeros(4))
    assert_close(got, torch.tensor(math.log(2)), msg=lambda m: "a tie must cost log 2\n  " + m)


# --- PPOTrainer -----------------------------------------------------------------------------

def trainer_run(cls, ref, *, seed: int = 0, steps: int = 2, global_seed: int | None = None, batch: int = 6,
                reference_seed: int | None = None, **overrides):
    """Build a tiny policy (dropout on in its config), train `steps` PPO steps on fixed data.

    The reference is a frozen copy of the policy, or with ``reference_seed`` another tiny GPT
    (so the KL is not 0 from the first step on); ``overrides`` change the PPOConfig.
    """
    policy = ref.GPTWithValueHead(tiny_lm(seed, dropout=0.2))
    if reference_seed is None:
        reference = ref.create_reference_model(policy)
    else:
        reference = ref.create_reference_model(ref.GPTWithValueHead(tiny_lm(reference_seed)))
    config = ref.PPOConfig(**(dict(learning_rate=3e-3, mini_batch_size=3, ppo_epochs=2, temperature=0.7, init_kl_coef=0.3,
                                   target=0.5, horizon=40.0, seed=seed) | overrides))
    trainer = cls(config, policy, reference, 0)
    queries, responses = forward_inputs(seed + 10, batch)
    scores = randn(seed + 20, batch)
    if global_seed is not None:
        torch.manual_seed(global_seed)
    out = {}
    for i in range(steps):
        stats = trainer.step(queries, responses, scores)
        out.update({f"step {i + 1}: {k}": v for k, v in stats.items()})
    out["kl_coef after"] = trainer.kl_ctl.value
    return out, trainer, reference, policy


@pytest.mark.slow
@pytest.mark.exercise("PPOTrainer")
def test_trainer_step_matches_reference(impl, ref):
    check_exercise(impl, ref, "PPOTrainer", lambda cls: trainer_run(cls, ref)[0],
                   call="PPOTrainer(tiny policy, temperature=0.7, 6 samples, minibatches of 3, 2 epochs).step(...) × 2",
                   rtol=1e-3, atol=1e-4, cache_key="trainer default config")


@pytest.mark.exercise("PPOTrainer")
def test_trainer_step_does_not_depend_on_the_global_rng(impl, ref):
    first, *_ = trainer_run(impl.PPOTrainer, ref, steps=1, global_seed=1)
    second, *_ = trainer_run(impl.PPOTrainer, ref, steps=1, global_seed=2)
    if any(abs(first[k] - second[k]) > 1e-6 for k in first):
        raise WrongAnswer(explain("PPOTrainer.step(...) with torch.manual_seed(1), then with torch.manual_seed(2)",
                                  "different stats: something random (dropout?) runs during the step",
                                  [mistake("PPOTrainer", "dropout_left_on")]))


@pytest.mark.exercise("PPOTrainer")
def test_trainer_step_leaves_the_reference_alone(impl, ref):
    _, _, reference, policy = trainer_run(impl.PPOTrainer, ref, steps=1)
    fresh = ref.GPTWithValueHead(tiny_lm(0, dropout=0.2))
    unchanged = all(torch.equal(a, b) for a, b in zip(reference.parameters(), fresh.parameters()))
    no_grads = all(p.grad is None for p in reference.parameters())
    moved = not all(torch.equal(a, b) for a, b in zip(policy.parameters(), fresh.parameters()))
    assert unchanged and no_grads, "the reference model changed or received gradients during PPOTrainer.step"
    assert moved, "the policy did not change during PPOTrainer.step"


# Configurations a trainer must honour: every kl_penalty kind, max_grad_norm off / small /
# default, non-default clip ranges, vf_coef, γ and λ, and an entropy bonus, and an adaptive-KL target
# that the first step's KL misses by less than the controller's ±20% clip (so the size of
# the KL given to kl_ctl.update matters), above and below. The reference is another tiny GPT
# so that the KL is not 0 at the first step. target=None: the first step's KL (reference run),
# divided by `target_ratio`.
TRAINER_CONFIGS = {
    "k3, max_grad_norm=None, clip ranges 0.1/0.5, vf_coef 0.3, ent_coef 0.05, KL 10% above target": dict(
        kl_penalty="k3", max_grad_norm=None, cliprange=0.1, cliprange_value=0.5, vf_coef=0.3, ent_coef=0.05,
        target_ratio=1.1),
    "full KL, max_grad_norm=0.01, KL 10% below target": dict(kl_penalty="full", max_grad_norm=0.01, target_ratio=0.9),
    "abs, ent_coef 0.2, cliprange_value 0.05, gamma 0.9, lam 0.8": dict(
        kl_penalty="abs", ent_coef=0.2, cliprange_value=0.05, gamma=0.9, lam=0.8, target_ratio=1.05),
    "mse, fixed KL coefficient, max_grad_norm=None": dict(kl_penalty="mse", adap_kl_ctrl=False, max_grad_norm=None),
}
TRAINER_SUSPECTS = ("kl_penalty_kind_ignored", "gradient_never_clipped", "clipped_when_max_grad_norm_is_none",
                    "clipranges_swapped", "entropy_bonus_added_to_loss", "kl_controller_fed_token_mean",
                    "gamma_and_lam_not_from_config")


def configured_trainer_stats(cls, ref, name: str) -> dict:
    overrides = dict(TRAINER_CONFIGS[name])
    ratio = overrides.pop("target_ratio", None)
    if ratio is not None:
        first_kl = check_exercise_reference_kl(ref, name, overrides)
        overrides["target"] = first_kl / ratio
    out, *_ = trainer_run(cls, ref, steps=1, reference_seed=7, **overrides)
    return out


_FIRST_KL: dict[str, float] = {}


def check_exercise_reference_kl(ref, name: str, overrides: dict) -> float:
    """The reference trainer's first-step objective/kl under this configuration (the target is set from it)."""
    if name not in _FIRST_KL:
        out, *_ = trainer_run(ref.PPOTrainer, ref, steps=1, reference_seed=7, **overrides)
        _FIRST_KL[name] = out["step 1: objective/kl"]
        assert _FIRST_KL[name] > 0.05, f"test setup: the first KL under {name!r} should be clearly positive"
    return _FIRST_KL[name]


@pytest.mark.slow
@pytest.mark.exercise("PPOTrainer")
@pytest.mark.parametrize("name", list(TRAINER_CONFIGS))
def test_trainer_step_honours_its_config(impl, ref, name):
    check_exercise(impl, ref, "PPOTrainer", lambda cls: configured_trainer_stats(cls, ref, name),
                   call=f"PPOTrainer(tiny policy, reference = another tiny GPT, PPOConfig({name})).step(...)",
                   rtol=1e-3, atol=1e-4, suspects=TRAINER_SUSPECTS, cache_key=f"trainer config {name}")


@pytest.mark.exercise("PPOTrainer")
def test_trainer_stats_are_floats_and_std_of_one_score_is_zero(impl, ref):
    # seed 1: the one response has 7 tokens (whitening needs at least 2)
    out, *_ = trainer_run(impl.PPOTrainer, ref, seed=1, steps=1, batch=1, mini_batch_size=1, ppo_epochs=1)
    call = "PPOTrainer(...).step(one query, one response of 7 tokens, one score)"
    not_floats = sorted(k for k, v in out.items() if type(v) is not float)
    if not_floats:
        raise WrongAnswer(explain(call, f"stats must be Python floats; not floats: {not_floats[:5]}",
                                  [mistake("PPOTrainer", "stats_are_tensors")]))
    if out["step 1: ppo/std_scores"] != 0.0:
        raise WrongAnswer(explain(call, f"ppo/std_scores of a batch of one must be 0.0, got {out['step 1: ppo/std_scores']}",
                                  [mistake("PPOTrainer", "std_of_one_score_is_nan")]))


@pytest.mark.exercise("PPOTrainer")
def test_std_of_two_scores_is_their_unbiased_std(impl, ref):
    out, *_ = trainer_run(impl.PPOTrainer, ref, seed=1, steps=1, batch=2, mini_batch_size=2, ppo_epochs=1)
    expected = randn(21, 2).std().item()  # trainer_run's scores: randn(seed + 20, batch)
    got = out["step 1: ppo/std_scores"]
    if not isinstance(got, float) or abs(got - expected) > 1e-6:
        raise WrongAnswer(explain("PPOTrainer(...).step(two queries, two responses, two scores)",
                                  f"ppo/std_scores must be the unbiased std of the scores, {expected:.6f}; got {got!r} "
                                  "(only a batch of one gets 0.0)"))


class GradModeRecorder(torch.nn.Module):
    """Wraps a model; remembers whether autograd was on at each call."""

    def __init__(self, model):
        super().__init__()
        self.model = model
        self.grad_modes: list[bool] = []

    def forward(self, *args, **kwargs):
        self.grad_modes.append(torch.is_grad_enabled())
        return self.model(*args, **kwargs)


@pytest.mark.exercise("PPOTrainer")
@pytest.mark.parametrize("short", ["responses", "scores"])
def test_trainer_step_refuses_inputs_of_different_lengths(impl, ref, short):
    policy = ref.GPTWithValueHead(tiny_lm(0))
    trainer = impl.PPOTrainer(ref.PPOConfig(mini_batch_size=2, ppo_epochs=1, seed=0), policy,
                              ref.create_reference_model(policy), 0)
    queries, responses = forward_inputs(10, 4)
    scores = randn(20, 4)
    if short == "responses":
        responses = responses[:3]
    else:
        scores = scores[:3]
    expect_value_error(f"PPOTrainer.step(4 queries, {len(responses)} responses, {len(scores)} scores)",
                       lambda: trainer.step(queries, responses, scores))


@pytest.mark.exercise("PPOTrainer")
def test_reference_runs_without_autograd_and_gets_no_gradient(impl, ref):
    policy = ref.GPTWithValueHead(tiny_lm(0))
    reference = GradModeRecorder(ref.GPTWithValueHead(tiny_lm(7)))  # not frozen: only no_grad protects it
    trainer = impl.PPOTrainer(ref.PPOConfig(mini_batch_size=3, ppo_epochs=1, kl_penalty="full"), policy, reference, 0)
    queries, responses = forward_inputs(10, 6)
    trainer.step(queries, responses, randn(20, 6))
    call = "PPOTrainer(policy, reference that requires grad).step(...)"
    if not reference.grad_modes or any(reference.grad_modes):
        raise WrongAnswer(explain(call, f"the reference ran with autograd on ({reference.grad_modes} at its calls)",
                                  [mistake("PPOTrainer", "reference_run_with_grad")]))
    assert all(p.grad is None for p in reference.parameters()), f"{call}: the reference received gradients"


# --- masks of every dtype ---------------------------------------------------------------------
# TRL's functions take the int64 attention masks tokenizers return; ours take bool, integer
# and float masks, with identical results. Each test below calls the exercise with the same
# 0/1 mask as float32, int64 and bool and compares every result with the reference's.

MASK_DTYPES = (torch.float32, torch.int64, torch.bool)


def check_mask_dtypes(impl, ref, exercise: str, mask_mistake: str, args: tuple, mask_at: int, keys=None,
                      **kwargs) -> None:
    """``check_call`` with the mask as float32, int64 and bool; ``keys``: compare only these stats keys."""
    raised = {}
    for dtype in MASK_DTYPES:
        call_args = list(args)
        call_args[mask_at] = args[mask_at].to(dtype)
        try:
            if keys is None:
                check_call(impl, ref, exercise, *call_args, **kwargs)
            else:
                check_call_documented_keys(impl, ref, exercise, *call_args, keys=keys, **kwargs)
        except (WrongAnswer, NotImplementedError):  # a stub stays "not started"
            raise
        except Exception as e:  # noqa: BLE001 - reported below
            raised[str(dtype).removeprefix("torch.")] = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:150]}"
    if raised:
        # Failing for some mask dtypes only is the signature of mask code written for one dtype.
        labels = [mistake(exercise, mask_mistake)] if len(raised) < len(MASK_DTYPES) else []
        raise WrongAnswer(explain(f"{exercise}(...) with the same mask as float32, int64 and bool",
                                  "every mask dtype must work and give the same result; it raised with "
                                  + "; ".join(f"{d} masks: {e}" for d, e in raised.items()), labels))


@pytest.mark.exercise("masked_mean")
@pytest.mark.parametrize("axis", [None, 1])
def test_masked_mean_takes_masks_of_every_dtype(impl, ref, axis):
    check_mask_dtypes(impl, ref, "masked_mean", "mask_used_as_index", (randn(4, 5, 7), ragged_mask(4)), 1, axis=axis)


@pytest.mark.exercise("masked_var")
def test_masked_var_takes_masks_of_every_dtype(impl, ref):
    check_mask_dtypes(impl, ref, "masked_var", "where_needs_a_bool_mask", (randn(5, 5, 7), ragged_mask(5)), 1)


@pytest.mark.exercise("masked_whiten")
def test_masked_whiten_takes_masks_of_every_dtype(impl, ref):
    check_mask_dtypes(impl, ref, "masked_whiten", "mask_used_as_index", (randn(6, 5, 7), ragged_mask(6)), 1)


@pytest.mark.exercise("compute_rewards")
def test_compute_rewards_takes_masks_of_every_dtype(impl, ref):
    check_mask_dtypes(impl, ref, "compute_rewards", "mask_subtracted_as_numbers", (*reward_inputs(7), 0.1), 3)


@pytest.mark.exercise("compute_advantages")
def test_compute_advantages_takes_masks_of_every_dtype(impl, ref):
    check_mask_dtypes(impl, ref, "compute_advantages", "mask_inverted_with_tilde", (*advantage_inputs(7), 1.0, 0.95), 2)


@pytest.mark.exercise("ppo_loss")
def test_ppo_loss_takes_masks_of_every_dtype(impl, ref):
    check_mask_dtypes(impl, ref, "ppo_loss", "where_needs_a_bool_mask", (*ppo_inputs(7), 0.2, 0.2, 0.1), 4, keys=PPO_STATS)


# --- edges the docstrings promise ---------------------------------------------------------------

@pytest.mark.exercise("whiten")
def test_whiten_near_zero_variance_keeps_eps_inside_the_sqrt(impl, ref):
    # Variance ~1e-12: rsqrt(var + 1e-8) ≈ 1e4, while 1 / (std + 1e-8) ≈ 1e6.
    check_call(impl, ref, "whiten", 1e-6 * randn(8, 4, 6), rtol=1e-4, atol=1e-6)


@pytest.mark.exercise("masked_whiten")
def test_masked_whiten_near_zero_variance_keeps_eps_inside_the_sqrt(impl, ref):
    mask = ragged_mask(8)
    check_call(impl, ref, "masked_whiten", 1e-6 * randn(8, 5, 7) + 3.0 * (1 - mask), mask, rtol=1e-4, atol=1e-6)


@pytest.mark.exercise("masked_var")
@pytest.mark.parametrize("count,unbiased", [(1, False), (2, True), (2, False)])
def test_masked_var_of_one_and_two_elements(impl, ref, count, unbiased):
    # One element: the biased variance is 0 (no error). Two: (a − b)²/2 unbiased, (a − b)²/4 biased.
    mask = torch.zeros(3, 4)
    mask[1, 1:1 + count] = 1.0
    values = randn(9, 3, 4)
    try:
        check_call(impl, ref, "masked_var", values, mask, unbiased=unbiased)
    except ValueError as e:
        raise WrongAnswer(explain(f"masked_var(values, mask holding {count} element(s), unbiased={unbiased})",
                                  f"raised ValueError ({e}); only fewer than {2 if unbiased else 1} element(s) is an error",
                                  [mistake("masked_var", "rejects_one_element_when_biased")])) from None


@pytest.mark.exercise("masked_var")
def test_masked_var_of_a_large_mean_and_a_small_spread(impl, ref):
    # float32, mean 1000, std 0.01: E[x²] − E[x]² cancels 1e6 against 1e6 and keeps only rounding noise.
    mask = ragged_mask(10)
    values = 1000.0 + 0.01 * randn(10, 5, 7)
    check_call(impl, ref, "masked_var", values, mask, rtol=2e-2, atol=1e-7)


@pytest.mark.exercise("compute_rewards")
def test_compute_rewards_rejects_a_row_without_real_tokens(impl):
    scores, logprobs, ref_logprobs, masks = reward_inputs(11)
    masks[2] = 0.0
    try:
        impl.compute_rewards(scores, logprobs, ref_logprobs, masks, 0.1)
    except ValueError:
        return
    raise WrongAnswer(explain("compute_rewards(..., masks with an all-padding row 2, ...)", "expected a ValueError",
                              [mistake("compute_rewards", "no_error_on_empty_row")]))


@pytest.mark.exercise("compute_advantages")
def test_compute_advantages_with_a_gap_in_the_mask(impl, ref):
    values, rewards, mask = advantage_inputs(12)
    mask[0, 2] = 0.0  # row 0: 1 1 0 1 ...
    mask[3, 1] = 0.0
    check_call(impl, ref, "compute_advantages", values, rewards, mask, 1.0, 0.95)


@pytest.mark.exercise("ppo_loss")
def test_ppo_loss_stats_carry_no_graph(impl):
    old_logprobs, values, logprobs, vpreds, mask, advantages, returns = ppo_inputs(13)
    _, _, stats = impl.ppo_loss(old_logprobs, values, logprobs.requires_grad_(True), vpreds.requires_grad_(True), mask,
                                advantages, returns, 0.2, 0.2, 0.1)
    attached = sorted(k for k, v in stats.items() if isinstance(v, torch.Tensor) and v.requires_grad)
    if attached:
        raise WrongAnswer(explain("ppo_loss(logprobs and vpreds requiring grad, ...)",
                                  f"stats must be detached; these keep a graph: {attached}",
                                  [mistake("ppo_loss", "stats_keep_the_graph")]))


@pytest.mark.exercise("GPTWithValueHead")
def test_value_head_parameters_in_the_state_dict(impl, ref):
    def run(cls):
        state = cls(tiny_lm(0)).state_dict()
        return {"value-head entries (name: shape)": {k: tuple(v.shape) for k, v in state.items() if not k.startswith("lm.")},
                "lm entries": len([k for k in state if k.startswith("lm.")])}

    check_exercise(impl, ref, "GPTWithValueHead", run, call="GPTWithValueHead(tiny GPT).state_dict()")


@pytest.mark.exercise("batched_forward_pass")
def test_forward_pass_masks_come_from_lengths_not_token_ids(impl, ref):
    # The sampler may draw the PAD id (0) inside a response: it is a real token, scored like any other.
    model = ref.GPTWithValueHead(tiny_lm(4))
    queries, responses = forward_inputs(4, 4)
    responses = [torch.cat([r, torch.tensor([0, 5])]) for r in responses]
    responses[1][0] = 0

    def run(fn):
        with torch.no_grad():
            return fn(model, [q.clone() for q in queries], [r.clone() for r in responses], temperature=0.9, pad_id=0)

    check_exercise(impl, ref, "batched_forward_pass", run,
                   call="batched_forward_pass(tiny GPTWithValueHead, 4 queries, 4 responses holding the PAD id 0, pad_id=0)")


# --- tokens a tool wrote (Part 9's response_masks) --------------------------------------------
# In Part 9 a calculator writes some tokens of a response: they are context the policy reads, not
# actions it took. A mask is then 0 inside a response as well as after it: compute_rewards puts
# the score on the last token the *policy* wrote, GAE skips the tool's tokens, and PPOTrainer.step
# takes response_masks (True where the policy wrote the token) into every mask it uses.

# One pattern per row (1: the policy wrote the token, 0: the tool did), cut to the response's length; "end"
# means "the policy's, except the last two tokens": a tool segment in the middle, alternating, the tool's
# tokens last, none, one policy token at each end, and one policy token then only the tool's.
TOOL_PATTERNS = ("1100111111", "1010101010", "end", "1111111111", "1000000001", "1000000000")
TRAILING_PATTERNS = ("end", "1111111111", "end", "1000000000", "1111111111", "1000000000")


def pattern_mask(pattern: str, length: int) -> torch.Tensor:
    if pattern == "end":
        return torch.arange(length) < length - 2
    return torch.tensor([c == "1" for c in pattern[:length]])


def tool_batch(seed: int, n: int = 6, patterns=TOOL_PATTERNS):
    """Queries, responses of 5-9 tokens, and one bool response mask per response (``patterns``)."""
    queries, responses = token_rows(seed, n, 1, 6), token_rows(seed + 1, n, 5, 9)
    return queries, responses, [pattern_mask(patterns[b % len(patterns)], len(r)) for b, r in enumerate(responses)]


def probe_after(policy, ref) -> dict:
    """What the trained weights do: the policy's log-probs and values on fixed text (smooth in the weights)."""
    queries, responses = forward_inputs(99, 4)
    with torch.no_grad():
        logprobs, _, values, _ = ref.batched_forward_pass(policy, queries, responses, pad_id=0)
    return {"log-probs after the steps": logprobs, "values after the steps": values}


def tool_trainer_run(cls, ref, *, steps: int = 2, batch: int = 6, patterns=TOOL_PATTERNS, truncate: bool = False,
                     **overrides) -> dict:
    """PPO steps on tool_batch (reference: another tiny GPT, so the KL is not 0). ``truncate``: cut each
    response after the policy's last token and pass no masks (for patterns whose tool tokens only trail)."""
    policy = ref.GPTWithValueHead(tiny_lm(0, dropout=0.2))
    reference = ref.create_reference_model(ref.GPTWithValueHead(tiny_lm(7)))
    config = ref.PPOConfig(**(dict(learning_rate=3e-3, mini_batch_size=3, ppo_epochs=2, temperature=0.7, init_kl_coef=0.3,
                                   target=0.5, horizon=40.0, seed=0) | overrides))
    trainer = cls(config, policy, reference, 0)
    queries, responses, masks = tool_batch(30, batch, patterns)
    scores = 0.1 + randn(31, batch)
    if truncate:
        responses = [r[:int(m.nonzero().max()) + 1] for r, m in zip(responses, masks)]
    out = {}
    for i in range(steps):
        stats = trainer.step(queries, responses, scores) if truncate else trainer.step(queries, responses, scores, masks)
        out.update({f"step {i + 1}: {k}": v for k, v in stats.items()})
    return out | probe_after(policy, ref)


TOOL_SUSPECTS = ("response_masks_ignored", "response_masks_only_in_the_loss", "response_masks_only_in_the_rollout",
                 "logprob_stats_count_tool_tokens")


@pytest.mark.slow
@pytest.mark.exercise("PPOTrainer")
def test_trainer_step_with_tool_tokens_matches_reference(impl, ref):
    check_exercise(impl, ref, "PPOTrainer", lambda cls: tool_trainer_run(cls, ref),
                   call="PPOTrainer(tiny policy, reference = another tiny GPT).step(queries, responses, scores, "
                        "response_masks with the tool's tokens inside and at the end of responses) × 2",
                   rtol=1e-3, atol=1e-4, suspects=TOOL_SUSPECTS, cache_key="trainer with tool tokens")


@pytest.mark.exercise("PPOTrainer")
def test_tool_tokens_after_the_policys_last_token_change_nothing(impl, ref):
    # The tool's tokens only at the end of responses (the tool answered, the episode ended): the policy never
    # read them before acting, so the step must be the reference's on the responses cut after the policy's
    # last token, without masks — the score on the policy's last token, the KL and the stats over its tokens.
    def run(cls):
        return tool_trainer_run(cls, ref, steps=1, patterns=TRAILING_PATTERNS)

    expected = tool_trainer_run(ref.PPOTrainer, ref, steps=1, patterns=TRAILING_PATTERNS, truncate=True)
    got = run(impl.PPOTrainer)
    problem = compare(got, expected, rtol=1e-3, atol=1e-4)
    if problem is not None:
        raise WrongAnswer(explain(
            "PPOTrainer.step(..., response_masks False on the last two tokens of some responses)",
            "differs from the reference's step on the responses cut after the policy's last token: the tool's "
            "trailing tokens must change nothing\n  " + problem,
            matching_mistakes(PART, "PPOTrainer", run, got, rtol=1e-3, atol=1e-4, suspects=TOOL_SUSPECTS,
                              expected=expected)))


@pytest.mark.exercise("compute_rewards")
def test_compute_rewards_puts_the_score_on_the_last_masked_in_token(impl, ref):
    # Masks with gaps (the tool's tokens) and with the tool's tokens last: row 0 "1 1 0 1 0 0", etc.
    scores, logprobs, ref_logprobs, _ = reward_inputs(5, batch=4, resp=6)
    masks = torch.tensor([[1.0, 1, 0, 1, 0, 0], [1, 0, 0, 0, 1, 1], [1, 1, 1, 0, 0, 0], [1, 0, 1, 0, 1, 0]])
    check_call(impl, ref, "compute_rewards", scores, logprobs, ref_logprobs, masks, 0.1)


def compacted(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Each row's masked-in entries moved to the front (the rest 0): the response without the tool's tokens."""
    out = torch.zeros_like(x)
    for b in range(x.shape[0]):
        real = x[b][mask[b] > 0]
        out[b, :len(real)] = real
    return out


@pytest.mark.exercise("compute_advantages")
@pytest.mark.parametrize("gamma,lam", [(1.0, 0.95), (0.9, 0.8)])
def test_compute_advantages_skips_the_tool_tokens_in_a_gap(impl, ref, gamma, lam):
    # The tool's tokens are not steps: GAE over a row with gaps equals GAE over the row without them.
    values, rewards, _ = advantage_inputs(14)
    mask = torch.tensor([[1.0, 1, 0, 0, 1, 1, 1], [1, 0, 1, 0, 1, 0, 1], [1, 1, 1, 0, 0, 0, 0],
                         [1, 0, 0, 0, 0, 1, 0], [1, 1, 1, 1, 1, 1, 1]])
    got = impl.compute_advantages(values, rewards, mask, gamma, lam)
    short = (mask > 0).sum(1)
    short_mask = (torch.arange(7)[None] < short[:, None]).float()
    want = ref.compute_advantages(compacted(values, mask), compacted(rewards, mask), short_mask, gamma, lam)
    call = f"compute_advantages(values, rewards, mask with gaps, {gamma}, {lam})"
    for name, g, w in zip(("values", "advantages", "returns"), got, want):
        problem = compare(compacted(g, mask), w, rtol=1e-4, atol=1e-5)
        if problem is None and (g * (1 - mask)).abs().max() > 0:
            problem = f"{name} are not 0 where the mask is 0"
        if problem is not None:
            raise WrongAnswer(explain(call, f"the {name} of the real tokens differ from GAE over the rows without their "
                                            f"gaps (a gap is not a step)\n  " + problem,
                                      diagnose("compute_advantages", got, values, rewards, mask, gamma, lam)))


def test_model_token_masks_checks_its_inputs(ref):
    masks = torch.ones(2, 3)
    responses = [torch.tensor([4, 5, 6]), torch.tensor([7, 8, 9])]
    assert ref.model_token_masks(masks, responses, None) is masks
    got = ref.model_token_masks(masks, responses, [torch.tensor([True, False, True]), torch.tensor([True, True, False])])
    assert torch.equal(got, torch.tensor([[1.0, 0, 1], [1, 1, 0]]))
    for bad in ([torch.tensor([True, True, True])], [torch.ones(3, dtype=torch.bool), torch.ones(2, dtype=torch.bool)]):
        with pytest.raises(ValueError):
            ref.model_token_masks(masks, responses, bad)
