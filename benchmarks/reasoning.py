"""Benchmark: Part 7's algorithms side by side on both reasoning tasks, and pass@k before and after RL.

    python benchmarks/reasoning.py --seeds 0 1 2                     # the full table (all algorithms, both tasks)
    python benchmarks/reasoning.py --seeds 0 --iterations 2 --eval-samples 8 --curve-n 8   # a quick check that it runs

For each task (addition: the base model's errors are slips; multiplication: its competence is
the limit), each algorithm of ``python -m workbook reason --algo X`` with its defaults and each
seed: train from the same cached base model, evaluate pass@1 and pass@16 on the held-out
problems before and after (16 samples per problem), the well-formed share, the mean length,
the training wall time and samples per second. Then, for the default algorithm, the pass@k
curve (k = 1 … ``--curve-n``, from ``--curve-n`` samples per problem) of the base model and of
the trained models (mean over seeds): ``passk.png``. Does RL raise pass@1 and keep pass@k at
large k, or lower it (Yue et al. 2025, arXiv 2504.13837)?

Goals (issue 18; benchmark, not tests): the default algorithm reaches held-out pass@1 ≥ 0.95
and ≥ base + 0.30 on the addition task in ≤ 60 s of training on 2 CPU cores, with ≥ 99 %
well-formed answers, over 3 seeds. The load average is printed with the figures (a shared CPU
slows every number down).

The last line is one JSON object: ``{"default": ALGO, "seeds": [...], "tasks": {TASK:
{"algorithms": {ALGO: {"pass1_before", "pass1_after", "pass16_before", "pass16_after",
"format_valid_after", "train_wall_s"}}}}, "runs": [{"task", "algo", "seed", the same keys, "s_to_095"}, …],
"kernels": ATEN_CPU_CAPABILITY or "native", "main_task": TASK}`` (medians over the seeds, then every run).
"""

from __future__ import annotations

import copy
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from workbook.cli import add_impl_option, add_seeds_option, make_parser, parse_overrides, require, require_at_least, require_unique_seeds  # noqa: E402
from workbook.loop.reasoning import DEFAULT_ALGO, REASON_ALGOS, ReasonArgs, reason_args, train_reason, validate  # noqa: E402
from workbook.reason import TASKS, load_or_pretrain_reasoner, make_problems, sample_pass_at_k  # noqa: E402
from workbook.reason.task import eval_pool_size  # noqa: E402
from workbook.runs import ConfigError, check_new_run_dir, command  # noqa: E402

MAIN_TASK = "addition"
KEYS = ("pass1_before", "pass1_after", "pass16_before", "pass16_after", "format_valid_after", "train_wall_s")


def pass_curve(model, tok, task: str, impl, n_problems: int, n: int, seed: int) -> list[float]:
    """pass@k for k = 1 … n on ``n_problems`` held-out problems, ``n`` samples each."""
    problems = make_problems(task, "eval", min(n_problems, eval_pool_size(task)), seed=0)
    table = sample_pass_at_k(model, tok, problems, impl, n=n, ks=tuple(range(1, n + 1)), seed=seed)
    return [table["pass@k"][k] for k in range(1, n + 1)]


def seconds_to(metrics: Path, accuracy: float) -> float | None:
    """Training seconds until the batch's pass@1 (``env/accuracy``) first reached ``accuracy``; None if never."""
    for line in metrics.read_text().splitlines():
        row = json.loads(line)
        if row["env/accuracy"] >= accuracy:
            return row["time/ppo_s"]
    return None


def save_passk(curves: dict[str, dict], path: Path, algo: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, axes = plt.subplots(1, len(curves), figsize=(5.2 * len(curves), 4.0), squeeze=False)
    for ax, (task, c) in zip(axes[0], curves.items()):
        k = np.arange(1, len(c["before"]) + 1)
        after = np.array(c["after"])
        ax.plot(k, c["before"], color="black", lw=1.8, label="base model")
        seeds = f"mean of {len(after)} seeds" if len(after) > 1 else "one seed"
        ax.plot(k, after.mean(axis=0), color="tab:orange", lw=1.8, label=f"after {algo.upper()} ({seeds})")
        if len(after) > 1:
            ax.fill_between(k, after.min(axis=0), after.max(axis=0), color="tab:orange", alpha=0.25, lw=0, label="min–max over seeds")
        ax.set_xscale("log", base=2)
        ax.set_xticks([x for x in (1, 2, 4, 8, 16, 32, 64) if x <= len(k)])
        ax.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
        ax.set_xlabel("k (samples per problem)")
        ax.set_ylabel("pass@k on held-out problems")
        ax.set_title(f"{task}", fontsize=10)
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8, loc="lower right")
    fig.suptitle("pass@k before and after RL (unbiased estimator, Chen et al. 2021)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


@command
def main(argv: list[str] | None = None) -> int:
    p = make_parser("python benchmarks/reasoning.py", __doc__.split("\n\n")[0])
    add_seeds_option(p, [0, 1, 2], "one run per seed and algorithm")
    p.add_argument("--algos", nargs="+", default=list(REASON_ALGOS), choices=REASON_ALGOS, metavar="ALGO",
                   help=f"which algorithms (default: all: {' '.join(REASON_ALGOS)})")
    p.add_argument("--tasks", nargs="+", default=list(TASKS), choices=TASKS, metavar="TASK", help="default: both")
    add_impl_option(p, "solutions")
    p.add_argument("--iterations", type=int, default=0, help="iterations of every run (default: each algorithm's own)")
    p.add_argument("--eval-samples", type=int, default=256,
                   help="held-out problems of each evaluation (default 256, or all of a task's if it has fewer)")
    p.add_argument("--curve-n", type=int, default=64, help="samples per problem for the pass@k curve: k = 1 … this (default 64)")
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="set an option of every run (repeatable; after the defaults)")
    p.add_argument("--runs-dir", default="runs/reasoning-bench", help="one run folder per (task, algorithm, seed) and passk.png")
    p.add_argument("--overwrite", action="store_true", help="replace runs of the same names in --runs-dir")
    p.add_argument("--device", default="cpu")
    p.add_argument("--no-progress", dest="progress", action="store_false",
                   help="only the table and the JSON (default: also one line per run)")
    ns = p.parse_args(argv)
    require_unique_seeds(ns.seeds)
    require(ns.iterations >= 0, "--iterations", f"must be ≥ 0 (0: each algorithm's own), got {ns.iterations}")
    require_at_least("--curve-n", ns.curve_n, 1)
    overrides = parse_overrides(ns.set, ReasonArgs)
    if ns.iterations:
        overrides["iterations"] = ns.iterations
    out = Path(ns.runs_dir)

    def run_args(task: str, algo: str, seed: int) -> ReasonArgs:
        return reason_args(algo, **({"impl": ns.impl, "seed": seed, "task": task, "eval_samples": min(ns.eval_samples, eval_pool_size(task)), "eval_k": 16,
                                     "wandb": "disabled", "runs_dir": str(out), "run_name": f"{task}-{algo}-s{seed}",
                                     "overwrite": ns.overwrite, "quiet": True, "device": ns.device} | overrides))

    plan = [(t, a, s) for t in ns.tasks for a in ns.algos for s in ns.seeds]
    for t, a, s in plan:  # every setting checked, every run folder free, before anything runs
        args = run_args(t, a, s)
        validate(args)
        check_new_run_dir(out, args.run_name, ns.overwrite)
    if (out / "passk.png").exists() and not ns.overwrite:
        raise ConfigError("--runs-dir", f"{out} already holds passk.png; pick another --runs-dir or pass --overwrite")

    torch.set_num_threads(1)
    load_start = os.getloadavg()
    say = print if ns.progress else (lambda *a, **k: None)
    from workbook.loop.rlvr import load_part7

    impl = load_part7(ns.impl)
    results: dict[str, dict[str, list[dict]]] = {}
    curves: dict[str, dict] = {}
    runs: list[dict] = []
    for task in ns.tasks:
        base, tok = load_or_pretrain_reasoner(task, progress=ns.progress)
        base = base.to(ns.device)
        curves[task] = {"before": pass_curve(base, tok, task, impl, ns.eval_samples, ns.curve_n, seed=4242), "after": []}
        for algo in ns.algos:
            for seed in ns.seeds:
                args = run_args(task, algo, seed)
                summary = train_reason(args, model=copy.deepcopy(base), tok=tok, progress=False)
                b, a = summary["before"], summary["after"]
                row = {"pass1_before": b["pass@1"], "pass1_after": a["pass@1"], "pass16_before": b["pass@16"],
                       "pass16_after": a["pass@16"], "format_valid_after": a["format_valid"], "train_wall_s": summary["ppo_wall_s"],
                       "length_after": a["length"], "samples_per_s": args.batch_size * summary["iterations"] / summary["ppo_wall_s"],
                       "s_to_095": seconds_to(Path(summary["run_dir"]) / "metrics.jsonl", 0.95)}
                results.setdefault(task, {}).setdefault(algo, []).append(row)
                runs.append({"task": task, "algo": algo, "seed": seed} | {k: row[k] for k in KEYS + ("s_to_095",)})
                say(f"{task:<15} {algo:<8} seed {seed}: pass@1 {row['pass1_before']:.3f} → {row['pass1_after']:.3f}, pass@16 "
                    f"{row['pass16_before']:.3f} → {row['pass16_after']:.3f}, well-formed {row['format_valid_after']:.3f}, "
                    f"{row['train_wall_s']:.1f} s", flush=True)
                if algo == DEFAULT_ALGO:
                    from workbook.lm.model import load_checkpoint

                    trained, _, _ = load_checkpoint(Path(summary["run_dir"]) / "policy.pt")
                    curves[task]["after"].append(pass_curve(trained.to(ns.device), tok, task, impl, ns.eval_samples,
                                                            ns.curve_n, seed=4242))
    load_end = os.getloadavg()

    def med(rows: list[dict], key: str) -> float:
        return float(np.median([r[key] for r in rows]))

    def time_to(rows: list[dict]) -> str:
        """The median seconds to a batch pass@1 of 0.95 over the seeds that got there, and how many did."""
        got = [r["s_to_095"] for r in rows if r["s_to_095"] is not None]
        return f"{np.median(got):.0f} s ({len(got)}/{len(rows)} seeds)" if got else f"never (0/{len(rows)})"

    table: dict[str, dict] = {}
    for task, by_algo in results.items():
        print(f"\n{task} (medians over seeds {', '.join(map(str, ns.seeds))})")
        print("| method | pass@1 before → after | pass@16 before → after | well-formed | length | train wall time | samples/s "
              "| batch pass@1 ≥ 0.95 after |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- |")
        table[task] = {"algorithms": {}}
        for algo, rows in by_algo.items():
            print(f"| {algo} | {med(rows, 'pass1_before'):.3f} → {med(rows, 'pass1_after'):.3f} | {med(rows, 'pass16_before'):.3f} → "
                  f"{med(rows, 'pass16_after'):.3f} | {med(rows, 'format_valid_after'):.3f} | {med(rows, 'length_after'):.1f} | "
                  f"{med(rows, 'train_wall_s'):.1f} s | {med(rows, 'samples_per_s'):.0f} | {time_to(rows)} |")
            table[task]["algorithms"][algo] = {k: round(med(rows, k), 4) for k in KEYS}
    if any(c["after"] for c in curves.values()):
        save_passk({t: c for t, c in curves.items() if c["after"]}, out / "passk.png", DEFAULT_ALGO)
        print(f"\npass@k curves: {out / 'passk.png'}")
        for task, c in curves.items():
            if c["after"]:
                after = np.mean(c["after"], axis=0)
                picks = [k for k in (1, 4, 16, 64) if k <= ns.curve_n]
                print(f"{task}: " + ", ".join(f"pass@{k} {c['before'][k - 1]:.3f} → {after[k - 1]:.3f}" for k in picks))
    main_rows = results.get(MAIN_TASK, {}).get(DEFAULT_ALGO)
    if main_rows:
        ok = [r["pass1_after"] >= 0.95 and r["pass1_after"] >= r["pass1_before"] + 0.30 and r["train_wall_s"] <= 60
              and r["format_valid_after"] >= 0.99 for r in main_rows]
        print(f"goal ({DEFAULT_ALGO} on {MAIN_TASK}: pass@1 ≥ 0.95 and ≥ base + 0.30 in ≤ 60 s, ≥ 99 % well-formed): "
              f"{sum(ok)} of {len(ok)} seeds")
    print(f"load average (1 min) at start {load_start[0]:.2f}, at end {load_end[0]:.2f} on {os.cpu_count()} cores, 1 torch thread")
    print(json.dumps({"default": DEFAULT_ALGO, "seeds": ns.seeds, "tasks": table, "runs": runs,
                      "kernels": os.environ.get("ATEN_CPU_CAPABILITY", "native"),
                      "main_task": MAIN_TASK if MAIN_TASK in table else next(iter(table))}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
