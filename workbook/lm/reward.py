"""The task's reward: VADER sentiment of the generated review.

VADER is a lexicon-and-rules sentiment scorer; the package ships its lexicon,
so nothing is downloaded. Its compound score lies in [-1, 1] and is > 0.05 for
text it reads as positive. In Part 3 it stands in for a human labeller: the
reward model learns to imitate it from preference pairs, and PPO can also be
run against it directly.
"""

from __future__ import annotations

from typing import Sequence

import torch
from jaxtyping import Float
from torch import Tensor


class VaderScorer:
    """Callable: list of texts -> float32 tensor of VADER compound scores in [-1, 1]."""

    def __init__(self):
        from vaderSentiment.vaderSentiment import SentimentIntensityAnalyzer

        self._analyzer = SentimentIntensityAnalyzer()

    @property
    def lexicon(self) -> dict[str, float]:
        """VADER's lexicon: word (or emoticon) -> valence."""
        return self._analyzer.lexicon

    def __call__(self, texts: Sequence[str]) -> Float[Tensor, " n"]:
        if isinstance(texts, str):
            raise TypeError("VaderScorer takes a list of texts, not a single string")
        scores = [self._analyzer.polarity_scores(t)["compound"] if t.strip() else 0.0 for t in texts]
        return torch.tensor(scores, dtype=torch.float32)
