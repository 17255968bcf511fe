"""Part 7's verifiable tasks: arithmetic with a short worked solution, checked by a program.

A problem is a prompt such as ``347+285:`` and one right answer, ``632``. The model answers
with a scratchpad, one column at a time, then the answer in tags:

    347+285:7+5=12,4+8+1=13,3+2+1=6<answer>632</answer>

Two tasks, chosen by measurement (docs in ``make_problems``):

- ``addition`` (the main task): three-digit addition. The pretraining corpus *forgets each
  carry* with probability ``slip`` (``4+8=12`` where ``4+8+1=13`` was due) and then carries
  on consistently, so the base model knows the procedure and its wrong answers are slips:
  the right answer is in its distribution but often not its first choice (pass@1 low to
  middling, pass@16 high). RL has something to sharpen.
- ``multiplication``: two digits times one, from a correct corpus but with a model trained
  too briefly to know its times tables. Its errors are gaps in competence, not slips.

Held-out problems are fixed by a hash of the operands: an ``eval`` pair never appears in the
pretraining corpus nor among the RL training prompts, whatever the seeds.
"""

from __future__ import annotations

import random
from functools import cache
from dataclasses import dataclass
from typing import Literal

import numpy as np

TASKS = ("addition", "multiplication")
Split = Literal["pretrain", "train", "eval"]
SPLITS = ("pretrain", "train", "eval")

# Digits, the symbols of the worked solutions and tags, and lowercase letters.
ALPHABET = "0123456789+-*=,.:;<>/ abcdefghijklmnopqrstuvwxyz"
OPEN, CLOSE = "<answer>", "</answer>"

# The share of all operand pairs held out for evaluation (by hash, so fixed forever).
EVAL_FRACTION = {"addition": 0.1, "multiplication": 0.3}
# Operand ranges [lo, hi) of a and b.
_RANGES = {"addition": ((100, 1000), (100, 1000)), "multiplication": ((10, 100), (2, 10))}
# The corpus forgets each due carry with this probability (the slips RL can fix).
CORPUS_SLIP = {"addition": 0.55, "multiplication": 0.0}


@dataclass(frozen=True)
class Problem:
    """One question and its single checkable answer (digits, no leading zeros)."""

    prompt: str
    answer: str


def _check_task(task: str) -> None:
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; expected one of {', '.join(TASKS)}")


def operand_pairs(task: str) -> list[tuple[int, int]]:
    """Every (a, b) the task can ask about, in a fixed order."""
    _check_task(task)
    (a0, a1), (b0, b1) = _RANGES[task]
    return [(a, b) for a in range(a0, a1) for b in range(b0, b1)]


_MASK64 = (1 << 64) - 1


def _mix64(x):
    """SplitMix64's finaliser: a fixed, well-spread 64-bit hash (Python ints or numpy uint64 arrays)."""
    if isinstance(x, int):
        x = (x + 0x9E3779B97F4A7C15) & _MASK64
        x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
        x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
        return x ^ (x >> 31)
    with np.errstate(over="ignore"):
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def _pair_key(task: str, a, b):
    return (TASKS.index(task) + 1) * 1_000_000 + a * 1000 + b


def is_heldout(task: str, a: int, b: int) -> bool:
    """True if (a, b) belongs to the evaluation split: a hash of the operands, not of a seed."""
    _check_task(task)
    return _mix64(_pair_key(task, a, b)) < int(EVAL_FRACTION[task] * 2**64)


def prompt_of(task: str, a: int, b: int) -> str:
    return f"{a}{'+' if task == 'addition' else '*'}{b}:"


def worked_solution(task: str, a: int, b: int, slip: float = 0.0, rng: random.Random | None = None) -> str:
    """The completion after the prompt: column steps, then ``<answer>…</answer>``.

    With ``slip > 0`` each due carry is forgotten with that probability, and the rest of the
    solution follows from what was written (so the answer is wrong but consistent).
    """
    _check_task(task)
    rng = rng or random.Random(0)
    steps, digits = [], []
    carry = 0
    if task == "addition":
        xs, ys = str(a)[::-1], str(b)[::-1]
        for i, (x, y) in enumerate(zip(xs, ys)):
            used = carry if not (carry and rng.random() < slip) else 0
            s = int(x) + int(y) + used
            steps.append(f"{x}+{y}{'+1' if used else ''}={s}")
            last = i == len(xs) - 1
            digits.append(str(s) if last else str(s % 10))
            carry = s // 10
    else:
        for i, x in enumerate(str(a)[::-1]):
            used = carry if not (carry and rng.random() < slip) else 0
            s = int(x) * b + used
            steps.append(f"{x}*{b}{f'+{used}' if used else ''}={s}")
            last = i == len(str(a)) - 1
            digits.append(str(s) if last else str(s % 10))
            carry = s // 10
    answer = "".join(reversed(digits))
    return ",".join(steps) + f"{OPEN}{answer}{CLOSE}"


def true_answer(task: str, a: int, b: int) -> str:
    _check_task(task)
    return str(a + b if task == "addition" else a * b)


@cache
def _pool(task: str, heldout: bool) -> np.ndarray:
    """The (a, b) pairs of one side of the split, as an int64 array [pairs, 2] in operand_pairs' order."""
    (a0, a1), (b0, b1) = _RANGES[task]
    a, b = np.meshgrid(np.arange(a0, a1, dtype=np.uint64), np.arange(b0, b1, dtype=np.uint64), indexing="ij")
    a, b = a.ravel(), b.ravel()
    hashes = _mix64(_pair_key(task, a, b))
    chosen = (hashes < np.uint64(int(EVAL_FRACTION[task] * 2**64))) == heldout
    return np.stack([a[chosen], b[chosen]], axis=1).astype(np.int64)


def eval_pool_size(task: str) -> int:
    """How many distinct held-out problems ``task`` has."""
    _check_task(task)
    return len(_pool(task, True))


def make_problems(task: str, split: str, n: int, seed: int = 0) -> list[Problem]:
    """``n`` problems of ``task`` from ``split`` ("pretrain", "train" or "eval"), seeded.

    "pretrain" and "train" draw (with repeats) from the pairs that are *not* held out, on
    different random streams; "eval" returns ``n`` distinct held-out pairs (a ValueError if
    the split has fewer). Same arguments, same problems.
    """
    _check_task(task)
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of {', '.join(SPLITS)}")
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    rng = random.Random(f"{task}/{split}/{seed}")
    heldout = split == "eval"
    pool = _pool(task, heldout)
    if heldout:
        if n > len(pool):
            raise ValueError(f"the {task} eval split has {len(pool)} problems, asked for {n}")
        rows = rng.sample(range(len(pool)), n)
    else:
        rows = [rng.randrange(len(pool)) for _ in range(n)]
    pairs = [(int(pool[i, 0]), int(pool[i, 1])) for i in rows]
    return [Problem(prompt_of(task, a, b), true_answer(task, a, b)) for a, b in pairs]


def corpus_texts(task: str, n: int, seed: int = 0, slip: float | None = None) -> list[str]:
    """``n`` pretraining texts (prompt + worked solution) from the "pretrain" split, with slips."""
    slip = CORPUS_SLIP[task] if slip is None else slip
    rng = random.Random(f"{task}/corpus/{seed}")
    out = []
    for p in make_problems(task, "pretrain", n, seed):
        a, b = (int(x) for x in p.prompt[:-1].replace("*", "+").split("+"))
        out.append(p.prompt + worked_solution(task, a, b, slip, rng))
    return out


class _Forget:
    """A stand-in for ``random.Random`` whose draws forget the due carries a bit pattern names."""

    def __init__(self, bits: int):
        self.bits = bits

    def random(self) -> float:
        forget, self.bits = self.bits & 1, self.bits >> 1
        return 0.0 if forget else 1.0


@cache  # a profile asks once per sample, many samples per problem
def slipped_solutions(task: str, a: int, b: int) -> frozenset[str]:
    """Every worked solution of ``a`` op ``b`` that forgets at least one due carry (and is wrong or right by luck)."""
    right = worked_solution(task, a, b)
    columns = len(str(a))
    return frozenset(worked_solution(task, a, b, 1.0, _Forget(bits)) for bits in range(1, 2 ** columns)) - {right}


def mistake_profile(task: str, prompts: list[str], completions: list[str]) -> dict[str, float]:
    """Shares of ``completions`` that are right, slips (a forgotten carry, consistent afterwards), or anything else.

    "right" is the exact worked solution (scratchpad and answer); a completion with the right
    answer and another scratchpad counts under "other". The three shares sum to 1.
    """
    if len(prompts) != len(completions) or not prompts:
        raise ValueError("need one completion per prompt, at least one")
    counts = {"right": 0, "slip": 0, "other": 0}
    for prompt, text in zip(prompts, completions):
        a, b = (int(x) for x in prompt[:-1].replace("*", "+").split("+"))
        if text == worked_solution(task, a, b):
            counts["right"] += 1
        elif text in slipped_solutions(task, a, b):
            counts["slip"] += 1
        else:
            counts["other"] += 1
    return {k: v / len(prompts) for k, v in counts.items()}
