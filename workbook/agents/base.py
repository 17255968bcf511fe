"""The base model of Part 9: Part 3's GPT pretrained on calculator traces, and its pass@k with and without the tool.

    from workbook.agents.base import load_or_pretrain_agent, agent_pass_at_k
    model, tok = load_or_pretrain_agent()                 # shipped (workbook/lm/base_models/), else pretrained once
    table = agent_pass_at_k(model, tok, make_problems("eval", 256), part9, part7, n=16)

Pretraining is Part 7's (``workbook.lm.pretrain`` on another corpus): the traces of
``workbook/agents/task.py``, every token in the loss — the results the calculator wrote
included, so the base model has also learnt to *guess* them (badly): that is what it writes
when the tool is taken away.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from types import ModuleType

import torch

from workbook.agents.rollout import run_episodes
from workbook.agents.task import CORPUS_MIX, NAME, corpus_texts
from workbook.lm.model import GPT
from workbook.lm.pretrain import PretrainArgs, cached_model, pretrain, shipped_checkpoint
from workbook.lm.tokenizer import CharTokenizer
from workbook.reason.base import pass_at_k_table, reasoner_tokenizer
from workbook.reason.task import ALPHABET, Problem

AGENT_CACHE_VERSION = 1
MAX_NEW_TOKENS = 112
"""Token budget of an episode (the model's and the tool's tokens): the longest right trace is 95 + EOS."""
MAX_CALLS = 4
"""Turn budget: tool calls per episode (the task needs 2)."""

# Chosen by measurement (held-out, 256 problems x 16 episodes at temperature 1; then DAPO with its defaults,
# 60 iterations, held-out pass@1 after; one torch thread, two jobs on the 2-core machine):
#   mix right/operand/head/copy   steps   base pass@1  pass@16  no tool  after DAPO   what was left
#   0.40/0.20/0.20/0.20            2400       0.25       0.98     0.04      0.944     answers copied wrong 3.7 %
#   0.40/0.20/0.20/0.20            4000       0.28       0.98     0.11      0.960     answers copied wrong 2.6 %
#   0.50/0.10/0.30/0.10            2400       0.27       0.96     0.01      0.957     answers copied wrong 3.0 %
#   0.45/0.20/0.30/0.05            4000       0.24       0.97     0.05      0.949     answers copied wrong 4.2 %
#   0.55/0.20/0.15/0.10 (this)     4000       0.40       1.00     0.16      0.973
# (the first three rows' "head" answers were the product with one digit changed, the others a random
# guess of its size: 0.967 against 0.973 with this mix.) What RL leaves is the answer copied wrong from
# the last result, systematically for some problems (522 → 524): the model's "mental" answer leaking into
# the copy. It shrinks with the share of head traces, not with the share of copy slips.
AGENT_ARGS = PretrainArgs(n_reviews=40_000, n_heldout=1_000, steps=4000, batch_size=16, lr=7e-3, warmup=40,
                          block_size=128, n_layer=3, n_head=4, d_model=96)


def agent_cache_key(args: PretrainArgs) -> str:
    d = {"args": args.cache_key(), "task": NAME, "mix": CORPUS_MIX, "alphabet": ALPHABET, "version": AGENT_CACHE_VERSION}
    return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]


def agent_checkpoint_path(args: PretrainArgs | None = None) -> Path:
    args = AGENT_ARGS if args is None else args
    return Path(args.cache_dir) / f"agent-{NAME}-{agent_cache_key(args)}.pt"


def pretrain_agent(args: PretrainArgs | None = None, *, progress: bool = True) -> tuple[GPT, CharTokenizer, dict]:
    """Train the base model from scratch (no cache); returns (model, tokenizer, stats)."""
    args = AGENT_ARGS if args is None else args
    corpus = (corpus_texts(args.n_reviews, args.seed), corpus_texts(args.n_heldout, args.seed + 1_000_003))
    return pretrain(args, progress=progress, corpus=corpus, tokenizer=reasoner_tokenizer())


def load_or_pretrain_agent(args: PretrainArgs | None = None, *, progress: bool = True) -> tuple[GPT, CharTokenizer]:
    """The base model: from the cache if there, else the shipped one, else pretrained now and cached."""
    args = AGENT_ARGS if args is None else dataclasses.replace(args)

    def train() -> tuple[GPT, CharTokenizer, dict]:
        model, tok, stats = pretrain_agent(args, progress=progress)
        plain = {k: v for k, v in dataclasses.asdict(args).items() if k != "cache_dir"}
        return model, tok, {"task": NAME, "args": plain, "stats": stats}

    return cached_model(agent_checkpoint_path(args), train, "the calculator agent's base model", progress=progress,
                        shipped=shipped_checkpoint(NAME, agent_cache_key(args)))


@torch.no_grad()
def agent_pass_at_k(model: GPT, tok: CharTokenizer, problems: list[Problem], part9: ModuleType, part7: ModuleType, *,
                    n: int = 16, ks: tuple[int, ...] = (1, 16), temperature: float = 1.0, seed: int = 0, tool: bool = True,
                    max_calls: int = MAX_CALLS, max_new_tokens: int = MAX_NEW_TOKENS, chunk: int = 512) -> dict:
    """Sample ``n`` episodes per problem; the pass@k table and the episodes' statistics.

    Returns ``{"pass@k": {k: mean}, "format_valid", "calls" (mean per episode), "invalid_call_rate"
    (errors per call, 0 without calls), "turns" (model turns per episode), "truncated", "length"
    (tokens the model wrote), "correct_per_problem", "n", "rollout"}`` (``rollout``: the episodes).
    """
    if not problems:
        raise ValueError("need at least one problem")
    if any(k > n for k in ks):
        raise ValueError(f"every k must be <= n={n}, got {ks}")
    prompts = [p.prompt for p in problems for _ in range(n)]
    answers = [p.answer for p in problems for _ in range(n)]
    batch = run_episodes(model, tok, prompts, impl=part9, max_new_tokens=max_new_tokens, temperature=temperature,
                         generator=torch.Generator().manual_seed(seed), tool=tool, max_calls=max_calls, chunk=chunk)
    table, valid, counts = pass_at_k_table(batch.completions, answers, part7, n=n, ks=ks)
    return {"pass@k": table, "format_valid": valid, **episode_stats(batch), "correct_per_problem": counts, "n": n,
            "rollout": batch}


def episode_stats(batch) -> dict[str, float]:
    """Means over a batch of episodes: calls, invalid-call rate, model turns, truncated share, model tokens."""
    episodes = len(batch.responses)
    calls = sum(batch.calls)
    return {"calls": calls / episodes, "invalid_call_rate": sum(batch.invalid_calls) / calls if calls else 0.0,
            "turns": sum(sum(who == "model" for who, _ in ep) for ep in batch.episodes) / episodes,
            "truncated": 1 - sum(batch.finished) / episodes,
            "length": sum(int(m.sum()) for m in batch.by_model) / episodes}
