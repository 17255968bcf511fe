"""Train the Part 4 agent on a MuJoCo task with your code (or the reference), log it, and evaluate it.

    python -m workbook continuous --env InvertedPendulum-v5                  # your code
    python -m workbook continuous --env Hopper-v5 --impl solutions --seeds 1 2 3
    python -m workbook continuous --env HalfCheetah-v5 --impl solutions --set total_timesteps=300000

The same command as ``python -m workbook cartpole`` (workbook/cartpole/train.py runs both):
each seed writes ``runs/<run-name>/`` with ``metrics.jsonl``, ``learning_curve.png``,
``agent.pt``, an offline wandb run, and with ``--video`` one greedy episode. What differs:
``--env`` picks the task and its preset (:data:`PRESETS`; ``--set FIELD=VALUE`` overrides any
field of ``ContinuousPPOArgs``); ``agent.pt`` also holds both normalisers' statistics, without
which the saved actor would see inputs on the wrong scale; and the greedy evaluation (20
episodes) takes the mean action of observations normalised with those statistics frozen.
Solved: InvertedPendulum-v5 ≥ 950, Hopper-v5 ≥ 2000, HalfCheetah-v5 ≥ 1500 (our benchmarks'
goals). The exit status is 0 when every seed solved it, else 1 (0 under torchrun, where rank 0
says "not solved" in one line: torchrun would report a 1 as a crash).
"""

from __future__ import annotations

import argparse
import os
import sys

from workbook import distributed
from workbook.cartpole.options import Task, check_env
from workbook.cartpole.train import run_command
from workbook.continuous.evaluate import SOLVED_RETURN, evaluate_continuous, greedy_policy
from workbook.runs import command

PRESETS: dict[str, dict] = {
    # A short task: 8 envs, small batches, a high learning rate — solved in ~20k steps.
    "InvertedPendulum-v5": dict(num_envs=8, num_steps_per_rollout=128, total_timesteps=100_000, learning_rate=3e-3,
                                num_minibatches=4, batches_per_learning_phase=4),
    # CleanRL's ppo_continuous_action.py settings, its 2048-step batch gathered by 8 envs × 256 steps
    # (one batched network call serves all 8).
    "Hopper-v5": dict(num_envs=8, num_steps_per_rollout=256, total_timesteps=1_000_000),
    "HalfCheetah-v5": dict(num_envs=8, num_steps_per_rollout=256, total_timesteps=1_000_000),
}
"""Settings per task on top of ContinuousPPOArgs' defaults (which are CleanRL's)."""


def add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--env", default="InvertedPendulum-v5", metavar="ENV_ID",
                        help=f"a gymnasium id with Box actions; presets for {', '.join(PRESETS)} (default: %(default)s)")


def video_action(module, trainer):
    """One observation → its greedy action (for the video), with the trainer's frozen normaliser."""
    act = greedy_policy(trainer.actor, trainer.obs_normalizer, module.clip_action, trainer.args.env_id)
    return lambda obs: act(obs[None])[0]


CONTINUOUS = Task(
    name="continuous", part="part4_continuous", args_class="ContinuousPPOArgs",
    description="Train the Part 4 Gaussian-policy PPO agent on a MuJoCo task.",
    make_trainer=distributed.continuous_trainer,  # data-parallel under torchrun, else ContinuousPPOTrainer(args)
    evaluate=lambda module, trainer, episodes, seed, give_up_below=None: evaluate_continuous(
        trainer.actor, trainer.obs_normalizer, module.clip_action, trainer.args.env_id, episodes, seed, give_up_below),
    solved_return=lambda env_id: SOLVED_RETURN.get(env_id, float("inf")),
    checkpoint=lambda trainer: trainer.state_dict(),
    greedy_action=video_action,
    check_env=lambda env_id: check_env(env_id, continuous=True, field="--env"),
    add_options=add_options,
    overrides=lambda options: PRESETS.get(options.env, {}) | {"env_id": options.env},
    run_prefix=lambda args: args.env_id.split("-")[0].lower(),
    run_name_pattern="<env, e.g. invertedpendulum>",
    video_modules=("moviepy",),  # MuJoCo renders with OpenGL (MUJOCO_GL), checked when the video is recorded
)


@command
def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("MUJOCO_GL", "egl")  # headless rendering for --video
    return run_command(argv, CONTINUOUS)


if __name__ == "__main__":
    sys.exit(main())
