"""Gao et al.'s Figure 1 in miniature: gold and proxy against √KL, best-of-n and RL, one column per proxy size.

Top row: the gold (``results['gold']``, relative to the base policy) of best-of-n (blue) and RL (orange; the
ensemble's RL run green, in the smallest proxy's column), the mean over seeds solid, the seeds' range
shaded, Gao's form fitted to that mean curve dashed. Bottom row: the proxy's own score (standardised on
the base samples) of the same policies — it keeps rising where the gold turns; the ensemble's is its aggregate
(WCO: the lowest standardised member), which starts below 0. A footer names the command and the machine.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from workbook.goodhart.fits import curves, mean_curve

COLOURS = {"bon": "tab:blue", "rl": "tab:orange", "ensemble": "tab:green"}


ALGO_NAMES = {"ppo": "PPO", "rloo": "RLOO", "grpo": "GRPO"}


def draw(res: dict, path: Path, args, source: str = "python -m workbook goodhart") -> None:
    """``source``: the command or script that made ``res``, named in the figure's footer with the machine it ran on."""
    import os

    import matplotlib
    import torch

    from workbook.runs import cpu_name

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    misspelled = getattr(args, "bank_near_misses", 0.0)  # not the design: the figure says so, and what it standardised on
    found = curves(res["bon"], res["rl"])
    sizes = sorted({k[1] for k in found})
    fits = {(f["method"], f["proxy_pairs"], f.get("ensemble")): f for f in res["fits"] if f["seed"] == "mean"}
    accuracy = {}
    for p in res["proxies"]:
        if p["member"] == 0:
            accuracy.setdefault(p["pairs"], []).append(p["heldout_accuracy"])
    fig, axes = plt.subplots(2, len(sizes), figsize=(4.2 * len(sizes), 6.4), sharex=True,
                             sharey="row", squeeze=False)  # one scale per row: the peaks compare across proxies
    for col, size in enumerate(sizes):
        top, bottom = axes[0][col], axes[1][col]
        for key, by_seed in sorted(found.items(), key=lambda kv: (kv[0][0], str(kv[0][2]))):
            method, pairs, ensemble = key
            if pairs != size:
                continue
            colour = COLOURS["ensemble" if ensemble else method]
            rl = f"RL ({ALGO_NAMES[getattr(args, 'rl_algo', 'ppo')]})"
            label = "best-of-n" if method == "bon" else (f"{rl}, {ensemble} ensemble" if ensemble else rl)
            x, r, rlo, rhi, p, plo, phi = mean_curve(by_seed)
            top.plot(x, r, color=colour, label=label, marker="." if method == "bon" else None)
            top.fill_between(x, rlo, rhi, color=colour, alpha=0.2, linewidth=0)
            # An ensemble's proxy score is what its RL run maximised: the aggregate of the standardised members.
            bottom.plot(x, p, color=colour, label=f"{label}: its {ensemble} score" if ensemble else label)
            bottom.fill_between(x, plo, phi, color=colour, alpha=0.2, linewidth=0)
            f = fits.get(key)
            if f is not None and f["alpha"] is not None:
                grid = np.linspace(0, float(x.max()), 100)
                fitted = grid * (f["alpha"] - f["beta"] * (grid if method == "bon" else
                                                           np.log(np.where(grid > 0, grid, 1.0))))
                top.plot(grid, fitted, color=colour, linestyle="--", linewidth=1,
                         label=f"fit R²={f['r2']:.2f}")
        acc = accuracy.get(size, [float("nan")])
        span = f"{min(acc):.2f}" if f"{min(acc):.2f}" == f"{max(acc):.2f}" else f"{min(acc):.2f}–{max(acc):.2f}"
        top.set_title(f"proxy of {size} pairs\n(held-out accuracy {span})", fontsize=10)
        top.axhline(0, color="grey", linewidth=0.5)
        top.legend(fontsize=7)
        bottom.set_xlabel("√KL(π ‖ π_init)  (√nats)")
        if col == 0:
            bottom.legend(fontsize=7)
            top.set_ylabel(f"gold ({res['gold']}) − base")
            bottom.set_ylabel(f"proxy score (std. on {'its bank' if misspelled else 'base samples'})")
    seeds = sorted({r["seed"] for r in res["bon"] + res["rl"]})
    over = (f"seed {seeds[0]}" if len(seeds) == 1 else
            f"seeds {', '.join(map(str, seeds))}: mean, range shaded")  # one seed has no range to shade
    bank = f"; {misspelled:.0%} of the proxies' samples given a near-miss" if misspelled else ""
    fig.suptitle(f"Goodhart on the review GPT: gold and proxy against √KL ({over}; Gao et al.'s forms dashed{bank})",
                 fontsize=10)
    kernels = os.environ.get("ATEN_CPU_CAPABILITY") or "the machine's best"
    fig.text(0.99, 0.005, f"{source}; torch {torch.__version__}, CPU kernels: {kernels}; "
             f"{cpu_name()}, {os.cpu_count()} CPUs", ha="right", va="bottom",
             fontsize=6, color="grey")
    fig.tight_layout(rect=(0, 0.015, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
