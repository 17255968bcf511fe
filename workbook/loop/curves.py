"""The loop's figures: one run's curves (the task's panels, then the algorithm's), and several seeds' mean ± spread.

Each panel is a (stat, label) pair named by the task (reward, diversity, ...) or by the algorithm
(PPO: KL with its target, β; GRPO/RLOO: KL, policy loss, clipped fraction; DPO: loss, preference
accuracy, margin), so a figure only shows what its algorithm has. A panel whose stat was never
logged is left out; a run too short for a line (one iteration) draws its points as markers.
The symptoms of a dead run (``workbook/loop/health.py``) shade the iterations they held on every
panel and are written under the panels, one line each.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _grid(plt, n: int):
    """Rows of up to 4 panels, as few rows as fit (7 panels: 2 × 4, not 3 × 3 with a lonely one)."""
    from matplotlib.ticker import MaxNLocator

    cols = 1 if n == 1 else 2 if n in (2, 4) else 3 if n in (3, 5, 6, 9) else 4
    rows = -(-n // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.1 * rows + 0.3), sharex=True, squeeze=False)
    for ax in axes.flat[n:]:
        ax.remove()
    for ax in axes.flat[:n]:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # iterations are whole numbers
    return fig, list(axes.flat[:n]), axes


def present(history: list[dict], panels) -> list[tuple[str, str]]:
    """The panels whose stat has at least one finite value in ``history``."""
    return [(k, label) for k, label in panels
            if any(isinstance(h.get(k), (int, float)) and np.isfinite(h[k]) for h in history)]


def save_curves(history: list[dict], path: Path, title: str, panels, *, x_label: str = "iteration",
                kl_target: float | None = None, reference_reward: float | None = None,
                held_out: tuple[str, str, float, float | None] | None = None, warnings: list[dict] = ()):
    """One panel per (stat, label) of ``panels`` present in ``history``, against the iteration.

    ``reference_reward`` (the held-out reward of the model before training, i.e. of the
    reference) is drawn as a baseline on the ``env/reward_mean`` panel and ``kl_target`` on the
    ``objective/kl`` panel; wall times stay in metrics.jsonl. ``held_out``: (stat, name, before,
    after) — the held-out evaluation before training (a dashed line) and after it (a star at the
    last iteration; None when it did not run) on that stat's panel. ``warnings`` (a dead run's
    symptoms, ``DeadRunWatch.summary()``): their iterations shaded red on every panel, their lines under
    the panels. Returns the figure.
    """
    plt = _pyplot()
    shown = present(history, panels)
    fig, axes, grid = _grid(plt, max(len(shown), 1))
    x = [h["iteration"] for h in history]
    for ax, (key, label) in zip(axes, shown):
        y = np.array([h.get(key, np.nan) for h in history], dtype=float)
        few = len(y) < 10
        ax.plot(x, y, color="C0", alpha=1.0 if few else 0.35, linewidth=1, marker="o" if len(y) < 3 else None)
        if not few:  # batch statistics are noisy: a 10-iteration running mean on top
            ax.plot(x[9:], np.convolve(y, np.ones(10) / 10, mode="valid"), color="C0", linewidth=2, label="10-iteration mean")
        if key == "env/reward_mean" and reference_reward is not None:
            ax.axhline(reference_reward, color="grey", linestyle="--", linewidth=1,
                       label=f"reference model ({reference_reward:+.2f}, held-out)")
        if key == "objective/kl" and kl_target is not None:
            ax.axhline(kl_target, color="C3", linestyle="--", linewidth=1, label=f"KL target ({kl_target:g})")
        for w in warnings:  # the iterations a symptom of a dead run held
            ax.axvspan(w["first"] - 0.5, w["last"] + 0.5, color="C3", alpha=0.12, linewidth=0)
        if held_out is not None and key == held_out[0]:
            _, name, before, after = held_out
            ax.axhline(before, color="grey", linestyle="--", linewidth=1, label=f"held-out {name} before ({before:.3f})")
            if after is not None:
                ax.plot([x[-1]], [after], marker="*", markersize=12, color="C3", linestyle="none",
                        label=f"held-out {name} after ({after:.3f})")
        if key in ("env/reward_mean", "objective/kl") + ((held_out[0],) if held_out else ()) \
                and ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8, loc="best")
        ax.set_ylabel(label, fontsize=9)
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=8)
    if 0 < len(x) < 3:  # one or two points: whole-number ticks at the iterations, not a zoom onto 1.0 ± 0.05
        axes[0].set_xlim(x[0] - 0.5, x[-1] + 0.5)
        axes[0].set_xticks(x)
    for col in range(grid.shape[1]):  # the x label under the lowest panel of each column
        column = [ax for ax in grid[:, col] if ax in axes]
        if column:
            column[-1].set_xlabel(x_label)
            column[-1].xaxis.set_tick_params(labelbottom=True)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    if warnings:  # under the panels, in room added to the figure (the panels keep their size)
        import textwrap

        width = int(fig.get_figwidth() * 72 / (7 * 0.6))  # characters of a 7-point line across the figure
        note = "\n".join(textwrap.fill(w["line"], width, subsequent_indent="    ") for w in warnings)
        extra = 0.13 * (note.count("\n") + 1) + 0.15  # inches
        height = fig.get_figheight()
        fig.set_figheight(height + extra)
        fig.subplots_adjust(bottom=(fig.subplotpars.bottom * height + extra) / (height + extra),
                            top=1 - (1 - fig.subplotpars.top) * height / (height + extra))
        fig.text(0.01, 0.05 / (height + extra), note, color="C3", fontsize=7, ha="left", va="bottom",
                 linespacing=1.2)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return fig


def save_seed_curves(histories: dict[int, list[dict]], path: Path, title: str, panels, *, x_label: str = "iteration"):
    """Several seeds of one configuration: per panel, the mean over seeds and the min–max band.

    Iterations that not every seed reached (a time budget) are left out. Returns the figure.
    """
    plt = _pyplot()
    seeds = sorted(histories)
    n = min(len(histories[s]) for s in seeds)
    merged = [row for s in seeds for row in histories[s][:n]]
    shown = present(merged, panels)
    fig, axes, grid = _grid(plt, max(len(shown), 1))
    x = np.arange(1, n + 1)
    for ax, (key, label) in zip(axes, shown):
        y = np.array([[h.get(key, np.nan) for h in histories[s][:n]] for s in seeds], dtype=float)
        mean = np.nanmean(y, axis=0)
        ax.fill_between(x, np.nanmin(y, axis=0), np.nanmax(y, axis=0), color="C0", alpha=0.2,
                        label=f"min–max over {len(seeds)} seeds")
        ax.plot(x, mean, color="C0", linewidth=1.8, marker="o" if n < 3 else None, label="mean")
        ax.set_ylabel(label, fontsize=9)
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=8)
    if axes:
        axes[0].legend(fontsize=8, loc="best")
    for col in range(grid.shape[1]):
        column = [ax for ax in grid[:, col] if ax in axes]
        if column:
            column[-1].set_xlabel(x_label)
            column[-1].xaxis.set_tick_params(labelbottom=True)
    fig.suptitle(f"{title}  (seeds {', '.join(map(str, seeds))})", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return fig
