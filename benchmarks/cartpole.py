"""How fast does the reference PPO solve CartPole-v1? (A benchmark, not a test.)

    python benchmarks/cartpole.py --seeds 1 2 3                  # the default PPOArgs
    python benchmarks/cartpole.py --seeds 1 2 3 --config cleanrl # CleanRL's ppo.py settings, our code
    python benchmarks/cartpole.py --set num_envs=16 --set learning_rate=1e-3
    python benchmarks/cartpole.py --vs-cleanrl --seeds 1 2 3     # side by side with CleanRL's own ppo.py

``--vs-cleanrl`` runs, for each seed in turn (interleaved, so both see the same machine load):
ours to the training criterion, CleanRL's ``ppo.py`` (benchmarks/cleanrl/, patched only for
gymnasium 1.x and to stop at the same criterion) in a subprocess, and ours to the greedy
criterion; then it steps gymnasium's vectorised CartPole with random actions to measure the
raw environment rate, and compares our rollout throughput (steps per second of the rollout
phases alone) with it.

For each seed it trains with the reference solutions and, after a learning phase whose recent
training episodes look promising, runs a greedy evaluation over 20 episodes. A seed is solved
at the first evaluation whose mean return is ≥ 475 (``--criterion training`` instead waits
for the last 20 training episodes, with sampled actions, to average ≥ 475: much stricter).
It reports the environment steps and the wall time up to then (training plus evaluation
checks; imports and env creation excluded), and SPS = steps / wall time. The last line is one JSON object for tracking over time.

Single-threaded torch (small networks run faster and steadier on one thread). The wall time
depends on how busy the machine is: compare figures taken on the same machine, quiet.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from workbook.cli import add_impl_option, add_seeds_option, make_parser, parse_overrides, require_unique_seeds  # noqa: E402
from workbook.runs import command  # noqa: E402

CONFIGS = {
    "default": {},
    # CleanRL's ppo.py defaults for CartPole-v1 (500k steps, 4 envs × 128 steps, lr 2.5e-4,
    # 4 epochs of 4 minibatches, and the same γ, λ, ε, c₁, c₂, gradient clip as ours).
    "cleanrl": dict(num_envs=4, num_steps_per_rollout=128, total_timesteps=500_000, learning_rate=2.5e-4,
                    num_minibatches=4, batches_per_learning_phase=4),
}


def run_seed(module, overrides: dict, seed: int, eval_every_return: float, criterion: str = "greedy") -> dict:
    from workbook.cartpole.evaluate import SOLVED_RETURN, evaluate_greedy
    from workbook.typecheck import set_shape_checks

    args = module.PPOArgs(**(overrides | {"seed": seed}))
    trainer = module.PPOTrainer(args)
    recent: list[float] = []
    result = {"seed": seed, "solved": False, "env_steps": None, "wall_s": None, "evaluations": 0}
    rollout = {"s": 0.0, "steps": 0}
    play = trainer.rollout_phase

    def timed_rollout_phase():
        t = time.perf_counter()
        episodes = play()
        rollout["s"] += time.perf_counter() - t
        rollout["steps"] += args.batch_size
        return episodes

    trainer.rollout_phase = timed_rollout_phase
    start, start_cpu = time.perf_counter(), time.process_time()

    def on_phase_end(report) -> bool:
        recent.extend(r for r, _ in report.episodes)
        del recent[:-20]
        if criterion == "training":  # CleanRL-style: the last 20 *training* episodes (stochastic policy)
            if len(recent) == 20 and np.mean(recent) >= SOLVED_RETURN:
                result.update(solved=True, env_steps=report.global_step, wall_s=time.perf_counter() - start)
                return True
            return False
        # Evaluate only when the last training episodes look good (stochastic policy) or no
        # episode finished this phase (long episodes): early failed checks give up fast.
        if (recent and np.mean(recent[-10:]) < eval_every_return) and report.episodes:
            return False
        result["evaluations"] += 1
        returns = evaluate_greedy(trainer.actor, args.env_id, 20, seed=10_000 + seed, give_up_below=SOLVED_RETURN)
        if returns.mean() >= SOLVED_RETURN:
            result.update(solved=True, env_steps=report.global_step, wall_s=time.perf_counter() - start)
            return True
        return False

    def on_phase_end_checked_once(report) -> bool:  # as the training command: shape checks in the first phase only
        if report.phase == 1:
            set_shape_checks(False)
        return on_phase_end(report)

    checks_were_on = set_shape_checks(True)
    try:
        trainer.train(on_phase_end_checked_once)
    finally:
        set_shape_checks(checks_were_on)
    wall = time.perf_counter() - start
    result["cpu_s"] = time.process_time() - start_cpu
    if not result["solved"]:
        result.update(env_steps=trainer.agent.step, wall_s=wall)
    result["sps"] = result["env_steps"] / result["wall_s"]
    result["rollout_sps"] = rollout["steps"] / rollout["s"]
    return result


def run_cleanrl(seed: int) -> dict:
    """CleanRL's ppo.py (default settings) in a subprocess, to the training criterion."""
    runner = Path(__file__).resolve().parent / "cleanrl" / "run_ppo.py"
    done = subprocess.run([sys.executable, str(runner), "--seed", str(seed)], capture_output=True, text=True)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        return {"seed": seed, "solved": False, "env_steps": None, "wall_s": None,
                "error": (done.stderr.strip().splitlines() or ["no criterion within 500k steps"])[-1]}
    return {"seed": seed, **json.loads(lines[-1])}


def raw_env_rate(env_id: str, num_envs: int, steps: int = 3000) -> float:
    """Steps per second of the bare vector env (no wrapper) with precomputed random actions."""
    from workbook.cartpole.envs import make_vector_env

    envs = make_vector_env(env_id, num_envs, record_episode_statistics=False)
    actions = np.random.default_rng(0).integers(0, envs.single_action_space.n, size=(steps, num_envs))
    envs.reset(seed=0)
    start = time.perf_counter()
    for a in actions:
        envs.step(a)
    rate = steps * num_envs / (time.perf_counter() - start)
    envs.close()
    return rate


def vs_cleanrl(module, overrides: dict, seeds: list[int], eval_every_return: float) -> dict:
    ours, greedy, theirs = [], [], []
    for seed in seeds:
        ours.append(run_seed(module, overrides, seed, eval_every_return, "training"))
        theirs.append(run_cleanrl(seed))
        greedy.append(run_seed(module, overrides, seed, eval_every_return, "greedy"))
        o, c, g = ours[-1], theirs[-1], greedy[-1]
        print(f"seed {seed}: ours {o['wall_s']:.2f} s / {o['env_steps']} steps ({'solved' if o['solved'] else 'NOT solved'}), "
              f"CleanRL {c['wall_s'] or float('nan'):.2f} s / {c['env_steps']} steps "
              f"({'solved' if c['solved'] else 'NOT solved: ' + c.get('error', '')}); "
              f"ours greedy {g['wall_s']:.2f} s; rollout {o['rollout_sps']:,.0f} steps/s", flush=True)
    args = module.PPOArgs(**overrides)
    raw = raw_env_rate(args.env_id, args.num_envs)
    med = lambda rows, key: statistics.median(r[key] for r in rows) if all(r[key] is not None for r in rows) else None  # noqa: E731
    summary = {
        "mode": "vs-cleanrl", "criterion": "last 20 training episodes >= 475", "seeds": seeds,
        "overrides": overrides,
        "ours_median_wall_s": round(med(ours, "wall_s"), 2), "ours_median_env_steps": med(ours, "env_steps"),
        "cleanrl_median_wall_s": med(theirs, "wall_s") and round(med(theirs, "wall_s"), 2),
        "cleanrl_median_env_steps": med(theirs, "env_steps"),
        "greedy_median_wall_s": round(med(greedy, "wall_s"), 2), "greedy_median_env_steps": med(greedy, "env_steps"),
        "rollout_sps": round(med(ours, "rollout_sps")), "raw_env_sps": round(raw), "num_envs": args.num_envs,
        "solved": {"ours": sum(r["solved"] for r in ours), "greedy": sum(r["solved"] for r in greedy),
                   "cleanrl": sum(r["solved"] for r in theirs)},
        "ours": [_rounded(r) for r in ours], "greedy": [_rounded(r) for r in greedy], "cleanrl": [_rounded(r) for r in theirs],
    }
    summary["speedup"] = summary["cleanrl_median_wall_s"] and round(summary["cleanrl_median_wall_s"] / summary["ours_median_wall_s"], 1)
    summary["rollout_frac_of_raw"] = round(summary["rollout_sps"] / raw, 3)
    summary["ok"] = {"speedup_20x": bool(summary["speedup"] and summary["speedup"] >= 20),
                     "greedy_2s": summary["greedy_median_wall_s"] <= 2.0,
                     "rollout_5pct": summary["rollout_frac_of_raw"] >= 0.05,
                     "every_seed_solves": summary["solved"]["ours"] == len(seeds) and summary["solved"]["greedy"] == len(seeds)}
    print(f"median wall to the training criterion: ours {summary['ours_median_wall_s']} s, CleanRL "
          f"{summary['cleanrl_median_wall_s']} s: {summary['speedup']}x; greedy criterion {summary['greedy_median_wall_s']} s; "
          f"rollout {summary['rollout_sps']:,} steps/s = {summary['rollout_frac_of_raw']:.1%} of the raw "
          f"{summary['raw_env_sps']:,} steps/s ({args.num_envs} envs, random actions)")
    return summary


def _rounded(r: dict) -> dict:
    return {k: (round(v, 2) if isinstance(v, float) else v) for k, v in r.items()}


@command
def main(argv: list[str] | None = None) -> int:
    parser = make_parser("benchmarks/cartpole.py", __doc__.split("\n\n")[0])
    add_seeds_option(parser, [1, 2, 3], "one training run per seed")
    parser.add_argument("--config", choices=sorted(CONFIGS), default="default")
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE", help="override a PPOArgs field")
    parser.add_argument("--eval-when-return", type=float, default=200.0,
                        help="evaluate after a phase whose last 10 training episodes average at least this")
    parser.add_argument("--criterion", choices=("greedy", "training"), default="greedy",
                        help="greedy: 20-episode greedy evaluation mean >= 475 (default); training: the last 20 "
                             "training episodes (sampled actions) average >= 475, as CleanRL's logged returns")
    add_impl_option(parser, "solutions")
    parser.add_argument("--vs-cleanrl", action="store_true",
                        help="interleave ours with CleanRL's ppo.py per seed (training criterion), plus the greedy "
                             "criterion and the raw vector-env rate")
    args = parser.parse_args(argv)
    require_unique_seeds(args.seeds)

    torch.set_num_threads(1)
    torch.distributions.Distribution.set_default_validate_args(False)  # saves ~20% of each rollout step
    import importlib

    module = importlib.import_module(f"{args.impl}.part2_cartpole")
    overrides = CONFIGS[args.config] | parse_overrides(args.set, module.PPOArgs)
    shown = module.PPOArgs(**overrides)
    print(f"config {args.config}, seeds {' '.join(map(str, args.seeds))}: " + ", ".join(
        f"{f.name}={getattr(shown, f.name)!r}" for f in dataclasses.fields(shown) if f.name != "seed"), flush=True)
    if args.vs_cleanrl:
        summary = vs_cleanrl(module, overrides, args.seeds, args.eval_when_return)
        print(json.dumps(summary))
        return 0 if all(summary["ok"].values()) else 1
    results = []
    for seed in args.seeds:
        r = run_seed(module, overrides, seed, args.eval_when_return, args.criterion)
        results.append(r)
        print(f"seed {seed}: {'solved' if r['solved'] else 'NOT solved'} at {r['env_steps']} env steps, "
              f"{r['wall_s']:.1f} s, {r['sps']:.0f} steps/s, {r['evaluations']} evaluations", flush=True)
    summary = {
        "config": args.config,
        "criterion": args.criterion,
        "overrides": overrides,
        "seeds": args.seeds,
        "solved": sum(r["solved"] for r in results),
        "median_wall_s": round(statistics.median(r["wall_s"] for r in results), 2),
        "median_env_steps": statistics.median(r["env_steps"] for r in results),
        "median_sps": round(statistics.median(r["sps"] for r in results)),
        "median_rollout_sps": round(statistics.median(r["rollout_sps"] for r in results)),
        "per_seed": [_rounded(r) for r in results],
    }
    print(json.dumps(summary))
    return 0 if summary["solved"] == len(args.seeds) else 1


if __name__ == "__main__":
    sys.exit(main())
