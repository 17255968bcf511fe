"""Benchmark: Part 10 — sampling and learning at once, stale batches, and a bfloat16 sampler.

    python benchmarks/async_rl.py --seeds 0 1 2                   # the goal, the sweep, the mismatch (about 45 min)
    python benchmarks/async_rl.py --seeds 0 --parts goal          # only the wall-time goal
    python benchmarks/async_rl.py --seeds 0 --iterations 3 --eval-samples 8 --lags 0 2 --corrections none token_truncate

Three parts, on Part 7's addition task with the default algorithm and its defaults (each run is
``python -m workbook reason``, so the figures are the command's own):

- ``goal``: per seed, the synchronous run with 1 and with 2 torch threads (it gets both cores
  too) and the asynchronous run, one sampler process beside the learner (``--samplers 1``: fixed
  lag 1, one thread each). Wall time until a training batch's pass@1 first reached 0.95, final
  held-out pass@1. Goal (issue 30): async ≤ 0.6 × the faster synchronous run, final pass@1 within
  1 point, 3 of 3 seeds. Run these on a quiet machine, one at a time (they are).
- ``sweep``: staleness × correction, in one process (``--lag K`` is bit for bit the run a sampler
  process would make, only slower; tested), first seed only, ``--jobs`` at once (their numbers do not
  depend on timing). Lag 0 in float32 needs no correction (every weight is exactly 1), so it runs once.
  Figure ``sweep.png``: final held-out pass@1 against the lag per correction, and each correction's
  training-batch pass@1 at the largest lag.
- ``mismatch``: the policy in bfloat16 (the sampler) against float32 (the learner), same weights:
  the distribution of per-token |log π_sampler − log π_learner| on a batch of samples and the KL
  between them (``mismatch.png``); and runs at lag 0 with the bfloat16 sampler, uncorrected and
  with each correction: does correction matter when only precision differs?

The last line is one JSON object: ``{"runs": [{"part", "mode": "sync"|"async", "lag", "correction",
"seed", "threads", "sampler_dtype", "samplers", "pass1_after", "wall_to_batch_095_s", "train_wall_s"}, …],
"mismatch": {"mean_abs_logp_diff", "kl", "p99_abs_logp_diff", "tokens"}, "goal": {...}, "kernels": …}``
(``wall_to_batch_095_s`` null when never reached; the sweep's and the mismatch's runs are "sync" with a
``lag``: one process, sampling and learning in turn, the numbers of a sampler process but not its wall time).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from benchmarks.reasoning import seconds_to  # noqa: E402
from workbook.cli import add_impl_option, add_seeds_option, make_parser, require, require_at_least, require_unique_seeds  # noqa: E402
from workbook.runs import ConfigError, check_new_run_dir, command  # noqa: E402

PARTS = ("goal", "sweep", "mismatch")
MODES = ("none", "token_truncate", "token_mask", "sequence_truncate", "sequence_mask")
ROOT = Path(__file__).resolve().parent.parent


def run_reason(name: str, out: Path, options: list[str], common: list[str], overwrite: bool) -> dict:
    """One ``python -m workbook reason`` run: its row's numbers (from summary.json and metrics.jsonl)."""
    argv = [sys.executable, "-m", "workbook", "reason", "--run-name", name, "--runs-dir", str(out), "--wandb", "disabled",
            "--no-progress"] + common + options + (["--overwrite"] if overwrite else [])
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[2:])} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    summary = json.loads((out / name / "summary.json").read_text())
    metrics = out / name / "metrics.jsonl"
    return {"pass1_after": summary["after"]["pass@1"], "pass1_before": summary["before"]["pass@1"],
            "wall_to_batch_095_s": seconds_to(metrics, 0.95), "train_wall_s": summary["ppo_wall_s"],
            "history": [json.loads(line) for line in metrics.read_text().splitlines()]}


def measure_mismatch(impl: str, seed: int, n: int = 256) -> dict:
    """Per-token |log π_bf16 − log π_fp32| of a batch the bfloat16 copy sampled from the shipped addition model."""
    from workbook.async_rl.sampler import Sampler
    from workbook.loop.reasoning import ReasoningTask
    from workbook.reason.base import load_or_pretrain_reasoner
    from workbook.rlhf.data import load_part3

    model, tok = load_or_pretrain_reasoner("addition", progress=False)
    task = ReasoningTask(impl, "addition", group_size=16)
    sampler = Sampler(model, tok, task, impl=impl, dtype="bfloat16", max_new_tokens=64, temperature=1.0, chunk=256,
                      generator=torch.Generator().manual_seed(seed))
    from workbook.async_rl.sampler import flat_weights

    sampler.load(flat_weights(model), 0)
    prompts = [p for p in task.batch(n // 16, seed, 0) for _ in range(16)]
    got = sampler.sample(prompts, 0)
    part3 = load_part3(impl)
    from workbook.async_rl.sampler import _Scorer

    with torch.no_grad():
        learner, _, _, masks = part3.batched_forward_pass(_Scorer(model.eval()), got.batch.queries, got.batch.responses,
                                                          pad_id=tok.pad_id)
    d = (learner - got.batch.sampler_logprobs)[masks > 0]  # log π_learner/π_sampler on real tokens
    return {"mean_abs_logp_diff": d.abs().mean().item(), "p99_abs_logp_diff": d.abs().quantile(0.99).item(),
            "max_abs_logp_diff": d.abs().max().item(), "kl": (torch.expm1(d) - d).mean().item(), "tokens": int(d.numel()),
            "diffs": d.abs().tolist()}


def save_sweep(rows: list[dict], lags: list[int], corrections: list[str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    lag0 = next((r for r in rows if r["lag"] == 0), None)
    for correction in corrections:
        got = {r["lag"]: r for r in rows if r["correction"] == correction}
        if lag0 is not None:
            got.setdefault(0, lag0)
        xs = [lag for lag in lags if lag in got]
        left.plot(xs, [got[x]["pass1_after"] for x in xs], marker="o", label=correction)
        top = max(xs)
        acc = [h["env/accuracy"] for h in got[top]["history"]]
        right.plot(range(1, len(acc) + 1), acc, label=f"{correction} (lag {top})", lw=1.2)
    left.set_xlabel("lag K (batch i sampled by version i − K)")
    left.set_ylabel("held-out pass@1 after training")
    left.set_xticks(lags)
    left.set_title("final pass@1 against staleness")
    left.grid(alpha=0.3)
    left.legend(fontsize=8)
    right.set_xlabel("iteration")
    right.set_ylabel("training batch pass@1")
    right.set_title(f"training at lag {max(lags)}, per correction")
    right.grid(alpha=0.3)
    right.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def save_mismatch(m: dict, rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    diffs = np.array(m["diffs"])
    nonzero = diffs[diffs > 0]
    bins = np.logspace(-8, max(-1, np.log10(diffs.max() + 1e-12) + 0.1), 60)
    left.hist(nonzero, bins=bins)
    left.set_xscale("log")
    left.set_yscale("log")
    left.set_xlabel("|log π_sampler − log π_learner| per token (bfloat16 sampler, float32 learner, same weights)")
    left.set_ylabel("tokens")
    left.set_title(f"mean {m['mean_abs_logp_diff']:.2e}, p99 {m['p99_abs_logp_diff']:.2e}, KL {m['kl']:.1e} nats/token")
    left.text(0.97, 0.95, f"{len(diffs) - len(nonzero):,} of {len(diffs):,} tokens equal exactly (not drawn)",
              transform=left.transAxes, ha="right", va="top", fontsize=8)
    for row in rows:
        acc = [h["env/accuracy"] for h in row["history"]]
        right.plot(range(1, len(acc) + 1), acc, label=f"{row['correction']}: held-out {row['pass1_after']:.3f}", lw=1.2)
    right.set_xlabel("iteration")
    right.set_ylabel("training batch pass@1")
    right.set_title("lag 0, bfloat16 sampler: with and without correction")
    right.grid(alpha=0.3)
    right.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


@command
def main(argv: list[str] | None = None) -> int:
    p = make_parser("python benchmarks/async_rl.py", __doc__.split("\n\n")[0])
    add_seeds_option(p, [0, 1, 2], "the goal's runs, per seed (the sweep and the mismatch take the first)")
    p.add_argument("--parts", nargs="+", default=list(PARTS), choices=PARTS, metavar="PART", help="default: all three")
    add_impl_option(p, "solutions")
    p.add_argument("--iterations", type=int, default=0, help="iterations of every run (default: the command's own)")
    p.add_argument("--eval-samples", type=int, default=256, help="held-out problems of each evaluation (default 256)")
    p.add_argument("--lags", nargs="+", type=int, default=[0, 1, 2, 4, 8], metavar="K", help="the sweep's lags")
    p.add_argument("--corrections", nargs="+", default=list(MODES), choices=MODES, metavar="MODE",
                   help="the sweep's corrections (default: none and the four modes)")
    p.add_argument("--jobs", type=int, default=2, help="sweep and mismatch runs at once (default 2; the goal's runs: one at a time)")
    p.add_argument("--runs-dir", default="runs/async-bench", help="one run folder per run, sweep.png, mismatch.png")
    p.add_argument("--overwrite", action="store_true", help="replace runs of the same names in --runs-dir")
    p.add_argument("--no-progress", dest="progress", action="store_false", help="only the tables and the JSON")
    ns = p.parse_args(argv)
    require_unique_seeds(ns.seeds)
    require(ns.iterations >= 0, "--iterations", f"must be ≥ 0 (0: the command's own), got {ns.iterations}")
    require_at_least("--eval-samples", ns.eval_samples, 1)
    require_at_least("--jobs", ns.jobs, 1)
    require(all(k >= 0 for k in ns.lags), "--lags", f"every lag must be ≥ 0, got {ns.lags}")
    out = Path(ns.runs_dir)
    common = ["--impl", ns.impl, "--eval-samples", str(ns.eval_samples)] + (["--iterations", str(ns.iterations)] if ns.iterations else [])
    seed0 = ns.seeds[0]

    plan: dict[str, list[tuple[str, dict, list[str]]]] = {part: [] for part in PARTS}
    for seed in ns.seeds:
        for threads in (1, 2):
            plan["goal"].append((f"sync-t{threads}-s{seed}", {"part": "goal", "mode": "sync", "lag": 0, "correction": "none",
                                 "seed": seed, "threads": threads, "sampler_dtype": "float32", "samplers": 0},
                                 ["--seeds", str(seed), "--threads", str(threads)]))
        plan["goal"].append((f"async-s{seed}", {"part": "goal", "mode": "async", "lag": 1, "correction": "none", "seed": seed,
                             "threads": 1, "sampler_dtype": "float32", "samplers": 1}, ["--seeds", str(seed), "--samplers", "1"]))
    for lag in ns.lags:
        for correction in ns.corrections if lag > 0 else ["none"]:
            plan["sweep"].append((f"sweep-lag{lag}-{correction}-s{seed0}", {"part": "sweep", "mode": "sync", "lag": lag,
                                  "correction": correction, "seed": seed0, "threads": 1, "sampler_dtype": "float32",
                                  "samplers": 0},
                                  ["--seeds", str(seed0), "--lag", str(lag), "--correction", correction]))
    for correction in ns.corrections:
        plan["mismatch"].append((f"bf16-lag0-{correction}-s{seed0}", {"part": "mismatch", "mode": "sync", "lag": 0,
                                 "correction": correction, "seed": seed0, "threads": 1, "sampler_dtype": "bfloat16",
                                 "samplers": 0},
                                 ["--seeds", str(seed0), "--sampler-dtype", "bfloat16", "--correction", correction]))
    for part in ns.parts:  # every run folder free before anything runs
        for name, _, _ in plan[part]:
            check_new_run_dir(out, name, ns.overwrite)
    for figure in ("sweep.png", "mismatch.png"):
        if (out / figure).exists() and not ns.overwrite:
            raise ConfigError("--runs-dir", f"{out} already holds {figure}; pick another --runs-dir or pass --overwrite")
    out.mkdir(parents=True, exist_ok=True)
    say = print if ns.progress else (lambda *a, **k: None)
    load_start = os.getloadavg()

    def one(item):
        name, row, options = item
        got = run_reason(name, out, options, common, ns.overwrite)
        row = row | got
        to = row["wall_to_batch_095_s"]
        say(f"{name:<34} pass@1 {row['pass1_before']:.3f} → {row['pass1_after']:.3f}, train {row['train_wall_s']:.1f} s, "
            f"batch 0.95 at {'never' if to is None else f'{to:.1f} s'}", flush=True)
        return row

    rows: list[dict] = []
    if "goal" in ns.parts:
        rows += [one(item) for item in plan["goal"]]  # one at a time: these are timed
    parallel = [item for part in ("sweep", "mismatch") if part in ns.parts for item in plan[part]]
    with ThreadPoolExecutor(max_workers=ns.jobs) as pool:
        rows += list(pool.map(one, parallel))
    load_end = os.getloadavg()

    result: dict = {"runs": [{k: v for k, v in r.items() if k != "history"} for r in rows],
                    "kernels": os.environ.get("ATEN_CPU_CAPABILITY", "native"), "cpus": os.cpu_count(),
                    "loadavg_1min_start_end": [load_start[0], load_end[0]]}
    if "goal" in ns.parts:
        print("\n| seed | sync, 1 thread | sync, 2 threads | async (1 sampler + 1 learner) | async / faster sync | "
              "pass@1 after: sync → async |")
        print("| --- | --- | --- | --- | --- | --- |")
        met = []
        for seed in ns.seeds:
            sync = [r for r in rows if r["part"] == "goal" and r["mode"] == "sync" and r["seed"] == seed]
            fast = min(sync, key=lambda r: float("inf") if r["wall_to_batch_095_s"] is None else r["wall_to_batch_095_s"])
            a = next(r for r in rows if r["part"] == "goal" and r["mode"] == "async" and r["seed"] == seed)
            ratio = (a["wall_to_batch_095_s"] / fast["wall_to_batch_095_s"]
                     if a["wall_to_batch_095_s"] is not None and fast["wall_to_batch_095_s"] else None)
            ok = ratio is not None and ratio <= 0.6 and abs(a["pass1_after"] - fast["pass1_after"]) <= 0.01
            met.append(ok)

            def cell(r):
                to = r["wall_to_batch_095_s"]
                return f"{'never' if to is None else f'{to:.1f} s'} (train {r['train_wall_s']:.0f} s)"
            print(f"| {seed} | {cell(sync[0])} | {cell(sync[1])} | {cell(a)} | "
                  f"{'—' if ratio is None else f'{ratio:.2f}'} | {fast['pass1_after']:.3f} → {a['pass1_after']:.3f} |")
        result["goal"] = {"async_over_faster_sync_max": 0.6, "pass1_within": 0.01, "met_seeds": sum(met), "seeds": len(met)}
        print(f"goal met on {sum(met)} of {len(met)} seeds")
    if "sweep" in ns.parts:
        sweep = [r for r in rows if r["part"] == "sweep"]
        print("\n| lag | " + " | ".join(ns.corrections) + " |")
        print("| --- |" + " --- |" * len(ns.corrections))
        for lag in ns.lags:
            cells = []
            for c in ns.corrections:
                r = next((r for r in sweep if r["lag"] == lag and (r["correction"] == c or lag == 0)), None)
                cells.append("—" if r is None else f"{r['pass1_after']:.3f}")
            print(f"| {lag} | " + " | ".join(cells) + " |")
        save_sweep(sweep, ns.lags, ns.corrections, out / "sweep.png")
        print(f"figure: {out / 'sweep.png'}")
    if "mismatch" in ns.parts:
        m = measure_mismatch(ns.impl, seed0)
        result["mismatch"] = {k: v for k, v in m.items() if k != "diffs"}
        mrows = [r for r in rows if r["part"] == "mismatch"]
        print(f"\nbfloat16 sampler vs float32 learner, same weights: mean |Δ log π| {m['mean_abs_logp_diff']:.2e} "
              f"(p99 {m['p99_abs_logp_diff']:.2e}, max {m['max_abs_logp_diff']:.2e}) over {m['tokens']} tokens, "
              f"KL {m['kl']:.2e} nats/token")
        for r in mrows:
            print(f"  lag 0, bfloat16 sampler, correction {r['correction']}: pass@1 after {r['pass1_after']:.3f}")
        save_mismatch(m, mrows, out / "mismatch.png")
        print(f"figure: {out / 'mismatch.png'}")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
