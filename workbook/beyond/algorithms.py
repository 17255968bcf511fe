"""What changes per algorithm in Part 3's RLHF loop: the policy, an iteration's prompts, the update.

The loop in ``workbook/rlhf/train.py`` does, every iteration: ``prompts = algo.prompts(it)``,
sample one review per prompt, score them, ``stats = algo.step(rollout, scores, it)``. PPO and
the critic-free methods train on those samples; DPO trains on preference pairs and samples
only to show what its policy writes now (its reward and KL curves come from those samples).
"""

from __future__ import annotations

import dataclasses
import importlib
from types import ModuleType

import torch
from torch import Tensor, nn

from workbook.lm.corpus import preference_pairs
from workbook.lm.model import GPT
from workbook.lm.tokenizer import CharTokenizer
from workbook.rlhf.data import REVIEW_PROMPTS, Rollout, encode_queries, load_part3

ALGOS = ("ppo", "grpo", "rloo", "dpo")

# Where an algorithm's defaults differ from Part 3's (tuned with benchmarks/beyond_ppo.py).
# The command applies them to every option not given on its command line.
# Both average the loss per token: with GRPO's per-response 1/|o| the responses grew without bound
# here. GRPO needs no entropy bonus (its KL sits in the loss, per token, and its samples stay
# varied); RLOO keeps a small one (0.02): without it, its reviews collapsed onto "i loved this
# film." (distinct-2 0.54 -> 0.17 at a KL of 6), with it they stay varied (-> 0.32-0.41, seeds 0-2).
ALGO_DEFAULTS: dict[str, dict] = {
    "ppo": {},
    "grpo": {"iterations": 60, "kl_coef": 0.3, "ent_coef": 0.0, "loss_normalisation": "token"},
    "rloo": {"iterations": 100, "kl_coef": 0.05, "ent_coef": 0.02, "loss_normalisation": "token"},
    "dpo": {"iterations": 60},
}


def algo_defaults_help() -> str:
    """One line per algorithm whose defaults differ, for ``--help``."""
    lines = [f"--algo {algo} changes the defaults: " + ", ".join(f"--{k.replace('_', '-')} {v}" for k, v in d.items())
             for algo, d in ALGO_DEFAULTS.items() if d]
    return " ".join(line + "." for line in lines) + " An option given on the command line always wins."


def algo_args(algo: str, **overrides):
    """``Args`` for ``algo`` with its defaults, then ``overrides``."""
    from workbook.rlhf.train import Args

    return Args(**({"algo": algo} | ALGO_DEFAULTS[algo] | overrides))


def apply_algo_defaults(args, argv: list[str]):
    """``args`` with ``args.algo``'s defaults for every option that ``argv`` does not set."""
    given = {a.split("=", 1)[0].removeprefix("--no-").removeprefix("--") for a in argv if a.startswith("--")}
    defaults = {k: v for k, v in ALGO_DEFAULTS.get(args.algo, {}).items() if k.replace("_", "-") not in given}
    return dataclasses.replace(args, **defaults)


def load_part5(impl: str) -> ModuleType:
    """``exercises.part5_beyond_ppo`` or ``solutions.part5_beyond_ppo``."""
    if impl not in ("exercises", "solutions"):
        raise ValueError(f"--impl must be 'exercises' or 'solutions', got {impl!r}")
    return importlib.import_module(f"{impl}.part5_beyond_ppo")


def make_algorithm(args, model: GPT, tok: CharTokenizer, *, data_seed: int | None = None, prompts=REVIEW_PROMPTS):
    """The algorithm ``args.algo`` names, built on ``model`` (which it takes over as its policy's LM).

    ``data_seed`` seeds the prompts (under torchrun each rank has its own; default ``args.seed``);
    ``prompts.batch(size, seed, iteration)`` draws them (review openers, or ``workbook.hf``'s).
    """
    from workbook import distributed
    from workbook.runs import ConfigError

    seed = args.seed if data_seed is None else data_seed
    if args.algo == "ppo":
        return PPO(args, model, tok, seed, prompts)
    if distributed.context().enabled:
        raise ConfigError("--algo", f"{args.algo} does not run data-parallel yet; under torchrun use --algo ppo")
    if args.algo in ("grpo", "rloo"):
        return Group(args, model, tok, seed, prompts)
    if args.algo == "dpo":
        return DPO(args, model, tok, seed, prompts)
    raise ConfigError("--algo", f"must be one of {', '.join(ALGOS)}, got {args.algo!r}")


class PPO:
    """Part 3 as it was: the policy with a value head, one sample per prompt."""

    def __init__(self, args, model: GPT, tok: CharTokenizer, seed: int, prompts=REVIEW_PROMPTS):
        from workbook import distributed
        from workbook.rlhf.train import ppo_config

        part3 = load_part3(args.impl)
        self.args, self.seed, self.source = args, seed, prompts
        self.policy = part3.GPTWithValueHead(model)
        self.reference = part3.create_reference_model(self.policy)
        trainer = part3.PPOTrainer(ppo_config(part3, args), self.policy, self.reference, tok.pad_id)
        self.trainer = distributed.rlhf_trainer(trainer, part3)  # data-parallel under torchrun, else as is

    def prompts(self, it: int) -> list[str]:
        return self.source.batch(self.args.batch_size, self.seed, it)

    def step(self, batch: Rollout, scores: Tensor, it: int) -> dict[str, float]:
        return self.trainer.step(batch.queries, batch.responses, scores)

    def summary(self) -> dict:
        return {}


class Group:
    """GRPO or RLOO: no critic; batch_size / group_size prompts, each sampled group_size times."""

    def __init__(self, args, model: GPT, tok: CharTokenizer, seed: int, prompts=REVIEW_PROMPTS):
        part3, part5 = load_part3(args.impl), load_part5(args.impl)
        self.args, self.part5, self.seed, self.source = args, part5, seed, prompts
        self.policy = part5.LanguageModelPolicy(model)
        self.reference = part3.create_reference_model(self.policy)
        config = part5.GroupConfig(
            algo=args.algo, group_size=args.group_size, learning_rate=args.learning_rate,
            mini_batch_size=args.mini_batch_size, epochs=args.ppo_epochs, cliprange=args.cliprange, beta=args.kl_coef,
            scale=args.grpo_scale, normalisation=args.loss_normalisation, max_len=args.max_new_tokens,
            ent_coef=args.ent_coef, temperature=args.temperature, seed=args.seed)
        self.trainer = part5.GroupTrainer(config, self.policy, self.reference, tok.pad_id)

    def prompts(self, it: int) -> list[str]:
        distinct = self.source.batch(self.args.batch_size // self.args.group_size, self.seed, it)
        return self.part5.repeat_for_groups(distinct, self.args.group_size)[0]

    def step(self, batch: Rollout, scores: Tensor, it: int) -> dict[str, float]:
        return self.trainer.step(batch.queries, batch.responses, scores)

    def summary(self) -> dict:
        return {}


class DPO:
    """DPO on the reward model's preference pairs (workbook/rlhf/reward_model.py's data)."""

    def __init__(self, args, model: GPT, tok: CharTokenizer, seed: int, prompts=REVIEW_PROMPTS):
        from workbook.rlhf.reward_model import RewardModelArgs

        part3, part5 = load_part3(args.impl), load_part5(args.impl)
        self.args, self.tok, self.seed, self.source = args, tok, seed, prompts
        self.policy = part5.LanguageModelPolicy(model)
        self.reference = part3.create_reference_model(self.policy)
        self.trainer = part5.DPOTrainer(part5.DPOConfig(beta=args.dpo_beta, learning_rate=args.learning_rate),
                                        self.policy, self.reference, tok.pad_id)
        rm = RewardModelArgs()
        self.pairs = preference_pairs(rm.n_pairs, seed=rm.seed)
        self.heldout = preference_pairs(rm.n_heldout, seed=rm.seed + 999_983)
        self.order = torch.Generator().manual_seed(seed)

    def encode(self, pairs: list[tuple[str, str, str]]) -> tuple[list[Tensor], list[Tensor], list[Tensor]]:
        """(queries, chosen, rejected): BOS + prompt; each continuation + EOS, as the policy would write it."""
        def response(text: str) -> Tensor:
            return torch.tensor(self.tok.encode(text, add_bos=False, add_eos=True), dtype=torch.long)
        return (encode_queries([p for p, _, _ in pairs], self.tok), [response(c) for _, c, _ in pairs],
                [response(r) for _, _, r in pairs])

    def prompts(self, it: int) -> list[str]:
        return self.source.batch(self.args.batch_size, self.seed, it)

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
