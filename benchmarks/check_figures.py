"""Check the README's headline figures on your machine: each claim, what it measured, holds or not.

    python benchmarks/check_figures.py            # the quick claims (about 10 minutes on 2 cores)
    python benchmarks/check_figures.py --slow     # every claim (about 70 minutes in all, Atari 16 of them)
    python benchmarks/check_figures.py --only reason-dapo-seed0 base-addition
    make check-figures                            # the same as the first line (SLOW=1 for the second)

This file is the source of truth for the figures: each claim's ``text`` is quoted word for word in
the pages it lists (README.md, docs/…), and ``tests/test_figures.py`` fails when a page no longer
quotes it, so a figure cannot change in the docs without its check changing here.

Each claim is a range measured over seeds and CPU kernel sets (``ATEN_CPU_CAPABILITY=default``,
``avx2``, ``avx512``: what another machine's rounding looks like; docs/base_models.md), not one
machine's number. A claim about wall time also depends on how fast and how busy your machine is:
its range says which machine it came from.

Every claim runs one of the benchmark scripts in a subprocess (each prints JSON last) under
``--runs-dir`` (a new folder each time), then prints one line per claim: ``holds`` or ``does not
hold``, with what it measured. Exit status 0 when every checked claim holds, 1 otherwise. The last
line is one JSON object: ``{"claims": [{"id", "text", "measured", "holds"}, …], "all_hold"}``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from workbook.cli import make_parser, require  # noqa: E402
from workbook.runs import command  # noqa: E402

PY = sys.executable


@dataclass(frozen=True)
class Source:
    """One benchmark command whose JSON answers one or more claims."""

    argv: tuple[str, ...]
    minutes: float
    """About how long it takes on an idle 2-core machine."""


@dataclass(frozen=True)
class Claim:
    id: str
    text: str
    """Quoted word for word in every page of ``pages``."""
    pages: tuple[str, ...]
    source: str
    check: Callable[[dict], tuple[str, bool]]
    """JSON of the source -> (what was measured, in words; whether the claim holds)."""
    slow: bool = False


def _runs(out: dict, **match) -> list[dict]:
    return [r for r in out["runs"] if all(r[k] == v for k, v in match.items())]


def _base(task: str, lo: float, hi: float, pass16_lo: float):
    def check(out: dict) -> tuple[str, bool]:
        (row,) = _runs(out, task=task)
        said = f"pass@1 {row['pass1']:.3f}, pass@16 {row['pass16']:.3f}"
        return said, lo <= row["pass1"] <= hi and row["pass16"] >= pass16_lo
    return check


def _dapo(task: str, lo: float, hi: float, seeds: int):
    def check(out: dict) -> tuple[str, bool]:
        rows = _runs(out, task=task, algo="dapo")
        said = ", ".join(f"seed {r['seed']}: {r['pass1_before']:.3f} → {r['pass1_after']:.3f}" for r in rows)
        return said, len(rows) == seeds and all(lo <= r["pass1_after"] <= hi for r in rows)
    return check


def _multiplication(out: dict) -> tuple[str, bool]:
    rows = _runs(out, task="multiplication", algo="dapo")
    said = ", ".join(f"seed {r['seed']}: pass@1 {r['pass1_before']:.3f} → {r['pass1_after']:.3f}, pass@16 "
                     f"{r['pass16_before']:.3f} → {r['pass16_after']:.3f}" for r in rows)
    return said, len(rows) == 3 and all(r["pass1_after"] - r["pass1_before"] <= 0.10 and r["pass16_after"] < r["pass16_before"]
                                        for r in rows)


def _base_calculator(out: dict) -> tuple[str, bool]:
    (row,) = _runs(out, task="calculator")
    said = f"pass@1 {row['pass1']:.3f}, pass@16 {row['pass16']:.3f}; without the tool pass@1 {row['pass1_no_tool']:.3f}"
    return said, 0.38 <= row["pass1"] <= 0.42 and row["pass16"] >= 0.99 and row["pass1_no_tool"] <= 0.2


def _agents(out: dict) -> tuple[str, bool]:
    tool = [r for r in out["runs"] if r["variant"] == "tool"]
    bare = [r for r in out["runs"] if r["variant"] == "no-tool"]
    said = "; ".join(f"seed {r['seed']}: {r['pass1_before']:.3f} → {r['pass1_after']:.3f} in {r['train_wall_s']:.0f} s"
                     for r in tool) + "; without the tool: " + ", ".join(f"{r['pass1_after']:.3f}" for r in bare)
    return said, (len(tool) == 3 and len(bare) == 3 and all(r["pass1_after"] >= 0.95 for r in tool)
                  and all(r["pass1_after"] <= 0.5 for r in bare))


def _stale(seeds: int, kernels: int):
    """Per seed and kernel set: lag 8 uncorrected ends >= 0.05 below lag 0; sequence_truncate at lag 8 above it (and >= 0.93)."""
    def check(out: dict) -> tuple[str, bool]:
        cells: dict[tuple, dict] = {}
        for r in _runs(out, part="sweep"):
            cells.setdefault((r["seed"], r["kernels"]), {})[(r["lag"], r["correction"])] = r["pass1_after"]
        said, ok = [], len(cells) == seeds * kernels
        for (seed, k), c in sorted(cells.items()):
            lag0, none8, seq8 = c.get((0, "none")), c.get((8, "none")), c.get((8, "sequence_truncate"))
            if None in (lag0, none8, seq8):
                said.append(f"seed {seed} {k}: incomplete")
                ok = False
                continue
            said.append(f"seed {seed} {k}: lag 0 {lag0:.3f}, lag 8 none {none8:.3f}, sequence_truncate {seq8:.3f}")
            ok = ok and lag0 - none8 >= 0.05 and seq8 > none8 and seq8 >= 0.93
        return "; ".join(said), ok
    return check


def _cartpole(out: dict) -> tuple[str, bool]:
    said = f"ours {out['ours_median_wall_s']} s, CleanRL {out['cleanrl_median_wall_s']} s: {out['speedup']}×"
    return said, bool(out["speedup"] and out["speedup"] >= 20)


def _atari(out: dict) -> tuple[str, bool]:
    said = (f"ours {out['ours']['median_return_last20']} over the last 20 games (median of seeds), "
            f"CleanRL {out['cleanrl']['median_return_last20']}")
    return said, out.get("ours_reached_goal") == len(out["seeds"])


def _goodhart_falls(rise: float, fall: float, seeds: int):
    """On every seed and against every proxy: PPO's gold rises by ``rise``, then falls by at least ``fall`` and ends
    below the base policy's gold, while the proxy keeps rising (Goodhart, seen; goal 1 of issue 37 asks the fall
    against the smallest proxy to be at least half the rise as well: the benchmark's own goals)."""
    def check(out: dict) -> tuple[str, bool]:
        per_size = out["goals"]["1_rl_gold_falls_each_proxy"]["per_size"]
        said, ok = [], len(per_size) >= 3
        for n, rows in per_size.items():
            said.append(f"{n} pairs: " + ", ".join(f"{r['peak_gold']:+.2f} → {r['final_gold']:+.2f} (proxy "
                                                    f"{r['proxy_at_peak']:+.2f} → {r['proxy_final']:+.2f})" for r in rows))
            ok = ok and len(rows) == seeds and all(
                r["peak_d"] > 0 and r["peak_gold"] >= rise and r["fall"] >= fall and r["final_gold"] < 0
                and r["proxy_final"] > r["proxy_at_peak"]
                for r in rows)
        return "; ".join(said), ok
    return check


def _goodhart_accuracy(ranges: dict[int, tuple[float, float]]):
    def check(out: dict) -> tuple[str, bool]:
        acc = {n: [p["heldout_accuracy"] for p in out["proxies"] if p["pairs"] == n] for n in ranges}
        said = ", ".join(f"{n} pairs: {min(a):.3f}–{max(a):.3f}" for n, a in acc.items())
        return said, all(a and lo <= min(a) and max(a) <= hi for (lo, hi), a in zip(ranges.values(), acc.values()))
    return check


def _goodhart_peak_gold(out: dict) -> tuple[str, bool]:
    """The curves over the seeds (best-of-n and RL against each proxy): the gold at the measured peak rises with the
    proxy's data."""
    g = out["goals"]["2_peak_gold_rises_with_data"]
    said = "; ".join(f"{m}: " + " / ".join(f"{x:+.2f}" for x in v) for m, v in g["peak_gold"].items())
    return said, len(g["peak_gold"]["rl"]) >= 3 and all(g["holds"].values())


SOURCES = {
    "base": Source(("benchmarks/base_models.py", "--shipped", "--tasks", "addition", "multiplication", "calculator"), 2),
    "dapo-seed0": Source(("benchmarks/reasoning.py", "--tasks", "addition", "--algos", "dapo", "--seeds", "0",
                          "--curve-n", "1", "--no-progress"), 3),
    "dapo-3": Source(("benchmarks/reasoning.py", "--algos", "dapo", "--seeds", "0", "1", "2", "--curve-n", "1",
                      "--no-progress"), 12),
    "async-seed0": Source(("benchmarks/async_rl.py", "--seeds", "0", "--parts", "sweep", "--lags", "0", "8", "--corrections",
                           "none", "sequence_truncate", "--jobs", "2", "--no-progress"), 3),
    "async-3": Source(("benchmarks/async_rl.py", "--seeds", "0", "1", "2", "--parts", "sweep", "--lags", "0", "8",
                       "--corrections", "none", "sequence_truncate", "--kernels", "default", "avx2", "avx512", "--jobs", "2",
                       "--no-progress"), 17),
    "cartpole": Source(("benchmarks/cartpole.py", "--vs-cleanrl", "--seeds", "1", "2", "3"), 2),
    "atari": Source(("benchmarks/atari.py", "--seeds", "1", "--concurrent"), 16),
    "goodhart-seed0": Source(("benchmarks/goodhart.py", "--seeds", "0"), 5),
    "goodhart-3": Source(("benchmarks/goodhart.py", "--seeds", "0", "1", "2"), 10),
    "agents-3": Source(("benchmarks/agents.py", "--seeds", "0", "1", "2", "--curve-n", "1", "--no-ablation",
                        "--no-progress"), 12),
}

CLAIMS = (
    Claim("base-addition", "the shipped addition base model: held-out pass@1 0.54–0.57, pass@16 ≥ 0.98",
          ("README.md", "docs/base_models.md"), "base", _base("addition", 0.54, 0.57, 0.98)),
    Claim("base-multiplication", "the shipped multiplication base model: held-out pass@1 0.31–0.34, pass@16 ≥ 0.72",
          ("docs/base_models.md",), "base", _base("multiplication", 0.31, 0.34, 0.72)),
    Claim("reason-dapo-seed0", "`python -m workbook reason` (DAPO, seed 0) ends at held-out pass@1 ≥ 0.95",
          ("README.md", "docs/reasoning.md"), "dapo-seed0", _dapo("addition", 0.95, 1.0, 1)),
    Claim("reason-dapo", "DAPO lifts held-out pass@1 on three-digit addition from 0.54–0.57 to at least 0.95 "
          "(measured 0.96–0.98) on every seed and kernel set",
          ("README.md", "docs/reasoning.md"), "dapo-3", _dapo("addition", 0.95, 1.0, 3), slow=True),
    Claim("reason-multiplication", "on multiplication pass@1 moves by at most 0.10 and pass@16 falls, on every seed and kernel set",
          ("README.md", "docs/reasoning.md"), "dapo-3", _multiplication, slow=True),
    Claim("base-calculator", "the shipped calculator base model: held-out pass@1 0.38–0.42 with the tool, pass@16 ≥ 0.99",
          ("docs/agents.md", "docs/base_models.md"), "base", _base_calculator),
    Claim("agents-dapo", "with the calculator DAPO lifts held-out pass@1 from about 0.4 to at least 0.95 on every seed; "
          "without it the same training stays at most 0.5",
          ("README.md", "docs/agents.md"), "agents-3", _agents, slow=True),
    Claim("async-lag8-seed0", "with seed 0, uncorrected training at lag 8 ends at least 0.05 below lag 0, and the "
          "sequence-level truncated weight ends above it", ("docs/async_rl.md",), "async-seed0", _stale(1, 1)),
    Claim("async-lag8", "at lag 8, uncorrected training ends 0.06–0.65 below the same seed's lag-0 run (held-out pass@1 "
          "0.31–0.92; lag 0: 0.96–0.98), and the sequence-level truncated weight ends above it, at 0.94–0.96, on every "
          "seed and kernel set", ("README.md", "docs/async_rl.md"), "async-3", _stale(3, 3), slow=True),
    Claim("cartpole-speed", "ours solves CartPole at least 20× faster than CleanRL's `ppo.py`",
          ("README.md", "docs/cartpole.md"), "cartpole", _cartpole),
    Claim("goodhart-seed0", "seed 0: against every proxy (1,000, 3,000 and 10,000 pairs) PPO's gold rises by at least "
          "0.15, then falls by at least 0.4 and ends below the base policy's, while the proxy keeps rising",
          ("docs/goodhart.md",), "goodhart-seed0", _goodhart_falls(0.15, 0.4, 1)),
    Claim("goodhart-proxies", "the proxies' held-out pair accuracy: 0.62–0.76 at 1,000 pairs, 0.72–0.78 at 3,000, "
          "0.80–0.88 at 10,000", ("docs/goodhart.md",), "goodhart-seed0",
          _goodhart_accuracy({1000: (0.62, 0.76), 3000: (0.72, 0.78), 10000: (0.80, 0.88)})),
    Claim("goodhart", "on every seed and kernel set: against every proxy (1,000, 3,000 and 10,000 pairs) PPO's gold "
          "rises by at least 0.15, then falls by at least 0.4 and ends below the base policy's, while the proxy keeps "
          "rising", ("README.md", "docs/goodhart.md"), "goodhart-3", _goodhart_falls(0.15, 0.4, 3), slow=True),
    Claim("goodhart-peak-gold", "on every kernel set, over seeds 0–2: the gold at the peak of the mean curve rises with "
          "the proxy's data, for best-of-n and for RL", ("docs/goodhart.md",),
          "goodhart-3", _goodhart_peak_gold, slow=True),
    Claim("atari-goal", "Breakout reaches ≥ 8.5 points (5× random play) in 15 minutes on every seed measured",
          ("README.md", "docs/atari.md"), "atari", _atari, slow=True),
)


def run_source(name: str, runs_dir: Path) -> dict:
    """Run one benchmark; its JSON last line."""
    argv = list(SOURCES[name].argv)
    if name.startswith(("dapo", "agents", "async", "goodhart")) or name == "atari":  # the benchmarks that write run folders
        argv += ["--runs-dir", str(runs_dir / name)]
    print(f"running {' '.join(argv)}  (about {SOURCES[name].minutes:g} min)", flush=True)
    done = subprocess.run([PY, *argv], cwd=ROOT, capture_output=True, text=True, check=False)
    (runs_dir / f"{name}.log").write_text(done.stdout + done.stderr)
    if done.returncode not in (0, 1):
        raise RuntimeError(f"{argv[0]} failed (exit {done.returncode}); its output: {runs_dir / f'{name}.log'}")
    return json.loads(done.stdout.strip().splitlines()[-1])


@command
def main(argv: list[str] | None = None) -> int:
    p = make_parser("benchmarks/check_figures.py", __doc__.split("\n\n")[0])
    p.add_argument("--slow", action="store_true", help="also the slow claims (every seed, Atari)")
    p.add_argument("--only", nargs="+", default=None, metavar="ID", help=f"these claims ({', '.join(c.id for c in CLAIMS)})")
    p.add_argument("--runs-dir", default=None, help="where the benchmarks' runs go (default: runs/check-figures-<time>)")
    ns = p.parse_args(argv)
    known = {c.id for c in CLAIMS}
    for cid in ns.only or ():
        require(cid in known, "--only", f"no claim {cid!r} (claims: {', '.join(sorted(known))})")
    chosen = [c for c in CLAIMS if (c.id in ns.only if ns.only else ns.slow or not c.slow)]
    runs_dir = Path(ns.runs_dir or f"runs/check-figures-{time.strftime('%Y%m%d-%H%M%S')}")
    require(not runs_dir.exists(), "--runs-dir", f"{runs_dir} already exists; pick another")
    runs_dir.mkdir(parents=True)
    minutes = sum(SOURCES[s].minutes for s in {c.source for c in chosen})
    print(f"checking {len(chosen)} claims, about {minutes:g} minutes on an idle 2-core machine; logs in {runs_dir}", flush=True)
    outputs: dict[str, dict] = {}
    results = []
    for claim in chosen:
        if claim.source not in outputs:
            outputs[claim.source] = run_source(claim.source, runs_dir)
        measured, holds = claim.check(outputs[claim.source])
        results.append({"id": claim.id, "text": claim.text, "measured": measured, "holds": holds})
        print(f"{'holds        ' if holds else 'DOES NOT HOLD'}  {claim.text}\n               measured: {measured}", flush=True)
    all_hold = all(r["holds"] for r in results)
    print(f"{sum(r['holds'] for r in results)} of {len(results)} claims hold on this machine")
    print(json.dumps({"claims": results, "all_hold": all_hold}))
    return 0 if all_hold else 1


if __name__ == "__main__":
    sys.exit(main())
