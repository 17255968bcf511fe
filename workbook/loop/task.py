"""What the loop trains *for*: a task gives the prompts, the reward and the evaluation.

The loop (``workbook/loop/run.py``) never looks inside a task; it calls, in this order:

- ``task.batch(n, seed, iteration) -> list[Prompt]``: the prompts of one iteration, seeded per
  (seed, iteration) so a run is reproducible and every rank of a torchrun job (its own
  ``seed``) draws its own. A group algorithm (GRPO, RLOO, ...) asks for ``n = batch / G``
  prompts and samples each ``G`` times, the ``G`` copies next to each other
  (``repeat_for_groups``), so a task never needs to know about groups.
- ``task.score(prompts, rollout) -> Tensor[batch]``: one scalar reward per sampled response.
  ``prompts[i]`` is the item ``rollout.responses[i]`` answered (its ``answer`` included),
  ``rollout.texts[i]`` is prompt + response as text, ``rollout.finished[i]`` whether it
  ended with EOS.
- ``task.batch_stats(rollout, scores) -> dict``: extra per-iteration statistics of the
  samples (``env/...``), logged with the algorithm's.
- ``task.eval_prompts(n) -> list[Prompt]`` and ``task.evaluate(policy, reference, tok,
  prompts, temperature=, max_new_tokens=, seed=) -> dict``: the held-out before/after
  measurement. The dict holds floats (the summary's ``before``/``after``) plus ``texts`` and
  ``scores`` of the first samples; ``task.headline`` names the floats the command prints
  (key, column title, format) and ``task.panels`` the per-iteration stats its curves draw first.
- ``task.preference_pairs() -> (train, heldout)``: lists of (prompt, chosen, rejected) texts,
  for DPO; a task without pairs raises :class:`~workbook.runs.ConfigError` (``--algo``).

That is :class:`Task`, which every task fills. Two more members are optional, each with its own
small interface, and the loop asks for them in one place each (:func:`own_rollout`,
:func:`held_out_panel`) rather than a task carrying a placeholder:

- :class:`OwnRollout`, ``task.rollout(lm, tok, texts, max_new_tokens=, temperature=, generator=,
  chunk=) -> Rollout``: a task that writes its own responses (Part 9's calculator: multi-turn
  episodes with a tool, ``masks`` marking the model's tokens). The loop and Part 10's samplers call
  it instead of the one-turn sampling (``workbook.rlhf.data.rollout``) every other task gets.
  (Defined beside that sampling, in ``workbook/rlhf/data.py``, where the samplers can reach it.)
- :class:`HeldOutPanel`, ``task.held_out_panel = (batch stat, headline key)``: the per-iteration
  statistic that the held-out headline number matches (the reasoning tasks: ``env/accuracy`` and
  ``pass@1``); the curves mark that number before and after training on the stat's panel.

**A prompt may carry an answer.** :class:`Prompt` is ``(text, answer)``; the review task's
answers are None. A task with verifiable rewards (``verifiable.py``: Part 7's reasoning task on
``workbook/reason``'s arithmetic, Part 9's calculator task) plugs in as follows, with nothing in
the loop or the algorithms changed:

- its problems ``Problem(prompt, answer)`` become ``Prompt(problem.prompt, problem.answer)``;
  ``batch`` draws fresh training problems (``make_problems(task, "train", n, seed)``) and
  ``eval_prompts`` the held-out ones (``split="eval"``, never seen in pretraining or training);
- ``score`` is the learner's ``answer_reward(completions, answers)`` over the responses (each
  completion is ``tok.decode(response)``, without the prompt), so the reward needs no model;
- group algorithms sample ``G`` completions per problem as above; dynamic sampling (DAPO: keep
  only groups whose rewards differ) is the algorithm's business, not the task's;
- ``evaluate`` samples ``k`` completions per held-out problem and reports ``pass@1`` and
  ``pass@k`` (the learner's unbiased ``pass_at_k(n, c, k)``), the format-valid fraction and
  the mean length, and names them in ``headline``; ``panels`` would show the batch's accuracy;
- its backend's model is ``load_or_pretrain_reasoner(task)`` (the tiny GPT) or any Hugging
  Face causal LM (``--model``); ``preference_pairs`` raises (no DPO on that task).

The review task (Parts 3 and 5), :class:`ReviewTask`: write a positive movie review. Prompts
are review openers (``--prompts``), the reward is a sentiment score (``--reward``: VADER, the
learned reward model, or a Hugging Face classifier), and the evaluation measures the reward,
the KL to the reference, diversity and length on held-out openers. With ``--prompts imdb`` the
TRL preset (:data:`IMDB_PRESET`) replaces the defaults tuned for the tiny review GPT.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import torch
from torch import Tensor, nn

from workbook.lm.metrics import distinct_n
from workbook.rlhf.data import REVIEW_PROMPTS, OwnRollout, Rollout, own_rollout  # noqa: F401 (the optional rollout, here with the rest)
from workbook.rlhf.evaluate import evaluate
from workbook.rlhf.rewards import check_reward, missing_eos_scores


@dataclass(frozen=True)
class Prompt:
    """One prompt of a task: its text and, for a task with verifiable rewards, the answer to check."""

    text: str
    answer: str | None = None


class Task(Protocol):
    """The interface the loop calls (see the module docstring)."""

    name: str
    headline: tuple[tuple[str, str, str], ...]
    panels: tuple[tuple[str, str], ...]

    def batch(self, n: int, seed: int, iteration: int) -> list[Prompt]: ...

    def eval_prompts(self, n: int) -> list[Prompt]: ...

    def score(self, prompts: list[Prompt], rollout: Rollout) -> Tensor: ...

    def batch_stats(self, rollout: Rollout, scores: Tensor) -> dict[str, float]: ...

    def evaluate(self, policy: nn.Module, reference: nn.Module, tok: Any, prompts: list[Prompt], *,
                 temperature: float, max_new_tokens: int, seed: int) -> dict: ...

    def preference_pairs(self) -> tuple[list[tuple[str, str, str]], list[tuple[str, str, str]]]: ...


@runtime_checkable
class HeldOutPanel(Protocol):
    """A task whose held-out headline number matches one of its batch statistics; see the module docstring."""

    held_out_panel: tuple[str, str]
    """(batch stat, headline key), e.g. ``("env/accuracy", "pass@1")``."""


def held_out_panel(task: Task) -> tuple[str, str] | None:
    """``task``'s (batch stat, headline key) pair (a :class:`HeldOutPanel`), or None when it has none."""
    return task.held_out_panel if isinstance(task, HeldOutPanel) else None


# The classic TRL task (examples/notebooks/gpt2-sentiment): GPT-2 continues IMDB review openers,
# a DistilBERT sentiment classifier scores them. These replace our defaults, which are tuned
# for the 0.8M-parameter review GPT, unless the option is given on the command line.
IMDB_PRESET = {
    "learning_rate": 1.41e-5,
    "batch_size": 64,
    "mini_batch_size": 16,
    "ppo_epochs": 4,
    "kl_coef": 0.2,
    "kl_target": 6.0,
    "kl_horizon": 10_000.0,
    "ent_coef": 0.0,
    "max_new_tokens": 16,
    "iterations": 100,
    "eval_samples": 128,
}


def apply_preset(args, given: set[str]):
    """``args`` with :data:`IMDB_PRESET` filled in when ``--prompts imdb``, except the fields in ``given``."""
    if args.prompts != "imdb":
        return args
    return dataclasses.replace(args, **{k: v for k, v in IMDB_PRESET.items() if k not in given})


class ReviewTask:
    """Write a positive movie review (Part 3; Part 5 on the same task).

    ``prompts``: a source with ``batch(size, seed, iteration)`` and ``eval(n)`` (default: the
    corpus' openers); ``scorer``: texts → scores (default: VADER); ``missing_eos_score``: the
    EOS trick's fixed score for a response that never ended (None: off).
    """

    name = "review"
    headline = (("reward", "reward", "+.3f"), ("kl", "KL", ".2f"), ("distinct2", "distinct-2", ".3f"),
                ("length", "length", ".1f"))
    panels = (("env/reward_mean", "reward (mean score of the batch)"), ("env/distinct2", "distinct-2 of the batch"))

    def __init__(self, prompts=REVIEW_PROMPTS, scorer=None, *, missing_eos_score: float | None = None):
        if scorer is None:
            from workbook.lm.reward import VaderScorer

            scorer = VaderScorer()
        self.source, self.scorer, self.missing_eos_score = prompts, scorer, missing_eos_score

    def batch(self, n: int, seed: int, iteration: int) -> list[Prompt]:
        return [Prompt(t) for t in self.source.batch(n, seed, iteration)]

    def eval_prompts(self, n: int) -> list[Prompt]:
        return [Prompt(t) for t in self.source.eval(n)]

    def score(self, prompts: list[Prompt], rollout: Rollout) -> Tensor:
        scores = self.scorer(rollout.texts)
        if self.missing_eos_score is not None:
            scores = missing_eos_scores(scores, rollout.finished, self.missing_eos_score)
        return scores

    def batch_stats(self, rollout: Rollout, scores: Tensor) -> dict[str, float]:
        return {"env/distinct1": distinct_n(rollout.completions, 1), "env/distinct2": distinct_n(rollout.completions, 2)}

    def evaluate(self, policy: nn.Module, reference: nn.Module, tok: Any, prompts: list[Prompt], *,
                 temperature: float, max_new_tokens: int, seed: int) -> dict:
        return evaluate(policy, reference, tok, self.scorer, [p.text for p in prompts], temperature=temperature,
                        max_new_tokens=max_new_tokens, seed=seed)

    def preference_pairs(self):
        """The reward model's preference pairs (``workbook/rlhf/reward_model.py``'s data): (train, held-out)."""
        from workbook.lm.corpus import preference_pairs
        from workbook.rlhf.reward_model import RewardModelArgs

        rm = RewardModelArgs()
        return preference_pairs(rm.n_pairs, seed=rm.seed), preference_pairs(rm.n_heldout, seed=rm.seed + 999_983)


def check_review_options(args) -> None:
    """``--reward`` and ``--prompts`` name something loadable (checked before anything loads)."""
    from pathlib import Path

    from workbook.runs import ConfigError

    check_reward(args.reward)
    if args.prompts not in ("reviews", "imdb") and not Path(args.prompts).is_file():
        raise ConfigError("--prompts", f"{args.prompts!r} is not 'reviews', 'imdb' or a file of prompts (one per line)")
    if args.prompts != "reviews" and not args.model:
        raise ConfigError("--prompts", f"--prompts {args.prompts} needs --model (the review GPT only knows its own openers)")


def review_task(args, tok) -> ReviewTask:
    """The review task of the command's options (``--prompts``, ``--reward``, ``--eos-trick``), for ``tok``'s model.

    Loading the scorer (a reward model, a classifier) never draws from the run's seeded RNG.
    """
    from workbook.rlhf.prompts import load_prompts
    from workbook.rlhf.rewards import make_scorer

    with torch.random.fork_rng(devices=[]):
        prompts = load_prompts(args.prompts, tok if args.model else None)
        scorer = make_scorer(args.reward, tok, impl=args.impl, quiet=args.quiet, device=args.device)
    return ReviewTask(prompts, scorer, missing_eos_score=args.missing_eos_score if args.eos_trick else None)
