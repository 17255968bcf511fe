"""Known-wrong versions of Part 3's tensor helpers: log-probs, entropy, whitening, masked statistics,
clipping, the KL penalty."""

from __future__ import annotations

from functools import partial

import numpy as np
import torch
import torch.nn.functional as F

from solutions import part3_rlhf as _ref
from workbook.mistakes import mistake

part3 = partial(mistake, "part3_rlhf")


# --- logprobs_from_logits -------------------------------------------------------------

def _pick(table, labels):
    return torch.gather(table, -1, labels.unsqueeze(-1)).squeeze(-1)


@part3("logprobs_from_logits", "log_of_softmax",
       "log(softmax(x)) was used instead of log_softmax(x): very unlikely tokens underflow to -inf")
def logprobs_log_of_softmax(logits, labels):
    return _pick(torch.log(F.softmax(logits, dim=-1)), labels)


@part3("logprobs_from_logits", "raw_logits", "the raw logit of the label was returned, without normalising (log_softmax)")
def logprobs_raw(logits, labels):
    return _pick(logits, labels)


@part3("logprobs_from_logits", "probabilities_not_logprobs", "probabilities (softmax) were returned instead of log-probabilities")
def logprobs_probs(logits, labels):
    return _pick(F.softmax(logits, dim=-1), labels)


@part3("logprobs_from_logits", "normalised_over_wrong_axis", "the softmax was taken over the sequence axis instead of the vocabulary")
def logprobs_wrong_axis(logits, labels):
    return _pick(F.log_softmax(logits, dim=-2), labels)


# --- entropy_from_logits --------------------------------------------------------------

@part3("entropy_from_logits", "naive_p_log_p",
       "−Σ p·log p was computed directly: 0 · log 0 gives NaN once a probability underflows")
def entropy_naive(logits):
    p = F.softmax(logits, dim=-1)
    return -(p * torch.log(p)).sum(dim=-1)


@part3("entropy_from_logits", "sign_flipped", "the entropy's sign was flipped (Σ p·log p instead of −Σ p·log p)")
def entropy_negated(logits):
    p = F.softmax(logits, dim=-1)
    return -(torch.logsumexp(logits, dim=-1) - (p * logits).sum(dim=-1))


@part3("entropy_from_logits", "bits_not_nats", "the entropy was computed in bits (log base 2) instead of nats")
def entropy_bits(logits):
    p = F.softmax(logits, dim=-1)
    return -(p * F.log_softmax(logits, dim=-1) / np.log(2)).sum(dim=-1)


@part3("entropy_from_logits", "logsumexp_forgotten", "the logsumexp term was left out (only −Σ p·x)")
def entropy_no_lse(logits):
    p = F.softmax(logits, dim=-1)
    return -(p * logits).sum(dim=-1)


# --- whiten ---------------------------------------------------------------------------

@part3("whiten", "biased_variance", "the biased variance (unbiased=False) was used instead of torch.var's unbiased one")
def whiten_biased(values, shift_mean=True):
    mean, var = values.mean(), values.var(unbiased=False)
    out = (values - mean) * torch.rsqrt(var + 1e-8)
    return out if shift_mean else out + mean


@part3("whiten", "per_row_statistics", "a mean and variance were taken per row instead of over the whole tensor")
def whiten_per_row(values, shift_mean=True):
    mean, var = values.mean(-1, keepdim=True), values.var(-1, keepdim=True)
    out = (values - mean) * torch.rsqrt(var + 1e-8)
    return out if shift_mean else out + mean


@part3("whiten", "shift_mean_ignored", "shift_mean=False was ignored (the mean was not added back)")
def whiten_ignores_flag(values, shift_mean=True):
    return (values - values.mean()) * torch.rsqrt(values.var() + 1e-8)


@part3("whiten", "scaled_without_centring",
       "with shift_mean=False the values were only multiplied by rsqrt(var + 1e-8), not centred first: "
       "(x − mean)·s + mean moves every value towards the mean, x·s moves them towards 0")
def whiten_scaled_only(values, shift_mean=True):
    scale = torch.rsqrt(values.var() + 1e-8)
    return (values - values.mean()) * scale if shift_mean else values * scale


@part3("whiten", "eps_outside_sqrt", "the 1e-8 was added to the standard deviation instead of inside the square root")
def whiten_eps_outside(values, shift_mean=True):
    mean = values.mean()
    out = (values - mean) / (values.std() + 1e-8)
    return out if shift_mean else out + mean


# --- masked_mean ----------------------------------------------------------------------

@part3("masked_mean", "unmasked_mean", "a plain mean was taken, padding included")
def masked_mean_plain(values, mask, axis=None):
    return values.mean() if axis is None else values.mean(axis)


@part3("masked_mean", "divides_by_numel", "the masked sum was divided by the number of elements, padding included")
def masked_mean_numel(values, mask, axis=None):
    if axis is None:
        return (values * mask).sum() / mask.numel()
    return (values * mask).sum(axis) / mask.shape[axis]


@part3("masked_mean", "mean_of_row_means", "the per-row masked means were averaged (short rows weigh as much as long ones)")
def masked_mean_of_rows(values, mask, axis=None):
    if axis is None:
        return ((values * mask).sum(-1) / mask.sum(-1)).mean()
    return (values * mask).sum(axis) / mask.sum(axis)


@part3("masked_mean", "axis_ignored", "the axis argument was ignored (always one number)")
def masked_mean_no_axis(values, mask, axis=None):
    return (values * mask).sum() / mask.sum()


@part3("masked_mean", "mask_used_as_index",
       "the mask was used as an index (values[mask]): only a bool mask selects; a float mask is rejected and an "
       "int64 mask (a tokenizer's) picks rows 0 and 1 by number")
def masked_mean_indexed(values, mask, axis=None):
    if axis is None:
        return values[mask].mean()
    return (values * mask).sum(axis) / mask.sum(axis)


# --- masked_var -----------------------------------------------------------------------

def _var(values, mask, unbiased, *, bessel_n=None, centre=None, check=True):
    n = mask.sum()
    if check and n < (2 if unbiased else 1):
        raise ValueError("mask too small")
    mean = (values * mask).sum() / n if centre is None else centre
    var = ((values - mean) ** 2 * mask).sum() / n
    if unbiased:
        m = n if bessel_n is None else bessel_n
        var = var * m / (m - 1)
    return var


@part3("masked_var", "unbiased_flag_inverted", "the unbiased flag was inverted (n − 1 used when unbiased=False and vice versa)")
def masked_var_inverted(values, mask, unbiased=True):
    return _var(values, mask, not unbiased)


@part3("masked_var", "bessel_with_numel", "Bessel's correction used values.numel() instead of the number of masked-in elements")
def masked_var_numel(values, mask, unbiased=True):
    return _var(values, mask, unbiased, bessel_n=torch.tensor(float(mask.numel())))


@part3("masked_var", "centred_on_unmasked_mean", "the values were centred on their plain mean (padding included) instead of the masked mean")
def masked_var_plain_centre(values, mask, unbiased=True):
    return _var(values, mask, unbiased, centre=values.mean())


@part3("masked_var", "unmasked_variance", "the variance was taken over every element, padding included")
def masked_var_plain(values, mask, unbiased=True):
    if mask.sum() < (2 if unbiased else 1):
        raise ValueError("mask too small")
    return values.var(unbiased=unbiased)


@part3("masked_var", "no_error_on_tiny_mask",
       "a mask with fewer than 2 elements was accepted silently (the result is 0/0 or inf)")
def masked_var_unchecked(values, mask, unbiased=True):
    return _var(values, mask, unbiased, check=False)


@part3("masked_var", "where_needs_a_bool_mask",
       "torch.where(mask, ...) was used, which only accepts a bool mask (float and int64 masks raise)")
def masked_var_where(values, mask, unbiased=True):
    n = mask.sum()
    if n < (2 if unbiased else 1):
        raise ValueError("mask too small")
    mean = torch.where(mask, values, 0.0).sum() / n
    var = torch.where(mask, (values - mean) ** 2, 0.0).sum() / n
    return var * n / (n - 1) if unbiased else var


@part3("masked_var", "one_pass_formula",
       "the one-pass formula E[x²] − E[x]² was used: with a large mean and a small spread it cancels to noise")
def masked_var_one_pass(values, mask, unbiased=True):
    n = mask.sum()
    if n < (2 if unbiased else 1):
        raise ValueError("mask too small")
    var = (values ** 2 * mask).sum() / n - ((values * mask).sum() / n) ** 2
    return var * n / (n - 1) if unbiased else var


@part3("masked_var", "rejects_one_element_when_biased",
       "a mask of one element was rejected even with unbiased=False (the biased variance of one number is 0)")
def masked_var_needs_two(values, mask, unbiased=True):
    if mask.sum() < 2:
        raise ValueError("mask too small")
    return _var(values, mask, unbiased)


# --- masked_whiten --------------------------------------------------------------------

@part3("masked_whiten", "whitened_over_padding", "the mean and variance were taken over the padding too (plain whiten)")
def masked_whiten_plain(values, mask, shift_mean=True):
    return _ref.whiten(values, shift_mean)


@part3("masked_whiten", "biased_variance", "the biased masked variance was used instead of the unbiased one")
def masked_whiten_biased(values, mask, shift_mean=True):
    mean, var = _ref.masked_mean(values, mask), _ref.masked_var(values, mask, unbiased=False)
    out = (values - mean) * torch.rsqrt(var + 1e-8)
    return out if shift_mean else out + mean


@part3("masked_whiten", "shift_mean_ignored", "shift_mean=False was ignored (the masked mean was not added back)")
def masked_whiten_ignores_flag(values, mask, shift_mean=True):
    return (values - _ref.masked_mean(values, mask)) * torch.rsqrt(_ref.masked_var(values, mask) + 1e-8)


@part3("masked_whiten", "padding_zeroed", "the padding was set to 0 in the output (every position must be transformed)")
def masked_whiten_zeroed(values, mask, shift_mean=True):
    return _ref.masked_whiten(values, mask, shift_mean) * mask


@part3("masked_whiten", "mask_used_as_index",
       "the statistics were taken of values[mask]: only a bool mask selects; a float mask is rejected and an "
       "int64 mask picks rows 0 and 1 by number")
def masked_whiten_indexed(values, mask, shift_mean=True):
    mean, var = values[mask].mean(), values[mask].var()
    out = (values - mean) * torch.rsqrt(var + 1e-8)
    return out if shift_mean else out + mean


@part3("masked_whiten", "padding_left_unchanged",
       "only the masked-in positions were whitened (out[mask] = whiten(values[mask])): the padding kept its raw "
       "values instead of being transformed like every other position")
def masked_whiten_padding_kept(values, mask, shift_mean=True):
    keep = mask.bool()
    out = values.clone()
    out[keep] = _ref.whiten(values[keep], shift_mean)
    return out


@part3("masked_whiten", "eps_outside_sqrt", "the 1e-8 was added to the standard deviation instead of inside the square root")
def masked_whiten_eps_outside(values, mask, shift_mean=True):
    mean, var = _ref.masked_mean(values, mask), _ref.masked_var(values, mask)
    out = (values - mean) / (var.sqrt() + 1e-8)
    return out if shift_mean else out + mean


# --- clip_by_value --------------------------------------------------------------------

@part3("clip_by_value", "bounds_swapped", "the bounds were swapped (min with the lower bound, max with the upper)")
def clip_swapped(x, tensor_min, tensor_max):
    return torch.maximum(torch.minimum(x, tensor_min), tensor_max)


@part3("clip_by_value", "upper_bound_only", "only the upper bound was applied")
def clip_upper(x, tensor_min, tensor_max):
    return torch.minimum(x, tensor_max)


@part3("clip_by_value", "lower_bound_only", "only the lower bound was applied")
def clip_lower(x, tensor_min, tensor_max):
    return torch.maximum(x, tensor_min)


@part3("clip_by_value", "gradient_cut", "the result was computed without gradient (detached), so nothing can learn through it")
def clip_detached(x, tensor_min, tensor_max):
    return torch.maximum(torch.minimum(x.detach(), tensor_max), tensor_min).detach()


# --- kl_penalty -----------------------------------------------------------------------

def _kl(logprob, ref_logprob, kind, **override):
    fn = override.get(kind)
    return fn(logprob, ref_logprob) if fn is not None else _ref.kl_penalty(logprob, ref_logprob, kind)


@part3("kl_penalty", "k1_sign_flipped", "the k1 KL was computed as ref_logprob − logprob (sign flipped)")
def kl_flipped(logprob, ref_logprob, kind="kl"):
    return _kl(logprob, ref_logprob, kind, kl=lambda lp, ref: ref - lp)


@part3("kl_penalty", "mse_without_half", "the mse KL lacks its factor ½")
def kl_mse_no_half(logprob, ref_logprob, kind="kl"):
    return _kl(logprob, ref_logprob, kind, mse=lambda lp, ref: (lp - ref) ** 2)


@part3("kl_penalty", "full_kl_reversed", "the full KL was computed the other way round, KL(π_ref ‖ π)")
def kl_full_reversed(logprob, ref_logprob, kind="kl"):
    return _kl(logprob, ref_logprob, kind, full=lambda lp, ref: (ref.exp() * (ref - lp)).sum(-1))


@part3("kl_penalty", "k3_wrong_ratio", "k3 used r = logprob − ref_logprob instead of ref_logprob − logprob")
def kl_k3_wrong(logprob, ref_logprob, kind="kl"):
    return _kl(logprob, ref_logprob, kind, k3=lambda lp, ref: torch.expm1(lp - ref) - (lp - ref))


@part3("kl_penalty", "unknown_kind_accepted", "an unknown kind silently fell back to k1 instead of raising ValueError")
def kl_fallback(logprob, ref_logprob, kind="kl"):
    if kind not in ("kl", "abs", "mse", "full", "k3"):
        return logprob - ref_logprob
    return _ref.kl_penalty(logprob, ref_logprob, kind)
