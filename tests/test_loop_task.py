"""The loop's task interface carries a task with verifiable rewards (what Part 7's reasoning task needs).

A toy task stands in for it: prompts carry an answer ("say k" → "k"), the reward checks the
completion against that answer with no model, the evaluation is pass@1 / pass@k over several
samples per held-out prompt, and there are no preference pairs. Not graded: reference code, a
~7k-parameter model pretrained for a second.
"""

from __future__ import annotations

import copy
import json
import random

import numpy as np
import pytest
import torch

from workbook.lm.pretrain import TINY_ARGS, pretrain
from workbook.loop.task import Prompt, ReviewTask, held_out_panel, own_rollout
from workbook.loop.rlhf import Args, algo_args, train
from workbook.rlhf.data import rollout
from workbook.runs import ConfigError

LETTERS = "abcdefghij"


class SayTask:
    """Prompt "say k", answer "k"; reward 1 when the completion starts with k, 0.1 for another letter, 0 else."""

    name = "say"
    headline = (("pass@1", "pass@1", ".3f"), ("pass@4", "pass@4", ".3f"))
    panels = (("env/reward_mean", "reward of the batch"), ("env/correct", "correct fraction of the batch"))

    def __init__(self):
        self.calls: list[tuple[list[Prompt], list[str]]] = []

    def batch(self, n: int, seed: int, iteration: int) -> list[Prompt]:
        rng = random.Random(1_000 * seed + iteration)
        return [Prompt(f"say {k}", k) for k in (rng.choice(LETTERS) for _ in range(n))]

    def eval_prompts(self, n: int) -> list[Prompt]:
        return [Prompt(f"say {LETTERS[i % len(LETTERS)]}", LETTERS[i % len(LETTERS)]) for i in range(n)]

    @staticmethod
    def reward(completion: str, answer: str) -> float:
        first = completion.strip()[:1]
        return 1.0 if first == answer else 0.1 if first.isalpha() else 0.0

    def score(self, prompts, batch) -> torch.Tensor:
        self.calls.append((prompts, batch.prompts))
        return torch.tensor([self.reward(c, p.answer) for p, c in zip(prompts, batch.completions)])

    def batch_stats(self, batch, scores) -> dict[str, float]:
        return {"env/correct": (scores == 1.0).float().mean().item()}

    def evaluate(self, policy, reference, tok, prompts, *, temperature, max_new_tokens, seed) -> dict:
        k = 4
        gen = torch.Generator().manual_seed(seed)
        many = [p for p in prompts for _ in range(k)]
        out = rollout(policy.lm, tok, [p.text for p in many], max_new_tokens=max_new_tokens, temperature=temperature,
                      generator=gen)
        correct = torch.tensor([self.reward(c, p.answer) == 1.0 for p, c in zip(many, out.completions)]).view(-1, k)
        return {"pass@1": correct.float().mean().item(), "pass@4": correct.any(dim=1).float().mean().item(),
                "texts": out.texts[::k], "scores": correct[:, 0].float().tolist()}

    def preference_pairs(self):
        raise ConfigError("--algo", "the say task has no preference pairs (use grpo, rloo or ppo)")


@pytest.fixture(scope="module")
def tiny():
    model, tok, _ = pretrain(TINY_ARGS, progress=False)
    return model, tok


def small(tmp_path, algo: str, **kw) -> Args:
    return algo_args(algo, impl="solutions", iterations=2, batch_size=8, mini_batch_size=4, group_size=4, ppo_epochs=1,
                     eval_samples=5, max_new_tokens=6, sample_every=1, wandb="disabled", runs_dir=str(tmp_path),
                     run_name=algo, quiet=True, **kw)


@pytest.mark.parametrize("algo", ["grpo", "ppo"])
def test_a_task_with_answers_runs_through_the_loop(tiny, tmp_path, algo):
    model, tok = tiny
    task = SayTask()
    summary = train(small(tmp_path, algo), model=copy.deepcopy(model), tok=tok, task=task)
    assert summary["task"] == "say" and set(summary["before"]) == {"pass@1", "pass@4"}
    assert 0.0 <= summary["before"]["pass@1"] <= summary["before"]["pass@4"] <= 1.0
    assert len(task.calls) == 2
    for prompts, texts in task.calls:  # the reward sees each response's own prompt, answer included
        assert [p.text for p in prompts] == texts and all(p.answer == p.text[-1] for p in prompts)
        if algo != "ppo":  # G completions per prompt, next to each other
            groups = [prompts[i:i + 4] for i in range(0, 8, 4)]
            assert all(len(set(g)) == 1 for g in groups)
    rows = [json.loads(line) for line in (tmp_path / algo / "samples.jsonl").read_text().splitlines()]
    assert rows and all(r["answer"] == r["prompt"][-1] for r in rows), "samples.jsonl keeps the answer checked"
    assert all(r["score"] == float(str(np.float32(r["score"]))) for r in rows), "scores as a person reads them (float32's shortest)"
    metrics = [json.loads(line) for line in (tmp_path / algo / "metrics.jsonl").read_text().splitlines()]
    assert all("env/correct" in m for m in metrics), "the task's batch statistics are logged"


def test_an_algorithm_the_task_cannot_serve_is_refused_before_anything_is_written(tiny, tmp_path):
    model, tok = tiny
    with pytest.raises(ConfigError, match="no preference pairs"):
        train(small(tmp_path, "dpo"), model=copy.deepcopy(model), tok=tok, task=SayTask())
    assert not (tmp_path / "dpo").exists()


def test_the_review_task_has_no_answers_and_its_pairs_for_dpo():
    task = ReviewTask()
    assert all(p.answer is None for p in task.batch(4, 0, 0))
    assert [p.text for p in task.batch(4, 0, 0)] == [p.text for p in task.batch(4, 0, 0)], "seeded per (seed, iteration)"
    assert [p.text for p in task.batch(4, 0, 0)] != [p.text for p in task.batch(4, 0, 1)]
    train_pairs, heldout = task.preference_pairs()
    assert train_pairs and heldout and all(len(pair) == 3 for pair in train_pairs)
    assert Args().seed == 0


def test_samples_show_float32_scores_as_a_person_reads_them():
    # samples.jsonl once showed "reward": 0.10000000149011612 (a float32 widened to float64).
    from workbook.loop.run import readable_floats

    scores = torch.tensor([0.1, -0.7, 1.0, 0.0, 1 / 3, 1e-8], dtype=torch.float32)
    got = readable_floats(scores)
    assert json.dumps(got) == "[0.1, -0.7, 1.0, 0.0, 0.33333334, 1e-08]"
    assert torch.equal(torch.tensor(got, dtype=torch.float32), scores), "nothing rounded away: each reads back exactly"
    assert readable_floats(torch.tensor([0.1], dtype=torch.bfloat16)) == [0.100097656]  # bfloat16 0.1 read as a float32
    assert readable_floats(torch.tensor([0.1, 1 / 3], dtype=torch.float64)) == [0.1, 1 / 3], "float64 kept as it is"


def test_the_optional_members_are_taken_only_from_the_tasks_that_fill_them():
    from workbook.loop.verifiable import CalculatorTask, ReasoningTask

    review, say = ReviewTask(), SayTask()
    addition, calculator = ReasoningTask("solutions", "addition"), CalculatorTask("solutions")
    assert own_rollout(calculator) == calculator.rollout, "the calculator writes its own multi-turn episodes"
    assert own_rollout(addition) is own_rollout(review) is own_rollout(say) is None, "the others: the loop's one turn"
    assert held_out_panel(addition) == held_out_panel(calculator) == ("env/accuracy", "pass@1")
    assert held_out_panel(review) is held_out_panel(say) is None
    assert not isinstance(calculator, ReasoningTask), "the calculator is no arithmetic task with a placeholder name"
    assert (addition.name, calculator.name) == ("addition", "calculator")
