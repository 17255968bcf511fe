"""From measured rows to Gao et al.'s curves: (d = √KL, R = gold − base gold) points, their fits, their peaks.

RL's gold is measured on one batch per iteration (64 samples: a standard error of about 0.05 on
the gold's [-1, 1] scale), so its points are averaged over ``RL_BIN`` consecutive iterations first; best-of-n's
points are already expectations over the pool. R(0) = 0 by construction: the base policy's gold is
subtracted (best-of-n: the pool's mean, n = 1; RL: the mean over the base samples of the bank, the same
openers RL writes for).
"""

from __future__ import annotations

import math
from types import ModuleType

import numpy as np
import torch

RL_BIN = 5
"""Iterations averaged into one RL point."""


def curve_key(row: dict, method: str) -> tuple:
    return method, row["proxy_pairs"], row.get("ensemble")


def rl_points(rows: list[dict]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(d, gold − base, proxy) of one RL run's rows, averaged over bins of RL_BIN iterations (the first bin: iteration 1,
    the base policy, alone)."""
    rows = sorted(rows, key=lambda r: r["step"])
    bins = [rows[:1]] + [rows[i:i + RL_BIN] for i in range(1, len(rows), RL_BIN)]
    bins = [b for b in bins if b]
    kl = np.array([max(np.mean([r["kl"] for r in b]), 0.0) for b in bins])
    gold = np.array([np.mean([r["gold"] for r in b]) for b in bins]) - rows[0]["base_gold"]
    proxy = np.array([np.mean([r["proxy"] for r in b]) for b in bins])
    d = np.sqrt(kl)
    d[0] = 0.0  # iteration 1 samples the base policy itself: KL 0
    return d, gold, proxy


def bon_points(rows: list[dict]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rows = sorted(rows, key=lambda r: r["n"])
    d = np.sqrt(np.array([r["kl"] for r in rows]))
    return d, np.array([r["gold"] - r["base_gold"] for r in rows]), np.array([r["proxy"] for r in rows])


def curves(bon: list[dict], rl: list[dict]) -> dict[tuple, dict[int, tuple]]:
    """(method, proxy_pairs, ensemble) -> seed -> (d, R, proxy) points."""
    out: dict[tuple, dict[int, tuple]] = {}
    for method, rows, points in (("bon", bon, bon_points), ("rl", rl, rl_points)):
        grouped: dict[tuple, dict[int, list[dict]]] = {}
        for r in rows:
            grouped.setdefault(curve_key(r, method), {}).setdefault(r["seed"], []).append(r)
        for key, by_seed in grouped.items():
            out[key] = {seed: points(rs) for seed, rs in sorted(by_seed.items())}
    return out


def mean_curve(by_seed: dict[int, tuple]) -> tuple[np.ndarray, ...]:
    """The curve over the seeds, point by point on the points every seed has (best-of-n: each n; RL: each bin of
    iterations): d, gold and proxy averaged, and the gold's and proxy's range over the seeds.

    Returns (d, gold mean, gold min, gold max, proxy mean, proxy min, proxy max). This is the curve the figure draws and
    the one Gao's form is fitted to (``seed: "mean"``): fitting every seed's points pooled instead would count the
    spread between seeds — where each run found its hack — as the form's misfit."""
    n = min(len(v[0]) for v in by_seed.values())
    d = np.stack([v[0][:n] for v in by_seed.values()])
    r = np.stack([v[1][:n] for v in by_seed.values()])
    p = np.stack([v[2][:n] for v in by_seed.values()])
    return d.mean(0), r.mean(0), r.min(0), r.max(0), p.mean(0), p.min(0), p.max(0)


def fit(part11: ModuleType, method: str, d: np.ndarray, r: np.ndarray) -> dict:
    """Gao's form through the points (Part 11's ``fit_gao`` and ``gao_peak``); all None, with the reason, when the points
    cannot determine it (fewer than two distinct d > 0: a run stopped after its first iterations)."""
    try:
        alpha, beta, r2 = part11.fit_gao(torch.tensor(d, dtype=torch.float64), torch.tensor(r, dtype=torch.float64), method)
    except ValueError as error:
        return {"alpha": None, "beta": None, "r2": None, "d_peak": None, "no_fit": str(error)}
    return {"alpha": alpha, "beta": beta, "r2": r2, "d_peak": part11.gao_peak(alpha, beta, method)}


def peaks_in_order(peaks: list[float | None]) -> bool:
    """Goal 2's order: each proxy size's fitted peak at a larger √KL than the size before it. A fit that never turns down
    (None) counts as a peak beyond every other, so it may come last only: the largest proxy's peak out of reach is
    the peak moved out; a smaller one's is not."""
    return all(a is not None and (b is None or b > a) for a, b in zip(peaks, peaks[1:]))


def shape(d: np.ndarray, r: np.ndarray, proxy: np.ndarray) -> dict:
    """What the measured curve did: where its gold peaked, how far it fell after, how the proxy moved after the peak."""
    top = int(np.argmax(r))
    return {"measured_peak_d": float(d[top]), "measured_peak_gold": float(r[top]), "final_gold": float(r[-1]),
            "fall": float(r[top] - r[-1]), "proxy_at_peak": float(proxy[top]), "proxy_final": float(proxy[-1]),
            "final_d": float(d[-1])}


def fit_rows(part11: ModuleType, bon: list[dict], rl: list[dict]) -> list[dict]:
    """One row per curve and seed, and one per curve over the seeds (``seed: "mean"``: :func:`mean_curve`), each with
    Gao's fitted form and the measured curve's shape."""
    rows = []
    for (method, pairs, ensemble), by_seed in curves(bon, rl).items():
        for seed, (d, r, p) in by_seed.items():
            rows.append({"method": method, "proxy_pairs": pairs, "ensemble": ensemble, "seed": seed,
                         **fit(part11, method, d, r), **shape(d, r, p)})
        d, r, _, _, p, _, _ = mean_curve(by_seed)
        rows.append({"method": method, "proxy_pairs": pairs, "ensemble": ensemble, "seed": "mean",
                     **fit(part11, method, d, r), **shape(d, r, p)})
    for row in rows:  # JSON has no inf
        if isinstance(row.get("d_peak"), float) and math.isinf(row["d_peak"]):
            row["d_peak"] = None
    return rows
