"""The review task's reward: VADER sentiment, the learned reward model, or a Hugging Face sentiment classifier.

A classifier (``--reward NAME_OR_PATH``, e.g. ``lvwerra/distilbert-imdb``) scores a text with the raw
logit of its positive label, as in TRL's ``gpt2-sentiment`` example.
"""

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


class ClassifierScorer:
    """texts → the raw logit of the positive label of a sequence classifier (float32, on the CPU)."""

    def __init__(self, name_or_path: str, *, device: str | torch.device = "cpu", batch_size: int = 64):
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        from workbook.hf.model import _why_not_loaded, quiet_hub

        quiet_hub()
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(name_or_path)
            self.model = AutoModelForSequenceClassification.from_pretrained(name_or_path).to(device).eval()
        except (OSError, ValueError) as error:
            raise ConfigError("--reward", _why_not_loaded(name_or_path, error, Path(name_or_path).is_dir())) from None
        self.label = positive_label(self.model.config.id2label)
        if self.tokenizer.pad_token is None:  # GPT-2-style classifiers: padding is masked anyway
            self.tokenizer.pad_token = self.tokenizer.eos_token
            self.model.config.pad_token_id = self.tokenizer.pad_token_id
        self.device, self.batch_size = device, batch_size

    @torch.no_grad()
    def __call__(self, texts: list[str]) -> Tensor:
        out = []
        for i in range(0, len(texts), self.batch_size):
            enc = self.tokenizer(texts[i:i + self.batch_size], padding=True, truncation=True, return_tensors="pt").to(self.device)
            out.append(self.model(**enc).logits[:, self.label].float().cpu())
        return torch.cat(out)


def positive_label(id2label: dict[int, str]) -> int:
    """The index of the label that means "positive" (``POSITIVE``, ``pos``, ``LABEL_1`` of two)."""
    for i, name in id2label.items():
        if str(name).lower().startswith("pos"):
            return int(i)
    if len(id2label) == 2:
        return 1
    raise ConfigError("--reward", f"cannot tell which label is positive among {sorted(id2label.values())}")
