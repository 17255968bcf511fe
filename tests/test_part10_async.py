"""Tests for Part 10 (exercises/part10_async.py): importance weights, the off-policy sequence mask, KL placement, staleness.

Run: ``pytest tests/test_part10_async.py`` (your code) or add ``--impl=solutions``.
Every number is checked twice: the reference must agree with an oracle written from the
docstring (Python floats, in log space), and your function must agree with the reference on the
same inputs. Padding holds garbage, NaN and ±inf on purpose: it must never reach a weight, a stat
or a decision. The KL estimators are judged by their **expected gradient** on a small categorical
policy, computed exactly (a sum over every action, float64), against autograd's gradient of the
true KL. A wrong answer names the known mistake it looks like (workbook/mistakes/part10_async.py).
"""

from __future__ import annotations

import math

import pytest
import torch

from workbook.checking import WrongAnswer, check_exercise, describe_call, explain, known_mistake, matching_mistakes
from workbook.promises import documented_keys, graph_leaks

PART = "part10_async"
POINTS = {
    "importance_weights": 3,
    "off_policy_sequence_mask": 1,
    "kl_loss_term": 2,
    "sampling_version": 1,
    "may_sample": 1,
}
MODES = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")
STATS = ("is/capped_frac", "is/weight_mean", "is/log_ratio_mean")
NAN, INF = float("nan"), float("inf")


def mistake(exercise: str, name: str) -> str:
    return known_mistake(PART, exercise, name)


def clone(value):
    return value.detach().clone().requires_grad_(value.requires_grad) if isinstance(value, torch.Tensor) else value


def runner(*args, **kwargs):
    """``run(fn)`` for check_exercise: fresh copies of the inputs each call."""
    return lambda fn: fn(*[clone(a) for a in args], **{k: clone(v) for k, v in kwargs.items()})


def same_tensor(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal, NaN where NaN (padding holds NaN on purpose, and NaN != NaN)."""
    return a.shape == b.shape and a.dtype == b.dtype and bool(((a == b) | (a.isnan() & b.isnan())).all())


def check_untouched(impl, exercise: str, call: str, *args, **kwargs) -> None:
    copies = [clone(a) for a in args]
    getattr(impl, exercise)(*copies, **kwargs)
    for i, (before, after) in enumerate(zip(args, copies)):
        if isinstance(before, torch.Tensor) and not same_tensor(before.detach(), after.detach()):
            raise WrongAnswer(explain(call, f"modified its input #{i} in place; treat inputs as read-only"))


def expect_value_error(impl, exercise: str, why: str, labels: list[str], *args, **kwargs) -> None:
    call = describe_call(exercise, *args, **kwargs)
    try:
        getattr(impl, exercise)(*args, **kwargs)
    except ValueError:
        return
    except NotImplementedError:
        raise
    except Exception as e:  # noqa: BLE001 - another exception is not the documented one
        raise WrongAnswer(explain(call, f"expected a ValueError ({why}), got {type(e).__name__}: {e}", labels)) from None
    raise WrongAnswer(explain(call, f"expected a ValueError ({why})", labels))


# =====================================================================================
# importance_weights
# =====================================================================================

LENGTHS = [7, 4, 0, 1, 3, 7, 5]
"""A full row, a short one, an empty one, a one-token row, ...: each batch below has all of them."""


def iw_inputs(seed: int, *, dtype=torch.float32, mask_dtype=torch.bool, padding: str = "garbage", lengths=LENGTHS,
              scale: float = 0.8):
    """(learner, sampler, mask): log-probs in [-2.05, -0.05] for the sampler, the learner's off by N(0, scale);
    padding holds random garbage ('garbage'), NaN and ±inf ('nonfinite') or zeros ('zeros')."""
    g = torch.Generator().manual_seed(seed)
    batch, width = len(lengths), max(max(lengths), 1)
    sampler = -(torch.rand(batch, width, generator=g, dtype=torch.float64) * 2 + 0.05)
    learner = (sampler + scale * torch.randn(batch, width, generator=g, dtype=torch.float64)).clamp(max=-0.01)
    real = torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]
    if padding == "garbage":
        junk = torch.randn(2, batch, width, generator=g, dtype=torch.float64) * 4
        learner, sampler = torch.where(real, learner, junk[0]), torch.where(real, sampler, junk[1])
    elif padding == "nonfinite":
        cycle = torch.tensor([NAN, -INF, INF, NAN, INF], dtype=torch.float64)
        junk = cycle[torch.arange(batch * width) % 5].view(batch, width)
        learner, sampler = torch.where(real, learner, junk), torch.where(real, sampler, junk.flip(0))
    else:
        learner, sampler = torch.where(real, learner, 0.0), torch.where(real, sampler, 0.0)
    return learner.to(dtype), sampler.to(dtype), real.to(mask_dtype)


def iw_oracle(learner, sampler, mask, mode: str, cap: float):
    """The docstring's formulas in Python floats, in log space (a sequence ratio of e¹⁰⁰⁰ is no problem there)."""
    log_cap = math.log(cap)
    rows = []
    units, tokens_w = [], []
    for b in range(learner.shape[0]):
        idx = [t for t in range(learner.shape[1]) if float(mask[b, t]) != 0]
        ells = [float(learner[b, t]) - float(sampler[b, t]) for t in idx]
        row = [0.0] * learner.shape[1]
        if mode.startswith("token"):
            logs = ells
            units += ells
        else:
            logs = [sum(ells)] * len(ells)
            if ells:
                units.append(sum(ells))
        for t, log_r in zip(idx, logs):
            if log_r > log_cap:
                w = cap if mode.endswith("truncate") else 0.0
            else:
                w = math.exp(log_r)
            row[t] = w
            tokens_w.append(w)
        rows.append(row)

    def mean(xs):
        return sum(xs) / len(xs) if xs else 0.0

    stats = {"is/capped_frac": mean([float(u > log_cap) for u in units]), "is/weight_mean": mean(tokens_w),
             "is/log_ratio_mean": mean(units)}
    return torch.tensor(rows, dtype=torch.float64), stats


def diagnose_iw(got, *args) -> list[str]:
    return matching_mistakes(PART, "importance_weights", lambda fn: documented(fn(*[clone(a) for a in args])), got,
                             rtol=1e-5, atol=1e-6)


def documented(out):
    return documented_keys(out, STATS)


def check_iw(impl, ref, learner, sampler, mask, mode=None, cap=None, *, what: str = ""):
    """Reference against the oracle, then the learner against the reference; inputs untouched; weights finite."""
    kwargs = {} if mode is None else {"mode": mode} if cap is None else {"mode": mode, "cap": cap}
    oracle_w, oracle_stats = iw_oracle(learner, sampler, mask, mode or "sequence_mask", 3.0 if cap is None else cap)
    ref_w, ref_stats = ref.importance_weights(clone(learner), clone(sampler), clone(mask), **kwargs)
    tol = dict(rtol=1e-5, atol=1e-5) if learner.dtype == torch.float32 else dict(rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(ref_w.double(), oracle_w, **tol)
    for key in STATS:
        assert math.isclose(float(ref_stats[key]), oracle_stats[key], rel_tol=1e-5, abs_tol=1e-5), (key, ref_stats, oracle_stats)
    call = describe_call("importance_weights", learner, sampler, mask, **kwargs) + what
    got = check_exercise(impl, ref, "importance_weights", lambda fn: documented(runner(learner, sampler, mask, **kwargs)(fn)),
                         call=call, atol=1e-6)
    weights, stats = got
    if not bool(torch.isfinite(weights).all()) or not all(bool(torch.isfinite(v).all()) for v in stats.values()):
        raise WrongAnswer(explain(call, "a weight or a stat is not finite", diagnose_iw(got, learner, sampler, mask, *kwargs.values())))
    check_untouched(impl, "importance_weights", call, learner, sampler, mask, **kwargs)
    return got


@pytest.mark.exercise("importance_weights")
@pytest.mark.parametrize("mask_dtype", [torch.bool, torch.float32], ids=["bool mask", "float mask"])
@pytest.mark.parametrize("cap", [1.5, 3.0])
@pytest.mark.parametrize("mode", MODES)
def test_importance_weights_match_the_docstring(impl, ref, mode, cap, mask_dtype):
    for seed in (0, 1):
        learner, sampler, mask = iw_inputs(seed, mask_dtype=mask_dtype)
        check_iw(impl, ref, learner, sampler, mask, mode, cap, what=f" (seed {seed}, garbage in the padding)")


@pytest.mark.exercise("importance_weights")
@pytest.mark.parametrize("mode", MODES)
def test_importance_weights_in_float64_with_an_int_mask(impl, ref, mode):
    learner, sampler, mask = iw_inputs(2, dtype=torch.float64, mask_dtype=torch.int64, scale=0.5)
    weights, stats = check_iw(impl, ref, learner, sampler, mask, mode, 2.0)
    if weights.dtype != torch.float64 or any(v.dtype != torch.float64 or v.dim() != 0 for v in stats.values()):
        raise WrongAnswer(explain(describe_call("importance_weights", learner, sampler, mask, mode, 2.0),
                                  "weights and stats come in the dtype of learner_logprobs (float64 here), stats 0-dim"))


@pytest.mark.exercise("importance_weights")
@pytest.mark.parametrize("mode", MODES)
def test_importance_weights_come_in_the_learners_dtype_whatever_the_samplers(impl, ref, mode):
    # A float64 sampler beside a float32 learner: learner − sampler promotes to float64, and the promise is the
    # learner's dtype. The other way round (a float32 sampler beside a float64 learner) the learner's is float64 too.
    for learner_dtype, sampler_dtype in ((torch.float32, torch.float64), (torch.float64, torch.float32)):
        learner, sampler, mask = iw_inputs(10, dtype=torch.float64, scale=0.5)
        learner, sampler = learner.to(learner_dtype), sampler.to(sampler_dtype)
        call = describe_call("importance_weights", learner, sampler, mask, mode, 2.0)
        weights, stats = impl.importance_weights(clone(learner), clone(sampler), clone(mask), mode, 2.0)
        dtypes = {"weights": weights.dtype, **{k: v.dtype for k, v in stats.items() if isinstance(v, torch.Tensor)}}
        wrong = {k: str(d) for k, d in dtypes.items() if d != learner_dtype}
        if wrong:
            raise WrongAnswer(explain(call, f"weights and stats come in the dtype of learner_logprobs ({learner_dtype}), "
                                            f"whatever the sampler's ({sampler_dtype}); got {wrong}",
                                      [mistake("importance_weights", "weights_in_the_promoted_dtype")]))
        check_iw(impl, ref, learner, sampler, mask, mode, 2.0,
                 what=f" (a {str(learner_dtype)[6:]} learner, a {str(sampler_dtype)[6:]} sampler)")


@pytest.mark.exercise("importance_weights")
@pytest.mark.parametrize("mode", MODES)
def test_importance_weights_ignore_nan_and_inf_in_the_padding(impl, ref, mode):
    # Positions outside the mask may hold anything: NaN, -inf, +inf. They never reach a weight or a stat.
    learner, sampler, mask = iw_inputs(3, padding="nonfinite")
    check_iw(impl, ref, learner, sampler, mask, mode, 1.5, what=" (NaN and ±inf in the padding)")
    learner, sampler, mask = iw_inputs(3, padding="nonfinite", mask_dtype=torch.float32)
    check_iw(impl, ref, learner, sampler, mask, mode, 3.0, what=" (NaN and ±inf in the padding, float mask)")


@pytest.mark.exercise("importance_weights")
@pytest.mark.parametrize("mode", MODES)
def test_importance_weights_of_long_rows_do_not_overflow(impl, ref, mode):
    # 200 tokens at ℓ = +5: a sequence ratio of e¹⁰⁰⁰ (inf in float) must give C or 0; at ℓ = −5, e⁻¹⁰⁰⁰ = 0.
    # Row 3: 200 tokens at ℓ = +5, then 200 at ℓ = −5 — r_b = e⁰ = 1 exactly (the ℓ are exact in float32), but a
    # running product of the token ratios overflows to inf after 18 tokens and never comes back.
    width = 400
    sampler = torch.full((4, width), -5.25)
    learner = torch.stack([torch.full((width,), -0.25), torch.full((width,), -10.25), torch.full((width,), -0.25),
                           torch.cat([torch.full((200,), -0.25), torch.full((200,), -10.25)])])
    mask = torch.ones(4, width, dtype=torch.bool)
    mask[:3, 200:] = False
    mask[2, 100:] = False
    learner[2, 100:], sampler[2, 100:] = NAN, -INF
    for cap in (3.0, 1.2):
        weights, _ = check_iw(impl, ref, learner, sampler, mask, mode, cap,
                              what=" (rows of ±5 per token: the sequence ratio overflows; row 3: +5 then −5, r_b = 1)")
        if mode.startswith("sequence") and not bool((weights[3] == 1.0).all()):
            raise WrongAnswer(explain(describe_call("importance_weights", learner, sampler, mask, mode, cap),
                                      f"row 3 is 200 tokens at ℓ = +5 then 200 at ℓ = −5: r_b = exp(Σ ℓ) = 1, so every weight "
                                      f"is 1; got {sorted(set(weights[3].tolist()))} — a product of the token ratios "
                                      "overflows on the way (sum the log-ratios, then exp)",
                                      [mistake("importance_weights", "sequence_ratio_as_a_running_product")]))


@pytest.mark.exercise("importance_weights")
@pytest.mark.parametrize("cap", [1.5, 3.0])
@pytest.mark.parametrize("mode", MODES)
def test_importance_weights_of_extreme_token_log_ratios_stay_finite(impl, ref, mode, cap):
    # One token ratio overflows float32 (ℓ = +100, +99.9: e^ℓ = inf), and some log-probs are below −104, where
    # exp(log-prob) is 0 in float32 (exp(learner) / exp(sampler) = 0/0 = NaN; ℓ is a difference of log-probs).
    # Every weight must be C (truncate) or 0 (mask) there — never inf · 0 = NaN — or e^ℓ where ℓ is moderate.
    learner = torch.tensor([[-10.0, -0.5, -1.0, NAN], [-120.0, -130.0, -0.3, -0.1], [-20.0, -105.0, -0.75, -2.0],
                            [-0.5, -1.25, -0.25, -3.0]])
    sampler = torch.tensor([[-110.0, -0.75, -1.25, -INF], [-121.0, -129.5, -0.3, -100.0], [-120.0, -104.0, -1.0, -1.5],
                            [-0.75, -1.0, -0.5, -2.5]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1], [1, 1, 1, 1], [1, 1, 1, 1]], dtype=torch.bool)
    check_iw(impl, ref, learner, sampler, mask, mode, cap,
             what=" (ℓ = +100 and +99.9: e^ℓ is inf in float32; log-probs down to −130, whose exp is 0)")


@pytest.mark.exercise("importance_weights")
@pytest.mark.parametrize("mode", MODES)
def test_importance_weights_keep_a_ratio_exactly_at_the_cap(impl, ref, mode):
    # C = 1 and log-ratios whose row sums are exactly 0 (±0.5, ±0.25 are exact in binary): every sequence ratio is
    # exactly C — kept (mask), equal to C (truncate), never counted as capped. Token ratios e^{±0.5} fall either side.
    sampler = torch.tensor([[-1.25, -2.5, -0.75, -1.0], [-1.0, -1.0, -1.5, 0.0], [-0.5, -2.0, -3.0, -1.0]])
    ell = torch.tensor([[0.0, 0.0, 0.0, 0.0], [0.5, -0.5, 0.0, 0.0], [0.25, 0.25, -0.5, 0.0]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 0], [1, 1, 1, 1]], dtype=torch.bool)
    learner = sampler + ell
    weights, stats = check_iw(impl, ref, learner, sampler, mask, mode, 1.0, what=" (ratios exactly at the cap C = 1)")
    if mode.startswith("sequence") and (float(stats["is/capped_frac"]) != 0.0 or not bool((weights[mask] == 1.0).all())):
        raise WrongAnswer(explain(describe_call("importance_weights", learner, sampler, mask, mode, 1.0),
                                  "every row's ratio is exactly C = 1: weight 1 on every real token, capped_frac 0",
                                  [mistake("importance_weights", "tie_counted_as_capped")]))


@pytest.mark.exercise("importance_weights")
@pytest.mark.parametrize("mode", MODES)
def test_importance_weights_worked_example(impl, ref, mode):
    # Row 0: ℓ = (ln 2, ln 2) → token ratios 2, 2; sequence ratio 4. Row 1: ℓ = (−ln 2) → 0.5. Row 2: empty. C = 3.
    ln2 = math.log(2.0)
    learner = torch.tensor([[-0.5, -0.75, NAN], [-1.5 - ln2, 0.0, 0.0], [0.0, 0.0, 0.0]], dtype=torch.float64)
    sampler = torch.tensor([[-0.5 - ln2, -0.75 - ln2, 0.0], [-1.5, INF, 0.0], [NAN, 1.0, 2.0]], dtype=torch.float64)
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    expected = {
        "token_truncate": ([[2.0, 2.0, 0.0], [0.5, 0, 0]], 0.0, 4.5 / 3, ln2 / 3),
        "token_mask": ([[2.0, 2.0, 0.0], [0.5, 0, 0]], 0.0, 4.5 / 3, ln2 / 3),
        "sequence_truncate": ([[3.0, 3.0, 0.0], [0.5, 0, 0]], 0.5, 6.5 / 3, ln2 / 2),
        "sequence_mask": ([[0.0, 0.0, 0.0], [0.5, 0, 0]], 0.5, 0.5 / 3, ln2 / 2),
    }[mode]
    rows, capped, weight_mean, log_ratio_mean = expected
    want_w = torch.tensor(rows + [[0.0, 0.0, 0.0]], dtype=torch.float64)
    weights, stats = impl.importance_weights(learner.clone(), sampler.clone(), mask.clone(), mode, 3.0)
    got_stats = [float(stats.get(k, NAN)) for k in STATS]
    if not (torch.allclose(weights, want_w, atol=1e-9) and all(math.isclose(g, w, abs_tol=1e-9) for g, w in
                                                              zip(got_stats, (capped, weight_mean, log_ratio_mean)))):
        raise WrongAnswer(explain(
            describe_call("importance_weights", learner, sampler, mask, mode, 3.0),
            f"expected weights {want_w.tolist()} and stats {dict(zip(STATS, (capped, weight_mean, log_ratio_mean)))}, "
            f"got {weights.tolist()} and {dict(zip(STATS, got_stats))}",
            diagnose_iw((weights, documented(stats)), learner, sampler, mask, mode, 3.0)))


@pytest.mark.exercise("importance_weights")
@pytest.mark.parametrize("mode", MODES)
def test_importance_weights_of_one_token_rows_and_an_empty_batch(impl, ref, mode):
    # One token per row: the sequence ratio is the token ratio. An all-empty batch: weights 0, every stat 0, not NaN.
    learner, sampler, mask = iw_inputs(5, lengths=[1, 1, 1, 1, 1], scale=1.0)
    check_iw(impl, ref, learner, sampler, mask, mode, 1.5, what=" (one token per row)")
    # The empty batch in float64 too: a shortcut for it must keep the promises of the main path (the dtype).
    for dtype, mask_dtype in ((torch.float32, torch.bool), (torch.float32, torch.float32), (torch.float64, torch.int64)):
        learner, sampler, mask = iw_inputs(6, lengths=[0, 0, 0], dtype=dtype, mask_dtype=mask_dtype, padding="nonfinite")
        weights, stats = check_iw(impl, ref, learner, sampler, mask, mode, 3.0, what=" (no real token at all)")
        if bool(weights.any()) or any(float(stats[k]) != 0.0 for k in STATS):
            raise WrongAnswer(explain(describe_call("importance_weights", learner, sampler, mask, mode, 3.0),
                                      f"no real token: expected zero weights and every stat 0, got {weights.tolist()}, "
                                      f"{ {k: float(v) for k, v in stats.items()} }",
                                      diagnose_iw((weights, documented(stats)), learner, sampler, mask, mode, 3.0)))


@pytest.mark.exercise("importance_weights")
@pytest.mark.parametrize("mode", MODES)
def test_importance_weights_of_a_batch_with_one_real_token(impl, ref, mode):
    # One unit and one real token in the whole batch: every stat is that token's own (a count clamped at 2
    # instead of 1 halves them). Its ratio e^{±ln 4} is above and below C = 2; the padding holds garbage.
    for ell in (math.log(4.0), -math.log(4.0)):
        learner = torch.tensor([[NAN, 0.5, -1.0], [0.25, -0.5, 2.0]], dtype=torch.float64)
        sampler = torch.tensor([[-INF, 1.0, 3.0], [0.25 - ell, 7.0, NAN]], dtype=torch.float64)
        mask = torch.tensor([[0, 0, 0], [1, 0, 0]], dtype=torch.bool)
        weights, stats = check_iw(impl, ref, learner, sampler, mask, mode, 2.0, what=" (one real token in the batch)")
        capped = ell > 0
        w = (2.0 if mode.endswith("truncate") else 0.0) if capped else 0.25
        want = {"is/capped_frac": float(capped), "is/weight_mean": w, "is/log_ratio_mean": ell}
        got = {k: float(stats[k]) for k in STATS}
        if any(not math.isclose(got[k], want[k], rel_tol=1e-9, abs_tol=1e-12) for k in STATS):
            raise WrongAnswer(explain(describe_call("importance_weights", learner, sampler, mask, mode, 2.0),
                                      f"one real token, ratio {math.exp(ell):g}: expected stats {want}, got {got}",
                                      diagnose_iw((weights, documented(stats)), learner, sampler, mask, mode, 2.0)))


@pytest.mark.exercise("importance_weights")
def test_importance_weights_default_to_sequence_mask_with_cap_3(impl, ref):
    learner, sampler, mask = iw_inputs(7, scale=0.6)
    check_iw(impl, ref, learner, sampler, mask, what=" — the defaults mode='sequence_mask', cap=3.0")
    # Sequence ratios on both sides of 3 and close to it (2.5, 2.9, 3.1, 3.5): a default cap of 2, 2.9 or 4 shows.
    ratios = [2.5, 2.9, 3.1, 3.5]
    sampler = torch.full((4, 2), -1.0, dtype=torch.float64)
    learner = sampler + torch.tensor([[math.log(r) / 2] * 2 for r in ratios], dtype=torch.float64)
    check_iw(impl, ref, learner, sampler, torch.ones(4, 2, dtype=torch.bool),
             what=" — the defaults, sequence ratios 2.5, 2.9, 3.1 and 3.5")


@pytest.mark.exercise("importance_weights")
@pytest.mark.parametrize("mode", MODES)
def test_importance_weights_and_stats_carry_no_graph(impl, mode):
    learner, sampler, mask = iw_inputs(8)
    learner.requires_grad_(True)
    sampler.requires_grad_(True)
    call = describe_call("importance_weights", learner, sampler, mask, mode, 1.5)
    weights, stats = impl.importance_weights(learner, sampler, mask, mode, 1.5)
    leaks = graph_leaks((weights, stats))
    if leaks:
        name = "weights_with_grad" if graph_leaks(weights) else "stats_with_grad"
        raise WrongAnswer(explain(call, f"{', '.join(leaks)} carry an autograd graph: the weights are constants of the "
                                        "loss (no gradient through the ratio), and a stat with a graph keeps the step alive",
                                  [mistake("importance_weights", name)]))


@pytest.mark.exercise("importance_weights")
@pytest.mark.parametrize("mode,cap", [("sequence", 3.0), ("TOKEN_MASK", 3.0), ("", 3.0), ("token_mask", 0.0),
                                      ("sequence_truncate", -1.0), ("sequence_mask", 0.0),
                                      ("token_truncate", NAN), ("sequence_mask", NAN),
                                      ("sequence_truncate", INF), ("token_mask", INF)])
def test_importance_weights_reject_an_unknown_mode_or_a_cap_not_positive_and_finite(impl, mode, cap):
    # Each case breaks one rule only (a known mode with a bad cap, an unknown mode with a good cap), so a check
    # that comes after another is reached. A NaN cap passes `cap <= 0` (every comparison with NaN is False); an
    # infinite one passes `not cap > 0`.
    learner, sampler, mask = iw_inputs(9)
    name = "cap_nan_accepted" if math.isnan(cap) else "cap_inf_accepted" if math.isinf(cap) else "bad_arguments_accepted"
    expect_value_error(impl, "importance_weights", "unknown mode, or a cap <= 0, NaN or inf",
                       [mistake("importance_weights", name)], learner, sampler, mask, mode, cap)


# =====================================================================================
# off_policy_sequence_mask
# =====================================================================================

# Per row: the advantage and sampler − learner on its real tokens (the rest is padding).
OPM_ROWS = [
    (-1.0, [0.2, 0.2, 0.2, 0.2]),            # mean 0.2, sum 0.8
    (-0.5, [0.05, 0.05, 0.05]),              # mean 0.05, sum 0.15
    (0.0, [1.0, 1.0, 1.0, 1.0, 1.0]),        # A = 0: kept, however far apart
    (1.25, [0.9, 0.9]),                      # A > 0: kept
    (-1.0, []),                              # no real token: kept
    (-0.3, [-0.3, -0.2, -0.4]),              # the learner likes these tokens more: kept
    (-2.0, [0.5, 0.5, 0.5, 0.5, 0.5]),       # far off, negative: dropped
    (-1.0, [0.45]),                          # one token, far off: dropped
    (-0.1, [0.3, -0.1, 0.25, 0.1]),          # mean 0.1375, over the padded width 0.11
]


def opm_inputs(seed: int, rows=OPM_ROWS, *, mask_dtype=torch.bool, padding: str = "garbage", dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    width = 5
    learner = -(torch.rand(len(rows), width, generator=g, dtype=torch.float64) * 2 + 0.1)
    sampler = learner.clone()
    mask = torch.zeros(len(rows), width, dtype=torch.bool)
    for b, (_, diffs) in enumerate(rows):
        for t, d in enumerate(diffs):
            sampler[b, t] = learner[b, t] + d
            mask[b, t] = True
    if padding == "garbage":  # the padding looks very off-policy: it must not count
        learner, sampler = torch.where(mask, learner, -6.0), torch.where(mask, sampler, -0.5)
    else:
        learner, sampler = torch.where(mask, learner, NAN), torch.where(mask, sampler, -INF)
    advantages = torch.tensor([a for a, _ in rows], dtype=dtype)
    return learner.to(dtype), sampler.to(dtype), advantages, mask.to(mask_dtype)


def opm_oracle(learner, sampler, advantages, mask, delta) -> list[bool]:
    keep = []
    for b in range(learner.shape[0]):
        diffs = [float(sampler[b, t]) - float(learner[b, t]) for t in range(learner.shape[1]) if float(mask[b, t]) != 0]
        keep.append(not (diffs and float(advantages[b]) < 0 and sum(diffs) / len(diffs) > delta))
    return keep


def check_opm(impl, ref, learner, sampler, advantages, mask, delta, what: str = ""):
    call = describe_call("off_policy_sequence_mask", learner, sampler, advantages, mask, delta) + what
    expected = ref.off_policy_sequence_mask(clone(learner), clone(sampler), clone(advantages), clone(mask), delta)
    assert expected.tolist() == opm_oracle(learner, sampler, advantages, mask, delta), "the reference disagrees with its docstring"
    got = check_exercise(impl, ref, "off_policy_sequence_mask", runner(learner, sampler, advantages, mask, delta), call=call)
    if graph_leaks(got):
        raise WrongAnswer(explain(call, "the mask carries an autograd graph"))
    check_untouched(impl, "off_policy_sequence_mask", call, learner, sampler, advantages, mask, delta)
    return got


@pytest.mark.exercise("off_policy_sequence_mask")
@pytest.mark.parametrize("mask_dtype", [torch.bool, torch.float32], ids=["bool mask", "float mask"])
@pytest.mark.parametrize("delta", [0.0, 0.1, 0.4, 0.07])
def test_off_policy_sequence_mask_matches_the_docstring(impl, ref, delta, mask_dtype):
    for seed in (0, 1):
        check_opm(impl, ref, *opm_inputs(seed, mask_dtype=mask_dtype), delta, f" (seed {seed}, rows: {OPM_ROWS})")


@pytest.mark.exercise("off_policy_sequence_mask")
@pytest.mark.parametrize("delta", [0.0, 0.1])
def test_off_policy_sequence_mask_ignores_nan_and_inf_in_the_padding(impl, ref, delta):
    check_opm(impl, ref, *opm_inputs(2, padding="nonfinite", dtype=torch.float64), delta, " (NaN and -inf in the padding)")


@pytest.mark.exercise("off_policy_sequence_mask")
@pytest.mark.parametrize("delta", [0.25, 0.0])
def test_off_policy_sequence_mask_keeps_a_row_exactly_at_delta(impl, ref, delta):
    # Strict: D = δ is kept. 0.25 and 0.5 are exact in binary, so D is exactly 0.25 in rows 0 and 1 (and 0 in row 2).
    rows = [(-1.0, [0.25, 0.25]), (-1.0, [0.5, 0.0]), (-1.0, [0.0, 0.0, 0.0]), (-1.0, [0.25, 0.25, 0.25])]
    learner = torch.tensor([[-1.0, -0.5, -2.0], [-1.5, -0.25, -3.0], [-0.75, -1.0, -1.25], [-2.0, -1.0, -0.5]])
    sampler = learner.clone()
    mask = torch.zeros(4, 3, dtype=torch.bool)
    for b, (_, diffs) in enumerate(rows):
        for t, d in enumerate(diffs):
            sampler[b, t] += d
            mask[b, t] = True
    advantages = torch.tensor([a for a, _ in rows])
    got = check_opm(impl, ref, learner, sampler, advantages, mask, delta, f" (mean log-ratios exactly 0.25, 0.25, 0, 0.25; δ = {delta})")
    if delta == 0.25 and not bool(got.all()):
        raise WrongAnswer(explain(describe_call("off_policy_sequence_mask", learner, sampler, advantages, mask, delta),
                                  "a row at exactly D = δ is kept", [mistake("off_policy_sequence_mask", "threshold_inclusive")]))


@pytest.mark.exercise("off_policy_sequence_mask")
def test_off_policy_sequence_mask_worked_example(impl):
    # Row 0 dropped (A < 0, mean 0.3 > 0.2); row 1 kept (mean 0.1); row 2 kept (A > 0); row 3 kept (A = 0).
    learner = torch.tensor([[-1.0, -2.0], [-0.5, -0.7], [-3.0, -3.0], [-3.0, -3.0]], dtype=torch.float64)
    sampler = learner + torch.tensor([[0.2, 0.4], [0.1, 0.1], [2.0, 2.0], [2.0, 2.0]], dtype=torch.float64)
    advantages = torch.tensor([-0.7, -0.7, 0.7, 0.0], dtype=torch.float64)
    mask = torch.ones(4, 2)
    got = impl.off_policy_sequence_mask(learner, sampler, advantages, mask, 0.2)
    if not isinstance(got, torch.Tensor) or got.dtype != torch.bool or got.tolist() != [False, True, True, True]:
        raise WrongAnswer(explain(describe_call("off_policy_sequence_mask", learner, sampler, advantages, mask, 0.2),
                                  f"expected tensor([False, True, True, True]) (bool: True = keep), got {got!r}",
                                  matching_mistakes(PART, "off_policy_sequence_mask",
                                                    runner(learner, sampler, advantages, mask, 0.2), got, rtol=0, atol=0)))


@pytest.mark.exercise("off_policy_sequence_mask")
@pytest.mark.parametrize("delta", [-0.1, -1e-9, NAN])
def test_off_policy_sequence_mask_rejects_a_negative_delta(impl, delta):
    learner, sampler, advantages, mask = opm_inputs(3)
    expect_value_error(impl, "off_policy_sequence_mask", "delta < 0 or NaN",
                       [mistake("off_policy_sequence_mask", "negative_delta_accepted")], learner, sampler, advantages, mask, delta)


# =====================================================================================
# kl_loss_term
# =====================================================================================

ESTIMATORS = ("k1", "k3", "k3_is")


def kl_oracle(lp: float, ref: float, s: float, estimator: str) -> float:
    r = ref - lp
    k3 = math.exp(r) - 1 - r
    return {"k1": lp - ref, "k3": k3, "k3_is": math.exp(lp - s) * k3}[estimator]


def kl_inputs(seed: int, shape, dtype):
    g = torch.Generator().manual_seed(seed)
    lp = -(torch.rand(shape, generator=g, dtype=torch.float64) * 3 + 0.05)
    ref = lp + 0.3 * torch.randn(shape, generator=g, dtype=torch.float64)
    sampler = lp + 0.2 * torch.randn(shape, generator=g, dtype=torch.float64)
    return lp.to(dtype), ref.to(dtype), sampler.to(dtype)


@pytest.mark.exercise("kl_loss_term")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", [(4, 6), (7,), (), (2, 3, 4)], ids=["batch-resp", "flat", "scalar", "3-d"])
@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_kl_loss_term_values(impl, ref, estimator, shape, dtype):
    lp, rl, sl = kl_inputs(len(shape) + 10, shape, dtype)
    expected = ref.kl_loss_term(lp, rl, sl, estimator)
    oracle = torch.tensor([kl_oracle(a, b, c, estimator) for a, b, c in zip(lp.flatten().tolist(), rl.flatten().tolist(),
                                                                            sl.flatten().tolist())], dtype=torch.float64)
    torch.testing.assert_close(expected.double().flatten(), oracle, rtol=1e-5, atol=1e-6)
    call = describe_call("kl_loss_term", lp, rl, sl, estimator)
    check_exercise(impl, ref, "kl_loss_term", runner(lp, rl, sl, estimator), call=call, atol=1e-6)
    check_untouched(impl, "kl_loss_term", call, lp, rl, sl, estimator)


@pytest.mark.exercise("kl_loss_term")
@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_kl_loss_term_values_far_from_the_reference_and_the_sampler(impl, ref, estimator):
    # The docstring's formulas hold for every log-ratio, with no clamp: r = ref − logprobs from −25 to +25 (k3 up to
    # e²⁵ ≈ 7·10¹⁰) and logprobs − sampler up to 6 (a ratio of e⁶ ≈ 403), float64, every log-prob ≤ 0; the oracle is
    # the formulas in Python floats. A clamp on k3, on r or on the ratio (a "safety" the docstring does not have) shows.
    lp = torch.tensor([[-0.5, -16.0, -7.0, -6.0, -30.0], [-6.0, -20.0, -7.0, -0.25, -1.0]], dtype=torch.float64)
    rl = lp + torch.tensor([[-15.0, 3.0, 5.0, -0.5, 25.0], [5.0, -15.0, 3.0, 0.0, -25.0]], dtype=torch.float64)
    sl = lp - torch.tensor([[6.0, 6.0, 6.0, 0.5, 6.0], [0.0, -3.0, 6.0, 6.0, 6.0]], dtype=torch.float64)
    oracle = torch.tensor([kl_oracle(a, b, c, estimator) for a, b, c in zip(lp.flatten().tolist(), rl.flatten().tolist(),
                                                                            sl.flatten().tolist())], dtype=torch.float64)
    torch.testing.assert_close(ref.kl_loss_term(lp, rl, sl, estimator).flatten(), oracle, rtol=1e-12, atol=1e-12)
    call = describe_call("kl_loss_term", lp, rl, sl, estimator) + " (r = ref − logprobs up to ±25, logprobs − sampler up to 6)"
    check_exercise(impl, ref, "kl_loss_term", runner(lp, rl, sl, estimator), call=call, rtol=1e-9, atol=1e-9)


@pytest.mark.exercise("kl_loss_term")
def test_kl_loss_term_defaults_to_k3_is(impl, ref):
    lp, rl, sl = kl_inputs(20, (3, 5), torch.float32)
    check_exercise(impl, ref, "kl_loss_term", lambda fn: fn(lp.clone(), rl.clone(), sl.clone()),
                   call=describe_call("kl_loss_term", lp, rl, sl) + " — the default estimator='k3_is'")


@pytest.mark.exercise("kl_loss_term")
@pytest.mark.parametrize("estimator", ["k2", "kl", "K3", "k3-is", ""])
def test_kl_loss_term_rejects_an_unknown_estimator(impl, estimator):
    lp, rl, sl = kl_inputs(21, (2, 3), torch.float32)
    expect_value_error(impl, "kl_loss_term", "unknown estimator", [mistake("kl_loss_term", "unknown_estimator_accepted")],
                       lp, rl, sl, estimator)


@pytest.mark.exercise("kl_loss_term")
@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_kl_loss_term_gradient_reaches_only_logprobs(impl, ref, estimator):
    # ref and sampler log-probs are constants even when the caller's tensors still require grad.
    lp, rl, sl = kl_inputs(22, (3, 4), torch.float64)

    def grads(fn):
        a, b, c = (x.clone().requires_grad_(True) for x in (lp, rl, sl))
        (fn(a, b, c, estimator) * torch.linspace(0.3, 1.7, 12, dtype=torch.float64).view(3, 4)).sum().backward()
        return tuple(torch.zeros_like(x) if x.grad is None else x.grad for x in (a, b, c))

    call = (describe_call("kl_loss_term", lp, rl, sl, estimator) + " with every input requiring grad: "
            "(gradient w.r.t. logprobs, ref_logprobs, sampler_logprobs) of a weighted sum of the output")
    check_exercise(impl, ref, "kl_loss_term", grads, call=call, rtol=1e-9, atol=1e-12)


def categorical(seed: int, rows: int = 4, actions: int = 5):
    """Logits θ of a small categorical policy (float64, with grad), and fixed log-probs of π_ref and of a sampler q."""
    g = torch.Generator().manual_seed(seed)
    theta = (0.3 * torch.randn(rows, actions, generator=g, dtype=torch.float64)).requires_grad_(True)
    ref_logp = torch.log_softmax(0.4 * torch.randn(rows, actions, generator=g, dtype=torch.float64), dim=-1)
    q_logp = torch.log_softmax(0.5 * torch.randn(rows, actions, generator=g, dtype=torch.float64), dim=-1)
    return theta, ref_logp, q_logp


def expected_gradient(fn, theta, ref_logp, sampler_logp, estimator):
    """E_{a~sampler}[∇_θ f(a)] = Σ_a sampler(a) ∇_θ f(a), exactly: f on every action at once, weighted, summed."""
    th = theta.detach().clone().requires_grad_(True)
    logp = torch.log_softmax(th, dim=-1)
    f = fn(logp, ref_logp.clone(), sampler_logp.clone(), estimator)
    (sampler_logp.exp() * f).sum().backward()
    return th.grad


def exact_kl_gradient(theta, ref_logp, forward: bool = True):
    """∇_θ KL(π_θ ‖ π_ref) (forward) or ∇_θ KL(π_ref ‖ π_θ), by autograd of the full sums."""
    th = theta.detach().clone().requires_grad_(True)
    logp = torch.log_softmax(th, dim=-1)
    kl = (logp.exp() * (logp - ref_logp)).sum() if forward else (ref_logp.exp() * (ref_logp - logp)).sum()
    kl.backward()
    return th.grad


def check_gradient(impl, estimator, theta, ref_logp, sampler_logp, target, what: str):
    call = f"kl_loss_term(log π_θ(a), log π_ref(a), log q(a), {estimator!r}) over every action a of a categorical policy"
    got = expected_gradient(impl.kl_loss_term, theta, ref_logp, sampler_logp, estimator)
    if not torch.allclose(got, target, rtol=1e-9, atol=1e-12):
        labels = matching_mistakes(PART, "kl_loss_term",
                                   lambda fn: expected_gradient(fn, theta, ref_logp, sampler_logp, estimator),
                                   got, rtol=1e-9, atol=1e-12)
        raise WrongAnswer(explain(call, f"the expected gradient E_q[∇ loss] should be {what}\n"
                                        f"    expected: {target.flatten()[:6].tolist()} ...\n"
                                        f"    got:      {got.flatten()[:6].tolist()} ...\n"
                                        f"    max abs diff: {(got - target).abs().max().item():.3g}", labels))


@pytest.mark.exercise("kl_loss_term")
@pytest.mark.parametrize("sampler", ["another policy q", "the reference", "the policy itself"])
@pytest.mark.parametrize("seed", [0, 1])
def test_k3_is_has_the_exact_gradient_of_kl_under_any_sampler(impl, ref, seed, sampler):
    # Σ_a q(a) ∇(π/q · k3)(a) = ∇ KL(π_θ ‖ π_ref) exactly, whatever q samples the tokens.
    theta, ref_logp, q_logp = categorical(seed)
    if sampler == "the reference":
        q_logp = ref_logp.clone()
    elif sampler == "the policy itself":
        q_logp = torch.log_softmax(theta.detach(), dim=-1)
    target = exact_kl_gradient(theta, ref_logp)
    assert torch.allclose(expected_gradient(ref.kl_loss_term, theta, ref_logp, q_logp, "k3_is"), target, rtol=1e-9, atol=1e-12)
    check_gradient(impl, "k3_is", theta, ref_logp, q_logp, target, f"∇ KL(π_θ ‖ π_ref) (tokens sampled by {sampler})")


@pytest.mark.exercise("kl_loss_term")
@pytest.mark.parametrize("seed", [0, 1])
def test_k3_on_policy_has_the_gradient_of_the_reverse_kl(impl, ref, seed):
    # Σ_a π ∇k3 = ∇ KL(π_ref ‖ π_θ): the other direction. (The reference must show the difference, or this teaches nothing.)
    theta, ref_logp, _ = categorical(seed)
    pi_logp = torch.log_softmax(theta.detach(), dim=-1)
    target = exact_kl_gradient(theta, ref_logp, forward=False)
    ref_grad = expected_gradient(ref.kl_loss_term, theta, ref_logp, pi_logp, "k3")
    assert torch.allclose(ref_grad, target, rtol=1e-9, atol=1e-12)
    assert not torch.allclose(ref_grad, exact_kl_gradient(theta, ref_logp), rtol=1e-3, atol=1e-6)
    check_gradient(impl, "k3", theta, ref_logp, pi_logp, target, "∇ KL(π_ref ‖ π_θ) (k3 differentiated on samples of π_θ)")


@pytest.mark.exercise("kl_loss_term")
@pytest.mark.parametrize("seed", [0, 1])
def test_k1_as_a_loss_has_zero_expected_gradient_and_in_the_reward_the_exact_one(impl, ref, seed):
    theta, ref_logp, _ = categorical(seed)
    pi_logp = torch.log_softmax(theta.detach(), dim=-1)
    check_gradient(impl, "k1", theta, ref_logp, pi_logp, torch.zeros_like(theta), "0 (Σ_a π ∇log π = ∇ Σ_a π = 0)")

    # In the reward: the policy gradient of −k1 (its value, no gradient of its own) is E_π[−k1 · ∇log π] = −∇ KL(π ‖ π_ref).
    def reward_gradient(fn):
        th = theta.detach().clone().requires_grad_(True)
        logp = torch.log_softmax(th, dim=-1)
        k1 = fn(logp.detach(), ref_logp.clone(), pi_logp.clone(), "k1").detach()
        (pi_logp.exp() * (-k1) * logp).sum().backward()
        return th.grad

    target = -exact_kl_gradient(theta, ref_logp)
    assert torch.allclose(reward_gradient(ref.kl_loss_term), target, rtol=1e-9, atol=1e-12)
    got = reward_gradient(impl.kl_loss_term)
    if not torch.allclose(got, target, rtol=1e-9, atol=1e-12):
        raise WrongAnswer(explain("kl_loss_term(log π(a), log π_ref(a), log π(a), 'k1') as a reward, over every action",
                                  "E_π[−k1 · ∇log π] should be −∇ KL(π_θ ‖ π_ref) exactly; "
                                  f"max abs diff {(got - target).abs().max().item():.3g}",
                                  matching_mistakes(PART, "kl_loss_term", reward_gradient, got, rtol=1e-9, atol=1e-12)))


# =====================================================================================
# sampling_version and may_sample
# =====================================================================================

@pytest.mark.exercise("sampling_version")
@pytest.mark.parametrize("lag", [0, 1, 2, 4, 8])
def test_sampling_version_is_batch_minus_lag_from_zero(impl, ref, lag):
    for batch in range(20):
        expected = max(0, batch - lag)
        assert ref.sampling_version(batch, lag) == expected
        got = impl.sampling_version(batch, lag)
        if got != expected or type(got) is not int:  # exactly an int: False == 0, and isinstance(False, int) is True
            labels = ([mistake("sampling_version", "and_returns_false")] if type(got) is bool else
                      matching_mistakes(PART, "sampling_version", lambda fn: fn(batch, lag), got, rtol=0, atol=0))
            raise WrongAnswer(explain(f"sampling_version({batch}, {lag})",
                                      f"expected the int {expected} (max(0, batch − lag)), got {got!r} ({type(got).__name__})",
                                      labels))


@pytest.mark.exercise("sampling_version")
@pytest.mark.parametrize("batch,lag", [(-1, 0), (0, -1), (5, -2), (-3, 2)])
def test_sampling_version_rejects_negative_arguments(impl, batch, lag):
    expect_value_error(impl, "sampling_version", "negative batch or lag", [mistake("sampling_version", "negative_not_checked")],
                       batch, lag)


@pytest.mark.exercise("may_sample")
@pytest.mark.parametrize("max_staleness", [0, 1, 2, 5])
def test_may_sample_allows_exactly_the_staleness_bound(impl, ref, max_staleness):
    for batch in range(12):
        for version in range(batch + 1):
            expected = batch - version <= max_staleness
            assert ref.may_sample(batch, version, max_staleness) is expected
            got = impl.may_sample(batch, version, max_staleness)
            if got != expected or type(got) is not bool:
                raise WrongAnswer(explain(f"may_sample({batch}, {version}, {max_staleness})",
                                          f"expected {expected} (staleness {batch - version}, allowed 0 … {max_staleness}), got {got!r}",
                                          matching_mistakes(PART, "may_sample", lambda fn: fn(batch, version, max_staleness),
                                                            got, rtol=0, atol=0)))


@pytest.mark.exercise("may_sample")
@pytest.mark.parametrize("batch,version,max_staleness", [(3, 4, 2), (0, 1, 0), (5, 9, 10)])
def test_may_sample_rejects_a_version_newer_than_the_batch(impl, batch, version, max_staleness):
    expect_value_error(impl, "may_sample", "a version newer than the batch cannot exist",
                       [mistake("may_sample", "future_version_allowed")], batch, version, max_staleness)


@pytest.mark.exercise("may_sample")
@pytest.mark.parametrize("batch,version,max_staleness", [(3, 1, -1), (-1, -1, 0), (2, -1, 4), (-2, -5, 1)])
def test_may_sample_rejects_negative_arguments(impl, batch, version, max_staleness):
    expect_value_error(impl, "may_sample", "negative argument", [mistake("may_sample", "negative_not_checked")],
                       batch, version, max_staleness)
