"""Known-wrong versions of the Part 11 exercises (see workbook/mistakes/__init__.py)."""

from __future__ import annotations

import math
import numbers
from functools import partial

import numpy as np
import torch

from workbook.mistakes import mistake

part11 = partial(mistake, "part11_goodhart")


def _check_int(n, minimum: int = 1) -> None:
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < minimum:
        raise ValueError(n)


# --- best_of_n_kl ------------------------------------------------------------------------------

@part11("best_of_n_kl", "log_n_only", "log n was returned without subtracting (n − 1)/n")
def kl_log_n(n):
    _check_int(n)
    return math.log(n)


@part11("best_of_n_kl", "one_over_n_sign", "log n − 1 − 1/n was used: the sign of 1/n slipped (it is log n − 1 + 1/n)")
def kl_sign(n):
    _check_int(n)
    return math.log(n) - 1 - 1 / n if n > 1 else 0.0


@part11("best_of_n_kl", "log2", "log₂ n was used: the KL in bits, not nats")
def kl_log2(n):
    _check_int(n)
    return math.log2(n) - (n - 1) / n


@part11("best_of_n_kl", "fraction_inverted", "n/(n − 1) was subtracted instead of (n − 1)/n")
def kl_inverted(n):
    _check_int(n)
    return math.log(n) - n / (n - 1) if n > 1 else 0.0


@part11("best_of_n_kl", "type_not_checked", "n was only compared with 1: a bool or a float n was accepted")
def kl_no_type(n):
    if n < 1:
        raise ValueError(n)
    return math.log(n) - (n - 1) / n


@part11("best_of_n_kl", "large_n_shortcut",
        "log n − 1 was returned for large n (from 10,000): (n − 1)/n is not 1 there, it is 1 − 1/n")
def kl_large_n(n):
    _check_int(n)
    return math.log(n) - 1.0 if n >= 10_000 else math.log(n) - (n - 1) / n


@part11("best_of_n_kl", "float_refused_by_type_is",
        "a float n was refused by type(n) is float, which lets numpy's floats (np.float64(4.0) is a float subclass, "
        "np.float32(4.0) is not one) and Fraction(4) through")
def kl_type_is_float(n):
    if type(n) is bool or type(n) is float or not isinstance(n, numbers.Real) or n < 1:
        raise ValueError(n)
    return math.log(n) - (n - 1) / n


# --- best_of_n_kl_discrete -----------------------------------------------------------------------

def _discrete(probs, n, *, p_bon=None, reverse=False, where=True, reversed_kl=False, check=True, exact_sum=False,
              nan_check=True):
    if check:
        _check_int(n)
        p = probs.detach().double()
        if nan_check and bool(torch.isnan(p).any()):
            raise ValueError("nan")
        if bool((p < 0).any()):
            raise ValueError("negative")
        if exact_sum:
            if float(p.sum()) != 1.0:
                raise ValueError("sum")
        elif abs(float(p.sum()) - 1.0) > 1e-6:    # NaN > tol is False: a NaN passes this check
            raise ValueError("sum")
    p = probs.detach().double()
    if reverse:
        p = p.flip(0)
    cdf = torch.cumsum(p, 0)
    below = torch.cat([cdf.new_zeros(1), cdf[:-1]])
    bon = cdf**n - below**n if p_bon is None else p_bon(p, cdf, below, n)
    if reversed_kl:
        terms = torch.where(p > 0, p * torch.log(p / bon), torch.zeros_like(p))
    elif where:
        ok = bon > 0
        terms = torch.where(ok, bon * torch.log(torch.where(ok, bon, 1.0) / torch.where(ok, p, 1.0)), torch.zeros_like(p))
    else:
        terms = bon * torch.log(bon / p)
    return float(terms.sum())


@part11("best_of_n_kl_discrete", "analytic_formula", "the continuous formula log n − (n − 1)/n was returned whatever the probs")
def discrete_analytic(probs, n):
    _discrete(probs, n)
    return math.log(n) - (n - 1) / n


@part11("best_of_n_kl_discrete", "only_n_0_refused", "n = 0 (and a bool) was refused but a negative n was not")
def discrete_negative_n(probs, n):
    if isinstance(n, bool) or n == 0:
        raise ValueError(n)
    return _discrete(probs, n, check=False) if n < 0 else _discrete(probs, n)


@part11("best_of_n_kl_discrete", "worst_of_n", "outcome 0 was taken as the best (the order reversed): worst-of-n")
def discrete_reversed(probs, n):
    return _discrete(probs, n, reverse=True)


@part11("best_of_n_kl_discrete", "density_formula",
        "the continuous density n·p_i·F(i)^(n−1) was used as P_bon(i) (exact only without ties)")
def discrete_density(probs, n):
    return _discrete(probs, n, p_bon=lambda p, cdf, below, n: n * p * cdf ** (n - 1))


@part11("best_of_n_kl_discrete", "cdf_power_as_pmf", "F(i)^n was used as P_bon(i) without subtracting F(i − 1)^n")
def discrete_cdf(probs, n):
    return _discrete(probs, n, p_bon=lambda p, cdf, below, n: cdf**n)


@part11("best_of_n_kl_discrete", "zero_times_log_zero",
        "P_bon · log(P_bon / p) was multiplied out: 0 · log 0 is NaN where P_bon = 0 (p = 0, or F(i)^n underflowed)")
def discrete_nan(probs, n):
    return _discrete(probs, n, where=False)


@part11("best_of_n_kl_discrete", "kl_reversed", "KL(base ‖ best-of-n) was computed instead of KL(best-of-n ‖ base)")
def discrete_reverse_kl(probs, n):
    return _discrete(probs, n, reversed_kl=True)


@part11("best_of_n_kl_discrete", "exact_sum_required",
        "the probabilities had to sum to exactly 1: float32 probabilities that sum to 1 within rounding were refused")
def discrete_exact_sum(probs, n):
    return _discrete(probs, n, exact_sum=True)


@part11("best_of_n_kl_discrete", "nan_passes_the_checks",
        "a NaN probability passed the checks (NaN < 0 and |NaN − 1| > tol are both False)")
def discrete_nan_passes(probs, n):
    return _discrete(probs, n, nan_check=False)


@part11("best_of_n_kl_discrete", "probs_not_checked", "negative probabilities or a sum far from 1 were accepted")
def discrete_unchecked(probs, n):
    _check_int(n)
    return _discrete(probs, n, check=False)


@part11("best_of_n_kl_discrete", "sum_checked_with_isclose_defaults",
        "the sum was checked with torch.isclose's default tolerances (rtol 1e-5: a sum 1e-5 from 1 passes), not 1e-6")
def discrete_isclose_sum(probs, n):
    _check_int(n)
    p = probs.detach().double()
    if bool(torch.isnan(p).any()) or bool((p < 0).any()) or not bool(torch.isclose(p.sum(), p.new_ones(()))):
        raise ValueError("probs")
    return _discrete(probs, n, check=False)


@part11("best_of_n_kl_discrete", "normalised_in_place",
        "probs were divided by their sum in place (p = probs.double(); p /= p.sum(): for float64 probs, p is the "
        "caller's tensor)")
def discrete_normalised_in_place(probs, n):
    _discrete(probs, n)                    # the checks
    p = probs.detach().double()
    p /= p.sum()
    return _discrete(p, n, check=False)


@part11("best_of_n_kl_discrete", "n_1_shortcut_before_the_checks",
        "0.0 was returned for n = 1 before probs were checked: bad probabilities got an answer at n = 1")
def discrete_n1_shortcut(probs, n):
    if n == 1 and not isinstance(n, bool):
        return 0.0
    return _discrete(probs, n)


@part11("best_of_n_kl_discrete", "one_outcome_shortcut_before_the_checks",
        "0.0 was returned for a single outcome (probs.numel() == 1) before probs were checked: [0.5] got an answer")
def discrete_one_outcome_shortcut(probs, n):
    _check_int(n)
    if probs.numel() == 1:
        return 0.0
    return _discrete(probs, n)


@part11("best_of_n_kl_discrete", "sum_read_from_the_last_cdf",
        "the sum was read as the last entry of the CDF (cdf[-1]): empty probs raised IndexError, not ValueError")
def discrete_sum_from_cdf(probs, n):
    _check_int(n)
    p = probs.detach().double()
    if bool(torch.isnan(p).any()) or bool((p < 0).any()):
        raise ValueError("probs")
    cdf = torch.cumsum(p, 0)
    if abs(float(cdf[-1]) - 1.0) > 1e-6:
        raise ValueError("sum")
    return _discrete(probs, n, check=False)


# --- best_of_n_gold ------------------------------------------------------------------------------

def _gold_checked(proxy, gold, n):
    if proxy.dim() != 1 or proxy.shape != gold.shape:
        raise ValueError("shapes")
    _check_int(n)
    if n > proxy.shape[0]:
        raise ValueError("n > N")


def _tie_gold(proxy, gold):
    values, group = torch.unique(proxy, sorted=True, return_inverse=True)
    total = torch.zeros_like(values).index_add_(0, group, gold)
    count = torch.zeros_like(values).index_add_(0, group, torch.ones_like(gold))
    return (total / count)[group]


def _ranked(proxy, gold, *, ties=True, descending=False):
    p, g = proxy.detach().double(), gold.detach().double()
    if ties:
        g = _tie_gold(p, g)
    order = torch.sort(p, stable=True, descending=descending).indices
    return g[order]


def _log_weights(big_n, n, shift=0):
    i = torch.arange(1, big_n + 1, dtype=torch.float64) + shift
    log_c = torch.lgamma(i) - math.lgamma(n) - torch.lgamma((i - n + 1).clamp(min=1))
    log_total = math.lgamma(big_n + 1) - math.lgamma(n + 1) - math.lgamma(big_n - n + 1)
    return torch.where(i >= n, torch.exp(log_c - log_total), torch.zeros_like(i))


@part11("best_of_n_gold", "ties_by_index",
        "tied proxy scores were left in the order a stable sort keeps (by index), not averaged over the tie")
def gold_ties_by_index(proxy, gold, n):
    _gold_checked(proxy, gold, n)
    return float((_log_weights(proxy.shape[0], n) * _ranked(proxy, gold, ties=False)).sum())


@part11("best_of_n_gold", "descending_sort", "the samples were sorted by proxy descending: the estimate of worst-of-n")
def gold_descending(proxy, gold, n):
    _gold_checked(proxy, gold, n)
    return float((_log_weights(proxy.shape[0], n) * _ranked(proxy, gold, descending=True)).sum())


@part11("best_of_n_gold", "weights_off_by_one", "the weights C(i, n − 1)/C(N, n) were used: one rank off (1-based i)")
def gold_off_by_one(proxy, gold, n):
    _gold_checked(proxy, gold, n)
    big_n = proxy.shape[0]
    total = math.comb(big_n, n)
    w = torch.tensor([math.comb(i, n - 1) / total for i in range(1, big_n + 1)], dtype=torch.float64)
    return float((w * _ranked(proxy, gold)).sum())


@part11("best_of_n_gold", "weights_c_i_n", "the weights C(i, n)/C(N, n) were used (they do not even sum to 1)")
def gold_c_i_n(proxy, gold, n):
    _gold_checked(proxy, gold, n)
    big_n = proxy.shape[0]
    total = math.comb(big_n, n)
    w = torch.tensor([math.comb(i, n) / total for i in range(1, big_n + 1)], dtype=torch.float64)
    return float((w * _ranked(proxy, gold)).sum())


@part11("best_of_n_gold", "float_binomials",
        "the binomials were converted to float before dividing, which overflows for N in the thousands "
        "(float(math.comb(3000, 1500)) raises)")
def gold_float_binomials(proxy, gold, n):
    _gold_checked(proxy, gold, n)
    big_n = proxy.shape[0]
    total = float(math.comb(big_n, n))
    w = torch.tensor([float(math.comb(i - 1, n - 1)) / total for i in range(1, big_n + 1)], dtype=torch.float64)
    return float((w * _ranked(proxy, gold)).sum())


@part11("best_of_n_gold", "with_replacement",
        "the draws were taken with replacement: weights (i/N)^n − ((i − 1)/N)^n instead of C(i − 1, n − 1)/C(N, n)")
def gold_with_replacement(proxy, gold, n):
    _gold_checked(proxy, gold, n)
    big_n = proxy.shape[0]
    i = torch.arange(1, big_n + 1, dtype=torch.float64)
    w = (i / big_n) ** n - ((i - 1) / big_n) ** n
    return float((w * _ranked(proxy, gold)).sum())


@part11("best_of_n_gold", "ratios_from_the_bottom_underflow",
        "the product of ratios started from w_n = 1/C(N, n) and went up: 1/C(3000, 1500) underflows to 0 and every "
        "weight with it")
def gold_ratios_upwards(proxy, gold, n):
    _gold_checked(proxy, gold, n)
    big_n = proxy.shape[0]
    w = 1.0
    for i in range(n + 1, big_n + 1):   # 1/C(N, n) = Π (i − n)/i over i = n + 1 … N, in floats
        w *= (i - n) / i
    weights = [0.0] * big_n
    for i in range(n, big_n + 1):       # w_i = C(i − 1, n − 1) · w, the binomial grown by ratios
        weights[i - 1] = w
        w *= i / (i - n + 1)
    return float((torch.tensor(weights, dtype=torch.float64) * _ranked(proxy, gold)).sum())


@part11("best_of_n_gold", "mean_of_ranks_n_and_above",
        "the plain mean of the gold over the ranks i ≥ n was taken (every possible pick weighted alike)")
def gold_plain_mean(proxy, gold, n):
    _gold_checked(proxy, gold, n)
    return float(_ranked(proxy, gold)[n - 1:].mean())


@part11("best_of_n_gold", "mean_of_top_n", "the mean gold of the n samples the proxy scores highest was returned")
def gold_top_n(proxy, gold, n):
    _gold_checked(proxy, gold, n)
    return float(_ranked(proxy, gold)[-n:].mean())


@part11("best_of_n_gold", "float32_arithmetic", "the estimate was computed in float32 (the inputs' dtype), not float64")
def gold_float32(proxy, gold, n):
    _gold_checked(proxy, gold, n)
    w = _log_weights(proxy.shape[0], n).float()
    return float((w * _ranked(proxy, gold).float()).sum())


@part11("best_of_n_gold", "ties_averaged_in_place",
        "the tied samples' gold was averaged by writing into gold.double() (for float64 gold, the caller's tensor)")
def gold_ties_in_place(proxy, gold, n):
    _gold_checked(proxy, gold, n)
    p, g = proxy.detach().double(), gold.detach().double()
    g.copy_(_tie_gold(p, g))               # the averages written back into g
    return float((_log_weights(proxy.shape[0], n) * g[torch.argsort(p)]).sum())


@part11("best_of_n_gold", "n_not_checked", "n outside 1 … N (or a bool or float n) was not refused with a ValueError")
def gold_n_unchecked(proxy, gold, n):
    if proxy.dim() != 1 or proxy.shape != gold.shape:
        raise ValueError("shapes")
    big_n, n = proxy.shape[0], min(max(int(n), 1), proxy.shape[0])
    return float((_log_weights(big_n, n) * _ranked(proxy, gold)).sum())


@part11("best_of_n_gold", "shapes_not_checked",
        "inputs of different lengths or more than one dimension were not refused with a ValueError")
def gold_shapes_unchecked(proxy, gold, n):
    _check_int(n)
    p, g = proxy.reshape(-1), gold.reshape(-1)
    size = min(p.shape[0], g.shape[0])
    p, g = p[:size], g[:size]
    if n > size:
        raise ValueError("n > N")
    return float((_log_weights(size, n) * _ranked(p, g)).sum())


@part11("best_of_n_gold", "zero_d_accepted", "only inputs of two or more dimensions were refused: a 0-D score was taken "
        "as a pool of one")
def gold_zero_d(proxy, gold, n):
    if proxy.dim() > 1 or gold.dim() > 1 or proxy.numel() != gold.numel():
        raise ValueError("shapes")
    p, g = proxy.reshape(-1), gold.reshape(-1)
    _check_int(n)
    if n > p.shape[0]:
        raise ValueError("n > N")
    return float((_log_weights(p.shape[0], n) * _ranked(p, g)).sum())


@part11("best_of_n_gold", "ties_within_a_tolerance",
        "proxy scores equal once rounded (to 9 decimals) were treated as tied: a tie is an equal score")
def gold_rounded_ties(proxy, gold, n):
    _gold_checked(proxy, gold, n)
    rounded = torch.round(proxy.detach().double(), decimals=9)
    return float((_log_weights(proxy.shape[0], n) * _ranked(rounded, gold)).sum())


@part11("best_of_n_gold", "tie_means_in_input_dtype",
        "the tie groups' gold was summed in the inputs' dtype (torch.zeros_like(values).index_add_(0, group, gold)): "
        "float32 sums of ~200 golds are off in the 7th digit, and a float32 proxy beside float64 gold raises")
def gold_tie_means_input_dtype(proxy, gold, n):
    _gold_checked(proxy, gold, n)
    values, group = torch.unique(proxy.detach(), sorted=True, return_inverse=True)
    total = torch.zeros_like(values).index_add_(0, group, gold.detach())
    count = torch.zeros_like(values).index_add_(0, group, torch.ones_like(gold.detach()))
    tie_gold = (total / count)[group].double()
    order = torch.argsort(proxy.detach().double())
    return float((_log_weights(proxy.shape[0], n) * tie_gold[order]).sum())


@part11("best_of_n_gold", "numpy_without_a_cast",
        "the inputs went to numpy as they were (proxy.numpy(), then astype(float64)): numpy has no bfloat16, so "
        "bfloat16 inputs raised")
def gold_numpy_uncast(proxy, gold, n):
    _gold_checked(proxy, gold, n)
    p = proxy.detach().numpy().astype(np.float64)
    g = gold.detach().numpy().astype(np.float64)
    return float((_log_weights(p.size, n) * _ranked(torch.from_numpy(p), torch.from_numpy(g))).sum())


# --- fit_gao -------------------------------------------------------------------------------------

def _fit(d, r, form, *, second=None, intercept=False, drop_zero=False, beta_sign=-1.0, r2_uncentred=False,
         checks=("form", "finite", "negative", "distinct"), nan_r2=True):
    if "form" in checks and form not in ("bon", "rl"):
        raise ValueError(form)
    d, r = d.detach().double(), r.detach().double()
    if "finite" in checks and not (bool(torch.isfinite(d).all()) and bool(torch.isfinite(r).all())):
        raise ValueError("finite")
    if "negative" in checks and bool((d < 0).any()):
        raise ValueError("negative")
    if "distinct" in checks and torch.unique(d[d > 0]).numel() < 2:
        raise ValueError("distinct")
    if "count" in checks and int((d > 0).sum()) < 2:
        raise ValueError("count")
    keep = d > 0 if drop_zero else torch.ones_like(d, dtype=torch.bool)
    dd, rr = d[keep], r[keep]
    if second is None:
        second = "bon" if form == "bon" else "rl_safe"
    if second == "bon":
        x2 = dd * dd
    elif second == "rl_nan":
        x2 = dd * torch.log(dd)
    elif second == "rl_epsilon":
        x2 = dd * torch.log(dd + 1e-12)
    else:
        x2 = torch.where(dd > 0, dd * torch.log(torch.where(dd > 0, dd, 1.0)), torch.zeros_like(dd))
    cols = [dd, beta_sign * x2] + ([torch.ones_like(dd)] if intercept else [])
    design = torch.stack(cols, dim=1)
    sol = torch.linalg.lstsq(design, rr[:, None]).solution[:, 0]
    resid = rr - design @ sol
    tot = rr if r2_uncentred else rr - rr.mean()
    ss_res, ss_tot = float(resid @ resid), float(tot @ tot)
    if nan_r2 and bool(rr.max() == rr.min()):
        r2 = math.nan
    else:
        r2 = 1.0 - ss_res / ss_tot if ss_tot != 0 else -math.inf
    return float(sol[0]), float(sol[1]), r2


@part11("fit_gao", "zero_times_log_zero",
        "d · log d was computed as is: at d = 0 it is 0 · (−inf) = NaN, and one NaN row makes the whole fit NaN")
def fit_nan_at_zero(d, r, form):
    return _fit(d, r, form, second="bon" if form == "bon" else "rl_nan")


@part11("fit_gao", "zero_points_dropped", "the points at d = 0 were dropped before the fit: R² no longer counts them")
def fit_drop_zero(d, r, form):
    return _fit(d, r, form, drop_zero=True)


@part11("fit_gao", "with_intercept", "an intercept column was added: Gao's forms pass through R(0) = 0")
def fit_intercept(d, r, form):
    return _fit(d, r, form, intercept=True)


@part11("fit_gao", "log_d_for_bon", "the rl column d·log d was used for the bon form too")
def fit_log_for_bon(d, r, form):
    return _fit(d, r, form, second="rl_safe")


@part11("fit_gao", "d_squared_for_rl", "the bon column d² was used for the rl form too")
def fit_square_for_rl(d, r, form):
    return _fit(d, r, form, second="bon")


@part11("fit_gao", "beta_sign_flipped", "R = α·d + β·(second column) was fitted: β comes out with the wrong sign")
def fit_beta_sign(d, r, form):
    return _fit(d, r, form, beta_sign=1.0)


@part11("fit_gao", "fit_r_over_d", "r/d = α − β·x was fitted against d (a line): least squares of r/d, "
        "another weighting than least squares of r (and d = 0 divides by zero)")
def fit_divided(d, r, form):
    alpha, beta, _ = _fit(d, r, form)            # the checks and R²'s shape
    d64, r64 = d.detach().double(), r.detach().double()
    pos = d64 > 0
    x = d64[pos] if form == "bon" else torch.log(d64[pos])
    design = torch.stack([torch.ones_like(x), -x], dim=1)
    sol = torch.linalg.lstsq(design, (r64[pos] / d64[pos])[:, None]).solution[:, 0]
    a, b = float(sol[0]), float(sol[1])
    second = d64 * d64 if form == "bon" else torch.where(pos, d64 * torch.log(torch.where(pos, d64, 1.0)), 0.0)
    resid = r64 - (a * d64 - b * second)
    if bool(r64.max() == r64.min()):
        return a, b, math.nan
    return a, b, 1.0 - float(resid @ resid) / float(((r64 - r64.mean()) ** 2).sum())


@part11("fit_gao", "r2_uncentred", "R² was 1 − SS_res / Σ r², not centred on the mean of r")
def fit_r2_uncentred(d, r, form):
    return _fit(d, r, form, r2_uncentred=True)


@part11("fit_gao", "r2_of_constant_r", "R² of r that never varies came out of a division by a (near) zero SS_tot, not NaN")
def fit_r2_constant(d, r, form):
    return _fit(d, r, form, nan_r2=False)


@part11("fit_gao", "r2_nan_only_when_ss_tot_is_0",
        "R² was NaN only when Σ(r − mean r)² came out exactly 0, which rounding escapes (seven 0.1s give 1.3e-33)")
def fit_r2_ss_tot_zero(d, r, form):
    alpha, beta, _ = _fit(d, r, form, nan_r2=False)
    d64, r64 = d.detach().double(), r.detach().double()
    second = d64 * d64 if form == "bon" else torch.where(d64 > 0, d64 * torch.log(torch.where(d64 > 0, d64, 1.0)), 0.0)
    resid = r64 - (alpha * d64 - beta * second)
    ss_tot = float(((r64 - r64.mean()) ** 2).sum())
    return alpha, beta, math.nan if ss_tot == 0 else 1.0 - float(resid @ resid) / ss_tot


@part11("fit_gao", "r2_nan_below_a_threshold",
        "R² was NaN whenever Σ(r − mean r)² was below a tolerance (1e-12): r that varies on a small scale has an R² too")
def fit_r2_threshold(d, r, form):
    alpha, beta, r2 = _fit(d, r, form, nan_r2=False)
    r64 = r.detach().double()
    return alpha, beta, math.nan if float(((r64 - r64.mean()) ** 2).sum()) < 1e-12 else r2


@part11("fit_gao", "d_clamped_in_place",
        "d was clamped away from 0 in place (d64 = d.double(); d64.clamp_(min=1e-300): for float64 d, the caller's "
        "tensor)")
def fit_clamped_in_place(d, r, form):
    d64 = d.detach().double()
    _fit(d64, r, form)                     # the checks, before the clamp
    d64.clamp_(min=1e-300)
    return _fit(d64, r, form, second="bon" if form == "bon" else "rl_nan")


@part11("fit_gao", "non_finite_accepted", "a NaN or infinite d or r was not refused with a ValueError")
def fit_non_finite(d, r, form):
    return _fit(d, r, form, checks=("form", "negative", "distinct"))


@part11("fit_gao", "infinite_d_accepted", "d was checked for NaN only: an infinite d was not refused (r was checked)")
def fit_infinite_d(d, r, form):
    if bool(torch.isnan(d).any()) or not bool(torch.isfinite(r).all()):
        raise ValueError("finite")
    return _fit(d, r, form, checks=("form", "negative", "distinct"))


@part11("fit_gao", "negative_d_accepted", "a negative d was not refused with a ValueError")
def fit_negative(d, r, form):
    return _fit(d, r, form, checks=("form", "finite", "distinct"))


@part11("fit_gao", "points_not_distinct",
        "two points with d > 0 were enough even at one value of d (α and β cannot be told apart then)")
def fit_count_only(d, r, form):
    return _fit(d, r, form, checks=("form", "finite", "negative", "count"))


@part11("fit_gao", "unknown_form_is_rl", "any form other than 'bon' was fitted as 'rl' instead of refused")
def fit_any_form(d, r, form):
    return _fit(d, r, "bon" if form == "bon" else "rl", checks=("finite", "negative", "distinct"))


@part11("fit_gao", "log_of_d_plus_epsilon",
        "d · log(d + 1e-12) was used to avoid 0 · log 0: every point with d near 1e-12 or below moves (at d ~ 1e-9 "
        "α is off by 0.2 %)")
def fit_log_epsilon(d, r, form):
    if form == "bon":
        return _fit(d, r, form)
    return _fit(d, r, form, second="rl_epsilon")


@part11("fit_gao", "distinct_by_isclose",
        "the d were called distinct only when not torch.isclose (atol 1e-8): d = 1e-9, 2e-9, … were refused as one "
        "value")
def fit_distinct_isclose(d, r, form):
    d64 = d.detach().double()
    positive = d64[d64 > 0]
    if positive.numel() == 0 or bool(torch.isclose(positive, positive[0]).all()):
        raise ValueError("need two distinct d > 0")
    return _fit(d, r, form)


@part11("fit_gao", "constant_r_by_isclose",
        "every r was called the same when math.isclose(r.max(), r.min()) (relative 1e-9): r = 1000 + 1e-8·noise "
        "varies, and got R² = NaN")
def fit_constant_isclose(d, r, form):
    alpha, beta, r2 = _fit(d, r, form)
    r64 = r.detach().double()
    return alpha, beta, math.nan if math.isclose(float(r64.max()), float(r64.min())) else r2


# --- gao_peak ------------------------------------------------------------------------------------

def _peak_checked(alpha, beta, form):
    if form not in ("bon", "rl") or not (math.isfinite(alpha) and math.isfinite(beta)):
        raise ValueError((alpha, beta, form))


def _no_turn(alpha, beta):
    """The reference's answer for β ≤ 0: inf, except β = 0 with α < 0 (R = αd falls from the start): 0.0."""
    return 0.0 if beta == 0 and alpha < 0 else math.inf


def _exp_or_inf(x):
    """e^x, and inf past the largest float (the reference's overflow rule: each mistake below differs in one way)."""
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf


def _peak(alpha, beta, form):
    """The reference's peak: checked, β ≤ 0 → inf (β = 0 with α < 0 → 0.0), bon's max(α/2β, 0), rl's e^(α/β − 1)."""
    _peak_checked(alpha, beta, form)
    if beta <= 0:
        return _no_turn(alpha, beta)
    return max(alpha / (2 * beta), 0.0) if form == "bon" else _exp_or_inf(alpha / beta - 1)


@part11("gao_peak", "bon_missing_two", "α/β was returned for bon: the 2 from differentiating βd² was lost")
def peak_no_two(alpha, beta, form):
    _peak_checked(alpha, beta, form)
    if beta <= 0:
        return _no_turn(alpha, beta)
    return max(alpha / beta, 0.0) if form == "bon" else _exp_or_inf(alpha / beta - 1)


@part11("gao_peak", "precedence", "alpha / 2 * beta was written for α/(2β): Python reads it as (α/2)·β")
def peak_precedence(alpha, beta, form):
    _peak_checked(alpha, beta, form)
    if beta <= 0:
        return _no_turn(alpha, beta)
    if form == "bon":
        return max(alpha / 2 * beta, 0.0)
    x = alpha / beta - 1
    return _exp_or_inf(x)


@part11("gao_peak", "rl_missing_minus_one", "exp(α/β) was returned for rl: the −1 from differentiating d·log d was lost")
def peak_no_minus_one(alpha, beta, form):
    _peak_checked(alpha, beta, form)
    if beta <= 0:
        return _no_turn(alpha, beta)
    return max(alpha / (2 * beta), 0.0) if form == "bon" else _exp_or_inf(alpha / beta)


@part11("gao_peak", "math_exp_overflows", "math.exp(α/β − 1) raised OverflowError for a tiny β instead of giving inf")
def peak_overflow(alpha, beta, form):
    _peak_checked(alpha, beta, form)
    if beta <= 0:
        return _no_turn(alpha, beta)
    return max(alpha / (2 * beta), 0.0) if form == "bon" else math.exp(alpha / beta - 1)


@part11("gao_peak", "beta_not_checked", "β ≤ 0 was divided by (a negative or ZeroDivisionError peak) instead of giving inf")
def peak_beta_unchecked(alpha, beta, form):
    _peak_checked(alpha, beta, form)
    if form == "bon":
        return max(alpha / (2 * beta), 0.0)
    x = alpha / beta - 1
    return _exp_or_inf(x)


@part11("gao_peak", "bon_negative_peak", "a negative α gave a negative d for bon, not 0 (the best d ≥ 0)")
def peak_negative(alpha, beta, form):
    _peak_checked(alpha, beta, form)
    if beta <= 0:
        return _no_turn(alpha, beta)
    if form == "bon":
        return alpha / (2 * beta)
    x = alpha / beta - 1
    return _exp_or_inf(x)


@part11("gao_peak", "beta_zero_falling_called_endless",
        "β = 0 with α < 0 was answered inf: R = αd falls from d = 0, so the best d is 0.0 (only β < 0, or β = 0 "
        "with α ≥ 0, never turns down)")
def peak_beta_zero_inf(alpha, beta, form):
    _peak_checked(alpha, beta, form)
    if beta <= 0:
        return math.inf
    return max(alpha / (2 * beta), 0.0) if form == "bon" else _exp_or_inf(alpha / beta - 1)


@part11("gao_peak", "forms_swapped", "the bon and rl peaks were swapped")
def peak_swapped(alpha, beta, form):
    _peak_checked(alpha, beta, form)
    if beta <= 0:
        return _no_turn(alpha, beta)
    if form == "rl":
        return max(alpha / (2 * beta), 0.0)
    x = alpha / beta - 1
    return _exp_or_inf(x)


@part11("gao_peak", "overflow_cut_at_709",
        "the rl peak was called infinite from α/β − 1 ≥ 709 on, though e^709.5 is still a float (the largest is "
        "about e^709.78)")
def peak_cut_at_709(alpha, beta, form):
    return _peak_cut(alpha, beta, form, lambda x: x >= 709)


def _peak_cut(alpha, beta, form, too_big):
    """The reference's peak, but the rl peak called infinite wherever ``too_big(α/β − 1)``."""
    _peak_checked(alpha, beta, form)
    if beta <= 0:
        return _no_turn(alpha, beta)
    if form == "bon":
        return max(alpha / (2 * beta), 0.0)
    x = alpha / beta - 1
    return math.inf if too_big(x) else math.exp(x)


@part11("gao_peak", "exp_over_e_overflows_early",
        "exp(α/β)/e was computed: exp(α/β) overflows one unit of α/β before the peak itself does")
def peak_exp_over_e(alpha, beta, form):
    _peak_checked(alpha, beta, form)
    if beta <= 0:
        return _no_turn(alpha, beta)
    if form == "bon":
        return max(alpha / (2 * beta), 0.0)
    try:
        return math.exp(alpha / beta) / math.e
    except OverflowError:
        return math.inf


@part11("gao_peak", "alpha_rule_before_beta_rule",
        "bon's 'α ≤ 0 gives 0' came before 'β ≤ 0 gives inf': with α < 0 and β < 0 the gold dips, then grows "
        "without bound")
def peak_alpha_first(alpha, beta, form):
    _peak_checked(alpha, beta, form)
    if form == "bon" and alpha <= 0:
        return 0.0
    if beta <= 0:
        return _no_turn(alpha, beta)
    if form == "bon":
        return alpha / (2 * beta)
    x = alpha / beta - 1
    return _exp_or_inf(x)


@part11("gao_peak", "inf_before_the_form_check", "β ≤ 0 answered inf before the form was checked")
def peak_inf_before_form(alpha, beta, form):
    if beta <= 0:
        return _no_turn(alpha, beta)
    return _peak(alpha, beta, form)


@part11("gao_peak", "inf_before_the_finite_check",
        "β ≤ 0 answered inf before α and β were checked finite (a NaN α, or β = −inf, got inf)")
def peak_inf_before_finite(alpha, beta, form):
    if form not in ("bon", "rl"):
        raise ValueError(form)
    if beta <= 0:
        return _no_turn(alpha, beta)
    return _peak(alpha, beta, form)


@part11("gao_peak", "zero_before_the_finite_check",
        "bon's α ≤ 0 answered 0.0 before α was checked finite (α = −inf got 0.0)")
def peak_zero_before_finite(alpha, beta, form):
    if form not in ("bon", "rl"):
        raise ValueError(form)
    if form == "bon" and alpha <= 0 and beta > 0:
        return 0.0
    return _peak(alpha, beta, form)


@part11("gao_peak", "bad_arguments_accepted", "an unknown form or a NaN/infinite α or β was answered instead of refused")
def peak_unchecked(alpha, beta, form):
    if not beta > 0:
        return _no_turn(alpha, beta)
    if form == "bon":
        return max(alpha / (2 * beta), 0.0)
    x = alpha / beta - 1
    return _exp_or_inf(x)


@part11("gao_peak", "tiny_beta_taken_as_zero",
        "a |β| below 1e-12 was taken as β = 0: β = 1e-13 is positive (α = 1 peaks at 5e12 for bon), −1e-13 negative")
def peak_tiny_beta(alpha, beta, form):
    _peak_checked(alpha, beta, form)
    if abs(beta) < 1e-12:
        beta = 0.0
    return _peak(alpha, beta, form)


@part11("gao_peak", "overflow_cut_at_709_7",
        "the rl peak was called infinite from α/β − 1 > 709.7 on, though e^709.75 = 1.74e308 is still a float (the "
        "largest is about e^709.78)")
def peak_cut_at_709_7(alpha, beta, form):
    return _peak_cut(alpha, beta, form, lambda x: x > 709.7)


@part11("gao_peak", "rl_peak_floored",
        "the rl peak was kept above a floor (max(exp(α/β − 1), 1e-300)): a peak below the smallest float comes out "
        "0.0, and e^−701 = 3.6e-305 is a peak too")
def peak_floored(alpha, beta, form):
    peak = _peak(alpha, beta, form)
    return max(peak, 1e-300) if form == "rl" and beta > 0 else peak


# --- standardise_proxies -------------------------------------------------------------------------

def _standardise(scores, reference, *, stats_of="reference", unbiased=False, scope="row", check="exact", shift=True,
                 divide="std"):
    if check == "exact" and (reference.shape[1] == 0 or bool((reference.amax(1) == reference.amin(1)).any())):
        raise ValueError("constant reference")
    source = scores if stats_of == "batch" else reference
    if scope == "row":
        mean = source.mean(dim=1, keepdim=True)
        std = source.std(dim=1, unbiased=unbiased, keepdim=True)
    else:
        mean, std = source.mean(), source.std(unbiased=unbiased)
    if check == "std_zero":
        # The learner's own two-pass std, then "std == 0": the mean of seven float32 0.1s is not 0.1, so it is 7.5e-9.
        std = ((source - source.mean(dim=1, keepdim=True)) ** 2).mean(dim=1, keepdim=True).sqrt()
        if bool((std == 0).any()):
            raise ValueError("std = 0")
    spread = std if divide == "std" else std**2
    return ((scores - mean) if shift else scores) / spread


@part11("standardise_proxies", "batch_statistics",
        "the batch's own mean and std were used instead of the proxy's reference statistics")
def std_batch(scores, reference):
    return _standardise(scores, reference, stats_of="batch")


@part11("standardise_proxies", "sample_std", "the sample std (torch.std's default, ÷ (n − 1)) was used, not the population std")
def std_sample(scores, reference):
    return _standardise(scores, reference, unbiased=True)


@part11("standardise_proxies", "one_mean_for_all_proxies",
        "one mean and one std over every proxy together were used: the proxies keep their own scales")
def std_global(scores, reference):
    return _standardise(scores, reference, scope="all")


@part11("standardise_proxies", "zero_std_compared_to_0",
        "a constant reference was detected by std == 0, which rounding escapes (seven float32 0.1s: √(mean((x − mean)²)) "
        "is 7.5e-9)")
def std_equality(scores, reference):
    return _standardise(scores, reference, check="std_zero")


@part11("standardise_proxies", "constant_by_isclose",
        "a constant reference was detected by torch.isclose(std, 0), whose atol of 1e-8 also refuses a proxy that "
        "varies on a small scale")
def std_isclose(scores, reference):
    if reference.shape[1] == 0:
        raise ValueError("no reference scores")
    std = reference.std(dim=1, unbiased=False, keepdim=True)
    if bool(torch.isclose(std, torch.zeros_like(std)).any()):
        raise ValueError("std = 0")
    return (scores - reference.mean(dim=1, keepdim=True)) / std


@part11("standardise_proxies", "standardised_in_place",
        "the scores were standardised in place in float64 (s = scores.double(); s -= mean; s /= std: for float64 "
        "scores, s is the caller's tensor)")
def std_in_place(scores, reference):
    _standardise(scores, reference)        # the checks
    s, ref = scores.double(), reference.double()
    s -= ref.mean(dim=1, keepdim=True)
    s /= ref.std(dim=1, unbiased=False, keepdim=True)
    return s.to(scores.dtype)


@part11("standardise_proxies", "zero_std_not_checked", "a reference whose scores never vary was divided by 0, not refused")
def std_unchecked(scores, reference):
    return _standardise(scores, reference, check="none")


@part11("standardise_proxies", "scaled_not_shifted", "the scores were divided by the std but the mean was not subtracted")
def std_no_shift(scores, reference):
    return _standardise(scores, reference, shift=False)


@part11("standardise_proxies", "divided_by_variance", "the scores were divided by the variance, not the standard deviation")
def std_variance(scores, reference):
    return _standardise(scores, reference, divide="var")


@part11("standardise_proxies", "dtype_promoted", "(scores − mean) / std was returned as computed: float32 scores less a "
        "float64 reference's statistics come out float64, not the scores' dtype")
def std_promoted(scores, reference):
    return _standardise(scores, reference)


@part11("standardise_proxies", "std_clamped",
        "the std was clamped away from 0 (std.clamp(min=1e-12)) besides the exact check: a proxy whose spread is "
        "1e-13 comes out 10× too small")
def std_clamped(scores, reference):
    _standardise(scores, reference)        # the checks
    mean = reference.mean(dim=1, keepdim=True)
    std = reference.std(dim=1, unbiased=False, keepdim=True)
    return ((scores - mean) / std.clamp(min=1e-12)).to(scores.dtype)


@part11("standardise_proxies", "scores_detached",
        "the scores were standardised without a gradient (in numpy, or detached): standardising before "
        "ensemble_reward cuts the gradient it promises")
def std_detached(scores, reference):
    return _standardise(scores.detach(), reference.detach()).to(scores.dtype)


# --- ensemble_reward -----------------------------------------------------------------------------

def _ensemble_checked(scores, method, uwo_lambda):
    if method not in ("mean", "wco", "uwo") or scores.shape[0] < 1:
        raise ValueError(method)
    if method == "uwo" and not uwo_lambda >= 0:
        raise ValueError(uwo_lambda)


@part11("ensemble_reward", "wco_is_max", "WCO took the max over members: the most optimistic proxy, not the worst case")
def ens_max(scores, method, uwo_lambda=0.5):
    _ensemble_checked(scores, method, uwo_lambda)
    if method == "wco":
        return scores.amax(dim=0)
    return scores.mean(0) if method == "mean" else scores.mean(0) - uwo_lambda * scores.var(0, unbiased=False)


@part11("ensemble_reward", "uwo_sample_variance",
        "UWO used the sample variance (torch.var's default, ÷ (k − 1)), not the population variance: NaN for one member")
def ens_sample_var(scores, method, uwo_lambda=0.5):
    _ensemble_checked(scores, method, uwo_lambda)
    if method == "uwo":
        return scores.mean(0) - uwo_lambda * scores.var(0)
    return scores.mean(0) if method == "mean" else scores.amin(0)


@part11("ensemble_reward", "uwo_std", "UWO subtracted λ times the standard deviation, not the variance")
def ens_std(scores, method, uwo_lambda=0.5):
    _ensemble_checked(scores, method, uwo_lambda)
    if method == "uwo":
        return scores.mean(0) - uwo_lambda * scores.std(0, unbiased=False)
    return scores.mean(0) if method == "mean" else scores.amin(0)


@part11("ensemble_reward", "uwo_plus", "UWO added λ·variance: disagreement was rewarded instead of penalised")
def ens_plus(scores, method, uwo_lambda=0.5):
    _ensemble_checked(scores, method, uwo_lambda)
    if method == "uwo":
        return scores.mean(0) + uwo_lambda * scores.var(0, unbiased=False)
    return scores.mean(0) if method == "mean" else scores.amin(0)


@part11("ensemble_reward", "lambda_ignored", "UWO used λ = 0.5 whatever uwo_lambda was")
def ens_fixed_lambda(scores, method, uwo_lambda=0.5):
    _ensemble_checked(scores, method, uwo_lambda)
    if method == "uwo":
        return scores.mean(0) - 0.5 * scores.var(0, unbiased=False)
    return scores.mean(0) if method == "mean" else scores.amin(0)


@part11("ensemble_reward", "standardised_again_by_batch",
        "the scores were standardised again inside, with the batch's own mean and std")
def ens_restandardised(scores, method, uwo_lambda=0.5):
    _ensemble_checked(scores, method, uwo_lambda)
    scores = (scores - scores.mean(1, keepdim=True)) / scores.std(1, keepdim=True, unbiased=False).clamp(min=1e-8)
    if method == "uwo":
        return scores.mean(0) - uwo_lambda * scores.var(0, unbiased=False)
    return scores.mean(0) if method == "mean" else scores.amin(0)


@part11("ensemble_reward", "detached", "the ensemble was computed without a gradient (detach / no_grad / .data)")
def ens_detached(scores, method, uwo_lambda=0.5):
    _ensemble_checked(scores, method, uwo_lambda)
    s = scores.detach()
    if method == "uwo":
        return s.mean(0) - uwo_lambda * s.var(0, unbiased=False)
    return s.mean(0) if method == "mean" else s.amin(0)


@part11("ensemble_reward", "variance_detached",
        "UWO's variance penalty was detached: the gradient reaches the members through the mean only")
def ens_var_detached(scores, method, uwo_lambda=0.5):
    _ensemble_checked(scores, method, uwo_lambda)
    if method == "uwo":
        return scores.mean(0) - uwo_lambda * scores.detach().var(0, unbiased=False)
    return scores.mean(0) if method == "mean" else scores.amin(0)


@part11("ensemble_reward", "lambda_not_checked", "a negative or NaN uwo_lambda was accepted")
def ens_lambda_unchecked(scores, method, uwo_lambda=0.5):
    if method not in ("mean", "wco", "uwo") or scores.shape[0] < 1:
        raise ValueError(method)
    if method == "uwo":
        return scores.mean(0) - uwo_lambda * scores.var(0, unbiased=False)
    return scores.mean(0) if method == "mean" else scores.amin(0)


@part11("ensemble_reward", "lambda_checked_for_every_method",
        "uwo_lambda was refused when negative or NaN whatever the method (the check is for 'uwo' only)")
def ens_lambda_always(scores, method, uwo_lambda=0.5):
    if not uwo_lambda >= 0:
        raise ValueError(uwo_lambda)
    _ensemble_checked(scores, method, uwo_lambda)
    if method == "uwo":
        return scores.mean(0) - uwo_lambda * scores.var(0, unbiased=False)
    return scores.mean(0) if method == "mean" else scores.amin(0)


@part11("ensemble_reward", "no_members_not_checked", "an ensemble of k = 0 members was not refused with a ValueError")
def ens_empty(scores, method, uwo_lambda=0.5):
    if method not in ("mean", "wco", "uwo") or (method == "uwo" and not uwo_lambda >= 0):
        raise ValueError(method)
    if method == "uwo":
        return scores.mean(0) - uwo_lambda * scores.var(0, unbiased=False)
    return scores.mean(0) if method == "mean" else scores.min(0).values if scores.shape[0] else scores.sum(0)


@part11("ensemble_reward", "one_member_squeezed",
        "one member's scores were returned as scores.squeeze(): with a batch of one that is a 0-D tensor, not shape "
        "(1,)")
def ens_one_squeezed(scores, method, uwo_lambda=0.5):
    _ensemble_checked(scores, method, uwo_lambda)
    if scores.shape[0] == 1:
        return scores.squeeze()
    if method == "uwo":
        return scores.mean(0) - uwo_lambda * scores.var(0, unbiased=False)
    return scores.mean(0) if method == "mean" else scores.amin(0)


@part11("ensemble_reward", "wco_softmin",
        "WCO was a smooth minimum, −τ·logsumexp(−s/τ) with τ = 1e-7: not the minimum where members are within a "
        "few τ of it (members at 1 and 1 + 1e-7 give 1 − 3.1e-8, not 1)")
def ens_softmin(scores, method, uwo_lambda=0.5):
    _ensemble_checked(scores, method, uwo_lambda)
    if method == "wco":
        tau = 1e-7
        return -tau * torch.logsumexp(-scores / tau, dim=0)
    if method == "uwo":
        return scores.mean(0) - uwo_lambda * scores.var(0, unbiased=False)
    return scores.mean(0)
