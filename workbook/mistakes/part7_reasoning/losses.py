"""Known-wrong versions of Part 7's losses (clip-higher, GSPO, CISPO), with and without Part 10's
importance weights."""

from __future__ import annotations

from functools import partial

import torch

from solutions import part7_reasoning as _p7
from workbook.mistakes import mistake

part7 = partial(mistake, "part7_reasoning")


# --- the losses -------------------------------------------------------------------------

@part7("clip_higher_loss", "symmetric_clip", "eps_low was used on both sides; eps_high was ignored")
def clip_higher_symmetric(logprobs, old_logprobs, advantages, mask, eps_low=0.2, eps_high=0.28, normalisation="token",
                          weights=None):
    return _p7.clip_higher_loss(logprobs, old_logprobs, advantages, mask, eps_low, eps_low, normalisation, weights=weights)


@part7("clip_higher_loss", "eps_swapped", "eps_low and eps_high were swapped (1 − eps_high … 1 + eps_low)")
def clip_higher_swapped(logprobs, old_logprobs, advantages, mask, eps_low=0.2, eps_high=0.28, normalisation="token",
                        weights=None):
    return _p7.clip_higher_loss(logprobs, old_logprobs, advantages, mask, eps_high, eps_low, normalisation, weights=weights)


@part7("clip_higher_loss", "normalisation_ignored", "every normalisation was computed as the token mean")
def clip_higher_token_only(logprobs, old_logprobs, advantages, mask, eps_low=0.2, eps_high=0.28, normalisation="token",
                           weights=None):
    if normalisation not in ("token", "sequence"):
        raise ValueError("unknown normalisation")
    return _p7.clip_higher_loss(logprobs, old_logprobs, advantages, mask, eps_low, eps_high, "token", weights=weights)


@part7("clip_higher_loss", "stats_keep_the_graph", "the stats were returned without .detach(): they keep the autograd graph")
def clip_higher_graph(logprobs, old_logprobs, advantages, mask, eps_low=0.2, eps_high=0.28, normalisation="token", weights=None):
    loss, stats = _p7.clip_higher_loss(logprobs, old_logprobs, advantages, mask, eps_low, eps_high, normalisation,
                                       weights=weights)
    m = mask.to(logprobs.dtype)
    stats["policy/ratio"] = (torch.exp(logprobs - old_logprobs) * m).sum() / m.sum().clamp(min=1.0)
    return loss, stats


@part7("clip_higher_loss", "clipfrac_ignores_advantage_sign",
       "the clip fractions counted every ratio outside the range, whatever the advantage's sign")
def clip_higher_clipfrac(logprobs, old_logprobs, advantages, mask, eps_low=0.2, eps_high=0.28, normalisation="token",
                         weights=None):
    loss, stats = _p7.clip_higher_loss(logprobs, old_logprobs, advantages, mask, eps_low, eps_high, normalisation,
                                       weights=weights)
    m = mask.to(logprobs.dtype)
    ratio, total = torch.exp(logprobs - old_logprobs).detach(), m.sum().clamp(min=1.0)
    stats["policy/clipfrac_low"] = ((ratio < 1 - eps_low).to(m.dtype) * m).sum() / total
    stats["policy/clipfrac_high"] = ((ratio > 1 + eps_high).to(m.dtype) * m).sum() / total
    return loss, stats


@part7("clip_higher_loss", "nan_for_an_empty_mask",
       "the loss was a plain masked mean: 0/0 = NaN when every row is masked out")
def clip_higher_nan(logprobs, old_logprobs, advantages, mask, eps_low=0.2, eps_high=0.28, normalisation="token", weights=None):
    loss, stats = _p7.clip_higher_loss(logprobs, old_logprobs, advantages, mask, eps_low, eps_high, normalisation,
                                       weights=weights)
    if mask.to(logprobs.dtype).sum() == 0:
        loss = loss * float("nan")
    return loss, stats


def _gspo(logprobs, old_logprobs, advantages, mask, eps_low, eps_high, log_ratio, weights=None):
    m = mask.to(logprobs.dtype)
    has = (m.sum(dim=1) > 0).to(m.dtype)
    s = torch.exp(log_ratio(logprobs - old_logprobs, m))
    per_seq = torch.maximum(-advantages * s, -advantages * torch.clamp(s, 1 - eps_low, 1 + eps_high))
    if weights is not None:  # the docstring's weighting: the row's mean weight over its real tokens
        per_seq = per_seq * ((weights.detach() * m).sum(dim=1) / m.sum(dim=1).clamp(min=1.0))
    rows = has.sum().clamp(min=1.0)
    stats = {
        "policy/clipfrac_low": (((s < 1 - eps_low) & (advantages < 0)).to(m.dtype) * has).sum() / rows,
        "policy/clipfrac_high": (((s > 1 + eps_high) & (advantages > 0)).to(m.dtype) * has).sum() / rows,
        "policy/ratio": (s * has).sum() / rows,
    }
    return (per_seq * has).sum() / rows, {k: v.detach() for k, v in stats.items()}


@part7("gspo_loss", "summed_log_ratio", "the log-ratio was summed over tokens (the raw sequence ratio), not averaged")
def gspo_summed(logprobs, old_logprobs, advantages, mask, eps_low=3e-4, eps_high=4e-4, weights=None):
    return _gspo(logprobs, old_logprobs, advantages, mask, eps_low, eps_high, lambda d, m: (d * m).sum(dim=1), weights)


@part7("gspo_loss", "divided_by_padded_width",
       "the log-ratio was averaged over the padded width instead of each row's real tokens")
def gspo_padded(logprobs, old_logprobs, advantages, mask, eps_low=3e-4, eps_high=4e-4, weights=None):
    return _gspo(logprobs, old_logprobs, advantages, mask, eps_low, eps_high, lambda d, m: (d * m).sum(dim=1) / m.shape[1],
                 weights)


@part7("gspo_loss", "token_level_ratio",
       "the ratio was clipped per token (clip-higher with GSPO's ranges) instead of once per sequence")
def gspo_per_token(logprobs, old_logprobs, advantages, mask, eps_low=3e-4, eps_high=4e-4, weights=None):
    loss, _ = _p7.clip_higher_loss(logprobs, old_logprobs, advantages, mask, eps_low, eps_high, "sequence", weights=weights)
    _, stats = _p7.gspo_loss(logprobs, old_logprobs, advantages, mask, eps_low, eps_high, weights=weights)
    return loss, stats


@part7("gspo_loss", "eps_swapped", "eps_low and eps_high were swapped")
def gspo_swapped(logprobs, old_logprobs, advantages, mask, eps_low=3e-4, eps_high=4e-4, weights=None):
    return _p7.gspo_loss(logprobs, old_logprobs, advantages, mask, eps_high, eps_low, weights=weights)


@part7("gspo_loss", "constant_zero_for_an_empty_mask",
       "an all-zero mask returned torch.tensor(0.0), a 0 with no graph: loss.backward() raises on it")
def gspo_constant_zero(logprobs, old_logprobs, advantages, mask, eps_low=3e-4, eps_high=4e-4, weights=None):
    loss, stats = _p7.gspo_loss(logprobs, old_logprobs, advantages, mask, eps_low, eps_high, weights=weights)
    return (torch.tensor(0.0) if mask.to(logprobs.dtype).sum() == 0 else loss), stats


@part7("cispo_loss", "weight_not_detached", "the clipped weight was not detached: its own gradient joined the update")
def cispo_no_detach(logprobs, old_logprobs, advantages, mask, eps_low=1.0, eps_high=0.28, normalisation="token", weights=None):
    _, stats = _p7.cispo_loss(logprobs, old_logprobs, advantages, mask, eps_low, eps_high, normalisation, weights=weights)
    m = mask.to(logprobs.dtype)
    w = torch.clamp(torch.exp(logprobs - old_logprobs), 1 - eps_low, 1 + eps_high)
    per_tok = -w * advantages[:, None] * logprobs
    return _reduce(per_tok, m, normalisation, weights), stats


def _reduce(per_tok, m, normalisation, weights=None):
    """The docstrings' reduction, with the importance weights (if any) on each token's term, detached."""
    if weights is not None:
        per_tok = per_tok * weights.detach()
    lengths = m.sum(dim=1)
    if normalisation == "token":
        return (per_tok * m).sum() / lengths.sum().clamp(min=1.0)
    if normalisation != "sequence":
        raise ValueError("unknown normalisation")
    has = (lengths > 0).to(m.dtype)
    return ((per_tok * m).sum(dim=1) / lengths.clamp(min=1.0) * has).sum() / has.sum().clamp(min=1.0)


@part7("cispo_loss", "ppo_clip_drops_tokens",
       "PPO's clipped ratio was used: tokens outside the range lose their gradient, which CISPO exists to keep")
def cispo_ppo(logprobs, old_logprobs, advantages, mask, eps_low=1.0, eps_high=0.28, normalisation="token", weights=None):
    _, stats = _p7.cispo_loss(logprobs, old_logprobs, advantages, mask, eps_low, eps_high, normalisation, weights=weights)
    loss, _ = _p7.clip_higher_loss(logprobs, old_logprobs, advantages, mask, eps_low, eps_high, normalisation, weights=weights)
    return loss, stats


@part7("cispo_loss", "ratio_times_advantage",
       "the loss was −w·A·ratio (PPO's surrogate with a detached weight) instead of −w·A·log π")
def cispo_ratio(logprobs, old_logprobs, advantages, mask, eps_low=1.0, eps_high=0.28, normalisation="token", weights=None):
    _, stats = _p7.cispo_loss(logprobs, old_logprobs, advantages, mask, eps_low, eps_high, normalisation, weights=weights)
    ratio = torch.exp(logprobs - old_logprobs)
    w = torch.clamp(ratio, 1 - eps_low, 1 + eps_high).detach()
    return _reduce(-w * advantages[:, None] * ratio, mask.to(logprobs.dtype), normalisation, weights), stats


@part7("cispo_loss", "weight_not_clipped", "the importance weight was not clipped at 1 + eps_high")
def cispo_unclipped(logprobs, old_logprobs, advantages, mask, eps_low=1.0, eps_high=0.28, normalisation="token", weights=None):
    return _p7.cispo_loss(logprobs, old_logprobs, advantages, mask, eps_low, float("inf"), normalisation, weights=weights)


@part7("cispo_loss", "clipfrac_only_for_positive_advantages",
       "the clip fractions counted only tokens where PPO's clip would bind (by advantage sign); CISPO clips every weight")
def cispo_clipfrac(logprobs, old_logprobs, advantages, mask, eps_low=1.0, eps_high=0.28, normalisation="token", weights=None):
    loss, _ = _p7.cispo_loss(logprobs, old_logprobs, advantages, mask, eps_low, eps_high, normalisation, weights=weights)
    _, stats = _p7.clip_higher_loss(logprobs, old_logprobs, advantages, mask, eps_low, eps_high, normalisation, weights=weights)
    return loss, stats


def _all_rows_mean(per_tok, m, weights=None):
    """The sequence mean over *every* row: a masked-out row adds 0 to the sum and 1 to the count."""
    if weights is not None:
        per_tok = per_tok * weights.detach()
    return ((per_tok * m).sum(dim=1) / m.sum(dim=1).clamp(min=1.0)).mean()


@part7("clip_higher_loss", "masked_out_rows_counted",
       "\"sequence\" averaged the row means over every row, masked-out ones included (a row with no real token "
       "adds 0 to the sum and 1 to the count); the docstring averages over rows with n_b > 0")
def clip_higher_all_rows(logprobs, old_logprobs, advantages, mask, eps_low=0.2, eps_high=0.28, normalisation="token",
                         weights=None):
    loss, stats = _p7.clip_higher_loss(logprobs, old_logprobs, advantages, mask, eps_low, eps_high, normalisation,
                                       weights=weights)
    if normalisation != "sequence":
        return loss, stats
    ratio, a = torch.exp(logprobs - old_logprobs), advantages[:, None]
    per_tok = torch.maximum(-a * ratio, -a * torch.clamp(ratio, 1 - eps_low, 1 + eps_high))
    return _all_rows_mean(per_tok, mask.to(logprobs.dtype), weights), stats


@part7("cispo_loss", "masked_out_rows_counted",
       "\"sequence\" averaged the row means over every row, masked-out ones included (a row with no real token "
       "adds 0 to the sum and 1 to the count); the docstring averages over rows with n_b > 0")
def cispo_all_rows(logprobs, old_logprobs, advantages, mask, eps_low=1.0, eps_high=0.28, normalisation="token", weights=None):
    loss, stats = _p7.cispo_loss(logprobs, old_logprobs, advantages, mask, eps_low, eps_high, normalisation, weights=weights)
    if normalisation != "sequence":
        return loss, stats
    w = torch.clamp(torch.exp(logprobs - old_logprobs), 1 - eps_low, 1 + eps_high).detach()
    return _all_rows_mean(-w * advantages[:, None] * logprobs, mask.to(logprobs.dtype), weights), stats


@part7("gspo_loss", "masked_out_rows_counted",
       "the row losses were averaged over every row (divided by the batch size), masked-out rows included; the "
       "docstring averages over rows with n_b > 0")
def gspo_all_rows(logprobs, old_logprobs, advantages, mask, eps_low=3e-4, eps_high=4e-4, weights=None):
    loss, stats = _p7.gspo_loss(logprobs, old_logprobs, advantages, mask, eps_low, eps_high, weights=weights)
    rows = (mask.to(logprobs.dtype).sum(dim=1) > 0).sum()
    return loss * rows / logprobs.shape[0], stats


@part7("gspo_loss", "token_mean_of_the_sequence_loss",
       "each row's loss was copied onto its tokens and averaged over all real tokens, so long rows weigh more; the "
       "docstring averages the row losses over rows")
def gspo_token_mean(logprobs, old_logprobs, advantages, mask, eps_low=3e-4, eps_high=4e-4, weights=None):
    _, stats = _p7.gspo_loss(logprobs, old_logprobs, advantages, mask, eps_low, eps_high, weights=weights)
    m = mask.to(logprobs.dtype)
    s = torch.exp(((logprobs - old_logprobs) * m).sum(dim=1) / m.sum(dim=1).clamp(min=1.0))
    per_seq = torch.maximum(-advantages * s, -advantages * torch.clamp(s, 1 - eps_low, 1 + eps_high))
    per_tok = per_seq[:, None].expand_as(m)
    if weights is not None:
        per_tok = per_tok * weights.detach()
    return (per_tok * m).sum() / m.sum().clamp(min=1.0), stats


@part7("gspo_loss", "arithmetic_mean_of_token_ratios",
       "s_b was the arithmetic mean of the token ratios, Σ ratio·m / n_b, instead of their geometric mean "
       "exp(Σ log-ratio·m / n_b)")
def gspo_arithmetic(logprobs, old_logprobs, advantages, mask, eps_low=3e-4, eps_high=4e-4, weights=None):
    m = mask.to(logprobs.dtype)
    n = m.sum(dim=1)

    def log_ratio(d, m):  # the log of the arithmetic mean (0, s = 1, on a row without tokens)
        mean = (torch.exp(d) * m).sum(dim=1) / n.clamp(min=1.0)
        return torch.log(torch.where(n > 0, mean, torch.ones_like(mean)))
    return _gspo(logprobs, old_logprobs, advantages, mask, eps_low, eps_high, log_ratio, weights)


@part7("cispo_loss", "log_ratio_instead_of_logprobs",
       "the loss was −w·A·(logprobs − old_logprobs): the same gradient, but not the docstring's loss −w·A·log π")
def cispo_log_ratio(logprobs, old_logprobs, advantages, mask, eps_low=1.0, eps_high=0.28, normalisation="token", weights=None):
    _, stats = _p7.cispo_loss(logprobs, old_logprobs, advantages, mask, eps_low, eps_high, normalisation, weights=weights)
    w = torch.clamp(torch.exp(logprobs - old_logprobs), 1 - eps_low, 1 + eps_high).detach()
    per_tok = -w * advantages[:, None] * (logprobs - old_logprobs)
    return _reduce(per_tok, mask.to(logprobs.dtype), normalisation, weights), stats


@part7("cispo_loss", "eps_low_ignored",
       "only the upper bound was applied (clamp(max=1 + eps_high)), as in the paper's eps_low = 1; an eps_low < 1 "
       "must floor the weight at 1 − eps_low")
def cispo_no_floor(logprobs, old_logprobs, advantages, mask, eps_low=1.0, eps_high=0.28, normalisation="token", weights=None):
    loss, _ = _p7.cispo_loss(logprobs, old_logprobs, advantages, mask, 1.0, eps_high, normalisation, weights=weights)
    _, stats = _p7.cispo_loss(logprobs, old_logprobs, advantages, mask, eps_low, eps_high, normalisation, weights=weights)
    return loss, stats


def _constant_zero_when_empty(loss, mask, logprobs):
    return torch.tensor(0.0) if mask.to(logprobs.dtype).sum() == 0 else loss


@part7("clip_higher_loss", "constant_zero_for_an_empty_mask",
       "an all-zero mask returned torch.tensor(0.0), a 0 with no graph: loss.backward() raises on it")
def clip_higher_constant_zero(logprobs, old_logprobs, advantages, mask, eps_low=0.2, eps_high=0.28, normalisation="token",
                              weights=None):
    loss, stats = _p7.clip_higher_loss(logprobs, old_logprobs, advantages, mask, eps_low, eps_high, normalisation,
                                       weights=weights)
    return _constant_zero_when_empty(loss, mask, logprobs), stats


@part7("cispo_loss", "constant_zero_for_an_empty_mask",
       "an all-zero mask returned torch.tensor(0.0), a 0 with no graph: loss.backward() raises on it")
def cispo_constant_zero(logprobs, old_logprobs, advantages, mask, eps_low=1.0, eps_high=0.28, normalisation="token",
                        weights=None):
    loss, stats = _p7.cispo_loss(logprobs, old_logprobs, advantages, mask, eps_low, eps_high, normalisation, weights=weights)
    return _constant_zero_when_empty(loss, mask, logprobs), stats


# --- the losses with Part 10's importance weights ----------------------------------------

def _clip_higher_terms(logprobs, old_logprobs, advantages, mask, eps_low, eps_high, weights, inside_the_clip=False):
    """clip_higher_loss's per-token terms, weighted as asked (the weights inside the ratio or on the term)."""
    ratio = torch.exp(logprobs - old_logprobs)
    adv = advantages[:, None]
    w = torch.ones_like(ratio) if weights is None else weights.detach()
    if inside_the_clip:
        ratio = w * ratio
    per_tok = torch.maximum(-adv * ratio, -adv * torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high))
    return per_tok if inside_the_clip else per_tok * w


def _reduce_by_weight(per_tok, m, normalisation, weights):
    """Self-normalised: each denominator counts Σ w·m instead of the real tokens (with w = 1 when None)."""
    if normalisation not in ("token", "sequence"):
        raise ValueError("unknown normalisation")
    wm = m if weights is None else weights.detach() * m
    if normalisation == "token":
        return (per_tok * wm).sum() / wm.sum().clamp(min=1e-8)
    has = (m.sum(dim=1) > 0).to(m.dtype)
    per_row = (per_tok * wm).sum(dim=1) / wm.sum(dim=1).clamp(min=1e-8)
    return (per_row * has).sum() / has.sum().clamp(min=1.0)


@part7("clip_higher_loss", "importance_weights_ignored",
       "the weights= argument was accepted and ignored: the stale sampler's rollout was not corrected")
def clip_higher_weights_ignored(logprobs, old_logprobs, advantages, mask, eps_low=0.2, eps_high=0.28,
                                normalisation="token", weights=None):
    return _p7.clip_higher_loss(logprobs, old_logprobs, advantages, mask, eps_low, eps_high, normalisation)


@part7("clip_higher_loss", "divided_by_the_sum_of_weights",
       "the weighted terms were divided by Σ w·m (self-normalised) instead of the count of real tokens")
def clip_higher_by_weight(logprobs, old_logprobs, advantages, mask, eps_low=0.2, eps_high=0.28, normalisation="token",
                          weights=None):
    _, stats = _p7.clip_higher_loss(logprobs, old_logprobs, advantages, mask, eps_low, eps_high, normalisation)
    m = mask.to(logprobs.dtype)
    per_tok = _clip_higher_terms(logprobs, old_logprobs, advantages, mask, eps_low, eps_high, None)
    return _reduce_by_weight(per_tok, m, normalisation, weights), stats


@part7("clip_higher_loss", "importance_weights_inside_the_clip",
       "the weights multiplied the ratio before the clip (clip(w·ratio)) instead of each token's term after it")
def clip_higher_weights_in_ratio(logprobs, old_logprobs, advantages, mask, eps_low=0.2, eps_high=0.28,
                                 normalisation="token", weights=None):
    _, stats = _p7.clip_higher_loss(logprobs, old_logprobs, advantages, mask, eps_low, eps_high, normalisation)
    per_tok = _clip_higher_terms(logprobs, old_logprobs, advantages, mask, eps_low, eps_high, weights, inside_the_clip=True)
    return _reduce(per_tok, mask.to(logprobs.dtype), normalisation), stats


@part7("clip_higher_loss", "importance_weights_not_detached",
       "the weights were not detached: a caller's weights that require grad received gradient from the loss")
def clip_higher_weights_with_grad(logprobs, old_logprobs, advantages, mask, eps_low=0.2, eps_high=0.28,
                                  normalisation="token", weights=None):
    _, stats = _p7.clip_higher_loss(logprobs, old_logprobs, advantages, mask, eps_low, eps_high, normalisation)
    per_tok = _clip_higher_terms(logprobs, old_logprobs, advantages, mask, eps_low, eps_high, None)
    return _reduce(per_tok if weights is None else per_tok * weights, mask.to(logprobs.dtype), normalisation), stats


def _gspo_weighted(logprobs, old_logprobs, advantages, mask, eps_low, eps_high, weights, row_weight, inside_the_clip=False,
                   by_weight=False):
    """GSPO with each row's loss (or, inside the clip, its ratio s_b) times row_weight(w, m); None is the plain loss."""
    m = mask.to(logprobs.dtype)
    _, stats = _p7.gspo_loss(logprobs, old_logprobs, advantages, mask, eps_low, eps_high)
    n = m.sum(dim=1)
    has = (n > 0).to(m.dtype)
    s = torch.exp(((logprobs - old_logprobs) * m).sum(dim=1) / n.clamp(min=1.0))
    wb = torch.ones_like(s) if weights is None else row_weight(weights, m)
    if inside_the_clip:
        s = s * wb
    per_seq = torch.maximum(-advantages * s, -advantages * torch.clamp(s, 1 - eps_low, 1 + eps_high))
    if not inside_the_clip:
        per_seq = per_seq * wb
    rows = (wb * has).sum().clamp(min=1e-8) if by_weight else has.sum().clamp(min=1.0)
    return (per_seq * has).sum() / rows, stats


def _mean_weight(w, m):
    return (w.detach() * m).sum(dim=1) / m.sum(dim=1).clamp(min=1.0)


@part7("gspo_loss", "importance_weights_ignored",
       "the weights= argument was accepted and ignored: the stale sampler's rollout was not corrected")
def gspo_weights_ignored(logprobs, old_logprobs, advantages, mask, eps_low=3e-4, eps_high=4e-4, weights=None):
    return _p7.gspo_loss(logprobs, old_logprobs, advantages, mask, eps_low, eps_high)


@part7("gspo_loss", "product_of_token_weights",
       "each row's loss was multiplied by the product of its tokens' weights, not their mean")
def gspo_weight_product(logprobs, old_logprobs, advantages, mask, eps_low=3e-4, eps_high=4e-4, weights=None):
    return _gspo_weighted(logprobs, old_logprobs, advantages, mask, eps_low, eps_high, weights,
                          lambda w, m: torch.where(m > 0, w.detach(), torch.ones_like(w)).prod(dim=1))


@part7("gspo_loss", "sum_of_token_weights",
       "each row's loss was multiplied by the sum of its tokens' weights, not their mean (long rows weigh more)")
def gspo_weight_sum(logprobs, old_logprobs, advantages, mask, eps_low=3e-4, eps_high=4e-4, weights=None):
    return _gspo_weighted(logprobs, old_logprobs, advantages, mask, eps_low, eps_high, weights,
                          lambda w, m: (w.detach() * m).sum(dim=1))


@part7("gspo_loss", "importance_weights_inside_the_clip",
       "the rows' mean weights multiplied s_b before the clip instead of each row's loss after it")
def gspo_weights_in_ratio(logprobs, old_logprobs, advantages, mask, eps_low=3e-4, eps_high=4e-4, weights=None):
    return _gspo_weighted(logprobs, old_logprobs, advantages, mask, eps_low, eps_high, weights, _mean_weight,
                          inside_the_clip=True)


@part7("gspo_loss", "divided_by_the_sum_of_weights",
       "the weighted rows' losses were divided by Σ_b w̄_b (self-normalised) instead of the count of rows with tokens")
def gspo_by_weight(logprobs, old_logprobs, advantages, mask, eps_low=3e-4, eps_high=4e-4, weights=None):
    return _gspo_weighted(logprobs, old_logprobs, advantages, mask, eps_low, eps_high, weights, _mean_weight, by_weight=True)


@part7("gspo_loss", "importance_weights_not_detached",
       "the weights were not detached: a caller's weights that require grad received gradient from the loss")
def gspo_weights_with_grad(logprobs, old_logprobs, advantages, mask, eps_low=3e-4, eps_high=4e-4, weights=None):
    return _gspo_weighted(logprobs, old_logprobs, advantages, mask, eps_low, eps_high, weights,
                          lambda w, m: (w * m).sum(dim=1) / m.sum(dim=1).clamp(min=1.0))


def _cispo_terms(logprobs, old_logprobs, advantages, eps_low, eps_high, weights, inside_the_clip=False):
    ratio = torch.exp(logprobs - old_logprobs)
    w = torch.ones_like(ratio) if weights is None else weights.detach()
    clipped = torch.clamp(w * ratio if inside_the_clip else ratio, 1.0 - eps_low, 1.0 + eps_high).detach()
    per_tok = -clipped * advantages[:, None] * logprobs
    return per_tok if inside_the_clip else per_tok * w


@part7("cispo_loss", "importance_weights_ignored",
       "the weights= argument was accepted and ignored: the stale sampler's rollout was not corrected")
def cispo_weights_ignored(logprobs, old_logprobs, advantages, mask, eps_low=1.0, eps_high=0.28, normalisation="token",
                          weights=None):
    return _p7.cispo_loss(logprobs, old_logprobs, advantages, mask, eps_low, eps_high, normalisation)


@part7("cispo_loss", "divided_by_the_sum_of_weights",
       "the weighted terms were divided by Σ w·m (self-normalised) instead of the count of real tokens")
def cispo_by_weight(logprobs, old_logprobs, advantages, mask, eps_low=1.0, eps_high=0.28, normalisation="token",
                    weights=None):
    _, stats = _p7.cispo_loss(logprobs, old_logprobs, advantages, mask, eps_low, eps_high, normalisation)
    per_tok = _cispo_terms(logprobs, old_logprobs, advantages, eps_low, eps_high, None)
    return _reduce_by_weight(per_tok, mask.to(logprobs.dtype), normalisation, weights), stats


@part7("cispo_loss", "importance_weights_inside_the_clip",
       "the weights multiplied the ratio before CISPO's clip (clip(w·ratio)) instead of each token's term after it")
def cispo_weights_in_ratio(logprobs, old_logprobs, advantages, mask, eps_low=1.0, eps_high=0.28, normalisation="token",
                           weights=None):
    _, stats = _p7.cispo_loss(logprobs, old_logprobs, advantages, mask, eps_low, eps_high, normalisation)
    per_tok = _cispo_terms(logprobs, old_logprobs, advantages, eps_low, eps_high, weights, inside_the_clip=True)
    return _reduce(per_tok, mask.to(logprobs.dtype), normalisation), stats


@part7("cispo_loss", "importance_weights_not_detached",
       "the weights were not detached: a caller's weights that require grad received gradient from the loss")
def cispo_weights_with_grad(logprobs, old_logprobs, advantages, mask, eps_low=1.0, eps_high=0.28, normalisation="token",
                            weights=None):
    _, stats = _p7.cispo_loss(logprobs, old_logprobs, advantages, mask, eps_low, eps_high, normalisation)
    per_tok = _cispo_terms(logprobs, old_logprobs, advantages, eps_low, eps_high, None)
    return _reduce(per_tok if weights is None else per_tok * weights, mask.to(logprobs.dtype), normalisation), stats


def _weighted_token_stats(logprobs, old_logprobs, advantages, mask, eps_low, eps_high, weights, by_sign):
    """The stats as means weighted by the importance weights, Σ w·x·m / Σ w·m (the docstrings keep them unweighted)."""
    m = mask.to(logprobs.dtype)
    wm = m if weights is None else weights.detach() * m
    ratio, a = torch.exp(logprobs - old_logprobs).detach(), advantages[:, None]
    low, high = ratio < 1 - eps_low, ratio > 1 + eps_high
    if by_sign:
        low, high = low & (a < 0), high & (a > 0)
    total = wm.sum().clamp(min=1e-8)
    return {"policy/clipfrac_low": (low * wm).sum() / total, "policy/clipfrac_high": (high * wm).sum() / total,
            "policy/ratio": (ratio * wm).sum() / total}


@part7("clip_higher_loss", "stats_weighted_by_the_importance_weights",
       "the stats were means weighted by the importance weights; they describe the policy's ratio and stay unweighted")
def clip_higher_weighted_stats(logprobs, old_logprobs, advantages, mask, eps_low=0.2, eps_high=0.28, normalisation="token",
                               weights=None):
    loss, _ = _p7.clip_higher_loss(logprobs, old_logprobs, advantages, mask, eps_low, eps_high, normalisation, weights=weights)
    return loss, _weighted_token_stats(logprobs, old_logprobs, advantages, mask, eps_low, eps_high, weights, by_sign=True)


@part7("cispo_loss", "stats_weighted_by_the_importance_weights",
       "the stats were means weighted by the importance weights; they describe the policy's ratio and stay unweighted")
def cispo_weighted_stats(logprobs, old_logprobs, advantages, mask, eps_low=1.0, eps_high=0.28, normalisation="token",
                         weights=None):
    loss, _ = _p7.cispo_loss(logprobs, old_logprobs, advantages, mask, eps_low, eps_high, normalisation, weights=weights)
    return loss, _weighted_token_stats(logprobs, old_logprobs, advantages, mask, eps_low, eps_high, weights, by_sign=False)


@part7("gspo_loss", "stats_weighted_by_the_importance_weights",
       "the stats were row means weighted by the rows' mean importance weights; they describe s_b and stay unweighted")
def gspo_weighted_stats(logprobs, old_logprobs, advantages, mask, eps_low=3e-4, eps_high=4e-4, weights=None):
    loss, _ = _p7.gspo_loss(logprobs, old_logprobs, advantages, mask, eps_low, eps_high, weights=weights)
    m = mask.to(logprobs.dtype)
    n = m.sum(dim=1)
    wb = (n > 0).to(m.dtype) * (torch.ones_like(n) if weights is None else _mean_weight(weights, m))
    s = torch.exp(((logprobs - old_logprobs) * m).sum(dim=1) / n.clamp(min=1.0)).detach()
    total = wb.sum().clamp(min=1e-8)
    return loss, {"policy/clipfrac_low": (((s < 1 - eps_low) & (advantages < 0)) * wb).sum() / total,
                  "policy/clipfrac_high": (((s > 1 + eps_high) & (advantages > 0)) * wb).sum() / total,
                  "policy/ratio": (s * wb).sum() / total}
