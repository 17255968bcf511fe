"""Part 7's support room (workbook/reason): problems, splits, the corpus, the base model, pass@k sampling."""

from __future__ import annotations

import dataclasses
import random

import pytest
import torch

from solutions import part7_reasoning as ref7
from workbook.reason import (
    REASONER_ARGS,
    TASKS,
    Problem,
    corpus_texts,
    is_heldout,
    load_or_pretrain_reasoner,
    make_problems,
    reasoner_checkpoint_path,
    sample_pass_at_k,
    worked_solution,
)
from workbook.reason.task import operand_pairs

# A reasoner small enough to train in a second or two (its answers are mostly wrong; the plumbing is what is tested).
TINY = dataclasses.replace(REASONER_ARGS["addition"], n_reviews=600, n_heldout=50, steps=30, n_layer=1, n_head=2,
                           d_model=16, log_every=10)


def operands(p: Problem) -> tuple[int, int]:
    a, b = p.prompt[:-1].replace("*", "+").split("+")
    return int(a), int(b)


@pytest.mark.parametrize("task", TASKS)
def test_eval_problems_never_appear_in_pretraining_or_training(task):
    heldout = {p.prompt for p in make_problems(task, "eval", 150, seed=0)}
    assert len(heldout) == 150, "eval problems are distinct"
    for seed in (0, 1):
        seen = {text.split(":")[0] + ":" for text in corpus_texts(task, 3000, seed)}
        seen |= {p.prompt for p in make_problems(task, "train", 3000, seed)}
        assert not heldout & seen, f"{task}: held-out prompts leaked into the corpus or the RL prompts"
        assert all(not is_heldout(task, *operands(Problem(prompt, ""))) for prompt in seen)
    assert all(is_heldout(task, *operands(p)) for p in make_problems(task, "eval", 150, seed=3))


@pytest.mark.parametrize("task", TASKS)
def test_problems_are_seeded_and_answers_are_right(task):
    a = make_problems(task, "train", 50, seed=4)
    assert a == make_problems(task, "train", 50, seed=4) and a != make_problems(task, "train", 50, seed=5)
    assert a != make_problems(task, "pretrain", 50, seed=4)
    for p in a:
        x, y = operands(p)
        assert p.answer == str(x + y if task == "addition" else x * y)


@pytest.mark.parametrize("task", TASKS)
def test_a_worked_solution_without_slips_ends_with_the_right_answer(task):
    rng = random.Random(0)
    pairs = rng.sample(operand_pairs(task), 300)
    completions = [worked_solution(task, a, b) for a, b in pairs]
    answers = [str(a + b if task == "addition" else a * b) for a, b in pairs]
    assert ref7.answer_reward(completions, answers, 0.0).tolist() == [1.0] * len(pairs)


def test_the_addition_corpus_forgets_carries_and_stays_consistent():
    texts = corpus_texts("addition", 2000, seed=0)
    right = 0
    for text in texts:
        prompt, solution = text.split(":", 1)
        a, b = (int(x) for x in prompt.split("+"))
        steps = solution.split("<answer>")[0].split(",")
        written = solution.split("<answer>")[1].split("</answer>")[0]
        # The answer follows from the steps as written: units digits, then the last column's whole sum.
        sums = [s.split("=")[1] for s in steps]
        assert written == sums[-1] + "".join(s[-1] for s in reversed(sums[:-1]))
        right += written == str(a + b)
    # No carry due: always right; each due carry forgotten with probability 0.55.
    assert 0.4 < right / len(texts) < 0.75


def test_bad_task_split_and_size_are_rejected():
    with pytest.raises(ValueError, match="task"):
        make_problems("division", "eval", 1)
    with pytest.raises(ValueError, match="split"):
        make_problems("addition", "test", 1)
    with pytest.raises(ValueError, match="eval split has"):
        make_problems("multiplication", "eval", 10_000)


def test_the_base_model_is_cached_and_sampled_for_pass_at_k(tmp_path, capsys):
    args = dataclasses.replace(TINY, cache_dir=str(tmp_path))
    torch.manual_seed(123)
    state = torch.get_rng_state()
    model, tok = load_or_pretrain_reasoner("addition", args, progress=False)
    assert torch.equal(state, torch.get_rng_state()), "pretraining must leave the global RNG alone"
    path = reasoner_checkpoint_path("addition", args)
    assert path.exists() and path.name.startswith("reasoner-addition-")
    again, _ = load_or_pretrain_reasoner("addition", args, progress=False)
    assert all(torch.equal(p, q) for p, q in zip(model.state_dict().values(), again.state_dict().values()))
    assert reasoner_checkpoint_path("multiplication", args) != path

    problems = make_problems("addition", "eval", 3)
    table = sample_pass_at_k(model, tok, problems, ref7, n=4, ks=(1, 4), seed=0)
    assert set(table["pass@k"]) == {1, 4}
    assert 0 <= table["pass@k"][1] <= table["pass@k"][4] <= 1 and 0 <= table["format_valid"] <= 1
    assert len(table["correct_per_problem"]) == 3 and table["mean_length"] > 0
    assert table == sample_pass_at_k(model, tok, problems, ref7, n=4, ks=(1, 4), seed=0), "same seed, same table"
    with pytest.raises(ValueError):
        sample_pass_at_k(model, tok, problems, ref7, n=4, ks=(8,))


def test_group_advantages_with_signal_joins_parts_5_and_7():
    rewards = torch.tensor([1.0, 1.0, 1.0, 0.0, 0.0, 1.0])
    rows, advantages, keep = ref7.group_advantages_with_signal(["a", "b"], rewards, 3)
    assert rows == ["a"] * 3 + ["b"] * 3
    assert keep.tolist() == [False] * 3 + [True] * 3
    torch.testing.assert_close(advantages, torch.tensor([0.0, 0.0, 0.0, -1 / 3, -1 / 3, 2 / 3]))


def test_the_mistake_profile_tells_a_forgotten_carry_from_any_other_mistake():
    from workbook.reason.task import mistake_profile, slipped_solutions

    right = worked_solution("addition", 347, 285)  # carries into the tens and the hundreds
    slips = slipped_solutions("addition", 347, 285)
    assert len(slips) == 3 and right not in slips  # forget the first, the second, or both
    assert "7+5=12,4+8=12,3+2=5<answer>522</answer>" in slips
    texts = [right, "7+5=12,4+8=12,3+2=5<answer>522</answer>", "7+5=12,4+8+1=13,3+2+1=6<answer>633</answer>", ""]
    profile = mistake_profile("addition", ["347+285:"] * 4, texts)
    assert profile == {"right": 0.25, "slip": 0.25, "other": 0.5}
    assert slipped_solutions("addition", 123, 456) == frozenset(), "no carry due, nothing to forget"
