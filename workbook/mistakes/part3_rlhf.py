"""Known-wrong versions of the Part 3 exercises (see workbook/mistakes/__init__.py)."""

from __future__ import annotations

import copy
from functools import partial

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from solutions import part3_rlhf as _ref
from workbook.lm.tokenizer import pad_batch
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


# --- compute_rewards ------------------------------------------------------------------

def _rewards(scores, logprobs, ref_logprobs, masks, kl_coef, kind, *, sign=-1.0, where="last_real", clone=True, mask_kl=True):
    kls = _ref.kl_penalty(logprobs, ref_logprobs, kind)
    if mask_kl:
        kls = kls * masks
    non_score = sign * kl_coef * kls
    rewards = non_score.clone() if clone else non_score
    rows = torch.arange(len(scores))
    if where == "last_real":
        col = (masks.sum(1) - 1).long()
    elif where == "last_column":
        col = torch.full_like(rows, masks.shape[1] - 1)
    else:
        col = torch.zeros_like(rows)
    rewards[rows, col] += scores
    return rewards, non_score, kls


@part3("compute_rewards", "score_on_last_column", "the score was added to the last column, ignoring the mask (padding for shorter rows)")
def rewards_last_column(scores, logprobs, ref_logprobs, masks, kl_coef, kind="kl"):
    return _rewards(scores, logprobs, ref_logprobs, masks, kl_coef, kind, where="last_column")


@part3("compute_rewards", "score_on_first_token", "the score was added to the first response token instead of the last")
def rewards_first_token(scores, logprobs, ref_logprobs, masks, kl_coef, kind="kl"):
    return _rewards(scores, logprobs, ref_logprobs, masks, kl_coef, kind, where="first")


@part3("compute_rewards", "kl_sign_flipped", "the KL term was added (+kl_coef·kl) instead of subtracted: drifting away is rewarded")
def rewards_kl_bonus(scores, logprobs, ref_logprobs, masks, kl_coef, kind="kl"):
    return _rewards(scores, logprobs, ref_logprobs, masks, kl_coef, kind, sign=1.0)


@part3("compute_rewards", "non_score_rewards_aliased",
       "the score was added into a tensor shared with non_score_rewards (no clone), so they hold the score too")
def rewards_aliased(scores, logprobs, ref_logprobs, masks, kl_coef, kind="kl"):
    return _rewards(scores, logprobs, ref_logprobs, masks, kl_coef, kind, clone=False)


@part3("compute_rewards", "padding_not_masked", "the KL of padding positions was not masked out")
def rewards_unmasked(scores, logprobs, ref_logprobs, masks, kl_coef, kind="kl"):
    return _rewards(scores, logprobs, ref_logprobs, masks, kl_coef, kind, mask_kl=False)


@part3("compute_rewards", "mask_subtracted_as_numbers",
       "the last real token was found by subtracting masks (mask − shifted mask), which a bool mask does not support")
def rewards_mask_difference(scores, logprobs, ref_logprobs, masks, kl_coef, kind="kl"):
    if (masks.sum(1) < 1).any():
        raise ValueError("empty row")
    kls = _ref.kl_penalty(logprobs, ref_logprobs, kind) * masks
    non_score = -kl_coef * kls
    ends = masks - torch.cat([masks[:, 1:], torch.zeros_like(masks[:, :1])], dim=1)  # 1 at each row's last real token
    return non_score + scores[:, None] * ends, non_score, kls


@part3("compute_rewards", "score_at_mask_sum_minus_one",
       "the last real token was taken at index mask.sum(1) − 1, which is right only when the 1s come first and "
       "without gaps: with a tool's tokens inside the response (Part 9) the score lands on the wrong token")
def rewards_sum_minus_one(scores, logprobs, ref_logprobs, masks, kl_coef, kind="kl"):
    masks = masks.to(scores.dtype)
    if (masks.sum(1) < 1).any():
        raise ValueError("empty row")
    kls = _ref.kl_penalty(logprobs, ref_logprobs, kind) * masks
    non_score = -kl_coef * kls
    rewards = non_score.clone()
    rewards[torch.arange(len(scores)), masks.sum(1).long() - 1] += scores
    return rewards, non_score, kls


@part3("compute_rewards", "no_error_on_empty_row",
       "a row without any real token was accepted silently (its score went to the last column, which is padding)")
def rewards_empty_row_accepted(scores, logprobs, ref_logprobs, masks, kl_coef, kind="kl"):
    masks = masks.to(scores.dtype)
    kls = _ref.kl_penalty(logprobs, ref_logprobs, kind) * masks
    non_score = -kl_coef * kls
    rewards = non_score.clone()
    positions = torch.arange(masks.shape[1]).expand_as(masks)
    last = torch.where(masks > 0, positions, torch.full_like(positions, -1)).max(dim=1).values
    rewards[torch.arange(len(scores)), last] += scores
    return rewards, non_score, kls


# --- AdaptiveKLController -------------------------------------------------------------

@part3("AdaptiveKLController", "error_not_clipped", "the proportional error was not clipped to [−0.2, 0.2]")
class KLNoClip(_ref.AdaptiveKLController):
    def update(self, current, n_steps):
        self.value *= 1 + (current / self.target - 1) * n_steps / self.horizon


@part3("AdaptiveKLController", "additive_update", "β was updated additively (β += e·n/h) instead of multiplicatively")
class KLAdditive(_ref.AdaptiveKLController):
    def update(self, current, n_steps):
        self.value += float(np.clip(current / self.target - 1, -0.2, 0.2)) * n_steps / self.horizon


@part3("AdaptiveKLController", "absolute_error", "the error was current − target instead of current / target − 1")
class KLAbsoluteError(_ref.AdaptiveKLController):
    def update(self, current, n_steps):
        self.value *= 1 + float(np.clip(current - self.target, -0.2, 0.2)) * n_steps / self.horizon


@part3("AdaptiveKLController", "n_steps_ignored", "n_steps was ignored (β moves by e/horizon per batch, whatever its size)")
class KLNoSteps(_ref.AdaptiveKLController):
    def update(self, current, n_steps):
        self.value *= 1 + float(np.clip(current / self.target - 1, -0.2, 0.2)) / self.horizon


@part3("AdaptiveKLController", "sign_flipped", "β shrinks when the KL is above target (the error's sign was flipped)")
class KLFlipped(_ref.AdaptiveKLController):
    def update(self, current, n_steps):
        self.value *= 1 - float(np.clip(current / self.target - 1, -0.2, 0.2)) * n_steps / self.horizon


# --- compute_advantages ---------------------------------------------------------------

def _advantages(values, rewards, mask, gamma, lam, *, mask_values=True, whiten_first=False, whiten_fn="masked",
                decay=None, add_values=True, skip_gaps=True):
    with torch.no_grad():
        if mask_values:
            values = values * mask
        rewards = rewards * mask
        T = rewards.shape[1]
        adv = torch.zeros_like(rewards)
        running = torch.zeros_like(rewards[:, 0])
        nxt = torch.zeros_like(values[:, 0])
        d = gamma * lam if decay is None else decay(gamma, lam)
        for t in reversed(range(T)):
            if not skip_gaps:  # the gap's columns taken as steps of value 0
                nxt = values[:, t + 1] if t + 1 < T else torch.zeros_like(values[:, t])
            step = rewards[:, t] + gamma * nxt - values[:, t] + d * running
            real = mask[:, t] > 0
            running = torch.where(real, step, running) if skip_gaps else step
            if skip_gaps:
                nxt = torch.where(real, values[:, t], nxt)
            adv[:, t] = running  # across a gap: the carried advantage (the returns' mask must zero it)
        white = {"masked": lambda a: _ref.masked_whiten(a, mask), "plain": _ref.whiten, "none": lambda a: a,
                 "eps_outside": lambda a: (a - _ref.masked_mean(a, mask)) / (_ref.masked_var(a, mask).sqrt() + 1e-8)
                 }[whiten_fn]
        if whiten_first:
            adv = white(adv) * mask
            returns = adv + values
        else:
            returns = adv + values if add_values else adv
            adv = white(adv) * mask
        return values, adv, returns


@part3("compute_advantages", "nan_passes_the_range_check",
       "gamma or lam was checked with `x < 0 or x > 1`, which lets NaN through (every comparison with NaN is False)")
def adv_nan_accepted(values, rewards, mask, gamma, lam):
    if gamma < 0 or gamma > 1 or lam < 0 or lam > 1:
        raise ValueError("gamma and lam must lie in [0, 1]")
    if gamma == gamma and lam == lam:
        return _ref.compute_advantages(values, rewards, mask, gamma, lam)
    v, a, r = _ref.compute_advantages(values, rewards, mask, 0.5, 0.5)  # the recursion with a NaN: NaN everywhere
    return v, torch.full_like(a, float("nan")), torch.full_like(r, float("nan"))


@part3("compute_advantages", "whitened_before_returns", "the advantages were whitened before computing returns = advantages + values")
def adv_whiten_first(values, rewards, mask, gamma, lam):
    return _advantages(values, rewards, mask, gamma, lam, whiten_first=True)


@part3("compute_advantages", "padding_values_bootstrapped",
       "the values were not masked, so the value of a padded column is bootstrapped into the last real token")
def adv_unmasked_values(values, rewards, mask, gamma, lam):
    # (the plain recursion over every column: a recursion that skips masked-out columns never reads them)
    v, a, r = _advantages(values, rewards, mask, gamma, lam, mask_values=False, skip_gaps=False)
    return v * mask, a, r * mask


@part3("compute_advantages", "whitened_over_padding", "the advantages were whitened over the padding too (whiten instead of masked_whiten)")
def adv_plain_whiten(values, rewards, mask, gamma, lam):
    return _advantages(values, rewards, mask, gamma, lam, whiten_fn="plain")


@part3("compute_advantages", "gamma_instead_of_gamma_lambda", "γ was used where γ·λ belongs in the GAE recursion")
def adv_gamma_only(values, rewards, mask, gamma, lam):
    return _advantages(values, rewards, mask, gamma, lam, decay=lambda g, l: g)


@part3("compute_advantages", "returns_without_values", "the returns were the advantages alone (values not added back)")
def adv_returns_no_values(values, rewards, mask, gamma, lam):
    return _advantages(values, rewards, mask, gamma, lam, add_values=False)


@part3("compute_advantages", "not_whitened", "the advantages were not whitened")
def adv_not_whitened(values, rewards, mask, gamma, lam):
    return _advantages(values, rewards, mask, gamma, lam, whiten_fn="none")


@part3("compute_advantages", "whitened_with_eps_outside_sqrt",
       "the advantages were whitened as (A − mean) / (std + 1e-8), the 1e-8 outside the square root: when every "
       "token's advantage is the same (every response scored alike, the value head still 0), rounding noise of "
       "~1e-8 comes out as whitened advantages of ±1 instead of ~0")
def adv_eps_outside(values, rewards, mask, gamma, lam):
    if not (0.0 <= gamma <= 1.0 and 0.0 <= lam <= 1.0):
        raise ValueError("gamma and lam must lie in [0, 1]")
    values, advantages, returns = _advantages(values, rewards, mask, gamma, lam, whiten_fn="eps_outside")
    return values, advantages * mask, returns * mask


@part3("compute_advantages", "mask_inverted_with_tilde",
       "the padding was zeroed with masked_fill(~mask, 0), which only works for a bool mask (~ of a float mask "
       "raises, of an int64 mask gives −1 and −2)")
def adv_tilde(values, rewards, mask, gamma, lam):
    with torch.no_grad():
        values, rewards = values.masked_fill(~mask, 0.0), rewards.masked_fill(~mask, 0.0)
        v, a, r = _advantages(values, rewards, torch.ones_like(values), gamma, lam, whiten_fn="none")
        return v, _ref.masked_whiten(a, mask) * mask, r * mask


@part3("compute_advantages", "gap_taken_as_steps_of_value_0",
       "the recursion ran through a gap in the mask (1 1 0 0 1) as steps of zero reward and zero value, instead of "
       "skipping it (the next real token's value and advantage carried through): λ and γ were spent on every "
       "masked-out token, and a 0 was bootstrapped in")
def adv_gap_as_steps(values, rewards, mask, gamma, lam):
    return _advantages(values, rewards, mask, gamma, lam, skip_gaps=False)


@part3("compute_advantages", "returns_not_masked",
       "the returns were not multiplied by the mask, so a gap inside a mask (1 1 0 1) keeps a return")
def adv_returns_unmasked(values, rewards, mask, gamma, lam):
    return _advantages(values, rewards, mask, gamma, lam)


# --- ppo_loss -------------------------------------------------------------------------

def _ppo(old_logprobs, values, logprobs, vpreds, mask, advantages, returns, cliprange, cliprange_value, vf_coef, *,
         combine=torch.maximum, mean=None, v_centre="values", ratio_sign=1.0, coef_on_vf=True):
    mean = mean or _ref.masked_mean
    ratio = torch.exp(ratio_sign * (logprobs - old_logprobs))
    pg1 = -advantages * ratio
    pg2 = -advantages * torch.clamp(ratio, 1 - cliprange, 1 + cliprange)
    pg_loss = mean(combine(pg1, pg2), mask)
    centre = values if v_centre == "values" else returns
    vclip = _ref.clip_by_value(vpreds, centre - cliprange_value, centre + cliprange_value)
    v1, v2 = (vpreds - returns) ** 2, (vclip - returns) ** 2
    vf_loss = 0.5 * mean(torch.maximum(v1, v2), mask)
    stats = {
        "loss/policy": pg_loss, "loss/value": vf_loss, "loss/total": pg_loss + vf_coef * vf_loss,
        "policy/approxkl": 0.5 * mean((logprobs - old_logprobs) ** 2, mask),
        "policy/policykl": mean(old_logprobs - logprobs, mask),
        "policy/clipfrac": mean((pg2 > pg1).float(), mask),
        "policy/advantages_mean": mean(advantages, mask), "policy/ratio": mean(ratio, mask),
        "returns/mean": mean(returns, mask), "returns/var": _ref.masked_var(returns, mask),
        "val/vpred": mean(vpreds, mask), "val/error": mean((vpreds - returns) ** 2, mask),
        "val/clipfrac": mean((v2 > v1).float(), mask),
        "val/mean": mean(values, mask), "val/var": _ref.masked_var(values, mask),
    }
    return pg_loss, (vf_coef if coef_on_vf else 1.0) * vf_loss, {k: v.detach() for k, v in stats.items()}


@part3("ppo_loss", "min_instead_of_max", "min of the two policy losses was taken instead of max (an optimistic bound)")
def ppo_min(old_logprobs, values, logprobs, vpreds, mask, advantages, returns, cliprange, cliprange_value, vf_coef):
    return _ppo(old_logprobs, values, logprobs, vpreds, mask, advantages, returns, cliprange, cliprange_value, vf_coef,
                combine=torch.minimum)


@part3("ppo_loss", "unmasked_mean", "plain means were taken over all tokens, padding included")
def ppo_unmasked(old_logprobs, values, logprobs, vpreds, mask, advantages, returns, cliprange, cliprange_value, vf_coef):
    return _ppo(old_logprobs, values, logprobs, vpreds, mask, advantages, returns, cliprange, cliprange_value, vf_coef,
                mean=lambda x, m: x.mean())


@part3("ppo_loss", "value_clipped_around_returns", "the value prediction was clipped around the returns instead of the rollout values")
def ppo_vclip_returns(old_logprobs, values, logprobs, vpreds, mask, advantages, returns, cliprange, cliprange_value, vf_coef):
    return _ppo(old_logprobs, values, logprobs, vpreds, mask, advantages, returns, cliprange, cliprange_value, vf_coef,
                v_centre="returns")


@part3("ppo_loss", "inverse_ratio", "the ratio was inverted: exp(old − new) instead of exp(new − old)")
def ppo_inverse_ratio(old_logprobs, values, logprobs, vpreds, mask, advantages, returns, cliprange, cliprange_value, vf_coef):
    return _ppo(old_logprobs, values, logprobs, vpreds, mask, advantages, returns, cliprange, cliprange_value, vf_coef,
                ratio_sign=-1.0)


@part3("ppo_loss", "vf_coef_not_applied", "the returned value loss lacks vf_coef")
def ppo_no_vf_coef(old_logprobs, values, logprobs, vpreds, mask, advantages, returns, cliprange, cliprange_value, vf_coef):
    return _ppo(old_logprobs, values, logprobs, vpreds, mask, advantages, returns, cliprange, cliprange_value, vf_coef,
                coef_on_vf=False)


@part3("ppo_loss", "stats_keep_the_graph", "the stats were not detached, so each one keeps the whole autograd graph alive")
def ppo_stats_attached(old_logprobs, values, logprobs, vpreds, mask, advantages, returns, cliprange, cliprange_value, vf_coef):
    mean = _ref.masked_mean
    pg_loss, vf_loss, stats = _ppo(old_logprobs, values, logprobs, vpreds, mask, advantages, returns, cliprange,
                                   cliprange_value, vf_coef)
    stats["loss/policy"], stats["loss/value"] = pg_loss, vf_loss / vf_coef
    stats["loss/total"] = pg_loss + vf_loss
    stats["val/vpred"] = mean(vpreds, mask)
    stats["policy/ratio"] = mean(torch.exp(logprobs - old_logprobs), mask)
    return pg_loss, vf_loss, stats


@part3("ppo_loss", "where_needs_a_bool_mask",
       "the policy loss was masked with torch.where(mask, ...), which only accepts a bool mask")
def ppo_where(old_logprobs, values, logprobs, vpreds, mask, advantages, returns, cliprange, cliprange_value, vf_coef):
    return _ppo(old_logprobs, values, logprobs, vpreds, mask, advantages, returns, cliprange, cliprange_value, vf_coef,
                mean=lambda x, m: torch.where(m, x, 0.0).sum() / m.sum())


# --- GPTWithValueHead -----------------------------------------------------------------

@part3("GPTWithValueHead", "value_head_not_zero_initialised", "the value head kept nn.Linear's random initialisation instead of zeros")
class ValueHeadRandomInit(_ref.GPTWithValueHead):
    def __init__(self, lm):
        nn.Module.__init__(self)
        self.lm = lm
        self.value_head = nn.Linear(lm.config.d_model, 1)


@part3("GPTWithValueHead", "hidden_state_detached", "the hidden state was detached before the value head, so the value loss cannot train the trunk")
class ValueHeadDetached(_ref.GPTWithValueHead):
    def forward(self, input_ids, attention_mask=None):
        logits, hidden = self.lm(input_ids, attention_mask, return_hidden=True)
        return logits, self.value_head(hidden.detach()).squeeze(-1)


@part3("GPTWithValueHead", "value_head_on_logits", "the value head reads the logits (vocab wide) instead of the hidden state")
class ValueHeadOnLogits(_ref.GPTWithValueHead):
    def __init__(self, lm):
        nn.Module.__init__(self)
        self.lm = lm
        self.value_head = nn.Linear(lm.config.vocab_size, 1)
        nn.init.zeros_(self.value_head.weight)
        nn.init.zeros_(self.value_head.bias)

    def forward(self, input_ids, attention_mask=None):
        logits = self.lm(input_ids, attention_mask)
        return logits, self.value_head(logits).squeeze(-1)


@part3("GPTWithValueHead", "value_head_without_bias",
       "the value head was built with bias=False (a zero-initialised bias is still a parameter the critic needs)")
class ValueHeadNoBias(_ref.GPTWithValueHead):
    def __init__(self, lm):
        nn.Module.__init__(self)
        self.lm = lm
        self.value_head = nn.Linear(lm.config.d_model, 1, bias=False)
        nn.init.zeros_(self.value_head.weight)


@part3("GPTWithValueHead", "values_not_squeezed", "the values keep the head's trailing dimension of size 1 ([batch, seq, 1])")
class ValueHeadUnsqueezed(_ref.GPTWithValueHead):
    def forward(self, input_ids, attention_mask=None):
        logits, hidden = self.lm(input_ids, attention_mask, return_hidden=True)
        return logits, self.value_head(hidden)


# --- create_reference_model -----------------------------------------------------------

@part3("create_reference_model", "returns_the_policy_itself", "the policy itself was returned, so the reference moves with every update")
def reference_is_policy(model):
    return model


@part3("create_reference_model", "shallow_copy_shares_parameters", "a shallow copy (copy.copy) was made: it shares the policy's parameters")
def reference_shallow(model):
    reference = copy.copy(model)
    return reference.eval()


@part3("create_reference_model", "left_trainable", "the copy's parameters still require grad")
def reference_trainable(model):
    return copy.deepcopy(model).eval()


@part3("create_reference_model", "left_in_train_mode", "the copy was left in train mode (dropout makes its log-probs random)")
def reference_train_mode(model):
    reference = copy.deepcopy(model)
    for p in reference.parameters():
        p.requires_grad_(False)
    return reference


@part3("create_reference_model", "froze_the_policy", "requires_grad was turned off on the policy before copying, freezing the policy too")
def reference_froze_policy(model):
    for p in model.parameters():
        p.requires_grad_(False)
    return copy.deepcopy(model).eval()


# --- batched_forward_pass -------------------------------------------------------------

def _forward_pass(model, queries, responses, temperature, pad_id, return_logits, *, lp_shift=-1, v_shift=-1,
                  use_temperature=True, zero_padding=True, left_pad_queries=False, mask_from_ids=False):
    device = queries[0].device
    if left_pad_queries:
        q_ids, _ = pad_batch(queries, side="left", pad_id=pad_id)
        r_ids, _ = pad_batch(responses, side="right", pad_id=pad_id)
        input_ids = torch.cat([q_ids, r_ids], dim=1)
        logits, values = model(input_ids)
        query_lens = torch.full((len(queries),), q_ids.shape[1])
    else:
        input_ids, mask = pad_batch([torch.cat([q, r]) for q, r in zip(queries, responses)], side="right", pad_id=pad_id)
        logits, values = model(input_ids, mask)
        query_lens = torch.tensor([len(q) for q in queries])
    if use_temperature:
        logits = logits / temperature
    resp_lens = torch.tensor([len(r) for r in responses])
    R = int(resp_lens.max())
    offsets = torch.arange(R)
    masks = (offsets[None] < resp_lens[:, None]).to(logits.dtype)
    if mask_from_ids:
        masks = (pad_batch(responses, side="right", pad_id=pad_id)[0] != pad_id).to(logits.dtype)
    T = input_ids.shape[1]
    lp_index = (query_lens[:, None] + lp_shift + offsets[None]).clamp(max=T - 1)
    v_index = (query_lens[:, None] + v_shift + offsets[None]).clamp(max=T - 1)
    resp_logits = torch.gather(logits, 1, lp_index[..., None].expand(-1, -1, logits.shape[-1]))
    labels, _ = pad_batch(responses, side="right", pad_id=pad_id)
    logprobs = _ref.logprobs_from_logits(resp_logits, labels.to(device))
    resp_values = torch.gather(values, 1, v_index)
    if zero_padding:
        logprobs, resp_values, resp_logits = logprobs * masks, resp_values * masks, resp_logits * masks[..., None]
    return logprobs, (resp_logits if return_logits else None), resp_values, masks


@part3("batched_forward_pass", "off_by_one", "the log-prob of token i was read from position i instead of i − 1 (the output at i predicts token i + 1)")
def forward_off_by_one(model, queries, responses, *, temperature=1.0, pad_id=0, return_logits=False):
    return _forward_pass(model, queries, responses, temperature, pad_id, return_logits, lp_shift=0, v_shift=0)


@part3("batched_forward_pass", "temperature_ignored", "the logits were not divided by the sampling temperature")
def forward_no_temperature(model, queries, responses, *, temperature=1.0, pad_id=0, return_logits=False):
    return _forward_pass(model, queries, responses, temperature, pad_id, return_logits, use_temperature=False)


@part3("batched_forward_pass", "value_at_token_position", "the value of token t was read at the token's own position instead of the state before it")
def forward_value_shifted(model, queries, responses, *, temperature=1.0, pad_id=0, return_logits=False):
    return _forward_pass(model, queries, responses, temperature, pad_id, return_logits, v_shift=0)


@part3("batched_forward_pass", "padding_not_zeroed", "the outputs at padding positions were not zeroed")
def forward_padding_kept(model, queries, responses, *, temperature=1.0, pad_id=0, return_logits=False):
    return _forward_pass(model, queries, responses, temperature, pad_id, return_logits, zero_padding=False)


@part3("batched_forward_pass", "left_padded_queries_without_mask",
       "queries were left-padded and run without an attention mask, so padding shifts positions and is attended to")
def forward_left_padded(model, queries, responses, *, temperature=1.0, pad_id=0, return_logits=False):
    return _forward_pass(model, queries, responses, temperature, pad_id, return_logits, left_pad_queries=True)


@part3("batched_forward_pass", "wrapped_in_no_grad",
       "the forward pass ran under torch.no_grad(), so the PPO update gets log-probs and values without gradients")
def forward_no_grad(model, queries, responses, *, temperature=1.0, pad_id=0, return_logits=False):
    with torch.no_grad():
        return _forward_pass(model, queries, responses, temperature, pad_id, return_logits)


# --- preference_loss ------------------------------------------------------------------

@part3("preference_loss", "log_of_sigmoid", "−log(sigmoid(x)) was used instead of −logsigmoid(x): it overflows to inf for large gaps")
def pref_log_sigmoid(r_chosen, r_rejected, margin=None):
    diff = r_chosen - r_rejected - (0 if margin is None else margin)
    return -torch.log(torch.sigmoid(diff)).mean()


@part3("preference_loss", "chosen_rejected_swapped", "rejected minus chosen was used (the model learns to prefer the rejected texts)")
def pref_swapped(r_chosen, r_rejected, margin=None):
    diff = r_rejected - r_chosen - (0 if margin is None else margin)
    return -F.logsigmoid(diff).mean()


@part3("preference_loss", "margin_added", "the margin was added instead of subtracted")
def pref_margin_added(r_chosen, r_rejected, margin=None):
    diff = r_chosen - r_rejected + (0 if margin is None else margin)
    return -F.logsigmoid(diff).mean()


@part3("preference_loss", "sum_instead_of_mean", "the loss was summed over pairs instead of averaged")
def pref_sum(r_chosen, r_rejected, margin=None):
    diff = r_chosen - r_rejected - (0 if margin is None else margin)
    return -F.logsigmoid(diff).sum()


# --- RewardModel ----------------------------------------------------------------------

class _RewardReadout(_ref.RewardModel):
    def _pool(self, hidden, attention_mask):
        raise NotImplementedError

    def forward(self, input_ids, attention_mask):
        _, hidden = self.lm(input_ids, attention_mask, return_hidden=True)
        return self.head(self._pool(hidden, attention_mask)).squeeze(-1)


@part3("RewardModel", "last_column", "the reward was read at the last column, which is padding for every row but the longest")
class RewardLastColumn(_RewardReadout):
    def _pool(self, hidden, attention_mask):
        return hidden[:, -1]


@part3("RewardModel", "first_token", "the reward was read at the first token, which has seen nothing of the text")
class RewardFirstToken(_RewardReadout):
    def _pool(self, hidden, attention_mask):
        return hidden[:, 0]


@part3("RewardModel", "mean_pooled", "the hidden states of all positions were averaged (padding and half-written prefixes included)")
class RewardMeanPooled(_RewardReadout):
    def _pool(self, hidden, attention_mask):
        return hidden.mean(dim=1)


@part3("RewardModel", "mask_sum_minus_one", "attention_mask.sum(1) − 1 was used as the last index, which is wrong for left-padded rows")
class RewardSumIndex(_RewardReadout):
    def _pool(self, hidden, attention_mask):
        return hidden[torch.arange(hidden.shape[0]), attention_mask.sum(1) - 1]


# --- PPOTrainer -----------------------------------------------------------------------

def _trainer_step(self, queries, responses, scores, response_masks=None, *, use_temperature=True, ref_is_policy=False,
                  update_kl=True, dropout_on=False, shuffle=True, kind_ignored=False, clip="config", cliprange_swap=False,
                  entropy_sign=-1.0, kl_token_mean=False, std_of_one="zero", stats_as_tensors=False, ref_grad=False,
                  tool_masked_in_rollout=True, tool_masked_in_minibatch=True, tool_masked_in_logprob_stats=True):
    """PPOTrainer.step with switches; each mistake below flips one."""
    rollout_tool_masks = response_masks if tool_masked_in_rollout else None
    minibatch_tool_masks = response_masks if tool_masked_in_minibatch else None
    cfg = self.config
    batch = len(queries)
    temperature = cfg.temperature if use_temperature else 1.0
    kind = "kl" if kind_ignored else cfg.kl_penalty

    def forward(model, q, r, return_logits=False):
        return _ref.batched_forward_pass(model, q, r, temperature=temperature, pad_id=self.pad_id, return_logits=return_logits)

    self.model.train(dropout_on)
    with torch.no_grad():
        old_logprobs, logits, values, masks = forward(self.model, queries, responses, True)
        length_masks = masks
        masks = _ref.model_token_masks(masks, responses, rollout_tool_masks)
        entropy = _ref.masked_mean(_ref.entropy_from_logits(logits), masks)
    with torch.enable_grad() if ref_grad else torch.no_grad():
        ref_logprobs, ref_logits, _, _ = forward(self.model if ref_is_policy else self.ref_model, queries, responses,
                                                 kind == "full")
    ref_logprobs = ref_logprobs.detach()
    kl_coef = self.kl_ctl.value
    if kind == "full":
        lp, ref_lp = F.log_softmax(logits, -1), F.log_softmax(ref_logits.detach(), -1)
    else:
        lp, ref_lp = old_logprobs, ref_logprobs
    rewards, non_score, kls = _ref.compute_rewards(scores, lp, ref_lp, masks, kl_coef, kind)
    values, advantages, returns = _ref.compute_advantages(values, rewards, masks, cfg.gamma, cfg.lam)
    collected = {}
    for _ in range(cfg.ppo_epochs):
        order = torch.randperm(batch, generator=self.generator) if shuffle else torch.arange(batch)
        for idx in order.split(cfg.mini_batch_size):
            mq, mr = [queries[i] for i in idx.tolist()], [responses[i] for i in idx.tolist()]
            new_lp, new_logits, vpreds, mm = forward(self.model, mq, mr, True)
            if minibatch_tool_masks is not None:
                mm = _ref.model_token_masks(mm, mr, [minibatch_tool_masks[i] for i in idx.tolist()])
            w = mm.shape[1]
            cliprange, cliprange_value = ((cfg.cliprange_value, cfg.cliprange) if cliprange_swap
                                          else (cfg.cliprange, cfg.cliprange_value))
            pg, vf, stats = _ref.ppo_loss(old_logprobs[idx, :w], values[idx, :w], new_lp, vpreds, mm, advantages[idx, :w],
                                          returns[idx, :w], cliprange, cliprange_value, cfg.vf_coef)
            ent = _ref.masked_mean(_ref.entropy_from_logits(new_logits), mm)
            loss = pg + vf + entropy_sign * cfg.ent_coef * ent
            self.optimizer.zero_grad()
            loss.backward()
            if clip == "config" and cfg.max_grad_norm is not None:
                nn.utils.clip_grad_norm_(self.model.parameters(), cfg.max_grad_norm)
            elif clip == "default_when_none":
                nn.utils.clip_grad_norm_(self.model.parameters(), cfg.max_grad_norm or 1.0)
            self.optimizer.step()
            stats["policy/entropy"] = ent.detach()
            for k, v in stats.items():
                collected.setdefault(k, []).append(v)
    mean_kl = kls.sum(1).mean()
    if update_kl:
        self.kl_ctl.update((_ref.masked_mean(kls, masks) if kl_token_mean else mean_kl).item(), batch)
    std = scores.std().item() if batch > 1 or std_of_one == "nan" else 0.0
    stat_masks = masks if tool_masked_in_logprob_stats else length_masks
    out = {
        "objective/kl": mean_kl.item(), "objective/kl_coef": kl_coef, "objective/entropy": entropy.item(),
        "objective/logprobs": (old_logprobs * stat_masks).sum(1).mean().item(),
        "objective/ref_logprobs": (ref_logprobs * stat_masks).sum(1).mean().item(),
        "ppo/mean_scores": scores.mean().item(), "ppo/std_scores": std,
        "ppo/mean_non_score_reward": non_score.sum(1).mean().item(), "tokens/responses_len_mean": masks.sum(1).mean().item(),
    }
    out.update({f"ppo/{k}": torch.stack(v).mean().item() for k, v in collected.items()})
    if stats_as_tensors:
        out = {k: torch.tensor(v) for k, v in out.items()}
    return out


@part3("PPOTrainer", "temperature_forgotten", "the forward passes forgot the sampling temperature (logits not divided by it)")
class TrainerNoTemperature(_ref.PPOTrainer):
    def step(self, queries, responses, scores, response_masks=None):
        return _trainer_step(self, queries, responses, scores, response_masks, use_temperature=False)


@part3("PPOTrainer", "reference_is_the_policy", "the reference log-probs were computed with the policy, so the KL is always 0")
class TrainerRefIsPolicy(_ref.PPOTrainer):
    def step(self, queries, responses, scores, response_masks=None):
        return _trainer_step(self, queries, responses, scores, response_masks, ref_is_policy=True)


@part3("PPOTrainer", "kl_controller_not_updated", "self.kl_ctl.update was never called, so β never adapts")
class TrainerNoKLUpdate(_ref.PPOTrainer):
    def step(self, queries, responses, scores, response_masks=None):
        return _trainer_step(self, queries, responses, scores, response_masks, update_kl=False)


@part3("PPOTrainer", "dropout_left_on", "the policy was left in train mode: dropout makes the log-probs random")
class TrainerDropout(_ref.PPOTrainer):
    def step(self, queries, responses, scores, response_masks=None):
        return _trainer_step(self, queries, responses, scores, response_masks, dropout_on=True)


@part3("PPOTrainer", "minibatches_not_shuffled", "the minibatches were taken in order instead of from a permutation drawn from self.generator")
class TrainerNoShuffle(_ref.PPOTrainer):
    def step(self, queries, responses, scores, response_masks=None):
        return _trainer_step(self, queries, responses, scores, response_masks, shuffle=False)


@part3("PPOTrainer", "kl_penalty_kind_ignored", "config.kl_penalty was ignored (the default 'kl' estimator was always used)")
class TrainerKindIgnored(_ref.PPOTrainer):
    def step(self, queries, responses, scores, response_masks=None):
        return _trainer_step(self, queries, responses, scores, response_masks, kind_ignored=True)


@part3("PPOTrainer", "gradient_never_clipped", "the gradient norm was never clipped to config.max_grad_norm")
class TrainerNoClip(_ref.PPOTrainer):
    def step(self, queries, responses, scores, response_masks=None):
        return _trainer_step(self, queries, responses, scores, response_masks, clip=None)


@part3("PPOTrainer", "clipped_when_max_grad_norm_is_none",
       "the gradient was clipped to a default norm of 1 when config.max_grad_norm is None (None means no clipping)")
class TrainerClipsNone(_ref.PPOTrainer):
    def step(self, queries, responses, scores, response_masks=None):
        return _trainer_step(self, queries, responses, scores, response_masks, clip="default_when_none")


@part3("PPOTrainer", "clipranges_swapped", "cliprange and cliprange_value were passed to ppo_loss in each other's place")
class TrainerClipRangesSwapped(_ref.PPOTrainer):
    def step(self, queries, responses, scores, response_masks=None):
        return _trainer_step(self, queries, responses, scores, response_masks, cliprange_swap=True)


@part3("PPOTrainer", "entropy_bonus_added_to_loss",
       "ent_coef · entropy was added to the loss (it is a bonus: subtract it from the loss we minimise)")
class TrainerEntropyAdded(_ref.PPOTrainer):
    def step(self, queries, responses, scores, response_masks=None):
        return _trainer_step(self, queries, responses, scores, response_masks, entropy_sign=1.0)


@part3("PPOTrainer", "kl_controller_fed_token_mean",
       "the KL controller was given the mean KL per token instead of the mean per-sequence KL (sum over tokens)")
class TrainerTokenMeanKL(_ref.PPOTrainer):
    def step(self, queries, responses, scores, response_masks=None):
        return _trainer_step(self, queries, responses, scores, response_masks, kl_token_mean=True)


@part3("PPOTrainer", "std_of_one_score_is_nan",
       "ppo/std_scores is NaN for a batch of one (the unbiased std of one number; the docstring asks for 0.0)")
class TrainerStdNaN(_ref.PPOTrainer):
    def step(self, queries, responses, scores, response_masks=None):
        return _trainer_step(self, queries, responses, scores, response_masks, std_of_one="nan")


@part3("PPOTrainer", "stats_are_tensors", "the stats are returned as tensors instead of Python floats")
class TrainerTensorStats(_ref.PPOTrainer):
    def step(self, queries, responses, scores, response_masks=None):
        return _trainer_step(self, queries, responses, scores, response_masks, stats_as_tensors=True)


@part3("PPOTrainer", "reference_run_with_grad",
       "the reference model ran with autograd on (outside torch.no_grad()), building a graph nobody uses")
class TrainerRefWithGrad(_ref.PPOTrainer):
    def step(self, queries, responses, scores, response_masks=None):
        return _trainer_step(self, queries, responses, scores, response_masks, ref_grad=True)


@part3("PPOTrainer", "response_masks_ignored",
       "response_masks were ignored: the tool's tokens were trained on as if the policy had written them (their "
       "log-prob ratio, KL charge and advantage all counted), and the score went on the response's last token "
       "even when a tool wrote it")
class TrainerIgnoresToolMasks(_ref.PPOTrainer):
    def step(self, queries, responses, scores, response_masks=None):
        return _trainer_step(self, queries, responses, scores, response_masks, tool_masked_in_rollout=False,
                             tool_masked_in_minibatch=False, tool_masked_in_logprob_stats=False)


@part3("PPOTrainer", "response_masks_only_in_the_loss",
       "response_masks were applied to the minibatches' masks (the loss) but not to the rollout's: the KL charge, "
       "the score's position, the advantages and the stats still counted the tool's tokens")
class TrainerToolMasksOnlyInLoss(_ref.PPOTrainer):
    def step(self, queries, responses, scores, response_masks=None):
        return _trainer_step(self, queries, responses, scores, response_masks, tool_masked_in_rollout=False,
                             tool_masked_in_logprob_stats=False)


@part3("PPOTrainer", "response_masks_only_in_the_rollout",
       "response_masks were applied to the rollout's masks but not to the minibatches' forward passes: the loss "
       "still took the ratio (and the value error) of the tool's tokens")
class TrainerToolMasksOnlyInRollout(_ref.PPOTrainer):
    def step(self, queries, responses, scores, response_masks=None):
        return _trainer_step(self, queries, responses, scores, response_masks, tool_masked_in_minibatch=False)


@part3("PPOTrainer", "logprob_stats_count_tool_tokens",
       "objective/logprobs and objective/ref_logprobs summed every real token, the tool's included (sum over the "
       "policy's tokens: multiply by the masks)")
class TrainerLogprobStatsUnmasked(_ref.PPOTrainer):
    def step(self, queries, responses, scores, response_masks=None):
        return _trainer_step(self, queries, responses, scores, response_masks, tool_masked_in_logprob_stats=False)


@part3("batched_forward_pass", "mask_from_token_ids",
       "the masks were computed from the token ids (response != pad_id), so a PAD token sampled inside a response "
       "is masked out; masks must come from the lengths")
def forward_mask_from_ids(model, queries, responses, *, temperature=1.0, pad_id=0, return_logits=False):
    return _forward_pass(model, queries, responses, temperature, pad_id, return_logits, mask_from_ids=True)
