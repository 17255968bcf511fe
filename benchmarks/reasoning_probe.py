"""Probe: can plain GRPO lift the Part 7 base model's held-out pass@1 within a minute of training?

    python benchmarks/reasoning_probe.py [--task addition|multiplication] [--seeds 0 ...] [--train-seconds 60]
                                         [--iterations N] [--lr 1e-4]

A check that the task leaves RL something to do, before the training command exists: the
base model (pretrained once and cached, ``workbook.reason``) is evaluated on held-out
problems (pass@1 and pass@16 from 16 samples each), trained with plain GRPO for a fixed
wall-clock budget with the reference functions — 16 prompts × 16 samples per iteration,
``answer_reward``, group-mean baseline (Part 5's ``grpo_advantages``, ``scale="none"``),
completions cut off at the limit masked out (``completion_mask``), clipped ratio with
token-level mean (``clip_higher_loss`` with ε_low = ε_high = 0.2: plain PPO clipping), one
on-policy step per batch, no KL, Adam — then evaluated again. Prints one line per
evaluation and, last, one JSON object:
``{"task", "seeds", "train_seconds", "runs": [{"seed", "pass1_before", "pass16_before",
"pass1_after", "pass16_after", "format_valid_after", "iterations", "train_wall_s"}], ...}``
with the medians over the seeds as ``pass1_before`` … ``pass16_after``.

Measured once (seed 0, 120 iterations, on a 2-core machine shared with other jobs — load
average 9 to 13 — so the wall times, 5 to 9 s per iteration, say nothing about a quiet one):

    task            lr     pass@1 before → after   pass@16 before → after
    addition        1e-4   0.48 → 0.73             0.90 → 0.96
    addition        3e-4   0.48 → 0.64             0.90 → 0.80
    multiplication  3e-4   0.31 → 0.33             0.77 → 0.55

Addition was still rising at 120 iterations; the goal (pass@1 ≥ 0.95) needs more iterations
than these, i.e. a quiet machine or more than 60 s. On multiplication, where the base model lacks
competence rather than making slips, RL narrowed the distribution (pass@16 fell) while barely
moving pass@1 — Yue et al. 2025's observation, on a CPU.
"""

from __future__ import annotations

import copy
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from solutions import part3_rlhf as part3  # noqa: E402
from solutions import part5_beyond_ppo as part5  # noqa: E402
from solutions import part7_reasoning as part7  # noqa: E402
from workbook.cli import add_seeds_option, make_parser, require_at_least, require_positive, require_unique_seeds  # noqa: E402
from workbook.lm import pad_batch  # noqa: E402
from workbook.reason import MAX_NEW_TOKENS, TASKS, load_or_pretrain_reasoner, make_problems, sample_pass_at_k  # noqa: E402
from workbook.reason.task import eval_pool_size  # noqa: E402
from workbook.runs import command  # noqa: E402


def evaluate(model, tok, problems, seed: int) -> dict:
    table = sample_pass_at_k(model, tok, problems, part7, n=16, ks=(1, 16), seed=seed)
    return {"pass1": table["pass@k"][1], "pass16": table["pass@k"][16], "format_valid": table["format_valid"],
            "mean_length": table["mean_length"]}


def train(model, tok, task: str, seed: int, seconds: float, *, prompts_per_batch: int, group_size: int,
          lr: float, progress: bool, max_iterations: int | None = None) -> tuple[int, float]:
    """Plain GRPO for ``seconds`` of wall time (or ``max_iterations``, if sooner); returns (iterations, wall seconds)."""
    torch.manual_seed(seed)
    policy = part5.LanguageModelPolicy(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(seed)
    t0, it = time.perf_counter(), 0
    while time.perf_counter() - t0 < seconds and (max_iterations is None or it < max_iterations):
        problems = make_problems(task, "train", prompts_per_batch, seed=seed * 100_000 + it)
        rows, _ = part5.repeat_for_groups([p.prompt for p in problems], group_size)
        answers = [p.answer for p in problems for _ in range(group_size)]
        queries = [torch.tensor(tok.encode(r, add_bos=True)) for r in rows]
        ids, mask = pad_batch(queries, side="left", pad_id=tok.pad_id)
        room = min(MAX_NEW_TOKENS, model.config.block_size - ids.shape[1])
        responses = model.generate(ids, mask, max_new_tokens=room, temperature=1.0, generator=gen,
                                   eos_id=tok.eos_id, pad_id=tok.pad_id)
        texts = [tok.decode(r) for r in responses]
        rewards = part7.answer_reward(texts, answers, 0.1)
        advantages = part5.grpo_advantages(rewards, group_size, "none")
        loss_mask, _ = part7.completion_mask(responses, tok.eos_id, True)
        # One on-policy step: the sampling policy is the current one, so the "old" log-probs are
        # the new ones without gradient (ratio exactly 1) and one forward pass does for both.
        model.eval()
        new, _, _, masks = part3.batched_forward_pass(policy, queries, responses, pad_id=tok.pad_id)
        old = new.detach()
        loss, _ = part7.clip_higher_loss(new, old, advantages, masks * loss_mask[:, : masks.shape[1]], 0.2, 0.2, "token")
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        it += 1
        if progress and it % 20 == 0:
            print(f"  iteration {it}: reward {rewards.mean().item():.3f}  {time.perf_counter() - t0:.1f}s", flush=True)
    model.eval()
    return it, time.perf_counter() - t0


@command
def main(argv: list[str] | None = None) -> int:
    p = make_parser("python benchmarks/reasoning_probe.py", __doc__.split("\n\n")[0])
    p.add_argument("--task", default="addition", choices=TASKS)
    add_seeds_option(p, [0], "one run per seed")
    p.add_argument("--train-seconds", type=float, default=60.0, help="wall-clock training budget per seed")
    p.add_argument("--iterations", type=int, default=None,
                   help="stop after this many iterations if the time budget has not run out (a fixed amount of work "
                        "for a busy machine)")
    p.add_argument("--eval-problems", type=int, default=256, help="held-out problems (16 samples each)")
    p.add_argument("--lr", type=float, default=1e-4, help="Adam learning rate")
    p.add_argument("--no-progress", action="store_true", help="print only the evaluations and the JSON line")
    ns = p.parse_args(argv)
    require_positive("--train-seconds", ns.train_seconds)
    require_positive("--lr", ns.lr)
    if ns.iterations is not None:
        require_at_least("--iterations", ns.iterations, 1)
    require_at_least("--eval-problems", ns.eval_problems, 1)
    require_unique_seeds(ns.seeds)
    torch.set_num_threads(1)

    base, tok = load_or_pretrain_reasoner(ns.task, progress=not ns.no_progress)
    # Multiplication has fewer held-out problems than the default: all of them, then.
    problems = make_problems(ns.task, "eval", min(ns.eval_problems, eval_pool_size(ns.task)), seed=0)
    runs = []
    for seed in ns.seeds:
        model = copy.deepcopy(base)
        before = evaluate(model, tok, problems, seed)
        print(f"seed {seed} before: pass@1 {before['pass1']:.3f}  pass@16 {before['pass16']:.3f}  "
              f"format {before['format_valid']:.3f}", flush=True)
        iterations, wall = train(model, tok, ns.task, seed, ns.train_seconds, prompts_per_batch=16, group_size=16,
                                 lr=ns.lr, progress=not ns.no_progress, max_iterations=ns.iterations)
        after = evaluate(model, tok, problems, seed + 1)
        print(f"seed {seed} after {iterations} iterations ({wall:.1f}s): pass@1 {after['pass1']:.3f}  "
              f"pass@16 {after['pass16']:.3f}  format {after['format_valid']:.3f}", flush=True)
        runs.append({"seed": seed, "pass1_before": before["pass1"], "pass16_before": before["pass16"],
                     "pass1_after": after["pass1"], "pass16_after": after["pass16"],
                     "format_valid_after": after["format_valid"], "iterations": iterations, "train_wall_s": round(wall, 1)})
    result = {"task": ns.task, "seeds": ns.seeds, "train_seconds": ns.train_seconds, "iterations": ns.iterations,
              "eval_problems": len(problems),
              "runs": runs}
    for key in ("pass1_before", "pass16_before", "pass1_after", "pass16_after"):
        result[key] = round(statistics.median(r[key] for r in runs), 4)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
