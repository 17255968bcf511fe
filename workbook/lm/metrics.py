"""Text statistics for watching RLHF runs (reward hacking shows up as collapsing diversity)."""

from __future__ import annotations

import re
from typing import Sequence

_WORD = re.compile(r"[a-z0-9']+")


def words(text: str) -> list[str]:
    """Lowercased words of `text`; punctuation separates words and is dropped."""
    return _WORD.findall(text.lower())


def distinct_n(texts: Sequence[str], n: int) -> float:
    """Distinct word n-grams / total word n-grams, pooled over all `texts` (0.0 if there are none).

    n-grams do not cross text boundaries. 1.0 means no n-gram repeats anywhere;
    a policy that says the same thing every time drifts towards 0.
    """
    if isinstance(texts, str):
        raise TypeError("distinct_n takes a list of texts, not a single string")
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    grams = [tuple(w[i : i + n]) for t in texts for w in [words(t)] for i in range(len(w) - n + 1)]
    return len(set(grams)) / len(grams) if grams else 0.0
