"""Known-wrong versions of the Part 7 exercises (see workbook/mistakes/__init__.py)."""

from __future__ import annotations

import math
import re
from functools import partial

import torch

from solutions import part7_reasoning as _p7
from workbook.mistakes import mistake

part7 = partial(mistake, "part7_reasoning")


# --- answer_reward ----------------------------------------------------------------------

def _check_reward_args(completions, answers, format_reward):
    if len(completions) != len(answers) or not 0.0 <= format_reward < 1.0:
        raise ValueError("bad arguments")


def _score(completions, answers, format_reward, parse, same):
    _check_reward_args(completions, answers, format_reward)
    out = []
    for text, answer in zip(completions, answers):
        got = parse(text)
        out.append(0.0 if got is None else 1.0 if same(got, answer) else format_reward)
    return torch.tensor(out, dtype=torch.float32)


def _first_pair(text):
    start = text.find("<answer>")
    end = text.find("</answer>", start + 8) if start >= 0 else -1
    return text[start + 8:end] if end >= 0 else None


def _ascii_digits(s):
    return s if s and all(ch in "0123456789" for ch in s) else None


def _same_number(a, b):
    return (a.lstrip("0") or "0") == (b.lstrip("0") or "0")


@part7("answer_reward", "nan_format_reward_accepted",
       "format_reward was checked with `x < 0 or x >= 1`, which lets NaN through: a wrong answer then scores NaN")
def reward_nan_accepted(completions, answers, format_reward=0.1):
    if len(completions) != len(answers) or format_reward < 0 or format_reward >= 1:
        raise ValueError("bad arguments")
    out = []
    for text, answer in zip(completions, answers):
        got = _ascii_digits(_first_pair(text))
        out.append(0.0 if got is None else 1.0 if _same_number(got, answer) else format_reward)
    return torch.tensor(out, dtype=torch.float32)


@part7("answer_reward", "format_reward_for_junk",
       "every completion without the right answer got the format reward, parseable or not")
def reward_junk_gets_format(completions, answers, format_reward=0.1):
    def parse(text):
        inside = _first_pair(text)
        return inside if inside is not None and _ascii_digits(inside) else ""
    return _score(completions, answers, format_reward, parse, _same_number)


@part7("answer_reward", "string_compare_keeps_leading_zeros",
       "the answers were compared as strings, so 0632 is not 632")
def reward_string_compare(completions, answers, format_reward=0.1):
    return _score(completions, answers, format_reward, lambda t: _ascii_digits(_first_pair(t) or ""), str.__eq__)


@part7("answer_reward", "last_answer_counts",
       "the last <answer> tag pair was read instead of the first: a completion can list several answers")
def reward_last_pair(completions, answers, format_reward=0.1):
    def parse(text):
        found = re.findall(r"<answer>(.*?)</answer>", text, flags=re.S)
        return _ascii_digits(found[-1]) if found else None
    return _score(completions, answers, format_reward, parse, _same_number)


@part7("answer_reward", "unicode_digits_accepted",
       "\\d or str.isdigit accepted non-ASCII digits (², ٣) as a well-formed answer")
def reward_isdigit(completions, answers, format_reward=0.1):
    def parse(text):
        inside = _first_pair(text)
        return inside if inside and inside.isdigit() else None
    return _score(completions, answers, format_reward, parse, _same_number)


@part7("answer_reward", "int_conversion_raises",
       "the answer was compared with int(...), which raises on more than 4300 digits")
def reward_int(completions, answers, format_reward=0.1):
    return _score(completions, answers, format_reward, lambda t: _ascii_digits(_first_pair(t) or ""),
                  lambda a, b: int(a) == int(b))


@part7("answer_reward", "no_format_reward",
       "a well-formed wrong answer got 0 instead of format_reward")
def reward_no_format(completions, answers, format_reward=0.1):
    return _p7.answer_reward(completions, answers, 0.0)


@part7("answer_reward", "spaces_stripped",
       "spaces around the number were stripped, so '<answer> 12 </answer>' counted as well-formed")
def reward_strip(completions, answers, format_reward=0.1):
    return _score(completions, answers, format_reward, lambda t: _ascii_digits((_first_pair(t) or "").strip()),
                  _same_number)


@part7("answer_reward", "missing_open_tag_read_from_index_7",
       "a missing <answer> was not checked: find()'s −1 was used as a position, so the text from index 7 "
       "up to </answer> was read as the answer")
def reward_unchecked_find(completions, answers, format_reward=0.1):
    def parse(text):
        start = text.find("<answer>")
        end = text.find("</answer>", start + 8)
        return _ascii_digits(text[start + 8:end]) if end >= 0 else None
    return _score(completions, answers, format_reward, parse, _same_number)


@part7("answer_reward", "close_tag_searched_from_the_start",
       "</answer> was searched from the start of the text, not after the first <answer>: a stray </answer> before "
       "the pair hid the answer")
def reward_close_from_start(completions, answers, format_reward=0.1):
    def parse(text):
        start, end = text.find("<answer>"), text.find("</answer>")
        return _ascii_digits(text[start + 8:end]) if start >= 0 and end >= 0 else None
    return _score(completions, answers, format_reward, parse, _same_number)


@part7("answer_reward", "first_well_formed_pair",
       "the regex <answer>([0-9]+)</answer> found the first *well-formed* pair, so a malformed first answer was "
       "skipped for a later one")
def reward_first_well_formed(completions, answers, format_reward=0.1):
    def parse(text):
        found = re.search(r"<answer>([0-9]+)</answer>", text)
        return found.group(1) if found else None
    return _score(completions, answers, format_reward, parse, _same_number)


# --- pass_at_k --------------------------------------------------------------------------

def _check_pass(n, c, k):
    if not (0 <= c <= n and 1 <= k <= n):
        raise ValueError("bad arguments")


@part7("pass_at_k", "plug_in_estimate", "the biased plug-in 1 − (1 − c/n)^k was used instead of 1 − C(n−c, k)/C(n, k)")
def pass_plug_in(n, c, k):
    _check_pass(n, c, k)
    return 1.0 - (1.0 - c / n) ** k


@part7("pass_at_k", "float_factorials",
       "the binomials were computed from factorials in floating point, which overflow for n in the hundreds")
def pass_float_factorials(n, c, k):
    _check_pass(n, c, k)
    if n - c < k:
        return 1.0

    def comb(a, b):
        return float(math.factorial(a)) / (float(math.factorial(b)) * float(math.factorial(a - b)))
    return 1.0 - comb(n - c, k) / comb(n, k)


@part7("pass_at_k", "float_binomials",
       "exact binomials were converted to float before dividing, which overflows for n in the thousands "
       "(float(math.comb(1100, 550)) raises)")
def pass_float_binomials(n, c, k):
    _check_pass(n, c, k)
    return 1.0 - float(math.comb(n - c, k)) / float(math.comb(n, k))


@part7("pass_at_k", "product_off_by_one", "the product ran over i = n − c … n − 1 instead of n − c + 1 … n")
def pass_off_by_one(n, c, k):
    _check_pass(n, c, k)
    if n - c < k:
        return 1.0
    prod = 1.0
    for i in range(n - c, n):
        prod *= 1.0 - k / i if i else 0.0
    return 1.0 - prod


@part7("pass_at_k", "pass_at_1_for_every_k", "c/n was returned whatever k is")
def pass_ignores_k(n, c, k):
    _check_pass(n, c, k)
    return c / n


# --- groups_with_signal -----------------------------------------------------------------

def _check_groups(rewards, group_size):
    if group_size < 2 or rewards.shape[0] % group_size:
        raise ValueError("bad group size")


@part7("groups_with_signal", "nonzero_mean_kept",
       "groups whose mean reward is not 0 were kept: an all-correct group has mean 1 but no signal")
def signal_nonzero_mean(rewards, group_size):
    _check_groups(rewards, group_size)
    return rewards.detach().view(-1, group_size).mean(dim=1) != 0


@part7("groups_with_signal", "groups_of_strided_rows",
       "view(G, −1) grouped samples of different prompts together")
def signal_strided(rewards, group_size):
    _check_groups(rewards, group_size)
    g = rewards.detach().view(group_size, -1)
    return g.amax(dim=0) > g.amin(dim=0)


@part7("groups_with_signal", "spread_at_least_zero", "the test was spread >= 0, which keeps every group")
def signal_ge(rewards, group_size):
    _check_groups(rewards, group_size)
    g = rewards.detach().view(-1, group_size)
    return g.amax(dim=1) >= g.amin(dim=1)


@part7("groups_with_signal", "std_above_tolerance",
       "a tolerance was used (std > 1e-2) where any spread > 0 counts")
def signal_tolerance(rewards, group_size):
    _check_groups(rewards, group_size)
    return rewards.detach().view(-1, group_size).std(dim=1) > 1e-2


@part7("groups_with_signal", "std_above_zero",
       "the spread was measured as std > 0: rounding leaves a tiny std (~1e-8) in a group of equal rewards like 0.1")
def signal_std_positive(rewards, group_size):
    _check_groups(rewards, group_size)
    return rewards.detach().view(-1, group_size).std(dim=1) > 0


@part7("groups_with_signal", "spread_above_a_tiny_tolerance",
       "a tiny tolerance was used (max − min > 1e-6) where any spread > 0 counts")
def signal_tiny_tolerance(rewards, group_size):
    _check_groups(rewards, group_size)
    g = rewards.detach().view(-1, group_size)
    return g.amax(dim=1) - g.amin(dim=1) > 1e-6


# --- overlong_penalty -------------------------------------------------------------------

def _check_overlong(max_len, cache_len):
    if not 1 <= cache_len <= max_len:
        raise ValueError("bad lengths")


@part7("overlong_penalty", "not_capped_past_the_limit", "the ramp kept falling below −1 past max_len")
def overlong_uncapped(lengths, max_len, cache_len):
    _check_overlong(max_len, cache_len)
    return ((max_len - cache_len - lengths).to(torch.float32) / cache_len).clamp(max=0.0)


@part7("overlong_penalty", "divided_by_max_len", "the ramp was divided by max_len instead of cache_len")
def overlong_by_max_len(lengths, max_len, cache_len):
    _check_overlong(max_len, cache_len)
    return ((max_len - cache_len - lengths).to(torch.float32) / max_len).clamp(-1.0, 0.0)


@part7("overlong_penalty", "ramp_starts_one_token_early",
       "the ramp started one token early (L ≥ L_max − cache_len instead of L > L_max − cache_len), off by one")
def overlong_early(lengths, max_len, cache_len):
    _check_overlong(max_len, cache_len)
    return ((max_len - cache_len - 1 - lengths).to(torch.float32) / cache_len).clamp(-1.0, 0.0)


@part7("overlong_penalty", "positive_penalty", "the penalty was a bonus (its sign flipped)")
def overlong_positive(lengths, max_len, cache_len):
    return -_p7.overlong_penalty(lengths, max_len, cache_len)


# --- completion_mask --------------------------------------------------------------------

def _lengths_mask(responses):
    if not responses:
        raise ValueError("no responses")
    lengths = torch.tensor([len(r) for r in responses])
    return lengths, (torch.arange(int(lengths.max()))[None] < lengths[:, None]).to(torch.float32)


@part7("completion_mask", "eos_left_out", "the EOS token was left out of the mask")
def mask_without_eos(responses, eos_id, mask_truncated=True):
    mask, truncated = _p7.completion_mask(responses, eos_id, mask_truncated)
    ends = torch.tensor([len(r) > 0 and int(r[-1]) == eos_id for r in responses])
    lengths = torch.tensor([len(r) for r in responses]) - ends.long()
    return mask * (torch.arange(mask.shape[1])[None] < lengths[:, None]), truncated


@part7("completion_mask", "flag_ignored", "truncated rows were masked out even with mask_truncated=False")
def mask_flag_ignored(responses, eos_id, mask_truncated=True):
    return _p7.completion_mask(responses, eos_id, True)


@part7("completion_mask", "full_length_means_truncated",
       "a response as long as the longest one was called truncated, instead of one that does not end with EOS")
def mask_by_length(responses, eos_id, mask_truncated=True):
    lengths, mask = _lengths_mask(responses)
    truncated = lengths == lengths.max()
    if mask_truncated:
        mask = mask * (~truncated)[:, None]
    return mask, truncated


@part7("completion_mask", "mask_from_token_ids",
       "the mask was read off the padded ids (id != 0) instead of the lengths: a sampled id 0 is a real token")
def mask_from_ids(responses, eos_id, mask_truncated=True):
    lengths, _ = _lengths_mask(responses)
    ids = torch.zeros(len(responses), int(lengths.max()), dtype=torch.long)
    for b, r in enumerate(responses):
        ids[b, :len(r)] = r
    mask = (ids != 0).to(torch.float32)
    truncated = torch.tensor([len(r) == 0 or int(r[-1]) != eos_id for r in responses])
    if mask_truncated:
        mask = mask * (~truncated)[:, None]
    return mask, truncated


@part7("completion_mask", "eos_anywhere_means_finished",
       "a response holding an EOS anywhere was called finished, instead of one whose last token is the EOS")
def mask_eos_anywhere(responses, eos_id, mask_truncated=True):
    _, mask = _lengths_mask(responses)
    truncated = torch.tensor([not bool((r == eos_id).any()) for r in responses])
    if mask_truncated:
        mask = mask * (~truncated)[:, None]
    return mask, truncated


@part7("completion_mask", "mask_ends_at_the_first_eos",
       "the mask ended at the first EOS instead of at the response's length")
def mask_first_eos(responses, eos_id, mask_truncated=True):
    mask, truncated = _p7.completion_mask(responses, eos_id, mask_truncated)
    for b, r in enumerate(responses):
        found = (r == eos_id).nonzero()
        if len(found):
            mask[b, int(found[0]) + 1:] = 0.0
    return mask, truncated


@part7("completion_mask", "width_of_the_longest_kept_response",
       "with mask_truncated the mask was cut to the longest *finished* response, not the longest response")
def mask_kept_width(responses, eos_id, mask_truncated=True):
    mask, truncated = _p7.completion_mask(responses, eos_id, mask_truncated)
    if mask_truncated:
        mask = mask[:, :max((len(r) for r, t in zip(responses, truncated.tolist()) if not t), default=0)]
    return mask, truncated


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
