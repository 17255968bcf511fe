"""Probe: one round of refreshing the reward model (iterated RLHF) after a Goodhart measurement.

    python benchmarks/goodhart.py --seeds 0 1 2 --runs-dir runs/goodhart-bench      # first, the measurement
    python benchmarks/goodhart_refresh.py runs/goodhart-bench [--runs-dir runs/goodhart-refresh]

For each seed of the measurement: take the policy PPO ended with against the smallest proxy (the one that
over-optimised it), sample ``--policy-samples`` reviews from it, have the gold label ``--new-pairs`` pairs that each
hold one of them (against a base sample or another of the policy's), train a *refreshed* proxy — Part 3's
RewardModel on the smallest proxy's own pairs plus these — and run the same PPO again, from the base model, against
the refreshed proxy. The question (docs/goodhart.md): more pairs of the base model's writing did not move the gold's
peak out; do pairs from where the policy went? The measurement's folders are only read; everything is written under
``--runs-dir``. JSON last: per seed and for the mean over seeds, the original and the refreshed run's curve (peak gold,
its √KL, the gold at the end), the refreshed proxy's held-out accuracy on base pairs and its score of the old hacks.
"""

from __future__ import annotations

import dataclasses
import json
import random
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from workbook.cli import make_parser, require_at_least  # noqa: E402
from workbook.goodhart.report import finished_runs  # noqa: E402
from workbook.runs import ConfigError, check_can_create, command  # noqa: E402


class Stopped(Exception):
    """An RL run of the probe stopped before its end (Ctrl-C): the probe stops there."""


def policy_pairs(gold: list[float], policy: range, n_pairs: int, seed: int) -> list[tuple[int, int]]:
    """``n_pairs`` distinct gold-labelled pairs (chosen, rejected) of indices into ``gold``, each holding at least one
    index of ``policy`` (the other: any sample); gold ties are skipped."""
    rng, taken, pairs, n = random.Random(seed), set(), [], len(gold)
    for _ in range(50 * n_pairs + 1000):
        if len(pairs) == n_pairs:
            return pairs
        i, j = rng.choice(policy), rng.randrange(n)
        if i == j or gold[i] == gold[j] or frozenset((i, j)) in taken:
            continue
        taken.add(frozenset((i, j)))
        pairs.append((i, j) if gold[i] > gold[j] else (j, i))
    raise ValueError(f"cannot draw {n_pairs} distinct pairs with one of {len(policy)} policy samples")


def curve(points: tuple) -> dict:
    """What an RL run's curve did (``fits.shape`` of its 5-iteration points, as the measurement's fits)."""
    from workbook.goodhart.fits import shape

    return shape(*points)


def refresh_seed(run: Path, out: Path, options, lm, tok) -> dict:
    from workbook.goodhart import measure as m
    from workbook.goodhart.fits import rl_points
    from workbook.goodhart.report import rl_rows
    from workbook.goodhart.run import GoodhartArgs, Stages
    from workbook.lm.model import load_checkpoint

    config = json.loads((run / "config.json").read_text())
    known = {f.name for f in dataclasses.fields(GoodhartArgs)}
    unknown = sorted(set(config["args"]) - known)
    if unknown:  # a run of an older version: its other settings are what this one reads
        print(f"{run}: settings this version does not have, ignored: {', '.join(unknown)}", flush=True)
    a = GoodhartArgs(**({k: v for k, v in config["args"].items() if k in known} | {"wandb": "disabled", "progress": False}))
    seed = config["seeds"][0]
    stage = run / f"seed{seed}"
    small = a.sizes()[0]
    bank = json.loads((stage / "bank.json").read_text())
    proxies = torch.load(stage / "proxies.pt", weights_only=False)
    say = lambda line: print(line, flush=True)  # noqa: E731
    st = Stages(a, seed, out / f"seed{seed}", lm, tok, say)

    hacked, _, _ = load_checkpoint(stage / "rl" / f"pairs{small}" / "policy.pt")
    t0 = time.perf_counter()
    new = m.sample_texts(hacked, tok, m.bank_prompts(options.policy_samples, 100 + seed), max_new_tokens=a.max_new_tokens,
                         seed=100 + seed)
    texts = bank["texts"] + new
    gold = bank["gold"] + st.gold(new).tolist()
    policy = range(len(bank["texts"]), len(texts))
    pairs = st.sized_pairs(bank)[:small] + policy_pairs(gold, policy, options.new_pairs, seed + 23)
    old = st.proxy(proxies, f"pairs{small}")
    info = {"pairs": len(pairs), "member": 0, **st.train(bank, texts, pairs, seed=1_000 * seed + 5),
            "old_heldout_accuracy": proxies[f"pairs{small}"]["heldout_accuracy"],
            "policy_gold": float(np.mean(gold[len(bank["texts"]):]))}
    refreshed = st.proxy({"refreshed": info}, "refreshed")
    info |= {"hacks_scored_by_old": old(new).mean().item(), "hacks_scored_by_refreshed": refreshed(new).mean().item()}
    say(f"seed {seed}: refreshed proxy: {small} base pairs + {options.new_pairs} with the policy's samples (gold "
        f"{info['policy_gold']:+.2f}), held-out accuracy on base pairs {info['heldout_accuracy']:.3f} (old "
        f"{info['old_heldout_accuracy']:.3f}); the hacks scored {info['hacks_scored_by_old']:+.2f} by the old proxy, "
        f"{info['hacks_scored_by_refreshed']:+.2f} by the refreshed ({time.perf_counter() - t0:.0f} s)")
    rows, status = st.rl({"refreshed": info}, bank, "refreshed", False)
    if status != "finished":
        raise Stopped(f"seed {seed}: the refreshed RL run stopped ({status}); its folder keeps what it did "
                      f"({st.out / 'rl' / 'refreshed'}); this probe starts over: run it again with --overwrite")
    base_gold = sum(bank["gold"]) / len(bank["gold"])
    before = [r for r in json.loads((run / "results.json").read_text())["rl"]
              if r["proxy_pairs"] == small and not r.get("ensemble")]
    points = {"original": rl_points(before), "refreshed": rl_points(rl_rows(rows, base_gold))}
    return {"seed": seed, "proxy": {k: v for k, v in info.items() if k != "state"}, "points": points,
            **{k: curve(v) for k, v in points.items()}}


def mean_of(per_seed: list[dict], key: str) -> dict:
    """What the curve over the seeds did (``fits.mean_curve``, as the measurement's ``seed: "mean"`` rows)."""
    from workbook.goodhart.fits import mean_curve

    d, r, _, _, p, _, _ = mean_curve({s["seed"]: s["points"][key] for s in per_seed})
    return curve((d, r, p))


@command
def main(argv: list[str] | None = None) -> int:
    p = make_parser("python benchmarks/goodhart_refresh.py", __doc__.split("\n\n")[0])
    p.add_argument("measurement", help="a goodhart benchmark's --runs-dir (its seed<S>/ run folders), or one goodhart run folder")
    p.add_argument("--runs-dir", default="runs/goodhart-refresh", help="where the refreshed proxies' RL runs go")
    p.add_argument("--new-pairs", type=int, default=1_000, help="gold-labelled pairs with the policy's samples (default 1,000)")
    p.add_argument("--policy-samples", type=int, default=1_000, help="reviews sampled from the over-optimised policy")
    p.add_argument("--overwrite", action="store_true", help="replace an earlier --runs-dir")
    options = p.parse_args(argv)
    require_at_least("--new-pairs", options.new_pairs, 1)
    require_at_least("--policy-samples", options.policy_samples, 2)
    root = Path(options.measurement)
    runs = finished_runs(root)
    out = Path(options.runs_dir)
    here, there = out.resolve(), root.resolve()
    if here == there or here in there.parents or there in here.parents:
        raise ConfigError("--runs-dir", f"{out} must lie outside the measurement it reads ({root})")
    if out.exists() and not options.overwrite:
        raise ConfigError("--runs-dir", f"{out} already exists; pick another --runs-dir or pass --overwrite to replace it")
    check_can_create(out, "--runs-dir")
    if out.exists():
        shutil.rmtree(out)
    torch.set_num_threads(1)
    from workbook.lm.pretrain import load_or_pretrain

    t0 = time.perf_counter()
    try:
        lm, tok = load_or_pretrain(progress=False)
        per_seed = [refresh_seed(run, out / run.name, options, lm, tok) for run in runs]
    except Stopped as stopped:
        print(f"interrupted: {stopped}", flush=True)
        return 130
    except KeyboardInterrupt:  # between the RL runs (sampling, the refreshed proxy's training): nothing half-written
        print(f"interrupted: the RL runs finished so far are in {out}; this probe starts over: run it again with "
              "--overwrite", flush=True)
        return 130
    res = {"per_seed": [{k: v for k, v in s.items() if k != "points"} for s in per_seed],
           "mean": {k: mean_of(per_seed, k) for k in ("original", "refreshed")}, "wall_s": time.perf_counter() - t0}
    for s in per_seed:
        o, f = s["original"], s["refreshed"]
        print(f"seed {s['seed']}: gold peak {o['measured_peak_gold']:+.2f} at √KL {o['measured_peak_d']:.1f} → end "
              f"{o['final_gold']:+.2f}; refreshed: {f['measured_peak_gold']:+.2f} at {f['measured_peak_d']:.1f} → end "
              f"{f['final_gold']:+.2f}")
    print(json.dumps(res), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
