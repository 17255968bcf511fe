"""Known-wrong versions of the Part 10 exercises (see workbook/mistakes/__init__.py)."""

from __future__ import annotations

from functools import partial

import torch

from solutions import part10_async as _p10
from workbook.mistakes import mistake

part10 = partial(mistake, "part10_async")


# --- importance_weights ---------------------------------------------------------------------

def _weights(learner, sampler, mask, mode, cap, *, inverted=False, sequence_mean=False, truncate=None, masked_value=0.0,
             ties_capped=False, padding_masked=True, multiply=False, stats_all_positions=False,
             capped_frac_tokens=False, log_ratio_tokens=False, weight_mean_rows=False, detach=True, stats_nan=False,
             running_product=False, zeroed_by_multiplying=False, exp_over_exp=False, inf_cap=False, promoted=False):
    """The reference's computation with one knob per mistake (defaults: the docstring's rules)."""
    if mode not in _p10.MODES:
        raise ValueError(mode)
    if not (cap > 0 if inf_cap else 0 < cap < float("inf")):
        raise ValueError(cap)
    real = mask != 0
    m = mask.to(learner.dtype)
    lp, sp = (learner, sampler) if not detach else (learner.detach(), sampler.detach())
    ell = sp - lp if inverted else lp - sp
    if exp_over_exp:                                  # 0/0 = NaN once both log-probs are below about −104 (float32)
        ell = torch.log(torch.exp(lp) / torch.exp(sp))
    dtype = torch.result_type(learner, sampler) if promoted else learner.dtype
    ell = ell.to(dtype)
    zero = torch.zeros((), dtype=dtype)
    if multiply:
        ell = ell * m                                 # NaN · 0 = NaN on padding
    elif padding_masked:
        ell = torch.where(real, ell, zero)
    token = mode.startswith("token")
    if token:
        unit_ell, unit_real = ell, real if padding_masked else torch.ones_like(real)
        per_tok = ell
    else:
        lengths = real.sum(dim=1)
        unit_ell = ell.sum(dim=1) / (lengths.clamp(min=1) if sequence_mean else 1)
        unit_real = real.any(dim=1)
        per_tok = unit_ell[:, None].expand_as(ell)
    ratio = torch.exp(per_tok)
    if running_product and not token:                 # inf once the partial product passes float's range
        ratio = torch.exp(ell).cumprod(dim=1)[:, -1:].expand_as(ell)
    capped = ratio >= cap if ties_capped else ratio > cap
    trunc = mode.endswith("truncate") if truncate is None else truncate
    if trunc:
        w = torch.where(capped, torch.full_like(ratio, cap), ratio)
    elif zeroed_by_multiplying:                       # inf · 0 = NaN
        w = ratio * (~capped)
    else:
        w = torch.where(capped, torch.full_like(ratio, masked_value), ratio)
    if multiply:
        w = w * m
    elif padding_masked:
        w = torch.where(real, w, zero)
    tokens = real.sum() if not stats_all_positions else torch.tensor(real.numel())
    if capped_frac_tokens and not token:
        cf = (capped & real).sum().to(dtype) / real.sum().clamp(min=1)
    else:
        unit_capped = (torch.exp(unit_ell) >= cap) if ties_capped else (torch.exp(unit_ell) > cap)
        units = unit_real.sum() if not stats_all_positions else torch.tensor(unit_real.numel())
        cf = (unit_capped & (unit_real | stats_all_positions)).sum().to(dtype) / units.clamp(min=1)
    if log_ratio_tokens and not token:
        lr = torch.where(real, ell, zero).sum() / real.sum().clamp(min=1)
    else:
        units = unit_real.sum() if not stats_all_positions else torch.tensor(unit_real.numel())
        lr = torch.where(unit_real | stats_all_positions, unit_ell, zero).sum() / units.clamp(min=1)
    if weight_mean_rows and not token:
        rows = unit_real.sum().clamp(min=1)
        wm = torch.where(unit_real, w.amax(dim=1), zero).sum() / rows
    else:
        wm = w.sum() / tokens.clamp(min=1)
    stats = {"is/capped_frac": cf, "is/weight_mean": wm, "is/log_ratio_mean": lr}
    if stats_nan:
        n = real.sum().to(dtype)
        stats = {"is/capped_frac": cf * real.sum().clamp(min=1) / n if token else cf,
                 "is/weight_mean": w.sum() / n, "is/log_ratio_mean": lr}
    if detach:
        stats = {k: v.detach() for k, v in stats.items()}
    return w, stats


@part10("importance_weights", "ratio_inverted", "the ratio was sampler / learner (behaviour over target) instead of learner / sampler")
def iw_inverted(learner_logprobs, sampler_logprobs, mask, mode="sequence_mask", cap=3.0):
    return _weights(learner_logprobs, sampler_logprobs, mask, mode, cap, inverted=True)


@part10("importance_weights", "sequence_ratio_mean",
        "the sequence ratio was exp of the MEAN log-ratio (GSPO's) instead of exp of the sum (the product of the token ratios)")
def iw_sequence_mean(learner_logprobs, sampler_logprobs, mask, mode="sequence_mask", cap=3.0):
    return _weights(learner_logprobs, sampler_logprobs, mask, mode, cap, sequence_mean=True)


@part10("importance_weights", "truncate_in_mask_mode", "the mask modes truncated at the cap (min(r, C)) instead of setting the weight to 0")
def iw_truncate_everywhere(learner_logprobs, sampler_logprobs, mask, mode="sequence_mask", cap=3.0):
    return _weights(learner_logprobs, sampler_logprobs, mask, mode, cap, truncate=True)


@part10("importance_weights", "mask_in_truncate_mode", "the truncate modes set a capped weight to 0 instead of to C")
def iw_mask_everywhere(learner_logprobs, sampler_logprobs, mask, mode="sequence_mask", cap=3.0):
    return _weights(learner_logprobs, sampler_logprobs, mask, mode, cap, truncate=False)


@part10("importance_weights", "masked_token_set_to_cap",
        "a ratio above the cap got weight C in mask mode too (masking means weight 0)")
def iw_masked_to_cap(learner_logprobs, sampler_logprobs, mask, mode="sequence_mask", cap=3.0):
    return _weights(learner_logprobs, sampler_logprobs, mask, mode, cap, masked_value=cap)


@part10("importance_weights", "tie_counted_as_capped",
        "a ratio exactly equal to the cap was treated as above it (r >= C): masked, and counted in is/capped_frac")
def iw_ties(learner_logprobs, sampler_logprobs, mask, mode="sequence_mask", cap=3.0):
    return _weights(learner_logprobs, sampler_logprobs, mask, mode, cap, ties_capped=True)


@part10("importance_weights", "padding_not_masked",
        "the mask was not applied: padding got weights (and entered the sums) from whatever values it holds")
def iw_no_mask(learner_logprobs, sampler_logprobs, mask, mode="sequence_mask", cap=3.0):
    return _weights(learner_logprobs, sampler_logprobs, mask, mode, cap, padding_masked=False)


@part10("importance_weights", "multiplied_by_mask",
        "the padding was removed by multiplying by the mask, and NaN · 0 (or inf · 0) is NaN: select with torch.where")
def iw_multiply(learner_logprobs, sampler_logprobs, mask, mode="sequence_mask", cap=3.0):
    return _weights(learner_logprobs, sampler_logprobs, mask, mode, cap, multiply=True)


@part10("importance_weights", "stats_over_all_positions", "the stats were averaged over every position (padding and empty rows included)")
def iw_stats_all(learner_logprobs, sampler_logprobs, mask, mode="sequence_mask", cap=3.0):
    return _weights(learner_logprobs, sampler_logprobs, mask, mode, cap, stats_all_positions=True)


@part10("importance_weights", "capped_frac_over_tokens_in_sequence_mode",
        "is/capped_frac counted tokens in a sequence mode (it is the share of rows)")
def iw_capped_tokens(learner_logprobs, sampler_logprobs, mask, mode="sequence_mask", cap=3.0):
    return _weights(learner_logprobs, sampler_logprobs, mask, mode, cap, capped_frac_tokens=True)


@part10("importance_weights", "log_ratio_mean_over_tokens_in_sequence_mode",
        "is/log_ratio_mean was the mean token log-ratio in a sequence mode (it is the mean of each row's sum)")
def iw_log_ratio_tokens(learner_logprobs, sampler_logprobs, mask, mode="sequence_mask", cap=3.0):
    return _weights(learner_logprobs, sampler_logprobs, mask, mode, cap, log_ratio_tokens=True)


@part10("importance_weights", "weight_mean_over_rows", "is/weight_mean was a mean over rows in a sequence mode (it is over real tokens)")
def iw_weight_mean_rows(learner_logprobs, sampler_logprobs, mask, mode="sequence_mask", cap=3.0):
    return _weights(learner_logprobs, sampler_logprobs, mask, mode, cap, weight_mean_rows=True)


@part10("importance_weights", "weights_with_grad",
        "the weights were not detached: the loss then differentiates through the ratio (and keeps its graph)")
def iw_grad(learner_logprobs, sampler_logprobs, mask, mode="sequence_mask", cap=3.0):
    w, stats = _weights(learner_logprobs, sampler_logprobs, mask, mode, cap, detach=False)
    return w, {k: v.detach() for k, v in stats.items()}


@part10("importance_weights", "stats_with_grad", "the stats were returned with their autograd graph")
def iw_stats_grad(learner_logprobs, sampler_logprobs, mask, mode="sequence_mask", cap=3.0):
    w, stats = _weights(learner_logprobs, sampler_logprobs, mask, mode, cap, detach=False)
    return w.detach(), stats


@part10("importance_weights", "stats_nan_without_tokens", "the stats divided by the number of real tokens unclamped: 0/0 = NaN with none")
def iw_stats_nan(learner_logprobs, sampler_logprobs, mask, mode="sequence_mask", cap=3.0):
    return _weights(learner_logprobs, sampler_logprobs, mask, mode, cap, stats_nan=True)


@part10("importance_weights", "cap_ignored", "the cap argument was ignored (TRL's default 3.0 was used whatever cap was given)")
def iw_cap_ignored(learner_logprobs, sampler_logprobs, mask, mode="sequence_mask", cap=3.0):
    return _p10.importance_weights(learner_logprobs, sampler_logprobs, mask, mode, 3.0 if cap > 0 else cap)


@part10("importance_weights", "default_mode_token_truncate", "the default mode was token_truncate (TRL's default is sequence_mask)")
def iw_default(learner_logprobs, sampler_logprobs, mask, mode="token_truncate", cap=3.0):
    return _p10.importance_weights(learner_logprobs, sampler_logprobs, mask, mode, cap)


@part10("importance_weights", "bad_arguments_accepted", "an unknown mode or a cap <= 0 was accepted silently (a ValueError is due)")
def iw_no_checks(learner_logprobs, sampler_logprobs, mask, mode="sequence_mask", cap=3.0):
    if mode not in _p10.MODES:
        mode = "sequence_mask"
    return _weights(learner_logprobs, sampler_logprobs, mask, mode, cap if cap > 0 else 3.0)


@part10("importance_weights", "cap_nan_accepted",
        "a NaN cap was accepted: `cap <= 0` is False for NaN, so nothing was ever capped (test `not cap > 0`)")
def iw_nan_cap(learner_logprobs, sampler_logprobs, mask, mode="sequence_mask", cap=3.0):
    if mode not in _p10.MODES:
        raise ValueError(mode)
    if cap <= 0:
        raise ValueError(cap)
    # ratio > NaN is False everywhere: the same weights as an infinite cap.
    return _weights(learner_logprobs, sampler_logprobs, mask, mode, cap if cap == cap else float("inf"), inf_cap=True)


@part10("importance_weights", "cap_inf_accepted",
        "an infinite cap was accepted (`not cap > 0` lets inf through): that is no cap, and a sequence ratio that "
        "overflows becomes an inf weight (test `0 < cap < inf`, or math.isfinite)")
def iw_inf_cap(learner_logprobs, sampler_logprobs, mask, mode="sequence_mask", cap=3.0):
    return _weights(learner_logprobs, sampler_logprobs, mask, mode, cap, inf_cap=True)


@part10("importance_weights", "weights_in_the_promoted_dtype",
        "the weights and stats came in the dtype learner − sampler promotes to (float64 from a float64 sampler), not in "
        "the learner's (cast ℓ, or the weights, to learner_logprobs.dtype)")
def iw_promoted(learner_logprobs, sampler_logprobs, mask, mode="sequence_mask", cap=3.0):
    return _weights(learner_logprobs, sampler_logprobs, mask, mode, cap, promoted=True)


@part10("importance_weights", "sequence_ratio_as_a_running_product",
        "the sequence ratio was the product of the token ratios, multiplied out (cumprod/prod): it overflows to inf "
        "when the partial products do, even where the sum of the log-ratios is small — sum the ℓ, then exp")
def iw_running_product(learner_logprobs, sampler_logprobs, mask, mode="sequence_mask", cap=3.0):
    return _weights(learner_logprobs, sampler_logprobs, mask, mode, cap, running_product=True)


@part10("importance_weights", "capped_ratio_zeroed_by_multiplying",
        "a capped ratio was zeroed by multiplying by (r <= C): a ratio that overflowed to inf gives inf · 0 = NaN "
        "(select with torch.where)")
def iw_zeroed_by_multiplying(learner_logprobs, sampler_logprobs, mask, mode="sequence_mask", cap=3.0):
    return _weights(learner_logprobs, sampler_logprobs, mask, mode, cap, zeroed_by_multiplying=True)


@part10("importance_weights", "log_ratio_from_exp_over_exp",
        "ℓ was computed as log(exp(learner) / exp(sampler)): both exps are 0 for log-probs below about −104 in float32, "
        "and 0/0 is NaN (ℓ is the difference of the log-probs)")
def iw_exp_over_exp(learner_logprobs, sampler_logprobs, mask, mode="sequence_mask", cap=3.0):
    return _weights(learner_logprobs, sampler_logprobs, mask, mode, cap, exp_over_exp=True)


@part10("importance_weights", "empty_batch_shortcut_in_float32",
        "a batch without real tokens was answered by a shortcut whose stats are float32 whatever the inputs' dtype")
def iw_empty_shortcut(learner_logprobs, sampler_logprobs, mask, mode="sequence_mask", cap=3.0):
    if mode in _p10.MODES and cap > 0 and not bool((mask != 0).any()):
        return torch.zeros_like(learner_logprobs), {k: torch.tensor(0.0) for k in ("is/capped_frac", "is/weight_mean",
                                                                                    "is/log_ratio_mean")}
    return _p10.importance_weights(learner_logprobs, sampler_logprobs, mask, mode, cap)


# --- off_policy_sequence_mask -----------------------------------------------------------------

def _keep(learner, sampler, advantages, mask, delta, *, negative=lambda a: a < 0, reduce="mean", above=lambda d, t: d > t,
          flipped=False, empty_dropped=False, masked=True, check=True):
    if check and not delta >= 0:
        raise ValueError(delta)
    real = mask != 0
    diff = learner - sampler if flipped else sampler - learner
    diff = torch.where(real, diff, torch.zeros((), dtype=diff.dtype)) if masked else diff
    lengths = real.sum(dim=1)
    if reduce == "mean":
        d = diff.sum(dim=1) / lengths.clamp(min=1)
    elif reduce == "sum":
        d = diff.sum(dim=1)
    else:  # the padded width
        d = diff.sum(dim=1) / diff.shape[1]
    drop = negative(advantages) & above(d, delta)
    drop = drop | (lengths == 0) if empty_dropped else drop & (lengths > 0)
    return ~drop.detach()


@part10("off_policy_sequence_mask", "non_positive_advantage", "rows with A <= 0 were dropped (A = 0 must be kept: only A < 0)")
def opm_le(learner_logprobs, sampler_logprobs, advantages, mask, delta):
    return _keep(learner_logprobs, sampler_logprobs, advantages, mask, delta, negative=lambda a: a <= 0)


@part10("off_policy_sequence_mask", "sum_not_mean", "the log-ratio was summed over the row instead of averaged over its real tokens")
def opm_sum(learner_logprobs, sampler_logprobs, advantages, mask, delta):
    return _keep(learner_logprobs, sampler_logprobs, advantages, mask, delta, reduce="sum")


@part10("off_policy_sequence_mask", "mean_over_padded_width",
        "the log-ratio was averaged over the padded width instead of the row's real tokens")
def opm_width(learner_logprobs, sampler_logprobs, advantages, mask, delta):
    return _keep(learner_logprobs, sampler_logprobs, advantages, mask, delta, reduce="width")


@part10("off_policy_sequence_mask", "threshold_inclusive", "rows at exactly D = delta were dropped (>= instead of >)")
def opm_ge(learner_logprobs, sampler_logprobs, advantages, mask, delta):
    return _keep(learner_logprobs, sampler_logprobs, advantages, mask, delta, above=lambda d, t: d >= t)


@part10("off_policy_sequence_mask", "sign_flipped",
        "the log-ratio was learner − sampler (log π_θ/π_old) instead of sampler − learner")
def opm_flipped(learner_logprobs, sampler_logprobs, advantages, mask, delta):
    return _keep(learner_logprobs, sampler_logprobs, advantages, mask, delta, flipped=True)


@part10("off_policy_sequence_mask", "empty_row_dropped", "rows with no real token were dropped (they weigh nothing: keep them)")
def opm_empty(learner_logprobs, sampler_logprobs, advantages, mask, delta):
    return _keep(learner_logprobs, sampler_logprobs, advantages, mask, delta, empty_dropped=True)


@part10("off_policy_sequence_mask", "padding_not_masked", "padding entered the mean log-ratio (whatever values it holds)")
def opm_padding(learner_logprobs, sampler_logprobs, advantages, mask, delta):
    return _keep(learner_logprobs, sampler_logprobs, advantages, mask, delta, masked=False)


@part10("off_policy_sequence_mask", "advantage_ignored",
        "every row above the threshold was dropped, whatever its advantage (only A < 0 rows are dropped)")
def opm_any_advantage(learner_logprobs, sampler_logprobs, advantages, mask, delta):
    return _keep(learner_logprobs, sampler_logprobs, advantages, mask, delta, negative=lambda a: torch.ones_like(a, dtype=torch.bool))


@part10("off_policy_sequence_mask", "returns_rows_to_drop", "True was returned for the rows to DROP (True means keep)")
def opm_inverted(learner_logprobs, sampler_logprobs, advantages, mask, delta):
    return ~_p10.off_policy_sequence_mask(learner_logprobs, sampler_logprobs, advantages, mask, delta)


@part10("off_policy_sequence_mask", "negative_delta_accepted", "a negative delta was accepted silently (the docstring's ValueError)")
def opm_no_check(learner_logprobs, sampler_logprobs, advantages, mask, delta):
    return _keep(learner_logprobs, sampler_logprobs, advantages, mask, delta, check=False)


# --- kl_loss_term -------------------------------------------------------------------------------

def _k3(logprobs, ref):
    r = ref - logprobs
    return torch.exp(r) - 1 - r


def _estimator_checked(estimator):
    if estimator not in _p10.KL_ESTIMATORS:
        raise ValueError(estimator)


@part10("kl_loss_term", "k3_is_ratio_detached",
        "the ratio of k3_is was detached: its expected gradient is then KL(π_ref ‖ π_θ)'s, not KL(π_θ ‖ π_ref)'s")
def kl_ratio_detached(logprobs, ref_logprobs, sampler_logprobs, estimator="k3_is"):
    if estimator == "k3_is":
        return torch.exp(logprobs - sampler_logprobs).detach() * _k3(logprobs, ref_logprobs.detach())
    return _p10.kl_loss_term(logprobs, ref_logprobs, sampler_logprobs, estimator)


@part10("kl_loss_term", "k3_is_ratio_inverted", "the ratio of k3_is was π_sampler / π_θ instead of π_θ / π_sampler")
def kl_ratio_inverted(logprobs, ref_logprobs, sampler_logprobs, estimator="k3_is"):
    if estimator == "k3_is":
        return torch.exp(sampler_logprobs.detach() - logprobs) * _k3(logprobs, ref_logprobs.detach())
    return _p10.kl_loss_term(logprobs, ref_logprobs, sampler_logprobs, estimator)


@part10("kl_loss_term", "k3_is_ratio_to_the_reference",
        "the ratio of k3_is was π_θ / π_ref (the reference swapped in for the sampler)")
def kl_ratio_ref(logprobs, ref_logprobs, sampler_logprobs, estimator="k3_is"):
    if estimator == "k3_is":
        return torch.exp(logprobs - ref_logprobs.detach()) * _k3(logprobs, ref_logprobs.detach())
    return _p10.kl_loss_term(logprobs, ref_logprobs, sampler_logprobs, estimator)


@part10("kl_loss_term", "k3_is_weights_k1", "k3_is weighted k1 (logprobs − ref) by the ratio instead of k3")
def kl_is_k1(logprobs, ref_logprobs, sampler_logprobs, estimator="k3_is"):
    if estimator == "k3_is":
        return torch.exp(logprobs - sampler_logprobs.detach()) * (logprobs - ref_logprobs.detach())
    return _p10.kl_loss_term(logprobs, ref_logprobs, sampler_logprobs, estimator)


@part10("kl_loss_term", "k3_direction_flipped",
        "k3 was computed with r = logprobs − ref (log π_θ/π_ref): the other direction's estimator")
def kl_k3_flipped(logprobs, ref_logprobs, sampler_logprobs, estimator="k3_is"):
    _estimator_checked(estimator)
    if estimator == "k1":
        return logprobs - ref_logprobs.detach()
    k3 = _k3(ref_logprobs.detach(), logprobs)
    return k3 if estimator == "k3" else torch.exp(logprobs - sampler_logprobs.detach()) * k3


@part10("kl_loss_term", "k1_sign_flipped", "k1 was ref − logprobs: a loss that rewards drifting away from the reference")
def kl_k1_sign(logprobs, ref_logprobs, sampler_logprobs, estimator="k3_is"):
    if estimator == "k1":
        return ref_logprobs.detach() - logprobs
    return _p10.kl_loss_term(logprobs, ref_logprobs, sampler_logprobs, estimator)


@part10("kl_loss_term", "sampler_not_detached", "sampler_logprobs were not detached: the gradient reached the sampler's log-probs")
def kl_sampler_grad(logprobs, ref_logprobs, sampler_logprobs, estimator="k3_is"):
    if estimator == "k3_is":
        return torch.exp(logprobs - sampler_logprobs) * _k3(logprobs, ref_logprobs.detach())
    return _p10.kl_loss_term(logprobs, ref_logprobs, sampler_logprobs, estimator)


@part10("kl_loss_term", "ref_not_detached", "ref_logprobs were not detached: the gradient reached the reference's log-probs")
def kl_ref_grad(logprobs, ref_logprobs, sampler_logprobs, estimator="k3_is"):
    _estimator_checked(estimator)
    if estimator == "k1":
        return logprobs - ref_logprobs
    k3 = _k3(logprobs, ref_logprobs)
    return k3 if estimator == "k3" else torch.exp(logprobs - sampler_logprobs.detach()) * k3


@part10("kl_loss_term", "k3_clamped", "k3 was clamped (to ±10): the docstring's exp(r) − 1 − r has no clamp")
def kl_k3_clamped(logprobs, ref_logprobs, sampler_logprobs, estimator="k3_is"):
    _estimator_checked(estimator)
    if estimator == "k1":
        return logprobs - ref_logprobs.detach()
    k3 = _k3(logprobs, ref_logprobs.detach()).clamp(-10.0, 10.0)
    return k3 if estimator == "k3" else torch.exp(logprobs - sampler_logprobs.detach()) * k3


@part10("kl_loss_term", "log_ratio_clamped", "r = ref − logprobs was clamped (to ±20) before k3: the docstring's r has no clamp")
def kl_r_clamped(logprobs, ref_logprobs, sampler_logprobs, estimator="k3_is"):
    _estimator_checked(estimator)
    if estimator == "k1":
        return logprobs - ref_logprobs.detach()
    k3 = _k3(logprobs, logprobs + (ref_logprobs.detach() - logprobs).clamp(-20.0, 20.0))
    return k3 if estimator == "k3" else torch.exp(logprobs - sampler_logprobs.detach()) * k3


@part10("kl_loss_term", "k3_is_ratio_clamped",
        "the ratio of k3_is was exp((logprobs − sampler).clamp(max=5)): the docstring's π_θ/π_sampler has no clamp")
def kl_ratio_clamped(logprobs, ref_logprobs, sampler_logprobs, estimator="k3_is"):
    if estimator == "k3_is":
        return torch.exp((logprobs - sampler_logprobs.detach()).clamp(max=5.0)) * _k3(logprobs, ref_logprobs.detach())
    return _p10.kl_loss_term(logprobs, ref_logprobs, sampler_logprobs, estimator)


@part10("kl_loss_term", "default_estimator_k3", "the default estimator was k3 (it is the importance-weighted k3_is)")
def kl_default(logprobs, ref_logprobs, sampler_logprobs, estimator="k3"):
    return _p10.kl_loss_term(logprobs, ref_logprobs, sampler_logprobs, estimator)


@part10("kl_loss_term", "unknown_estimator_accepted", "an unknown estimator fell back to k3_is silently (a ValueError is due)")
def kl_no_check(logprobs, ref_logprobs, sampler_logprobs, estimator="k3_is"):
    return _p10.kl_loss_term(logprobs, ref_logprobs, sampler_logprobs, estimator if estimator in _p10.KL_ESTIMATORS else "k3_is")


# --- sampling_version -------------------------------------------------------------------------

@part10("sampling_version", "no_floor_at_zero", "the first batches got a negative version (batch − lag without max(0, ·))")
def version_no_floor(batch, lag):
    if batch < 0 or lag < 0:
        raise ValueError((batch, lag))
    return batch - lag


@part10("sampling_version", "off_by_one", "the version was one behind (batch − lag − 1): lag 0 would not be the synchronous loop")
def version_off_by_one(batch, lag):
    if batch < 0 or lag < 0:
        raise ValueError((batch, lag))
    return max(0, batch - lag - 1)


@part10("sampling_version", "negative_not_checked", "a negative batch or lag was accepted (a ValueError is due)")
def version_unchecked(batch, lag):
    return max(0, batch - lag)


@part10("sampling_version", "min_instead_of_max", "min(0, batch − lag) was taken: every batch sampled by version 0 (or below)")
def version_min(batch, lag):
    if batch < 0 or lag < 0:
        raise ValueError((batch, lag))
    return min(0, batch - lag)


@part10("sampling_version", "and_returns_false",
        "batch > lag and batch − lag was returned: False, not the int 0, for the first batches")
def version_and(batch, lag):
    if batch < 0 or lag < 0:
        raise ValueError((batch, lag))
    return batch > lag and batch - lag


# --- may_sample ---------------------------------------------------------------------------------

def _checked(batch, version, max_staleness):
    if batch < 0 or version < 0 or max_staleness < 0 or version > batch:
        raise ValueError((batch, version, max_staleness))


@part10("may_sample", "bound_exclusive", "exactly max_staleness behind was refused (< instead of <=)")
def may_exclusive(batch, version, max_staleness):
    _checked(batch, version, max_staleness)
    return batch - version < max_staleness


@part10("may_sample", "bound_off_by_one", "one batch staler than max_staleness was allowed (<= max_staleness + 1)")
def may_plus_one(batch, version, max_staleness):
    _checked(batch, version, max_staleness)
    return batch - version <= max_staleness + 1


@part10("may_sample", "own_version_refused", "the learner's own version (staleness 0) was refused: 0 < batch − version")
def may_not_fresh(batch, version, max_staleness):
    _checked(batch, version, max_staleness)
    return 0 < batch - version <= max_staleness


@part10("may_sample", "future_version_allowed", "a version newer than the batch was answered instead of refused with a ValueError")
def may_future(batch, version, max_staleness):
    if batch < 0 or version < 0 or max_staleness < 0:
        raise ValueError((batch, version, max_staleness))
    return batch - version <= max_staleness


@part10("may_sample", "staleness_reversed", "the staleness was version − batch instead of batch − version")
def may_reversed(batch, version, max_staleness):
    _checked(batch, version, max_staleness)
    return version - batch <= max_staleness


@part10("may_sample", "negative_not_checked", "a negative argument was accepted (a ValueError is due)")
def may_unchecked(batch, version, max_staleness):
    if version > batch:
        raise ValueError((batch, version))
    return batch - version <= max_staleness
