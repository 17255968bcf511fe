"""The base model of Part 7: Part 3's character GPT pretrained on a task's worked solutions.

    from workbook.reason import load_or_pretrain_reasoner, make_problems, sample_pass_at_k
    model, tok = load_or_pretrain_reasoner("addition")        # about a minute once, then cached
    table = sample_pass_at_k(model, tok, make_problems("addition", "eval", 256), impl, n=16, ks=(1, 16))

Pretraining reuses ``workbook.lm.pretrain`` on another corpus and tokenizer; the checkpoint
sits next to the review model's under the same cache directory, keyed by a hash of the
settings and the task.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from types import ModuleType

import torch

from workbook.lm.model import GPT
from workbook.lm.pretrain import PretrainArgs, cached_model, pretrain, shipped_checkpoint
from workbook.lm.tokenizer import CharTokenizer, pad_batch
from workbook.reason.task import ALPHABET, CORPUS_SLIP, Problem, _check_task, corpus_texts

# Bump when the corpus format or the task's generator changes what the same settings produce.
REASON_CACHE_VERSION = 2  # 2: the default models ship (workbook/lm/base_models/)
MAX_NEW_TOKENS = 64
"""Longest completion sampled: the longest worked solution is 45 characters + EOS, so a
model that rambles is cut off (truncated) with room to spare; prompt + completion fit block_size 80."""

# Per task: Part 3's PretrainArgs with ``n_reviews`` read as the number of corpus texts.
# Addition is trained until it knows the procedure, so that its errors are the corpus's slips and
# nothing else; multiplication is stopped early, while its times tables are still half learned.
# Measured on 256 (addition) and 189 (multiplication: all) held-out problems x 16 samples at
# temperature 1, one torch thread (benchmarks/reasoning.py prints the same table):
#   addition, 2400 steps, lr 7e-3, slips 0.55: pass@1 0.56, pass@16 0.99; of its wrong answers
#       all but 0.2 % of samples are forgotten carries (80-97 s of pretraining)
#   multiplication, 700 steps:                 pass@1 0.31, pass@16 0.77, greedy 0.35
# Why 2400 steps: RL removes the slips within a minute but not the model's other mistakes (a
# column summed wrong, the answer copied wrong from the scratchpad). With 1200 steps and slips
# 0.45 those were 10 % of problems (pass@16 0.89) and DAPO stalled at pass@1 0.78; with 2000
# steps they were 5 % of samples, and DAPO reached 0.93-0.94 in 60 s, every slip gone and the
# other mistakes untouched; 2400 steps at lr 5e-3 left 1.5 %, at 7e-3 0.2 %. With 300 steps
# multiplication was hopeless (pass@1 0.04).
REASONER_ARGS = {
    "addition": PretrainArgs(n_reviews=40_000, n_heldout=1_000, steps=2400, batch_size=16, lr=7e-3, warmup=40,
                             block_size=80, n_layer=3, n_head=4, d_model=96),
    "multiplication": PretrainArgs(n_reviews=20_000, n_heldout=1_000, steps=700, batch_size=16, lr=5e-3, warmup=40,
                                   block_size=80, n_layer=3, n_head=4, d_model=96),
}


def reasoner_tokenizer() -> CharTokenizer:
    return CharTokenizer(ALPHABET)


def reasoner_cache_key(task: str, args: PretrainArgs) -> str:
    d = {"args": args.cache_key(), "task": task, "slip": CORPUS_SLIP[task], "alphabet": ALPHABET,
         "version": REASON_CACHE_VERSION}
    return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]


def reasoner_checkpoint_path(task: str, args: PretrainArgs | None = None) -> Path:
    _check_task(task)
    args = REASONER_ARGS[task] if args is None else args
    return Path(args.cache_dir) / f"reasoner-{task}-{reasoner_cache_key(task, args)}.pt"


def pretrain_reasoner(task: str, args: PretrainArgs | None = None, *, progress: bool = True) -> tuple[GPT, CharTokenizer, dict]:
    """Train the base model of ``task`` from scratch (no cache); returns (model, tokenizer, stats)."""
    _check_task(task)
    args = REASONER_ARGS[task] if args is None else args
    corpus = (corpus_texts(task, args.n_reviews, args.seed), corpus_texts(task, args.n_heldout, args.seed + 1_000_003))
    return pretrain(args, progress=progress, corpus=corpus, tokenizer=reasoner_tokenizer())


def load_or_pretrain_reasoner(task: str, args: PretrainArgs | None = None, *, progress: bool = True) -> tuple[GPT, CharTokenizer]:
    """The base model of ``task``: from the cache if there, else pretrained now and cached."""
    _check_task(task)
    args = REASONER_ARGS[task] if args is None else dataclasses.replace(args)

    def train() -> tuple[GPT, CharTokenizer, dict]:
        model, tok, stats = pretrain_reasoner(task, args, progress=progress)
        plain = {k: v for k, v in dataclasses.asdict(args).items() if k != "cache_dir"}
        return model, tok, {"task": task, "args": plain, "stats": stats}

    return cached_model(reasoner_checkpoint_path(task, args), train, f"the {task} model", progress=progress,
                        shipped=shipped_checkpoint(task, reasoner_cache_key(task, args)))


def pass_at_k_table(completions: list[str], answers: list[str], impl: ModuleType, *, n: int,
                    ks: tuple[int, ...]) -> tuple[dict[int, float], float, list[int]]:
    """(pass@k for each k averaged over problems, well-formed share, right answers per problem) of ``n``
    completions per problem, in order, checked with ``impl.answer_reward`` and ``impl.pass_at_k``."""
    correct = impl.answer_reward(completions, answers, format_reward=0.0) == 1.0
    valid = impl.answer_reward(completions, answers, format_reward=0.5) > 0
    counts = [int(c) for c in correct.view(-1, n).sum(dim=1).tolist()]
    table = {k: sum(impl.pass_at_k(n, c, k) for c in counts) / len(counts) for k in ks}
    return table, valid.float().mean().item(), counts


@torch.no_grad()
def sample_completions(
    model: GPT, tok: CharTokenizer, prompts: list[str], *, temperature: float = 1.0, seed: int = 0,
    max_new_tokens: int = MAX_NEW_TOKENS, batch_size: int = 512,
) -> tuple[list[str], list[int], list[bool]]:
    """One completion per prompt: (texts without specials, lengths in tokens incl. EOS, truncated?)."""
    device = next(model.parameters()).device
    gen = torch.Generator(device=device).manual_seed(seed)
    texts, lengths, truncated = [], [], []
    for i in range(0, len(prompts), batch_size):
        chunk = prompts[i:i + batch_size]
        ids, mask = pad_batch([tok.encode(p, add_bos=True) for p in chunk], side="left", pad_id=tok.pad_id)
        room = min(max_new_tokens, model.config.block_size - ids.shape[1])
        responses = model.generate(ids.to(device), mask.to(device), max_new_tokens=room, temperature=temperature,
                                   generator=gen, eos_id=tok.eos_id, pad_id=tok.pad_id)
        for r in responses:
            texts.append(tok.decode(r))
            lengths.append(len(r))
            truncated.append(bool(len(r) == 0 or int(r[-1]) != tok.eos_id))
    return texts, lengths, truncated


def sample_pass_at_k(
    model: GPT, tok: CharTokenizer, problems: list[Problem], impl: ModuleType, *, n: int = 16,
    ks: tuple[int, ...] = (1, 16), temperature: float = 1.0, seed: int = 0, max_new_tokens: int = MAX_NEW_TOKENS,
) -> dict:
    """Sample ``n`` completions per problem and return the pass@k table.

    Correctness and format are ``impl.answer_reward``'s (reward 1 with no format reward is
    right; > 0 with a format reward is well-formed) and pass@k is ``impl.pass_at_k`` averaged
    over problems — the learner's functions or the reference's, as ``impl`` says. Returns
    ``{"pass@k": {k: mean}, "format_valid": f, "mean_length": tokens, "truncated": f,
    "correct_per_problem": [c, ...], "n": n}``.
    """
    if not problems:
        raise ValueError("need at least one problem")
    if any(k > n for k in ks):
        raise ValueError(f"every k must be <= n={n}, got {ks}")
    prompts = [p.prompt for p in problems for _ in range(n)]
    answers = [p.answer for p in problems for _ in range(n)]
    texts, lengths, truncated = sample_completions(model, tok, prompts, temperature=temperature, seed=seed,
                                                   max_new_tokens=max_new_tokens)
    table, valid, counts = pass_at_k_table(texts, answers, impl, n=n, ks=ks)
    return {"pass@k": table, "format_valid": valid,
            "mean_length": sum(lengths) / len(lengths), "truncated": sum(truncated) / len(truncated),
            "correct_per_problem": counts, "n": n}
