"""Benchmark: PPO, GRPO, RLOO and DPO side by side on the review model, and the reward–KL frontier.

    python benchmarks/beyond_ppo.py [--seeds S [S ...]] [--algos ppo grpo rloo dpo] [--runs-dir runs/beyond-ppo] [--reuse]

Same pretrained model (from the cache), same prompts, same reward (VADER), same seed, each
method with its defaults of ``python -m workbook rlhf --algo X`` on one torch thread. Prints a
table (reward before/after, KL to the reference, distinct-2 before/after, wall time, samples per
second), saves ``frontier.png`` (reward against KL along training, all methods on one plot)
and, as its last line, one JSON object with one entry per method (with several ``--seeds``, one
table and ``frontier-s<S>.png`` per seed, and the JSON holds ``{"seeds": [...], "per_seed": {S: ...}}``).

Goals (issue 11, 2-core CPU): GRPO and RLOO reach the PPO default's quality — VADER ≥ 0.6, KL ≤ 6
nats, distinct-2 ≥ half of before — in no more wall time than PPO; DPO's held-out preference
accuracy ≥ 0.9 and its samples' VADER reward rises. The CPU may be shared: the load average is
printed with the figures.
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

from workbook.cli import add_impl_option, add_seeds_option, make_parser, require_unique_seeds  # noqa: E402
from workbook.loop.algorithms import ALGOS  # noqa: E402
from workbook.lm.pretrain import PretrainArgs, load_or_pretrain  # noqa: E402
from workbook.loop.rlhf import algo_args, train  # noqa: E402
from workbook.runs import ConfigError, command  # noqa: E402

COLOURS = {"ppo": "tab:blue", "grpo": "tab:orange", "rloo": "tab:green", "dpo": "tab:red"}


def smooth(x: list[float], k: int = 9) -> np.ndarray:
    """Centred moving average (shorter at the ends), so the curve shows a trend, not batch noise."""
    x = np.asarray(x, dtype=float)
    out = np.empty_like(x)
    for i in range(len(x)):
        lo, hi = max(0, i - k // 2), min(len(x), i + k // 2 + 1)
        out[i] = x[lo:hi].mean()
    return out


def save_frontier(runs: dict[str, dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    for algo, run in runs.items():
        rows = run["history"]
        kl, reward = smooth([r["objective/kl"] for r in rows]), smooth([r["env/reward_mean"] for r in rows])
        ax.plot(kl, reward, color=COLOURS[algo], lw=1.6, label=f"{algo.upper()} (training batches)")
        after = run["summary"]["after"]
        ax.plot([after["kl"]], [after["reward"]], marker="*", ms=13, color=COLOURS[algo], mec="black", mew=0.6, ls="none")
    before = next(iter(runs.values()))["summary"]["before"]
    ax.plot([0.0], [before["reward"]], marker="o", color="black", ls="none", label="pretrained model")
    ax.plot([], [], marker="*", ms=11, color="grey", mec="black", ls="none", label="held-out evaluation after training")
    if max(r["summary"]["after"]["kl"] for r in runs.values()) > 12:  # DPO can drift far: keep 0–6 readable
        ax.set_xscale("symlog", linthresh=2.0)
    ax.axhline(0.6, color="grey", lw=0.8, ls=":")
    ax.axvline(6.0, color="grey", lw=0.8, ls=":")
    ax.set_xlabel("KL to the reference (nats per review, k1 on the samples)")
    ax.set_ylabel("mean VADER reward of the samples")
    ax.set_title("Reward–KL frontier on the review model (same model, prompts, reward, seed)", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


@command
def main(argv: list[str] | None = None) -> None:
    p = make_parser("python benchmarks/beyond_ppo.py", __doc__.split("\n\n")[0])
    add_seeds_option(p, [0], "one comparison per seed")
    p.add_argument("--algos", nargs="+", default=list(ALGOS), choices=ALGOS)
    add_impl_option(p, "solutions")
    p.add_argument("--runs-dir", default="runs/beyond-ppo", help="one run folder per method and seed below it, and frontier.png")
    p.add_argument("--reuse", action="store_true",
                   help="read the finished runs already in --runs-dir instead of training them again (e.g. after "
                        "running each method on its own with --algos X)")
    ns = p.parse_args(argv)
    require_unique_seeds(ns.seeds)
    out = Path(ns.runs_dir)
    existing = [f"{a}-s{seed}" for seed in ns.seeds for a in ns.algos if (out / f"{a}-s{seed}").exists()]
    if existing and not ns.reuse:
        raise ConfigError("--runs-dir", f"{out} already holds the runs {', '.join(existing)}; pick another "
                                        "--runs-dir, or pass --reuse to report them")
    torch.set_num_threads(1)
    pretrained, tok = load_or_pretrain(PretrainArgs(), progress=True)
    per_seed = {seed: compare(ns, seed, pretrained, tok, out, "frontier.png" if len(ns.seeds) == 1 else f"frontier-s{seed}.png")
                for seed in ns.seeds}
    result = per_seed[ns.seeds[0]] if len(ns.seeds) == 1 else {"seeds": ns.seeds, "per_seed": per_seed}
    print(json.dumps(result), flush=True)


def compare(ns, seed: int, pretrained, tok, out: Path, frontier: str) -> dict:
    """Every method of ``ns.algos`` on ``seed``: the table, the frontier figure; returns the JSON entry of each."""
    load_start = os.getloadavg()
    runs = {}
    for algo in ns.algos:
        print(f"\n== {algo} ==", flush=True)
        args = algo_args(algo, impl=ns.impl, seed=seed, wandb="disabled", runs_dir=str(out), run_name=f"{algo}-s{seed}",
                         quiet=True)
        done = out / args.run_name / "summary.json"
        if ns.reuse and done.exists():
            summary = json.loads(done.read_text())
            print(f"reusing {done}", flush=True)
        else:
            summary = train(args, model=copy.deepcopy(pretrained), tok=tok)
        rows = [json.loads(line) for line in (Path(summary["run_dir"]) / "metrics.jsonl").read_text().splitlines()]
        samples = args.batch_size * summary["iterations"] * (2 if algo == "dpo" else 1)
        runs[algo] = {"summary": summary, "history": rows, "samples_per_s": samples / summary["ppo_wall_s"]}
        b, a = summary["before"], summary["after"]
        print(f"{algo}: reward {b['reward']:+.3f} → {a['reward']:+.3f}, KL {a['kl']:.2f}, distinct-2 {b['distinct2']:.3f} → "
              f"{a['distinct2']:.3f}, {summary['ppo_wall_s']:.0f} s", flush=True)
    load_end = os.getloadavg()
    save_frontier(runs, out / frontier)

    print(f"\n| method | VADER reward before → after | KL to reference | distinct-2 before → after | wall time | samples/s | iterations |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    result = {}
    ppo_wall = runs["ppo"]["summary"]["ppo_wall_s"] if "ppo" in runs else float("inf")
    for algo, run in runs.items():
        s, b, a = run["summary"], run["summary"]["before"], run["summary"]["after"]
        print(f"| {algo.upper()} | {b['reward']:+.3f} → {a['reward']:+.3f} | {a['kl']:.2f} | {b['distinct2']:.3f} → "
              f"{a['distinct2']:.3f} | {s['ppo_wall_s']:.0f} s | {run['samples_per_s']:.0f} | {s['iterations']} |")
        entry = {"reward_before": round(b["reward"], 4), "reward_after": round(a["reward"], 4), "kl_after": round(a["kl"], 3),
                 "distinct2_before": round(b["distinct2"], 4), "distinct2_after": round(a["distinct2"], 4),
                 "length_after": round(a["length"], 1), "wall_s": round(s["ppo_wall_s"], 1),
                 "samples_per_s": round(run["samples_per_s"], 1), "iterations": s["iterations"]}
        quality = a["reward"] >= 0.6 and a["kl"] <= 6.0 and a["distinct2"] >= 0.5 * b["distinct2"]
        if algo in ("grpo", "rloo"):
            entry["ok_quality"] = quality
            entry["ok_time_vs_ppo"] = s["ppo_wall_s"] <= ppo_wall
        elif algo == "ppo":
            entry["ok_quality"] = quality
        else:
            entry["heldout_preference_accuracy"] = round(s["dpo_heldout_accuracy"], 4)
            entry["ok_accuracy"] = s["dpo_heldout_accuracy"] >= 0.9
            entry["ok_reward_rises"] = a["reward"] > b["reward"]
        result[algo] = entry
    if "dpo" in runs:
        print("DPO samples/s counts sequences trained on (chosen + rejected); its wall time includes sampling a batch "
              "per iteration to draw the curves.")
    print(f"\nfrontier: {out / frontier}")
    print(f"load average (1 min) at start {load_start[0]:.2f}, at end {load_end[0]:.2f} on {os.cpu_count()} cores, 1 torch thread")
    result["loadavg"] = [round(load_start[0], 2), round(load_end[0], 2)]
    return result


if __name__ == "__main__":
    sys.exit(main())
