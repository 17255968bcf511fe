"""How fast does the reference PPO solve CartPole-v1? (A benchmark, not a test.)

    python benchmarks/cartpole.py --seeds 3                  # the default PPOArgs
    python benchmarks/cartpole.py --seeds 3 --config cleanrl # CleanRL's ppo.py settings, our code
    python benchmarks/cartpole.py --set num_envs=16 --set learning_rate=1e-3

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

import argparse
import json
import statistics
import sys
import time
from dataclasses import fields
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402

CONFIGS = {
    "default": {},
    # CleanRL's ppo.py defaults for CartPole-v1 (500k steps, 4 envs × 128 steps, lr 2.5e-4,
    # 4 epochs of 4 minibatches, and the same γ, λ, ε, c₁, c₂, gradient clip as ours).
    "cleanrl": dict(num_envs=4, num_steps_per_rollout=128, total_timesteps=500_000, learning_rate=2.5e-4,
                    num_minibatches=4, batches_per_learning_phase=4),
}


def parse_overrides(items: list[str], args_cls) -> dict:
    types = {f.name: f.type for f in fields(args_cls)}
    out = {}
    for item in items:
        key, _, value = item.partition("=")
        if key not in types:
            raise SystemExit(f"--set {item}: unknown PPOArgs field {key!r}")
        kind = types[key] if isinstance(types[key], type) else eval(types[key])  # annotations are strings
        out[key] = kind(float(value)) if kind is int else kind(value)
    return out


def run_seed(module, overrides: dict, seed: int, eval_every_return: float, criterion: str = "greedy") -> dict:
    from workbook.cartpole.evaluate import SOLVED_RETURN, evaluate_greedy

    args = module.PPOArgs(**(overrides | {"seed": seed}))
    trainer = module.PPOTrainer(args)
    recent: list[float] = []
    result = {"seed": seed, "solved": False, "env_steps": None, "wall_s": None, "evaluations": 0}
    start = time.perf_counter()

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

    trainer.train(on_phase_end)
    wall = time.perf_counter() - start
    if not result["solved"]:
        result.update(env_steps=trainer.agent.step, wall_s=wall)
    result["sps"] = result["env_steps"] / result["wall_s"]
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=3, help="seeds 1..N")
    parser.add_argument("--config", choices=sorted(CONFIGS), default="default")
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE", help="override a PPOArgs field")
    parser.add_argument("--eval-when-return", type=float, default=200.0,
                        help="evaluate after a phase whose last 10 training episodes average at least this")
    parser.add_argument("--criterion", choices=("greedy", "training"), default="greedy",
                        help="greedy: 20-episode greedy evaluation mean >= 475 (default); training: the last 20 "
                             "training episodes (sampled actions) average >= 475, as CleanRL's logged returns")
    parser.add_argument("--impl", choices=("solutions", "exercises"), default="solutions")
    args = parser.parse_args(argv)

    torch.set_num_threads(1)
    torch.distributions.Distribution.set_default_validate_args(False)  # saves ~20% of each rollout step
    import importlib

    module = importlib.import_module(f"{args.impl}.part2_cartpole")
    overrides = CONFIGS[args.config] | parse_overrides(args.set, module.PPOArgs)
    print(f"config {args.config}: {module.PPOArgs(**overrides)}", flush=True)
    results = []
    for seed in range(1, args.seeds + 1):
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
        "per_seed": [{k: (round(v, 2) if isinstance(v, float) else v) for k, v in r.items()} for r in results],
    }
    print(json.dumps(summary))
    return 0 if summary["solved"] == args.seeds else 1


if __name__ == "__main__":
    sys.exit(main())
