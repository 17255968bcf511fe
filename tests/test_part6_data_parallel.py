"""Tests for Part 6 (exercises/part6_data_parallel.py).

Run: ``pytest tests/test_part6_data_parallel.py`` (your code) or add ``--impl=solutions``.
``data_seed`` is checked by its properties. The other two exercises need two processes: the
module's first test starts ONE two-process job (two ranks with torchrun's environment, gloo, CPU, a few
seconds, beside the one-process tests) that runs your code, the reference, every known mistake and correct
alternative, and DistributedDataParallel on the same per-rank inputs (workbook/distributed_check.py); the tests
then compare what each rank got. Each exercise is also checked in a single process, where it must be a world of one.
"""

from __future__ import annotations

import importlib
import itertools
import os
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from workbook.pytest_plugin import registries
from workbook.checking import (WrongAnswer, assert_close, check_call, check_exercise, compare, explain, known_mistake,
                               matching_mistakes)
from workbook.distributed import Ranks
from workbook.distributed_check import (GRADIENT_CASES, WHITEN_CASES, gradient_case, gradient_loss, near_tied_case,
                                        whiten_case)

PART = "part6_data_parallel"
POINTS = {
    "data_seed": 1,
    "average_gradients": 2,
    "global_masked_whiten": 2,
}
ROOT = Path(__file__).resolve().parent.parent
RANKS = 2


# --- data_seed: properties, checked in this process ------------------------------------------------

SEEDS, WORLD = range(0, 40), range(0, 8)


def _seed_table(fn) -> list[int]:
    return [fn(s, r) for s in SEEDS for r in WORLD]


def _fail_seed(impl, problem: str, call: str = "data_seed(seed, rank) for seed in 0..39, rank in 0..7") -> None:
    got = _seed_table(impl.data_seed)
    labels = matching_mistakes(PART, "data_seed", _seed_table, got, rtol=0, atol=0)
    raise WrongAnswer(explain(call, problem, labels))


@pytest.mark.exercise("data_seed")
def test_data_seed_rank_zero_keeps_the_seed(impl):
    for seed in (0, 1, 7, 12345):
        got = impl.data_seed(seed, 0)
        if got != seed:
            _fail_seed(impl, f"output: data_seed({seed}, 0) = {got!r}, expected {seed} (one rank is the single-process run)")


@pytest.mark.exercise("data_seed")
def test_data_seed_differs_across_ranks_and_runs(impl):
    seen: dict[int, tuple[int, int]] = {}
    for seed, rank in itertools.product(SEEDS, WORLD):
        got = impl.data_seed(seed, rank)
        if not isinstance(got, int) or isinstance(got, bool) or got < 0:
            _fail_seed(impl, f"output: data_seed({seed}, {rank}) = {got!r}, expected a non-negative int")
        if got in seen:
            other = seen[got]
            what = "two ranks of one run" if other[0] == seed else "two different runs"
            _fail_seed(impl, f"output: data_seed{other} and data_seed({seed}, {rank}) are both {got}: "
                             f"{what} would collect the same data")
        seen[got] = (seed, rank)


PROMISED_SEEDS, PROMISED_RANKS = 1_000_000, 8  # the range data_seed's docstring promises no collision in


def _data_seeds(fn, rank: int) -> np.ndarray:
    """fn(seed, rank) for every promised seed, as int64 (Python ints beyond int64 are compared exactly)."""
    seeds = range(PROMISED_SEEDS)
    try:
        return np.fromiter(map(fn, seeds, itertools.repeat(rank)), dtype=np.int64, count=PROMISED_SEEDS)
    except (OverflowError, TypeError, ValueError):
        return np.array([fn(seed, rank) for seed in seeds], dtype=object)


@pytest.mark.exercise("data_seed")
def test_data_seed_never_collides_for_any_seed_below_a_million_and_rank_below_8(impl):
    # Small seeds alone miss a stride far below RANK_STRIDE (seed + 10_007 · rank is collision-free for
    # seeds < 10_007): every seed of the promised range, on every promised rank.
    table = [_data_seeds(impl.data_seed, rank) for rank in range(PROMISED_RANKS)]
    flat = np.concatenate(table)
    if flat.dtype == object:
        unique = len(set(flat.tolist()))
    else:  # sorted, then neighbours compared: numpy's np.unique hashes 8 million values about 5x slower
        flat = np.sort(flat)
        unique = flat.size - int(np.count_nonzero(flat[1:] == flat[:-1]))
    if unique == flat.size:
        return
    seen: dict[int, tuple[int, int]] = {}
    for rank, column in enumerate(table):
        for seed, value in enumerate(column.tolist()):
            if value in seen:
                other = seen[value]
                _fail_seed(impl, f"output: data_seed{other} and data_seed({seed}, {rank}) are both {value}: two runs "
                                 f"(or two ranks of one) would collect the same data; the docstring promises distinct "
                                 f"seeds for every seed < {PROMISED_SEEDS:_} and rank < {PROMISED_RANKS}",
                           call=f"data_seed(seed, rank) for seed in 0..{PROMISED_SEEDS - 1:_}, rank in 0..{PROMISED_RANKS - 1}")
            seen[value] = (seed, rank)


@pytest.mark.exercise("data_seed")
@pytest.mark.parametrize("seed,rank", [(-1, 0), (3, -1)])
def test_data_seed_refuses_negative_input(impl, seed, rank):
    try:
        got = impl.data_seed(seed, rank)
    except ValueError:
        return
    raise WrongAnswer(explain(f"data_seed({seed}, {rank})", f"expected a ValueError (negative {'seed' if seed < 0 else 'rank'}), "
                                                           f"got {got!r}",
                              [known_mistake(PART, "data_seed", "negative_input_accepted")]))


# --- the single-process path (no process group) ------------------------------------------------------

@pytest.mark.exercise("average_gradients")
def test_average_gradients_in_one_process_changes_nothing(impl):
    net, x = gradient_case(0, rank=0)
    gradient_loss(net, x).backward()
    before = [None if p.grad is None else p.grad.clone() for p in net.parameters()]
    assert impl.average_gradients(net.parameters()) is None, "average_gradients works in place and returns None"
    after = [None if p.grad is None else p.grad.clone() for p in net.parameters()]
    problem = compare(after, before)
    if problem:
        raise WrongAnswer(explain("average_gradients(model.parameters()) without torch.distributed", problem))


@pytest.mark.exercise("global_masked_whiten")
@pytest.mark.parametrize("mask_dtype", [torch.float32, torch.int64, torch.bool], ids=str)
@pytest.mark.parametrize("case", range(len(WHITEN_CASES)))
def test_global_masked_whiten_in_one_process_is_masked_whiten(impl, ref, case, mask_dtype):
    values, mask, shift_mean = whiten_case(case, rank=0)
    mask = mask.to(mask_dtype)  # float, int64 (a tokenizer's) and bool masks give the same answer
    check_call(impl, ref, "global_masked_whiten", values, mask, shift_mean)
    part3 = importlib.import_module("solutions.part3_rlhf")
    assert_close(ref.global_masked_whiten(values, mask, shift_mean), part3.masked_whiten(values, mask, shift_mean))


@pytest.mark.exercise("global_masked_whiten")
@pytest.mark.parametrize("rank", [0, 1])
def test_global_masked_whiten_in_one_process_with_a_variance_far_below_eps(impl, ref, rank):
    # Values 0.1 ± 1e-5 (not exact in binary), variance ~1e-10: rsqrt(var + 1e-8) gives ~0.1, a 1e-8 added to the std
    # instead gives ~1. (All values equal and exact, like 2.5, would hide it: 0 · anything is 0.)
    values, mask = near_tied_case(rank)
    check_call(impl, ref, "global_masked_whiten", values, mask, rtol=1e-3, atol=1e-3)


@pytest.mark.exercise("global_masked_whiten")
def test_global_masked_whiten_shifts_the_mean_by_default(impl, ref):
    values, mask, _ = whiten_case(1, rank=0)
    check_call(impl, ref, "global_masked_whiten", values, mask)  # shift_mean left out: True, as in Part 3


# --- two processes: one job for the whole module ---------------------------------------------------------------

class TwoRanks:
    """What each implementation returned on each rank (loaded from the job's files)."""

    def __init__(self, out: Path, log: str) -> None:
        self.ranks = [torch.load(out / f"rank{r}.pt", weights_only=False) if (out / f"rank{r}.pt").exists() else {}
                      for r in range(RANKS)]
        self.log = log

    def get(self, choice: str, exercise: str, case: int) -> list:
        outputs = []
        for rank, results in enumerate(self.ranks):
            entry = results.get((choice, exercise, case))
            if entry is None:
                raise WrongAnswer(f"{exercise} did not finish on rank {rank} of the two-process job (a collective "
                                  f"called on one rank only waits forever); the job's log ends with:\n{self.log[-2000:]}")
            if entry[0] == "error":
                if entry[1] == "NotImplementedError":
                    return ["not started"]
                raise WrongAnswer(f"{exercise} raised {entry[1]} on rank {rank} of the two-process job:\n{entry[2][-2000:]}")
            outputs.append(entry[1])
        return outputs


@pytest.fixture(scope="module", autouse=True)
def _two_ranks_job(request, tmp_path_factory):
    """The two-process job, started with the module's first test when a selected test needs it: its seconds of
    start-up (two ranks importing torch, then gloo) pass beside the one-process tests before it."""
    if not any(item.module is request.module and "two_ranks" in getattr(item, "fixturenames", ())
               for item in request.session.items):
        yield None
        return
    choices = ["solutions", *(v.choice for ex in POINTS for v in _variants(ex))]
    if request.config.workbook_impl == "exercises":
        choices.append("exercises")  # last: if it hangs, everything before it is saved
    out = tmp_path_factory.mktemp("part6")
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    ranks = Ranks(["-m", "workbook.distributed_check", "exercises", str(out), *choices], RANKS, env=env, cwd=str(ROOT))
    job = {"ranks": ranks, "out": out, "started": time.monotonic(), "done": None}
    yield job
    if job["done"] is None:  # no test waited for it (a session stopped early): stop it, as a timeout would
        ranks.stop()


@pytest.fixture(scope="module")
def two_ranks(_two_ranks_job) -> TwoRanks:
    job = _two_ranks_job
    if job["done"] is None:
        try:
            log = job["ranks"].finish(timeout=max(1.0, 100 - (time.monotonic() - job["started"]))).stdout
        except Exception as error:  # noqa: BLE001 — a timeout: report what was saved
            log = f"the two-process job did not finish: {error}"
        job["done"] = TwoRanks(job["out"], log)
    return job["done"]


def _variants(exercise: str) -> list:
    """Known mistakes and correct alternatives of one exercise."""
    return [v for registry in registries().values() for v in registry.for_exercise(PART, exercise)]


def _choice(fn, exercise: str) -> str:
    """Which implementation ``fn`` is, as the ``--impl`` value the job ran it under."""
    if fn is getattr(importlib.import_module(f"solutions.{PART}"), exercise):
        return "solutions"
    for v in _variants(exercise):
        if fn is v.impl:
            return v.choice
    return "exercises"


def _runner(two_ranks: TwoRanks, exercise: str, case: int, local_call):
    def run(fn):
        got = two_ranks.get(_choice(fn, exercise), exercise, case)
        if got == ["not started"]:
            local_call(fn)  # a stub raises NotImplementedError here, from your file
            raise RuntimeError(f"{exercise} raised NotImplementedError in the two-process job")
        return got
    return run


@pytest.mark.exercise("average_gradients")
@pytest.mark.parametrize("case", range(len(GRADIENT_CASES)), ids=GRADIENT_CASES)
def test_average_gradients_on_two_ranks(impl, ref, two_ranks, case):
    """Each rank ends with the mean of both ranks' gradients (parameters without a gradient stay None) — also
    when a parameter without a gradient comes first, so a slice copied back by the wrong offset is seen."""
    run = _runner(two_ranks, "average_gradients", case, lambda fn: fn([]))
    check_exercise(impl, ref, "average_gradients", run,
                   call=f"average_gradients(model.parameters()) on {RANKS} ranks after loss.backward() (case {case}); "
                        "output: [each rank's .grad of each parameter]")


@pytest.mark.exercise("global_masked_whiten")
@pytest.mark.parametrize("case", range(len(WHITEN_CASES)))
def test_global_masked_whiten_on_two_ranks(impl, ref, two_ranks, case):
    shift_mean, *shapes = WHITEN_CASES[case]
    run = _runner(two_ranks, "global_masked_whiten", case, lambda fn: fn(torch.ones(2), torch.ones(2)))
    check_exercise(impl, ref, "global_masked_whiten", run,
                   call=f"global_masked_whiten(values, mask, shift_mean={shift_mean}) on {RANKS} ranks with values of "
                        f"shapes {shapes} and unequal mask counts; output: [each rank's result]")


@pytest.mark.exercise("global_masked_whiten")
def test_global_masked_whiten_on_two_ranks_with_all_values_equal(impl, ref, two_ranks):
    # Global variance 0: the documented (values − μ)·rsqrt(var + 1e-8) is finite (0 on every real token).
    run = _runner(two_ranks, "global_masked_whiten", "tied", lambda fn: fn(torch.ones(2), torch.ones(2)))
    check_exercise(impl, ref, "global_masked_whiten", run, rtol=1e-4, atol=1e-4,
                   call=f"global_masked_whiten(values, mask) on {RANKS} ranks, every masked-in value 2.5 (variance 0)")


@pytest.mark.exercise("global_masked_whiten")
def test_global_masked_whiten_on_two_ranks_with_a_variance_far_below_eps(impl, ref, two_ranks):
    # Masked-in values 0.1 ± 1e-5 on both ranks (3 and 4 of them): var ~1e-10 < 1e-8, so where the 1e-8 goes matters —
    # rsqrt(var + 1e-8) scales the deviations to ~0.1, 1 / (std + 1e-8) to ~1. The tied case above (2.5 exactly) cannot
    # tell them apart.
    run = _runner(two_ranks, "global_masked_whiten", "near_tied", lambda fn: fn(torch.ones(2), torch.ones(2)))
    check_exercise(impl, ref, "global_masked_whiten", run, rtol=1e-3, atol=1e-3,
                   call=f"global_masked_whiten(values, mask) on {RANKS} ranks, masked-in values 0.1 ± 1e-5 "
                        "(3 on rank 0, 4 on rank 1: variance ~1e-10)")


@pytest.mark.exercise("global_masked_whiten")
def test_global_masked_whiten_on_two_ranks_with_one_element_each(impl, ref, two_ranks):
    # Globally n = 2: enough for the unbiased variance, although each rank alone holds one element.
    run = _runner(two_ranks, "global_masked_whiten", "pair", lambda fn: fn(torch.ones(2), torch.ones(2)))
    check_exercise(impl, ref, "global_masked_whiten", run,
                   call=f"global_masked_whiten(values, mask) on {RANKS} ranks with one masked-in element on each")


@pytest.mark.exercise("global_masked_whiten")
def test_global_masked_whiten_refuses_fewer_than_two_elements_over_all_ranks(impl, two_ranks):
    # Rank 0 holds one masked-in element, rank 1 none: the unbiased variance is 0/0 on every rank.
    choice = _choice(impl.global_masked_whiten, "global_masked_whiten")
    entries = [results.get((choice, "global_masked_whiten", "too_few")) for results in two_ranks.ranks]
    if entries[0] and entries[0][:2] == ("error", "NotImplementedError"):
        impl.global_masked_whiten(torch.ones(2), torch.ones(2))  # a stub: reported as not started
    got = ["no result (did it hang?)" if e is None else e[1] if e[0] == "error" else "returned a tensor" for e in entries]
    if got != ["ValueError", "ValueError"]:
        labels = [known_mistake(PART, "global_masked_whiten", "no_global_count_check")] if "returned a tensor" in got else []
        raise WrongAnswer(explain(f"global_masked_whiten(values, mask) on {RANKS} ranks, 1 masked-in element on rank 0 "
                                  "and none on rank 1", f"expected a ValueError on every rank, got {got}", labels))


@pytest.mark.exercise("global_masked_whiten")
def test_global_masked_whiten_in_one_process_refuses_fewer_than_two_elements(impl):
    values, mask = torch.randn(2, 3), torch.zeros(2, 3)
    mask[1, 2] = 1.0
    try:
        out = impl.global_masked_whiten(values, mask)
    except ValueError:
        return
    raise WrongAnswer(explain("global_masked_whiten(values, mask with 1 masked-in element) without torch.distributed",
                              f"expected a ValueError (the unbiased variance of one element is 0/0), got {out}",
                              [known_mistake(PART, "global_masked_whiten", "no_global_count_check")]))


# --- the oracles themselves (not graded): the reference agrees with DDP and with one process --------------

def test_reference_average_gradients_equals_ddp(two_ranks):
    for case in range(len(GRADIENT_CASES)):
        ours, ddp = two_ranks.get("solutions", "average_gradients", case), two_ranks.get("ddp", "average_gradients", case)
        assert compare(ours, ddp, rtol=1e-6, atol=1e-7) is None, compare(ours, ddp, rtol=1e-6, atol=1e-7)
        # ...and that is the mean of the two ranks' own gradients.
        local = []
        for rank in range(RANKS):
            net, x = gradient_case(case, rank)
            gradient_loss(net, x).backward()
            local.append([p.grad for p in net.parameters()])
        for r in range(RANKS):
            for got, *per_rank in zip(ours[r], *local):
                if got is None:
                    assert all(g is None for g in per_rank)
                else:
                    assert_close(got, sum(per_rank) / RANKS)


@pytest.mark.parametrize("case", range(len(WHITEN_CASES)))
def test_reference_global_whiten_equals_one_process_on_the_union(two_ranks, case):
    from solutions.part3_rlhf import masked_whiten

    outs = two_ranks.get("solutions", "global_masked_whiten", case)
    inputs = [whiten_case(case, r) for r in range(RANKS)]
    values = torch.cat([v.flatten() for v, _, _ in inputs])
    mask = torch.cat([m.flatten() for _, m, _ in inputs])
    expected = masked_whiten(values, mask, inputs[0][2])
    assert_close(torch.cat([o.flatten() for o in outs]), expected)
