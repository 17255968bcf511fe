"""Train the Part 8 agent on an Atari game with your code (or the reference), log it, and evaluate it.

    python -m workbook atari                                   # your code, Breakout, the 15-minute CPU recipe
    python -m workbook atari --impl solutions --seeds 1 2 3
    python -m workbook atari --impl solutions --recipe cleanrl --device cuda   # CleanRL's 10M steps (a GPU job)
    python -m workbook atari --env ALE/Pong-v5 --impl solutions --total-timesteps 500000
    torchrun --standalone --nproc_per_node=2 -m workbook atari --impl solutions   # data-parallel (Part 6)

``--recipe`` (:data:`RECIPES`, the one source benchmarks/atari.py uses too): ``15min`` (the
default) is CleanRL's settings with ``total_timesteps=165000`` (what one CPU core manages in about
15 minutes) and ``learning_rate=5e-4``, so the rate decays to 0 within the run; ``cleanrl`` is
``AtariPPOArgs``' own defaults, CleanRL's ``ppo_atari.py``: 10M steps at 2.5e-4 (about 14 h on a
CPU). ``--total-timesteps`` and ``--set`` override either.

The same command as ``python -m workbook cartpole`` (workbook/cartpole/train.py runs both):
each seed writes ``runs/<run-name>/`` with ``metrics.jsonl``, ``learning_curve.png`` (whole-game
scores, unclipped), ``agent.pt`` (the network and the arguments), an offline wandb run, and with
``--video`` one whole game in colour. ``--set FIELD=VALUE`` overrides any field of
``AtariPPOArgs`` (8 games × 128 steps). Every run trains its whole budget (no solve checks
along the way, unlike ``cartpole``: the training is step for step the benchmark's, docs/atari.md),
then is evaluated over ``--eval-episodes`` whole games, actions sampled from the policy
(workbook/atari/evaluate.py says why not greedy). The goal: Breakout at ≥ 5× a random policy's
score (8.5), Pong at ≥ 0. The exit status is 0 when every seed's evaluation reached it, else 1 (0
under torchrun, where rank 0 says "goal not reached for seed …" in one line); 2 for a bad option or
a stub of yours the run reached (one line naming it), 130 after Ctrl-C, 3 after a NaN or inf.

On a CPU a step costs a few milliseconds (the emulator and the convolutions): the learning rate
decays to 0 over exactly ``total_timesteps`` steps, so set it to what fits your time rather than
stopping a long run early.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from workbook import distributed
from workbook.atari.envs import check_atari_env, game_name
from workbook.atari.evaluate import evaluate_atari, record_atari_video, solved_return
from workbook.cartpole.options import Task
from workbook.cartpole.train import run_command
from workbook.runs import ConfigError, command

RECIPES: dict[str, dict[str, float]] = {
    "15min": {"total_timesteps": 165_000, "learning_rate": 5e-4},
    "cleanrl": {},
}
"""``--recipe`` → the AtariPPOArgs fields it sets. ``15min``: 165k steps (one CPU core's 15 minutes, measured in
docs/atari.md) at twice CleanRL's learning rate, decayed to 0 within the run; ``cleanrl``: AtariPPOArgs' own
defaults, CleanRL's ``ppo_atari.py`` (10M steps at 2.5e-4). benchmarks/atari.py trains the same recipe."""
DEFAULT_RECIPE = "15min"


def atari_trainer(module: Any, args: Any) -> Any:
    """``module.AtariPPOTrainer(args)``, data-parallel under torchrun (as Part 2's, with this part's objective)."""
    ctx = distributed.context()
    if not ctx.enabled:
        return module.AtariPPOTrainer(args)

    class DataParallelAtariTrainer(distributed._DataParallelLoop, module.AtariPPOTrainer):
        def __init__(self) -> None:
            self.ctx, self.report_class = ctx, distributed._phase_report(module.AtariPPOTrainer)
            super().__init__(distributed._local_args(args, ctx))
            distributed.start_equal_and_average_gradients([*self.actor.parameters(), *self.critic.parameters()], ctx)

        def learning_phase(self) -> dict[str, float]:
            minibatches = self.equal_minibatch_count(
                self.memory.get_minibatches(self.agent.next_value(), self.agent.next_done, self.args, self.rng))
            module.learning_phase(self.actor, self.critic, minibatches, self.optimizer, self.scheduler, self.args,
                                  objective=module.compute_atari_objective)
            return ctx.mean(module.learning_stats(self.actor, self.critic, minibatches, self.args,
                                                  self.optimizer.param_groups[0]["lr"]))

    return DataParallelAtariTrainer()


def recipe_text(name: str) -> str:
    values = RECIPES[name]
    if not values:
        return "AtariPPOArgs' defaults (CleanRL's ppo_atari.py: total_timesteps=10000000, learning_rate=2.5e-4)"
    return ", ".join(f"{k}={v:g}" for k, v in values.items())


def add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--env", default="BreakoutNoFrameskip-v4", metavar="ENV_ID",
                        help="an ALE game, e.g. BreakoutNoFrameskip-v4 (default), ALE/Breakout-v5, ALE/Pong-v5")
    parser.add_argument("--recipe", choices=tuple(RECIPES), default=DEFAULT_RECIPE,
                        help=f"15min (default): {recipe_text('15min')}, about 15 minutes on one CPU core; "
                             f"cleanrl: {recipe_text('cleanrl')}, about 14 h on a CPU, a GPU job. "
                             "--total-timesteps and --set override it")
    parser.add_argument("--device", default=None, help="where the network runs: cpu (default) or cuda; the "
                                                       "emulators and the rollout stay on the CPU")


def check_env(env_id: str) -> None:
    problem = check_atari_env(env_id)
    if problem:
        raise ConfigError("--env", problem)


def device_setting(device: str | None) -> dict:
    """``{"device": device}`` once it names a device this machine has (ConfigError otherwise); {} for None."""
    if device is None:
        return {}
    import torch

    try:
        kind = torch.device(device).type
    except RuntimeError:
        raise ConfigError("--device", f"expected cpu or cuda (or cuda:N), got {device!r}") from None
    if kind == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--device", f"{device!r} asked for, but this machine has no CUDA GPU")
    if kind not in ("cpu", "cuda"):
        raise ConfigError("--device", f"expected cpu or cuda (or cuda:N), got {device!r}")
    return {"device": device}


def _life(module: Any, trainer: Any):
    return module.EpisodicLife if trainer.args.episodic_life else None


ATARI = Task(
    name="atari", part="part8_atari", args_class="AtariPPOArgs",
    description="Train the Part 8 Nature-CNN PPO agent on an Atari game (the real ALE; ROMs ship with ale-py).",
    make_trainer=atari_trainer,
    evaluate=lambda module, trainer, episodes, seed: evaluate_atari(
        trainer.actor, trainer.args.env_id, episodes, seed, episodic_life=_life(module, trainer),
        frame_stack=trainer.args.frame_stack),
    solved_return=solved_return,
    checkpoint=lambda trainer: trainer.state_dict(),
    greedy_action=lambda module, trainer: None,
    check_env=check_env,
    add_options=add_options,
    overrides=lambda options: RECIPES[options.recipe] | {"env_id": options.env} | device_setting(options.device),
    ylim=None,
    run_prefix=lambda args: game_name(args.env_id).lower(),
    video=lambda module, trainer, folder, seed: record_atari_video(
        trainer.actor, trainer.args.env_id, folder, seed, episodic_life=_life(module, trainer),
        frame_stack=trainer.args.frame_stack),
    eval_label="sampled-action evaluation",
    solve_checks=False,  # every run trains its whole budget, as the benchmark's do
    goal_label=lambda goal: f"goal {goal:g} ({'5× random, ' if goal > 0 else ''}sampled actions)",
    goal_words=("goal reached", "goal not reached"),
    video_help="record one whole game (actions sampled, as in the evaluation)",
    total_timesteps_help=f"agent steps over the whole run (default: the recipe's, {RECIPES[DEFAULT_RECIPE]['total_timesteps']:,} "
                         "for 15min; the learning rate decays to 0 over exactly these)",
    video_modules=("moviepy",),  # the ALE renders its own frames; RecordVideo writes them with moviepy
    run_name_pattern="<game>",
)


@command
def main(argv: list[str] | None = None) -> int:
    return run_command(argv, ATARI)


if __name__ == "__main__":
    sys.exit(main())
