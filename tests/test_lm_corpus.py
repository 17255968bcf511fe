"""The generated review corpus: determinism, balance, shape of the text, and VADER agreement."""

import collections
import re
import time

import pytest

from workbook.lm import (
    MAX_REVIEW_CHARS,
    CharTokenizer,
    Review,
    VaderScorer,
    generate_reviews,
    preference_pairs,
    review_prompts,
)


def test_same_seed_same_reviews_other_seed_other_reviews():
    a, b = generate_reviews(500, seed=3), generate_reviews(500, seed=3)
    assert a == b
    assert all(isinstance(r, Review) for r in a)
    assert generate_reviews(500, seed=4) != a
    assert review_prompts(50, seed=3) == review_prompts(50, seed=3)
    assert preference_pairs(50, seed=3) == preference_pairs(50, seed=3)


def test_generation_does_not_touch_global_random_state():
    import random

    random.seed(0)
    expected = random.random()
    random.seed(0)
    generate_reviews(100, seed=1)
    preference_pairs(10, seed=1)
    assert random.random() == expected


def test_labels_are_balanced():
    counts = collections.Counter(r.sentiment for r in generate_reviews(3001, seed=0))
    assert set(counts) == {"positive", "negative", "neutral"}
    assert max(counts.values()) - min(counts.values()) <= 1


def test_text_is_short_lowercase_and_in_the_tokenizer_alphabet():
    reviews = generate_reviews(3000, seed=1)
    alphabet = set(CharTokenizer().alphabet)
    for r in reviews:
        assert 0 < len(r.text) <= MAX_REVIEW_CHARS
        assert set(r.text) <= alphabet, r.text
        assert r.text == r.text.strip() and "  " not in r.text
        assert r.text[-1] in ".!"
        assert 1 <= len(re.findall(r"[.!](?: |$)", r.text)) <= 3, r.text
    assert len({r.text for r in reviews}) > 0.8 * len(reviews)  # varied, not a handful of templates


def test_a_hundred_thousand_reviews_take_seconds():
    # CPU time, not wall time: a guard against an accidentally quadratic generator that a busy
    # machine cannot trip (the speed itself is measured by benchmarks/pretrain.py).
    start = time.process_time()
    reviews = generate_reviews(100_000, seed=0)
    assert len(reviews) == 100_000
    assert time.process_time() - start < 5.0


def test_vader_agrees_with_the_labels():
    reviews = generate_reviews(1500, seed=2)
    scores = VaderScorer()([r.text for r in reviews])
    by_label = collections.defaultdict(list)
    for r, s in zip(reviews, scores.tolist()):
        by_label[r.sentiment].append(s)
    rate = {
        "positive": sum(s > 0.05 for s in by_label["positive"]) / len(by_label["positive"]),
        "negative": sum(s < -0.05 for s in by_label["negative"]) / len(by_label["negative"]),
        "neutral": sum(abs(s) <= 0.05 for s in by_label["neutral"]) / len(by_label["neutral"]),
    }
    print(f"VADER/label agreement: {rate}")  # about 0.99 / 0.99 / 1.0 at the time of writing
    assert all(v >= 0.85 for v in rate.values()), rate


def test_prompts_are_short_openers_of_real_reviews():
    prompts = review_prompts(300, seed=0)
    assert all(1 <= len(p.split()) <= 3 for p in prompts)
    assert len(set(prompts)) > 15
    # Every prompt opens sentences of the corpus, so the model knows how to go on.
    starts = {r.text[: len(p)] for r in generate_reviews(3000, seed=0) for p in set(prompts)}
    assert set(prompts) <= starts


def test_preference_pairs_share_the_prompt_and_chosen_is_more_positive():
    pairs = preference_pairs(400, seed=5)
    scores = VaderScorer()
    chosen = scores([p + c for p, c, _ in pairs])
    rejected = scores([p + r for p, _, r in pairs])
    for p, c, r in pairs:
        assert 1 <= len(p.split()) <= 3
        assert c.startswith(" ") and r.startswith(" ") and c != r
        assert len(p + c) <= MAX_REVIEW_CHARS and len(p + r) <= MAX_REVIEW_CHARS
    assert (chosen > rejected).float().mean() >= 0.95
    assert (chosen > 0.05).float().mean() >= 0.9


@pytest.mark.parametrize("fn", [generate_reviews, review_prompts, preference_pairs])
def test_negative_count_is_an_error(fn):
    with pytest.raises(ValueError, match="n must be"):
        fn(-1, seed=0)
    assert fn(0, seed=0) == []
