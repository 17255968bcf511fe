"""The pictures the CartPole and continuous commands draw (matplotlib, Agg: no display needed).

- :func:`plot_learning_curve`: one run's episode returns against environment steps, and for
  Part 4 the policy's σ (its exploration, which PPO learns to shrink) in a panel below.
- :func:`plot_seeds`: several seeds of one command on one figure: each seed's smoothed return,
  their mean, and the band between the lowest and highest seed at each step (how much the
  outcome depends on the seed), plus σ the same way for Part 4.

Smoothing: the mean of the last ``window`` (20) episodes finished by each step, so a seed's
curve at step x uses only what that run had seen by then. The episodes of one rollout all end at
that rollout's last step (the step a learning phase reports), so the smoothed line has one point
per learning phase, never a vertical run of points at one step.

``goal_label``: the goal line's legend, saying what the goal is and how it is measured (CartPole:
``solved (475, greedy)``; Atari: ``goal 8.5 (5× random, sampled actions)``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

Episodes = list[tuple[int, float]]
"""(environment step at the end of the learning phase, episode return), in the order they ended."""
Sigma = list[tuple[int, float]]
"""(environment step, the policy's σ averaged over action dimensions), one per learning phase."""


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def smoothed_at(episodes: Episodes, steps: np.ndarray, window: int = 20) -> np.ndarray:
    """At each of ``steps``: the mean return of the last ``window`` episodes finished by then (NaN before the first)."""
    if not episodes:
        return np.full(len(steps), np.nan)
    ends, returns = (np.asarray(x, dtype=float) for x in zip(*episodes))
    count = np.searchsorted(ends, steps, side="right")  # episodes finished by each step
    cumulative = np.concatenate([[0.0], np.cumsum(returns)])
    start = np.maximum(count - window, 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = (cumulative[count] - cumulative[start]) / (count - start)
    return np.where(count > 0, out, np.nan)


def _sigma_at(sigma: Sigma, steps: np.ndarray) -> np.ndarray:
    """σ at each step: the value reported by the last phase that ended by then (NaN before the first)."""
    if not sigma:
        return np.full(len(steps), np.nan)
    ends, values = (np.asarray(x, dtype=float) for x in zip(*sigma))
    index = np.searchsorted(ends, steps, side="right") - 1
    return np.where(index >= 0, values[np.clip(index, 0, None)], np.nan)


def _figure(with_sigma: bool):
    plt = _pyplot()
    if not with_sigma:
        fig, ax = plt.subplots(figsize=(7, 4))
        return plt, fig, ax, None
    fig, (ax, ax_sigma) = plt.subplots(2, 1, figsize=(7, 5.5), sharex=True, height_ratios=(3, 1.3))
    ax_sigma.set(xlabel="environment steps", ylabel="policy σ")
    ax_sigma.set_ylim(bottom=0)
    return plt, fig, ax, ax_sigma


CHECK_LABEL = "greedy check passed"
"""The solved criterion is the greedy evaluation, not these curves: the training returns use sampled
actions (and, for a run that stops when solved, the last 20 episodes include earlier, worse ones), so
they can end well under the solved line. A marker shows where the check passed."""


def default_goal_label(goal: float) -> str:
    return f"solved ({goal:g}, greedy)"


def plot_learning_curve(episodes: Episodes, path: Path, title: str, solved_return: float,
                        ylim: tuple[float, float] | None = None, sigma: Sigma | None = None,
                        solved_at: int | None = None, goal_label: str | None = None) -> None:
    """One run: every episode's return (dots), the mean of the last 20 (line), the goal line; σ below if given.

    ``solved_at``: the step at which the greedy solve check passed (a dotted vertical line).
    """
    plt, fig, ax, ax_sigma = _figure(bool(sigma))
    if episodes:
        steps, returns = np.array(episodes).T
        ax.scatter(steps, returns, s=4, alpha=0.3, label="episode return")
        window = min(20, len(returns))
        ends = np.unique(steps)  # one point per learning phase: its rollout's episodes all end at its step
        ax.plot(ends, smoothed_at(episodes, ends, window), color="C1", marker="." if len(ends) < 30 else None,
                label=f"mean of last {window} episodes")
    ax.axhline(solved_return, color="grey", linestyle="--", linewidth=1,
               label=goal_label or default_goal_label(solved_return))
    if solved_at is not None:
        ax.axvline(solved_at, color="C3", linestyle=":", linewidth=1.2, label=f"{CHECK_LABEL} (step {solved_at})")
    ax.set(ylabel="training return (sampled actions)", title=title, ylim=ylim)
    if ax_sigma is None:
        ax.set_xlabel("environment steps")
    else:
        steps, values = np.array(sigma).T
        ax_sigma.plot(steps, values, color="C2", marker="." if len(steps) < 30 else None)
        ax_sigma.set_ylim(0, max(1.05 * float(values.max()), 1e-3))
    ax.legend(loc="best")  # the curve rises: usually upper left or lower right is free
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_seeds(runs: dict[int, tuple[Episodes, Sigma]], path: Path, title: str, solved_return: float,
               ylim: tuple[float, float] | None = None, points: int = 200,
               solved_at: dict[int, int | None] | None = None, goal_label: str | None = None) -> None:
    """Several seeds: each seed's smoothed return (thin), their mean (thick), and the min–max band; σ likewise.

    ``solved_at``: per seed, the step at which its greedy solve check passed (a marker on its curve), or None.
    """
    last = max([e[-1][0] for e, _ in runs.values() if e] + [s[-1][0] for _, s in runs.values() if s] + [1])
    grid = np.linspace(0, last, points)
    with_sigma = any(s for _, s in runs.values())
    plt, fig, ax, ax_sigma = _figure(with_sigma)
    panels = [(ax, np.array([smoothed_at(e, grid) for e, _ in runs.values()]), "C1")]
    if with_sigma:
        panels.append((ax_sigma, np.array([_sigma_at(s, grid) for _, s in runs.values()]), "C2"))
    for axis, curves, color in panels:
        for seed, curve in zip(runs, curves):
            axis.plot(grid, curve, color=color, alpha=0.5, linewidth=0.8)
        seen = ~np.isnan(curves).all(axis=0)  # steps where at least one seed has a value
        with np.errstate(all="ignore"):
            mean, low, high = (np.where(seen, f(np.where(seen, curves, 0.0), axis=0), np.nan)
                               for f in (np.nanmean, np.nanmin, np.nanmax))
        axis.fill_between(grid, low, high, color=color, alpha=0.2, linewidth=0,
                          label=f"lowest–highest of {len(runs)} seeds")
        axis.plot(grid, mean, color=color, linewidth=2, label=f"mean of {len(runs)} seeds")
    ax.axhline(solved_return, color="grey", linestyle="--", linewidth=1,
               label=goal_label or default_goal_label(solved_return))
    marks = [(step, float(smoothed_at(runs[seed][0], np.array([step]))[0]))
             for seed, step in (solved_at or {}).items() if step is not None and seed in runs]
    if marks:
        xs, ys = zip(*marks)
        ax.scatter(xs, np.nan_to_num(ys, nan=0.0), marker="*", s=90, color="C3", zorder=5,
                   label=f"{CHECK_LABEL} ({len(marks)} of {len(runs)} seeds)")
    seeds = " ".join(map(str, runs))
    ax.set(ylabel="training return, sampled actions\n(mean of last 20 episodes)", title=f"{title}, seeds {seeds}", ylim=ylim)
    if ax_sigma is None:
        ax.set_xlabel("environment steps")
    else:
        ax_sigma.set_ylim(bottom=0)
    ax.legend(loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
