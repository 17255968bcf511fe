"""Prompts and rewards for RLHF on a Hugging Face model: the classic TRL task and local stand-ins.

- ``--prompts imdb``: IMDB reviews cut to their first 2–8 tokens (TRL's ``gpt2-sentiment``
  example); needs the ``datasets`` package and the hub. ``--prompts FILE``: one prompt a line.
- ``--reward NAME_OR_PATH``: a sequence classifier (e.g. ``lvwerra/distilbert-imdb``); the score
  of a text is the raw logit of its positive label, as in TRL's example.
"""

from __future__ import annotations

import random
from pathlib import Path

import torch
from torch import Tensor

from workbook.hf.model import HFTokenizer, _why_not_loaded, quiet_hub
from workbook.runs import ConfigError


class PromptPool:
    """Prompts drawn from fixed texts: each a prefix of 2–8 tokens of one text (or the whole line of a file)."""

    def __init__(self, train: list[str], heldout: list[str], tok: HFTokenizer | None, min_tokens: int = 2, max_tokens: int = 8):
        if not train or not heldout:
            raise ValueError("a prompt pool needs at least one training and one held-out text")
        self.train_texts, self.heldout_texts, self.tok = train, heldout, tok
        self.min_tokens, self.max_tokens = min_tokens, max_tokens

    def _draw(self, texts: list[str], n: int, seed: int) -> list[str]:
        rng = random.Random(seed)
        out = []
        for _ in range(n):
            text = texts[rng.randrange(len(texts))]
            if self.tok is not None:  # a prefix of the text, TRL's LengthSampler(2, 8)
                ids = self.tok.encode(text, add_bos=False)[: rng.randint(self.min_tokens, self.max_tokens)]
                text = self.tok.decode(ids)
            out.append(text)
        return out

    def batch(self, batch_size: int, seed: int, iteration: int) -> list[str]:
        """The prompts of one PPO iteration, seeded per (seed, iteration)."""
        return self._draw(self.train_texts, batch_size, 1_000_003 * (seed + 1) + iteration)

    def eval(self, n: int, seed: int = 12345) -> list[str]:
        """A fixed set of held-out prompts for the before/after evaluation."""
        return self._draw(self.heldout_texts, n, seed)


def prompt_file(path: str) -> PromptPool:
    """One prompt per non-empty line; the same lines serve for training and evaluation."""
    try:
        lines = [line.strip() for line in Path(path).read_text().splitlines() if line.strip()]
    except OSError as error:
        raise ConfigError("--prompts", f"cannot read {path}: {error.strerror or error}") from None
    if not lines:
        raise ConfigError("--prompts", f"{path} holds no prompts (one per line)")
    return PromptPool(lines, lines, tok=None)


def imdb_prompts(tok: HFTokenizer) -> PromptPool:
    """Reviews longer than 200 characters from IMDB's train (PPO) and test (evaluation) splits."""
    try:
        import datasets
    except ImportError:
        raise ConfigError("--prompts", "--prompts imdb needs the datasets package: pip install datasets") from None
    quiet_hub()
    datasets.disable_progress_bars()
    try:
        splits = [datasets.load_dataset("stanfordnlp/imdb", split=s)["text"] for s in ("train", "test")]
    except (OSError, ValueError, ConnectionError) as error:
        raise ConfigError("--prompts", _why_not_loaded("stanfordnlp/imdb", error, False)) from None
    train, heldout = ([t.replace("<br />", " ") for t in texts if len(t) > 200] for texts in splits)
    return PromptPool(train, heldout, tok)


def load_prompts(spec: str, tok: HFTokenizer) -> PromptPool:
    """``imdb``, or a file of prompts."""
    if spec == "imdb":
        return imdb_prompts(tok)
    if Path(spec).is_file():
        return prompt_file(spec)
    raise ConfigError("--prompts", f"{spec!r} is not 'reviews', 'imdb' or a file of prompts (one per line)")


class ClassifierScorer:
    """texts → the raw logit of the positive label of a sequence classifier (float32, on the CPU)."""

    def __init__(self, name_or_path: str, *, device: str | torch.device = "cpu", batch_size: int = 64):
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

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
