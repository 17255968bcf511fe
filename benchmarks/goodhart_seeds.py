"""How many seeds a Goodhart measurement needs to put the peaks in order of data: a bootstrap over its own seeds.

    python benchmarks/goodhart.py --seeds 0 1 2 3 4 5 6 7 8 9 10 11 --runs-dir runs/goodhart-12   # first, the measurement
    python benchmarks/goodhart_seeds.py runs/goodhart-12 [--seed-counts 3 6 12 24 48] [--draws 200]

Goal 2 of issue 37 asks that the fitted peak of each method's mean curve (the mean over the seeds, as the figure
draws it) lie at larger √KL the more pairs the proxy learnt from, on three seeds. Whether three seeds can show that
depends on how far the peak moves per 10× the data against how far one seed's peak scatters. This probe reads a
finished measurement (its seed<S>/ run folders; only read), treats its seeds as the population, and for each count
k of ``--seed-counts`` draws k of them with replacement ``--draws`` times: each draw's mean curves are fitted with
Part 11's ``fit_gao`` (the reference), exactly as the measurement fits its own, and the share of draws whose fitted
peaks are in order of data is the chance that a measurement of k seeds shows the order. With no effect the three
peaks come out in order on about 1 draw in 6 (the 6 orders of 3 points; the order is the benchmark's goal 2,
``fits.peaks_in_order``: a largest proxy whose fit never turns down counts as its peak moved out). A share that climbs with k towards 1 is an
effect that more seeds would show; a share that stays near 1/6, or falls towards 0, is no effect, or one the other
way round. The draws are fixed (``random.Random(0)``), so a measurement gives the same figures every time. JSON last.
"""

from __future__ import annotations

import json
import math
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from workbook.cli import make_parser, require, require_at_least  # noqa: E402
from workbook.goodhart.fits import peaks_in_order  # noqa: E402
from workbook.goodhart.report import finished_runs  # noqa: E402
from workbook.runs import command  # noqa: E402

CHANCE = 1 / 6
"""The share of draws in order when the peaks do not move: 1 of the 6 orders of three points."""


def measured_curves(runs: list[Path]) -> tuple[list[int], dict]:
    """The seeds and each single proxy's curves ((method, proxy_pairs) -> seed -> (d, R, proxy)) of finished runs; the
    ensemble's run, if any, is left out (goal 2 is about the single proxies' data)."""
    from workbook.goodhart.fits import curves

    bon, rl = [], []
    for run in runs:
        res = json.loads((run / "results.json").read_text())
        bon += res["bon"]
        rl += [r for r in res["rl"] if not r.get("ensemble")]
    by_curve = {(method, pairs): by_seed for (method, pairs, ensemble), by_seed in curves(bon, rl).items()}
    seeds = sorted({seed for by_seed in by_curve.values() for seed in by_seed})
    return seeds, by_curve


def fitted_peaks(part11, by_curve: dict, method: str, draw: list[int]) -> list[float | None]:
    """The fitted peak of the mean curve over the drawn seeds (a seed drawn twice counts twice), one per proxy size
    (None: the fit never turns down)."""
    from workbook.goodhart.fits import fit, mean_curve

    peaks = []
    for pairs in sorted(p for m, p in by_curve if m == method):
        by_seed = by_curve[(method, pairs)]
        d, r, *_ = mean_curve({i: by_seed[s] for i, s in enumerate(draw)})
        peak = fit(part11, method, d, r)["d_peak"]
        peaks.append(None if peak is None or math.isinf(peak) else peak)
    return peaks


def bootstrap(part11, seeds: list[int], by_curve: dict, counts: list[int], draws: int) -> list[dict]:
    rng = random.Random(0)
    out = []
    for k in counts:
        hits = {"rl": 0, "bon": 0, "both": 0}
        for _ in range(draws):
            draw = [rng.choice(seeds) for _ in range(k)]
            ok = {m: peaks_in_order(fitted_peaks(part11, by_curve, m, draw)) for m in ("rl", "bon")}
            hits["rl"] += ok["rl"]
            hits["bon"] += ok["bon"]
            hits["both"] += ok["rl"] and ok["bon"]
        out.append({"seeds": k, **{f"{m}_in_order": hits[m] / draws for m in ("rl", "bon", "both")}})
    return out


@command
def main(argv: list[str] | None = None) -> int:
    p = make_parser("python benchmarks/goodhart_seeds.py", __doc__.split("\n\n")[0])
    p.add_argument("measurement", help="a goodhart benchmark's --runs-dir (its seed<S>/ run folders), or one goodhart run folder")
    p.add_argument("--seed-counts", type=int, nargs="+", default=[3, 6, 12, 24, 48],
                   help="how many seeds each bootstrap draw holds (default 3 6 12 24 48)")
    p.add_argument("--draws", type=int, default=200, help="bootstrap draws per seed count (default 200)")
    options = p.parse_args(argv)
    for k in options.seed_counts:
        require_at_least("--seed-counts", k, 1)
    require_at_least("--draws", options.draws, 1)
    root = Path(options.measurement)
    runs = finished_runs(root)
    from workbook.goodhart.measure import load_part11

    seeds, by_curve = measured_curves(runs)
    sizes = {m: sorted(p for mm, p in by_curve if mm == m) for m in ("rl", "bon")}
    require(len(sizes["rl"]) >= 2 and sizes["rl"] == sizes["bon"], "measurement",
            f"{root} must hold best-of-n and RL against at least two proxy sizes (it has {sizes})")
    table = bootstrap(load_part11("solutions"), seeds, by_curve, options.seed_counts, options.draws)
    print(f"{len(seeds)} seeds ({', '.join(map(str, seeds))}), proxies of {' / '.join(map(str, sizes['rl']))} pairs; "
          f"share of {options.draws} draws whose mean curves' fitted peaks are in order of data "
          f"(no effect: about {CHANCE:.2f}):")
    for row in table:
        print(f"  {row['seeds']:>3} seeds   RL {row['rl_in_order']:.2f}   best-of-n {row['bon_in_order']:.2f}   "
              f"both {row['both_in_order']:.2f}")
    print(json.dumps({"seeds": seeds, "proxy_pairs": sizes["rl"], "draws": options.draws, "chance": CHANCE,
                      "bootstrap": table}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
