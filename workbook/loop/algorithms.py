"""The algorithms the loop can train with: ppo (Part 3), grpo, rloo and dpo (Part 5).

Each algorithm is defined here once, by an :class:`Algorithm` entry in :data:`ALGORITHMS`:

- ``defaults``: the options whose defaults differ from the command's (applied to every option
  not given on the command line; tuned with ``benchmarks/beyond_ppo.py``);
- ``panels``: the statistics its curves show besides the task's (each algorithm names its
  own: GRPO has no KL target and no adaptive β to draw, DPO has a loss and a preference accuracy);
- ``x_label`` and ``title``: the x-axis of its curves and the settings its title names;
- ``check``: the settings it cannot run with (GRPO/RLOO: whole groups of two or more);
- ``build``: the object the loop drives, with ``policy``, ``reference``, ``prompts(it)``
  (the :class:`~workbook.loop.task.Prompt` items to sample this iteration), ``step(rollout,
  scores, it)`` (one update; returns its stats) and ``summary()`` (extra end-of-run numbers).

The loop (``workbook/loop/run.py``) does, every iteration: ``prompts = algo.prompts(it)``,
sample one response per prompt, score them with the task, ``stats = algo.step(rollout, scores,
it)``. PPO and the critic-free methods train on those samples; DPO trains on the task's
preference pairs and samples only to show what its policy writes now (its reward and KL
curves come from those samples).

Under ``torchrun`` every algorithm runs data-parallel: the policy is wrapped in
``DistributedDataParallel`` at its first step (gradients averaged over the ranks before each
optimizer step), each rank samples its own prompts (``data_seed``) and, for DPO, its own pairs.
PPO also whitens its advantages and adapts β over the global batch (``workbook.distributed``);
GRPO's and RLOO's baselines are per group, and every group lives on one rank.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Callable

import torch
from torch import Tensor, nn

from workbook import distributed
from workbook.lm.model import GPT
from workbook.lm.tokenizer import CharTokenizer
from workbook.loop.task import Prompt, Task
from workbook.rlhf.data import Rollout, encode_queries, load_part3
from workbook.runs import load_part


def load_part5(impl: str) -> ModuleType:
    """``exercises.part5_beyond_ppo`` or ``solutions.part5_beyond_ppo``."""
    return load_part(impl, "part5_beyond_ppo")


@dataclass(frozen=True)
class Algorithm:
    """One algorithm, as the loop and its curves see it."""

    name: str
    part: str
    """Where its exercises are, for messages."""
    build: Callable[..., Any]
    """(args, model, tok, task, seed) → the object the loop drives (see the module docstring)."""
    defaults: dict[str, Any] = field(default_factory=dict)
    """Options whose defaults differ for this algorithm; the command line always wins."""
    panels: tuple[tuple[str, str], ...] = ()
    """(stat, label) of its curves' panels, after the task's."""
    x_label: str = "iteration"
    title: Callable[[Any], str] = lambda args: ""
    """args → the settings its curves' title names."""
    kl_target: Callable[[Any], float | None] = lambda args: None
    """args → the KL target drawn on the KL panel (PPO's adaptive controller), or None."""
    hide: Callable[[Any], set[str]] = lambda args: set()
    """args → the stats of ``panels`` not worth a panel with these settings (PPO's β when it is fixed)."""
    check: Callable[[Any], None] = lambda args: None
    """args → None, or ConfigError for a setting this algorithm cannot run with (before anything loads)."""


def model_tokens(batch: Rollout) -> dict:
    """``{"response_masks": …}`` when a tool wrote some of the responses' tokens (Part 9), else nothing.

    Only then is the argument passed, so a single-turn task calls every trainer exactly as before
    Part 9 widened their ``step`` (and a learner's older ``step`` still runs it).
    """
    return {} if batch.masks is None else {"response_masks": batch.masks}


# --- PPO (Part 3) -------------------------------------------------------------------------------

def ppo_config(part3: ModuleType, args):
    """Part 3's ``PPOConfig`` from the command's options."""
    return part3.PPOConfig(
        learning_rate=args.learning_rate, mini_batch_size=args.mini_batch_size, ppo_epochs=args.ppo_epochs,
        gamma=args.gamma, lam=args.lam, cliprange=args.cliprange, cliprange_value=args.cliprange_value,
        vf_coef=args.vf_coef, ent_coef=args.ent_coef, init_kl_coef=args.kl_coef,
        adap_kl_ctrl=args.adaptive_kl and args.kl_coef > 0, target=args.kl_target, horizon=args.kl_horizon,
        kl_penalty=args.kl_penalty, temperature=args.temperature, seed=args.seed,
    )


class PPO:
    """Part 3 as it was: the policy with a value head, one sample per prompt."""

    def __init__(self, args, model: GPT, tok: CharTokenizer, task: Task, seed: int):
        part3 = load_part3(args.impl)
        self.args, self.seed, self.task = args, seed, task
        self.policy = part3.GPTWithValueHead(model)
        self.reference = part3.create_reference_model(self.policy)
        trainer = part3.PPOTrainer(ppo_config(part3, args), self.policy, self.reference, tok.pad_id)
        self.trainer = distributed.rlhf_trainer(trainer, part3)  # data-parallel under torchrun, else as is

    def prompts(self, it: int) -> list[Prompt]:
        return self.task.batch(self.args.batch_size, self.seed, it)

    def step(self, batch: Rollout, scores: Tensor, it: int) -> dict[str, float]:
        return self.trainer.step(batch.queries, batch.responses, scores, **model_tokens(batch))

    def summary(self) -> dict:
        return {}


# --- GRPO and RLOO (Part 5) ---------------------------------------------------------------------

class Group:
    """GRPO or RLOO: no critic; batch_size / group_size prompts, each sampled group_size times."""

    def __init__(self, args, model: GPT, tok: CharTokenizer, task: Task, seed: int):
        part3, part5 = load_part3(args.impl), load_part5(args.impl)
        self.args, self.part5, self.seed, self.task = args, part5, seed, task
        self.policy = part5.LanguageModelPolicy(model)
        self.reference = part3.create_reference_model(self.policy)
        self.trainer = distributed.lm_trainer(self.make_trainer(args, tok))

    def make_trainer(self, args, tok: CharTokenizer):
        """Part 5's GroupTrainer (Part 7's critic-free algorithms put theirs here; the rest of the loop is the same)."""
        config = self.part5.GroupConfig(
            algo=args.algo, group_size=args.group_size, learning_rate=args.learning_rate,
            mini_batch_size=args.mini_batch_size, epochs=args.ppo_epochs, cliprange=args.cliprange, beta=args.kl_coef,
            scale=args.grpo_scale, normalisation=args.loss_normalisation, max_len=args.max_new_tokens,
            ent_coef=args.ent_coef, temperature=args.temperature, seed=args.seed)
        return self.part5.GroupTrainer(config, self.policy, self.reference, tok.pad_id)

    def prompts(self, it: int) -> list[Prompt]:
        distinct = self.task.batch(self.args.batch_size // self.args.group_size, self.seed, it)
        _, index = self.part5.repeat_for_groups([p.text for p in distinct], self.args.group_size)
        return [distinct[i] for i in index.tolist()]

    def step(self, batch: Rollout, scores: Tensor, it: int) -> dict[str, float]:
        return self.trainer.step(batch.queries, batch.responses, scores, **model_tokens(batch))

    def summary(self) -> dict:
        return {}


def check_groups(args) -> None:
    """Whole groups of at least two samples (a baseline needs another sample)."""
    from workbook.cli import require_at_least, require_divides

    require_at_least("--group-size", args.group_size, 2)
    require_divides("--group-size", args.group_size, "--batch-size", args.batch_size)


# --- DPO (Part 5) -------------------------------------------------------------------------------

class DPO:
    """DPO on the task's preference pairs (the review task: the reward model's data)."""

    def __init__(self, args, model: GPT, tok: CharTokenizer, task: Task, seed: int):
        part3, part5 = load_part3(args.impl), load_part5(args.impl)
        self.args, self.tok, self.seed, self.task = args, tok, seed, task
        self.policy = part5.LanguageModelPolicy(model)
        self.reference = part3.create_reference_model(self.policy)
        trainer = part5.DPOTrainer(part5.DPOConfig(beta=args.dpo_beta, learning_rate=args.learning_rate),
                                   self.policy, self.reference, tok.pad_id)
        self.trainer = distributed.lm_trainer(trainer)
        self.pairs, self.heldout = task.preference_pairs()
        self.order = torch.Generator().manual_seed(seed)

    def encode(self, pairs: list[tuple[str, str, str]]) -> tuple[list[Tensor], list[Tensor], list[Tensor]]:
        """(queries, chosen, rejected): BOS + prompt; each continuation + EOS, as the policy would write it."""
        def response(text: str) -> Tensor:
            return torch.tensor(self.tok.encode(text, add_bos=False, add_eos=True), dtype=torch.long)
        return (encode_queries([p for p, _, _ in pairs], self.tok), [response(c) for _, c, _ in pairs],
                [response(r) for _, _, r in pairs])

    def prompts(self, it: int) -> list[Prompt]:
        return self.task.batch(self.args.batch_size, self.seed, it)

    def step(self, batch: Rollout, scores: Tensor, it: int) -> dict[str, float]:
        idx = torch.randint(len(self.pairs), (self.args.batch_size,), generator=self.order).tolist()
        stats = self.trainer.step(*self.encode([self.pairs[i] for i in idx]))
        stats.update(monitor_kl(self.policy, self.reference, batch, self.tok.pad_id, self.args.temperature))
        return stats

    @torch.no_grad()
    def heldout_accuracy(self, chunk: int = 100) -> float:
        """Fraction of held-out pairs whose implicit reward ranks chosen above rejected (strictly)."""
        from solutions.part3_rlhf import batched_forward_pass

        correct = 0
        for i in range(0, len(self.heldout), chunk):
            q, c, r = self.encode(self.heldout[i:i + chunk])
            margins = []
            for model in (self.policy, self.reference):
                lp, _, _, _ = batched_forward_pass(model, q + q, c + r, pad_id=self.tok.pad_id)
                seq = lp.sum(dim=1)
                margins.append(seq[:len(q)] - seq[len(q):])
            correct += int(((margins[0] - margins[1]) > 0).sum())
        return correct / len(self.heldout)

    def summary(self) -> dict:
        # Before training every implicit reward is 0 (π = π_ref): all ties, accuracy 0 by the strict count.
        return {"dpo_heldout_accuracy": self.heldout_accuracy()}


@torch.no_grad()
def monitor_kl(policy: nn.Module, reference: nn.Module, batch: Rollout, pad_id: int, temperature: float) -> dict[str, float]:
    """The headline numbers PPO's step reports, for samples DPO did not train on."""
    from solutions.part3_rlhf import batched_forward_pass, entropy_from_logits, masked_mean

    lp, logits, _, masks = batched_forward_pass(policy, batch.queries, batch.responses, temperature=temperature,
                                                pad_id=pad_id, return_logits=True)
    ref_lp, _, _, _ = batched_forward_pass(reference, batch.queries, batch.responses, temperature=temperature, pad_id=pad_id)
    return {"objective/kl": ((lp - ref_lp) * masks).sum(dim=1).mean().item(),
            "objective/entropy": masked_mean(entropy_from_logits(logits), masks).item(),
            "tokens/responses_len_mean": masks.sum(dim=1).mean().item()}


# --- the table ----------------------------------------------------------------------------------

KL = ("objective/kl", "KL to reference (nats / response)")
ENTROPY = ("objective/entropy", "entropy (nats / token)")
LENGTH = ("tokens/responses_len_mean", "response length (tokens)")

# Both critic-free methods average the loss per token: with GRPO's per-response 1/|o| the
# responses grew without bound here. GRPO needs no entropy bonus (its KL sits in the loss, per
# token, and its samples stay varied); RLOO keeps a small one (0.02): without it, its reviews
# collapsed onto "i loved this film." (distinct-2 0.54 -> 0.17 at a KL of 6), with it they stay
# varied (-> 0.32-0.41, seeds 0-2).
ALGORITHMS: dict[str, Algorithm] = {
    "ppo": Algorithm(
        "ppo", "part3_rlhf", PPO,
        panels=(KL, ("objective/kl_coef", "β (KL coefficient)"), ENTROPY, LENGTH),
        x_label="PPO iteration",
        title=lambda a: f"β₀={a.kl_coef:g}" + (f", adaptive to KL {a.kl_target:g}" if a.adaptive_kl and a.kl_coef > 0 else ", fixed"),
        kl_target=lambda a: a.kl_target if a.adaptive_kl and a.kl_coef > 0 else None,
        hide=lambda a: set() if a.adaptive_kl and a.kl_coef > 0 else {"objective/kl_coef"}),
    "grpo": Algorithm(
        "grpo", "part5_beyond_ppo", Group,
        defaults={"iterations": 60, "kl_coef": 0.3, "ent_coef": 0.0, "loss_normalisation": "token"},
        panels=(KL, ("grpo/loss/policy", "policy loss"), ENTROPY, LENGTH, ("grpo/policy/clipfrac", "clipped fraction")),
        x_label="GRPO iteration", check=check_groups,
        title=lambda a: f"G={a.group_size}, β={a.kl_coef:g} (k3 in the loss), scale={a.grpo_scale}, "
                        f"loss per {a.loss_normalisation}"),
    "rloo": Algorithm(
        "rloo", "part5_beyond_ppo", Group,
        defaults={"iterations": 100, "kl_coef": 0.05, "ent_coef": 0.02, "loss_normalisation": "token"},
        panels=(KL, ("rloo/loss/policy", "policy loss"), ENTROPY, LENGTH, ("rloo/policy/clipfrac", "clipped fraction")),
        x_label="RLOO iteration", check=check_groups,
        title=lambda a: f"k={a.group_size}, β={a.kl_coef:g} (in the reward), loss per {a.loss_normalisation}"),
    "dpo": Algorithm(
        "dpo", "part5_beyond_ppo", DPO,
        defaults={"iterations": 60},
        panels=(("dpo/loss", "DPO loss"), ("dpo/rewards/accuracies", "preference accuracy (batch)"),
                ("dpo/rewards/margins", "implicit reward margin"), KL, ENTROPY, LENGTH),
        x_label="DPO step",
        title=lambda a: f"β={a.dpo_beta:g}, lr={a.learning_rate:g}"),
}
ALGOS = tuple(ALGORITHMS)
ALGO_DEFAULTS: dict[str, dict] = {name: dict(a.defaults) for name, a in ALGORITHMS.items()}


def algo_defaults_help() -> str:
    """One line per algorithm whose defaults differ, for ``--help``."""
    lines = [f"--algo {algo} changes the defaults: " + ", ".join(f"--{k.replace('_', '-')} {v}" for k, v in d.items())
             for algo, d in ALGO_DEFAULTS.items() if d]
    return " ".join(line + "." for line in lines) + " An option given on the command line always wins."


def given_options(argv: list[str]) -> set[str]:
    """The fields an argv sets (``--kl-coef 0.1``, ``--iterations=7``, ``--no-adaptive-kl``), with underscores."""
    return {a.split("=", 1)[0].removeprefix("--").removeprefix("no-").replace("-", "_") for a in argv if a.startswith("--")}


def apply_algo_defaults(args, given: set[str]):
    """``args`` with ``args.algo``'s defaults for every field not in ``given`` (the fields the command line sets)."""
    return dataclasses.replace(args, **{k: v for k, v in ALGO_DEFAULTS.get(args.algo, {}).items() if k not in given})


def make_algorithm(args, model: GPT, tok: CharTokenizer, task: Task | None = None, *, data_seed: int | None = None):
    """The algorithm ``args.algo`` names, built on ``model`` (which it takes over as its policy's LM).

    ``task`` supplies the prompts (default: the review task's openers; DPO also takes its
    preference pairs); ``data_seed`` seeds them (under torchrun each rank has its own;
    default ``args.seed``).
    """
    from workbook.runs import ConfigError

    if args.algo not in ALGORITHMS:
        raise ConfigError("--algo", f"must be one of {', '.join(ALGOS)}, got {args.algo!r}")
    if task is None:
        from workbook.loop.task import ReviewTask

        task = ReviewTask()
    return ALGORITHMS[args.algo].build(args, model, tok, task, args.seed if data_seed is None else data_seed)
