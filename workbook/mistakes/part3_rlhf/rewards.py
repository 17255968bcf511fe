"""Known-wrong versions of Part 3's rewards, KL controller, advantages and PPO loss."""

from __future__ import annotations

from functools import partial

import numpy as np
import torch

from solutions import part3_rlhf as _ref
from workbook.mistakes import mistake

part3 = partial(mistake, "part3_rlhf")


# --- compute_rewards ------------------------------------------------------------------

def _rewards(scores, logprobs, ref_logprobs, masks, kl_coef, kind, *, sign=-1.0, where="last_real", clone=True, mask_kl=True,
             replace=False):
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
    if replace:
        rewards[rows, col] = scores
    else:
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


@part3("compute_rewards", "score_replaces_the_last_kl",
       "the score was written over the last token's reward (rewards[b, last] = score) instead of added to it: the "
       "last real token lost its KL penalty")
def rewards_score_replaces(scores, logprobs, ref_logprobs, masks, kl_coef, kind="kl"):
    return _rewards(scores, logprobs, ref_logprobs, masks, kl_coef, kind, replace=True)


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


@part3("compute_advantages", "advantages_not_masked_after_whitening",
       "the whitened advantages were not multiplied by the mask: every padded position holds −mean/std instead of 0")
def adv_whitened_unmasked(values, rewards, mask, gamma, lam):
    values, advantages, returns = _ref.compute_advantages(values, rewards, mask, gamma, lam)
    with torch.no_grad():
        m = mask.to(values.dtype)
        return values, _ref.masked_whiten(returns - values, m), returns  # returns − values: the raw advantages


@part3("compute_advantages", "returns_not_masked",
       "the returns were not multiplied by the mask, so a gap inside a mask (1 1 0 1) keeps a return")
def adv_returns_unmasked(values, rewards, mask, gamma, lam):
    return _advantages(values, rewards, mask, gamma, lam)


# --- ppo_loss -------------------------------------------------------------------------

def _ppo(old_logprobs, values, logprobs, vpreds, mask, advantages, returns, cliprange, cliprange_value, vf_coef, *,
         combine=torch.maximum, mean=None, v_centre="values", ratio_sign=1.0, coef_on_vf=True, clipfrac="loss",
         vf_half=0.5, coef_in_value_stat=False):
    mean = mean or _ref.masked_mean
    ratio = torch.exp(ratio_sign * (logprobs - old_logprobs))
    pg1 = -advantages * ratio
    pg2 = -advantages * torch.clamp(ratio, 1 - cliprange, 1 + cliprange)
    pg_loss = mean(combine(pg1, pg2), mask)
    centre = values if v_centre == "values" else returns
    vclip = _ref.clip_by_value(vpreds, centre - cliprange_value, centre + cliprange_value)
    v1, v2 = (vpreds - returns) ** 2, (vclip - returns) ** 2
    vf_loss = vf_half * mean(torch.maximum(v1, v2), mask)
    clipped = (pg2 > pg1) if clipfrac == "loss" else (ratio < 1 - cliprange) | (ratio > 1 + cliprange)
    stats = {
        "loss/policy": pg_loss, "loss/value": vf_coef * vf_loss if coef_in_value_stat else vf_loss,
        "loss/total": pg_loss + vf_coef * vf_loss,
        "policy/approxkl": 0.5 * mean((logprobs - old_logprobs) ** 2, mask),
        "policy/policykl": mean(old_logprobs - logprobs, mask),
        "policy/clipfrac": mean(clipped.float(), mask),
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


@part3("ppo_loss", "clipfrac_counts_ratios_outside_the_range",
       "policy/clipfrac counted the ratios outside [1 − ε, 1 + ε]; the documented fraction counts the tokens where "
       "the clipped loss is the larger one (−A·clip(ratio) > −A·ratio), which depends on the advantage's sign")
def ppo_clipfrac_range(old_logprobs, values, logprobs, vpreds, mask, advantages, returns, cliprange, cliprange_value, vf_coef):
    return _ppo(old_logprobs, values, logprobs, vpreds, mask, advantages, returns, cliprange, cliprange_value, vf_coef,
                clipfrac="range")


@part3("ppo_loss", "value_loss_without_half", "the value loss lacks its factor ½ (½ · mean(max(...)))")
def ppo_vf_no_half(old_logprobs, values, logprobs, vpreds, mask, advantages, returns, cliprange, cliprange_value, vf_coef):
    return _ppo(old_logprobs, values, logprobs, vpreds, mask, advantages, returns, cliprange, cliprange_value, vf_coef,
                vf_half=1.0)


@part3("ppo_loss", "loss_value_stat_includes_vf_coef",
       "stats['loss/value'] was the returned value loss, vf_coef included; it is the loss before vf_coef (TRL's quirk)")
def ppo_value_stat_with_coef(old_logprobs, values, logprobs, vpreds, mask, advantages, returns, cliprange, cliprange_value,
                             vf_coef):
    return _ppo(old_logprobs, values, logprobs, vpreds, mask, advantages, returns, cliprange, cliprange_value, vf_coef,
                coef_in_value_stat=True)


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
