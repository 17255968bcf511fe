"""Benchmark: RLHF with the default settings, from the pretrained review model, on one CPU thread.

    python benchmarks/rlhf.py [--seeds S [S ...]] [--time-budget-s S] [--kl-coef B] [--wandb offline] [--runs-dir DIR]

Targets (issue 14): mean VADER reward rises from about 0 to >= 0.6 within 60 s of PPO wall time
(generation, scoring and updates; 2 cores, one torch thread, quiet machine), mean per-review KL to
the reference <= 6 nats, distinct-2 of the samples >= half the reference model's. Prints a before/after table with sample generations, the load average
(the CPU is shared), and, as its last line, one JSON object with pretrain_wall_s, ppo_wall_s,
reward_before, reward_after, kl_after, distinct2_before, distinct2_after and the checks — with
several seeds, each number is the median over the seeds (each check must hold for every seed)
and ``per_seed`` holds each seed's.
"""

from __future__ import annotations

import copy
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from workbook.lm.model import load_checkpoint  # noqa: E402
from workbook.lm.pretrain import PretrainArgs, checkpoint_path, load_or_pretrain  # noqa: E402
from workbook.cli import add_impl_option, add_seeds_option, make_parser, require_unique_seeds  # noqa: E402
from workbook.loop.rlhf import Args, train  # noqa: E402
from workbook.runs import WANDB_MODES, command  # noqa: E402


@command
def main(argv: list[str] | None = None) -> None:
    p = make_parser("python benchmarks/rlhf.py", __doc__.split("\n\n")[0])
    add_seeds_option(p, [0], "one run per seed")
    p.add_argument("--time-budget-s", type=float, default=Args.time_budget_s)
    p.add_argument("--kl-coef", type=float, default=Args.kl_coef)
    add_impl_option(p, "solutions")
    p.add_argument("--wandb", default="disabled", choices=WANDB_MODES)
    p.add_argument("--runs-dir", default="runs")
    ns = p.parse_args(argv)
    require_unique_seeds(ns.seeds)
    torch.set_num_threads(1)

    # Pretraining: from the cache when there (its recorded training time is reported).
    pretrain_args = PretrainArgs()
    cached = checkpoint_path(pretrain_args).exists()
    t0 = time.perf_counter()
    model, tok = load_or_pretrain(pretrain_args, progress=True)
    pretrain_wall_s = time.perf_counter() - t0
    if cached:
        pretrain_wall_s = float(load_checkpoint(checkpoint_path(pretrain_args))[2].get("stats", {}).get("wall_s", float("nan")))
    print(f"pretrained model: {model.num_params():,} parameters, "
          f"{'cached (trained in' if cached else 'trained now in'} {pretrain_wall_s:.0f}s{')' if cached else ''}", flush=True)

    per_seed = [run_seed(ns, seed, copy.deepcopy(model), tok, pretrain_wall_s, cached) for seed in ns.seeds]
    if len(per_seed) == 1:
        result = dict(per_seed[0])
    else:
        result = {k: (all(r[k] for r in per_seed) if isinstance(v, bool) else median([r[k] for r in per_seed])
                      if isinstance(v, (int, float)) else v) for k, v in per_seed[0].items() if k != "seed"}
    result |= {"seeds": ns.seeds, "per_seed": per_seed}
    print(json.dumps(result), flush=True)


def median(values: list[float]) -> float | int:
    """The median, an int when the values are ints and it is whole (iterations, threads)."""
    m = float(np.median(values))
    return int(m) if m.is_integer() and all(isinstance(v, int) for v in values) else round(m, 4)


def run_seed(ns, seed: int, model, tok, pretrain_wall_s: float, cached: bool) -> dict:
    load_start = os.getloadavg()
    args = Args(impl=ns.impl, seed=seed, time_budget_s=ns.time_budget_s, kl_coef=ns.kl_coef, wandb=ns.wandb,
                runs_dir=ns.runs_dir, run_name=f"benchmark-rlhf-kl{ns.kl_coef:g}-s{seed}", overwrite=True, quiet=False)
    summary = train(args, model=model, tok=tok)
    before, after = summary["before"], summary["after"]
    load_end = os.getloadavg()

    print(f"\n{'seed ' + str(seed):<8}{'reward':>8}{'KL':>8}{'distinct-1':>12}{'distinct-2':>12}{'length':>8}{'ended':>7}")
    for when, s in (("before", before), ("after", after)):
        print(f"{when:<8}{s['reward']:>+8.3f}{s['kl']:>8.2f}{s['distinct1']:>12.3f}{s['distinct2']:>12.3f}"
              f"{s['length']:>8.1f}{s['finished']:>7.2f}")
    for when in ("before", "after"):
        print(f"\nsamples {when} (VADER score, text):")
        for text, score in zip(summary[f"samples_{when}"], summary[f"scores_{when}"]):
            print(f"  {score:+.2f}  {text}")
    print(f"\nload average (1 min) at start {load_start[0]:.2f}, at end {load_end[0]:.2f} on {os.cpu_count()} cores")

    result = {
        "pretrain_wall_s": round(pretrain_wall_s, 1), "pretrain_cached": cached,
        "ppo_wall_s": round(summary["ppo_wall_s"], 1), "iterations": summary["iterations"],
        "reward_before": round(before["reward"], 4), "reward_after": round(after["reward"], 4),
        "kl_after": round(after["kl"], 3), "distinct2_before": round(before["distinct2"], 4),
        "distinct2_after": round(after["distinct2"], 4), "kl_coef": ns.kl_coef, "seed": seed,
        "loadavg_start": round(load_start[0], 2), "loadavg_end": round(load_end[0], 2), "threads": 1,
    }
    result["ok_reward"] = after["reward"] >= 0.6
    result["ok_60s"] = summary["ppo_wall_s"] <= 60.0
    result["ok_kl"] = after["kl"] <= 6.0
    result["ok_diversity"] = after["distinct2"] >= 0.5 * before["distinct2"]
    return result


if __name__ == "__main__":
    sys.exit(main())
