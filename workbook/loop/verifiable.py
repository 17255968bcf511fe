"""The tasks with verifiable rewards: Part 7's arithmetic (:class:`ReasoningTask`) and Part 9's calculator agent (:class:`CalculatorTask`).

Both plug into the loop as ``workbook/loop/task.py`` says, and share :class:`VerifiableTask`: a
program checks the answer (the learner's ``answer_reward``), so no reward model is needed. Each
says which problems it draws and how it evaluates. The calculator task also brings its own
**rollout** (the loop's ``OwnRollout``): multi-turn episodes (``workbook/agents/rollout.py``)
whose responses hold the model's tokens and the tool's, with ``masks`` saying which are the
model's; the algorithms take their losses, KL and statistics over those only.
"""

from __future__ import annotations

import random
from typing import Any

import torch
from torch import Tensor, nn

from workbook.loop import rlvr
from workbook.loop.task import Prompt
from workbook.rlhf.data import Rollout
from workbook.runs import ConfigError, load_part

INSTRUCTION = "\nSolve it step by step, briefly, then give only the final number as <answer>N</answer>.\n"


def extract_answer(completion: str) -> str | None:
    """What the completion answered (between its first ``<answer>`` and the next ``</answer>``), for display."""
    start = completion.find("<answer>")
    end = completion.find("</answer>", start + 8) if start >= 0 else -1
    return completion[start + 8:end] if end >= 0 else None


class VerifiableTask:
    """What the tasks with a checkable answer share; a subclass says which problems and how it evaluates.

    Shared: the reward (the learner's Part 7 ``answer_reward`` of each completion against its
    prompt's answer, ``format_reward`` for a well-formed wrong one), the batch statistics (share
    right, share well-formed, and with ``group_size`` > 1 the share of groups with a reward
    spread), the pass@1 / pass@k headline and no preference pairs. A subclass fills ``name``,
    ``batch``, ``eval_prompts`` and ``evaluate`` of the loop's :class:`~workbook.loop.task.Task`
    (and may add to ``headline``, ``panels`` and the statistics). ``group_size``: the samples
    per problem of the algorithm (1 for PPO); ``eval_k``: samples per held-out problem.
    """

    name: str
    # No reward panel: the reward is pass@1 plus the small format bonus, the same curve again.
    panels = (("env/accuracy", "pass@1 of the batch (share right)"),
              ("env/groups_with_signal", "share of groups with a reward spread"))
    held_out_panel = ("env/accuracy", "pass@1")
    """The batch stat that the held-out headline number matches: the curves mark it before and after training."""

    def __init__(self, impl: str, *, group_size: int = 1, format_reward: float = 0.1, eval_k: int = 16):
        self.part7 = rlvr.load_part7(impl)
        self.group_size, self.format_reward, self.eval_k = group_size, format_reward, eval_k
        self.headline = (("pass@1", "pass@1", ".3f"), (f"pass@{eval_k}", f"pass@{eval_k}", ".3f"),
                         ("format_valid", "well-formed", ".3f"), ("length", "length", ".1f"))

    def score(self, prompts: list[Prompt], rollout: Rollout) -> Tensor:
        return self.part7.answer_reward(rollout.completions, [p.answer for p in prompts], self.format_reward)

    def batch_stats(self, rollout: Rollout, scores: Tensor) -> dict[str, float]:
        stats = {"env/accuracy": (scores == 1.0).float().mean().item(), "env/format_valid": (scores > 0).float().mean().item()}
        if self.group_size > 1:
            stats["env/groups_with_signal"] = self.part7.groups_with_signal(scores.float().cpu(), self.group_size).float().mean().item()
        return stats

    def preference_pairs(self):
        raise ConfigError("--algo", "dpo needs preference pairs; the reasoning task has none")


class ReasoningTask(VerifiableTask):
    """Solve arithmetic problems; a program checks the answer (Part 7). See the loop's ``task.py``.

    ``task``: "addition" or "multiplication" (``workbook/reason``), or ``problems``: a list of
    (question, answer) pairs from a file (the last ``heldout`` of them for evaluation; each
    question followed by :data:`INSTRUCTION`). The other settings: :class:`VerifiableTask`'s.
    """

    def __init__(self, impl: str, task: str = "addition", *, group_size: int = 1, format_reward: float = 0.1,
                 eval_k: int = 16, problems: list[tuple[str, str]] | None = None, heldout: int = 0):
        super().__init__(impl, group_size=group_size, format_reward=format_reward, eval_k=eval_k)
        self.name = task
        self.train_pool = self.eval_pool = None
        if problems is not None:
            self.name = "file"
            pairs = [Prompt(q + INSTRUCTION, a) for q, a in problems]
            self.train_pool, self.eval_pool = pairs[:len(pairs) - heldout], pairs[len(pairs) - heldout:]

    def batch(self, n: int, seed: int, iteration: int) -> list[Prompt]:
        stream = 1_000_003 * seed + iteration  # fresh problems every (seed, iteration); every rank its own seed
        if self.train_pool is not None:
            rng = random.Random(f"file/{stream}")
            return [self.train_pool[rng.randrange(len(self.train_pool))] for _ in range(n)]
        from workbook.reason import make_problems

        return [Prompt(p.prompt, p.answer) for p in make_problems(self.name, "train", n, stream)]

    def eval_prompts(self, n: int) -> list[Prompt]:
        if self.eval_pool is not None:
            return self.eval_pool[:n]
        from workbook.reason import make_problems

        return [Prompt(p.prompt, p.answer) for p in make_problems(self.name, "eval", n, seed=0)]

    def evaluate(self, policy: nn.Module, reference: nn.Module, tok: Any, prompts: list[Prompt], *,
                 temperature: float, max_new_tokens: int, seed: int) -> dict:
        """pass@1 and pass@k (k = ``eval_k`` samples per problem), well-formed share, mean length, truncated share."""
        from workbook.reason import Problem, sample_pass_at_k

        problems = [Problem(p.text, p.answer) for p in prompts]
        table = sample_pass_at_k(policy.lm, tok, problems, self.part7, n=self.eval_k, ks=(1, self.eval_k),
                                 temperature=temperature, seed=seed, max_new_tokens=max_new_tokens)
        from workbook.reason import sample_completions

        texts, _, _ = sample_completions(policy.lm, tok, [p.text for p in prompts[:8]], temperature=temperature,
                                         seed=seed, max_new_tokens=max_new_tokens)
        scores = self.part7.answer_reward(texts, [p.answer for p in prompts[:8]], self.format_reward).tolist()
        return {"pass@1": table["pass@k"][1], f"pass@{self.eval_k}": table["pass@k"][self.eval_k],
                "format_valid": table["format_valid"], "length": table["mean_length"], "truncated": table["truncated"],
                "texts": [p.text + t for p, t in zip(prompts[:8], texts)], "scores": scores}




def load_part9(impl: str):
    """``exercises.part9_agents`` or ``solutions.part9_agents``."""
    return load_part(impl, "part9_agents")


class CalculatorTask(VerifiableTask):
    """Part 9: multiply three numbers with a calculator over several turns (``workbook/agents``).

    The prompts are ``a*b*c:`` problems; the rollout is multi-turn (the learner's
    ``tool_reply`` answers each ``<calc>…</calc>``; with ``tool=False`` nothing does and the
    model writes its own ``<result>`` values); the reward is the learner's Part 7
    ``answer_reward`` on the whole episode's text (the tool writes digits and errors only, never
    an ``<answer>``); the evaluation adds the tool calls per episode, the invalid-call rate and
    the model's turns. ``masks`` of the rollout mark the model's tokens (all of them without the tool).
    """

    name = "calculator"
    panels = VerifiableTask.panels + (("env/calls", "tool calls per episode"),
                                      ("env/invalid_call_rate", "invalid tool calls (share of calls)"),
                                      ("env/turns", "model turns per episode"))

    def __init__(self, impl: str, *, group_size: int = 1, format_reward: float = 0.1, eval_k: int = 16,
                 tool: bool = True, max_calls: int = 4, mask_tool_tokens: bool = True):
        super().__init__(impl, group_size=group_size, format_reward=format_reward, eval_k=eval_k)
        self.part9 = load_part9(impl)
        self.tool, self.max_calls, self.mask_tool_tokens = tool, max_calls, mask_tool_tokens
        self.headline = self.headline[:2] + (("calls", "calls", ".2f"), ("invalid_call_rate", "invalid calls", ".3f"),
                                             ("format_valid", "well-formed", ".3f"), ("length", "length", ".1f"))

    def batch(self, n: int, seed: int, iteration: int) -> list[Prompt]:
        from workbook.agents.task import make_problems

        return [Prompt(p.prompt, p.answer) for p in make_problems("train", n, 1_000_003 * seed + iteration)]

    def eval_prompts(self, n: int) -> list[Prompt]:
        from workbook.agents.task import make_problems

        return [Prompt(p.prompt, p.answer) for p in make_problems("eval", n, seed=0)]

    def rollout(self, lm, tok, prompts: list[str], *, max_new_tokens: int, temperature: float, generator: torch.Generator,
                chunk: int) -> Rollout:
        """Multi-turn episodes: the task's own rollout (an :class:`~workbook.loop.task.OwnRollout`; the loop's default
        is one turn, no tool)."""
        from workbook.agents.rollout import run_episodes

        return run_episodes(lm, tok, prompts, impl=self.part9, max_new_tokens=max_new_tokens, temperature=temperature,
                            generator=generator, tool=self.tool, max_calls=self.max_calls, chunk=chunk,
                            mask_tool_tokens=self.mask_tool_tokens)

    def batch_stats(self, rollout: Rollout, scores: Tensor) -> dict[str, float]:
        from workbook.agents.base import episode_stats

        stats = episode_stats(rollout)
        return super().batch_stats(rollout, scores) | {f"env/{k}": stats[k] for k in ("calls", "invalid_call_rate", "turns")}

    def evaluate(self, policy: nn.Module, reference: nn.Module, tok: Any, prompts: list[Prompt], *,
                 temperature: float, max_new_tokens: int, seed: int) -> dict:
        """pass@1 and pass@k, tool calls per episode, invalid-call rate, model turns, well-formed share, model tokens."""
        from workbook.agents.base import agent_pass_at_k
        from workbook.reason import Problem

        problems = [Problem(p.text, p.answer) for p in prompts]
        table = agent_pass_at_k(policy.lm, tok, problems, self.part9, self.part7, n=self.eval_k, ks=(1, self.eval_k),
                                temperature=temperature, seed=seed, tool=self.tool, max_calls=self.max_calls,
                                max_new_tokens=max_new_tokens)
        first = table["rollout"]
        texts = [first.texts[i * self.eval_k] for i in range(min(8, len(prompts)))]
        completions = [first.completions[i * self.eval_k] for i in range(min(8, len(prompts)))]
        scores = self.part7.answer_reward(completions, [p.answer for p in prompts[:8]], self.format_reward).tolist()
        return {"pass@1": table["pass@k"][1], f"pass@{self.eval_k}": table["pass@k"][self.eval_k],
                **{k: table[k] for k in ("format_valid", "length", "truncated", "calls", "invalid_call_rate", "turns")},
                "texts": texts, "scores": scores}
