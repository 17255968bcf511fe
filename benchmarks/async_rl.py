"""Benchmark: Part 10 — sampling and learning at once, stale batches, and a bfloat16 sampler.

    python benchmarks/async_rl.py --seeds 0 1 2                   # the goal, the sweep, the mismatch (about 2 h on 2 cores)
    python benchmarks/async_rl.py --seeds 0 1 2 --parts sweep mismatch --lags 0 2 8 \
        --kernels default avx2 avx512 --jobs 16                   # the lesson's ranges (docs/async_rl.md)
    python benchmarks/async_rl.py --seeds 0 --parts goal          # only the wall-time goal
    python benchmarks/async_rl.py --seeds 0 --iterations 3 --eval-samples 8 --lags 0 2 --corrections none token_truncate

Three parts, on Part 7's addition task with the default algorithm and its defaults (each run is
``python -m workbook reason``, so the figures are the command's own):

- ``goal``: per seed, the synchronous run with 1 and with 2 torch threads (it gets both cores
  too) and the asynchronous run, one sampler process beside the learner (``--samplers 1``: fixed
  lag 1, one thread each). Wall time until a training batch's pass@1 first reached 0.95, final
  held-out pass@1. Goal (issue 30): async ≤ 0.6 × the faster synchronous run, final pass@1 within
  1 point, 3 of 3 seeds. Run these on a quiet machine, one at a time (they are), native kernels.
- ``sweep``: staleness × correction, in one process (``--lag K`` is bit for bit the run a sampler
  process would make, only slower; tested), per seed and per CPU kernel set (``--kernels``:
  ``ATEN_CPU_CAPABILITY``, another machine's rounding), ``--jobs`` at once (their numbers do not
  depend on timing). Lag 0 in float32 needs no correction (every weight is exactly 1), so it runs
  once; the mask modes run at the largest lag only (below it no weight comes near the cap, so they
  are the truncations). Every run names ``--off-policy-delta 0 --kl-estimator k3`` and its
  ``--correction``, so a later default of the command changes none of them. Figure ``sweep.png``:
  final held-out pass@1 against the lag per correction (median, min–max shaded), and each
  correction's training-batch pass@1 at the largest lag.
- ``mismatch``: the policy in bfloat16 (the sampler) against float32 (the learner), same weights:
  the distribution of per-token |log π_sampler − log π_learner| on a batch of samples and the KL
  between them (``mismatch.png``), per seed and kernel set; and runs at lag 0 with the bfloat16
  sampler, uncorrected and with ``--mismatch-corrections``: does correction matter when only
  precision differs?

The last line is one JSON object: ``{"runs": [{"part", "mode": "sync"|"async", "lag", "correction",
"seed", "kernels", "threads", "sampler_dtype", "samplers", "pass1_after", "wall_to_batch_095_s", "train_wall_s"}, …],
"mismatch": [{"seed", "kernels", "mean_abs_logp_diff", "kl", "p99_abs_logp_diff", "tokens"}, …], "goal": {...},
"kernels": [...], "torch": …}`` (``wall_to_batch_095_s`` null when never reached; the sweep's and the mismatch's
runs are "sync" with a ``lag``: one process, sampling and learning in turn, the numbers of a sampler process but not
its wall time).
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

from benchmarks.base_models import KERNELS  # noqa: E402
from benchmarks.reasoning import seconds_to  # noqa: E402
from workbook.cli import add_impl_option, add_seeds_option, make_parser, require, require_at_least, require_unique_seeds  # noqa: E402
from workbook.runs import ConfigError, check_new_run_dir, command  # noqa: E402

PARTS = ("goal", "sweep", "mismatch")
MODES = ("none", "token_truncate", "token_mask", "sequence_truncate", "sequence_mask")
ROOT = Path(__file__).resolve().parent.parent


def run_reason(name: str, out: Path, options: list[str], common: list[str], overwrite: bool, kernels: str = "native") -> dict:
    """One ``python -m workbook reason`` run under one CPU kernel set: its row's numbers (from summary.json and metrics.jsonl)."""
    argv = [sys.executable, "-m", "workbook", "reason", "--run-name", name, "--runs-dir", str(out), "--wandb", "disabled",
            "--no-progress"] + common + options + (["--overwrite"] if overwrite else [])
    env = dict(os.environ)
    env.pop("ATEN_CPU_CAPABILITY", None)
    if kernels != "native":
        env["ATEN_CPU_CAPABILITY"] = kernels
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, env=env)
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


def _span(values: list[float], fmt: str = ".3f") -> str:
    """``lo–hi`` (one number when they agree), ``—`` for none."""
    if not values:
        return "—"
    lo, hi = min(values), max(values)
    return f"{lo:{fmt}}" if f"{lo:{fmt}}" == f"{hi:{fmt}}" else f"{lo:{fmt}}–{hi:{fmt}}"


def _mismatch_in_subprocess(impl: str, seed: int, kernels: str) -> dict:
    """``measure_mismatch`` under one kernel set (a fresh interpreter: torch reads ATEN_CPU_CAPABILITY once)."""
    env = dict(os.environ)
    env.pop("ATEN_CPU_CAPABILITY", None)
    if kernels != "native":
        env["ATEN_CPU_CAPABILITY"] = kernels
    code = (f"import json, sys; sys.path.insert(0, {str(ROOT)!r}); from benchmarks.async_rl import measure_mismatch; "
            f"print(json.dumps(measure_mismatch({impl!r}, {seed})))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"the mismatch measurement failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1]) | {"seed": seed, "kernels": kernels}


def save_sweep(rows: list[dict], lags: list[int], corrections: list[str], path: Path) -> None:
    """Left: final held-out pass@1 against the lag per correction, the median over seeds × kernel sets with its
    min–max shaded. Right: each correction's training-batch pass@1 at the largest lag, one thin line per run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    top = max(lags)
    lag0 = [r["pass1_after"] for r in rows if r["lag"] == 0]
    runs = len({(r["seed"], r.get("kernels", "native")) for r in rows})
    for i, correction in enumerate(corrections):
        colour = f"C{i}"
        xs, med, lo, hi = [], [], [], []
        for lag in lags:
            got = lag0 if lag == 0 else [r["pass1_after"] for r in rows if r["lag"] == lag and r["correction"] == correction]
            if got:
                xs.append(lag), med.append(float(np.median(got))), lo.append(min(got)), hi.append(max(got))
        left.plot(xs, med, marker="o", color=colour, label=correction)
        left.fill_between(xs, lo, hi, color=colour, alpha=0.15)
        for j, r in enumerate(r for r in rows if r["lag"] == top and r["correction"] == correction):
            acc = [h["env/accuracy"] for h in r["history"]]
            right.plot(range(1, len(acc) + 1), acc, color=colour, lw=0.7, alpha=0.6, label=None if j else correction)
    left.set_xlabel("lag K (batch i sampled by version i − K)")
    left.set_ylabel("held-out pass@1 after training")
    left.set_xticks(lags)
    left.set_title(f"final pass@1 against staleness (median, min–max shaded; {runs} seed × kernel runs)", fontsize=9)
    left.grid(alpha=0.3)
    left.legend(fontsize=8)
    right.set_xlabel("iteration")
    right.set_ylabel("training batch pass@1")
    right.set_title(f"training at lag {top}, per correction (one line per run)", fontsize=9)
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
    add_seeds_option(p, [0, 1, 2], "every part's runs, per seed")
    p.add_argument("--parts", nargs="+", default=list(PARTS), choices=PARTS, metavar="PART", help="default: all three")
    add_impl_option(p, "solutions")
    p.add_argument("--iterations", type=int, default=0, help="iterations of every run (default: the command's own)")
    p.add_argument("--eval-samples", type=int, default=256, help="held-out problems of each evaluation (default 256)")
    p.add_argument("--lags", nargs="+", type=int, default=[0, 1, 2, 4, 8], metavar="K", help="the sweep's lags")
    p.add_argument("--corrections", nargs="+", default=list(MODES), choices=MODES, metavar="MODE",
                   help="the sweep's corrections (default: none and the four modes)")
    p.add_argument("--mismatch-corrections", nargs="+", default=["none", "sequence_truncate"], choices=MODES, metavar="MODE",
                   help="the bfloat16 runs' corrections (default: none and sequence_truncate)")
    p.add_argument("--kernels", nargs="+", default=["native"], choices=KERNELS, metavar="K",
                   help="the sweep's and the mismatch's CPU kernel sets (ATEN_CPU_CAPABILITY; native: unset); "
                        "the goal's timed runs always run native")
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
    stale_only = {"none"}  # explicit, so a later change of the command's defaults leaves these runs as they are

    plan: dict[str, list[tuple[str, dict, list[str]]]] = {part: [] for part in PARTS}
    for seed in ns.seeds:
        for threads in (1, 2):
            plan["goal"].append((f"sync-t{threads}-s{seed}", {"part": "goal", "mode": "sync", "lag": 0, "correction": "none",
                                 "seed": seed, "threads": threads, "sampler_dtype": "float32", "samplers": 0},
                                 ["--seeds", str(seed), "--threads", str(threads)]))
        plan["goal"].append((f"async-s{seed}", {"part": "goal", "mode": "async", "lag": 1, "correction": "none", "seed": seed,
                             "threads": 1, "sampler_dtype": "float32", "samplers": 1}, ["--seeds", str(seed), "--samplers", "1", "--correction", "none"]))
    # The mask modes only where a weight can reach the cap: at the largest lag (at small lags they equal truncation).
    top = max(ns.lags)
    points = [(lag, c) for lag in ns.lags for c in (ns.corrections if lag > 0 else ["none"])
              if lag == top or lag == 0 or not c.endswith("_mask")]
    fixed = ["--off-policy-delta", "0", "--kl-estimator", "k3"]
    for kernels in ns.kernels:
        for seed in ns.seeds:
            for lag, correction in points:
                plan["sweep"].append((f"sweep-lag{lag}-{correction}-s{seed}-{kernels}",
                                      {"part": "sweep", "mode": "sync", "lag": lag, "correction": correction, "seed": seed,
                                       "kernels": kernels, "threads": 1, "sampler_dtype": "float32", "samplers": 0},
                                      ["--seeds", str(seed), "--lag", str(lag), "--correction", correction] + fixed))
            for correction in ns.mismatch_corrections:
                plan["mismatch"].append((f"bf16-lag0-{correction}-s{seed}-{kernels}",
                                         {"part": "mismatch", "mode": "sync", "lag": 0, "correction": correction, "seed": seed,
                                          "kernels": kernels, "threads": 1, "sampler_dtype": "bfloat16", "samplers": 0},
                                         ["--seeds", str(seed), "--lag", "0", "--sampler-dtype", "bfloat16",
                                          "--correction", correction] + fixed))
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
        got = run_reason(name, out, options, common, ns.overwrite, row.get("kernels", "native"))
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
                    "kernels": ns.kernels, "cpus": os.cpu_count(), "torch": torch.__version__,
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
        print(f"\nheld-out pass@1 after training, min–max over seeds {ns.seeds} × kernel sets {ns.kernels}:")
        print("| lag | " + " | ".join(ns.corrections) + " |")
        print("| --- |" + " --- |" * len(ns.corrections))
        for lag in ns.lags:
            cells = [_span([r["pass1_after"] for r in sweep if r["lag"] == lag and (r["correction"] == c or lag == 0)])
                     for c in ns.corrections]
            print(f"| {lag} | " + " | ".join(cells) + " |")
        save_sweep(sweep, ns.lags, ns.corrections, out / "sweep.png")
        print(f"figure: {out / 'sweep.png'}")
    if "mismatch" in ns.parts:
        measured = []
        for kernels in ns.kernels:  # in this process: the kernel set is chosen once, at torch's import
            for seed in ns.seeds:
                measured.append(_mismatch_in_subprocess(ns.impl, seed, kernels))
        result["mismatch"] = [{k: v for k, v in m.items() if k != "diffs"} for m in measured]
        mrows = [r for r in rows if r["part"] == "mismatch"]
        print(f"\nbfloat16 sampler vs float32 learner, same weights, over seeds × kernel sets: mean |Δ log π| "
              f"{_span([m['mean_abs_logp_diff'] for m in measured], '.1e')}, p99 {_span([m['p99_abs_logp_diff'] for m in measured], '.1e')}, "
              f"max {_span([m['max_abs_logp_diff'] for m in measured], '.1e')}, KL {_span([m['kl'] for m in measured], '.1e')} nats/token")
        for c in ns.mismatch_corrections:
            print(f"  lag 0, bfloat16 sampler, correction {c}: pass@1 after "
                  f"{_span([r['pass1_after'] for r in mrows if r['correction'] == c])}")
        save_mismatch(measured[0], [r for r in mrows if r["seed"] == ns.seeds[0] and r["kernels"] == ns.kernels[0]],
                      out / "mismatch.png")
        print(f"figure: {out / 'mismatch.png'}")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
