"""Known-wrong versions of Part 7's reward side: answer_reward, pass_at_k, groups_with_signal,
overlong_penalty, completion_mask."""

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


@part7("answer_reward", "regex_dollar_allows_a_trailing_newline",
       "well-formedness was checked with re.match(r'[0-9]+$'): `$` also matches before a final newline, so "
       "'<answer>12\\n</answer>' counted as well-formed (use re.fullmatch, \\Z, or a set of ASCII digits)")
def reward_regex_dollar(completions, answers, format_reward=0.1):
    def parse(text):
        inside = _first_pair(text)
        return inside if inside is not None and re.match(r"[0-9]+$", inside) else None
    return _score(completions, answers, format_reward, parse, _same_number)


@part7("answer_reward", "answer_leading_zeros_kept",
       "only the completion's leading zeros were stripped, not the answer's: '632' did not match the answer '0632'")
def reward_answer_unstripped(completions, answers, format_reward=0.1):
    return _score(completions, answers, format_reward, lambda t: _ascii_digits(_first_pair(t) or ""),
                  lambda got, answer: (got.lstrip("0") or "0") == answer)


@part7("answer_reward", "missing_close_tag_reads_to_the_end",
       "the answer was text.split('<answer>')[1].split('</answer>')[0]: without a closing tag that is the rest of "
       "the text, so '<answer>12' scored as if it were closed")
def reward_split(completions, answers, format_reward=0.1):
    def parse(text):
        return _ascii_digits(text.split("<answer>", 1)[1].split("</answer>", 1)[0]) if "<answer>" in text else None
    return _score(completions, answers, format_reward, parse, _same_number)


@part7("answer_reward", "int_conversion_caught_as_malformed",
       "int() was wrapped in try/except ValueError: an answer of more than 4300 digits, right or wrong, scored 0 "
       "instead of being compared (compare the digit strings without their leading zeros)")
def reward_int_caught(completions, answers, format_reward=0.1):
    def same(got, answer):
        return int(got) == int(answer)

    _check_reward_args(completions, answers, format_reward)
    out = []
    for text, answer in zip(completions, answers):
        got = _ascii_digits(_first_pair(text) or "")
        try:
            out.append(0.0 if got is None else 1.0 if same(got, answer) else format_reward)
        except ValueError:
            out.append(0.0)
    return torch.tensor(out, dtype=torch.float32)


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


@part7("pass_at_k", "only_k_zero_rejected",
       "the check was `k == 0` instead of `k < 1`: a negative k passed and gave a pass@k outside [0, 1]")
def pass_negative_k(n, c, k):
    if not 0 <= c <= n or k == 0 or k > n:
        raise ValueError("bad arguments")
    if n - c < k:
        return 1.0
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
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


@part7("groups_with_signal", "group_size_checked_after_the_modulo",
       "the batch was checked (len % group_size) before group_size: group_size = 0 raised ZeroDivisionError, "
       "not ValueError")
def signal_modulo_first(rewards, group_size):
    if rewards.shape[0] % group_size:
        raise ValueError("not a whole number of groups")
    if group_size < 2:
        raise ValueError("group_size must be at least 2")
    g = rewards.detach().view(-1, group_size)
    return g.amax(dim=1) > g.amin(dim=1)


@part7("groups_with_signal", "only_group_size_one_rejected",
       "the check was `group_size == 1` instead of `group_size < 2`: 0 and negative sizes got through "
       "(ZeroDivisionError, or a view error, instead of ValueError)")
def signal_only_one_rejected(rewards, group_size):
    if group_size == 1 or rewards.shape[0] % group_size:
        raise ValueError("bad group size")
    g = rewards.detach().view(-1, group_size)
    return g.amax(dim=1) > g.amin(dim=1)


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


@part7("overlong_penalty", "only_zero_cache_rejected",
       "only cache_len = 0 (the division by zero) was refused: a negative cache_len got through and flipped the ramp")
def overlong_negative_cache(lengths, max_len, cache_len):
    if cache_len == 0 or cache_len > max_len:
        raise ValueError("bad lengths")
    return ((max_len - cache_len - lengths).to(torch.float32) / cache_len).clamp(-1.0, 0.0)


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


@part7("completion_mask", "last_id_read_from_zero_padding",
       "each response's last id was read from the batch padded with 0: with eos_id 0 an empty response ended in an EOS")
def mask_last_id_from_padding(responses, eos_id, mask_truncated=True):
    lengths, mask = _lengths_mask(responses)
    ids = torch.zeros(len(responses), int(lengths.max()) or 1, dtype=torch.long)
    for b, r in enumerate(responses):
        ids[b, :len(r)] = r
    truncated = ids[torch.arange(len(responses)), (lengths - 1).clamp(min=0)] != eos_id
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
