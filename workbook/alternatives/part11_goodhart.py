"""Correct alternatives to the Part 11 exercises (see workbook/alternatives/__init__.py).

Each is written from the exercise's docstring alone, in a style the reference does not use.
"""

from __future__ import annotations

import itertools
import math
import operator
import sys
from fractions import Fraction
from functools import partial

import numpy as np
import torch

from workbook.alternatives import alternative

part11 = partial(alternative, "part11_goodhart")


def _int_at_least_1(n) -> int:
    if type(n) is bool:
        raise ValueError("n must not be a bool")
    try:
        n = operator.index(n)        # ints (and numpy ints) only: a float has no __index__
    except TypeError:
        raise ValueError(f"n must be an int, got {n!r}") from None
    if n < 1:
        raise ValueError("n must be at least 1")
    return n


# --- best_of_n_kl --------------------------------------------------------------------------------

@part11("best_of_n_kl", "expanded_with_log1p", "the same number written log n − 1 + 1/n, with operator.index for the type")
def kl_expanded(n):
    n = _int_at_least_1(n)
    return math.log(n) - 1.0 + 1.0 / n


@part11("best_of_n_kl", "numpy_float", "numpy's log, the result converted back to a Python float")
def kl_numpy(n):
    n = _int_at_least_1(n)
    return float(np.log(np.float64(n)) - (n - 1) / n)


@part11("best_of_n_kl", "exact_fraction", "type(n) is int, then log n − Fraction(n − 1, n) rounded once")
def kl_fraction(n):
    if type(n) is not int or n < 1:
        raise ValueError(f"n must be an int >= 1, got {n!r}")
    return math.log(n) - float(Fraction(n - 1, n))


# --- best_of_n_kl_discrete -----------------------------------------------------------------------

@part11("best_of_n_kl_discrete", "python_loop_with_xlogy_rule",
        "a Python loop over the outcomes in floats, the running CDF by hand, terms skipped where P_bon is 0")
def discrete_loop(probs, n):
    n = _int_at_least_1(n)
    values = [float(x) for x in probs.tolist()]
    if any(math.isnan(x) for x in values):
        raise ValueError("NaN probability")
    if min(values, default=0.0) < 0:
        raise ValueError("negative probability")
    if abs(math.fsum(values) - 1.0) > 1e-6:
        raise ValueError("probabilities must sum to 1")
    kl, before = 0.0, 0.0
    for p in values:
        after = before + p
        p_bon = after**n - before**n
        if p_bon > 0:
            kl += p_bon * (math.log(p_bon) - math.log(p))
        before = after
    return kl


@part11("best_of_n_kl_discrete", "torch_xlogy", "torch.special.xlogy, whose 0·log 0 is 0, and torch.diff of the powered CDF")
def discrete_xlogy(probs, n):
    n = _int_at_least_1(n)
    p = probs.double()
    if torch.isnan(p).any() or (p < 0).any() or not torch.isclose(p.sum(), torch.tensor(1.0, dtype=torch.float64),
                                                                  rtol=0, atol=1e-6):
        raise ValueError("bad probs")
    powered = torch.cat([torch.zeros(1, dtype=torch.float64), torch.cumsum(p, 0)]) ** n
    p_bon = torch.diff(powered)
    safe_p = torch.where(p_bon > 0, p, torch.ones_like(p))
    return (torch.special.xlogy(p_bon, p_bon) - torch.special.xlogy(p_bon, safe_p)).sum().item()


@part11("best_of_n_kl_discrete", "log_space_expm1",
        "P_bon = F(i)^n · (1 − (F(i−1)/F(i))^n) in log space: exp(n log F) · −expm1(n log(F(i−1)/F(i)))")
def discrete_log_space(probs, n):
    n = _int_at_least_1(n)
    p = probs.detach().double()
    if bool(torch.isnan(p).any()) or bool((p < 0).any()) or abs(float(p.sum()) - 1.0) > 1e-6:
        raise ValueError("bad probs")
    cdf = torch.cumsum(p, 0)
    below = torch.cat([cdf.new_zeros(1), cdf[:-1]])
    positive = cdf > 0
    safe_cdf = torch.where(positive, cdf, torch.ones_like(cdf))
    ratio = torch.where(positive, below / safe_cdf, torch.zeros_like(cdf))
    p_bon = torch.where(positive, torch.exp(n * torch.log(safe_cdf)) * -torch.expm1(n * torch.log(ratio)),
                        torch.zeros_like(cdf))
    kept = p_bon > 0
    one = torch.ones_like(p)
    terms = p_bon * (torch.log(torch.where(kept, p_bon, one)) - torch.log(torch.where(kept, p, one)))
    return float(torch.where(kept, terms, torch.zeros_like(p)).sum())


@part11("best_of_n_kl_discrete", "normalised_by_the_sum",
        "probs divided by their sum first (a copy): float32 probabilities that sum to 1 only within rounding then "
        "sum to 1 in float64")
def discrete_normalised(probs, n):
    n = _int_at_least_1(n)
    p = probs.double()
    if bool(torch.isnan(p).any()) or bool((p < 0).any()) or not abs(float(p.sum()) - 1.0) <= 1e-6:
        raise ValueError("bad probs")
    p = p / p.sum()
    before, kl = 0.0, 0.0
    for q, after in zip(p.tolist(), torch.cumsum(p, 0).tolist()):
        p_bon = after**n - before**n
        if p_bon > 0:
            kl += p_bon * math.log(p_bon / q)
        before = after
    return kl


# --- best_of_n_gold ------------------------------------------------------------------------------

def _gold_args(proxy, gold, n):
    if proxy.ndim != 1 or gold.ndim != 1 or len(proxy) != len(gold):
        raise ValueError("proxy and gold must be 1-D of one length")
    n = _int_at_least_1(n)
    if n > len(proxy):
        raise ValueError("n cannot exceed N")
    return n


@part11("best_of_n_gold", "product_of_ratios_and_groupby",
        "weights by the recursion w_N = n/N, w_(i−1) = w_i·(i − n)/(i − 1) in Python floats; ties averaged with "
        "itertools.groupby over the sorted (proxy, gold) pairs")
def gold_ratios(proxy, gold, n):
    n = _gold_args(proxy, gold, n)
    big_n = len(proxy)
    pairs = sorted(zip(proxy.double().tolist(), gold.double().tolist()), key=lambda pair: pair[0])
    ranked = []
    for _, group in itertools.groupby(pairs, key=lambda pair: pair[0]):
        golds = [g for _, g in group]
        ranked += [math.fsum(golds) / len(golds)] * len(golds)
    weights = [0.0] * big_n
    w = n / big_n
    for i in range(big_n, n - 1, -1):       # 1-based rank i, from the top down
        weights[i - 1] = w
        if i > n:
            w *= (i - n) / (i - 1)
    return math.fsum(w * g for w, g in zip(weights, ranked))


@part11("best_of_n_gold", "numpy_cumulative_log",
        "numpy: log-weights as a cumulative sum of log ratios; ties averaged with np.unique and np.bincount")
def gold_numpy(proxy, gold, n):
    n = _gold_args(proxy, gold, n)
    p, g = proxy.double().numpy(), gold.double().numpy()
    big_n = p.size
    values, inverse, counts = np.unique(p, return_inverse=True, return_counts=True)
    tie_gold = (np.bincount(inverse, weights=g) / counts)[inverse]
    ranked = tie_gold[np.argsort(p, kind="quicksort")]
    # log C(i−1, n−1) for i = n … N: start at log C(n−1, n−1) = 0 and add log((i − 1)/(i − n)) each step.
    i = np.arange(n + 1, big_n + 1, dtype=np.float64)
    log_c = np.concatenate([[0.0], np.cumsum(np.log(i - 1) - np.log(i - n))])
    log_total = math.lgamma(big_n + 1) - math.lgamma(n + 1) - math.lgamma(big_n - n + 1)
    return float(np.sum(np.exp(log_c - log_total) * ranked[n - 1:]))


@part11("best_of_n_gold", "exact_integer_binomials",
        "C(i − 1, n − 1) as exact integers grown by the recurrence, each divided once by C(N, n) (int / int rounds "
        "correctly)")
def gold_exact_integers(proxy, gold, n):
    n = _gold_args(proxy, gold, n)
    p, g = proxy.double(), gold.double()
    values, group = torch.unique(p, return_inverse=True)
    tie_gold = (torch.zeros_like(values).index_add_(0, group, g)
                / torch.zeros_like(values).index_add_(0, group, torch.ones_like(g)))[group]
    ranked = tie_gold[torch.argsort(p)].tolist()
    big_n = len(ranked)
    total, c, terms = math.comb(big_n, n), 1, []
    for i in range(n, big_n + 1):            # c = C(i − 1, n − 1)
        if i > n:
            c = c * (i - 1) // (i - n)
        terms.append(c / total * ranked[i - 1])
    return math.fsum(terms)


@part11("best_of_n_gold", "descending_with_unique_consecutive",
        "sorted descending, the sample j places from the top weighted C(N − 1 − j, n − 1)/C(N, n); ties averaged by "
        "torch.unique_consecutive on the sorted proxy")
def gold_descending(proxy, gold, n):
    n = _gold_args(proxy, gold, n)
    p, g = proxy.double(), gold.double()
    order = torch.argsort(p, descending=True)
    _, run, counts = torch.unique_consecutive(p[order], return_inverse=True, return_counts=True)
    ranked = (torch.zeros(len(counts), dtype=torch.float64).index_add_(0, run, g[order]) / counts)[run]
    big_n = len(p)
    below = big_n - 1 - torch.arange(big_n, dtype=torch.float64)     # samples below the j-th from the top
    log_c = torch.lgamma(below + 1) - math.lgamma(n) - torch.lgamma((below - n + 2).clamp(min=1))
    log_total = math.lgamma(big_n + 1) - math.lgamma(n + 1) - math.lgamma(big_n - n + 1)
    weights = torch.where(below >= n - 1, torch.exp(log_c - log_total), torch.zeros_like(below))
    return float((weights * ranked).sum())


# --- fit_gao -------------------------------------------------------------------------------------

def _fit_checks(d, r, form):
    if form != "bon" and form != "rl":
        raise ValueError(f"unknown form {form!r}")
    d, r = d.double(), r.double()
    if not (torch.isfinite(d).all() and torch.isfinite(r).all()):
        raise ValueError("non-finite input")
    if (d < 0).any():
        raise ValueError("negative d")
    if len(set(d[d > 0].tolist())) < 2:
        raise ValueError("need two distinct d > 0")
    return d, r


@part11("fit_gao", "normal_equations_by_cramer",
        "the 2×2 normal equations solved by Cramer's rule in Python floats; d·log d with torch.special.xlogy")
def fit_cramer(d, r, form):
    d, r = _fit_checks(d, r, form)
    x1 = d
    x2 = -(d * d) if form == "bon" else -torch.special.xlogy(d, d)
    a, b, c = float(x1 @ x1), float(x1 @ x2), float(x2 @ x2)
    y1, y2 = float(x1 @ r), float(x2 @ r)
    det = a * c - b * b
    alpha, beta = (y1 * c - b * y2) / det, (a * y2 - b * y1) / det
    fitted = alpha * x1 + beta * x2
    if r.max() == r.min():
        return alpha, beta, float("nan")
    ss_res = float(((r - fitted) ** 2).sum())
    ss_tot = float(((r - r.mean()) ** 2).sum())
    return alpha, beta, 1.0 - ss_res / ss_tot


@part11("fit_gao", "numpy_lstsq_on_positive_rows",
        "numpy.linalg.lstsq on the rows with d > 0 only (a d = 0 row is all zeros), R² over every point")
def fit_numpy(d, r, form):
    d, r = _fit_checks(d, r, form)
    dd, rr = d.numpy(), r.numpy()
    pos = dd > 0
    second = dd[pos] ** 2 if form == "bon" else dd[pos] * np.log(dd[pos])
    (alpha, beta), *_ = np.linalg.lstsq(np.column_stack([dd[pos], -second]), rr[pos], rcond=None)
    full_second = np.zeros_like(dd)
    full_second[pos] = second
    residual = rr - (alpha * dd - beta * full_second)
    if np.ptp(rr) == 0:
        return float(alpha), float(beta), math.nan
    r2 = 1.0 - float(residual @ residual) / float(np.sum((rr - rr.mean()) ** 2))
    return float(alpha), float(beta), r2


@part11("fit_gao", "normal_equations_solve",
        "torch.linalg.solve on the normal equations XᵀX θ = Xᵀr; d·log d with d clamped inside the log")
def fit_solve(d, r, form):
    d, r = _fit_checks(d, r, form)
    second = d * d if form == "bon" else d * torch.log(d.clamp(min=1e-300))
    x = torch.stack([d, -second], dim=1)
    alpha, beta = torch.linalg.solve(x.T @ x, x.T @ r).tolist()
    residual = r - (alpha * d - beta * second)
    if bool(r.max() == r.min()):
        return alpha, beta, math.nan
    return alpha, beta, 1.0 - float(residual @ residual) / float(((r - r.mean()) ** 2).sum())


@part11("fit_gao", "qr_and_nan_to_num", "QR, then a triangular solve; 0·log 0's NaN replaced by torch.nan_to_num")
def fit_qr(d, r, form):
    d, r = _fit_checks(d, r, form)
    second = d * d if form == "bon" else torch.nan_to_num(d * torch.log(d), nan=0.0)
    x = torch.stack([d, -second], dim=1)
    q, upper = torch.linalg.qr(x)
    theta = torch.linalg.solve_triangular(upper, (q.T @ r)[:, None], upper=True)[:, 0]
    fitted = x @ theta
    r2 = math.nan if bool(r.max() == r.min()) else float(1 - ((r - fitted) ** 2).sum() / ((r - r.mean()) ** 2).sum())
    return float(theta[0]), float(theta[1]), r2


# --- gao_peak ------------------------------------------------------------------------------------

@part11("gao_peak", "numpy_exp_in_log_space",
        "the rl peak compared in log space against log(float max); numpy for the exp; a dict of forms")
def peak_numpy(alpha, beta, form):
    peaks = {"bon": None, "rl": None}
    if form not in peaks:
        raise ValueError(f"unknown form {form!r}")
    if math.isnan(alpha) or math.isnan(beta) or math.isinf(alpha) or math.isinf(beta):
        raise ValueError("alpha and beta must be finite")
    if beta < 0 or (beta == 0 and alpha >= 0):
        return math.inf
    if form == "bon" or beta == 0:   # β = 0 here means α < 0: R = αd falls from the start
        return alpha / (2 * beta) if alpha > 0 else 0.0
    log_peak = alpha / beta - 1
    if log_peak > math.log(np.finfo(np.float64).max):
        return math.inf
    return float(np.exp(log_peak))


@part11("gao_peak", "try_overflow", "math.exp inside try/except OverflowError")
def peak_try(alpha, beta, form):
    if form not in ("bon", "rl") or not all(math.isfinite(x) for x in (alpha, beta)):
        raise ValueError("bad arguments")
    if beta <= 0:
        return 0.0 if beta == 0 and alpha < 0 else float("inf")
    if form == "bon":
        return max(0.0, alpha / beta / 2)
    try:
        return math.exp(alpha / beta - 1)
    except OverflowError:
        return float("inf")


@part11("gao_peak", "log_of_float_max", "the rl exponent compared with log(sys.float_info.max) before math.exp")
def peak_log_max(alpha, beta, form):
    if form not in ("bon", "rl"):
        raise ValueError(f"unknown form {form!r}")
    if not (math.isfinite(alpha) and math.isfinite(beta)):
        raise ValueError("alpha and beta must be finite")
    if not beta > 0:
        return math.inf if beta < 0 or alpha >= 0 else 0.0
    if form == "bon":
        return alpha / (2 * beta) if alpha > 0 else 0.0
    exponent = alpha / beta - 1
    return math.exp(exponent) if exponent <= math.log(sys.float_info.max) else math.inf


@part11("gao_peak", "numpy_errstate", "np.exp under np.errstate(over='ignore'), whose overflow is inf; float() of it")
def peak_errstate(alpha, beta, form):
    if form != "bon" and form != "rl":
        raise ValueError(f"unknown form {form!r}")
    if not np.isfinite([alpha, beta]).all():
        raise ValueError("alpha and beta must be finite")
    if beta <= 0:
        return float(np.where((beta == 0) & (alpha < 0), 0.0, np.inf))
    if form == "bon":
        return float(np.maximum(alpha / (2 * beta), 0.0))
    with np.errstate(over="ignore"):
        return float(np.exp(alpha / beta - 1))


# --- standardise_proxies -------------------------------------------------------------------------

@part11("standardise_proxies", "var_mean_correction_0",
        "torch.var_mean(correction=0) and rsqrt; the constant check as 'no two distinct values' per row")
def std_var_mean(scores, reference):
    if reference.shape[1] == 0:
        raise ValueError("no reference scores")
    for row in reference:
        if torch.unique(row).numel() < 2:
            raise ValueError("a proxy's reference scores never vary")
    var, mean = torch.var_mean(reference, dim=1, correction=0, keepdim=True)
    return ((scores - mean) * torch.rsqrt(var)).to(scores.dtype)


@part11("standardise_proxies", "loop_over_proxies_float64",
        "a loop over the proxies, statistics in float64 by the formula √(mean of squared deviations), cast back")
def std_loop(scores, reference):
    rows = []
    for s, ref in zip(scores, reference):
        ref64 = ref.double()
        if ref64.numel() == 0 or bool((ref64 == ref64[0]).all()):
            raise ValueError("a proxy's reference scores never vary")
        mean = ref64.mean()
        std = ((ref64 - mean) ** 2).mean().sqrt()
        rows.append(((s.double() - mean) / std).to(scores.dtype))
    return torch.stack(rows) if rows else scores.clone()


@part11("standardise_proxies", "std_mean_and_reciprocal",
        "torch.std_mean(correction=0), multiplied by 1/std; the constant check as max(dim=1) == min(dim=1)")
def std_std_mean(scores, reference):
    if reference.shape[1] == 0 or bool((reference.max(dim=1).values == reference.min(dim=1).values).any()):
        raise ValueError("a proxy's reference scores never vary")
    std, mean = torch.std_mean(reference, dim=1, correction=0, keepdim=True)
    return ((scores - mean) * (1.0 / std)).type_as(scores)


@part11("standardise_proxies", "numpy_rows",
        "the statistics in numpy, float64 (np.ptp for the check, np.std's ddof=0), applied to the scores in torch (the "
        "scores keep their gradient; the reference's statistics are fixed numbers)")
def std_numpy(scores, reference):
    ref = reference.detach().double().numpy()
    if ref.shape[1] == 0 or bool((np.ptp(ref, axis=1) == 0).any()):
        raise ValueError("a proxy's reference scores never vary")
    mean = torch.from_numpy(ref.mean(axis=1, keepdims=True))
    std = torch.from_numpy(ref.std(axis=1, keepdims=True))
    return ((scores.double() - mean) / std).to(scores.dtype)


# --- ensemble_reward -----------------------------------------------------------------------------

@part11("ensemble_reward", "min_values_and_var_mean",
        "WCO as torch.min(dim=0).values (the whole gradient of a tie to one member); UWO with torch.var_mean(correction=0)")
def ens_min_values(scores, method, uwo_lambda=0.5):
    if method not in {"mean", "wco", "uwo"}:
        raise ValueError(f"unknown method {method!r}")
    if len(scores) == 0:
        raise ValueError("no members")
    if method == "wco":
        return torch.min(scores, dim=0).values
    var, mean = torch.var_mean(scores, dim=0, correction=0)
    if method == "mean":
        return mean
    if not (uwo_lambda >= 0):
        raise ValueError("uwo_lambda must be >= 0")
    return mean - uwo_lambda * var


@part11("ensemble_reward", "sort_and_explicit_sums",
        "WCO as the first row of a sort over members; mean and variance written as sums over the k members")
def ens_sorted(scores, method, uwo_lambda=0.5):
    k = scores.shape[0]
    if k < 1 or method not in ("mean", "wco", "uwo"):
        raise ValueError("bad ensemble")
    if method == "wco":
        return torch.sort(scores, dim=0).values[0]
    mean = scores.sum(dim=0) / k
    if method == "mean":
        return mean
    if math.isnan(uwo_lambda) or uwo_lambda < 0:
        raise ValueError("uwo_lambda must be >= 0")
    return mean - uwo_lambda * ((scores - mean) ** 2).sum(dim=0) / k


@part11("ensemble_reward", "negated_max_and_moments",
        "WCO as −max(−s); UWO's variance as E[s²] − E[s]² over the members")
def ens_moments(scores, method, uwo_lambda=0.5):
    if method not in ("mean", "wco", "uwo") or scores.shape[0] == 0:
        raise ValueError("bad ensemble")
    if method == "wco":
        return -(-scores).amax(dim=0)
    mean = scores.mean(dim=0)
    if method == "mean":
        return mean
    if not uwo_lambda >= 0:
        raise ValueError("uwo_lambda must be >= 0")
    return mean - uwo_lambda * ((scores**2).mean(dim=0) - mean**2)
