"""distinct_n and the VADER reward."""

import pytest
import torch

from workbook.lm import VaderScorer, distinct_n


def test_distinct_n_by_hand():
    texts = ["the cat sat.", "The cat ran!"]
    # words: the cat sat | the cat ran
    assert distinct_n(texts, 1) == pytest.approx(4 / 6)
    assert distinct_n(texts, 2) == pytest.approx(3 / 4)  # (the cat) twice, (cat sat), (cat ran)
    assert distinct_n(texts, 3) == 1.0
    assert distinct_n(texts, 4) == 0.0  # no 4-grams at all
    assert distinct_n(["good. good, good!"], 1) == pytest.approx(1 / 3)
    assert distinct_n(["a b", "b a"], 2) == 1.0  # n-grams never cross texts
    assert distinct_n([], 1) == 0.0 and distinct_n([""], 2) == 0.0


def test_distinct_n_rejects_bad_input():
    with pytest.raises(ValueError):
        distinct_n(["a"], 0)
    with pytest.raises(TypeError):
        distinct_n("a single string", 1)


def test_vader_scorer():
    score = VaderScorer()
    s = score(["the acting was wonderful.", "the plot was terrible.", "it runs for about ninety minutes.", ""])
    assert s.dtype == torch.float32 and s.shape == (4,)
    assert s[0] > 0.05 and s[1] < -0.05 and abs(s[2]) <= 0.05 and s[3] == 0
    assert ((s >= -1) & (s <= 1)).all()
    with pytest.raises(TypeError):
        score("one string")
