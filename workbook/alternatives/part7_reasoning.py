"""Correct alternatives to the Part 7 exercises (see workbook/alternatives/__init__.py).

Each is written from the exercise's docstring alone, in a style the reference does not use.
"""

from __future__ import annotations

import math
import re
from functools import partial

import numpy as np
import torch

from workbook.alternatives import alternative

part7 = partial(alternative, "part7_reasoning")

_ANSWER = re.compile(r"<answer>(.*?)</answer>", flags=re.S)


@part7("answer_reward", "regex_and_fullmatch",
       "a non-greedy regex finds the first pair; [0-9]+ with re.ASCII checks it; numbers compared as stripped strings")
def reward_regex(completions, answers, format_reward=0.1):
    if len(completions) != len(answers):
        raise ValueError("lengths differ")
    if math.isnan(format_reward) or format_reward < 0 or format_reward >= 1:
        raise ValueError("format_reward must be in [0, 1)")
    out = torch.zeros(len(completions))
    for i, (text, answer) in enumerate(zip(completions, answers)):
        found = _ANSWER.search(text)
        if found is None or re.fullmatch(r"[0-9]+", found.group(1), flags=re.ASCII) is None:
            continue
        out[i] = 1.0 if found.group(1).lstrip("0") == answer.lstrip("0") else format_reward
    return out


@part7("pass_at_k", "exact_binomials", "exact integer binomials with math.comb and Python's correctly rounded int division")
def pass_comb(n, c, k):
    if c < 0 or c > n or k < 1 or k > n:
        raise ValueError("need 0 <= c <= n and 1 <= k <= n")
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


@part7("groups_with_signal", "unique_count_loop", "a loop over the groups asking whether more than one distinct value occurs")
def signal_unique(rewards, group_size):
    if group_size < 2 or len(rewards) % group_size != 0:
        raise ValueError("bad group size")
    flags = [len(torch.unique(rewards[i:i + group_size].detach())) > 1 for i in range(0, len(rewards), group_size)]
    return torch.tensor(flags, dtype=torch.bool)


@part7("overlong_penalty", "piecewise_where", "the three cases written out with torch.where")
def overlong_where(lengths, max_len, cache_len):
    if cache_len < 1 or cache_len > max_len:
        raise ValueError("need 1 <= cache_len <= max_len")
    L = lengths.double()
    start = max_len - cache_len
    ramp = (start - L) / cache_len
    out = torch.where(L <= start, torch.zeros_like(L), torch.where(L <= max_len, ramp, -torch.ones_like(L)))
    return out.float()


@part7("completion_mask", "row_by_row_fill", "a zero tensor filled row by row with a Python loop")
def mask_rows(responses, eos_id, mask_truncated=True):
    if len(responses) == 0:
        raise ValueError("no responses")
    width = max(len(r) for r in responses)
    mask = torch.zeros(len(responses), width)
    truncated = torch.zeros(len(responses), dtype=torch.bool)
    for b, r in enumerate(responses):
        ended = len(r) > 0 and r[-1].item() == eos_id
        truncated[b] = not ended
        if ended or not mask_truncated:
            mask[b, :len(r)] = 1.0
    return mask, truncated


def _reduce(per_tok, m, normalisation, weights=None):
    if weights is not None:  # Part 10's importance weights: constants on each token's term
        per_tok = per_tok * weights.detach()
    lengths = m.sum(dim=1)
    if normalisation == "token":
        return (per_tok * m).sum() / torch.clamp(lengths.sum(), min=1.0)
    rows = [(per_tok[b] * m[b]).sum() / lengths[b] for b in range(m.shape[0]) if lengths[b] > 0]
    return torch.stack(rows).mean() if rows else (per_tok * m).sum()


@part7("clip_higher_loss", "where_on_advantage_sign",
       "the pessimistic bound chosen with torch.where on the advantage's sign; per-row means in a loop")
def clip_higher_where(logprobs, old_logprobs, advantages, mask, eps_low=0.2, eps_high=0.28, normalisation="token",
                      weights=None):
    if normalisation not in ("token", "sequence"):
        raise ValueError("unknown normalisation")
    m = mask.float().to(logprobs.dtype)
    ratio = (logprobs - old_logprobs).exp()
    adv = advantages.unsqueeze(1).expand_as(ratio)
    capped = torch.where(adv >= 0, ratio.clamp(max=1 + eps_high), ratio.clamp(min=1 - eps_low))
    objective = torch.minimum(ratio * adv, capped * adv)
    real = m.bool()
    with torch.no_grad():
        count = max(int(real.sum()), 1)
        stats = {
            "policy/clipfrac_low": ((ratio < 1 - eps_low) & (adv < 0) & real).sum().to(m.dtype) / count,
            "policy/clipfrac_high": ((ratio > 1 + eps_high) & (adv > 0) & real).sum().to(m.dtype) / count,
            "policy/ratio": (ratio * m).sum() / count,
        }
    return _reduce(-objective, m, normalisation, weights), stats


@part7("clip_higher_loss", "stacked_min_and_more_stats",
       "the two objectives stacked and torch.min over them, the token mean as a ratio of masked sums, and stats with "
       "two keys more than the docstring names (a total clip fraction and an approximate KL)")
def clip_higher_stacked(logprobs, old_logprobs, advantages, mask, eps_low=0.2, eps_high=0.28, normalisation="token",
                        weights=None):
    if normalisation not in ("token", "sequence"):
        raise ValueError("unknown normalisation")
    m = mask.to(logprobs.dtype)
    log_ratio = logprobs - old_logprobs
    ratio = log_ratio.exp()
    a = advantages.view(-1, 1)
    both = torch.stack([ratio * a, ratio.clamp(1 - eps_low, 1 + eps_high) * a])
    per_tok = -both.min(dim=0).values * m
    if weights is not None:
        per_tok = per_tok * weights.detach()
    n = m.sum(dim=1)
    if normalisation == "token":
        loss = per_tok.sum() / n.sum().clamp(min=1)
    else:
        has = n > 0
        loss = (per_tok.sum(dim=1)[has] / n[has]).mean() if has.any() else per_tok.sum()
    with torch.no_grad():
        total = m.sum().clamp(min=1)
        low = ((ratio < 1 - eps_low) & (a < 0)).to(m.dtype) * m
        high = ((ratio > 1 + eps_high) & (a > 0)).to(m.dtype) * m
        stats = {"policy/clipfrac_low": low.sum() / total, "policy/clipfrac_high": high.sum() / total,
                 "policy/clipfrac": (low + high).sum() / total, "policy/ratio": (ratio * m).sum() / total,
                 "policy/approx_kl": (((ratio - 1) - log_ratio) * m).sum() / total}
    return loss, stats


@part7("gspo_loss", "log_space_clip", "the clip range applied in log space, the pessimistic bound chosen by the advantage's sign")
def gspo_log_space(logprobs, old_logprobs, advantages, mask, eps_low=3e-4, eps_high=4e-4, weights=None):
    m = mask.to(logprobs.dtype)
    n = m.sum(dim=1)
    real = n > 0
    log_s = torch.where(real, ((logprobs - old_logprobs) * m).sum(dim=1) / n.clamp(min=1), torch.zeros_like(n))
    s = log_s.exp()
    capped = torch.where(advantages >= 0, torch.exp(log_s.clamp(max=math.log1p(eps_high))),
                         torch.exp(log_s.clamp(min=math.log1p(-eps_low))))
    per_seq = -torch.minimum(s * advantages, capped * advantages)
    if weights is not None:  # each row's loss times its real tokens' mean weight
        per_seq = per_seq * torch.where(real, (weights.detach() * m).sum(dim=1) / n.clamp(min=1), torch.zeros_like(n))
    if not real.any():
        return (per_seq * 0).sum(), {k: torch.tensor(0.0) for k in ("policy/clipfrac_low", "policy/clipfrac_high")} | {
            "policy/ratio": torch.tensor(0.0)}
    with torch.no_grad():
        stats = {
            "policy/clipfrac_low": ((s < 1 - eps_low) & (advantages < 0))[real].float().mean(),
            "policy/clipfrac_high": ((s > 1 + eps_high) & (advantages > 0))[real].float().mean(),
            "policy/ratio": s[real].mean(),
        }
    return per_seq[real].mean(), stats


@part7("cispo_loss", "weight_under_no_grad", "the weight computed under torch.no_grad with min/max, the loss per row in a loop")
def cispo_no_grad(logprobs, old_logprobs, advantages, mask, eps_low=1.0, eps_high=0.28, normalisation="token",
                  weights=None):
    if normalisation not in ("token", "sequence"):
        raise ValueError("unknown normalisation")
    m = mask.to(logprobs.dtype)
    with torch.no_grad():
        ratio = torch.exp(logprobs - old_logprobs)
        weight = torch.minimum(torch.maximum(ratio, torch.full_like(ratio, 1 - eps_low)), torch.full_like(ratio, 1 + eps_high))
        if weights is not None:  # after the clip, under no_grad: one constant per token
            weight = weight * weights
        count = m.sum().clamp(min=1)
        stats = {
            "policy/clipfrac_low": ((ratio < 1 - eps_low).to(m.dtype) * m).sum() / count,
            "policy/clipfrac_high": ((ratio > 1 + eps_high).to(m.dtype) * m).sum() / count,
            "policy/ratio": (ratio * m).sum() / count,
        }
    return _reduce(-(weight * advantages[:, None]) * logprobs, m, normalisation), stats


@part7("pass_at_k", "product_without_the_early_return",
       "the product in float64 numpy with no n − c < k branch: a factor 1 − k/k = 0 makes it 1 there by itself")
def pass_numpy_product(n, c, k):
    if not (0 <= c <= n and 1 <= k <= n):
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1, dtype=np.float64)))


@part7("groups_with_signal", "differs_from_the_first",
       "a group has a signal when any of its rewards differs from its first one (no max or min)")
def signal_differs_from_first(rewards, group_size):
    if group_size < 2 or rewards.shape[0] % group_size:
        raise ValueError(f"need group_size >= 2 dividing the batch, got {group_size} for {rewards.shape[0]} rewards")
    grouped = rewards.detach().reshape(-1, group_size)
    return (grouped != grouped[:, :1]).any(dim=1)


@part7("gspo_loss", "all_masked_batch_handled_first",
       "a batch without a real token answered first (0·Σ logprobs, constant 0 stats), the rest as GSPO's formula")
def gspo_empty_first(logprobs, old_logprobs, advantages, mask, eps_low=3e-4, eps_high=4e-4, weights=None):
    m = mask.to(logprobs.dtype)
    if m.sum() == 0:
        zero = torch.tensor(0.0)
        return 0.0 * (logprobs * m).sum(), {"policy/clipfrac_low": zero, "policy/clipfrac_high": zero, "policy/ratio": zero}
    rows = m.sum(dim=1) > 0
    s = torch.exp(((logprobs - old_logprobs) * m)[rows].sum(dim=1) / m[rows].sum(dim=1))
    adv = advantages[rows]
    per_seq = torch.maximum(-adv * s, -adv * s.clamp(1.0 - eps_low, 1.0 + eps_high))
    if weights is not None:
        per_seq = per_seq * ((weights.detach() * m)[rows].sum(dim=1) / m[rows].sum(dim=1))
    loss = per_seq.mean()
    s = s.detach()
    return loss, {"policy/clipfrac_low": ((s < 1.0 - eps_low) & (adv < 0)).float().mean(),
                  "policy/clipfrac_high": ((s > 1.0 + eps_high) & (adv > 0)).float().mean(), "policy/ratio": s.mean()}


# --- the losses with Part 10's importance weights, in other styles -----------------------

@part7("clip_higher_loss", "real_tokens_gathered_by_boolean_index",
       "the real tokens' terms and weights gathered with a boolean index, summed per row with index_add_")
def clip_higher_gathered(logprobs, old_logprobs, advantages, mask, eps_low=0.2, eps_high=0.28, normalisation="token",
                         weights=None):
    if normalisation not in ("token", "sequence"):
        raise ValueError("unknown normalisation")
    real = mask.bool()
    rows = real.nonzero()[:, 0]
    ratio = (logprobs - old_logprobs)[real].exp()
    adv = advantages[rows]
    term = -torch.min(ratio * adv, ratio.clamp(1 - eps_low, 1 + eps_high) * adv)
    if weights is not None:
        term = term * weights.detach()[real]
    n = real.sum(dim=1).to(logprobs.dtype)
    if normalisation == "token":
        loss = term.sum() / n.sum().clamp(min=1)
    else:
        per_row = torch.zeros(len(n), dtype=logprobs.dtype).index_add_(0, rows, term)
        has = n > 0
        loss = (per_row[has] / n[has]).sum() / has.sum().clamp(min=1)
    with torch.no_grad():
        count = n.sum().clamp(min=1)
        stats = {"policy/clipfrac_low": ((ratio < 1 - eps_low) & (adv < 0)).sum() / count,
                 "policy/clipfrac_high": ((ratio > 1 + eps_high) & (adv > 0)).sum() / count,
                 "policy/ratio": ratio.sum() / count}
    return loss, stats


@part7("gspo_loss", "sequence_term_weighted_per_token",
       "each row's clipped term copied onto its real tokens, each copy times its token's weight, averaged over the "
       "row's tokens, then over the rows (the docstring's 'the same thing')")
def gspo_per_token_copies(logprobs, old_logprobs, advantages, mask, eps_low=3e-4, eps_high=4e-4, weights=None):
    m = mask.to(logprobs.dtype)
    n = m.sum(dim=1)
    has = n > 0
    s = torch.exp(((logprobs - old_logprobs) * m).sum(dim=1) / n.clamp(min=1))
    per_seq = -torch.min(s * advantages, s.clamp(1 - eps_low, 1 + eps_high) * advantages)
    w = torch.ones_like(m) if weights is None else weights.detach()
    per_tok = per_seq[:, None] * w * m
    row = per_tok.sum(dim=1) / n.clamp(min=1)
    loss = row[has].sum() / has.sum().clamp(min=1)
    with torch.no_grad():
        count = has.sum().clamp(min=1)
        stats = {"policy/clipfrac_low": ((s < 1 - eps_low) & (advantages < 0) & has).sum() / count,
                 "policy/clipfrac_high": ((s > 1 + eps_high) & (advantages > 0) & has).sum() / count,
                 "policy/ratio": (s * has).sum() / count}
    return loss, stats


@part7("cispo_loss", "one_detached_product_weight",
       "CISPO's clipped weight and the importance weight multiplied into one detached coefficient per token, "
       "the loss as an einsum-free masked sum")
def cispo_product_weight(logprobs, old_logprobs, advantages, mask, eps_low=1.0, eps_high=0.28, normalisation="token",
                         weights=None):
    if normalisation not in ("token", "sequence"):
        raise ValueError("unknown normalisation")
    m = mask.to(logprobs.dtype)
    ratio = (logprobs - old_logprobs).exp()
    coef = ratio.clamp(1 - eps_low, 1 + eps_high) * advantages[:, None] * m
    if weights is not None:
        coef = coef * weights
    coef = coef.detach()
    n = m.sum(dim=1)
    if normalisation == "token":
        loss = -(coef * logprobs).sum() / n.sum().clamp(min=1)
    else:
        loss = -((coef * logprobs).sum(dim=1) / n.clamp(min=1)).sum() / (n > 0).sum().clamp(min=1)
    with torch.no_grad():
        count = m.sum().clamp(min=1)
        stats = {"policy/clipfrac_low": ((ratio < 1 - eps_low) * m).sum() / count,
                 "policy/clipfrac_high": ((ratio > 1 + eps_high) * m).sum() / count,
                 "policy/ratio": (ratio * m).sum() / count}
    return loss, stats


@part7("answer_reward", "partition_and_isascii_isdigit",
       "str.partition for the first pair; str.isascii() and str.isdigit() together for the digits; scores written into a "
       "preallocated tensor")
def reward_partition(completions, answers, format_reward=0.1):
    if len(completions) != len(answers):
        raise ValueError("lengths differ")
    if not (format_reward >= 0 and format_reward < 1):  # False for NaN
        raise ValueError("format_reward must be in [0, 1)")
    out = torch.empty(len(completions), dtype=torch.float32)
    for i, (text, answer) in enumerate(zip(completions, answers)):
        _, opened, rest = text.partition("<answer>")
        inside, closed, _ = rest.partition("</answer>")
        if not (opened and closed and inside.isascii() and inside.isdigit()):
            out[i] = 0.0
        else:
            out[i] = 1.0 if inside.lstrip("0") == answer.lstrip("0") else format_reward
    return out


@part7("pass_at_k", "k_factor_product",
       "C(n−c, k)/C(n, k) as the product of its k factors (n−c−i)/(n−i), i = 0 … k−1 (a zero factor when n − c < k)")
def pass_k_factors(n, c, k):
    if not (0 <= c <= n and 1 <= k <= n):
        raise ValueError("need 0 <= c <= n and 1 <= k <= n")
    all_wrong = 1.0
    for i in range(k):
        all_wrong *= (n - c - i) / (n - i)
    return 1.0 - all_wrong


@part7("gspo_loss", "row_by_row_loop",
       "a Python loop over the rows: each real row's log-ratios gathered by its boolean mask, its term from torch.min")
def gspo_rows_loop(logprobs, old_logprobs, advantages, mask, eps_low=3e-4, eps_high=4e-4, weights=None):
    keep = mask.bool()
    terms, low, high, ratios = [], [], [], []
    for b in range(logprobs.shape[0]):
        d = (logprobs[b] - old_logprobs[b])[keep[b]]
        if d.numel() == 0:
            continue
        s, a = d.mean().exp(), advantages[b]
        term = -torch.min(s * a, s.clamp(1 - eps_low, 1 + eps_high) * a)
        if weights is not None:
            term = term * weights[b].detach()[keep[b]].mean()
        terms.append(term)
        low.append(float(a < 0 and s < 1 - eps_low))
        high.append(float(a > 0 and s > 1 + eps_high))
        ratios.append(s.detach())
    if not terms:
        zero = torch.zeros((), dtype=logprobs.dtype)
        return (logprobs * 0).sum(), {"policy/clipfrac_low": zero, "policy/clipfrac_high": zero, "policy/ratio": zero}
    return torch.stack(terms).mean(), {"policy/clipfrac_low": torch.tensor(sum(low) / len(low)),
                                       "policy/clipfrac_high": torch.tensor(sum(high) / len(high)),
                                       "policy/ratio": torch.stack(ratios).mean()}
