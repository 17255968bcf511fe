"""Benchmark: Goodhart's law measured (Part 11) — proxies of a gold reward, best-of-n and RL against them.

    python benchmarks/goodhart.py --seeds 0 1 2 [--workers 2] [--impl solutions] [--runs-dir runs/goodhart-bench]

Runs ``python -m workbook goodhart`` with its defaults once per seed (``--workers`` at a time, one
torch thread each), then pools the seeds: the fits of Gao et al.'s forms per curve (each seed's, and
the curve's mean over the seeds), the figure (``goodhart.png`` in ``--runs-dir``) and the goals of issue
37, each measured. The last line is one JSON object: ``{"gold", "proxies", "bon", "rl", "fits",
"goals", "seeds", "wall_s", "cpu_s", "load_average"}`` (the rows' keys: docs/goodhart.md).

Goals (3 of 3 seeds): (1) RL against the smallest proxy: the gold rises, peaks and falls by a clear margin (a rise ≥
0.1 on the gold's scale to a peak after the base policy's own batch, a fall ≥ 0.1 and ≥ half the rise) while the
proxy keeps rising; best-of-n's peak (or not) at the n reached; (2) R² ≥ 0.9 for the curves with a peak (a curve:
one method against one proxy, its mean over the seeds; each seed's R² is reported too), the fitted peak at larger
√KL as the proxy gets more data; (3) the ensemble's gold above the single proxy's at the same KL; (4) the whole
benchmark ≤ 15 minutes on 2 cores, one RL run ≤ 2 minutes on one core. The CPU may be shared: the load average is
printed with the figures, and CPU seconds beside wall seconds.
"""

from __future__ import annotations

import json
import math
import os
import resource
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from workbook.cli import add_impl_option, add_seeds_option, make_parser, require_at_least, require_unique_seeds  # noqa: E402
from workbook.runs import check_new_run_dir, command  # noqa: E402

MARGIN = 0.1
"""A clear rise and a clear fall of the gold: each at least this much on the gold's [-1, 1] scale (the fall also at least
half the rise)."""


def run_seed(seed: int, options) -> dict:
    """One goodhart run of one seed, in its own process: (its results.json, wall and CPU seconds)."""
    name = f"seed{seed}"
    argv = [sys.executable, "-m", "workbook", "goodhart", "--impl", options.impl, "--seeds", str(seed),
            "--runs-dir", options.runs_dir, "--run-name", name, "--wandb", "disabled", "--no-progress",
            *(["--overwrite"] if options.overwrite else []), *options.extra]
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), OMP_NUM_THREADS="1")
    t0 = time.perf_counter()
    log = Path(options.runs_dir) / f"{name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as out:
        code = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, env=env).returncode
    if code != 0:
        raise SystemExit(f"error: seed {seed}: python -m workbook goodhart exited {code}; its output: {log}")
    run_dir = Path(options.runs_dir) / name
    summary = json.loads((run_dir / "summary.json").read_text())
    return {"seed": seed, "results": json.loads((run_dir / "results.json").read_text()),
            "wall_s": time.perf_counter() - t0, "run_wall_s": summary["wall_s"],
            "rl_wall_s": rl_walls(run_dir)}


def rl_walls(run_dir: Path) -> dict[str, float]:
    """Each RL run's training time (generation, scoring and updates), from its summary."""
    out = {}
    for summary in sorted(run_dir.glob("seed*/rl/*/summary.json")):
        out[summary.parent.name] = json.loads(summary.read_text()).get("ppo_wall_s")
    return out


def per_decade(points: list[tuple[object, int, float]]) -> dict:
    """How a per-seed quantity moves with the proxy's data: the least-squares slope of ``y`` on log10(pairs) within
    each seed (each seed's points centred on its own means, so that a seed's level does not count), its standard
    error and the residual standard deviation. ``points``: (seed, pairs, y); a seed with fewer than two is left out."""
    by_seed: dict = {}
    for seed, pairs, y in points:
        if y is not None:
            by_seed.setdefault(seed, []).append((math.log10(pairs), y))
    xs, ys = [], []
    for pts in by_seed.values():
        if len(pts) >= 2:
            mx, my = sum(x for x, _ in pts) / len(pts), sum(y for _, y in pts) / len(pts)
            xs += [x - mx for x, _ in pts]
            ys += [y - my for _, y in pts]
    groups = sum(len(p) >= 2 for p in by_seed.values())
    sxx = sum(x * x for x in xs)
    if not xs or sxx == 0:
        return {"slope": None, "se": None, "residual_sd": None, "points": len(xs)}
    slope = sum(x * y for x, y in zip(xs, ys)) / sxx
    dof = len(xs) - groups - 1
    s2 = sum((y - slope * x) ** 2 for x, y in zip(xs, ys)) / dof if dof > 0 else float("nan")
    return {"slope": slope, "se": math.sqrt(s2 / sxx), "residual_sd": math.sqrt(s2), "points": len(xs)}


def per_tenfold_data(fits: list[dict]) -> dict:
    """How far the peak (fitted and measured √KL) and the gold at it move per 10× the proxy's data, from each seed's
    own curves: the size of the effect goal 2 asks three seeds to put in order, beside the noise it has to beat."""
    return {m: {key: per_decade([(f["seed"], f["proxy_pairs"], f[key]) for f in fits
                                 if f["method"] == m and f["seed"] != "mean" and not f.get("ensemble")])
                for key in ("d_peak", "measured_peak_d", "measured_peak_gold")}
            for m in ("bon", "rl")}


def tenfold_lines(tenfold: dict) -> list[str]:
    """``per_tenfold_data`` in words, a line per method: the effect goal 2 asks three seeds to order, beside its noise.
    A method whose slopes are not all measured (no peak, or too few seeds for an error) gets no line."""
    lines = []
    for m, label in (("rl", "RL"), ("bon", "best-of-n")):
        peak, seen, gold = (tenfold[m][k] for k in ("d_peak", "measured_peak_d", "measured_peak_gold"))
        if all(x["slope"] is not None and math.isfinite(x["se"]) for x in (peak, seen, gold)):
            lines.append(f"  per 10x the proxy's data, within each seed ({label}): fitted peak {peak['slope']:+.2f} ± "
                         f"{peak['se']:.2f} √KL (one seed's scatter {peak['residual_sd']:.2f}; a peak beyond the points "
                         f"reached is extrapolated), measured peak {seen['slope']:+.2f} ± {seen['se']:.2f}, gold at the "
                         f"peak {gold['slope']:+.2f} ± {gold['se']:.2f}")
    return lines


def goals(res: dict, seeds: list[int], sizes: list[int], wall_s: float, rl_walls: list[float]) -> dict:
    """Each goal of issue 37, measured per seed."""
    fits = res["fits"]
    small = sizes[0]

    def fit(method, pairs, seed, ensemble=None):
        return next(f for f in fits if f["method"] == method and f["proxy_pairs"] == pairs and f["seed"] == seed
                    and f.get("ensemble") == ensemble)

    def hump(pairs):
        out = []
        for s in seeds:
            f = fit("rl", pairs, s)
            rise = f["measured_peak_gold"]
            out.append({"seed": s, "peak_gold": rise, "peak_d": f["measured_peak_d"], "final_gold": f["final_gold"],
                        "fall": f["fall"], "proxy_at_peak": f["proxy_at_peak"], "proxy_final": f["proxy_final"],
                        "holds": f["measured_peak_d"] > 0 and rise >= MARGIN and f["fall"] >= MARGIN
                        and f["fall"] >= 0.5 * rise and f["proxy_final"] > f["proxy_at_peak"]})
        return out

    g1 = hump(small)
    humps = {str(n): hump(n) for n in sizes}
    bon_peak = [{"seed": s, "peak_d": fit("bon", small, s)["measured_peak_d"], "final_d": fit("bon", small, s)["final_d"],
                 "fall": fit("bon", small, s)["fall"]} for s in seeds]
    # A curve is one method against one proxy over the seeds (its mean, as drawn); each seed's own fit is reported
    # beside it, but a single run's R² also counts its batch noise and where that run happened to find its hack.
    r2 = [{"method": f["method"], "proxy_pairs": f["proxy_pairs"], "ensemble": f.get("ensemble"), "seed": f["seed"],
           "r2": f["r2"], "has_peak": f["fall"] > 0.02} for f in fits]
    from workbook.goodhart.fits import peaks_in_order

    peaks = {m: [fit(m, n, "mean")["d_peak"] for n in sizes] for m in ("bon", "rl")}
    moves = {m: peaks_in_order(v) for m, v in peaks.items()}
    # What more data did buy here (docs/goodhart.md): the gold at the curve's measured peak, not the √KL of it.
    peak_gold = {m: [fit(m, n, "mean")["measured_peak_gold"] for n in sizes] for m in ("bon", "rl")}
    g3 = []
    ensemble_rows = [r for r in res["rl"] if r.get("ensemble")]
    if ensemble_rows:
        from workbook.goodhart.fits import rl_points

        for s in seeds:
            de, ge, _ = rl_points([r for r in ensemble_rows if r["seed"] == s])
            ds, gs, _ = rl_points([r for r in res["rl"] if r["seed"] == s and r["proxy_pairs"] == small
                                   and not r.get("ensemble")])
            at = min(de[-1], ds[-1])  # the largest KL both reached
            g_e, g_s = float(np.interp(at, de, ge)), float(np.interp(at, ds, gs))
            g3.append({"seed": s, "sqrt_kl": float(at), "ensemble_gold": g_e, "single_gold": g_s,
                       "ensemble_final_sqrt_kl": float(de[-1]), "single_final_sqrt_kl": float(ds[-1]),
                       "holds": g_e > g_s})
    return {
        "1_rl_gold_falls_smallest_proxy": {"per_seed": g1, "holds": all(x["holds"] for x in g1)},
        "1_rl_gold_falls_each_proxy": {"per_size": humps,
                                       "holds": {n: all(x["holds"] for x in v) for n, v in humps.items()}},
        "1_bon_peak_smallest_proxy": {"per_seed": bon_peak,
                                      "holds": all(x["peak_d"] < x["final_d"] and x["fall"] > 0 for x in bon_peak)},
        "2_r2_curves_with_a_peak": {"rows": r2, "holds": all(x["r2"] is not None and x["r2"] >= 0.9
                                                             for x in r2 if x["has_peak"] and x["seed"] == "mean"),
                                    "every_seed_holds": all(x["r2"] is not None and x["r2"] >= 0.9
                                                            for x in r2 if x["has_peak"] and x["seed"] != "mean")},
        "2_peak_moves_with_data": {"d_peak": peaks, "holds": moves},
        "2_peak_gold_rises_with_data": {"peak_gold": peak_gold, "holds": {
            m: all(b > a for a, b in zip(v, v[1:])) for m, v in peak_gold.items()}},

        "3_ensemble_beats_single_same_kl": {"per_seed": g3, "holds": bool(g3) and all(x["holds"] for x in g3)},
        "4_time": {"wall_s": wall_s, "longest_rl_run_s": max(rl_walls) if rl_walls else None,
                   "holds": wall_s <= 900 and (max(rl_walls) if rl_walls else 0) <= 120},
    }


@command
def main(argv: list[str] | None = None) -> int:
    p = make_parser("python benchmarks/goodhart.py", __doc__.split("\n\n")[0])
    add_seeds_option(p, [0, 1, 2], "one goodhart run per seed")
    add_impl_option(p, "solutions")
    p.add_argument("--runs-dir", default="runs/goodhart-bench", help="one run folder per seed below it, and goodhart.png")
    p.add_argument("--overwrite", action="store_true", help="replace the seeds' run folders of an earlier benchmark")
    p.add_argument("--workers", type=int, default=2, help="seeds run at once, one process each (default: 2, the cores)")
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="a goodhart option for every seed, e.g. --set rl_iterations=60 (repeatable)")
    options = p.parse_args(argv)
    require_unique_seeds(options.seeds)
    require_at_least("--workers", options.workers, 1)
    from workbook.cli import parse_overrides
    from workbook.goodhart.run import GoodhartArgs, validate

    overrides = parse_overrides(options.set, GoodhartArgs, skip=("impl", "runs_dir", "run_name", "overwrite", "resume",
                                                                 "wandb", "progress"))
    args = GoodhartArgs(**({"impl": options.impl} | overrides))
    validate(args, options.seeds)
    options.extra = [x for k, v in overrides.items() for x in (f"--{k.replace('_', '-')}", str(v))]
    for s in options.seeds:
        check_new_run_dir(options.runs_dir, f"seed{s}", options.overwrite)

    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=options.workers) as pool:
        per_seed = list(pool.map(lambda s: run_seed(s, options), options.seeds))
    wall_s = time.perf_counter() - t0
    cpu_s = resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime + resource.getrusage(resource.RUSAGE_CHILDREN).ru_stime

    from workbook.goodhart.figure import draw
    from workbook.goodhart.fits import fit_rows
    from workbook.goodhart.measure import load_part11

    res = {"gold": per_seed[0]["results"]["gold"], "rl_algo": args.rl_algo,
           **{k: [row for s in per_seed for row in s["results"][k]] for k in ("proxies", "bon", "rl")}}
    res["fits"] = fit_rows(load_part11(options.impl), res["bon"], res["rl"])
    draw(res, Path(options.runs_dir) / "goodhart.png", args, source="benchmarks/goodhart.py")
    rl_wall = [w for s in per_seed for w in s["rl_wall_s"].values() if w is not None]
    res["goals"] = goals(res, options.seeds, args.sizes(), wall_s, rl_wall)
    res["per_tenfold_data"] = per_tenfold_data(res["fits"])
    res.update({"seeds": options.seeds, "wall_s": wall_s, "cpu_s": cpu_s, "rl_wall_s": rl_wall,
                "per_seed_wall_s": {s["seed"]: s["wall_s"] for s in per_seed},
                "load_average": os.getloadavg(), "figure": str(Path(options.runs_dir) / "goodhart.png")})
    print(f"\nwhole benchmark {wall_s:.0f} s wall ({cpu_s:.0f} CPU s), load average {os.getloadavg()[0]:.1f}; "
          f"one RL run {min(rl_wall):.0f}–{max(rl_wall):.0f} s" if rl_wall else "")
    for name, goal in res["goals"].items():
        print(f"  goal {name}: {'holds' if goal['holds'] is True or (isinstance(goal['holds'], dict) and all(goal['holds'].values())) else 'does not hold'}")
    for line in tenfold_lines(res["per_tenfold_data"]):
        print(line)
    print(json.dumps(res), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
