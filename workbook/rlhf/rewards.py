"""The reward the trainer optimises: VADER sentiment, the learned reward model, or a Hugging Face classifier."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Callable

import torch
from torch import Tensor

from workbook.lm.tokenizer import CharTokenizer
from workbook.runs import ConfigError


def make_scorer(kind: str, tok: CharTokenizer, *, impl: str = "solutions", quiet: bool = False,
                device: str = "cpu") -> Callable[[list[str]], Tensor]:
    """``vader``: VADER's compound score in [-1, 1]; ``model``: the learned reward model (``impl``'s RewardModel),
    standardised; anything else: a Hugging Face sentiment classifier (hub name or folder), its positive-label logit."""
    if kind == "vader":
        from workbook.lm.reward import VaderScorer

        return VaderScorer()
    if kind == "model":
        from workbook.rlhf.reward_model import RewardModelArgs, RewardModelScorer, load_or_train_reward_model

        model, rm_tok, stats = load_or_train_reward_model(RewardModelArgs(impl=impl), progress=not quiet)
        if not quiet:
            print(f"reward model: held-out pair accuracy {stats['heldout_accuracy']:.3f}", flush=True)
        return RewardModelScorer(model, rm_tok, stats)
    try:
        import transformers  # noqa: F401
    except ImportError:
        raise ConfigError("--reward", f"{kind!r} would be a Hugging Face classifier, which needs the hf extra: "
                                      "pip install -e '.[hf]'") from None
    from workbook.hf.tasks import ClassifierScorer

    return ClassifierScorer(kind, device=device)


def check_reward(kind: str) -> None:
    """``--reward`` is vader, model, a folder, or an ``owner/name`` hub id (checked before anything loads)."""
    if kind in ("vader", "model") or Path(kind).is_dir() or re.fullmatch(r"[\w.-]+/[\w.-]+", kind):
        return
    raise ConfigError("--reward", f"invalid choice {kind!r} (choose from vader, model, or a Hugging Face sequence "
                                  "classifier: a save_pretrained folder or an owner/name on the hub)")


def missing_eos_scores(scores: Tensor, finished: list[bool], score: float) -> Tensor:
    """The EOS trick: a response cut off at the length limit (no EOS) gets the fixed ``score`` instead.

    A reward model judges whatever text it is shown, so a policy can learn to ramble until the
    limit; a fixed low score for every unfinished response teaches it to end (TRL's
    ``missing_eos_penalty``; the earlier ``non_eos_penalty`` form, which replaces the score).
    """
    done = torch.tensor(finished, dtype=torch.bool, device=scores.device)
    return torch.where(done, scores, torch.full_like(scores, score))
