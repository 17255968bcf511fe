"""Tests for Part 11 (exercises/part11_goodhart.py): best-of-n's KL and gold, Gao's forms, ensembles of proxies.

Run: ``pytest tests/test_part11_goodhart.py`` (your code) or add ``--impl=solutions``.
Every expected value comes from an oracle written from the docstring and computed another way:
best-of-n by enumerating every n-subset of a small pool (exact fractions), by exact integer
binomials at N in the thousands, and by pass@k's formula; the discrete KL by enumerating every
tuple of draws and by Monte Carlo; the fits by numpy's least squares and exact normal equations;
the peaks by a search over d; ensembles in Python floats. The reference must agree with each
oracle too. A wrong answer names the known mistake it looks like (workbook/mistakes/part11_goodhart.py).
"""

from __future__ import annotations

import itertools
import math
import statistics
from fractions import Fraction

import numpy as np
import pytest
import torch

from workbook import mistakes
from workbook.checking import WrongAnswer, compare, describe_call, explain, known_mistake, matching_mistakes

PART = "part11_goodhart"
POINTS = {
    "best_of_n_kl": 1,
    "best_of_n_kl_discrete": 2,
    "best_of_n_gold": 3,
    "fit_gao": 2,
    "gao_peak": 1,
    "standardise_proxies": 1,
    "ensemble_reward": 2,
}
NAN, INF = float("nan"), float("inf")


def mistake(exercise: str, name: str) -> str:
    return known_mistake(PART, exercise, name)


def clone(value):
    return value.detach().clone().requires_grad_(value.requires_grad) if isinstance(value, torch.Tensor) else value


def raising_mistakes(exercise: str, error: type, args: tuple, kwargs: dict) -> list[str]:
    """Labels of the known mistakes that raise this kind of exception on these inputs."""
    labels = []
    for m in mistakes.mistakes_for(PART, exercise):
        try:
            m.impl(*[clone(a) for a in args], **{k: clone(v) for k, v in kwargs.items()})
        except error:
            labels.append(m.label)
        except Exception:  # noqa: BLE001 - another failure is not this one
            pass
    return labels


def answer(impl, exercise: str, *args, **kwargs):
    """The learner's output; an exception (other than a stub's) is a wrong answer, named when a known mistake raises it."""
    try:
        return getattr(impl, exercise)(*[clone(a) for a in args], **{k: clone(v) for k, v in kwargs.items()})
    except NotImplementedError:
        raise
    except Exception as e:  # noqa: BLE001 - any exception is the bug under test
        raise WrongAnswer(explain(describe_call(exercise, *args, **kwargs), f"raised {type(e).__name__}: {e}",
                                  raising_mistakes(exercise, type(e), args, kwargs))) from None


def is_float(value) -> bool:
    """A Python float (numpy's float64 is one too); not a tensor, an int or a bool."""
    return isinstance(value, float)


def check(impl, ref, exercise: str, expected, *args, rtol: float, atol: float, why: str = "", **kwargs):
    """The reference, then the learner, against the oracle's ``expected`` (a float, a tuple of floats or a tensor)."""
    ref_got = getattr(ref, exercise)(*[clone(a) for a in args], **{k: clone(v) for k, v in kwargs.items()})
    assert compare(ref_got, expected, rtol=rtol, atol=atol) is None, (exercise, args, kwargs, ref_got, expected)
    got = answer(impl, exercise, *args, **kwargs)
    problem = compare(got, expected, rtol=rtol, atol=atol)
    if problem is None and isinstance(expected, float) and not is_float(got):
        problem = f"expected a Python float, got {type(got).__name__}"
    if problem is None and isinstance(expected, tuple) and not all(is_float(g) for g in got):
        problem = f"expected a tuple of Python floats, got {tuple(type(g).__name__ for g in got)}"
    if problem is not None:
        labels = matching_mistakes(PART, exercise, lambda fn: fn(*[clone(a) for a in args],
                                                                 **{k: clone(v) for k, v in kwargs.items()}),
                                   got, rtol=rtol, atol=atol)
        raise WrongAnswer(explain(describe_call(exercise, *args, **kwargs) + (f" ({why})" if why else ""), problem, labels))
    return got


def expect_value_error(impl, exercise: str, why: str, *args, **kwargs) -> None:
    call = describe_call(exercise, *args, **kwargs)
    try:
        getattr(impl, exercise)(*[clone(a) for a in args], **{k: clone(v) for k, v in kwargs.items()})
    except ValueError:
        return
    except NotImplementedError:
        raise
    except Exception as e:  # noqa: BLE001 - another exception is not the documented one
        raise WrongAnswer(explain(call, f"expected a ValueError ({why}), got {type(e).__name__}: {e}",
                                  raising_mistakes(exercise, type(e), args, kwargs))) from None
    labels = []
    for m in mistakes.mistakes_for(PART, exercise):
        try:
            m.impl(*[clone(a) for a in args], **{k: clone(v) for k, v in kwargs.items()})
            labels.append(m.label)  # returned instead of raising, as the learner's did
        except Exception:  # noqa: BLE001 - this mistake raises here: not the one
            pass
    raise WrongAnswer(explain(call, f"expected a ValueError ({why})", labels))


def modified_inputs(fn, args: tuple, kwargs: dict) -> list[int]:
    """The positions of the tensor arguments ``fn`` changed in place, called on copies of ``args``."""
    copies = [clone(a) for a in args]
    fn(*copies, **kwargs)
    return [i for i, (before, after) in enumerate(zip(args, copies))
            if isinstance(before, torch.Tensor) and not torch.equal(before, after.detach())]


def check_untouched(impl, exercise: str, *args, **kwargs) -> None:
    changed = modified_inputs(getattr(impl, exercise), args, kwargs)
    if changed:
        labels = []
        for m in mistakes.mistakes_for(PART, exercise):
            try:
                if modified_inputs(m.impl, args, kwargs):
                    labels.append(m.label)
            except Exception:  # noqa: BLE001 - a mistake that cannot run here changes nothing
                pass
        raise WrongAnswer(explain(describe_call(exercise, *args, **kwargs),
                                  f"modified its input #{changed[0]} in place; treat inputs as read-only", labels))


def randn(seed: int, *shape: int, dtype=torch.float32) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


# =====================================================================================
# best_of_n_kl
# =====================================================================================

def kl_by_integration(n: int, points: int = 200_000) -> float:
    """∫₀¹ n u^(n−1) log(n u^(n−1)) du with t = u^n (uniform): ∫₀¹ log(n · t^((n−1)/n)) dt, midpoint rule."""
    t = (np.arange(points, dtype=np.float64) + 0.5) / points
    return float(np.mean(np.log(n) + (n - 1) / n * np.log(t)))


@pytest.mark.exercise("best_of_n_kl")
@pytest.mark.parametrize("n", [1, 2, 3, 5, 16, 100, 1000, 10**6])
def test_best_of_n_kl_is_the_kl_of_the_best_of_n_density(impl, ref, n):
    check(impl, ref, "best_of_n_kl", kl_by_integration(n), n, rtol=0, atol=2e-5,
          why="KL of the density n·u^(n−1) of the best of n uniform ranks, integrated numerically")


@pytest.mark.exercise("best_of_n_kl")
def test_best_of_n_kl_of_one_and_two_samples(impl, ref):
    check(impl, ref, "best_of_n_kl", 0.0, 1, rtol=0, atol=0, why="one sample is the base policy: exactly 0")
    check(impl, ref, "best_of_n_kl", math.log(2) - 0.5, 2, rtol=1e-14, atol=0, why="log 2 − 1/2")
    check(impl, ref, "best_of_n_kl", math.log(7) - 6 / 7, 7, rtol=1e-14, atol=0, why="log 7 − 6/7")


@pytest.mark.exercise("best_of_n_kl")
@pytest.mark.parametrize("n", [1001, 10**4, 10**6, 2**40 + 1])
def test_best_of_n_kl_is_the_formula_for_large_n_too(impl, ref, n):
    # log n − 1 drops (about) 1/n: 1e-3 at n = 1000, within the integration test's tolerance but not the formula.
    check(impl, ref, "best_of_n_kl", math.log(n) - (n - 1) / n, n, rtol=1e-14, atol=0,
          why="log n − (n − 1)/n, the whole formula at every n")


@pytest.mark.exercise("best_of_n_kl")
@pytest.mark.parametrize("n", [0, -3, True, False, 4.0, 2.5, "3", None, np.float64(4.0), np.float32(4.0), Fraction(4)],
                         ids=["0", "-3", "True", "False", "4.0", "2.5", "str", "None", "np-float64", "np-float32", "Fraction"])
def test_best_of_n_kl_rejects_anything_but_an_int_of_at_least_1(impl, n):
    # numpy's floats and Fraction(4) are not ints either: `type(n) is float` lets them through (np.float64 is a
    # subclass of float, np.float32 and Fraction are not floats at all).
    expect_value_error(impl, "best_of_n_kl", "n must be an int >= 1 (bool and float refused)", n)


# =====================================================================================
# best_of_n_kl_discrete
# =====================================================================================

def discrete_kl_by_enumeration(probs: list[float], n: int) -> float:
    """Every ordered tuple of n draws, its exact probability, and the best outcome in it."""
    p = [Fraction(x) for x in probs]
    p_bon = [Fraction(0)] * len(p)
    for draws in itertools.product(range(len(p)), repeat=n):
        weight = Fraction(1)
        for i in draws:
            weight *= p[i]
        p_bon[max(draws)] += weight
    return math.fsum(float(b) * math.log(float(b) / float(q)) for b, q in zip(p_bon, p) if b > 0)


def discrete_kl_exact_cdf(probs: list[float], n: int) -> float:
    """F(i)^n − F(i−1)^n in exact fractions (no underflow, no cancellation), then rounded once."""
    cdf, total = [], Fraction(0)
    for x in probs:
        total += Fraction(x)
        cdf.append(total)
    terms = []
    for i, q in enumerate(probs):
        b = float(cdf[i] ** n - (cdf[i - 1] ** n if i else 0))
        if b > 0:
            terms.append(b * (math.log(b) - math.log(q)))
    return math.fsum(terms)


DISCRETE_CASES = {
    "fair coin": [0.5, 0.5],
    "0.1 to 0.4": [0.1, 0.2, 0.3, 0.4],
    "best is rare": [0.7, 0.2, 0.1],
    "a zero": [0.25, 0.0, 0.125, 0.625],
    "zeros at both ends": [0.0, 0.375, 0.625, 0.0],
    "one outcome": [1.0],
}


@pytest.mark.exercise("best_of_n_kl_discrete")
@pytest.mark.parametrize("n", [1, 2, 3, 4])
@pytest.mark.parametrize("case", list(DISCRETE_CASES))
def test_discrete_kl_matches_enumeration_of_every_draw(impl, ref, case, n):
    probs = DISCRETE_CASES[case]
    check(impl, ref, "best_of_n_kl_discrete", discrete_kl_by_enumeration(probs, n),
          torch.tensor(probs, dtype=torch.float64), n, rtol=1e-9, atol=1e-12,
          why=f"{case}: every one of the {len(probs) ** n} ordered draws enumerated")


@pytest.mark.exercise("best_of_n_kl_discrete")
def test_discrete_kl_matches_monte_carlo_best_of_n(impl, ref):
    # Draw 5 samples 200,000 times, keep the best; the KL of the kept outcomes' frequencies against probs.
    probs = torch.tensor([0.3, 0.05, 0.25, 0.1, 0.2, 0.1], dtype=torch.float64)
    n, trials = 5, 200_000
    g = torch.Generator().manual_seed(0)
    best = torch.multinomial(probs.expand(trials, -1), n, replacement=True, generator=g).amax(dim=1)
    freq = torch.bincount(best, minlength=6).double() / trials
    seen = freq > 0
    estimate = float((freq[seen] * torch.log(freq[seen] / probs[seen])).sum())
    got = answer(impl, "best_of_n_kl_discrete", probs, n)
    assert abs(ref.best_of_n_kl_discrete(probs, n) - estimate) < 0.01
    if not abs(got - estimate) < 0.01:
        raise WrongAnswer(explain(describe_call("best_of_n_kl_discrete", probs, n),
                                  f"the best of 5 draws, simulated {trials} times, has KL {estimate:.4f} from the base; got {got!r}",
                                  matching_mistakes(PART, "best_of_n_kl_discrete", lambda fn: fn(probs.clone(), n), got,
                                                    rtol=0, atol=0.01)))


@pytest.mark.exercise("best_of_n_kl_discrete")
def test_discrete_kl_of_a_coin_is_below_the_analytic_formula(impl, ref):
    # The docstring's example: p = [½, ½], n = 3: P_bon = [1/8, 7/8]; at n = 100 "heads" almost surely: log 2.
    coin = torch.tensor([0.5, 0.5])
    check(impl, ref, "best_of_n_kl_discrete", 0.125 * math.log(0.25) + 0.875 * math.log(1.75), coin, 3,
          rtol=1e-12, atol=0, why="⅛ log ¼ + ⅞ log(7/4)")
    check(impl, ref, "best_of_n_kl_discrete", math.log(2), coin, 100, rtol=1e-12, atol=0,
          why="best of 100 coin flips is heads but for 2^-100: the KL is log 2, not log 100 − 0.99")


def two_outcome_kl(q: float, n: int) -> float:
    """Two outcomes [q, 1 − q]: P_bon = [q^n, 1 − q^n] in closed form (−expm1 for the second), in floats."""
    low = q**n
    high = -math.expm1(n * math.log(q))
    return (low * math.log(low / q) if low > 0 else 0.0) + high * math.log(high / (1 - q))


@pytest.mark.exercise("best_of_n_kl_discrete")
def test_discrete_kl_approaches_minus_log_p_top_and_never_exceeds_it(impl, ref):
    # The KL of always picking the best outcome is −log p_top: the limit as n grows, and a bound at every n (as is
    # log n − (n − 1)/n). Two outcomes are bounded by log 2 only when they are equally likely: [0.99, 0.01] at
    # n = 1000 is 4.60, and at n = 10⁵ the closed form is −log 0.01 to the last bit. A best outcome of probability 0
    # cannot occur: the bound is the best one that can (0.2).
    cases = [([0.99, 0.01], n, two_outcome_kl(0.99, n), "closed form") for n in (1, 10, 100, 1000, 10**4, 10**5)]
    cases += [([0.5, 0.3, 0.2, 0.0], n, discrete_kl_exact_cdf([0.5, 0.3, 0.2, 0.0], n), "exact fractions")
              for n in (3, 100, 1000)]
    for probs, n, expected, how in cases:
        p_top = [x for x in probs if x > 0][-1]
        bound = min(-math.log(p_top), math.log(n) - (n - 1) / n)
        got = check(impl, ref, "best_of_n_kl_discrete", expected, torch.tensor(probs, dtype=torch.float64), n,
                    rtol=1e-9, atol=1e-12, why=f"{how}; −log p_top = {-math.log(p_top):.4f}")
        slack = bound * 1e-12 + 1e-15   # rounding: at n = 1, 0.99 + 0.01 − 0.99 is 0.01 + 9e-18
        assert ref.best_of_n_kl_discrete(torch.tensor(probs, dtype=torch.float64), n) <= bound + slack
        if not got <= bound + slack:
            raise WrongAnswer(f"best_of_n_kl_discrete({probs}, {n}) = {got}: above min(−log p_top, log n − (n−1)/n) "
                              f"= {bound}, which no best-of-n can exceed")


@pytest.mark.exercise("best_of_n_kl_discrete")
@pytest.mark.parametrize("n", [2, 4, 16])
def test_discrete_kl_of_many_equal_outcomes_approaches_the_analytic_value_from_below(impl, ref, n):
    # 4,096 equally likely outcomes: few ties among n draws, so the exact KL is just below log n − (n−1)/n.
    # Oracle: P_bon(i) = (i^n − (i−1)^n) / K^n in exact integers.
    size = 4096
    probs = torch.full((size,), 1 / size, dtype=torch.float64)
    p_bon = [((i + 1) ** n - i**n) / size**n for i in range(size)]
    expected = math.fsum(b * math.log(b * size) for b in p_bon)
    analytic = math.log(n) - (n - 1) / n
    got = check(impl, ref, "best_of_n_kl_discrete", expected, probs, n, rtol=1e-9, atol=1e-12, why=f"{size} equal outcomes")
    if not analytic - 1e-2 < got <= analytic:
        raise WrongAnswer(f"best_of_n_kl_discrete({size} equal outcomes, {n}) = {got}: expected just below "
                          f"log n − (n−1)/n = {analytic} (an upper bound)")


@pytest.mark.exercise("best_of_n_kl_discrete")
@pytest.mark.parametrize("n", [500, 5000])
def test_discrete_kl_when_the_low_outcomes_underflow(impl, ref, n):
    # F(i)^n underflows to 0 for the low outcomes: P_bon = 0 there, and 0·log(0/p) must count as 0 (and p = 0 entries too).
    probs = [0.0, 0.125, 0.0, 0.25, 0.0625, 0.0, 0.0625, 0.25, 0.125, 0.125]
    check(impl, ref, "best_of_n_kl_discrete", discrete_kl_exact_cdf(probs, n), torch.tensor(probs), n,
          rtol=1e-9, atol=1e-12, why="the lowest outcomes' F(i)^n underflow; outcomes of probability 0 in between")


@pytest.mark.exercise("best_of_n_kl_discrete")
def test_discrete_kl_takes_float32_probabilities_that_sum_to_1_only_within_rounding(impl, ref):
    # Ten float32 0.1s sum to 1.0000001: within the tolerance, so no ValueError; the KL as in float64. rtol 1e-6, not
    # tighter: the docstring leaves dividing by the sum open (1.5e-8 off 1 moves this KL by 1.7e-7 relative; the
    # alternative `normalised_by_the_sum`); float32 arithmetic is caught by the coin's and the underflow tests.
    probs = torch.full((10,), 0.1)
    assert float(probs.double().sum()) != 1.0
    expected = discrete_kl_exact_cdf([float(x) for x in probs.tolist()], 6)
    check(impl, ref, "best_of_n_kl_discrete", expected, probs, 6, rtol=1e-6, atol=1e-9,
          why="float32 probabilities: ten 0.1s")
    probs64 = torch.tensor([0.1] * 10, dtype=torch.float64)
    check(impl, ref, "best_of_n_kl_discrete", discrete_kl_exact_cdf([0.1] * 10, 6), probs64, 6, rtol=1e-9, atol=1e-12,
          why="ten float64 0.1s (their sum is 0.9999999999999999)")


@pytest.mark.exercise("best_of_n_kl_discrete")
@pytest.mark.parametrize("gap", [9e-7, -9e-7])
def test_discrete_kl_accepts_a_sum_within_1e_6_of_1(impl, ref, gap):
    # The tolerance is 1e-6 (PROB_TOLERANCE): 1 ± 9e-7 passes (a tighter one, such as 1e-7, refuses it); the value is
    # checked loosely, since dividing by the sum is allowed and moves this KL by 1.1e-5 relative.
    probs = [0.25, 0.75 + gap]
    check(impl, ref, "best_of_n_kl_discrete", discrete_kl_exact_cdf(probs, 3), torch.tensor(probs, dtype=torch.float64), 3,
          rtol=1e-4, atol=0, why=f"the sum is 1 {'+' if gap > 0 else '−'} 9e-7: within 1e-6")


@pytest.mark.exercise("best_of_n_kl_discrete")
def test_discrete_kl_leaves_its_input_alone(impl):
    # Sums not exactly 1 (an in-place division by the sum shows) in float64 too (.double() of a float64 tensor is itself).
    check_untouched(impl, "best_of_n_kl_discrete", torch.tensor([0.25, 0.125, 0.5, 0.125]), 3)
    check_untouched(impl, "best_of_n_kl_discrete", torch.full((10,), 0.1), 3)
    check_untouched(impl, "best_of_n_kl_discrete", torch.tensor([0.25, 0.75 + 9e-7], dtype=torch.float64), 3)


@pytest.mark.exercise("best_of_n_kl_discrete")
@pytest.mark.parametrize("probs,n,why", [
    ([-0.25, 0.5, 0.75], 2, "a negative probability (the sum is 1)"),
    ([0.5, 0.5, 1e-4], 2, "the sum is 1.0001"),
    ([0.3, 0.3, 0.3], 2, "the sum is 0.9"),
    ([0.25, 0.75 + 2e-6], 3, "the sum is 1 + 2e-6: further than 1e-6 (torch.isclose's defaults, about 1e-5, pass it)"),
    ([0.25, 0.75 - 2e-6], 3, "the sum is 1 − 2e-6: further than 1e-6"),
    ([NAN, 0.5, 0.5], 2, "a NaN"),
    ([0.5, NAN], 3, "a NaN"),
    ([0.25, 0.75], 0, "n = 0"),
    ([0.25, 0.75], True, "n is a bool"),
    ([0.25, 0.75], -1, "n = −1"),
    ([0.25, 0.75], -3, "n = −3"),
    # The checks hold whatever n and however many outcomes: "0.0 for n = 1 or one outcome" is for good probs only.
    ([0.3, 0.3], 1, "the sum is 0.6, at n = 1"),
    ([-0.5, 1.5], 1, "a negative probability, at n = 1"),
    ([NAN, 0.5], 1, "a NaN, at n = 1"),
    ([0.5], 2, "one outcome of probability 0.5"),
    ([NAN], 2, "one outcome, a NaN"),
    ([2.0], 3, "one outcome of probability 2"),
    ([0.5], 1, "one outcome of probability 0.5, at n = 1"),
    ([], 2, "no outcome: the sum is 0"),
    ([], 1, "no outcome, at n = 1"),
], ids=["negative", "sum-above", "sum-below", "sum-2e-6-above", "sum-2e-6-below", "nan-first", "nan-last", "n0",
         "n-bool", "n-minus-1", "n-minus-3", "n1-sum", "n1-negative", "n1-nan", "one-0.5", "one-nan", "one-2",
         "one-0.5-n1", "empty", "empty-n1"])
def test_discrete_kl_rejects_bad_probabilities_and_bad_n(impl, probs, n, why):
    expect_value_error(impl, "best_of_n_kl_discrete", why, torch.tensor(probs, dtype=torch.float64), n)


# =====================================================================================
# best_of_n_gold
# =====================================================================================

def gold_by_enumeration(proxy: list[float], gold: list[float], n: int) -> float:
    """Every n-subset of the pool; in each, the tied maxima of the proxy share the pick uniformly."""
    total, count = Fraction(0), 0
    for subset in itertools.combinations(range(len(proxy)), n):
        top = max(proxy[i] for i in subset)
        tied = [i for i in subset if proxy[i] == top]
        total += sum(Fraction(gold[i]) for i in tied) / len(tied)
        count += 1
    return float(total / count)


def gold_by_exact_weights(proxy: list[float], gold: list[float], n: int) -> float:
    """w_i = C(i−1, n−1)/C(N, n) from exact integers (int / int rounds correctly), tie groups averaged."""
    big_n = len(proxy)
    groups: dict[float, list[float]] = {}
    for p, g in zip(proxy, gold):
        groups.setdefault(p, []).append(g)
    ranked = []
    for p in sorted(groups):
        mean = math.fsum(groups[p]) / len(groups[p])
        ranked += [mean] * len(groups[p])
    total, c, terms = math.comb(big_n, n), 1, []  # c = C(i−1, n−1), starting at i = n
    for i in range(n, big_n + 1):
        if i > n:
            c = c * (i - 1) // (i - n)
        terms.append(c / total * ranked[i - 1])
    return math.fsum(terms)


POOLS = {  # (proxy, gold): each is 8 samples
    "distinct": ([0.3, -1.2, 2.5, 0.7, -0.4, 1.1, 0.0, 1.9], [1.0, -0.5, 0.2, 2.0, 0.1, -1.5, 0.6, 0.9]),
    "tied proxy": ([1.0, 0.0, 2.0, 1.0, 2.0, 0.0, 2.0, 1.0], [0.5, -1.0, 3.0, 0.0, -2.0, 1.0, 0.25, 4.0]),
    "tied gold": ([0.5, 1.5, -0.5, 2.5, 1.0, 0.0, 3.0, 2.0], [1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0]),
    "0.1 values": ([0.1, 0.2, 0.1, 0.7, 0.3, 0.7, 0.2, 0.6], [0.1, 0.3, 0.7, 0.1, 0.2, 0.9, 0.1, 0.6]),
    "ties low only": ([-1.0, -1.0, -1.0, 0.5, 1.5, 2.5, 3.5, 4.5], [9.0, -9.0, 3.0, 0.5, 1.0, 1.5, 2.0, 2.5]),
    # 0.1 + 0.2 is 0.30000000000000004 and 1 + 2⁻⁵² is the float after 1: near, not tied — a tie is an equal score,
    # not one within a tolerance (nor equal once rounded to float32).
    "nearly tied": ([0.3, 0.1 + 0.2, 1.0, 1.0 + 2**-52, 0.3, -0.5, 1.0, 0.0], [2.0, -1.0, 0.5, -3.0, 0.0, 1.0, 4.0, 0.25]),
}


@pytest.mark.exercise("best_of_n_gold")
@pytest.mark.parametrize("pool", list(POOLS))
def test_best_of_n_gold_matches_enumeration_of_every_n_subset(impl, ref, pool):
    proxy, gold = POOLS[pool]
    for n in range(1, len(proxy) + 1):
        check(impl, ref, "best_of_n_gold", gold_by_enumeration(proxy, gold, n),
              torch.tensor(proxy, dtype=torch.float64), torch.tensor(gold, dtype=torch.float64), n, rtol=1e-12, atol=1e-12,
              why=f"{pool}: the mean over all {math.comb(len(proxy), n)} subsets of {n}")


@pytest.mark.exercise("best_of_n_gold")
def test_best_of_n_gold_tied_samples_share_their_average_gold(impl, ref):
    # Samples 1 and 2 tie for the top proxy score: best-of-4 of these 4 picks either with chance ½ → gold 0.5.
    proxy, gold = torch.tensor([1.0, 2.0, 2.0, 0.0]), torch.tensor([0.0, 1.0, 0.0, 5.0])
    check(impl, ref, "best_of_n_gold", 0.5, proxy, gold, 4, rtol=1e-12, atol=1e-12, why="a tie at the top")
    check(impl, ref, "best_of_n_gold", 0.5, proxy, gold, 3, rtol=1e-12, atol=1e-12, why="subsets of 3: ½, 1, 0, ½")
    check(impl, ref, "best_of_n_gold", 1.5, proxy, gold, 1, rtol=1e-12, atol=1e-12, why="n = 1: the mean gold")
    # However the tied samples are listed, the answer is the same.
    for order in ([2, 1, 0, 3], [3, 2, 0, 1], [1, 3, 2, 0]):
        check(impl, ref, "best_of_n_gold", 0.5, proxy[order], gold[order], 4, rtol=1e-12, atol=1e-12,
              why=f"the same pool listed in the order {order}")


@pytest.mark.exercise("best_of_n_gold")
@pytest.mark.parametrize("n", [1, 5, 16, 100, 187, 188, 200])
def test_best_of_n_gold_of_a_correctness_proxy_is_pass_at_n(impl, ref, n):
    # Proxy = gold = 1 for the 13 correct samples of 200: every tie group has one gold value, and the estimate
    # is pass@n = 1 − C(187, n)/C(200, n), Part 7's estimator (1 when n > 187).
    correct = torch.zeros(200, dtype=torch.float64)
    correct[torch.randperm(200, generator=torch.Generator().manual_seed(n))[:13]] = 1.0
    expected = float(1 - Fraction(math.comb(187, n), math.comb(200, n)))
    check(impl, ref, "best_of_n_gold", expected, correct, correct.clone(), n, rtol=1e-10, atol=1e-12,
          why="proxy = gold = correct: pass@n")


@pytest.mark.exercise("best_of_n_gold")
@pytest.mark.parametrize("n", [1, 2, 1499, 1500, 2999, 3000])
def test_best_of_n_gold_is_stable_for_thousands_of_samples(impl, ref, n):
    # C(3000, 1500) has 902 digits: as a float it overflows. The oracle's weights are exact integers divided once.
    proxy, gold = randn(0, 3000), randn(1, 3000)
    expected = gold_by_exact_weights(proxy.tolist(), gold.tolist(), n)
    # atol 1e-10: a sum of ~3000 float64 terms of order 1 that cancel; float32 arithmetic is off by ~1e-8.
    got = check(impl, ref, "best_of_n_gold", expected, proxy, gold, n, rtol=1e-9, atol=1e-10, why="N = 3000, float32 inputs")
    if not math.isfinite(got):
        raise WrongAnswer(f"best_of_n_gold(N=3000, n={n}) = {got}")


@pytest.mark.exercise("best_of_n_gold")
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("n", [2, 1000, 1999])
def test_best_of_n_gold_with_heavy_ties_in_a_large_pool(impl, ref, n, dtype):
    # 2000 samples with a proxy of 10 distinct values: every rank is in a tie group of ~200. In float32 too: a tie
    # group's gold summed in float32 (index_add_ into a zeros_like of the float32 values) is off by ~1e-7 relative.
    g = torch.Generator().manual_seed(n)
    proxy = (torch.randint(0, 10, (2000,), generator=g).double() / 10).to(dtype)
    gold = torch.randn(2000, generator=g, dtype=torch.float64).to(dtype)
    check(impl, ref, "best_of_n_gold", gold_by_exact_weights(proxy.tolist(), gold.tolist(), n), proxy, gold, n,
          rtol=1e-9, atol=1e-11, why=f"2000 samples, 10 proxy values, {dtype}")


@pytest.mark.exercise("best_of_n_gold")
@pytest.mark.parametrize("proxy_dtype,gold_dtype", [(torch.float32, torch.float64), (torch.float64, torch.float32),
                                                    (torch.bfloat16, torch.bfloat16), (torch.float16, torch.bfloat16)],
                         ids=["float32-float64", "float64-float32", "bfloat16", "float16-bfloat16"])
def test_best_of_n_gold_takes_any_float_dtypes(impl, ref, proxy_dtype, gold_dtype):
    # "Any float dtype", each its own: numpy has no bfloat16 (cast before .numpy()), and a tie group's sum must not be
    # kept in one input's dtype while the other is added to it. The oracle reads the values as given (exact in float64).
    g = torch.Generator().manual_seed(17)
    proxy = (torch.randint(0, 20, (300,), generator=g).double() / 8).to(proxy_dtype)
    gold = torch.randn(300, generator=g, dtype=torch.float64).to(gold_dtype)
    for n in (1, 40, 300):
        check(impl, ref, "best_of_n_gold", gold_by_exact_weights(proxy.double().tolist(), gold.double().tolist(), n),
              proxy, gold, n, rtol=1e-9, atol=1e-11, why=f"proxy {proxy_dtype}, gold {gold_dtype}, 20 proxy values")


@pytest.mark.exercise("best_of_n_gold")
@pytest.mark.parametrize("n", [1, 7, 1500, 3000])
def test_best_of_n_gold_of_a_constant_gold_of_0_1_is_0_1(impl, ref, n):
    # The weights sum to 1: a gold of 0.1 everywhere gives 0.1 (float64 arithmetic: to ~1e-11, not float32's 1e-8).
    proxy, gold = randn(2, 3000, dtype=torch.float64), torch.full((3000,), 0.1, dtype=torch.float64)
    check(impl, ref, "best_of_n_gold", 0.1, proxy, gold, n, rtol=1e-9, atol=0, why="gold = 0.1 everywhere")


@pytest.mark.exercise("best_of_n_gold")
def test_best_of_n_gold_at_n_equal_to_1_and_to_N(impl, ref):
    proxy = torch.tensor([0.5, 3.0, -1.0, 3.0, 2.0, 3.0, 0.0])
    gold = torch.tensor([1.0, 0.25, 7.0, -0.5, 2.0, 1.0, 0.5])
    check(impl, ref, "best_of_n_gold", math.fsum(gold.tolist()) / 7, proxy, gold, 1, rtol=1e-12, atol=1e-12,
          why="n = 1: the pool's mean gold")
    check(impl, ref, "best_of_n_gold", (0.25 - 0.5 + 1.0) / 3, proxy, gold, 7, rtol=1e-12, atol=1e-12,
          why="n = N: the mean gold of the three samples tied for the top proxy score")
    check(impl, ref, "best_of_n_gold", 2.0, proxy[[0, 2, 4, 6]], gold[[0, 2, 4, 6]], 4, rtol=1e-12, atol=1e-12,
          why="n = N, one top sample: its gold")
    single = torch.tensor([0.1])
    check(impl, ref, "best_of_n_gold", float(single), single, single.clone(), 1, rtol=1e-12, atol=0, why="a pool of one")


@pytest.mark.exercise("best_of_n_gold")
def test_best_of_n_gold_leaves_its_inputs_alone(impl):
    proxy, gold = randn(3, 50), randn(4, 50)
    check_untouched(impl, "best_of_n_gold", proxy, gold, 10)
    # float64 (where .double() returns the input itself) with ties: averaging the ties in place shows.
    tied = torch.randint(0, 5, (50,), generator=torch.Generator().manual_seed(3)).double() / 10
    check_untouched(impl, "best_of_n_gold", tied, randn(4, 50, dtype=torch.float64), 10)


@pytest.mark.exercise("best_of_n_gold")
@pytest.mark.parametrize("proxy_shape,gold_shape,n,why", [
    ((5,), (5,), 0, "n = 0"),
    ((5,), (5,), 6, "n > N"),
    ((5,), (5,), -1, "n < 1"),
    ((5,), (5,), True, "n is a bool"),
    ((5,), (5,), 2.0, "n is a float"),
    ((5,), (5,), np.float64(2.0), "n is a numpy float"),
    ((5,), (6,), 2, "proxy and gold of different lengths"),
    ((2, 3), (2, 3), 2, "2-D inputs of one shape"),
    ((6,), (6, 1), 2, "gold is 2-D"),
    ((), (), 1, "0-D inputs (one score each, not a pool)"),
    ((5,), (), 1, "gold is 0-D"),
], ids=["n0", "n-above-N", "n-negative", "n-bool", "n-float", "n-numpy-float", "lengths", "2d", "gold-2d", "0d",
        "gold-0d"])
def test_best_of_n_gold_rejects_bad_n_and_shapes(impl, proxy_shape, gold_shape, n, why):
    expect_value_error(impl, "best_of_n_gold", why, randn(5, *proxy_shape), randn(6, *gold_shape), n)


# =====================================================================================
# fit_gao
# =====================================================================================

def second_column(d: np.ndarray, form: str) -> np.ndarray:
    if form == "bon":
        return d**2
    return np.where(d > 0, d * np.log(np.where(d > 0, d, 1.0)), 0.0)


def fit_oracle(d: list[float], r: list[float], form: str) -> tuple[float, float, float]:
    """numpy's least squares on the columns (d, −second); R² = 1 − SS_res / SS_tot around the mean."""
    dd, rr = np.array(d, dtype=np.float64), np.array(r, dtype=np.float64)
    design = np.stack([dd, -second_column(dd, form)], axis=1)
    (alpha, beta), *_ = np.linalg.lstsq(design, rr, rcond=None)
    resid = rr - design @ np.array([alpha, beta])
    r2 = 1.0 - float(resid @ resid) / float(((rr - rr.mean()) ** 2).sum())
    return float(alpha), float(beta), r2


def bon_fit_exact(d: list[float], r: list[float]) -> tuple[float, float]:
    """The 2×2 normal equations of the bon form in exact fractions, solved by Cramer's rule."""
    D, R = [Fraction(x) for x in d], [Fraction(x) for x in r]
    s11 = sum(x * x for x in D)
    s12 = -sum(x**3 for x in D)
    s22 = sum(x**4 for x in D)
    t1 = sum(x * y for x, y in zip(D, R))
    t2 = -sum(x * x * y for x, y in zip(D, R))
    det = s11 * s22 - s12 * s12
    return float((t1 * s22 - s12 * t2) / det), float((s11 * t2 - s12 * t1) / det)


D_POINTS = [0.0, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0]


@pytest.mark.exercise("fit_gao")
@pytest.mark.parametrize("alpha,beta", [(1.5, 0.4), (0.8, 0.1)])
@pytest.mark.parametrize("form", ["bon", "rl"])
def test_fit_gao_recovers_the_form_it_was_given(impl, ref, form, alpha, beta):
    d = torch.tensor(D_POINTS, dtype=torch.float64)
    r = torch.tensor(D_POINTS, dtype=torch.float64) * alpha - beta * torch.tensor(second_column(np.array(D_POINTS), form))
    check(impl, ref, "fit_gao", (alpha, beta, 1.0), d, r, form, rtol=1e-8, atol=1e-9,
          why=f"points on R = d(α − β·{'d' if form == 'bon' else 'log d'}) exactly, one at d = 0")


@pytest.mark.exercise("fit_gao")
@pytest.mark.parametrize("form", ["bon", "rl"])
def test_fit_gao_two_distinct_points_are_enough(impl, ref, form):
    # Two points with d > 0 (and one at 0, r = 0): two equations in α, β, solved exactly; R² = 1.
    d, r = [0.0, 0.5, 2.0], [0.0, 0.3, -0.1]
    x2 = [float(v) for v in second_column(np.array(d), form)]
    det = d[1] * (-x2[2]) - d[2] * (-x2[1])
    alpha = (r[1] * (-x2[2]) - r[2] * (-x2[1])) / det
    beta = (d[1] * r[2] - d[2] * r[1]) / det
    check(impl, ref, "fit_gao", (alpha, beta, 1.0), torch.tensor(d, dtype=torch.float64), torch.tensor(r, dtype=torch.float64),
          form, rtol=1e-9, atol=1e-10, why="the smallest fit allowed: two distinct d > 0")


@pytest.mark.exercise("fit_gao")
@pytest.mark.parametrize("case", ["noisy", "offset", "float32", "tiny"])
@pytest.mark.parametrize("form", ["bon", "rl"])
def test_fit_gao_is_least_squares_without_an_intercept(impl, ref, form, case):
    g = torch.Generator().manual_seed(7)
    d = torch.tensor([0.1, 0.3, 0.6, 0.9, 1.2, 1.7, 2.3, 2.8, 3.5, 4.1], dtype=torch.float64)
    r = d * (1.2 - 0.35 * d) + 0.15 * torch.randn(10, generator=g, dtype=torch.float64)
    if case == "offset":
        r = r + 3.0   # no intercept in the forms: the fit is poor and R² can be below 0
    if case == "float32":
        d, r = d.float(), r.float()
    if case == "tiny":
        r = r * 1e-10   # R in units where it is ~1e-10: R² is the same, SS_tot ~1e-20 (no threshold decides "constant")
    expected = fit_oracle(d.tolist(), r.tolist(), form)
    if form == "bon":
        assert np.allclose(expected[:2], bon_fit_exact(d.tolist(), r.tolist()), rtol=1e-9, atol=0)
    check(impl, ref, "fit_gao", expected, d, r, form, rtol=1e-7, atol=0 if case == "tiny" else 1e-8,
          why=f"{case} points, no point at d = 0")


@pytest.mark.exercise("fit_gao")
def test_fit_gao_at_a_tiny_scale_of_d(impl, ref):
    # d ~ 1e-9 on an exact rl curve: nothing may depend on the scale of d. log(d + 1e-12) moves α by 0.2 %; "distinct"
    # by torch.isclose (atol 1e-8) calls these five d one value. (The rl form: at this scale bon's β·d² is 1e-18 of
    # α·d and its β cannot be recovered by any float64 solver.)
    d = torch.tensor([0.5, 1.0, 1.5, 2.0, 3.0], dtype=torch.float64) * 1e-9
    r = d * (3.0 - 0.5 * torch.log(d))
    check(impl, ref, "fit_gao", (3.0, 0.5, 1.0), d, r, "rl", rtol=1e-9, atol=0,
          why="points on R = d(3 − 0.5 log d) at d = 0.5e-9 … 3e-9")


@pytest.mark.exercise("fit_gao")
@pytest.mark.parametrize("form", ["bon", "rl"])
def test_fit_gao_r2_of_r_that_varies_only_slightly_is_finite(impl, ref, form):
    # r = 1000 + 1e-8·noise varies (max ≠ min): R² is a number, however far below 0 (about −1e20 here), not NaN —
    # math.isclose(max, min) (relative 1e-9) or SS_tot below a threshold would call it constant.
    d = torch.tensor([0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 5.0], dtype=torch.float64)
    r = 1000.0 + 1e-8 * randn(21, 7, dtype=torch.float64)
    assert bool(r.max() != r.min())
    expected = fit_oracle(d.tolist(), r.tolist(), form)
    got = check(impl, ref, "fit_gao", expected, d, r, form, rtol=1e-6, atol=0, why="r = 1000 + 1e-8·noise")
    if not math.isfinite(got[2]):
        raise WrongAnswer(f"fit_gao(r = 1000 + 1e-8·noise, {form!r}) gave R² = {got[2]}: r varies, so R² is finite")


@pytest.mark.exercise("fit_gao")
@pytest.mark.parametrize("form", ["bon", "rl"])
def test_fit_gao_points_at_d_0_add_nothing_to_alpha_beta_but_count_in_r2(impl, ref, form):
    # d·log d at d = 0 is 0·(−inf) = NaN in floating point; the limit is 0. A measured R at d = 0 that is not 0
    # (0.1 here) leaves α and β alone and enters R² with its residual.
    d = [0.0, 0.0, 0.5, 1.0, 2.0, 3.0]
    r = [0.1, 0.0, 0.55, 0.9, 1.3, 1.1]
    alpha, beta, _ = fit_oracle(d[2:], r[2:], form)
    _, _, r2 = fit_oracle(d, r, form)
    check(impl, ref, "fit_gao", (alpha, beta, r2), torch.tensor(d), torch.tensor(r), form, rtol=1e-6, atol=1e-7,
          why="two points at d = 0")


@pytest.mark.exercise("fit_gao")
@pytest.mark.parametrize("value", [0.1, 0.0])
@pytest.mark.parametrize("form", ["bon", "rl"])
def test_fit_gao_r2_is_nan_when_every_r_is_the_same(impl, ref, form, value):
    # Seven 0.1s: Σ(r − mean r)² comes out 1.3e-33, not 0, so "SS_tot == 0" (or "std == 0") misses them (five 0.1s
    # would not show it: their sum of squares comes out exactly 0).
    d = torch.tensor([0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 5.0], dtype=torch.float64)
    r = torch.full((7,), value, dtype=torch.float64)
    if value == 0.1:
        assert float(((r - r.mean()) ** 2).sum()) != 0.0 and float(r.std()) != 0.0
    got = answer(impl, "fit_gao", d, r, form)
    ref_got = ref.fit_gao(d, r, form)
    assert math.isnan(ref_got[2]) and all(math.isfinite(x) for x in ref_got[:2]), ref_got
    if not (isinstance(got, (tuple, list)) and len(got) == 3 and math.isnan(got[2]) and all(math.isfinite(x) for x in got[:2])):
        raise WrongAnswer(explain(describe_call("fit_gao", d, r, form),
                                  f"every r is {value}: expected finite α, β and r2 = NaN (nothing to explain), got {got!r}",
                                  matching_mistakes(PART, "fit_gao", lambda fn: fn(d, r, form), got, rtol=1e-6, atol=1e-7)))


@pytest.mark.exercise("fit_gao")
@pytest.mark.parametrize("form", ["bon", "rl"])
@pytest.mark.parametrize("d,r,why", [
    ([0.5, NAN, 2.0], [0.1, 0.2, 0.3], "a NaN d"),
    ([0.5, 1.0, 2.0], [0.1, INF, 0.3], "an infinite r"),
    ([0.5, 1.0, INF], [0.1, 0.2, 0.3], "an infinite d"),
    ([0.5, 1.0, 2.0], [0.1, NAN, 0.3], "a NaN r"),
    ([-0.5, 1.0, 2.0], [0.1, 0.2, 0.3], "a negative d"),
    ([0.0, 1.0, 1.0, 0.0], [0.0, 0.2, 0.3, 0.1], "two points with d > 0, but one distinct value"),
    ([0.0, 2.0], [0.0, 0.2], "one point with d > 0"),
], ids=["nan-d", "inf-r", "inf-d", "nan-r", "negative", "one-distinct", "one-point"])
def test_fit_gao_rejects_what_cannot_be_fitted(impl, form, d, r, why):
    expect_value_error(impl, "fit_gao", why, torch.tensor(d, dtype=torch.float64), torch.tensor(r, dtype=torch.float64), form)


@pytest.mark.exercise("fit_gao")
@pytest.mark.parametrize("form", ["gao", "BON", "linear", ""])
def test_fit_gao_rejects_an_unknown_form(impl, form):
    d, r = torch.tensor([0.5, 1.0, 2.0]), torch.tensor([0.1, 0.2, 0.3])
    expect_value_error(impl, "fit_gao", "form must be 'bon' or 'rl'", d, r, form)


@pytest.mark.exercise("fit_gao")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("form", ["bon", "rl"])
def test_fit_gao_leaves_its_inputs_alone(impl, form, dtype):
    # float64 too: .double() of a float64 tensor is the tensor itself, so a change to "the float64 copy" (clamping d = 0
    # away, centring r) would land in the caller's tensor.
    d = torch.tensor(D_POINTS, dtype=dtype)
    check_untouched(impl, "fit_gao", d, d * 0.5 - 0.1 * d**2, form)


# =====================================================================================
# gao_peak
# =====================================================================================

def peak_by_search(alpha: float, beta: float, form: str) -> float:
    """argmax of R(d) over d ≥ 0 by a log-spaced grid, refined twice around the best point."""
    def value(d: np.ndarray) -> np.ndarray:
        return d * (alpha - beta * (d if form == "bon" else np.log(d)))
    grid = np.logspace(-8, 6, 200_001)
    for _ in range(3):
        best = int(np.argmax(value(grid)))
        lo, hi = grid[max(best - 1, 0)], grid[min(best + 1, grid.size - 1)]
        grid = np.linspace(lo, hi, 20_001)
    return float(grid[int(np.argmax(value(grid)))])


@pytest.mark.exercise("gao_peak")
@pytest.mark.parametrize("alpha,beta", [(1.0, 0.25), (2.0, 1.0), (0.3, 0.15), (1.5, 0.7), (0.1, 0.3), (-0.2, 0.4)])
@pytest.mark.parametrize("form", ["bon", "rl"])
def test_gao_peak_is_where_the_form_is_highest(impl, ref, form, alpha, beta):
    if form == "bon" and alpha <= 0:
        expected = 0.0
    else:
        expected = peak_by_search(alpha, beta, form)
    check(impl, ref, "gao_peak", expected, alpha, beta, form, rtol=1e-5, atol=1e-9, why="found by a search over d")


@pytest.mark.exercise("gao_peak")
def test_gao_peak_hand_values(impl, ref):
    check(impl, ref, "gao_peak", 2.0, 1.0, 0.25, "bon", rtol=1e-15, atol=0, why="α/(2β)")
    check(impl, ref, "gao_peak", math.e, 1.0, 0.5, "rl", rtol=1e-15, atol=0, why="exp(α/β − 1)")
    check(impl, ref, "gao_peak", 1.0, 0.5, 0.5, "rl", rtol=1e-15, atol=0, why="α = β: exp(0)")
    check(impl, ref, "gao_peak", 0.0, -1.0, 0.5, "bon", rtol=0, atol=0, why="α < 0: the gold falls from d = 0")
    check(impl, ref, "gao_peak", 0.0, 0.0, 2.0, "bon", rtol=0, atol=0, why="α = 0")


@pytest.mark.exercise("gao_peak")
@pytest.mark.parametrize("alpha,beta", [(1.0, 0.0), (1.0, -0.5), (1.0, -1e-12), (-1.0, -0.5), (-1.0, -1e-12)])
@pytest.mark.parametrize("form", ["bon", "rl"])
def test_gao_peak_is_infinite_when_the_gold_never_turns_down(impl, ref, form, alpha, beta):
    # With α < 0 as well (bon: the gold dips, then grows without bound): the β rule comes first, not "α ≤ 0 gives 0".
    check(impl, ref, "gao_peak", INF, alpha, beta, form, rtol=0, atol=0, why="β < 0, or β = 0 with α > 0: the gold never turns down")


@pytest.mark.exercise("gao_peak")
@pytest.mark.parametrize("form", ["bon", "rl"])
def test_gao_peak_with_beta_zero_is_the_sign_of_alpha(impl, ref, form):
    # β = 0: both forms are R = αd, a straight line. β = −0.0 is the same β.
    for beta in (0.0, -0.0):
        check(impl, ref, "gao_peak", 0.0, -1.0, beta, form, rtol=0, atol=0, why="β = 0, α < 0: R = αd falls from d = 0")
        check(impl, ref, "gao_peak", 0.0, -1e-300, beta, form, rtol=0, atol=0, why="β = 0, a tiny α < 0: still falls")
        check(impl, ref, "gao_peak", INF, 0.0, beta, form, rtol=0, atol=0, why="β = 0, α = 0: flat, never turns down")
        check(impl, ref, "gao_peak", INF, 0.5, beta, form, rtol=0, atol=0, why="β = 0, α > 0: rises for ever")


@pytest.mark.exercise("gao_peak")
@pytest.mark.parametrize("beta", [1e-3, 1e-5])
def test_gao_peak_is_infinite_when_the_rl_peak_overflows(impl, ref, beta):
    check(impl, ref, "gao_peak", INF, 1.0, beta, "rl", rtol=0, atol=0, why=f"exp({1 / beta - 1:g}) is beyond a float")
    check(impl, ref, "gao_peak", math.exp(700.0), 1.0, 1 / 701, "rl", rtol=1e-9, atol=0, why="exp(700) still fits")
    check(impl, ref, "gao_peak", math.exp(709.5), 710.5, 1.0, "rl", rtol=1e-12, atol=0,
          why="exp(709.5) = 1.35e308 still fits (the largest float is about e^709.78): inf only beyond it")
    check(impl, ref, "gao_peak", math.exp(709.75), 710.75, 1.0, "rl", rtol=1e-12, atol=0,
          why="exp(709.75) = 1.74e308 still fits: a cut at 709.7 is too early")


@pytest.mark.exercise("gao_peak")
def test_gao_peak_rl_below_the_smallest_float_is_0(impl, ref):
    # exp(α/β − 1) under the smallest float comes out 0.0; a tiny peak above it is returned as it is (no floor).
    check(impl, ref, "gao_peak", 0.0, -800.0, 1.0, "rl", rtol=0, atol=0, why="exp(−801) is below the smallest float: 0.0")
    check(impl, ref, "gao_peak", 0.0, -1.0, 1e-3, "rl", rtol=0, atol=0, why="exp(−1001): 0.0")
    check(impl, ref, "gao_peak", math.exp(-701.0), -700.0, 1.0, "rl", rtol=1e-12, atol=0,
          why="exp(−701) = 3.6e-305 is a float: returned as it is")


@pytest.mark.exercise("gao_peak")
@pytest.mark.parametrize("form", ["bon", "rl"])
def test_gao_peak_with_a_tiny_beta_is_not_beta_zero(impl, ref, form):
    # Only β = 0 is β = 0: 1e-13 is positive, −1e-13 negative (a |β| < 1e-12 taken as 0 answers these wrongly).
    check(impl, ref, "gao_peak", INF, -1.0, -1e-13, form, rtol=0, atol=0, why="β = −1e-13 < 0: the gold never turns down")
    if form == "bon":
        check(impl, ref, "gao_peak", 5.0, 1e-12, 1e-13, form, rtol=1e-12, atol=0, why="α/(2β) = 1e-12 / 2e-13")
        check(impl, ref, "gao_peak", 5e12, 1.0, 1e-13, form, rtol=1e-12, atol=0, why="α/(2β) = 1 / 2e-13")
    else:
        check(impl, ref, "gao_peak", math.exp(9.0), 1e-12, 1e-13, form, rtol=1e-12, atol=0,
              why="exp(α/β − 1) = exp(9)")


@pytest.mark.exercise("gao_peak")
@pytest.mark.parametrize("alpha,beta,form,why", [
    (1.0, 0.5, "gao", "unknown form"), (1.0, 0.5, "RL", "unknown form"), (NAN, 0.5, "bon", "α is NaN"),
    (1.0, NAN, "rl", "β is NaN"), (1.0, INF, "bon", "β is infinite"), (-INF, 0.5, "rl", "α is infinite"),
    # Each check reached whatever the order: an unknown form or a non-finite α, β where β ≤ 0 or α ≤ 0 would
    # otherwise answer inf or 0.0 at once.
    (1.0, 0.0, "gao", "unknown form (β = 0)"), (1.0, -1.0, "bon ", "unknown form (β < 0)"),
    (NAN, -0.5, "rl", "α is NaN (β < 0)"), (1.0, -INF, "rl", "β is −inf"), (-INF, 0.5, "bon", "α is −inf (bon)"),
    (NAN, 0.0, "rl", "α is NaN (β = 0)"), (-INF, 0.0, "bon", "α is −inf (β = 0)"),
], ids=["gao", "RL", "nan-alpha", "nan-beta", "inf-beta", "inf-alpha", "gao-beta-0", "bon-space-beta-negative",
        "nan-alpha-beta-negative", "minus-inf-beta", "minus-inf-alpha-bon", "nan-alpha-beta-0", "minus-inf-alpha-beta-0"])
def test_gao_peak_rejects_bad_arguments(impl, alpha, beta, form, why):
    expect_value_error(impl, "gao_peak", why, alpha, beta, form)


# =====================================================================================
# standardise_proxies
# =====================================================================================

def standardise_oracle(scores: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    rows = []
    for s, ref_row in zip(scores.tolist(), reference.tolist()):
        mean, std = statistics.fmean(ref_row), statistics.pstdev(ref_row)
        rows.append([(x - mean) / std for x in s])
    return torch.tensor(rows, dtype=scores.dtype)


def proxy_scores(seed: int, k: int, batch: int, ref: int, dtype=torch.float32):
    """k proxies, each on its own scale and offset (one narrow, one wide, one far off)."""
    g = torch.Generator().manual_seed(seed)
    scale = torch.tensor([0.1, 3.0, 1.0, 0.5, 7.0][:k], dtype=dtype)[:, None]
    shift = torch.tensor([0.3, -4.0, 10.0, 0.0, 1.0][:k], dtype=dtype)[:, None]
    scores = shift + scale * torch.randn(k, batch, generator=g, dtype=dtype)
    reference = shift + scale * torch.randn(k, ref, generator=g, dtype=dtype)
    return scores, reference


@pytest.mark.exercise("standardise_proxies")
@pytest.mark.parametrize("k,batch,ref_size", [(3, 5, 7), (5, 8, 2), (2, 1, 3), (1, 4, 50)])
def test_standardise_proxies_uses_each_proxys_reference_mean_and_population_std(impl, ref, k, batch, ref_size):
    scores, reference = proxy_scores(k * 10 + ref_size, k, batch, ref_size)
    check(impl, ref, "standardise_proxies", standardise_oracle(scores, reference), scores, reference, rtol=1e-5, atol=1e-5,
          why=f"{ref_size} reference scores per proxy")


@pytest.mark.exercise("standardise_proxies")
def test_standardise_proxies_in_float64(impl, ref):
    scores, reference = proxy_scores(1, 3, 6, 4, dtype=torch.float64)
    check(impl, ref, "standardise_proxies", standardise_oracle(scores, reference), scores, reference, rtol=1e-12, atol=1e-12,
          why="float64 in, float64 out")


@pytest.mark.exercise("standardise_proxies")
@pytest.mark.parametrize("scores_dtype,reference_dtype", [(torch.float32, torch.float64), (torch.float64, torch.float32)])
def test_standardise_proxies_returns_the_dtype_of_the_scores(impl, ref, scores_dtype, reference_dtype):
    # Reference statistics kept in another precision than the batch's: the result is still on the scores' dtype.
    scores, reference = proxy_scores(7, 3, 5, 6, dtype=torch.float64)
    scores, reference = scores.to(scores_dtype), reference.to(reference_dtype)
    expected = standardise_oracle(scores.double(), reference.double()).to(scores_dtype)
    check(impl, ref, "standardise_proxies", expected, scores, reference, rtol=1e-5, atol=1e-5,
          why=f"{scores_dtype} scores, {reference_dtype} reference")


@pytest.mark.exercise("standardise_proxies")
def test_standardise_proxies_a_reference_sample_gets_its_z_score(impl, ref):
    # Scoring the reference set itself: each proxy's row has mean 0 and population std 1.
    _, reference = proxy_scores(2, 3, 1, 6, dtype=torch.float64)
    got = check(impl, ref, "standardise_proxies", standardise_oracle(reference, reference), reference, reference.clone(),
                rtol=1e-12, atol=1e-12, why="the reference set scored again")
    assert torch.allclose(got.std(dim=1, unbiased=False), torch.ones(3, dtype=torch.float64))


@pytest.mark.exercise("standardise_proxies")
@pytest.mark.parametrize("row,factor,spread", [(1, 1e-10, "3e-10"), (0, 1e-12, "1e-13")], ids=["3e-10", "1e-13"])
def test_standardise_proxies_of_a_proxy_on_a_tiny_scale(impl, ref, row, factor, spread):
    # A proxy whose scores are ~1e-10 apart still varies: only max == min is "never varies", not a std below some
    # tolerance (torch.isclose(std, 0) has atol 1e-8); and it is divided by its std as it is (a floor of 1e-12 shrinks
    # a spread of 1e-13 tenfold).
    scores, reference = proxy_scores(6, 3, 5, 7)
    scores[row], reference[row] = scores[row] * factor, reference[row] * factor
    check(impl, ref, "standardise_proxies", standardise_oracle(scores, reference), scores, reference, rtol=1e-5, atol=1e-5,
          why=f"proxy {row}'s scores are spread by ~{spread}")


@pytest.mark.exercise("standardise_proxies")
@pytest.mark.parametrize("scores_dtype,reference_requires_grad", [(torch.float64, False), (torch.float32, True)],
                         ids=["float64", "float32-reference-in-the-graph"])
def test_standardise_proxies_passes_the_gradient_to_the_scores(impl, scores_dtype, reference_requires_grad):
    # ∂z_jb/∂s_jb = 1/std_j and nothing across samples or proxies, so standardise-then-ensemble keeps ensemble_reward's
    # gradients. The reference's own gradient is left open (either is right): only the scores' is checked.
    scores, reference = proxy_scores(8, 3, 5, 6, dtype=torch.float64)
    leaf = scores.to(scores_dtype).requires_grad_(True)
    reference = reference.clone().requires_grad_(reference_requires_grad)
    weights = randn(9, 3, 5, dtype=scores_dtype)
    call = describe_call("standardise_proxies", leaf, reference)
    try:
        out = impl.standardise_proxies(leaf, reference)
    except NotImplementedError:
        raise
    except Exception as e:  # noqa: BLE001 - any exception is the bug under test
        raise WrongAnswer(explain(call, f"raised {type(e).__name__}: {e}",
                                  raising_mistakes("standardise_proxies", type(e), (leaf, reference), {}))) from None
    if not isinstance(out, torch.Tensor) or out.grad_fn is None:
        raise WrongAnswer(explain(call, "the result carries no gradient to the scores: standardising before "
                                        "ensemble_reward would cut the gradient it promises",
                                  [mistake("standardise_proxies", "scores_detached")]))
    (out * weights).sum().backward()
    std = reference.detach().double().std(dim=1, unbiased=False, keepdim=True)
    want = (weights.double() / std).to(scores_dtype)
    got = leaf.grad if leaf.grad is not None else torch.zeros_like(leaf)
    if not torch.allclose(got, want, rtol=1e-5, atol=1e-6):
        raise WrongAnswer(explain(call, f"gradient of Σ w·z w.r.t. the scores: expected w/std_j {want.tolist()}, "
                                        f"got {got.tolist()}", []))


@pytest.mark.exercise("standardise_proxies")
@pytest.mark.parametrize("row,dtype,why", [
    ([0.1] * 7, torch.float32, "seven float32 0.1s: √(mean((x − mean)²)) of them is 7.5e-9, not 0"),
    ([2.0] * 4 + [2.0] * 3, torch.float64, "all 2.0"),
    ([0.7] * 7, torch.float64, "all 0.7"),
], ids=["float32-0.1", "all-2", "all-0.7"])
def test_standardise_proxies_rejects_a_proxy_whose_reference_never_varies(impl, row, dtype, why):
    scores, reference = proxy_scores(3, 3, 4, 7, dtype=dtype)
    reference[1] = torch.tensor(row, dtype=dtype)
    expect_value_error(impl, "standardise_proxies", f"proxy 1's reference scores are all equal ({why})", scores, reference)


@pytest.mark.exercise("standardise_proxies")
@pytest.mark.parametrize("ref_size", [1, 0])
def test_standardise_proxies_rejects_a_reference_of_one_score_or_none(impl, ref_size):
    scores, reference = proxy_scores(4, 2, 3, ref_size)
    expect_value_error(impl, "standardise_proxies", f"{ref_size} reference scores per proxy: no spread", scores, reference)


@pytest.mark.exercise("standardise_proxies")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_standardise_proxies_leaves_its_inputs_alone(impl, dtype):
    # float64 too: .double() of a float64 tensor is the tensor itself, so standardising "the float64 copy" in place
    # would land in the caller's scores.
    scores, reference = proxy_scores(5, 3, 4, 6, dtype=dtype)
    check_untouched(impl, "standardise_proxies", scores, reference)


# =====================================================================================
# ensemble_reward
# =====================================================================================

def ensemble_oracle(scores: torch.Tensor, method: str, lam: float) -> torch.Tensor:
    out = []
    for column in scores.T.tolist():
        if method == "mean":
            out.append(statistics.fmean(column))
        elif method == "wco":
            out.append(min(column))
        else:
            out.append(statistics.fmean(column) - lam * statistics.pvariance(column))
    return torch.tensor(out, dtype=scores.dtype)


ENSEMBLE = torch.tensor([[0.5, -1.0, 2.0, 0.1, 0.3, 1.5],
                         [1.5, -0.5, -1.0, 0.1, 0.7, 1.5],
                         [-0.25, 0.0, 0.5, 0.1, 0.2, 1.5],
                         [0.0, 2.0, 1.0, 0.1, -0.4, 1.5],
                         [0.75, -1.0, 0.25, 0.1, 0.9, 1.5]])
"""5 members × 6 samples: a tie for the minimum (column 1), all equal (columns 3 and 5), 0.1s."""


@pytest.mark.exercise("ensemble_reward")
@pytest.mark.parametrize("k", [1, 2, 3, 5])
@pytest.mark.parametrize("lam", [0.5, 2.0])
@pytest.mark.parametrize("method", ["mean", "wco", "uwo"])
def test_ensemble_reward_values(impl, ref, method, lam, k):
    scores = ENSEMBLE[:k]
    check(impl, ref, "ensemble_reward", ensemble_oracle(scores, method, lam), scores, method, lam, rtol=1e-6, atol=1e-6,
          why=f"{k} members, λ = {lam}")
    if k == 5:
        random = randn(k, 5, 9, dtype=torch.float64)
        check(impl, ref, "ensemble_reward", ensemble_oracle(random, method, lam), random, method, lam, rtol=1e-12,
              atol=1e-12, why="random float64 scores")


@pytest.mark.exercise("ensemble_reward")
@pytest.mark.parametrize("k", [1, 3])
@pytest.mark.parametrize("method", ["mean", "wco", "uwo"])
def test_ensemble_reward_of_a_batch_of_one(impl, ref, method, k):
    # One sample: the result still has the batch dimension, shape (1,) — with one member too (squeeze() gives 0-D).
    scores = ENSEMBLE[:k, 1:2]
    check(impl, ref, "ensemble_reward", ensemble_oracle(scores, method, 0.5), scores, method, 0.5, rtol=1e-6, atol=1e-6,
          why=f"{k} member(s), one sample")


@pytest.mark.exercise("ensemble_reward")
def test_ensemble_reward_wco_is_the_exact_minimum_of_near_ties(impl, ref):
    # Members 1e-5, 1e-7, 1e-6 apart: the minimum is one of them, exactly. A smooth min −τ·logsumexp(−s/τ) is off
    # wherever members are within a few τ: at τ = 1e-4, 0 and 1e-5 give −6.4e-5; at τ = 1e-7 (which passes the
    # exact ties above within 1e-6), 1 and 1 + 1e-7 give 1 − 3.1e-8.
    scores = torch.tensor([[0.0, 1.0, -2.0 + 1e-6, 5.0], [1e-5, 1.0 + 1e-7, -2.0, 5.0 + 1e-5]], dtype=torch.float64)
    check(impl, ref, "ensemble_reward", torch.tensor([0.0, 1.0, -2.0, 5.0], dtype=torch.float64), scores, "wco",
          rtol=0, atol=0, why="near ties for the minimum")


@pytest.mark.exercise("ensemble_reward")
def test_ensemble_reward_uwo_lambda_defaults_to_one_half(impl, ref):
    check(impl, ref, "ensemble_reward", ensemble_oracle(ENSEMBLE, "uwo", 0.5), ENSEMBLE, "uwo", rtol=1e-6, atol=1e-6,
          why="uwo_lambda left out")


@pytest.mark.exercise("ensemble_reward")
def test_ensemble_reward_uwo_with_lambda_0_is_the_mean(impl, ref):
    check(impl, ref, "ensemble_reward", ensemble_oracle(ENSEMBLE, "mean", 0.0), ENSEMBLE, "uwo", 0.0, rtol=1e-6, atol=1e-6,
          why="λ = 0")


@pytest.mark.exercise("ensemble_reward")
@pytest.mark.parametrize("lam", [-1.0, NAN])
@pytest.mark.parametrize("method", ["mean", "wco"])
def test_ensemble_reward_mean_and_wco_ignore_lambda(impl, ref, method, lam):
    # λ is checked "for method 'uwo'" only: mean and WCO never read it, so a negative or NaN one is no error there.
    check(impl, ref, "ensemble_reward", ensemble_oracle(ENSEMBLE, method, 0.0), ENSEMBLE, method, lam, rtol=1e-6, atol=1e-6,
          why=f"uwo_lambda = {lam} with method {method!r}")


def ensemble_grad(impl, scores: torch.Tensor, method: str, lam: float) -> torch.Tensor:
    leaf = scores.detach().clone().double().requires_grad_(True)
    try:
        out = impl.ensemble_reward(leaf, method, lam)
    except NotImplementedError:
        raise
    except Exception as e:  # noqa: BLE001 - any exception is the bug under test
        raise WrongAnswer(explain(describe_call("ensemble_reward", leaf, method, lam), f"raised {type(e).__name__}: {e}",
                                  raising_mistakes("ensemble_reward", type(e), (leaf, method, lam), {}))) from None
    if not isinstance(out, torch.Tensor) or out.grad_fn is None:
        raise WrongAnswer(explain(describe_call("ensemble_reward", leaf, method, lam),
                                  "the result carries no gradient: the ensemble must be differentiable in the scores it uses",
                                  matching_mistakes(PART, "ensemble_reward", lambda fn: fn(leaf.detach().clone(), method, lam),
                                                    out, rtol=1e-6, atol=1e-6) + [mistake("ensemble_reward", "detached")]))
    out.sum().backward()
    return leaf.grad if leaf.grad is not None else torch.zeros_like(leaf)


def expected_grad(scores: torch.Tensor, method: str, lam: float) -> torch.Tensor:
    k = scores.shape[0]
    s = scores.double()
    if method == "mean":
        return torch.full_like(s, 1 / k)
    if method == "uwo":
        return 1 / k - 2 * lam * (s - s.mean(dim=0)) / k
    raise AssertionError(method)


def grad_mistakes(method: str, scores: torch.Tensor, lam: float, got_grad: torch.Tensor) -> list[str]:
    labels = []
    for m in mistakes.mistakes_for(PART, "ensemble_reward"):
        try:
            leaf = scores.detach().clone().double().requires_grad_(True)
            m.impl(leaf, method, lam).sum().backward()
            if leaf.grad is not None and torch.allclose(leaf.grad, got_grad, atol=1e-9):
                labels.append(m.label)
        except Exception:  # noqa: BLE001 - a mistake that cannot run here matches nothing
            pass
    return labels


@pytest.mark.exercise("ensemble_reward")
@pytest.mark.parametrize("lam", [0.5, 2.0])
@pytest.mark.parametrize("method", ["mean", "uwo"])
def test_ensemble_reward_gradient_reaches_every_member(impl, method, lam):
    scores = randn(11, 4, 7, dtype=torch.float64)
    got = ensemble_grad(impl, scores, method, lam)
    want = expected_grad(scores, method, lam)
    if not torch.allclose(got, want, atol=1e-9):
        raise WrongAnswer(explain(describe_call("ensemble_reward", scores, method, lam),
                                  f"gradient of the summed rewards w.r.t. the scores: expected {want.tolist()}, got {got.tolist()} "
                                  "(mean: 1/k each; uwo: 1/k − 2λ(s_j − mean)/k)", grad_mistakes(method, scores, lam, got)))


@pytest.mark.exercise("ensemble_reward")
def test_ensemble_reward_wco_gradient_goes_to_the_minimum_member(impl):
    scores = randn(12, 4, 7, dtype=torch.float64)
    got = ensemble_grad(impl, scores, "wco", 0.5)
    want = torch.nn.functional.one_hot(scores.argmin(dim=0), 4).T.double()
    if not torch.allclose(got, want, atol=1e-12):
        raise WrongAnswer(explain(describe_call("ensemble_reward", scores, "wco"),
                                  f"the gradient goes to each sample's minimum member (1) and to no other (0): expected "
                                  f"{want.tolist()}, got {got.tolist()}", grad_mistakes("wco", scores, 0.5, got)))


@pytest.mark.exercise("ensemble_reward")
def test_ensemble_reward_wco_gradient_with_a_tie_for_the_minimum(impl):
    # Columns 1 (members 1 and 4 tie at −1) and 3, 5 (all equal): the gradient goes to the tied members only,
    # ≥ 0 each and summing to 1 — split evenly (amin) or all to one (min(dim=0).values): both allowed.
    got = ensemble_grad(impl, ENSEMBLE, "wco", 0.5)
    col_min = ENSEMBLE.double().amin(dim=0)
    tied = ENSEMBLE.double() == col_min
    ok = (bool((got[~tied] == 0).all()) and bool((got[tied] >= 0).all())
          and torch.allclose(got.sum(dim=0), torch.ones(ENSEMBLE.shape[1], dtype=torch.float64), atol=1e-12))
    if not ok:
        raise WrongAnswer(explain(describe_call("ensemble_reward", ENSEMBLE, "wco"),
                                  f"with ties for the minimum the gradient must go to the tied members only, ≥ 0 and summing to 1 "
                                  f"per sample; got {got.tolist()}", grad_mistakes("wco", ENSEMBLE, 0.5, got)))


@pytest.mark.exercise("ensemble_reward")
def test_ensemble_reward_keeps_the_dtype_and_the_inputs(impl, ref):
    scores = randn(13, 3, 5, dtype=torch.float64)
    for method in ("mean", "wco", "uwo"):
        got = answer(impl, "ensemble_reward", scores, method, 1.0)
        if got.dtype != torch.float64:
            raise WrongAnswer(f"ensemble_reward(float64 scores, {method!r}) returned {got.dtype}: keep the scores' dtype")
        check_untouched(impl, "ensemble_reward", scores, method, 1.0)


@pytest.mark.exercise("ensemble_reward")
@pytest.mark.parametrize("k,method,lam,why", [
    (3, "max", 0.5, "unknown method"), (3, "WCO", 0.5, "unknown method"), (3, "", 0.5, "unknown method"),
    (0, "mean", 0.5, "no members"), (0, "wco", 0.5, "no members"), (0, "uwo", 0.5, "no members"),
    (3, "uwo", -0.1, "λ < 0"), (1, "uwo", -2.0, "λ < 0"), (3, "uwo", NAN, "λ is NaN"),
], ids=["max", "WCO", "empty", "k0-mean", "k0-wco", "k0-uwo", "lam-negative", "lam-negative-k1", "lam-nan"])
def test_ensemble_reward_rejects_bad_arguments(impl, k, method, lam, why):
    expect_value_error(impl, "ensemble_reward", why, randn(14, 3, 4)[:k], method, lam)
