"""How fast does the reference Part 4 agent learn MuJoCo control? (A benchmark, not a test.)

    python benchmarks/continuous.py --env InvertedPendulum-v5          # seeds 1-3, our preset
    python benchmarks/continuous.py --env Hopper-v5
    python benchmarks/continuous.py --env Hopper-v5 --config cleanrl   # CleanRL's defaults, our code
    python benchmarks/continuous.py --env Hopper-v5 --set num_envs=8 --seeds 1
    python benchmarks/cleanrl/run_ppo.py --script ppo_continuous_action.py --env-id Hopper-v5 --cuda false --seed 1
                                                                       # CleanRL's own script (baseline)

For each seed it trains the reference solutions with the env's preset (the same one
``python -m workbook continuous`` uses) and, after a learning phase whose recent training
episodes come within reach of the goal (and at most every ``--eval-gap`` steps), runs a greedy
evaluation over 20 episodes (mean action, observation statistics frozen). A seed is solved at the first evaluation whose mean
return reaches the goal (InvertedPendulum-v5 950, Hopper-v5 2000, HalfCheetah-v5 1500); an
unsolved seed reports a final 20-episode evaluation. Wall time is training plus the
evaluation checks (imports and env creation excluded). The last line is one JSON object.

Single-threaded torch. Wall times depend on how busy the machine is: compare figures taken
on the same machine.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from workbook.continuous.evaluate import SOLVED_RETURN, evaluate_continuous  # noqa: E402
from workbook.cli import add_impl_option, add_seeds_option, make_parser, parse_overrides, require_unique_seeds  # noqa: E402
from workbook.runs import command  # noqa: E402
from workbook.continuous.train import PRESETS  # noqa: E402

# CleanRL's ppo_continuous_action.py defaults (our field names), for the same code side by side.
CLEANRL = dict(num_envs=1, num_steps_per_rollout=2048, total_timesteps=1_000_000, learning_rate=3e-4,
               num_minibatches=32, batches_per_learning_phase=10, ent_coef=0.0)


def run_seed(module, env_id: str, overrides: dict, seed: int, eval_fraction: float, eval_gap: int,
             progress_every: float) -> dict:
    goal = SOLVED_RETURN[env_id]
    args = module.ContinuousPPOArgs(**(overrides | {"env_id": env_id, "seed": seed}))
    trainer = module.ContinuousPPOTrainer(args)
    recent: list[float] = []
    result = {"seed": seed, "solved": False, "env_steps": None, "wall_s": None, "return": None, "evaluations": 0}
    start = last_report = time.perf_counter()
    last_eval_step = -eval_gap

    def evaluate(give_up: bool) -> np.ndarray:
        result["evaluations"] += 1
        return evaluate_continuous(trainer.actor, trainer.obs_normalizer, module.clip_action, env_id, 20,
                                   seed=10_000 + seed, give_up_below=goal if give_up else None)

    def on_phase_end(report) -> bool:
        nonlocal last_report, last_eval_step
        recent.extend(r for r, _ in report.episodes)
        del recent[:-20]
        if progress_every and time.perf_counter() - last_report >= progress_every:
            last_report = time.perf_counter()
            print(f"  seed {seed}: {report.global_step} steps, {last_report - start:.0f} s, last 20 training episodes "
                  f"{np.mean(recent) if recent else float('nan'):.0f}", file=sys.stderr, flush=True)
        promising = recent and np.mean(recent[-10:]) >= eval_fraction * goal
        if not promising or report.global_step - last_eval_step < eval_gap:
            return False
        last_eval_step = report.global_step
        returns = evaluate(give_up=True)
        if returns.mean() >= goal:
            result.update(solved=True, env_steps=report.global_step, wall_s=time.perf_counter() - start,
                          **{"return": float(returns.mean())})
            return True
        return False

    trainer.train(on_phase_end)
    if not result["solved"]:
        returns = evaluate(give_up=False)
        result.update(env_steps=trainer.agent.step, wall_s=time.perf_counter() - start,
                      **{"return": float(returns.mean())})
    result["sps"] = result["env_steps"] / result["wall_s"]
    return result


@command
def main(argv: list[str] | None = None) -> int:
    parser = make_parser("benchmarks/continuous.py", __doc__.split("\n\n")[0])
    parser.add_argument("--env", choices=sorted(PRESETS), default="InvertedPendulum-v5")
    add_seeds_option(parser, [1, 2, 3], "one training run per seed")
    parser.add_argument("--config", choices=("preset", "cleanrl"), default="preset",
                        help="preset: the env's settings in workbook/continuous/train.py (default); cleanrl: "
                             "CleanRL's ppo_continuous_action.py defaults with our code")
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE", help="override a field")
    parser.add_argument("--eval-fraction", type=float, default=0.8,
                        help="evaluate after a phase whose last 10 training episodes average this fraction of the goal")
    parser.add_argument("--eval-gap", type=int, default=None, metavar="STEPS",
                        help="at least this many env steps between two evaluation checks (default: 1%% of "
                             "total_timesteps; a 20-episode Hopper evaluation costs as much as ~10k training steps)")
    add_impl_option(parser, "solutions")
    parser.add_argument("--progress-every", type=float, default=60.0, metavar="SECONDS",
                        help="a progress line on stderr this often (0: none)")
    parser.add_argument("--no-progress", action="store_true", help="no progress lines (the same as --progress-every 0)")
    args = parser.parse_args(argv)
    require_unique_seeds(args.seeds)
    if args.no_progress:
        args.progress_every = 0

    torch.set_num_threads(1)
    torch.distributions.Distribution.set_default_validate_args(False)
    import importlib

    module = importlib.import_module(f"{args.impl}.part4_continuous")
    base = PRESETS[args.env] if args.config == "preset" else CLEANRL
    overrides = base | parse_overrides(args.set, module.ContinuousPPOArgs)
    config = module.ContinuousPPOArgs(**(overrides | {"env_id": args.env}))
    shown = ", ".join(f"{f.name}={getattr(config, f.name)!r}" for f in dataclasses.fields(config) if f.name != "seed")
    print(f"{args.env}, config {args.config}, seeds {args.seeds}: {shown}", flush=True)
    if args.eval_gap is None:
        args.eval_gap = config.total_timesteps // 100
    results = []
    for seed in args.seeds:
        r = run_seed(module, args.env, overrides, seed, args.eval_fraction, args.eval_gap, args.progress_every)
        results.append(r)
        print(f"seed {seed}: {'solved' if r['solved'] else 'NOT solved'}, greedy return {r['return']:.1f} at "
              f"{r['env_steps']} env steps, {r['wall_s']:.1f} s, {r['sps']:.0f} steps/s, {r['evaluations']} evaluations",
              flush=True)
    summary = {
        "env": args.env,
        "config": args.config,
        "overrides": overrides,
        "seeds": args.seeds,
        "solved": sum(r["solved"] for r in results),
        "median_wall_s": round(statistics.median(r["wall_s"] for r in results), 2),
        "median_env_steps": statistics.median(r["env_steps"] for r in results),
        "median_return": round(statistics.median(r["return"] for r in results), 1),
        "per_seed": [{k: (round(v, 2) if isinstance(v, float) else v) for k, v in r.items()} for r in results],
    }
    print(json.dumps(summary))
    return 0 if summary["solved"] == len(args.seeds) else 1


if __name__ == "__main__":
    sys.exit(main())
