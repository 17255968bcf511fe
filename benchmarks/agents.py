"""Benchmark: Part 9's calculator agent — RL with the tool, without it, and with the tool's tokens left in the loss.

    python benchmarks/agents.py --seeds 0 1 2                  # the goals' table, the pass@k figure, the ablation
    python benchmarks/agents.py --seeds 0 --iterations 2 --eval-samples 8 --curve-n 4 --no-ablation   # a quick check

For each seed, from the same base model (``workbook/agents``: shipped, else pretrained once):

- ``tool``: ``python -m workbook reason --task calculator`` with the default algorithm and its
  defaults: held-out pass@1 and pass@16 before and after (16 episodes per problem), tool calls
  per episode, the invalid-call rate, the training wall time and the seconds until the batch's
  pass@1 first reached 0.95;
- ``no tool``: the same run with ``--no-tool`` (nothing answers a call: the model writes its own
  results) — the contrast with Part 7's multiplication is the lesson;
- ``ablation`` (``--no-mask-tool-tokens``): the tool's tokens trained on as if the model had
  written them; measured by what the trained model then writes in the tool's place
  (``result_accuracy``: of the results it writes itself when the tool is taken away, the share
  that are right) and by pass@1 with the tool.

Then the pass@k curves (k = 1 … ``--curve-n``) with and without the tool, before and after
training (mean over seeds): ``passk.png``; and the ablation's figure ``ablation.png``.

Goals (issue 29; a benchmark, not tests; 3 of 3 seeds, one torch thread): with the tool the
default algorithm lifts held-out pass@1 from ≤ 0.5 to ≥ 0.95 in ≤ 90 s of training, with ≤ 1 %
invalid calls after; without the tool the same training leaves it ≤ 0.5.

The last line is one JSON object: ``{"default": ALGO, "seeds": [...], "runs": [{"algo", "seed",
"tool", "mask_tool_tokens", "pass1_before", "pass1_after", "pass16_before", "pass16_after",
"invalid_call_rate_after", "calls_after", "train_wall_s", "s_to_095", "result_accuracy_after"}, …],
"goals": {...}, "kernels": ATEN_CPU_CAPABILITY or "native"}``.
"""

from __future__ import annotations

import copy
import json
import os
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from benchmarks.reasoning import seconds_to  # noqa: E402
from workbook.agents.base import agent_pass_at_k, load_or_pretrain_agent  # noqa: E402
from workbook.agents.task import RESULT_CLOSE, RESULT_OPEN, eval_pool_size, make_problems  # noqa: E402
from workbook.cli import add_impl_option, add_seeds_option, make_parser, parse_overrides, require, require_at_least, require_unique_seeds  # noqa: E402
from workbook.loop.reasoning import DEFAULT_ALGO, REASON_ALGOS, ReasonArgs, reason_args, train_reason, validate  # noqa: E402
from workbook.runs import ConfigError, check_new_run_dir, command  # noqa: E402

KEYS = ("pass1_before", "pass1_after", "pass16_before", "pass16_after", "invalid_call_rate_after", "calls_after",
        "train_wall_s")
VARIANTS = {"tool": {"tool": True}, "no-tool": {"tool": False}, "ablation": {"mask_tool_tokens": False}}
CALL = re.compile(r"<calc>(\d+)\*(\d+)</calc>")


def result_accuracy(completions: list[str]) -> float | None:
    """Of the ``<result>`` values a model wrote itself after a well-formed ``<calc>a*b</calc>``, the share that are right."""
    right = total = 0
    for text in completions:
        for match in CALL.finditer(text):
            rest = text[match.end():]
            if rest.startswith(RESULT_OPEN) and RESULT_CLOSE in rest:
                total += 1
                right += rest[len(RESULT_OPEN):rest.index(RESULT_CLOSE)] == str(int(match[1]) * int(match[2]))
    return right / total if total else None


def save_passk(curves: dict[str, dict], path: Path, algo: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, axes = plt.subplots(1, 2, figsize=(10.4, 4.0), sharey=True)
    for ax, (name, c) in zip(axes, curves.items()):
        k = np.arange(1, len(c["before"]) + 1)
        after = np.array(c["after"])
        ax.plot(k, c["before"], color="black", lw=1.8, label="base model")
        seeds = f"mean of {len(after)} seeds" if len(after) > 1 else "one seed"
        ax.plot(k, after.mean(axis=0), color="tab:orange", lw=1.8, label=f"after {algo.upper()} ({seeds})")
        if len(after) > 1:
            ax.fill_between(k, after.min(axis=0), after.max(axis=0), color="tab:orange", alpha=0.25, lw=0,
                            label="min–max over seeds")
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        ax.set_xlabel("k (episodes per problem)")
        ax.set_title(name)
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right", fontsize=8)
    axes[0].set_ylabel("held-out pass@k")
    fig.suptitle("Part 9: a*b*c with a calculator — RL with the tool, and the same training without it")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def save_ablation(histories: dict[str, list[list[dict]]], bars: dict[str, tuple[float, float]], path: Path) -> None:
    """Left: batch pass@1 against training time, the tool's tokens masked vs trained on; right: results the model writes itself."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10.4, 4.0))
    colours = {"masked (the default)": "tab:blue", "tool's tokens in the loss": "tab:red"}
    for name, runs in histories.items():
        for i, rows in enumerate(runs):
            left.plot([r["iteration"] for r in rows], [r["env/accuracy"] for r in rows], color=colours[name], alpha=0.8,
                      lw=1.4, label=name if i == 0 else None)
    left.set_xlabel("iteration")
    left.set_ylabel("pass@1 of the batch (with the tool)")
    left.set_ylim(0, 1.02)
    left.grid(alpha=0.3)
    left.legend(loc="lower right", fontsize=8)
    names = list(bars)
    before = [bars[n][0] for n in names]
    after = [bars[n][1] for n in names]
    x = np.arange(len(names))
    right.bar(x - 0.2, before, 0.4, color="grey", label="base model")
    right.bar(x + 0.2, after, 0.4, color=[colours[n] for n in names], label="after training")
    right.set_xticks(x, names, fontsize=8)
    right.set_ylim(0, 1.02)
    right.set_ylabel("results the model writes itself that are right")
    right.set_title("the tool taken away: does the model now 'know' the results?", fontsize=9)
    right.legend(fontsize=8)
    fig.suptitle("Ablation: the tool's tokens kept out of the loss, or trained on")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


@command
def main(argv: list[str] | None = None) -> int:
    p = make_parser("python benchmarks/agents.py", __doc__.split("\n\n")[0])
    add_seeds_option(p, [0, 1, 2], "one run per seed and variant")
    p.add_argument("--algo", default=DEFAULT_ALGO, choices=REASON_ALGOS, help=f"the algorithm (default {DEFAULT_ALGO})")
    add_impl_option(p, "solutions")
    p.add_argument("--iterations", type=int, default=0, help="iterations of every run (default: the command's own)")
    p.add_argument("--eval-samples", type=int, default=256, help="held-out problems of each evaluation (default 256)")
    p.add_argument("--curve-n", type=int, default=32, help="episodes per problem for the pass@k curves: k = 1 … this (default 32)")
    p.add_argument("--no-ablation", dest="ablation", action="store_false", help="skip the --no-mask-tool-tokens runs")
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="set an option of every run (repeatable; after the defaults)")
    p.add_argument("--runs-dir", default="runs/agents-bench", help="one run folder per (variant, seed), passk.png, ablation.png")
    p.add_argument("--overwrite", action="store_true", help="replace runs of the same names in --runs-dir")
    p.add_argument("--no-progress", dest="progress", action="store_false",
                   help="only the table and the JSON (default: also one line per run)")
    ns = p.parse_args(argv)
    require_unique_seeds(ns.seeds)
    require(ns.iterations >= 0, "--iterations", f"must be ≥ 0 (0: the command's own), got {ns.iterations}")
    require_at_least("--curve-n", ns.curve_n, 1)
    require_at_least("--eval-samples", ns.eval_samples, 1)
    require(ns.eval_samples <= eval_pool_size(), "--eval-samples",
            f"the calculator task has {eval_pool_size()} held-out problems, got {ns.eval_samples}")
    overrides = parse_overrides(ns.set, ReasonArgs)
    if ns.iterations:
        overrides["iterations"] = ns.iterations
    out = Path(ns.runs_dir)
    variants = [v for v in VARIANTS if v != "ablation" or ns.ablation]

    def run_args(variant: str, seed: int) -> ReasonArgs:
        return reason_args(ns.algo, **({"impl": ns.impl, "seed": seed, "task": "calculator", "eval_samples": ns.eval_samples,
                                        "eval_k": 16, "wandb": "disabled", "runs_dir": str(out),
                                        "run_name": f"{variant}-{ns.algo}-s{seed}", "overwrite": ns.overwrite,
                                        "quiet": True} | VARIANTS[variant] | overrides))

    for variant in variants:  # every setting checked, every run folder free, before anything runs
        for seed in ns.seeds:
            args = run_args(variant, seed)
            validate(args)
            check_new_run_dir(out, args.run_name, ns.overwrite)
    for figure in ("passk.png", "ablation.png"):
        if (out / figure).exists() and not ns.overwrite:
            raise ConfigError("--runs-dir", f"{out} already holds {figure}; pick another --runs-dir or pass --overwrite")

    torch.set_num_threads(1)
    load_start = os.getloadavg()
    say = print if ns.progress else (lambda *a, **k: None)
    from workbook.lm.model import load_checkpoint
    from workbook.loop.rlvr import load_part7
    from workbook.loop.verifiable import load_part9

    part7, part9 = load_part7(ns.impl), load_part9(ns.impl)
    base, tok = load_or_pretrain_agent(progress=ns.progress)
    problems = make_problems("eval", ns.eval_samples)
    ks = tuple(range(1, ns.curve_n + 1))

    def curve(model, tool: bool) -> list[float]:
        table = agent_pass_at_k(model, tok, problems, part9, part7, n=ns.curve_n, ks=ks, seed=4242, tool=tool)
        return [table["pass@k"][k] for k in ks]

    def written_results(model) -> float | None:
        """result_accuracy of the model's episodes with the tool taken away (16 per problem)."""
        table = agent_pass_at_k(model, tok, problems, part9, part7, n=16, ks=(1,), seed=4343, tool=False)
        return result_accuracy(table["rollout"].completions)

    curves = {"with the calculator": {"before": curve(base, True), "after": []},
              "without it (--no-tool)": {"before": curve(base, False), "after": []}}
    base_results = written_results(base)
    runs: list[dict] = []
    histories: dict[str, list[list[dict]]] = {"masked (the default)": [], "tool's tokens in the loss": []}
    for variant in variants:
        for seed in ns.seeds:
            args = run_args(variant, seed)
            summary = train_reason(args, model=copy.deepcopy(base), tok=tok, progress=False)
            b, a = summary["before"], summary["after"]
            metrics = Path(summary["run_dir"]) / "metrics.jsonl"
            trained, _, _ = load_checkpoint(Path(summary["run_dir"]) / "policy.pt")
            row = {"algo": ns.algo, "seed": seed, "variant": variant, "tool": args.tool, "mask_tool_tokens": args.mask_tool_tokens,
                   "pass1_before": b["pass@1"], "pass1_after": a["pass@1"], "pass16_before": b["pass@16"],
                   "pass16_after": a["pass@16"], "invalid_call_rate_after": a["invalid_call_rate"], "calls_after": a["calls"],
                   "train_wall_s": summary["ppo_wall_s"], "s_to_095": seconds_to(metrics, 0.95),
                   "result_accuracy_after": written_results(trained) if variant != "no-tool" else None}
            runs.append(row)
            if variant == "tool":
                curves["with the calculator"]["after"].append(curve(trained, True))
            if variant == "no-tool":
                curves["without it (--no-tool)"]["after"].append(curve(trained, False))
            if variant in ("tool", "ablation"):
                name = "masked (the default)" if variant == "tool" else "tool's tokens in the loss"
                histories[name].append([json.loads(line) for line in metrics.read_text().splitlines()])
            say(f"{variant:<9} seed {seed}: pass@1 {row['pass1_before']:.3f} → {row['pass1_after']:.3f}, pass@16 "
                f"{row['pass16_before']:.3f} → {row['pass16_after']:.3f}, calls {row['calls_after']:.2f}, invalid "
                f"{row['invalid_call_rate_after']:.3f}, {row['train_wall_s']:.1f} s"
                + (f", to 0.95 {row['s_to_095']:.0f} s" if row["s_to_095"] is not None else ""), flush=True)
    load_end = os.getloadavg()

    def med(rows: list[dict], key: str) -> float:
        return float(np.median([r[key] for r in rows]))

    print(f"\n{ns.algo} on the calculator task (medians over seeds {', '.join(map(str, ns.seeds))})")
    print("| variant | pass@1 before → after | pass@16 before → after | calls | invalid calls | train wall time "
          "| batch pass@1 ≥ 0.95 after |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for variant in variants:
        rows = [r for r in runs if r["variant"] == variant]
        got = [r["s_to_095"] for r in rows if r["s_to_095"] is not None]
        to = f"{np.median(got):.0f} s ({len(got)}/{len(rows)} seeds)" if got else f"never (0/{len(rows)})"
        print(f"| {variant} | {med(rows, 'pass1_before'):.3f} → {med(rows, 'pass1_after'):.3f} | "
              f"{med(rows, 'pass16_before'):.3f} → {med(rows, 'pass16_after'):.3f} | {med(rows, 'calls_after'):.2f} | "
              f"{med(rows, 'invalid_call_rate_after'):.3f} | {med(rows, 'train_wall_s'):.1f} s | {to} |")
    curves = {name: c for name, c in curves.items() if c["after"]}
    if curves:
        save_passk(curves, out / "passk.png", ns.algo)
        print(f"\npass@k curves: {out / 'passk.png'}")
        for name, c in curves.items():
            after = np.mean(c["after"], axis=0)
            picks = [k for k in (1, 4, 16, 64) if k <= ns.curve_n]
            print(f"{name}: " + ", ".join(f"pass@{k} {c['before'][k - 1]:.3f} → {after[k - 1]:.3f}" for k in picks))
    if ns.ablation and base_results is not None:
        bars = {}
        for name, variant in (("masked (the default)", "tool"), ("tool's tokens in the loss", "ablation")):
            got = [r["result_accuracy_after"] for r in runs if r["variant"] == variant and r["result_accuracy_after"] is not None]
            bars[name] = (base_results, float(np.mean(got)) if got else 0.0)
        save_ablation(histories, bars, out / "ablation.png")
        print(f"results the model writes itself (tool taken away) that are right: base {base_results:.3f}; "
              + "; ".join(f"{n} {v[1]:.3f}" for n, v in bars.items()) + f"  ({out / 'ablation.png'})")
    tool_rows = [r for r in runs if r["variant"] == "tool"]
    no_tool_rows = [r for r in runs if r["variant"] == "no-tool"]
    goals = {
        "tool": sum(r["pass1_before"] <= 0.5 and r["pass1_after"] >= 0.95 and r["train_wall_s"] <= 90 for r in tool_rows),
        "invalid_calls": sum(r["invalid_call_rate_after"] <= 0.01 for r in tool_rows),
        "no_tool": sum(r["pass1_after"] <= 0.5 for r in no_tool_rows), "seeds": len(ns.seeds)}
    print(f"goals, of {len(ns.seeds)} seeds: with the tool pass@1 ≤ 0.5 → ≥ 0.95 in ≤ 90 s: {goals['tool']}; invalid calls "
          f"≤ 1 %: {goals['invalid_calls']}; without the tool pass@1 ≤ 0.5 after: {goals['no_tool']}")
    print(f"load average (1 min) at start {load_start[0]:.2f}, at end {load_end[0]:.2f} on {os.cpu_count()} cores, 1 torch thread")
    print(json.dumps({"default": ns.algo, "seeds": ns.seeds, "runs": runs, "goals": goals,
                      "base_result_accuracy": base_results, "kernels": os.environ.get("ATEN_CPU_CAPABILITY", "native")}),
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
