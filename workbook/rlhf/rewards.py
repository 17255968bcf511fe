"""The reward the trainer optimises: VADER sentiment, or the learned reward model."""

from __future__ import annotations

from typing import Callable

from torch import Tensor

from workbook.lm.tokenizer import CharTokenizer


def make_scorer(kind: str, tok: CharTokenizer, *, impl: str = "solutions", quiet: bool = False) -> Callable[[list[str]], Tensor]:
    """``vader``: VADER's compound score in [-1, 1]; ``model``: the learned reward model (``impl``'s RewardModel), standardised."""
    if kind == "vader":
        from workbook.lm.reward import VaderScorer

        return VaderScorer()
    if kind == "model":
        from workbook.rlhf.reward_model import RewardModelArgs, RewardModelScorer, load_or_train_reward_model

        model, rm_tok, stats = load_or_train_reward_model(RewardModelArgs(impl=impl), progress=not quiet)
        if not quiet:
            print(f"reward model: held-out pair accuracy {stats['heldout_accuracy']:.3f}", flush=True)
        return RewardModelScorer(model, rm_tok, stats)
    raise ValueError(f"--reward must be 'vader' or 'model', got {kind!r}")
