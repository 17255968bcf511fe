"""A seeded generator of short, labelled movie reviews.

The pretraining corpus for Part 3 is not shipped: it is written on the fly by a
small grammar (sentence frames x slot vocabularies). Every review is labelled
with the sentiment it was *built* to have, so labels are true by construction;
the polar words are chosen from VADER's lexicon so that the reward we later
optimise agrees with those labels (see tests/test_lm_corpus.py for the rate).

Every sentence starts with an *opener* ("the acting", "i thought the",
"this film was", ...) followed by a *continuation* of a chosen polarity. The
same openers serve as PPO queries (`review_prompts`) and as the shared prompt of
a preference pair (`preference_pairs`), so prompts are always in-distribution.

Text is lowercase ASCII with simple punctuation, to keep the character
vocabulary of `workbook.lm.tokenizer` small. All randomness goes through a
`random.Random(seed)`; the global `random` state is never touched.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Literal

Sentiment = Literal["positive", "negative", "neutral"]
SENTIMENTS: tuple[Sentiment, ...] = ("positive", "negative", "neutral")

# Longest review text we emit; the default model's context is sized for it
# (BOS + text + EOS must fit in `block_size`).
MAX_REVIEW_CHARS = 120

# --------------------------------------------------------------------- vocabulary
# (phrase, plural, film-level). Film-level subjects can take predicates such as
# "shot in black and white" that would be odd for "the acting".
SUBJECTS: tuple[tuple[str, bool, bool], ...] = (
    ("the movie", False, True),
    ("this movie", False, True),
    ("the film", False, True),
    ("this film", False, True),
    ("the acting", False, False),
    ("the plot", False, False),
    ("the story", False, False),
    ("the soundtrack", False, False),
    ("the music", False, False),
    ("the ending", False, False),
    ("the dialogue", False, False),
    ("the script", False, False),
    ("the cast", False, False),
    ("the pacing", False, False),
    ("the direction", False, False),
    ("the lead actor", False, False),
    ("the editing", False, False),
    ("the characters", True, False),
    ("the costumes", True, False),
    ("the effects", True, False),
    ("the performances", True, False),
)
# Aspects usable after "i thought the" / "overall, the" (no film-level ones
# there would be fine too, but "i thought the movie" reads naturally as well).
ASPECTS = tuple(s for s in SUBJECTS if s[0].startswith("the "))

# Every polar word below is in VADER's lexicon with a clear sign.
POS_ADJ = (
    "wonderful", "great", "brilliant", "superb", "excellent", "fantastic",
    "amazing", "beautiful", "charming", "delightful", "lovely", "gorgeous",
    "fun", "funny", "clever", "perfect", "enjoyable", "good", "nice",
    "engaging", "powerful", "impressive", "hilarious", "stunning",
)
NEG_ADJ = (
    "terrible", "awful", "boring", "dull", "bad", "weak", "poor", "horrible",
    "dreadful", "messy", "lazy", "annoying", "painful", "stupid", "ugly",
    "disappointing",
)
# Negated, these flip cleanly ("not bad" is praise, "not good" is not).
NEGATABLE_NEG = ("bad", "boring", "terrible", "awful", "dull", "weak", "annoying")
NEGATABLE_POS = ("good", "great", "funny", "clever", "enjoyable", "engaging", "fun")
# Only words in VADER's booster list: "truly" and "pretty" are themselves
# positive lexicon entries and would muddy negative sentences.
INTENSIFIERS = (
    "really", "very", "so", "extremely", "incredibly", "absolutely", "quite",
    "totally", "utterly", "remarkably",
)
GENRES = ("drama", "western", "musical", "documentary", "mystery", "road movie", "period piece")
PLACES = (
    "a small town", "the city", "a village", "the desert", "paris", "london",
    "the mountains", "a school", "the suburbs", "a farm",
)
PEOPLE = (
    "young woman", "old man", "teacher", "farmer", "family", "detective",
    "nurse", "boy", "girl", "writer",
)
RELATIVES = ("sister", "brother", "dad", "mom", "cousin", "roommate", "neighbor", "wife", "husband")
DAYS = ("sunday", "monday", "friday", "saturday", "sunday afternoon", "long flight", "weeknight")
FILM_NOUNS = ("film", "movie", "story", "ride", "debut", "sequel")

NEUTRAL_PRED_ANY = (
    "about what i expected",
    "what you would expect from a {genre}",
    "typical for a {genre}",
    "similar to the first one",
    "in the style of the seventies",
    "different from the book",
    "different from the trailer",
)
NEUTRAL_PRED_FILM = (
    "about two hours long",
    "shot in black and white",
    "based on a book",
    "released last year",
    "mostly set in {place}",
    "a {genre} set in {place}",
    "longer than i expected",
    "in french with subtitles",
    "made on a small budget",
    "filmed in {place}",
)
# Whole sentences, used anywhere but at the start of a review.
NEUTRAL_SENTENCES = (
    "i watched it on a {day}.",
    "i saw it with my {relative}.",
    "it is a {genre} set in {place}.",
    "the story follows a {person} in {place}.",
    "it runs for about ninety minutes.",
    "it came out last year.",
    "most of it takes place in {place}.",
    "the director also wrote the script.",
    "i went in knowing nothing about it.",
)
POS_SENTENCES = (
    "i would recommend it to anyone.",
    "i would happily watch it again.",
    "it made me smile.",
    "i loved every minute of it.",
    "i laughed out loud.",
    "what a {pos} {noun}!",
    "what a {pos} {noun}.",
    "{int} {pos}.",
)
NEG_SENTENCES = (
    "it was a waste of time.",
    "i would not recommend it.",
    "avoid this one.",
    "i hated every minute of it.",
    "i regretted watching it.",
    "what a {neg} {noun}!",
    "what a {neg} {noun}.",
    "{int} {neg}.",
)
I_NEUTRAL = ("watched it on a {day}.", "saw it with my {relative}.", "went in knowing nothing about it.")
POS_VERBS = ("loved", "enjoyed", "adored", "admired", "really liked", "really enjoyed", "loved")
NEG_VERBS = ("hated", "disliked", "didn't like", "didn't enjoy", "really hated")


@dataclass(frozen=True)
class Review:
    """One generated review and the sentiment it was built to express."""

    text: str
    sentiment: Sentiment


# ----------------------------------------------------------------- small pieces
def _fill(rng: random.Random, template: str) -> str:
    # Draw only the slots the template uses: fast, and still deterministic
    # because the template itself was drawn from the same rng.
    slots = {}
    if "{genre}" in template:
        slots["genre"] = rng.choice(GENRES)
    if "{place}" in template:
        slots["place"] = rng.choice(PLACES)
    if "{person}" in template:
        slots["person"] = rng.choice(PEOPLE)
    if "{relative}" in template:
        slots["relative"] = rng.choice(RELATIVES)
    if "{day}" in template:
        slots["day"] = rng.choice(DAYS)
    if "{pos}" in template:
        slots["pos"] = rng.choice(POS_ADJ)
    if "{neg}" in template:
        slots["neg"] = rng.choice(NEG_ADJ)
    if "{noun}" in template:
        slots["noun"] = rng.choice(FILM_NOUNS)
    if "{int}" in template:
        slots["int"] = rng.choice(INTENSIFIERS)
    return template.format(**slots) if slots else template


def _predicate(rng: random.Random, polarity: Sentiment, film_level: bool) -> str:
    """What follows the copula: "really good", "not bad at all", "shot in ..."."""
    if polarity == "neutral":
        pool = NEUTRAL_PRED_ANY + NEUTRAL_PRED_FILM if film_level else NEUTRAL_PRED_ANY
        return _fill(rng, rng.choice(pool))
    adj, negatable = (POS_ADJ, NEGATABLE_NEG) if polarity == "positive" else (NEG_ADJ, NEGATABLE_POS)
    r = rng.random()
    if r < 0.35:
        return rng.choice(adj)
    if r < 0.65:
        return f"{rng.choice(INTENSIFIERS)} {rng.choice(adj)}"
    if r < 0.87:
        a, b = rng.sample(adj, 2)
        return f"{a} and {b}"
    # Negation of the opposite pole; the label stays true ("not bad" is praise).
    return f"not {rng.choice(negatable)}" + (" at all" if rng.random() < 0.5 else "")


def _copula(rng: random.Random, plural: bool) -> str:
    if plural:
        return rng.choice(("were", "are", "were"))
    return rng.choice(("was", "is", "was"))


# ------------------------------------------------------------ openers (prompts)
# An opener is (prompt text, context); `_continue` completes it with a chosen
# polarity. Contexts: ("subj", subject), ("subj_cop", subject), ("aspect", None)
# and ("i", None).
_SINGULAR_TWO_WORD = tuple(s for s in SUBJECTS if not s[1] and len(s[0].split()) == 2)
_Opener = tuple[str, tuple[str, tuple[str, bool, bool] | None]]


def _open(rng: random.Random) -> _Opener:
    r = rng.random()
    if r < 0.40:
        subj = rng.choice(SUBJECTS)
        return subj[0], ("subj", subj)
    if r < 0.60:
        subj = rng.choice(_SINGULAR_TWO_WORD)  # "this film was"
        return f"{subj[0]} was", ("subj_cop", subj)
    if r < 0.80:
        return rng.choice(("i thought the", "overall, the", "i felt the", "to me, the")), ("aspect", None)
    return "i", ("i", None)


def _continue(rng: random.Random, ctx: tuple, polarity: Sentiment) -> str:
    """The rest of an opener's sentence, with a leading space and final period."""
    kind, subj = ctx
    if kind == "subj":
        return f" {_copula(rng, subj[1])} {_predicate(rng, polarity, subj[2])}."
    if kind == "subj_cop":
        return f" {_predicate(rng, polarity, subj[2])}."
    if kind == "aspect":
        phrase, plural, film = rng.choice(ASPECTS)
        return f" {phrase[4:]} {_copula(rng, plural)} {_predicate(rng, polarity, film)}."
    # kind == "i"
    if polarity == "neutral":
        return " " + _fill(rng, rng.choice(I_NEUTRAL))
    verbs = POS_VERBS if polarity == "positive" else NEG_VERBS
    obj = rng.choice(SUBJECTS)[0] if rng.random() < 0.8 else "it"
    return f" {rng.choice(verbs)} {obj}."


def _sentence(rng: random.Random, polarity: Sentiment, first: bool) -> str:
    """A whole sentence; later sentences may also use the stand-alone frames."""
    if not first and rng.random() < 0.35:
        pool = {"positive": POS_SENTENCES, "negative": NEG_SENTENCES, "neutral": NEUTRAL_SENTENCES}[polarity]
        return _fill(rng, rng.choice(pool))
    prompt, ctx = _open(rng)
    return prompt + _continue(rng, ctx, polarity)


def _review_text(rng: random.Random, sentiment: Sentiment, first: str | None = None) -> str:
    """Sentences of a review; `first`, if given, is the already-written first one."""
    n = rng.choices((1, 2, 3), weights=(0.35, 0.4, 0.25))[0]
    if sentiment == "neutral":
        pols: list[Sentiment] = ["neutral"] * n  # (a given `first` is neutral too)
    else:
        # At least one polar sentence; the others are polar or neutral filler.
        pols = [sentiment if rng.random() < 0.6 else "neutral" for _ in range(n)]
        if first is not None or rng.random() < 0.75:
            pols[0] = sentiment
        if sentiment not in pols:
            pols[rng.randrange(n)] = sentiment
    out = []
    for i, pol in enumerate(pols):
        if i == 0 and first is not None:
            out.append(first)
        else:
            out.append(_sentence(rng, pol, first=(i == 0)))
    return " ".join(out)


def _balanced_labels(rng: random.Random, n: int) -> list[Sentiment]:
    labels = [SENTIMENTS[i % 3] for i in range(n)]
    rng.shuffle(labels)
    return labels


# ------------------------------------------------------------------- public API
def generate_reviews(n: int, seed: int) -> list[Review]:
    """`n` labelled reviews, one to three sentences each, labels balanced to within one.

    Same `(n, seed)` gives the same list; a longer list with the same seed does
    not share a prefix with a shorter one (labels are shuffled over all `n`).
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    rng = random.Random(seed)
    reviews = []
    for label in _balanced_labels(rng, n):
        while True:  # resample the rare review that would not fit the context
            text = _review_text(rng, label)
            if len(text) <= MAX_REVIEW_CHARS:
                break
        reviews.append(Review(text, label))
    return reviews


def review_prompts(n: int, seed: int) -> list[str]:
    """`n` short neutral review openings (1-3 words), e.g. "the plot", "i thought the".

    These are exactly the openers the corpus starts its sentences with, so a
    pretrained model knows how to continue each one, positively or not.
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    rng = random.Random(seed)
    return [_open(rng)[0] for _ in range(n)]


def preference_pairs(n: int, seed: int) -> list[tuple[str, str, str]]:
    """`n` triples (prompt, chosen, rejected) for a Bradley-Terry reward model.

    `prompt + chosen` and `prompt + rejected` are both complete reviews that
    start with the same opener; `chosen` is a positive continuation, `rejected`
    a negative one (two thirds of the time) or a neutral one. Continuations
    begin with a space, e.g. ("the plot", " was clever.", " was dull.").
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    rng = random.Random(seed)
    pairs = []
    while len(pairs) < n:
        prompt, ctx = _open(rng)
        rejected_label: Sentiment = "negative" if rng.random() < 2 / 3 else "neutral"
        chosen = _review_text(rng, "positive", first=prompt + _continue(rng, ctx, "positive"))
        rejected = _review_text(rng, rejected_label, first=prompt + _continue(rng, ctx, rejected_label))
        if max(len(chosen), len(rejected)) <= MAX_REVIEW_CHARS:
            pairs.append((prompt, chosen[len(prompt):], rejected[len(prompt):]))
    return pairs
