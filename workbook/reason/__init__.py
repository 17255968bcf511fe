"""Part 7's support room: verifiable arithmetic tasks, their base models and pass@k sampling."""

from workbook.reason.base import (
    MAX_NEW_TOKENS,
    REASONER_ARGS,
    load_or_pretrain_reasoner,
    pretrain_reasoner,
    reasoner_checkpoint_path,
    reasoner_tokenizer,
    sample_completions,
    sample_pass_at_k,
)
from workbook.reason.task import TASKS, Problem, corpus_texts, is_heldout, make_problems, worked_solution

__all__ = [
    "MAX_NEW_TOKENS", "REASONER_ARGS", "TASKS", "Problem", "corpus_texts", "is_heldout", "load_or_pretrain_reasoner",
    "make_problems", "pretrain_reasoner", "reasoner_checkpoint_path", "reasoner_tokenizer", "sample_completions",
    "sample_pass_at_k", "worked_solution",
]
