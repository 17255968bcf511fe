"""Tests for Part 7 (exercises/part7_reasoning.py): the verifier, pass@k, DAPO, GSPO, CISPO.

Run: ``pytest tests/test_part7_reasoning.py`` (your code) or add ``--impl=solutions``.
Values are compared with the reference solution on seeded inputs across every setting the
docstrings offer (both clip bounds, both normalisations, each format reward, each mask
dtype), and on the edges they promise: masked-out rows, junk strings, n in the hundreds,
clips that bind. A wrong answer names the known mistake it looks like
(workbook/mistakes/part7_reasoning/). Padding holds garbage on purpose.
"""

from __future__ import annotations

import itertools
import math
import sys
from fractions import Fraction

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from workbook.checking import (WrongAnswer, assert_close, check_call, check_exercise, describe_call, explain, known_mistake,
                               matching_mistakes)
from workbook.promises import check_call_documented_keys, documented_keys

PART = "part7_reasoning"
POINTS = {
    "answer_reward": 2,
    "pass_at_k": 2,
    "groups_with_signal": 1,
    "overlong_penalty": 1,
    "completion_mask": 1,
    "clip_higher_loss": 2,
    "gspo_loss": 2,
    "cispo_loss": 2,
}
HYPOTHESIS = settings(max_examples=40, deadline=None, derandomize=True)
MASK_DTYPES = [torch.bool, torch.int64, torch.float32]
# The stats the three losses' docstrings name: each must be there, more are allowed.
LOSS_STATS = ("policy/clipfrac_low", "policy/clipfrac_high", "policy/ratio")


def mistake(exercise: str, name: str) -> str:
    return known_mistake(PART, exercise, name)


def diagnose(exercise: str, got, *args, **kwargs) -> list[str]:
    return matching_mistakes(PART, exercise, lambda fn: fn(*args, **kwargs), got, rtol=1e-5, atol=1e-5)


def expect_value_error(impl, exercise: str, call: str, *args, named: str | tuple[str, ...] | None = None,
                       **kwargs) -> None:
    """``named``: known mistakes of ``exercise`` to name on failure (looked up only then: the registry's first load costs).
    Another exception than ValueError (a ZeroDivisionError, a view's RuntimeError) fails too, as a wrong answer."""
    try:
        getattr(impl, exercise)(*args, **kwargs)
    except ValueError:
        return
    except NotImplementedError:
        raise
    except Exception as e:  # noqa: BLE001 - the docstring promises a ValueError, not whatever the arithmetic raises
        problem = f"expected a ValueError, got {type(e).__name__}: {e}"
    else:
        problem = "expected a ValueError"
    names = (named,) if isinstance(named, str) else (named or ())
    raise WrongAnswer(explain(call, problem, [mistake(exercise, name) for name in names]))


def randn(seed: int, *shape: int, scale: float = 1.0) -> torch.Tensor:
    return scale * torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def ragged_mask(seed: int, batch: int, resp: int, dtype=torch.float32, empty_row: bool = True) -> torch.Tensor:
    """Right-padded mask: one row full length, one a single token, and (optionally) one row all zeros."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, resp + 1, (batch,), generator=g)
    lengths[0], lengths[-1] = resp, 1
    if empty_row:
        lengths[1] = 0
    return (torch.arange(resp)[None] < lengths[:, None]).to(dtype)


def with_padding_garbage(x: torch.Tensor, mask: torch.Tensor, value: float = 7.0) -> torch.Tensor:
    return torch.where(mask.bool(), x, torch.full_like(x, value))


# --- answer_reward ----------------------------------------------------------------------

CASES = [
    ("3+4=7<answer>7</answer>", "7"),            # right
    ("<answer>0632</answer>", "632"),             # right: leading zeros do not matter
    ("<answer>000</answer>", "0"),                # right: zero written with zeros
    ("<answer>12</answer>", "13"),                # well-formed, wrong
    ("x<answer>1</answer>junk<answer>632</answer>", "632"),   # the first pair counts: wrong
    ("<answer>632</answer><answer>1</answer>", "632"),        # the first pair counts: right
    ("</answer><answer>7</answer>", "7"),          # right: a stray </answer> before the pair is not its end
    ("<answer>x</answer><answer>7</answer>", "7"),  # the first pair is malformed: 0, not the later right one
    ("<answer>1\n2</answer><answer>7</answer>", "7"),  # the first pair spans a line break: malformed, 0
    ("<answer>12\n</answer>", "12"),              # a trailing newline is another character: 0 (regex `$` lets it by)
    ("<answer>632</answer>", "0632"),             # right: the answer's leading zeros do not matter either
    ("<answer> 12 </answer>", "12"),              # spaces: not well-formed
    ("<answer>-5</answer>", "5"),                 # sign: not well-formed
    ("<answer>٣</answer>", "3"),                  # a non-ASCII digit: not well-formed
    ("<answer>²</answer>", "2"),                  # a superscript: not well-formed
    ("<answer></answer>", "0"),                   # empty: not well-formed
    ("<answer>12", "12"),                         # no closing tag
    ("12</answer>", "12"),                        # no opening tag
    ("</answer>12<answer>", "12"),                # tags in the wrong order
    ("the answer is 7", "7"),                     # no tags
    ("", "7"),                                    # nothing at all
    ("answer>12</answer>", "12"),                 # no opening tag: find's −1 is not a position (text[7:] is "12")
    ("<answer>9876543210</answer>", "9876543210"),  # right: every ASCII digit belongs
    ("<answer>" + "9" * 5000 + "</answer>", "9" * 5000),   # right, and too long for int()
    ("<answer>" + "8" * 5000 + "</answer>", "9" * 5000),   # wrong, and too long for int()
]


def call_reward(impl, completions, answers, format_reward):
    """The learner's rewards; an exception is a failure, named when it is int()'s digit limit."""
    try:
        return impl.answer_reward(completions, answers, format_reward)
    except NotImplementedError:
        raise
    except Exception as e:  # noqa: BLE001 - any exception is the bug under test
        labels = [mistake("answer_reward", "int_conversion_raises")] if "digits" in str(e) else []
        raise WrongAnswer(explain(describe_call("answer_reward", completions, answers, format_reward),
                                  f"raised {type(e).__name__}: {e} — the verifier must never raise on a completion",
                                  labels)) from None


@pytest.mark.exercise("answer_reward")
@pytest.mark.parametrize("format_reward", [0.1, 0.0, 0.5])
def test_answer_reward_matches_reference_on_every_case(impl, ref, format_reward):
    completions, answers = [c for c, _ in CASES], [a for _, a in CASES]
    got = call_reward(impl, completions, answers, format_reward)
    expected = ref.answer_reward(completions, answers, format_reward)
    if not isinstance(got, torch.Tensor) or got.dtype != torch.float32 or got.shape != expected.shape:
        raise WrongAnswer(explain(describe_call("answer_reward", completions, answers, format_reward),
                                  f"expected a float32 tensor of shape {tuple(expected.shape)}, got {got!r}"))
    for (text, answer), g, e in zip(CASES, got.tolist(), expected.tolist()):
        if g != e:
            raise WrongAnswer(explain(describe_call("answer_reward", [text[:60]], [answer[:20]], format_reward),
                                      f"expected {e}, got {g}",
                                      diagnose("answer_reward", got, completions, answers, format_reward)))


@pytest.mark.exercise("answer_reward")
@pytest.mark.parametrize("format_reward", [0.1, 0.3])
def test_a_well_formed_wrong_answer_gets_exactly_the_format_reward(impl, format_reward):
    completions = ["5+6=11<answer>11</answer>", "5+6=12<answer>12</answer>", "5+6 is 11"]
    got = call_reward(impl, completions, ["11"] * 3, format_reward)
    expected = torch.tensor([1.0, format_reward, 0.0])
    assert_close(got, expected, rtol=0, atol=1e-7, name="rewards", msg=lambda m: explain(
        describe_call("answer_reward", completions, ["11"] * 3, format_reward),
        "right → 1, well-formed wrong → format_reward, no answer → 0\n  " + m,
        diagnose("answer_reward", got, completions, ["11"] * 3, format_reward)))


@pytest.mark.exercise("answer_reward")
def test_answer_reward_default_format_reward_is_tinyzeros(impl, ref):
    completions, answers = [c for c, _ in CASES], [a for _, a in CASES]
    check_exercise(impl, ref, "answer_reward", lambda fn: fn(completions, answers),
                   call="answer_reward(completions, answers) — the default format_reward=0.1")


FRAGMENTS = ["<answer>", "</answer>", "<answer", "answer>", "0", "7", "12", " ", "-", "x", "٣", "²", "\n", "<", "/"]


@pytest.mark.exercise("answer_reward")
@HYPOTHESIS
@given(texts=st.lists(st.one_of(st.text(max_size=30), st.lists(st.sampled_from(FRAGMENTS), max_size=8).map("".join)),
                      min_size=1, max_size=6),
       answer=st.sampled_from(["7", "12", "0"]), format_reward=st.sampled_from([0.0, 0.1, 0.5]))
def test_answer_reward_never_raises_and_agrees_with_the_reference(impl, ref, texts, answer, format_reward):
    answers = [answer] * len(texts)
    got = call_reward(impl, texts, answers, format_reward)
    expected = ref.answer_reward(texts, answers, format_reward)
    if got.tolist() != expected.tolist():
        raise WrongAnswer(explain(describe_call("answer_reward", texts, answers, format_reward),
                                  f"expected {expected.tolist()}, got {got.tolist()} for {texts!r}",
                                  diagnose("answer_reward", got, texts, answers, format_reward)))


@pytest.mark.exercise("answer_reward")
@pytest.mark.parametrize("completions,answers,format_reward", [
    (["<answer>1</answer>"], ["1", "2"], 0.1), (["<answer>1</answer>"], ["1"], 1.0), (["<answer>1</answer>"], ["1"], -0.1),
    (["<answer>1</answer>", "<answer>2</answer>"], ["1", "3"], float("nan"))])
def test_answer_reward_rejects_bad_arguments(impl, completions, answers, format_reward):
    # One rule broken at a time; NaN passes `x < 0 or x >= 1` (every comparison with NaN is False).
    nan = format_reward != format_reward
    expect_value_error(impl, "answer_reward", describe_call("answer_reward", completions, answers, format_reward),
                       completions, answers, format_reward,
                       named="nan_format_reward_accepted" if nan else None)


# --- pass_at_k --------------------------------------------------------------------------

def call_pass(impl, n, c, k):
    try:
        return impl.pass_at_k(n, c, k)
    except (OverflowError, ZeroDivisionError) as e:
        labels = []
        if isinstance(e, OverflowError):  # which floats overflow here: factorials from 171!, binomials beyond ~1.8e308
            labels = [mistake("pass_at_k", name) for name, big in (("float_factorials", math.factorial(n)),
                                                                    ("float_binomials", math.comb(n, k)))
                      if big > sys.float_info.max]
        raise WrongAnswer(explain(f"pass_at_k({n}, {c}, {k})", f"raised {type(e).__name__}: {e}", labels)) from None


def exact_pass_at_k(n: int, c: int, k: int) -> float:
    return float(1 - Fraction(math.comb(n - c, k), math.comb(n, k)))


@pytest.mark.exercise("pass_at_k")
@pytest.mark.parametrize("n", [1, 2, 5, 16])
def test_pass_at_k_matches_reference_for_every_c_and_k(impl, ref, n):
    for c in range(n + 1):
        for k in range(1, n + 1):
            check_call(impl, ref, "pass_at_k", n, c, k, rtol=1e-9, atol=1e-9)


@pytest.mark.exercise("pass_at_k")
def test_pass_at_k_is_the_chance_that_a_random_k_subset_holds_a_correct_sample(impl):
    # Enumerate every k-subset of n = 7 samples (the first c correct): the share holding at least one
    # correct sample IS pass@k for these samples; the unbiased estimator must equal it exactly.
    n = 7
    for c in range(n + 1):
        for k in range(1, n + 1):
            subsets = list(itertools.combinations(range(n), k))
            share = sum(any(i < c for i in s) for s in subsets) / len(subsets)
            got = call_pass(impl, n, c, k)
            if abs(got - share) > 1e-12:
                raise WrongAnswer(explain(f"pass_at_k({n}, {c}, {k})",
                                          f"{share:.6f} of the {len(subsets)} subsets of size {k} hold a correct sample; got {got}",
                                          diagnose("pass_at_k", got, n, c, k)))


@pytest.mark.exercise("pass_at_k")
@pytest.mark.parametrize("n,c,k", [(200, 3, 16), (500, 1, 1), (500, 17, 64), (400, 200, 100), (300, 0, 50),
                                   (1000, 999, 2), (256, 5, 256), (2000, 10, 1000), (1100, 550, 550)])
def test_pass_at_k_is_stable_for_hundreds_of_samples(impl, n, c, k):
    got = call_pass(impl, n, c, k)
    exact = exact_pass_at_k(n, c, k)
    if not isinstance(got, float) or not math.isfinite(got) or abs(got - exact) > 1e-9:
        raise WrongAnswer(explain(f"pass_at_k({n}, {c}, {k})", f"expected {exact!r} (exact rational arithmetic), got {got!r}",
                                  diagnose("pass_at_k", got, n, c, k)))


@pytest.mark.exercise("pass_at_k")
@pytest.mark.parametrize("n,c,k,expected", [(10, 0, 1, 0.0), (10, 0, 10, 0.0), (10, 10, 3, 1.0), (10, 8, 3, 1.0),
                                            (10, 1, 10, 1.0), (10, 3, 1, 0.3), (64, 16, 1, 0.25)])
def test_pass_at_k_edges(impl, n, c, k, expected):
    got = call_pass(impl, n, c, k)
    if abs(got - expected) > 1e-12:
        raise WrongAnswer(explain(f"pass_at_k({n}, {c}, {k})", f"expected {expected}, got {got!r}",
                                  diagnose("pass_at_k", got, n, c, k)))


@pytest.mark.exercise("pass_at_k")
@pytest.mark.parametrize("n,c,k,named", [(5, 6, 1, None), (5, -1, 1, None), (5, 2, 0, None), (5, 2, 6, None),
                                         (5, 2, -1, "only_k_zero_rejected")])
def test_pass_at_k_rejects_impossible_counts(impl, n, c, k, named):
    expect_value_error(impl, "pass_at_k", f"pass_at_k({n}, {c}, {k})", n, c, k, named=named)


# --- groups_with_signal -----------------------------------------------------------------

SIGNAL_REWARDS = {
    2: [1.0, 1.0, 0.0, 1.0, 0.1, 0.1, 0.0, 0.0, 1.0, 0.0],
    4: [1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.001, 0.0, 0.0, 0.0, 0.0, 0.1, 1.0, 0.1, 0.0, -1.0, 1.0, 0.0, 0.0],
    8: [0.5] * 8 + [0.0] * 7 + [1.0] + [1.0] * 8,
}


@pytest.mark.exercise("groups_with_signal")
@pytest.mark.parametrize("group_size", [2, 4, 8])
def test_groups_with_signal_matches_reference(impl, ref, group_size):
    check_call(impl, ref, "groups_with_signal", torch.tensor(SIGNAL_REWARDS[group_size]), group_size)


@pytest.mark.exercise("groups_with_signal")
def test_all_right_and_all_wrong_groups_carry_no_signal(impl):
    rewards = torch.tensor([1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.1, 0.1, 0.1])
    got = impl.groups_with_signal(rewards, 3)
    if got.tolist() != [False, False, True, False]:
        raise WrongAnswer(explain(describe_call("groups_with_signal", rewards, 3),
                                  f"expected [False, False, True, False] (a group needs max > min), got {got.tolist()}",
                                  diagnose("groups_with_signal", got, rewards, 3)))


def _next_float32(x: float) -> float:
    return torch.nextafter(torch.tensor(x), torch.tensor(2.0)).item()


@pytest.mark.exercise("groups_with_signal")
@pytest.mark.parametrize("groups", [["0.1", "tiny"], ["0.1"], ["tiny"], ["0.3", "0.1", "tiny", "0.7"]], ids="-".join)
def test_groups_with_signal_is_exact_for_rewards_not_exact_in_binary(impl, ref, groups):
    # "max − min > 0 exactly": eight equal rewards of 0.1 (or 0.3, 0.7) have no signal, although their float32
    # std is ~1e-8, not 0; a group whose rewards differ by one float32 step (~7e-9) has one, far below any
    # tolerance. One group alone, and several.
    rows = {"0.1": [0.1] * 8, "0.3": [0.3] * 8, "0.7": [0.7] * 8, "tiny": [0.1] * 7 + [_next_float32(0.1)]}
    rewards = torch.tensor([r for name in groups for r in rows[name]])
    got = check_call(impl, ref, "groups_with_signal", rewards, 8)
    expected = [name == "tiny" for name in groups]
    if got.tolist() != expected:  # the docstring's rule, whatever the reference says
        raise WrongAnswer(explain(describe_call("groups_with_signal", rewards, 8), f"expected {expected}, got {got.tolist()}",
                                  diagnose("groups_with_signal", got, rewards, 8)))


@pytest.mark.exercise("groups_with_signal")
@pytest.mark.parametrize("n,group_size,named", [
    (8, 1, None), (10, 4, None),
    (8, 0, ("group_size_checked_after_the_modulo", "only_group_size_one_rejected")),  # `8 % 0` raises ZeroDivisionError
    (8, -2, "only_group_size_one_rejected")])  # 8 % −2 == 0: only `group_size < 2` refuses it
def test_groups_with_signal_rejects_bad_groups(impl, n, group_size, named):
    expect_value_error(impl, "groups_with_signal", f"groups_with_signal(Tensor[{n}], {group_size})",
                       torch.arange(n, dtype=torch.float32), group_size, named=named)


# --- overlong_penalty -------------------------------------------------------------------

@pytest.mark.exercise("overlong_penalty")
@pytest.mark.parametrize("max_len,cache_len", [(20, 5), (64, 16), (10, 10), (8, 1)])
def test_overlong_penalty_matches_reference(impl, ref, max_len, cache_len):
    check_call(impl, ref, "overlong_penalty", torch.arange(0, max_len + 6), max_len, cache_len)


@pytest.mark.exercise("overlong_penalty")
def test_overlong_penalty_worked_example(impl):
    # L_max = 20, cache 5: free up to 15 tokens, then −0.2 per token, −1 at 20 and beyond.
    lengths = torch.tensor([3, 15, 16, 18, 20, 21, 40])
    got = impl.overlong_penalty(lengths, 20, 5)
    expected = torch.tensor([0.0, 0.0, -0.2, -0.6, -1.0, -1.0, -1.0])
    assert_close(got, expected, rtol=0, atol=1e-6, name="penalties", msg=lambda m: explain(
        describe_call("overlong_penalty", lengths, 20, 5), "see the worked example in this test\n  " + m,
        diagnose("overlong_penalty", got, lengths, 20, 5)))


@pytest.mark.exercise("overlong_penalty")
@pytest.mark.parametrize("max_len,cache_len,named", [(20, 0, None), (20, 21, None), (20, -5, "only_zero_cache_rejected")])
def test_overlong_penalty_rejects_bad_cache(impl, max_len, cache_len, named):
    expect_value_error(impl, "overlong_penalty", f"overlong_penalty(lengths, {max_len}, {cache_len})",
                       torch.tensor([1, 2]), max_len, cache_len, named=named)


# --- completion_mask --------------------------------------------------------------------

def responses_for(eos_id: int) -> list[torch.Tensor]:
    return [
        torch.tensor([5, 6, 7, eos_id]),           # finished
        torch.tensor([0, 4, 0]),                   # truncated, with id 0 (the pad id) sampled twice
        torch.tensor([9, 0, 8, 3, 3, 4, eos_id]),  # finished exactly at the longest length
        torch.tensor([eos_id]),                    # finished at once: one real token
        torch.tensor([], dtype=torch.long),        # empty: never finished
        torch.tensor([4, 4, 4, 4, 4, 4, 4]),       # truncated at the longest length
    ]


@pytest.mark.exercise("completion_mask")
@pytest.mark.parametrize("eos_id", [2, 3, 0])  # 0: the padding's id too (an empty response must stay truncated)
@pytest.mark.parametrize("mask_truncated", [True, False])
def test_completion_mask_matches_reference(impl, ref, eos_id, mask_truncated):
    check_call(impl, ref, "completion_mask", responses_for(eos_id), eos_id, mask_truncated)


@pytest.mark.exercise("completion_mask")
def test_completion_mask_worked_example(impl):
    responses = [torch.tensor([7, 0, 2]), torch.tensor([7, 0]), torch.tensor([2])]
    mask, truncated = impl.completion_mask(responses, 2, True)
    expected = torch.tensor([[1.0, 1.0, 1.0], [0.0, 0.0, 0.0], [1.0, 0.0, 0.0]])
    if truncated.tolist() != [False, True, False] or not torch.equal(mask, expected):
        raise WrongAnswer(explain(describe_call("completion_mask", responses, 2, True),
                                  f"expected truncated [False, True, False] and mask {expected.tolist()}; "
                                  f"got {truncated.tolist()} and {mask.tolist()}",
                                  diagnose("completion_mask", (mask, truncated), responses, 2, True)))


def responses_with_a_middle_eos(eos_id: int) -> list[torch.Tensor]:
    return [
        torch.tensor([5, eos_id, 7]),              # an EOS in the middle, not at the end: truncated, 3 tokens
        torch.tensor([4, eos_id, 6, eos_id]),      # an EOS in the middle and at the end: finished, 4 tokens
        torch.tensor([eos_id, eos_id]),            # two EOS: finished, 2 tokens
        torch.tensor([9, 8]),                      # no EOS: truncated
    ]


@pytest.mark.exercise("completion_mask")
@pytest.mark.parametrize("eos_id", [2, 3])
@pytest.mark.parametrize("mask_truncated", [True, False])
def test_completion_mask_with_an_eos_in_the_middle(impl, ref, eos_id, mask_truncated):
    # Only the last token decides "truncated", and the length is len(r) whatever ids come before it.
    responses = responses_with_a_middle_eos(eos_id)
    mask, truncated = check_call(impl, ref, "completion_mask", responses, eos_id, mask_truncated)
    lengths = [3, 4, 2, 2]
    expected = torch.tensor([[float(t < n) for t in range(4)] for n in lengths])
    if mask_truncated:
        expected[[0, 3]] = 0.0
    if truncated.tolist() != [True, False, False, True] or not torch.equal(mask, expected):  # the docstring's example
        raise WrongAnswer(explain(describe_call("completion_mask", responses, eos_id, mask_truncated),
                                  f"expected truncated [True, False, False, True] and mask {expected.tolist()}; "
                                  f"got {truncated.tolist()} and {mask.tolist()}"))


@pytest.mark.exercise("completion_mask")
@pytest.mark.parametrize("mask_truncated", [True, False])
def test_completion_mask_is_as_wide_as_the_longest_response_even_a_truncated_one(impl, ref, mask_truncated):
    # "resp is the longest response's length": here the longest is truncated, so with mask_truncated its row is all
    # zeros, but the mask keeps its width (the caller pads the responses to that width and multiplies them with it).
    responses = [torch.tensor([5, 2]), torch.tensor([4, 4, 4, 4, 4]), torch.tensor([2])]
    mask, truncated = check_call(impl, ref, "completion_mask", responses, 2, mask_truncated)
    if tuple(mask.shape) != (3, 5):
        raise WrongAnswer(explain(describe_call("completion_mask", responses, 2, mask_truncated),
                                  f"expected a mask of shape (3, 5) (the longest response has 5 tokens), got {tuple(mask.shape)}",
                                  diagnose("completion_mask", (mask, truncated), responses, 2, mask_truncated)))


@pytest.mark.exercise("completion_mask")
def test_completion_mask_masks_truncated_rows_by_default(impl, ref):
    check_exercise(impl, ref, "completion_mask", lambda fn: fn(responses_for(2), 2),
                   call="completion_mask(responses, 2) — the default mask_truncated=True")


@pytest.mark.exercise("completion_mask")
def test_completion_mask_rejects_no_responses(impl):
    expect_value_error(impl, "completion_mask", "completion_mask([], 2)", [], 2)


# --- the losses: shared inputs -----------------------------------------------------------

def loss_inputs(seed: int, batch: int = 7, resp: int = 6, mask_dtype=torch.float32, spread: float = 0.4,
                empty_row: bool = True):
    mask = ragged_mask(seed, batch, resp, mask_dtype, empty_row)
    old = -torch.rand(batch, resp, generator=torch.Generator().manual_seed(seed)) * 3
    logprobs = old + spread * randn(seed + 1, batch, resp)  # many ratios outside either clip range
    advantages = randn(seed + 3, batch)
    return with_padding_garbage(logprobs, mask), with_padding_garbage(old, mask, -3.0), advantages, mask


def gradient_check(impl, ref, exercise: str, seed: int, *settings, spread: float = 0.4):
    def run(fn):
        logprobs, old, adv, mask = loss_inputs(seed, spread=spread)
        logprobs.requires_grad_(True)
        loss, _ = fn(logprobs, old, adv, mask, *settings)
        loss.backward()
        return logprobs.grad
    check_exercise(impl, ref, exercise, run, call=f"{exercise}(..., {', '.join(map(repr, settings))}).backward(): "
                                                 "d loss / d logprobs")


def stats_have_no_graph(impl, exercise: str, *settings, spread: float = 0.4):
    logprobs, old, adv, mask = loss_inputs(11, spread=spread)
    logprobs.requires_grad_(True)
    old.requires_grad_(True)
    _, stats = getattr(impl, exercise)(logprobs, old, adv.requires_grad_(True), mask, *settings)
    kept = sorted(k for k, v in stats.items() if v.requires_grad)
    if kept:
        raise WrongAnswer(explain(f"{exercise}(inputs that require grad, ...)", f"stats {kept} keep the autograd graph",
                                  [mistake(exercise, "stats_keep_the_graph")] if exercise == "clip_higher_loss" else []))


def empty_mask_check(impl, ref, exercise: str, *settings, weighted: bool = False):
    """Every row masked out (all completions truncated): loss 0, finite, and backward works.

    ``weighted``: with Part 10's importance weights, which are 0 outside the mask, so all 0 here."""
    logprobs, old, adv, mask = loss_inputs(12)
    mask = torch.zeros_like(mask)
    logprobs.requires_grad_(True)
    kwargs = {"weights": torch.zeros_like(mask)} if weighted else {}
    loss, stats = getattr(impl, exercise)(logprobs, old, adv, mask, *settings, **kwargs)
    expected, _ = getattr(ref, exercise)(logprobs.detach(), old, adv, mask, *settings, **kwargs)
    stats = documented_keys(stats, LOSS_STATS)
    # The docstrings: the loss is 0 and every stat is 0 — not NaN (the trainer stops on a NaN stat), nor another number.
    if not torch.isfinite(loss) or loss.item() != expected.item() or not all(v.item() == 0.0 for v in stats.values()):
        labels = [mistake(exercise, "nan_for_an_empty_mask")] if exercise == "clip_higher_loss" else []
        raise WrongAnswer(explain(f"{exercise}(..., an all-zero mask{', weights=0' if weighted else ''})",
                                  f"expected loss {expected.item()} and every stat 0, got {loss.item()} and "
                                  f"{ {k: v.item() for k, v in stats.items()} }", labels))
    if not loss.requires_grad:
        raise WrongAnswer(explain(f"{exercise}(logprobs that require grad, ..., an all-zero mask)",
                                  "the loss 0 carries no graph, so loss.backward() raises: the RLVR trainer calls "
                                  "backward on every minibatch, and one whose completions were all truncated would "
                                  "stop training; build the 0 from logprobs (e.g. (per_token * mask).sum())",
                                  [mistake(exercise, "constant_zero_for_an_empty_mask")]))
    loss.backward()
    if logprobs.grad is not None and not torch.equal(logprobs.grad, torch.zeros_like(logprobs.grad)):
        raise WrongAnswer(explain(f"{exercise}(..., an all-zero mask).backward()", "a masked-out token got a gradient"))


def single_token_check(impl, ref, exercise: str, *settings):
    """One real token in the whole batch: every mean (token, row, stats) is over exactly one thing."""
    logprobs, old, adv, _ = loss_inputs(13, spread=0.6)
    mask = torch.zeros(logprobs.shape)
    mask[2, 0] = 1.0
    check_call_documented_keys(impl, ref, exercise, with_padding_garbage(logprobs, mask),
                               with_padding_garbage(old, mask, -3.0), adv, mask, *settings, keys=LOSS_STATS)


def tie_inputs():
    """Ratios exactly 1 (logprobs = old logprobs), A = ±1; ratios 2 and 1/4 with A = 0. One token per row."""
    old = torch.zeros(4, 1)
    logprobs = torch.tensor([[0.0], [0.0], [math.log(2.0)], [math.log(0.25)]])
    return logprobs, old, torch.tensor([1.0, -1.0, 0.0, 0.0]), torch.ones(4, 1)


def tie_check(impl, exercise: str, expected_low: float, expected_high: float, *more_settings, why: str):
    """With eps_low = eps_high = 0 a ratio of exactly 1 sits *on* both bounds: the clip changes nothing there."""
    logprobs, old, adv, mask = tie_inputs()
    _, stats = getattr(impl, exercise)(logprobs, old, adv, mask, 0.0, 0.0, *more_settings)
    got = (stats["policy/clipfrac_low"].item(), stats["policy/clipfrac_high"].item())
    if abs(got[0] - expected_low) > 1e-6 or abs(got[1] - expected_high) > 1e-6:
        raise WrongAnswer(explain(describe_call(exercise, logprobs, old, adv, mask, 0.0, 0.0, *more_settings),
                                  f"expected clipfrac_low {expected_low} and clipfrac_high {expected_high} ({why}); "
                                  f"got {got[0]} and {got[1]}"))


# --- clip_higher_loss -------------------------------------------------------------------

EPS_PAIRS = [(0.2, 0.28), (0.1, 0.3), (0.3, 0.15)]


@pytest.mark.exercise("clip_higher_loss")
@pytest.mark.parametrize("normalisation", ["token", "sequence"])
@pytest.mark.parametrize("seed,eps_low,eps_high", [(s, *e) for s, e in enumerate(EPS_PAIRS)])
def test_clip_higher_loss_matches_reference(impl, ref, normalisation, seed, eps_low, eps_high):
    args = (*loss_inputs(seed, spread=0.6), eps_low, eps_high, normalisation)
    _, stats = ref.clip_higher_loss(*args)
    assert stats["policy/clipfrac_low"] > 0 and stats["policy/clipfrac_high"] > 0, "test inputs must bind both clips"
    check_call_documented_keys(impl, ref, "clip_higher_loss", *args, keys=LOSS_STATS)


@pytest.mark.exercise("clip_higher_loss")
@pytest.mark.parametrize("mask_dtype", MASK_DTYPES, ids=str)
def test_clip_higher_loss_takes_any_mask_dtype(impl, ref, mask_dtype):
    check_call_documented_keys(impl, ref, "clip_higher_loss", *loss_inputs(4, mask_dtype=mask_dtype), 0.2, 0.28, "sequence",
                               keys=LOSS_STATS)


@pytest.mark.exercise("clip_higher_loss")
@pytest.mark.parametrize("normalisation", ["token", "sequence"])
def test_clip_higher_loss_gradient_matches_reference(impl, ref, normalisation):
    gradient_check(impl, ref, "clip_higher_loss", 5, 0.15, 0.3, normalisation)


@pytest.mark.exercise("clip_higher_loss")
def test_clip_higher_binds_at_one_minus_eps_low_and_one_plus_eps_high(impl):
    # One token per row. Row 0: A = +1, ratio 1.5 → objective capped at 1 + 0.28: loss −1.28, no gradient.
    # Row 1: A = −1, ratio 0.5 → capped at 1 − 0.2: loss +0.8, no gradient. Row 2: A = +1, ratio 1.25 (inside
    # the upper range 1.28, outside a symmetric 1.2): loss −1.25, gradient −1.25.
    old = torch.zeros(3, 1)
    logprobs = torch.log(torch.tensor([[1.5], [0.5], [1.25]])).requires_grad_(True)
    adv, mask = torch.tensor([1.0, -1.0, 1.0]), torch.ones(3, 1)
    loss, stats = impl.clip_higher_loss(logprobs, old, adv, mask, 0.2, 0.28, "token")
    loss.backward()
    expected_loss = (-1.28 + 0.8 - 1.25) / 3
    expected_grad = torch.tensor([[0.0], [0.0], [-1.25 / 3]])
    ok = abs(loss.item() - expected_loss) < 1e-5 and torch.allclose(logprobs.grad, expected_grad, atol=1e-5)
    ok = ok and abs(stats["policy/clipfrac_low"].item() - 1 / 3) < 1e-6 and abs(stats["policy/clipfrac_high"].item() - 1 / 3) < 1e-6
    if not ok:
        raise WrongAnswer(explain(describe_call("clip_higher_loss", logprobs, old, adv, mask, 0.2, 0.28, "token"),
                                  f"expected loss {expected_loss:.5f}, grad {expected_grad.flatten().tolist()}, clip fractions "
                                  f"1/3 and 1/3; got {loss.item():.5f}, {logprobs.grad.flatten().tolist()}, "
                                  f"{stats['policy/clipfrac_low'].item():.4f} and {stats['policy/clipfrac_high'].item():.4f}",
                                  diagnose("clip_higher_loss", (loss, stats), logprobs.detach(), old, adv, mask, 0.2, 0.28,
                                           "token")))


@pytest.mark.exercise("clip_higher_loss")
def test_clip_higher_stats_have_no_graph(impl):
    stats_have_no_graph(impl, "clip_higher_loss", 0.2, 0.28, "token")


@pytest.mark.exercise("clip_higher_loss")
@pytest.mark.parametrize("normalisation", ["token", "sequence"])
def test_clip_higher_loss_with_every_row_masked_out(impl, ref, normalisation):
    empty_mask_check(impl, ref, "clip_higher_loss", 0.2, 0.28, normalisation)


@pytest.mark.exercise("clip_higher_loss")
def test_clip_higher_loss_rejects_an_unknown_normalisation(impl):
    expect_value_error(impl, "clip_higher_loss", "clip_higher_loss(..., normalisation='mean')",
                       *loss_inputs(0), 0.2, 0.28, "mean")


@pytest.mark.exercise("clip_higher_loss")
def test_clip_higher_loss_defaults_are_dapos(impl, ref):
    inputs = loss_inputs(8, spread=0.6)
    _, stats = ref.clip_higher_loss(*inputs)
    assert stats["policy/clipfrac_low"] > 0 and stats["policy/clipfrac_high"] > 0, "test inputs must bind both clips"
    check_exercise(impl, ref, "clip_higher_loss", lambda fn: documented_keys(fn(*inputs), LOSS_STATS),
                   call="clip_higher_loss(logprobs, old_logprobs, advantages, mask) — the defaults: eps_low=0.2, "
                        "eps_high=0.28, normalisation='token'")


@pytest.mark.exercise("clip_higher_loss")
@pytest.mark.parametrize("normalisation", ["token", "sequence"])
def test_clip_higher_loss_with_a_single_real_token(impl, ref, normalisation):
    single_token_check(impl, ref, "clip_higher_loss", 0.2, 0.28, normalisation)


@pytest.mark.exercise("clip_higher_loss")
def test_clip_higher_counts_neither_a_ratio_on_its_bound_nor_a_zero_advantage(impl):
    tie_check(impl, "clip_higher_loss", 0.0, 0.0, "token",
              why="a clip binds where ratio < 1 − eps_low with A < 0 or ratio > 1 + eps_high with A > 0, strictly")


# --- gspo_loss --------------------------------------------------------------------------

@pytest.mark.exercise("gspo_loss")
@pytest.mark.parametrize("seed,eps_low,eps_high,spread", [(0, 3e-4, 4e-4, 1e-3), (1, 2e-4, 5e-4, 5e-4),
                                                          (2, 0.2, 0.28, 0.8), (3, 0.1, 0.05, 0.3)])
def test_gspo_loss_matches_reference(impl, ref, seed, eps_low, eps_high, spread):
    args = (*loss_inputs(seed, spread=spread, batch=10), eps_low, eps_high)
    _, stats = ref.gspo_loss(*args)
    assert 0 < stats["policy/clipfrac_low"] + stats["policy/clipfrac_high"] < 0.8, "test inputs must bind some clips, not all"
    check_call_documented_keys(impl, ref, "gspo_loss", *args, keys=LOSS_STATS)


@pytest.mark.exercise("gspo_loss")
@pytest.mark.parametrize("mask_dtype", MASK_DTYPES, ids=str)
def test_gspo_loss_takes_any_mask_dtype(impl, ref, mask_dtype):
    check_call_documented_keys(impl, ref, "gspo_loss", *loss_inputs(4, mask_dtype=mask_dtype, spread=1e-3), 3e-4, 4e-4,
                               keys=LOSS_STATS)


@pytest.mark.exercise("gspo_loss")
@pytest.mark.parametrize("eps_low,eps_high,spread", [(3e-4, 4e-4, 1e-3), (0.2, 0.28, 0.4)])
def test_gspo_loss_gradient_matches_reference(impl, ref, eps_low, eps_high, spread):
    gradient_check(impl, ref, "gspo_loss", 6, eps_low, eps_high, spread=spread)


@pytest.mark.exercise("gspo_loss")
def test_gspo_ratio_does_not_depend_on_length(impl):
    # Row 0 has log-ratios (0.1, 0.3): s = exp(0.2). Row 1 repeats them twice (0.1, 0.3, 0.1, 0.3): the same s.
    # With a wide clip range nothing binds, so both rows' losses are −A·exp(0.2): the loss is −exp(0.2) for A = 1.
    old = torch.zeros(2, 4)
    logprobs = torch.tensor([[0.1, 0.3, 5.0, 5.0], [0.1, 0.3, 0.1, 0.3]])
    mask = torch.tensor([[1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
    adv = torch.tensor([1.0, 1.0])
    loss, stats = impl.gspo_loss(logprobs, old, adv, mask, 0.5, 0.5)
    expected = -math.exp(0.2)
    if abs(loss.item() - expected) > 1e-5 or abs(stats["policy/ratio"].item() - math.exp(0.2)) > 1e-5:
        raise WrongAnswer(explain(describe_call("gspo_loss", logprobs, old, adv, mask, 0.5, 0.5),
                                  f"s_b is the geometric mean of the token ratios: expected loss {expected:.5f} and ratio "
                                  f"{math.exp(0.2):.5f}, got {loss.item():.5f} and {stats['policy/ratio'].item():.5f}",
                                  diagnose("gspo_loss", (loss, stats), logprobs, old, adv, mask, 0.5, 0.5)))


@pytest.mark.exercise("gspo_loss")
def test_gspo_clip_binds_per_sequence(impl):
    # Row 0: A = +1, s = exp(0.01) > 1 + 4e-4 → capped, no gradient for any of its tokens, even the one
    # whose own ratio is below 1. Row 1: A = +1, s = 1 exactly (log-ratios +0.002, −0.002) → inside: gradient 1/2 per token.
    old = torch.zeros(2, 2)
    logprobs = torch.tensor([[0.03, -0.01], [0.002, -0.002]], requires_grad=True)
    adv, mask = torch.tensor([1.0, 1.0]), torch.ones(2, 2)
    loss, stats = impl.gspo_loss(logprobs, old, adv, mask, 3e-4, 4e-4)
    loss.backward()
    expected_grad = torch.tensor([[0.0, 0.0], [-0.25, -0.25]])
    if not torch.allclose(logprobs.grad, expected_grad, atol=1e-5) or abs(stats["policy/clipfrac_high"].item() - 0.5) > 1e-6:
        raise WrongAnswer(explain(describe_call("gspo_loss", logprobs, old, adv, mask, 3e-4, 4e-4),
                                  f"expected grad {expected_grad.tolist()} and clipfrac_high 0.5; got "
                                  f"{logprobs.grad.tolist()} and {stats['policy/clipfrac_high'].item()}",
                                  diagnose("gspo_loss", (loss, stats), logprobs.detach(), old, adv, mask, 3e-4, 4e-4)))


@pytest.mark.exercise("gspo_loss")
def test_gspo_stats_have_no_graph(impl):
    stats_have_no_graph(impl, "gspo_loss", 3e-4, 4e-4, spread=1e-3)


@pytest.mark.exercise("gspo_loss")
def test_gspo_loss_with_every_row_masked_out(impl, ref):
    empty_mask_check(impl, ref, "gspo_loss", 3e-4, 4e-4)


@pytest.mark.exercise("gspo_loss")
def test_gspo_loss_defaults_are_the_papers(impl, ref):
    inputs = loss_inputs(0, spread=1e-3, batch=10)
    _, stats = ref.gspo_loss(*inputs)
    assert stats["policy/clipfrac_low"] > 0 and stats["policy/clipfrac_high"] > 0, "test inputs must bind both clips"
    check_exercise(impl, ref, "gspo_loss", lambda fn: documented_keys(fn(*inputs), LOSS_STATS),
                   call="gspo_loss(logprobs, old_logprobs, advantages, mask) — the defaults: eps_low=3e-4, eps_high=4e-4")


@pytest.mark.exercise("gspo_loss")
def test_gspo_loss_with_a_single_real_token(impl, ref):
    single_token_check(impl, ref, "gspo_loss", 3e-4, 4e-4)


@pytest.mark.exercise("gspo_loss")
def test_gspo_counts_neither_a_ratio_on_its_bound_nor_a_zero_advantage(impl):
    tie_check(impl, "gspo_loss", 0.0, 0.0,
              why="a clip binds where s < 1 − eps_low with A < 0 or s > 1 + eps_high with A > 0, strictly")


# --- cispo_loss -------------------------------------------------------------------------

CISPO_SETTINGS = [(1.0, 0.28), (0.2, 0.2), (0.5, 2.0)]


@pytest.mark.exercise("cispo_loss")
@pytest.mark.parametrize("normalisation", ["token", "sequence"])
@pytest.mark.parametrize("seed,eps_low,eps_high", [(s, *e) for s, e in enumerate(CISPO_SETTINGS)])
def test_cispo_loss_matches_reference(impl, ref, normalisation, seed, eps_low, eps_high):
    check_call_documented_keys(impl, ref, "cispo_loss", *loss_inputs(seed, spread=0.8), eps_low, eps_high, normalisation,
                               keys=LOSS_STATS)


@pytest.mark.exercise("cispo_loss")
@pytest.mark.parametrize("mask_dtype", MASK_DTYPES, ids=str)
def test_cispo_loss_takes_any_mask_dtype(impl, ref, mask_dtype):
    check_call_documented_keys(impl, ref, "cispo_loss", *loss_inputs(4, mask_dtype=mask_dtype), 1.0, 0.28, "token",
                               keys=LOSS_STATS)


@pytest.mark.exercise("cispo_loss")
@pytest.mark.parametrize("normalisation", ["token", "sequence"])
@pytest.mark.parametrize("eps_low,eps_high", [(1.0, 0.28), (0.2, 0.5)])
def test_cispo_loss_gradient_matches_reference(impl, ref, normalisation, eps_low, eps_high):
    gradient_check(impl, ref, "cispo_loss", 7, eps_low, eps_high, normalisation, spread=0.8)


@pytest.mark.exercise("cispo_loss")
def test_cispo_keeps_the_gradient_of_tokens_outside_the_clip(impl):
    # Ratios 3 (A = +1) and 0.5 (A = −1), ε_low = 0.2, ε_high = 0.28: PPO would drop both tokens' gradients.
    # CISPO's weights are 1.28 and 0.8, so d loss / d logprobs = −w·A / 2 = −0.64 and +0.4.
    old = torch.log(torch.tensor([[1.0 / 3.0], [2.0]]))
    logprobs = torch.zeros(2, 1, requires_grad=True)
    adv, mask = torch.tensor([1.0, -1.0]), torch.ones(2, 1)
    loss, stats = impl.cispo_loss(logprobs, old, adv, mask, 0.2, 0.28, "token")
    loss.backward()
    expected = torch.tensor([[-0.64], [0.4]])
    if not torch.allclose(logprobs.grad, expected, atol=1e-5) or abs(stats["policy/clipfrac_high"].item() - 0.5) > 1e-6:
        raise WrongAnswer(explain(describe_call("cispo_loss", logprobs, old, adv, mask, 0.2, 0.28, "token"),
                                  f"expected grad {expected.flatten().tolist()} and clipfrac_high 0.5; got "
                                  f"{logprobs.grad.flatten().tolist()} and {stats['policy/clipfrac_high'].item()}",
                                  diagnose("cispo_loss", (loss, stats), logprobs.detach(), old, adv, mask, 0.2, 0.28, "token")))


@pytest.mark.exercise("cispo_loss")
def test_cispo_stats_have_no_graph(impl):
    stats_have_no_graph(impl, "cispo_loss", 1.0, 0.28, "token", spread=0.8)


@pytest.mark.exercise("cispo_loss")
@pytest.mark.parametrize("normalisation", ["token", "sequence"])
def test_cispo_loss_with_every_row_masked_out(impl, ref, normalisation):
    empty_mask_check(impl, ref, "cispo_loss", 1.0, 0.28, normalisation)


@pytest.mark.exercise("cispo_loss")
def test_cispo_loss_rejects_an_unknown_normalisation(impl):
    expect_value_error(impl, "cispo_loss", "cispo_loss(..., normalisation='constant')", *loss_inputs(0), 1.0, 0.28, "constant")


@pytest.mark.exercise("cispo_loss")
def test_cispo_loss_defaults_are_the_papers(impl, ref):
    inputs = loss_inputs(8, spread=0.8)
    check_exercise(impl, ref, "cispo_loss", lambda fn: documented_keys(fn(*inputs), LOSS_STATS),
                   call="cispo_loss(logprobs, old_logprobs, advantages, mask) — the defaults: eps_low=1.0, eps_high=0.28, "
                        "normalisation='token'")


@pytest.mark.exercise("cispo_loss")
@pytest.mark.parametrize("normalisation", ["token", "sequence"])
def test_cispo_loss_with_a_single_real_token(impl, ref, normalisation):
    single_token_check(impl, ref, "cispo_loss", 1.0, 0.28, normalisation)


@pytest.mark.exercise("cispo_loss")
def test_cispo_does_not_count_a_ratio_on_its_bound(impl):
    tie_check(impl, "cispo_loss", 0.25, 0.25, "token",
              why="ratio 1/4 < 1 − 0 and ratio 2 > 1 + 0 are clipped whatever A; ratio 1, on both bounds, is not")


# --- the losses with Part 10's importance weights ------------------------------------------
# weights= is the sampler's correction (Part 10): each token's term times its weight, the denominators the
# real-token counts (n_b, Σ n_b, the rows with tokens) whatever the weights; GSPO's row loss times the mean weight
# of the row's real tokens; None is all ones bit for bit; the stats unweighted; the weights constants.

WEIGHT_VALUES = (0.3, 1.7, 0.0, 0.9, 2.4, 0.1)
ROW_WEIGHTS = (0.3, 1.7, 0.0, 2.4, 0.1, 0.9, 1.3, 0.6, 1.1, 0.2)  # row 1 is the empty row; row 2, real, weighs 0
WEIGHT_PATTERNS = ("tokens", "rows")
# Settings and inputs that bind both clips, and not everywhere: (settings, spread, batch, seed).
WEIGHTED_SETTINGS = {
    "clip_higher_loss": [((0.2, 0.28, "token"), 0.6, 7, 0), ((0.1, 0.3, "sequence"), 0.6, 7, 1)],
    "gspo_loss": [((3e-4, 4e-4), 1e-3, 10, 8), ((0.2, 0.28), 0.8, 10, 9)],
    "cispo_loss": [((0.3, 0.28, "token"), 0.8, 7, 2), ((0.2, 0.2, "sequence"), 0.8, 7, 3)],
}


def importance_weights(pattern: str, mask: torch.Tensor, seed: int = 0) -> torch.Tensor:
    """Weights as Part 10 gives them: ≥ 0, 0 outside the mask; per token from WEIGHT_VALUES, or one per row."""
    m = mask.to(torch.float32)
    if pattern == "tokens":
        picks = torch.randint(len(WEIGHT_VALUES), m.shape, generator=torch.Generator().manual_seed(seed))
        return torch.tensor(WEIGHT_VALUES)[picks] * m
    return torch.tensor(ROW_WEIGHTS[:m.shape[0]])[:, None] * m


def weighted_inputs(exercise: str, case: int, pattern: str):
    settings, spread, batch, seed = WEIGHTED_SETTINGS[exercise][case]
    logprobs, old, adv, mask = loss_inputs(seed, spread=spread, batch=batch)
    return (logprobs, old, adv, mask), settings, importance_weights(pattern, mask, seed + 100)


def weighted_reference_check(impl, ref, exercise: str, case: int, pattern: str):
    args, settings, weights = weighted_inputs(exercise, case, pattern)
    _, stats = getattr(ref, exercise)(*args, *settings, weights=weights)
    assert 0 < stats["policy/clipfrac_low"] and 0 < stats["policy/clipfrac_high"], "test inputs must bind both clips"
    assert stats["policy/clipfrac_low"] + stats["policy/clipfrac_high"] < 0.8, "test inputs must not clip everything"
    check_call_documented_keys(impl, ref, exercise, *args, *settings, weights=weights, keys=LOSS_STATS)

    def run(fn):
        logprobs, old, adv, mask = (a.clone() for a in args)
        logprobs.requires_grad_(True)
        loss, _ = fn(logprobs, old, adv, mask, *settings, weights=weights.clone())
        loss.backward()
        return logprobs.grad
    check_exercise(impl, ref, exercise, run, call=f"{exercise}(..., {', '.join(map(repr, settings))}, weights=<{pattern}>)"
                                                  ".backward(): d loss / d logprobs")


def loss_grad_stats(impl, exercise: str, args, settings, **kwargs):
    logprobs, old, adv, mask = (a.clone() for a in args)
    logprobs.requires_grad_(True)
    loss, stats = getattr(impl, exercise)(logprobs, old, adv, mask, *settings, **kwargs)
    loss.backward()
    return loss.detach(), logprobs.grad, documented_keys(stats, LOSS_STATS)


def none_is_all_ones_check(impl, exercise: str, case: int):
    """No weights=, weights=None and weights of 1 on every real token (0 outside, as Part 10 gives them): the same
    loss, gradient and stats, bit for bit — the docstring's promise that the trainer without a correction is today's."""
    args, settings, _ = weighted_inputs(exercise, case, "tokens")
    ones = args[3].to(torch.float32)
    plain = loss_grad_stats(impl, exercise, args, settings)
    for kwargs in ({"weights": None}, {"weights": ones}):
        got = loss_grad_stats(impl, exercise, args, settings, **kwargs)
        same = torch.equal(got[0], plain[0]) and torch.equal(got[1], plain[1]) and got[2].keys() == plain[2].keys() \
            and all(torch.equal(got[2][k], plain[2][k]) for k in plain[2])
        if not same:
            what = "weights=None" if kwargs["weights"] is None else "weights = 1 on every real token"
            raise WrongAnswer(explain(describe_call(exercise, *args, *settings, **kwargs),
                                      f"with {what} the loss, d loss / d logprobs and stats must be exactly (bit for bit) "
                                      f"those of a call without weights: got loss {got[0].item()!r}, expected "
                                      f"{plain[0].item()!r}; gradients equal: {torch.equal(got[1], plain[1])}",
                                      diagnose(exercise, (got[0], got[2]), *args, *settings, **kwargs)))


def _active(adv, ratio, eps_low, eps_high):
    """Where the pessimistic bound keeps the ratio's gradient: neither A > 0 with ratio > 1 + eps_high,
    nor A < 0 with ratio < 1 − eps_low."""
    return ~(((adv > 0) & (ratio > 1 + eps_high)) | ((adv < 0) & (ratio < 1 - eps_low)))


def hand_gradient(exercise: str, logprobs, old, adv, mask, settings, weights):
    """d loss / d logprobs from the docstrings' formulas, in float64, token by token."""
    lp, old, adv, m, w = (x.double() for x in (logprobs.detach(), old, adv, mask.to(torch.float32), weights))
    n = m.sum(dim=1)
    rows = float((n > 0).sum())
    if exercise == "gspo_loss":
        eps_low, eps_high = settings
        s = torch.exp(((lp - old) * m).sum(dim=1) / n.clamp(min=1))
        mean_w = (w * m).sum(dim=1) / n.clamp(min=1)
        per_row = -adv * s * _active(adv, s, eps_low, eps_high) * mean_w / n.clamp(min=1) / rows
        return per_row[:, None] * m
    eps_low, eps_high, normalisation = settings
    ratio = torch.exp(lp - old)
    a = adv[:, None]
    if exercise == "clip_higher_loss":  # d(−A·ratio)/d logprob = −A·ratio where the ratio is not clipped
        per_tok = -a * ratio * _active(a, ratio, eps_low, eps_high)
    else:  # CISPO: −sg(clip(ratio))·A·logprob
        per_tok = -ratio.clamp(1 - eps_low, 1 + eps_high) * a
    per_tok = per_tok * w * m
    if normalisation == "token":
        return per_tok / n.sum()
    return per_tok / n.clamp(min=1)[:, None] / rows


def hand_gradient_check(impl, exercise: str, case: int, pattern: str):
    args, settings, weights = weighted_inputs(exercise, case, pattern)
    _, grad, _ = loss_grad_stats(impl, exercise, args, settings, weights=weights)
    expected = hand_gradient(exercise, *args, settings, weights)
    unweighted = hand_gradient(exercise, *args, settings, args[3].to(torch.float32))
    assert len(set(weights[unweighted != 0].tolist()) - {1.0}) >= 2, "the weights must vary where the gradient is not 0"
    assert_close(grad.double(), expected, rtol=1e-5, atol=1e-7, name="d loss / d logprobs", msg=lambda m: explain(
        f"{exercise}(..., {', '.join(map(repr, settings))}, weights=<{pattern}>).backward()",
        "each token's gradient is its unweighted gradient times its weight, over the unchanged denominators\n  " + m))


def hand_loss(exercise: str, adv: list[float], logprobs: list[list[float]], mask: list[list[float]],
              weights: list[list[float]], normalisation: str) -> float:
    """The loss from the docstrings when every ratio is 1 (nothing clips): per-token −A (clip-higher, and GSPO's
    row term) or −A·log π (CISPO), weighted, over the real-token counts."""
    terms = [[(-a * lp if exercise == "cispo_loss" else -a) * w * m for lp, w, m in zip(lps, ws, ms)]
             for a, lps, ws, ms in zip(adv, logprobs, weights, mask)]
    counts = [sum(ms) for ms in mask]
    if exercise == "gspo_loss":  # loss_b · (mean weight of the real tokens), averaged over rows with tokens
        rows = [-a * sum(w * m for w, m in zip(ws, ms)) / n for a, ws, ms, n in zip(adv, weights, mask, counts) if n]
        return sum(rows) / len(rows)
    if normalisation == "token":
        return sum(map(sum, terms)) / sum(counts)
    rows = [sum(t) / n for t, n in zip(terms, counts) if n]
    return sum(rows) / len(rows)


def zero_weight_keeps_its_count_check(impl, exercise: str, normalisation: str | None):
    # Ratios all 1. Row 0: three real tokens, the first weighs 0. Row 1: two real tokens, both weigh 0 (it adds 0 and
    # still counts, as a row and as two tokens). Row 2: one real token, weight 0.9. Row 3: no real token.
    lp = [[-0.1, -0.2, -0.3], [-0.4, -0.5, 0.0], [-0.7, 0.0, 0.0], [0.0, 0.0, 0.0]]
    mask = [[1.0, 1.0, 1.0], [1.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
    weights = [[0.0, 1.7, 0.3], [0.0, 0.0, 0.0], [0.9, 0.0, 0.0], [0.0, 0.0, 0.0]]
    adv = [1.0, -0.5, 2.0, 1.5]
    settings = (0.2, 0.28) if exercise == "gspo_loss" else (0.2, 0.28, normalisation)
    args = (torch.tensor(lp), torch.tensor(lp), torch.tensor(adv), torch.tensor(mask))
    loss, stats = getattr(impl, exercise)(*args, *settings, weights=torch.tensor(weights))
    expected = hand_loss(exercise, adv, lp, mask, weights, normalisation or "sequence")
    if abs(loss.item() - expected) > 1e-6:
        raise WrongAnswer(explain(describe_call(exercise, *args, *settings, weights=torch.tensor(weights)),
                                  f"expected loss {expected:.6f} (a token of weight 0 loses its term, not its count; a "
                                  f"row whose weights are all 0 still counts), got {loss.item():.6f}",
                                  diagnose(exercise, (loss, stats), *args, *settings, weights=torch.tensor(weights))))


def no_grad_into_weights_check(impl, exercise: str, case: int):
    args, settings, weights = weighted_inputs(exercise, case, "tokens")
    weights = weights.clone().requires_grad_(True)
    logprobs, old, adv, mask = (a.clone() for a in args)
    logprobs.requires_grad_(True)
    loss, stats = getattr(impl, exercise)(logprobs, old, adv, mask, *settings, weights=weights)
    loss.backward()
    problems = []
    if weights.grad is not None and bool((weights.grad != 0).any()):
        problems.append("the weights received a gradient from the loss: they are constants (detach them)")
    kept = sorted(k for k, v in stats.items() if v.requires_grad)
    if kept:
        problems.append(f"stats {kept} keep the autograd graph")
    if logprobs.grad is None:
        problems.append("no gradient reached logprobs")
    if problems:
        raise WrongAnswer(explain(f"{exercise}(..., weights that require grad)", "; ".join(problems),
                                  [mistake(exercise, "importance_weights_not_detached")] if weights.grad is not None else []))


def stats_ignore_weights_check(impl, exercise: str, case: int, pattern: str):
    args, settings, weights = weighted_inputs(exercise, case, pattern)
    _, plain = getattr(impl, exercise)(*args, *settings)
    _, weighted = getattr(impl, exercise)(*args, *settings, weights=weights)
    plain, weighted = documented_keys(plain, LOSS_STATS), documented_keys(weighted, LOSS_STATS)
    changed = [k for k in plain if k not in weighted or not torch.equal(weighted[k], plain[k])]
    if changed:
        raise WrongAnswer(explain(f"{exercise}(..., {', '.join(map(repr, settings))}, weights=<{pattern}>)",
                                  f"the stats {changed} changed with the weights: they stay unweighted (they describe "
                                  f"the policy's ratio and clip, not the sampler's correction)",
                                  [mistake(exercise, "stats_weighted_by_the_importance_weights")]))


@pytest.mark.exercise("clip_higher_loss")
@pytest.mark.parametrize("pattern", WEIGHT_PATTERNS)
@pytest.mark.parametrize("case", [0, 1], ids=["token", "sequence"])
def test_clip_higher_loss_weighted_matches_reference(impl, ref, case, pattern):
    weighted_reference_check(impl, ref, "clip_higher_loss", case, pattern)


@pytest.mark.exercise("clip_higher_loss")
@pytest.mark.parametrize("case", [0, 1], ids=["token", "sequence"])
def test_clip_higher_loss_without_weights_is_all_ones_bit_for_bit(impl, case):
    none_is_all_ones_check(impl, "clip_higher_loss", case)


@pytest.mark.exercise("clip_higher_loss")
@pytest.mark.parametrize("pattern", WEIGHT_PATTERNS)
@pytest.mark.parametrize("case", [0, 1], ids=["token", "sequence"])
def test_clip_higher_loss_weighted_gradient_by_hand(impl, case, pattern):
    hand_gradient_check(impl, "clip_higher_loss", case, pattern)


@pytest.mark.exercise("clip_higher_loss")
@pytest.mark.parametrize("normalisation", ["token", "sequence"])
def test_clip_higher_loss_weight_zero_keeps_its_count(impl, normalisation):
    zero_weight_keeps_its_count_check(impl, "clip_higher_loss", normalisation)


@pytest.mark.exercise("clip_higher_loss")
@pytest.mark.parametrize("case", [0, 1], ids=["token", "sequence"])
def test_clip_higher_loss_sends_no_gradient_into_the_weights(impl, case):
    no_grad_into_weights_check(impl, "clip_higher_loss", case)


@pytest.mark.exercise("clip_higher_loss")
@pytest.mark.parametrize("pattern", WEIGHT_PATTERNS)
def test_clip_higher_loss_stats_ignore_the_weights(impl, pattern):
    stats_ignore_weights_check(impl, "clip_higher_loss", 0, pattern)


@pytest.mark.exercise("clip_higher_loss")
@pytest.mark.parametrize("normalisation", ["token", "sequence"])
def test_clip_higher_loss_weighted_with_every_row_masked_out(impl, ref, normalisation):
    empty_mask_check(impl, ref, "clip_higher_loss", 0.2, 0.28, normalisation, weighted=True)


@pytest.mark.exercise("gspo_loss")
@pytest.mark.parametrize("pattern", WEIGHT_PATTERNS)
@pytest.mark.parametrize("case", [0, 1], ids=["papers_eps", "wide_eps"])
def test_gspo_loss_weighted_matches_reference(impl, ref, case, pattern):
    weighted_reference_check(impl, ref, "gspo_loss", case, pattern)


@pytest.mark.exercise("gspo_loss")
@pytest.mark.parametrize("case", [0, 1], ids=["papers_eps", "wide_eps"])
def test_gspo_loss_without_weights_is_all_ones_bit_for_bit(impl, case):
    none_is_all_ones_check(impl, "gspo_loss", case)


@pytest.mark.exercise("gspo_loss")
@pytest.mark.parametrize("pattern", WEIGHT_PATTERNS)
@pytest.mark.parametrize("case", [0, 1], ids=["papers_eps", "wide_eps"])
def test_gspo_loss_weighted_gradient_by_hand(impl, case, pattern):
    hand_gradient_check(impl, "gspo_loss", case, pattern)


@pytest.mark.exercise("gspo_loss")
def test_gspo_loss_weight_zero_keeps_its_count(impl):
    zero_weight_keeps_its_count_check(impl, "gspo_loss", None)


@pytest.mark.exercise("gspo_loss")
@pytest.mark.parametrize("case", [0, 1], ids=["papers_eps", "wide_eps"])
def test_gspo_loss_sends_no_gradient_into_the_weights(impl, case):
    no_grad_into_weights_check(impl, "gspo_loss", case)


@pytest.mark.exercise("gspo_loss")
@pytest.mark.parametrize("pattern", WEIGHT_PATTERNS)
def test_gspo_loss_stats_ignore_the_weights(impl, pattern):
    stats_ignore_weights_check(impl, "gspo_loss", 0, pattern)


@pytest.mark.exercise("gspo_loss")
def test_gspo_loss_weighted_with_every_row_masked_out(impl, ref):
    empty_mask_check(impl, ref, "gspo_loss", 3e-4, 4e-4, weighted=True)


@pytest.mark.exercise("cispo_loss")
@pytest.mark.parametrize("pattern", WEIGHT_PATTERNS)
@pytest.mark.parametrize("case", [0, 1], ids=["token", "sequence"])
def test_cispo_loss_weighted_matches_reference(impl, ref, case, pattern):
    weighted_reference_check(impl, ref, "cispo_loss", case, pattern)


@pytest.mark.exercise("cispo_loss")
@pytest.mark.parametrize("case", [0, 1], ids=["token", "sequence"])
def test_cispo_loss_without_weights_is_all_ones_bit_for_bit(impl, case):
    none_is_all_ones_check(impl, "cispo_loss", case)


@pytest.mark.exercise("cispo_loss")
@pytest.mark.parametrize("pattern", WEIGHT_PATTERNS)
@pytest.mark.parametrize("case", [0, 1], ids=["token", "sequence"])
def test_cispo_loss_weighted_gradient_by_hand(impl, case, pattern):
    hand_gradient_check(impl, "cispo_loss", case, pattern)


@pytest.mark.exercise("cispo_loss")
@pytest.mark.parametrize("normalisation", ["token", "sequence"])
def test_cispo_loss_weight_zero_keeps_its_count(impl, normalisation):
    zero_weight_keeps_its_count_check(impl, "cispo_loss", normalisation)


@pytest.mark.exercise("cispo_loss")
@pytest.mark.parametrize("case", [0, 1], ids=["token", "sequence"])
def test_cispo_loss_sends_no_gradient_into_the_weights(impl, case):
    no_grad_into_weights_check(impl, "cispo_loss", case)


@pytest.mark.exercise("cispo_loss")
@pytest.mark.parametrize("pattern", WEIGHT_PATTERNS)
def test_cispo_loss_stats_ignore_the_weights(impl, pattern):
    stats_ignore_weights_check(impl, "cispo_loss", 0, pattern)


@pytest.mark.exercise("cispo_loss")
@pytest.mark.parametrize("normalisation", ["token", "sequence"])
def test_cispo_loss_weighted_with_every_row_masked_out(impl, ref, normalisation):
    empty_mask_check(impl, ref, "cispo_loss", 1.0, 0.28, normalisation, weighted=True)
