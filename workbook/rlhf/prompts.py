"""The review task's prompts: the corpus' openers, IMDB review openers, or a file.

- ``--prompts reviews`` (default): openers such as "the plot" from the generated corpus
  (``workbook.lm.corpus``), fresh ones every iteration, seeded per (seed, iteration).
- ``--prompts imdb``: IMDB reviews cut to their first 2–8 tokens (TRL's ``gpt2-sentiment``
  example); needs the ``datasets`` package and the hub, and a Hugging Face model (``--model``).
- ``--prompts FILE``: one prompt a line (the same lines for training and evaluation).

Every source has ``batch(size, seed, iteration)`` and ``eval(n)``.
"""

from __future__ import annotations

import random
from pathlib import Path

from workbook.hf.model import HFTokenizer, _why_not_loaded, quiet_hub
from workbook.rlhf.data import REVIEW_PROMPTS
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


def load_prompts(spec: str, tok: HFTokenizer | None):
    """``reviews`` (the corpus' openers), ``imdb``, or a file of prompts; ``tok`` is None for the review GPT."""
    if spec == "reviews":
        return REVIEW_PROMPTS
    if tok is None:
        raise ConfigError("--prompts", f"--prompts {spec} needs --model (the review GPT only knows its own openers)")
    if spec == "imdb":
        return imdb_prompts(tok)
    if Path(spec).is_file():
        return prompt_file(spec)
    raise ConfigError("--prompts", f"{spec!r} is not 'reviews', 'imdb' or a file of prompts (one per line)")
