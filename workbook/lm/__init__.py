"""The language-model substrate of Part 3: a review corpus, a character GPT, pretraining, reward.

    from workbook.lm import load_or_pretrain, review_prompts, sample_texts, VaderScorer
    model, tok = load_or_pretrain()            # ~2 min the first time, then cached
    texts = sample_texts(model, tok, review_prompts(4, seed=0), max_new_tokens=100, temperature=1.0, seed=0)
    VaderScorer()(texts)                       # tensor of sentiment scores in [-1, 1]

Everything runs offline on a CPU; all randomness is seeded.
"""

from workbook.lm.corpus import (
    MAX_REVIEW_CHARS,
    Review,
    generate_reviews,
    preference_pairs,
    review_prompts,
)
from workbook.lm.metrics import distinct_n
from workbook.lm.model import GPT, GPTConfig, KVCache, load_checkpoint, sample_texts, save_checkpoint
from workbook.lm.pretrain import (
    TINY_ARGS,
    PretrainArgs,
    checkpoint_path,
    load_or_pretrain,
    pretrain,
)
from workbook.lm.reward import VaderScorer
from workbook.lm.tokenizer import CharTokenizer, pad_batch

__all__ = [
    "MAX_REVIEW_CHARS",
    "Review",
    "generate_reviews",
    "preference_pairs",
    "review_prompts",
    "CharTokenizer",
    "pad_batch",
    "GPT",
    "GPTConfig",
    "KVCache",
    "sample_texts",
    "save_checkpoint",
    "load_checkpoint",
    "PretrainArgs",
    "TINY_ARGS",
    "pretrain",
    "load_or_pretrain",
    "checkpoint_path",
    "VaderScorer",
    "distinct_n",
]
