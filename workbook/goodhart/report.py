"""What a goodhart run says when it is done: the benchmark's rows (``results.json``), the table of fits, and
``python -m workbook evaluate RUN_DIR`` for a goodhart run (its table again, from its files).

``run.py`` measures; this reads what it measured. Nothing here trains or samples.
"""

from __future__ import annotations

import json
from pathlib import Path

from workbook.goodhart import COMMAND
from workbook.runs import ConfigError, stub_error


def finished_runs(root: Path) -> list[Path]:
    """The finished goodhart run folders of a measurement that a probe reads: ``root`` itself when it is one run folder,
    else its ``seed<S>/`` folders (a benchmark's ``--runs-dir``); one line (``measurement``) when there is none or one
    has not finished."""
    runs = sorted(r for r in ([root] if (root / "config.json").exists() else root.glob("seed*")) if r.is_dir())
    if not runs:
        raise ConfigError("measurement", f"{root} holds no goodhart run folder (config.json, seed<S>/)")
    for run in runs:
        if not (run / "results.json").exists():
            raise ConfigError("measurement", f"{run} is not a finished goodhart run (no results.json)")
    return runs


def rl_rows(metrics: list[dict], base_gold: float, **keys) -> list[dict]:
    """An RL run's logged iterations as the benchmark's ``rl`` rows (``keys``: proxy_pairs, seed, ensemble)."""
    return [{**keys, "step": r["iteration"], "kl": r["objective/kl"], "proxy": r["env/reward_mean"],
             "gold": r["env/gold_mean"], "base_gold": base_gold} for r in metrics]


def results(a, seeds: list[dict]) -> dict:
    """The benchmark's JSON: gold, proxies, bon, rl (per seed) and fits (per curve and seed, and of each curve's mean over the
    seeds). ``a``: the run's ``GoodhartArgs``; ``seeds``: ``run.measure_seed``'s result for each seed."""
    from workbook.goodhart.fits import fit_rows
    from workbook.goodhart.measure import load_part11

    proxies = [{"pairs": v["pairs"], "member": v["member"], "seed": s["seed"], "heldout_accuracy": v["heldout_accuracy"],
                "train_accuracy": v["train_accuracy"], "steps": v["steps"]} for s in seeds for v in s["proxies"].values()]
    bon = [{"proxy_pairs": int(name.removeprefix("pairs")), "seed": s["seed"], **row, "base_gold": s["bon_base_gold"]}
           for s in seeds for name, rows in s["bon"].items() for row in rows]
    rl = []
    for s in seeds:
        for name, rows in s["rl"].items():
            ensemble = a.ensemble_method if name == "ensemble" else None
            pairs = a.sizes()[0] if ensemble else int(name.removeprefix("pairs"))
            rl += rl_rows(rows, s["base_gold"], proxy_pairs=pairs, seed=s["seed"], ensemble=ensemble)
    part11 = load_part11(a.impl)
    return {"gold": a.gold, "rl_algo": a.rl_algo, "proxies": proxies, "bon": bon, "rl": rl,
            "fits": fit_rows(part11, bon, rl)}


def print_table(res: dict) -> None:
    seeds = sorted({p["seed"] for p in res["proxies"]})
    print(f"\ngold: {res['gold']}; Gao's forms fitted to each curve's mean over the seeds ({', '.join(map(str, seeds))}); "
          "gold relative to the base policy's")
    print(f"{'proxy':<14}{'held-out acc':>14}{'fit':>5}{'α':>8}{'β':>8}{'R²':>6}{'peak √KL':>10}"
          f"{'gold at its peak (√KL)':>24}{'gold at the end':>17}")
    acc, members = {}, {}
    for p in res["proxies"]:
        (acc if p["member"] == 0 else members).setdefault(p["pairs"], []).append(p["heldout_accuracy"])

    def span(values: list[float]) -> str:
        lo, hi = min(values), max(values)
        return f"{lo:.2f}" if f"{lo:.2f}" == f"{hi:.2f}" else f"{lo:.2f}–{hi:.2f}"

    for f in res["fits"]:
        if f["seed"] != "mean":
            continue
        name = f"{f['proxy_pairs']} pairs" + (f" {f['ensemble']}" if f.get("ensemble") else "")
        # An ensemble's row: its members' accuracies (the single proxy of its size and the others).
        a = acc.get(f["proxy_pairs"], []) + (members.get(f["proxy_pairs"], []) if f.get("ensemble") else [])
        a = span(a) if a else "—"
        if f["alpha"] is None:
            print(f"{name:<14}{a:>14}{f['method']:>5}   no fit: {f['no_fit']}")
            continue
        peak = "never" if f["d_peak"] is None else f"{f['d_peak']:.2f}"
        measured = (f"{f['measured_peak_gold']:+.2f} ({f['measured_peak_d']:.2f})"
                    if f.get("measured_peak_gold") is not None else "—")
        end = f"{f['final_gold']:+.2f}" if f.get("final_gold") is not None else "—"
        print(f"{name:<14}{a:>14}{f['method']:>5}{f['alpha']:>8.3f}{f['beta']:>8.3f}{f['r2']:>6.2f}{peak:>10}"
              f"{measured:>24}{end:>17}")
    print("peak √KL: where the fitted form turns down (never: β ≤ 0, the form does not turn down); the last two columns "
          "are measured, on the mean curve")


def evaluate_run(run_dir: Path) -> int:
    """``python -m workbook evaluate RUN_DIR`` for a goodhart run: its fits and table again, from its files."""
    path = run_dir / "results.json"
    if not path.exists():
        raise ConfigError("RUN_DIR", f"{run_dir} is a goodhart run that has not finished (no results.json); "
                                     f"continue it with: python -m workbook {COMMAND} --resume {run_dir}")
    res = json.loads(path.read_text())
    if not any(f["seed"] == "mean" for f in res["fits"]):  # written before the fits were of each curve's mean
        from workbook.goodhart.fits import fit_rows
        from workbook.goodhart.measure import load_part11

        impl = json.loads((run_dir / "config.json").read_text())["args"]["impl"]
        try:
            res["fits"] = fit_rows(load_part11(impl), res["bon"], res["rl"])
        except NotImplementedError:
            raise stub_error(impl, "exercises/part11_goodhart.py") from None
    print_table(res)
    print(f"figure: {run_dir / 'goodhart.png'}; each RL run (seed<S>/rl/<proxy>/) is an rlhf run folder: "
          f"python -m workbook evaluate {run_dir}/seed<S>/rl/<proxy> samples its policy again, with its gold")
    return 0
