"""Draw the figures of part0_theory.md into docs/figures/ (run from the repository root).

    .venv/bin/python scripts/make_figures.py            # all figures
    .venv/bin/python scripts/make_figures.py clipped    # only those whose name contains "clipped"

Deterministic: the Agg backend, no random numbers, and no timestamp or version in the PNG
metadata, so re-running it on the same matplotlib version gives byte-identical files.
The GAE figure uses the worked example of part0_theory.md section 4 and the reference
``compute_advantages``, so the picture shows what the code computes.
"""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "figures"
sys.path.insert(0, str(ROOT))

# The worked example of section 4 (tests/test_theory.py checks the document's copy of it).
GAE_REWARDS = [-0.01, 0.02, -0.03, 0.00, -0.02, 0.01, -0.01, 0.00, 0.79]
GAE_VALUES = [0.30, 0.25, 0.40, 0.35, 0.30, 0.45, 0.50, 0.55, 0.60]

EPS = 0.2  # the clip range drawn in the figures
DPI = 100
PLAIN = dict(fontsize=10)

plt.rcParams.update({
    "font.size": 10,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "savefig.bbox": "tight",
})


def save(fig: plt.Figure, name: str) -> Path:
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / name
    # No "Software" entry: the file does not change when only the matplotlib version does.
    fig.savefig(path, dpi=DPI, metadata={"Software": None})
    plt.close(fig)
    print(f"wrote {path.relative_to(ROOT)} ({path.stat().st_size // 1024} KB)")
    return path


def clipped_objective() -> Path:
    """L^CLIP(r) = min(r·A, clip(r, 1−ε, 1+ε)·A) for A = +1 and A = −1, flat parts marked."""
    r = np.linspace(0.0, 2.0, 401)
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6), sharey=False)
    for ax, A in zip(axes, (+1.0, -1.0)):
        unclipped = r * A
        clipped = np.clip(r, 1 - EPS, 1 + EPS) * A
        objective = np.minimum(unclipped, clipped)
        flat = unclipped != objective  # the clipped branch is the min: zero gradient
        ax.plot(r, unclipped, ls="--", color="0.6", lw=1.2, label=r"unclipped $r\,A$")
        ax.plot(r, objective, color="C0", lw=2.4, label=r"$L^{CLIP}=\min(rA,\ \mathrm{clip}(r)A)$")
        lo, hi = (1 + EPS, 2.0) if A > 0 else (0.0, 1 - EPS)
        ax.axvspan(lo, hi, color="C3", alpha=0.10)
        ax.text((lo + hi) / 2, 0.6 if A > 0 else -1.45,
                "flat: gradient = 0\n(already moved far\nenough this way)",
                ha="center", va="center", color="C3", fontsize=9)
        ax.axvline(1 - EPS, color="0.3", lw=0.8, ls=":")
        ax.axvline(1 + EPS, color="0.3", lw=0.8, ls=":")
        ax.axvline(1.0, color="0.3", lw=0.6)
        ax.plot([1.0], [A], "o", color="C0")
        ax.annotate(r"$r=1$: $\pi_\theta=\pi_{\theta_{old}}$", (1.0, A), xytext=(0.25, 1.55) if A > 0 else (1.05, -0.1),
                    arrowprops=dict(arrowstyle="->", color="0.4"), fontsize=9)
        ax.set_xticks([0, 1 - EPS, 1, 1 + EPS, 2], ["0", r"$1-\epsilon$", "1", r"$1+\epsilon$", "2"])
        ax.set_xlabel(r"probability ratio $r=\pi_\theta(a|s)\,/\,\pi_{\theta_{old}}(a|s)$")
        ax.set_title(f"advantage A {'> 0' if A > 0 else '< 0'}  (here A = {A:+.0f}, ε = {EPS})", **PLAIN)
        ax.set_ylim(-2.1, 2.1)
        assert flat.any()
    axes[0].set_ylabel("objective (maximised)")
    axes[0].legend(loc="lower right", fontsize=8.5, framealpha=0.9)
    fig.tight_layout()
    return save(fig, "clipped_objective.png")


def gae_weights() -> Path:
    """Left: the weight (γλ)^l that GAE puts on δ_{t+l}. Right: the worked example for several λ."""
    import torch

    from solutions.part1_ppo_core import compute_advantages

    torch.set_num_threads(1)
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.5))
    lags = np.arange(0, 21)
    lambdas = (0.0, 0.5, 0.9, 0.95, 1.0)
    for i, lam in enumerate(lambdas):
        left.plot(lags, (0.99 * lam) ** lags, "o-", ms=3, lw=1.2, color=f"C{i}", label=f"λ = {lam:g}")
    left.set_xlabel(r"lag $l$ (steps into the future)")
    left.set_ylabel(r"weight $(\gamma\lambda)^l$ on $\delta_{t+l}$")
    left.set_title("GAE weights, γ = 0.99", **PLAIN)
    left.legend(fontsize=8.5)

    rewards = torch.tensor(GAE_REWARDS)[:, None]
    values = torch.tensor(GAE_VALUES)[:, None]
    tokens = np.arange(1, len(GAE_REWARDS) + 1)
    for i, lam in enumerate(lambdas):
        adv = compute_advantages(torch.zeros(1), torch.tensor([False]), rewards, values,
                                 torch.zeros_like(rewards, dtype=torch.bool), 1.0, lam)[:, 0].numpy()
        right.plot(tokens, adv, "o-", ms=3.5, lw=1.2, color=f"C{i}", label=f"λ = {lam:g}")
    right.set_xticks(tokens)
    right.set_xlabel("response token $t$")
    right.set_ylabel(r"advantage $\hat A_t$")
    right.set_title("the 9-token worked example (γ = 1)", **PLAIN)
    right.legend(fontsize=8.5, ncol=2)
    fig.tight_layout()
    return save(fig, "gae_weights.png")


def kl_estimators() -> Path:
    """Per-token KL estimators as functions of x = log π(y) − log π_ref(y)."""
    x = np.linspace(-2.0, 2.0, 401)
    fig, ax = plt.subplots(figsize=(5.6, 3.6))
    ax.plot(x, x, lw=2, label=r"k1 = $x$  (kind='kl')")
    ax.plot(x, np.abs(x), lw=1.4, label=r"$|x|$  (kind='abs')")
    ax.plot(x, 0.5 * x**2, lw=1.4, label=r"$\frac{1}{2} x^2$  (kind='mse')")
    ax.plot(x, np.exp(-x) - 1 + x, lw=2, label=r"k3 = $e^{-x}-1+x$  (kind='k3')")
    ax.axhline(0, color="0.3", lw=0.8)
    ax.fill_between(x, x, 0, where=x < 0, color="C0", alpha=0.12)
    ax.text(-1.95, -1.25, "k1 < 0 here: the token\nwas more likely under\nthe reference model", fontsize=8.5, color="C0")
    ax.set_ylim(-2.05, 3.0)
    ax.set_xlabel(r"$x=\log\pi_\theta(y_t)-\log\pi_{ref}(y_t)$ for the sampled token")
    ax.set_ylabel("per-token penalty")
    ax.set_title("one-sample KL estimators", **PLAIN)
    ax.legend(fontsize=8.5, loc="upper center")
    fig.tight_layout()
    return save(fig, "kl_estimators.png")


def rlhf_loop() -> Path:
    """Boxes and arrows: one iteration of the RLHF PPO loop."""
    fig, ax = plt.subplots(figsize=(9.6, 4.4))
    ax.set_xlim(0, 12)
    ax.set_ylim(0, 6)
    ax.axis("off")

    def box(x, y, w, h, text, color):
        ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.08", fc=color, ec="0.25", lw=1))
        ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=9)
        return (x, y, w, h)

    def arrow(a, b, text="", offset=(0, 0.15), rad=0.0):
        ax.add_patch(FancyArrowPatch(a, b, arrowstyle="-|>", mutation_scale=12, lw=1.2, color="0.25",
                                     connectionstyle=f"arc3,rad={rad}"))
        if text:
            ax.text((a[0] + b[0]) / 2 + offset[0], (a[1] + b[1]) / 2 + offset[1], text,
                    ha="center", va="bottom", fontsize=8.5, color="0.2")

    blue, green, grey, orange = "#dbe9f6", "#dff0d8", "#eeeeee", "#fbe5cc"
    box(0.1, 4.5, 1.7, 1.0, "prompts $x$", grey)
    box(2.4, 4.4, 2.4, 1.2, "policy $\\pi_\\theta$\n(LM + value head)", blue)
    box(5.5, 4.4, 2.4, 1.2, "responses $y$\n(sampled tokens)", grey)
    box(8.6, 4.4, 3.0, 1.2, "1. score $s(x, y)$\n(VADER or reward model)", orange)
    box(8.6, 2.3, 3.0, 1.3, "2. forward passes: $\\log\\pi_\\theta$, $V$\nand frozen $\\log\\pi_{ref}$\n(no grad)", blue)
    box(8.6, 0.2, 3.0, 1.3, "3. per-token rewards\n$-\\beta\\,\\mathrm{kl}_t$, plus $s$ on the\nlast response token", orange)
    box(5.5, 0.2, 2.4, 1.3, "4. GAE: advantages\nand returns;\nwhiten advantages", green)
    box(2.4, 0.2, 2.4, 1.3, "5. PPO epochs over\nminibatches:\nclipped losses", green)
    box(5.5, 2.3, 2.4, 1.3, "6. KL controller: reads the\nmean KL, sets the next $\\beta$:\n$\\beta \\leftarrow \\beta\\,(1 + e\\,n/H)$", green)

    arrow((1.8, 5.0), (2.4, 5.0))
    arrow((4.8, 5.0), (5.5, 5.0), "generate", offset=(0, 0.62))
    arrow((7.9, 5.0), (8.6, 5.0), "decode", offset=(0, 0.62))
    arrow((10.1, 4.4), (10.1, 3.6))
    arrow((10.1, 2.3), (10.1, 1.5))
    arrow((8.6, 0.85), (7.9, 0.85))
    arrow((5.5, 0.85), (4.8, 0.85))
    arrow((3.6, 1.5), (3.6, 4.4), "update θ", offset=(-0.55, -0.1))
    arrow((9.0, 1.5), (7.9, 2.75))
    arrow((7.0, 2.4), (8.6, 1.2))
    ax.text(0.1, 3.1, "one iteration: 1 → 6,\nthen the updated policy\ngenerates the next batch",
            fontsize=8.5, color="0.3", va="center")
    fig.tight_layout()
    return save(fig, "rlhf_loop.png")


FIGURES = {f.__name__: f for f in (clipped_objective, gae_weights, kl_estimators, rlhf_loop)}


def main(argv: list[str] | None = None) -> int:
    wanted = sys.argv[1:] if argv is None else argv
    for name, draw in FIGURES.items():
        if not wanted or any(w in name for w in wanted):
            draw()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
