"""Tests for Part 9 (exercises/part9_agents.py): the tool call, the safe calculator, the environment's turn, the loss mask.

Run: ``pytest tests/test_part9_agents.py`` (your code) or add ``--impl=solutions``.
Strings are compared with the reference on named cases and on hypothesis-generated ones (tag
fragments, the calculator's alphabet and beyond, expressions drawn from the grammar with an
independent oracle); every bound of the calculator is tried exactly at its limit and one past
it. The calculator runs with ``eval``, ``exec`` and ``compile`` booby-trapped, and each call is
timed in CPU seconds: hostile strings must come back as errors in milliseconds, and 16 million
digits in a small share of one regex pass over them (the length is checked first). A wrong answer
names the known mistake it looks like (workbook/mistakes/part9_agents.py).
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import gc
import math
import random
import re
import sys
import time

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from workbook.checking import WrongAnswer, check_call, check_exercise, describe_call, explain, known_mistake, matching_mistakes

PART = "part9_agents"
POINTS = {
    "parse_tool_call": 1,
    "calculate": 3,
    "tool_reply": 1,
    "agent_loss_mask": 2,
}
HYPOTHESIS = settings(max_examples=150, deadline=None, derandomize=True)
CPU_LIMIT_S = 0.05
"""Most CPU time one calculate() call may take. The docstring promises microseconds; 50 ms is a
thousand times that, and a tenth of what a pure-Python scan of a million characters costs."""


def mistake(exercise: str, name: str) -> str:
    return known_mistake(PART, exercise, name)


def diagnose(exercise: str, got, *args) -> list[str]:
    def run(fn):
        with no_eval():
            try:
                return fn(*args)
            except EvalCalled:  # a mistake that evals cannot run here (it might be 9**9**9): it matches nothing
                raise RuntimeError("eval") from None
    return matching_mistakes(PART, exercise, run, got, rtol=0, atol=0)


def short(text: str, n: int = 60) -> str:
    return repr(text) if len(text) <= n else f"{text[:n]!r}... ({len(text):,} characters)"


# --- eval, exec and compile booby-trapped --------------------------------------------------

class EvalCalled(BaseException):
    """Raised by eval/exec/compile inside calculate(); a BaseException, so ``except Exception`` does not hide it."""


@contextlib.contextmanager
def no_eval():
    """Make eval, exec, compile (to code) and ast.literal_eval raise while the learner's code runs.

    Still allowed: compiling for an import (a module loaded for the first time) and ``ast.parse``
    (compile to a tree only): walking a syntax tree is a parser, not an evaluation."""
    saved = {name: getattr(builtins, name) for name in ("eval", "exec", "compile")}
    saved_literal_eval = ast.literal_eval
    calls = []

    def trap(name):
        def trapped(*args, **kwargs):
            caller = sys._getframe(1).f_globals.get("__name__", "")
            flags = args[3] if len(args) > 3 else kwargs.get("flags", 0)
            tree_only = name == "compile" and caller == "ast" and flags & ast.PyCF_ONLY_AST
            if caller.startswith("importlib") or tree_only:
                return saved[name](*args, **kwargs)
            calls.append(name)
            raise EvalCalled(name)
        return trapped

    def literal_eval(*args, **kwargs):
        calls.append("ast.literal_eval")
        raise EvalCalled("ast.literal_eval")

    for name in saved:
        setattr(builtins, name, trap(name))
    ast.literal_eval = literal_eval
    try:
        yield calls
    finally:
        for name, fn in saved.items():
            setattr(builtins, name, fn)
        ast.literal_eval = saved_literal_eval


def run_calculate(impl, expression: str, clock=time.process_time) -> tuple[str, float]:
    """The learner's calculate(expression) and its CPU seconds by ``clock``; eval, an exception or a non-string fails."""
    call = f"calculate({short(expression)})"
    with no_eval() as calls:
        start = clock()
        try:
            out = impl.calculate(expression)
        except NotImplementedError:
            raise
        except EvalCalled as e:
            calls.append(str(e))
            out = None
        except Exception as e:  # noqa: BLE001 - any exception is the bug under test
            raise WrongAnswer(explain(call, f"raised {type(e).__name__}: {str(e)[:200]} — the tool must never raise: "
                                            "every failure is an error string the model reads",
                                      [mistake("calculate", "raises_on_bad_input")])) from None
        elapsed = clock() - start
    if calls:
        raise WrongAnswer(explain(call, f"called {calls[0]}() — the policy's text is untrusted code: parse it, never "
                                        "evaluate it with eval/exec/compile/ast.literal_eval",
                                  [mistake("calculate", "eval_based")]))
    if not isinstance(out, str):
        raise WrongAnswer(explain(call, f"expected a str, got {type(out).__name__} ({out!r:.80})"))
    return out, elapsed


def calculate_fast(impl, expression: str) -> str:
    """run_calculate, failing when the call takes more than CPU_LIMIT_S (the best of three tries)."""
    out, elapsed = run_calculate(impl, expression)
    for _ in range(2):  # a slow first call may be the machine's fault (a page fault, a GC): try again
        if elapsed <= CPU_LIMIT_S:
            break
        out, again = run_calculate(impl, expression)
        elapsed = min(elapsed, again)
    if elapsed > CPU_LIMIT_S:
        labels = [mistake("calculate", "length_checked_last")] if len(expression) > 32 else []
        raise WrongAnswer(explain(f"calculate({short(expression)})",
                                  f"took {elapsed * 1000:.0f} ms of CPU time (best of three); the limit is "
                                  f"{CPU_LIMIT_S * 1000:.0f} ms — no input may cost more than microseconds "
                                  "(the length is checked before anything else)", labels))
    return out


def is_error(text: str) -> bool:
    """An error of the calculator: the prefix, then a reason (any words of the tool's own, not nothing)."""
    return text.startswith("error: ") and text[len("error: "):].strip() != ""


def expect_calculate(impl, expression: str, expected: str | None) -> None:
    """``expected`` a value's text, or None for an error (only the "error: " prefix is read)."""
    got = calculate_fast(impl, expression)
    right = is_error(got) if expected is None else got == expected
    if not right:
        want = 'an error (a string starting with "error: ")' if expected is None else repr(expected)
        raise WrongAnswer(explain(f"calculate({short(expression)})", f"expected {want}, got {got!r:.100}",
                                  diagnose("calculate", got, expression)))


# --- parse_tool_call ----------------------------------------------------------------------

PARSE_CASES = [
    ("<calc>37*8</calc>", "37*8"),
    ("let me see <calc>37*8</calc>", "37*8"),            # text before the call is the model's business
    ("<calc>1+<calc>2*3</calc>", "2*3"),                  # the last opening tag
    ("<calc></calc>", ""),                                # an empty call: calculate() says what is wrong
    ("37*8</calc>", None),                                # no opening tag
    ("<calc>37*8", None),                                 # not ending with the closing tag
    ("</calc>", None),
    ("", None),
    ("<calc>1</calc><calc>2</calc>", "2"),                # two calls in one turn: the one it ends with
    ("<result>296</result><calc>296*6</calc>", "296*6"),
    ("<calc> 37 * 8 </calc>", " 37 * 8 "),                # untouched: no stripping
    ("<calc>\t1+1\n</calc>", "\t1+1\n"),
    ("<calc>1\n+2</calc>", "1\n+2"),                      # a line break inside the call
    ("<calc>1</calc><calc>2\n3</calc>", "2\n3"),
    ("<calc>1</calc> ", None),                            # a space after the closing tag: not the end
    ("<calc>1</calc>\n", None),                           # nor a line break
    ("<calc>1</calc>x", None),
    ("<calc>1</calc>2</calc>", "1</calc>2"),              # a </calc> in the middle belongs to nothing
    ("<calc>1<2</calc>", "1<2"),
    ("<calc<calc>5</calc>", "5"),
    ("<calc</calc>", None),                               # a broken opening tag is no tag
    ("calc>5</calc>", None),
    ("<CALC>5</CALC>", None),                             # tags are case-sensitive
    ("<calc>٣+²</calc>", "٣+²"),                          # not the parser's job to judge
    ("<calc><calc></calc>", ""),
    ("<calc>__import__('os')</calc>", "__import__('os')"),
    ("<calc>" + "9" * 5000 + "</calc>", "9" * 5000),
]


def run_parse(impl, turn: str):
    try:
        return impl.parse_tool_call(turn)
    except NotImplementedError:
        raise
    except Exception as e:  # noqa: BLE001 - any exception is the bug under test
        raise WrongAnswer(explain(f"parse_tool_call({short(turn)})",
                                  f"raised {type(e).__name__}: {e} — it runs on whatever a policy writes: never raise",
                                  [mistake("parse_tool_call", "raises_without_a_tag")])) from None


def expect_parse(impl, turn: str, expected: str | None) -> None:
    got = run_parse(impl, turn)
    if got != expected or type(got) is not type(expected):
        raise WrongAnswer(explain(f"parse_tool_call({short(turn)})", f"expected {expected!r:.80}, got {got!r:.80}",
                                  diagnose("parse_tool_call", got, turn)))


@pytest.mark.exercise("parse_tool_call")
@pytest.mark.parametrize("turn,expected", PARSE_CASES, ids=[f"case{i}" for i in range(len(PARSE_CASES))])
def test_parse_tool_call_cases(impl, ref, turn, expected):
    assert ref.parse_tool_call(turn) == expected  # the table is the docstring's; the reference agrees
    expect_parse(impl, turn, expected)


TAG_FRAGMENTS = ["<calc>", "</calc>", "<calc", "calc>", "</calc", "</", "<", ">", "/", "37*8", "1", "+", " ", "\n",
                 "٣", "<result>", "</result>", "x"]
TURNS = st.one_of(st.text(max_size=40), st.lists(st.sampled_from(TAG_FRAGMENTS), max_size=10).map("".join),
                  st.lists(st.sampled_from(TAG_FRAGMENTS), max_size=6).map(lambda f: "".join(f) + "</calc>"))


@pytest.mark.exercise("parse_tool_call")
@HYPOTHESIS
@given(turn=TURNS)
def test_parse_tool_call_never_raises_and_keeps_the_text_between_the_tags(impl, ref, turn):
    got = run_parse(impl, turn)
    expected = ref.parse_tool_call(turn)
    # The docstring's rule, independently of the reference: a call is there iff the turn ends with the closing
    # tag and an opening tag comes before it; then turn == anything + <calc> + got + </calc>, got holding no <calc>.
    body = turn[:-len("</calc>")] if turn.endswith("</calc>") else None
    rule = None if body is None or "<calc>" not in body else body.rsplit("<calc>", 1)[1]
    assert expected == rule, "the reference disagrees with its docstring"
    if got != expected or type(got) is not type(expected):
        raise WrongAnswer(explain(f"parse_tool_call({short(turn)})", f"expected {expected!r:.80}, got {got!r:.80}",
                                  diagnose("parse_tool_call", got, turn)))


# --- calculate: values --------------------------------------------------------------------

VALUES = [
    ("37*8", "296"), ("296*6", "1776"), ("0", "0"), ("7", "7"),
    ("007", "7"), ("000", "0"), ("0*5", "0"), ("08+09", "17"),          # leading zeros are allowed
    ("2+3*4", "14"), ("2*3+4", "10"), ("(2+3)*4", "20"), ("2*(3+4)", "14"),   # * binds tighter
    ("2*3+4*5", "26"), ("100-10*10", "0"), ("8-2*3-1", "1"), ("2*3*4", "24"),
    ("10-2-3", "5"), ("1-2-3", "-4"), ("10-(2-3)", "11"), ("2-3+4", "3"),    # left-associative
    ("1-(2-(3-(4-5)))", "3"), ("3-5", "-2"), ("5-5", "0"), ("0-0", "0"),
    ("(((1)))", "1"), ("(0)", "0"), ("(7)*(6)", "42"), ("(1+2)*(3+4)-(5*6)", "-9"),
    ("999999999", "999999999"), ("123456789*1000", "123456789000"), ("0-999999999", "-999999999"),
    ("3-4*5", "-17"), ("2*0-1", "-1"),
]


@pytest.mark.exercise("calculate")
def test_calculate_never_calls_eval(impl):
    # Every calculate() call in this file runs with eval/exec/compile trapped; here on plain arithmetic first,
    # where an eval-based calculator would otherwise look right.
    for expression in ("37*8", "2+3*4", "10-2-3", "(1+2)*3"):
        run_calculate(impl, expression)


@pytest.mark.exercise("calculate")
@pytest.mark.parametrize("expression,expected", VALUES, ids=[e for e, _ in VALUES])
def test_calculate_values(impl, ref, expression, expected):
    assert ref.calculate(expression) == expected
    expect_calculate(impl, expression, expected)


NOT_IN_THE_GRAMMAR = [
    "", " ", "1 + 2", " 1", "1 ", "1\n", "\t",                           # no spaces of any kind
    "-1", "+1", "-(1)", "1+-2", "1--2", "1*-2",                          # no unary minus or plus
    "1+", "*2", "1**2", "2**3", "9**9**9", "1//2", "1/2", "1%2", "2^3",  # no other operators
    "()", "(1", "1)", "(1))", "((1)", ")(", ")1(", "(+1)", "(1+)",       # parentheses that do not match
    "1(2)", "(1)(2)", "(1)2", "2(1)",                                    # no implicit product
    "1.5", "1e3", "0x10", "1_000", "1,000", "1..2",                      # other number formats
    "٣", "٣+1", "1+٣", "²", "1²", "１２", "३", "߁",                      # non-ASCII digits
    "abc", "True", "None", "__import__('os')", "x*2", "1+2=", "<calc>1</calc>",
]


@pytest.mark.exercise("calculate")
@pytest.mark.parametrize("expression", NOT_IN_THE_GRAMMAR, ids=[repr(e) for e in NOT_IN_THE_GRAMMAR])
def test_calculate_rejects_what_the_grammar_does_not_derive(impl, ref, expression):
    assert is_error(ref.calculate(expression))
    expect_calculate(impl, expression, None)


@pytest.mark.exercise("calculate")
@pytest.mark.parametrize("expression", ["<answer>1776</answer>", "1+<answer>7</answer>", "<answer>" + "9" * 40,
                                        "7</result><answer>7</answer>"])
def test_calculate_error_does_not_echo_the_expression(impl, expression):
    # The reason is the tool's own words: an echo would let the policy write <answer> into the tool's reply.
    got = calculate_fast(impl, expression)
    if not is_error(got) or "<answer>" in got or "</result>" in got:
        raise WrongAnswer(explain(f"calculate({short(expression)})",
                                  f"expected an error in the tool's own words (no tag of the expression in it), got {got!r:.100}",
                                  diagnose("calculate", got, expression)))


# Every check after the character filter, on an expression of the calculator's own characters that reaches it:
# the echo test above uses tags, which the character filter refuses first, so an echo from a later check
# (the parser, a bound) would pass it. 7352 and 73529184637 are numbers no reason would hold by chance.
ECHO_PAST_THE_CHARACTER_FILTER = {
    "too long (the calculator's characters only)": "1+" * 15 + "7352+1",
    "too long, a number first": "7352+" + "1+" * 14 + "1",
    "an operator where a number belongs": "7352+*1",
    "an unclosed parenthesis": "(7352+1",
    "a parenthesis closed twice": "7352+1)",
    "an implicit product": "7352(1)",
    "too deep": "(((((7352)))))",
    "a number too long": "73529184637",
    "a number too long after an operator": "1+73529184637",
    "a value too big": "7352918*7352918",
    "a value too big along the way": "7352918*7352918-7352918",
}
ECHO_PIECE = 6
"""The shortest piece of the expression that counts as an echo (the docstring: "any piece of the expression of six
characters or more"): a reason may quote an operator or a bracket."""
ECHO_DIGITS = 3
"""The shortest run of the expression's digits that counts as an echo (the docstring: "or three or more of its digits in
a row (a number it holds, or part of one)"); a reason may still name a limit such as 9 or 32."""


def echoed_piece(expression: str, reason: str) -> str | None:
    """The longest piece of ``expression`` found in ``reason`` — of ECHO_PIECE characters or more, or a run of
    ECHO_DIGITS digits or more — or None."""
    for n in range(len(expression), ECHO_DIGITS - 1, -1):
        for i in range(len(expression) - n + 1):
            piece = expression[i:i + n]
            if (n >= ECHO_PIECE or all(ch in "0123456789" for ch in piece)) and piece in reason:
                return piece
    return None


@pytest.mark.exercise("calculate")
@pytest.mark.parametrize("name", list(ECHO_PAST_THE_CHARACTER_FILTER))
def test_calculate_error_does_not_echo_the_expression_whichever_check_finds_the_fault(impl, ref, name):
    expression = ECHO_PAST_THE_CHARACTER_FILTER[name]
    ref_out = ref.calculate(expression)
    assert is_error(ref_out) and echoed_piece(expression, ref_out) is None, (expression, ref_out)
    assert all(ch in "0123456789+-*()" for ch in expression), "each case must pass the character filter"
    got = calculate_fast(impl, expression)
    piece = echoed_piece(expression, got[len("error: "):]) if is_error(got) else None
    if not is_error(got) or piece is not None:
        why = (f"expected an error ({name})" if not is_error(got) else
               f"the reason echoes {piece!r} of the expression ({name})"
               + (", digits of a number it holds" if piece.isascii() and piece.isdigit() else "")
               + ": an error is in the tool's own words, from every check, not only the character filter")
        raise WrongAnswer(explain(f"calculate({short(expression)})", f"{why}; got {got!r:.100}",
                                  diagnose("calculate", got, expression)))


# --- calculate: every bound at its limit and one past it ---------------------------------

ROOT_OF_MAX = 10**6
"""ROOT_OF_MAX² is MAX_VALUE: the cases below are written for MAX_CHARS 32, MAX_DIGITS 9, MAX_DEPTH 4, MAX_VALUE 10¹²."""
R = ROOT_OF_MAX
BOUNDS = [
    # MAX_CHARS: 32 characters read, 33 refused (whatever they hold)
    ("1+" * 15 + "11", "26", "exactly MAX_CHARS characters"),
    ("1+" * 16 + "1", None, "MAX_CHARS + 1 characters"),
    ("(" * 4 + "1" + ")" * 4 + "+" + "1+" * 10 + "11", "22", "exactly MAX_CHARS, with parentheses"),
    ("0" * 8 + "1+" + "0" * 8 + "1+" + "0" * 8 + "1+001", None, "MAX_CHARS + 1 characters of short numbers"),
    # MAX_DIGITS: leading zeros are digits too
    ("9" * 9, "9" * 9, "MAX_DIGITS digits"),
    ("1" + "0" * 9, None, "MAX_DIGITS + 1 digits"),
    ("0" * 8 + "1", "1", "MAX_DIGITS digits, leading zeros"),
    ("0" * 9 + "1", None, "MAX_DIGITS + 1 digits, a small value"),
    ("0" * 10, None, "MAX_DIGITS + 1 zeros"),
    ("1+" + "0" * 9 + "1", None, "MAX_DIGITS + 1 digits after an operator"),
    ("(" + "0" * 9 + "7)", None, "MAX_DIGITS + 1 digits in parentheses"),
    # MAX_DEPTH: parentheses open at once, not in all
    ("((((1))))", "1", "MAX_DEPTH parentheses open at once"),
    ("(((((1)))))", None, "MAX_DEPTH + 1 parentheses open at once"),
    ("((((1+2)*3)))", "9", "MAX_DEPTH, closed in steps"),
    ("((((1))))*((((2))))", "2", "MAX_DEPTH twice, one after the other"),
    ("(1)+(2)+(3)+(4)+(5)+(6)", "21", "six pairs, one open at a time"),
    ("((1)+(((2))))", "3", "MAX_DEPTH reached after a closed pair"),
    ("1+(((((2)))))", None, "MAX_DEPTH + 1 after an operator"),
    ("((((1)+((2)))))", None, "MAX_DEPTH + 1 reached in the second operand"),
    # MAX_VALUE: the result and every value along the way (left to right)
    (f"{R}*{R}", str(R * R), "a product of exactly MAX_VALUE"),
    (f"{R}*{R}+1", None, "MAX_VALUE + 1"),
    (f"0-{R}*{R}", str(-R * R), "exactly -MAX_VALUE"),
    (f"0-{R}*{R}-1", None, "-MAX_VALUE - 1"),
    (f"{R}*{R + 1}", None, "a product just past MAX_VALUE"),
    (f"{R}*{R + 1}*0", None, "a product past MAX_VALUE on the way to 0"),
    (f"{R}*{R}+1-1", None, "MAX_VALUE + 1 on the way back to MAX_VALUE"),
    (f"{R}*{R}-1+1", str(R * R), "MAX_VALUE - 1, then MAX_VALUE: never past"),
    (f"0-{R}*{R}-1+2", None, "-MAX_VALUE - 1 on the way"),
    (f"({R}*{R + 1})-{R}", None, "past MAX_VALUE inside parentheses"),
    (f"{2 * R}*{R}-{R}*{R}", None, "2 MAX_VALUE, then MAX_VALUE"),
    ("999999999*999999999-1", None, "the docstring's example"),
    ("999999*999999", "999998000001", "a product just under MAX_VALUE"),
]


@pytest.mark.exercise("calculate")
@pytest.mark.parametrize("expression,expected", [(e, v) for e, v, _ in BOUNDS], ids=[why for _, _, why in BOUNDS])
def test_calculate_bounds_at_and_past_each_limit(impl, ref, expression, expected):
    assert (ref.MAX_CHARS, ref.MAX_DIGITS, ref.MAX_DEPTH, ref.MAX_VALUE) == (32, 9, 4, ROOT_OF_MAX**2)
    assert len(expression) <= ref.MAX_CHARS or len(expression) == ref.MAX_CHARS + 1
    ref_out = ref.calculate(expression)
    assert (is_error(ref_out) if expected is None else ref_out == expected), (expression, ref_out)
    expect_calculate(impl, expression, expected)


# --- calculate: hostile strings, quickly --------------------------------------------------

HOSTILE = {
    "__import__('os')": "__import__('os')",
    "__import__('os').system('ls')": "__import__('os').system('ls')",
    "9**9**9": "9**9**9",
    "10,000 nested parentheses": "(" * 10_000 + "1" + ")" * 10_000,
    "10,000 open parentheses": "(" * 10_000,
    "a million digits": "9" * 10**6,
    "ten million digits": "7" * 10**7,
    "a million digits, then junk": "1" * 10**6 + "x",
    "half a million additions": "1+" * 500_000 + "1",
    "a million-digit product": "9" * 10**6 + "*" + "9" * 10**6,
    "'٣'": "٣",
    "'²'": "²",
    "'٣٣٣*٣'": "٣٣٣*٣",
    "4999 digits (int()'s limit is 4300)": "8" * 4999,
    "a 33-character product": "999999999*999999999*999999999*99",
}


@pytest.mark.exercise("calculate")
@pytest.mark.parametrize("name", list(HOSTILE))
def test_calculate_returns_an_error_quickly_on_hostile_strings(impl, ref, name):
    expression = HOSTILE[name]
    assert is_error(ref.calculate(expression))
    got = calculate_fast(impl, expression)
    if not is_error(got):
        raise WrongAnswer(explain(f"calculate({short(expression)})", f"expected an error, got {got!r:.100}",
                                  diagnose("calculate", got, expression) if len(expression) <= 40 else []))


# --- calculate: the length, checked before anything else -----------------------------------

LONG = 2**24
"""The characters of the expression that shows whether calculate() reads its input before checking its length:
16 MiB (a str of ASCII digits takes a byte a character), well within a CI machine's memory."""
ALLOWED_RUN = re.compile(r"[0-9+*()-]+")
"""One pass over the expression at C speed: the cheapest character filter a calculator would run (``set()``,
``str.strip`` or a generator are slower, per character)."""
SCAN_SHARE = 8
"""A calculator that checks the length first costs less than 1/SCAN_SHARE of one ALLOWED_RUN pass over LONG
characters (it costs microseconds; the pass, tens of milliseconds)."""
FLOOR_S = 0.002
"""...and never fails under 2 ms of CPU time, however fast the machine's pass: a length check costs about 1 µs."""


@contextlib.contextmanager
def gc_paused():
    """No garbage collection while a call is timed: a collection's milliseconds are not the call's."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def timed(fn, *args) -> float:
    """This thread's CPU seconds for fn(*args)."""
    start = time.thread_time()
    fn(*args)
    return time.thread_time() - start


@pytest.mark.exercise("calculate")
def test_calculate_checks_the_length_before_reading_the_expression(impl):
    # "longer than MAX_CHARS characters (checked before anything else)": on 16 million digits, calculate() must not
    # read them — not even with a regex at C speed, which the hostile strings' 50 ms allow (ten million digits take
    # about 14 ms). The bar is relative, not a clock's: the same string's regex pass, timed here, moves with the
    # machine. Both are timed in this thread's CPU seconds (thread_time: no other thread's work, no waiting), the
    # garbage collector off, the best of three tries (one, when the first is a full pass's worth).
    expression = "7" * LONG
    with gc_paused():
        scan = min(timed(ALLOWED_RUN.fullmatch, expression) for _ in range(3))
        limit = max(FLOOR_S, scan / SCAN_SHARE)
        took = math.inf
        for _ in range(3):
            out, elapsed = run_calculate(impl, expression, clock=time.thread_time)
            took = min(took, elapsed)
            if took <= limit or took > scan / 2:  # within the bar, or a full pass's worth: no hiccup does that
                break
    if took > limit:
        raise WrongAnswer(explain(f"calculate({short(expression)})",
                                  f"took {took * 1000:.1f} ms of CPU time (the best of up to three tries) — one regex "
                                  f"pass over the same characters takes {scan * 1000:.1f} ms, and a length check costs "
                                  f"microseconds (the bar: {limit * 1000:.1f} ms): the expression was read before its "
                                  "length was checked, which the docstring puts before anything else",
                                  [mistake("calculate", "character_filter_before_length_check"),
                                   mistake("calculate", "length_checked_last")]))
    if not is_error(out):
        raise WrongAnswer(explain(f"calculate({short(expression)})", f"expected an error (too long), got {out!r:.100}"))


# --- calculate: generated strings ---------------------------------------------------------

ALPHABET = list("0123456789+-*()") * 3 + [" ", "/", "٣", "²", "x", "\n", ".", "**"]
TEXTS = st.one_of(st.lists(st.sampled_from(ALPHABET), max_size=40).map("".join), st.text(max_size=40))


def derivation(rng: random.Random, depth: int = 0, nest: float = 0.25, small: bool = False) -> tuple[str, int, int, int, int]:
    """A random derivation of the grammar: (text, value, largest |value| along the way, deepest nesting, longest number).

    Values are computed left to right as the grammar reads them, so "along the way" is every partial
    sum and product, and every number. ``small``: short numbers and few operands, so that deep
    nesting fits in MAX_CHARS."""
    def factor():
        if depth < 6 and rng.random() < nest:
            text, value, worst, deep, digits = derivation(rng, depth + 1, nest, small)
            return f"({text})", value, worst, deep + 1, digits
        kind = rng.random()
        if small:
            kind = 1.0 if kind < 0.1 else 0.0
        number = (str(rng.randint(0, 20)) if kind < 0.4 else str(rng.randint(0, 10**6)) if kind < 0.8
                  else "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 11))))
        return number, int(number), int(number), 0, len(number)

    def term():
        text, value, worst, deep, digits = factor()
        for _ in range(rng.choice([0, 0, 0, 1] if small else [0, 0, 1, 2])):
            t, v, w, d, n = factor()
            text, value = f"{text}*{t}", value * v
            worst, deep, digits = max(worst, w, abs(value)), max(deep, d), max(digits, n)
        return text, value, worst, deep, digits

    text, value, worst, deep, digits = term()
    for _ in range(rng.choice([0, 0, 1] if small else [0, 1, 1, 2, 3])):
        op = rng.choice("+-")
        t, v, w, d, n = term()
        text, value = f"{text}{op}{t}", value + v if op == "+" else value - v
        worst, deep, digits = max(worst, w, abs(value)), max(deep, d), max(digits, n)
    return text, value, worst, deep, digits


@pytest.mark.exercise("calculate")
@HYPOTHESIS
@given(text=TEXTS)
def test_calculate_never_raises_and_agrees_with_the_reference_on_any_text(impl, ref, text):
    got = calculate_fast(impl, text)
    expected = ref.calculate(text)
    if (is_error(got), got if not is_error(got) else None) != (is_error(expected), expected if not is_error(expected) else None):
        raise WrongAnswer(explain(f"calculate({short(text)})", f"expected {expected!r}, got {got!r:.100}",
                                  diagnose("calculate", got, text)))


@pytest.mark.exercise("calculate")
@settings(max_examples=300, deadline=None, derandomize=True)  # cheap: a derivation costs microseconds
@given(seed=st.integers(0, 2**32 - 1))
def test_calculate_on_expressions_of_the_grammar(impl, ref, seed):
    # An oracle from the docstring alone: a derivation of the grammar is an error exactly when a bound is broken.
    rng = random.Random(seed)
    text, value, worst, deep, digits = derivation(rng, nest=0.7, small=True) if seed % 2 else derivation(rng)
    broken = (len(text) > ref.MAX_CHARS or digits > ref.MAX_DIGITS or deep > ref.MAX_DEPTH or worst > ref.MAX_VALUE)
    expected = None if broken else str(value)
    ref_out = ref.calculate(text)
    assert (is_error(ref_out) if broken else ref_out == expected), (text, ref_out, expected)
    expect_calculate(impl, text, expected)


# --- tool_reply ---------------------------------------------------------------------------

def run_reply(impl, turn: str, calls_made: int, max_calls: int):
    try:
        return impl.tool_reply(turn, calls_made, max_calls)
    except NotImplementedError:
        raise
    except Exception as e:  # noqa: BLE001 - any exception is the bug under test
        raise WrongAnswer(explain(describe_call("tool_reply", turn, calls_made, max_calls),
                                  f"raised {type(e).__name__}: {e} — the environment answers every turn")) from None


def expect_reply(impl, turn: str, calls_made: int, max_calls: int, expected: str | None, why: str) -> None:
    got = run_reply(impl, turn, calls_made, max_calls)
    if got != expected:
        raise WrongAnswer(explain(describe_call("tool_reply", turn, calls_made, max_calls),
                                  f"expected {expected!r} ({why}), got {got!r:.100}",
                                  diagnose("tool_reply", got, turn, calls_made, max_calls)))


@pytest.mark.exercise("tool_reply")
@pytest.mark.parametrize("max_calls", [1, 2, 4])
def test_tool_reply_answers_each_call_within_the_budget_and_none_after(impl, max_calls):
    # The budget is checked before the call runs: calls 0 .. max_calls - 1 get their result, the next one None.
    turn = "then <calc>296*6</calc>"
    for made in range(max_calls):
        expect_reply(impl, turn, made, max_calls, "<result>1776</result>", f"call {made + 1} of {max_calls}")
    for made in (max_calls, max_calls + 1):
        expect_reply(impl, turn, made, max_calls, None, f"{made} calls made: the budget of {max_calls} is spent")


@pytest.mark.exercise("tool_reply")
@pytest.mark.parametrize("turn", ["<calc>37*8</calc>", "37*8</calc>", "</calc>"])
def test_tool_reply_with_max_calls_zero_refuses_every_call(impl, turn):
    expect_reply(impl, turn, 0, 0, None, "max_calls = 0: the first call ends the episode")


@pytest.mark.exercise("tool_reply")
@pytest.mark.parametrize("turn", ["37*8</calc>", "</calc>", "calc>1+1</calc>", "<calc 2*2</calc>",
                                  # not ending with </calc>: parse_tool_call is None (the turn is not stripped first)
                                  "<calc>1+1</calc> ", "<calc>1+1</calc>\n"])
@pytest.mark.parametrize("calls_made,max_calls", [(0, 1), (2, 3), (0, 4)])
def test_a_turn_without_a_call_is_answered_with_an_error(impl, turn, calls_made, max_calls):
    expect_reply(impl, turn, calls_made, max_calls, "<result>error: no call</result>",
                 "no well-formed call: an error the model reads, and the episode goes on")


@pytest.mark.exercise("tool_reply")
@pytest.mark.parametrize("turn", ["37*8</calc>", "<calc>2**3</calc>"])
def test_a_bad_call_past_the_budget_gets_none(impl, turn):
    # Bad or not, a call past the budget ends the episode: the budget is checked first.
    expect_reply(impl, turn, 3, 3, None, "the budget is spent, whatever the call")


TURNS_WITH_CALLS = ["<calc>37*8</calc>", "x<calc>1+<calc>2*3</calc>", "<calc></calc>", "<calc>2**3</calc>",
                    "<calc> 1+1</calc>", "<calc>1+1 </calc>", "<calc>٣</calc>", "<calc>" + "9" * 40 + "</calc>",
                    "<calc>1000000*1000001</calc>", "<calc>10-2-3</calc>", "<calc>007</calc>",
                    "<calc><answer>1776</answer></calc>"]


@pytest.mark.exercise("tool_reply")
@pytest.mark.parametrize("turn", TURNS_WITH_CALLS)
def test_tool_reply_is_the_calculators_answer_between_result_tags(impl, turn):
    # Exactly "<result>" + calculate(expr) + "</result>", the expression untouched, errors included.
    expression = turn[:-len("</calc>")].rsplit("<calc>", 1)[1]
    expected = "<result>" + impl.calculate(expression) + "</result>"
    expect_reply(impl, turn, 1, 3, expected, "the calculator's answer, tags around it")


@pytest.mark.exercise("tool_reply")
@pytest.mark.parametrize("turn,expected", [("<calc>37*8</calc>", "<result>296</result>"),
                                           ("<calc>10-2-3</calc>", "<result>5</result>"),
                                           ("<calc>3-5</calc>", "<result>-2</result>"),
                                           ("<calc>007</calc>", "<result>7</result>")])
def test_tool_reply_worked_examples(impl, ref, turn, expected):
    assert ref.tool_reply(turn, 0, 4) == expected
    expect_reply(impl, turn, 0, 4, expected, "the value between result tags")


@pytest.mark.exercise("tool_reply")
@pytest.mark.parametrize("turn", ["<calc>2**3</calc>", "<calc> 1+1</calc>", "<calc></calc>", "37*8</calc>",
                                  # and errors found past the character filter: the parser, the depth, a bound
                                  "<calc>1+</calc>", "<calc>(((((1)))))</calc>", "<calc>1000000*1000001</calc>"])
def test_tool_reply_errors_are_results_too(impl, turn):
    got = run_reply(impl, turn, 0, 2)
    if not (isinstance(got, str) and got.startswith("<result>error: ") and got.endswith("</result>")):
        raise WrongAnswer(explain(describe_call("tool_reply", turn, 0, 2),
                                  f'expected "<result>error: ...</result>" (a bad call is answered), got {got!r:.100}',
                                  diagnose("tool_reply", got, turn, 0, 2)))


# --- agent_loss_mask ----------------------------------------------------------------------

TOOL, EOS = "t,", ".,"
"""Spec letters: the tool's tokens (t, and ',' an EOS id the tool wrote), and the EOS ids (the model's '.', the tool's ',')."""


def episode(spec: str, eos_id: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """'mmttm.' → token ids and by_model flags: m a model token, t a tool token, '.' the model's EOS, ',' the EOS id
    written by the tool. An EOS may come anywhere, not only last ('m.m': the model wrote EOS, then went on).

    The other ids are random in [0, 12) with the EOS id left out, so 0 (a pad id) is sampled too, unless 0 is
    the EOS id (some tokenizers' EOS is 0: then a batch padded with 0 looks finished where it is padding)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 12, (len(spec),), generator=g)
    ids = torch.where(ids == eos_id, ids + 1, ids)
    ids = torch.tensor([eos_id if c in EOS else int(i) for c, i in zip(spec, ids)], dtype=torch.long)
    return ids, torch.tensor([c not in TOOL for c in spec], dtype=torch.bool)


SPECS = [
    "mmmmtttmm.",      # call, result, answer, EOS
    "mmtttmmtt",       # truncated: the tool's last token ends it
    "mmmtttmmmmmm",    # truncated on a model token, the longest
    ".",               # a one-token episode: the EOS alone
    "m",               # a one-token episode, truncated
    "mtmtmtmt.",       # alternating turns
    "",                # empty: nothing written, truncated
    "ttt.",            # the tool first (e.g. a reply fed before the model spoke)
]


def batch(eos_id: int, seed: int = 0, specs=SPECS):
    pairs = [episode(s, eos_id, seed + i) for i, s in enumerate(specs)]
    return [r for r, _ in pairs], [m for _, m in pairs]


def expected_mask(specs, mask_truncated: bool) -> tuple[torch.Tensor, list[bool]]:
    """The docstring's formula, written out from the specs: truncated unless the last id is eos_id (whoever wrote it)."""
    width = max(len(s) for s in specs)  # 0 when every episode is empty: a [batch, 0] mask
    truncated = [not (s and s[-1] in EOS) for s in specs]
    rows = [[float(t < len(s) and s[t] not in TOOL and not (mask_truncated and cut)) for t in range(width)]
            for s, cut in zip(specs, truncated)]
    return torch.tensor(rows, dtype=torch.float32), truncated


def run_mask(impl, responses, by_model, eos_id, *rest, **kw):
    call = describe_call("agent_loss_mask", responses, by_model, eos_id, *rest, **kw)
    copies = ([r.clone() for r in responses], [m.clone() for m in by_model])
    out = impl.agent_loss_mask(*copies, eos_id, *rest, **kw)
    if any(not torch.equal(a, b) for a, b in zip(responses + by_model, copies[0] + copies[1])):
        raise WrongAnswer(explain(call, "modified responses or by_model in place; treat inputs as read-only"))
    if not (isinstance(out, tuple) and len(out) == 2 and all(isinstance(x, torch.Tensor) for x in out)):
        raise WrongAnswer(explain(call, f"expected a tuple (mask, truncated) of two tensors, got {out!r:.100}"))
    return out, call


@pytest.mark.exercise("agent_loss_mask")
@pytest.mark.parametrize("eos_id", [0, 2, 5])
@pytest.mark.parametrize("mask_truncated", [True, False])
def test_agent_loss_mask_matches_reference(impl, ref, eos_id, mask_truncated):
    responses, by_model = batch(eos_id, seed=eos_id)
    check_call(impl, ref, "agent_loss_mask", responses, by_model, eos_id, mask_truncated)


@pytest.mark.exercise("agent_loss_mask")
@pytest.mark.parametrize("eos_id", [3, 0])  # 0: some tokenizers' EOS id, also the usual padding value
@pytest.mark.parametrize("mask_truncated", [True, False])
@pytest.mark.parametrize("specs", [SPECS, ["mmtt", "m.", "mmttmm"], ["mmttm.", "."], ["."], ["tt"], ["mmmm"],
                                   ["m.m", "m.t.", "mm.tt", ".m.", "m.tt"], ["mmt,", "m.", "mt,t", "m,"],
                                   ["", "mm.", ""], [""], ["", "", ""]],
                         ids=["eight", "the tool ends the longest", "all finished", "one EOS", "only the tool", "one row",
                              "an EOS mid-episode", "the tool wrote the EOS id", "empty beside a finished one",
                              "one empty episode", "every episode empty"])
def test_agent_loss_mask_is_the_model_tokens_of_finished_episodes(impl, specs, mask_truncated, eos_id):
    responses, by_model = batch(eos_id, seed=len(specs), specs=specs)
    (mask, truncated), call = run_mask(impl, responses, by_model, eos_id, mask_truncated)
    expected, cut = expected_mask(specs, mask_truncated)
    problem = None
    if mask.dtype != torch.float32 or tuple(mask.shape) != tuple(expected.shape):
        problem = f"expected a float32 mask of shape {tuple(expected.shape)}, got {mask.dtype} {tuple(mask.shape)}"
    elif truncated.dtype != torch.bool or truncated.tolist() != cut:
        problem = (f"expected truncated {cut} (bool: does the episode end with eos_id? Only its last id counts, whoever "
                   f"wrote it), got {truncated.tolist()} {truncated.dtype}")
    elif not torch.equal(mask, expected):
        bad = (mask != expected).nonzero()[0].tolist()
        problem = (f"expected mask {expected.tolist()}, got {mask.tolist()} (first difference at {bad}: the token is "
                   f"{'the tool' if specs[bad[0]][bad[1]:bad[1] + 1] in TOOL else 'the model'}'s"
                   f"{', in a truncated episode' if cut[bad[0]] else ''})")
    if problem:
        legend = "m model, t tool, '.' the model's EOS, ',' an EOS id the tool wrote"
        raise WrongAnswer(explain(call + f" with episodes {specs} ({legend})", problem,
                                  diagnose("agent_loss_mask", (mask, truncated), responses, by_model, eos_id, mask_truncated)))


@pytest.mark.exercise("agent_loss_mask")
def test_agent_loss_mask_masks_truncated_episodes_by_default(impl, ref):
    responses, by_model = batch(2)
    check_exercise(impl, ref, "agent_loss_mask", lambda fn: fn([r.clone() for r in responses], [m.clone() for m in by_model], 2),
                   call="agent_loss_mask(responses, by_model, 2) — the default mask_truncated=True")


@pytest.mark.exercise("agent_loss_mask")
def test_agent_loss_mask_worked_example(impl):
    # The model calls, the tool answers, the model answers and stops; a second episode is cut off in the reply.
    responses = [torch.tensor([7, 8, 9, 4, 4, 6, 2]), torch.tensor([7, 0, 9, 4])]
    by_model = [torch.tensor([True, True, True, False, False, True, True]), torch.tensor([True, True, True, False])]
    for mask_truncated, second in ((True, [0.0] * 7), (False, [1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0])):
        (mask, truncated), call = run_mask(impl, responses, by_model, 2, mask_truncated)
        expected = torch.tensor([[1.0, 1.0, 1.0, 0.0, 0.0, 1.0, 1.0], second])
        if truncated.tolist() != [False, True] or mask.dtype != torch.float32 or not torch.equal(mask, expected):
            raise WrongAnswer(explain(call, f"expected truncated [False, True] and mask {expected.tolist()} (float32); "
                                            f"got {truncated.tolist()} and {mask.tolist()} ({mask.dtype})",
                                      diagnose("agent_loss_mask", (mask, truncated), responses, by_model, 2, mask_truncated)))


def one_flag_more(by_model: list[torch.Tensor], row: int) -> list[torch.Tensor]:
    return [torch.cat([m, torch.tensor([True])]) if b == row else m for b, m in enumerate(by_model)]


def raises_value_error(impl, responses, by_model) -> bool:
    try:
        impl.agent_loss_mask(responses, by_model, 2)
    except ValueError:
        return True
    except NotImplementedError:
        raise
    except Exception:  # noqa: BLE001 - not the documented error
        return False
    return False


@pytest.mark.exercise("agent_loss_mask")
@pytest.mark.parametrize("case", ["fewer flags", "more flags", "fewer rows of flags", "more rows of flags",
                                  "one row a flag more, another a flag fewer"])
def test_agent_loss_mask_rejects_flags_that_do_not_fit(impl, case):
    responses, by_model = batch(2, specs=["mmt.", "mtm", "m."])
    if case == "fewer flags":
        by_model[1] = by_model[1][:-1]
    elif case == "more flags":
        by_model = one_flag_more(by_model, 0)
    elif case == "fewer rows of flags":
        by_model = by_model[:-1]
    elif case == "more rows of flags":
        by_model = by_model + [torch.tensor([True])]
    else:  # the totals agree: only a check of each row finds it
        by_model = one_flag_more(by_model, 0)
        by_model[1] = by_model[1][:-1]
    call = describe_call("agent_loss_mask", responses, by_model, 2)
    try:
        impl.agent_loss_mask(responses, by_model, 2)
    except ValueError:
        return
    except NotImplementedError:
        raise
    except Exception as e:  # noqa: BLE001 - a TypeError from a shape check is not the documented error
        raise WrongAnswer(explain(call, f"expected a ValueError ({case}), got {type(e).__name__}: {e}",
                                  [mistake("agent_loss_mask", "lengths_not_checked")])) from None
    label = mistake("agent_loss_mask", "lengths_not_checked")
    if case.startswith("one row") and raises_value_error(impl, responses, one_flag_more(by_model, 1)):
        label = mistake("agent_loss_mask", "lengths_checked_in_total")  # one flag more in all is refused: a total
    raise WrongAnswer(explain(call, f"expected a ValueError ({case}: flags {[len(m) for m in by_model]} for responses of "
                                    f"{[len(r) for r in responses]} tokens)", [label]))
