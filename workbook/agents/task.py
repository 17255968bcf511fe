"""Part 9's task: a product of three numbers, solved with a calculator over several turns.

A problem is a prompt such as ``37*8*6:`` and one right answer, ``1776``. The model may call a
calculator by writing ``<calc>EXPR</calc>``; generation stops there, the environment appends
``<result>VALUE</result>`` (or ``<result>error: …</result>``) and the model goes on. The episode
ends when the model writes its answer and EOS:

    37*8*6:<calc>37*8</calc><result>296</result><calc>296*6</calc><result>1776</result><answer>1776</answer>

Two calls, the second built on the first's result: multi-turn is real. The tiny model cannot
multiply a two-digit number by a digit in its head (Part 7's multiplication model got 0.3 with a
scratchpad), let alone the three-digit product that follows, so without the tool it is mostly
wrong. The pretraining corpus (:func:`corpus_texts`) mixes four kinds of trace, in the shares of
:data:`CORPUS_MIX`, so that the base model knows the tool but does not always use it well:

- ``right``: the trace above;
- ``operand``: a tool call with an operand copied wrong (one digit changed), then consistent;
- ``head``: no tool; an answer "computed in the head": a guess with as many digits as the product,
  rarely right;
- ``copy``: the tool used well, then its last result copied wrong into the answer.

Held-out problems are fixed by a hash of the operands, as in Part 7 (``workbook/reason``): an
``eval`` triple is never in the pretraining corpus nor among the RL training prompts.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import cache

import numpy as np

from workbook.reason.task import ALPHABET, Problem, _mix64

NAME = "calculator"
CALL_OPEN, CALL_CLOSE = "<calc>", "</calc>"
RESULT_OPEN, RESULT_CLOSE = "<result>", "</result>"
ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"

# Operand ranges [lo, hi) of a, b and c in a*b*c.
RANGES = ((10, 100), (2, 10), (2, 10))
EVAL_FRACTION = 0.2
"""The share of all (a, b, c) held out for evaluation (by hash, so fixed forever)."""
CORPUS_MIX = {"right": 0.55, "operand": 0.20, "head": 0.15, "copy": 0.10}
"""Shares of the pretraining traces of each kind (see the module docstring)."""
KINDS = tuple(CORPUS_MIX)

assert set("<>/abcdefghijklmnopqrstuvwxyz0123456789*:") <= set(ALPHABET)


@dataclass(frozen=True)
class Triple:
    a: int
    b: int
    c: int

    @property
    def prompt(self) -> str:
        return f"{self.a}*{self.b}*{self.c}:"

    @property
    def answer(self) -> str:
        return str(self.a * self.b * self.c)


def _key(a, b, c):
    return 9_000_000 + a * 10_000 + b * 100 + c


def is_heldout(a: int, b: int, c: int) -> bool:
    """True if (a, b, c) belongs to the evaluation split: a hash of the operands, not of a seed."""
    return _mix64(_key(a, b, c)) < int(EVAL_FRACTION * 2**64)


@cache
def _pool(heldout: bool) -> np.ndarray:
    (a0, a1), (b0, b1), (c0, c1) = RANGES
    a, b, c = np.meshgrid(np.arange(a0, a1, dtype=np.uint64), np.arange(b0, b1, dtype=np.uint64),
                          np.arange(c0, c1, dtype=np.uint64), indexing="ij")
    a, b, c = a.ravel(), b.ravel(), c.ravel()
    chosen = (_mix64(_key(a, b, c)) < np.uint64(int(EVAL_FRACTION * 2**64))) == heldout
    return np.stack([a[chosen], b[chosen], c[chosen]], axis=1).astype(np.int64)


def eval_pool_size() -> int:
    return len(_pool(True))


def parse_prompt(prompt: str) -> Triple:
    a, b, c = (int(x) for x in prompt.rstrip(":").split("*"))
    return Triple(a, b, c)


def make_problems(split: str, n: int, seed: int = 0) -> list[Problem]:
    """``n`` problems from ``split`` ("pretrain", "train" or "eval"), seeded (as Part 7's ``make_problems``)."""
    if split not in ("pretrain", "train", "eval"):
        raise ValueError(f"unknown split {split!r}; expected pretrain, train or eval")
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    rng = random.Random(f"{NAME}/{split}/{seed}")
    pool = _pool(split == "eval")
    if split == "eval":
        if n > len(pool):
            raise ValueError(f"the {NAME} eval split has {len(pool)} problems, asked for {n}")
        rows = rng.sample(range(len(pool)), n)
    else:
        rows = [rng.randrange(len(pool)) for _ in range(n)]
    triples = [Triple(*(int(v) for v in pool[i])) for i in rows]
    return [Problem(t.prompt, t.answer) for t in triples]


def _slip(number: int, rng: random.Random) -> int:
    """``number`` with one digit changed (never the leading digit to 0): a copy or a guess gone wrong."""
    digits = list(str(number))
    i = rng.randrange(len(digits))
    choices = [d for d in "0123456789" if d != digits[i] and not (i == 0 and d == "0")]
    digits[i] = rng.choice(choices)
    return int("".join(digits))


def call(expr: str, value: str) -> str:
    return f"{CALL_OPEN}{expr}{CALL_CLOSE}{RESULT_OPEN}{value}{RESULT_CLOSE}"


def trace(t: Triple, kind: str = "right", rng: random.Random | None = None) -> str:
    """The completion after the prompt for one kind of trace (:data:`KINDS`), EOS not included."""
    rng = rng or random.Random(0)
    if kind == "head":  # a guess of the right size, rarely right: the product is out of the model's reach
        product = t.a * t.b * t.c
        return f"{ANSWER_OPEN}{rng.randrange(10 ** (len(str(product)) - 1), 10 ** len(str(product)))}{ANSWER_CLOSE}"
    a, b, c = t.a, t.b, t.c
    wrong = kind == "operand"
    which = rng.randrange(4) if wrong else -1  # a, b, the first result or c is copied wrong
    a1 = _slip(a, rng) if which == 0 else a
    b1 = _slip(b, rng) if which == 1 else b
    first = a1 * b1
    first_copy = _slip(first, rng) if which == 2 else first
    c1 = _slip(c, rng) if which == 3 else c
    second = first_copy * c1
    answer = _slip(second, rng) if kind == "copy" else second
    return call(f"{a1}*{b1}", str(first)) + call(f"{first_copy}*{c1}", str(second)) + f"{ANSWER_OPEN}{answer}{ANSWER_CLOSE}"


def corpus_texts(n: int, seed: int = 0, mix: dict[str, float] | None = None) -> list[str]:
    """``n`` pretraining texts (prompt + trace) from the "pretrain" split, of kinds drawn from ``mix``."""
    mix = CORPUS_MIX if mix is None else mix
    rng = random.Random(f"{NAME}/corpus/{seed}")
    kinds, weights = list(mix), list(mix.values())
    out = []
    for p in make_problems("pretrain", n, seed):
        kind = rng.choices(kinds, weights)[0]
        out.append(p.prompt + trace(parse_prompt(p.prompt), kind, rng))
    return out


def tool_results(completion: str) -> list[str]:
    """The values between each ``<result>`` and ``</result>`` of a completion, in order."""
    out, at = [], 0
    while (start := completion.find(RESULT_OPEN, at)) >= 0:
        end = completion.find(RESULT_CLOSE, start)
        if end < 0:
            break
        out.append(completion[start + len(RESULT_OPEN):end])
        at = end + len(RESULT_CLOSE)
    return out


def tool_calls(completion: str) -> list[str]:
    """The expressions between each ``<calc>`` and the next ``</calc>`` of a completion, in order."""
    out, at = [], 0
    while (start := completion.find(CALL_OPEN, at)) >= 0:
        end = completion.find(CALL_CLOSE, start)
        if end < 0:
            break
        out.append(completion[start + len(CALL_OPEN):end])
        at = end + len(CALL_CLOSE)
    return out


def mistake_profile(prompts: list[str], completions: list[str]) -> dict[str, float]:
    """Shares of ``completions`` that are ``right`` (the exact right trace), of each wrong corpus kind, or ``other``.

    A completion counts as ``operand`` when its first call is not ``a*b`` or its second is not
    ``R*c`` for the first result ``R`` it got; ``head`` when it answers without any call; ``copy``
    when both calls are right and the answer is not the last result; anything else (an extra call,
    a right answer by another path, no answer) is ``other``. The shares sum to 1.
    """
    if len(prompts) != len(completions) or not prompts:
        raise ValueError("need one completion per prompt, at least one")
    counts = dict.fromkeys(("right", *KINDS[1:], "other"), 0)
    for prompt, text in zip(prompts, completions):
        t = parse_prompt(prompt)
        calls, results = tool_calls(text), tool_results(text)
        answer_at = text.find(ANSWER_OPEN)
        answer = text[answer_at + len(ANSWER_OPEN):text.find(ANSWER_CLOSE, answer_at)] if answer_at >= 0 else None
        if text == trace(t, "right"):
            kind = "right"
        elif not calls and answer is not None:
            kind = "head"
        elif len(calls) == 2 and len(results) == 2 and (calls[0] != f"{t.a}*{t.b}" or calls[1] != f"{results[0]}*{t.c}"):
            kind = "operand"
        elif len(calls) == 2 and len(results) == 2 and answer is not None and answer != results[1]:
            kind = "copy"
        else:
            kind = "other"
        counts[kind] += 1
    return {k: v / len(prompts) for k, v in counts.items()}
