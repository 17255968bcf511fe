"""Train the Part 8 agent on an Atari game with your code (or the reference), log it, and evaluate it.

    python -m workbook atari --env BreakoutNoFrameskip-v4                      # your code
    python -m workbook atari --env ALE/Pong-v5 --impl solutions --seeds 1 2 3
    python -m workbook atari --impl solutions --set total_timesteps=250000 --no-progress
    torchrun --standalone --nproc_per_node=2 -m workbook atari --impl solutions   # data-parallel (Part 6)

The same command as ``python -m workbook cartpole`` (workbook/cartpole/train.py runs both):
each seed writes ``runs/<run-name>/`` with ``metrics.jsonl``, ``learning_curve.png`` (whole-game
scores, unclipped), ``agent.pt`` (the network and the arguments), an offline wandb run, and with
``--video`` one whole game in colour. ``--set FIELD=VALUE`` overrides any field of
``AtariPPOArgs`` (CleanRL's ``ppo_atari.py`` settings by default: 8 games × 128 steps, 10M steps).
The run ends with an evaluation over ``--eval-episodes`` whole games, actions sampled from the
policy (workbook/atari/evaluate.py says why not greedy). Learned: Breakout at ≥ 5× a random
policy's score (8.5), Pong at ≥ 0. The exit status is 0 when every seed got there.

On a CPU a step costs a few milliseconds (the emulator and the convolutions): set
``total_timesteps`` to what fits your time — the learning rate decays to 0 over exactly that
many steps. The full 10M-step run is a GPU job (docs/atari.md).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from workbook import distributed
from workbook.atari.envs import check_atari_env, game_name
from workbook.atari.evaluate import evaluate_atari, record_atari_video, solved_return
from workbook.cartpole.train import Task, run_command
from workbook.runs import ConfigError, command


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


def add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--env", default="BreakoutNoFrameskip-v4", metavar="ENV_ID",
                        help="an ALE game, e.g. BreakoutNoFrameskip-v4 (default), ALE/Breakout-v5, ALE/Pong-v5")
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
    overrides=lambda options: {"env_id": options.env} | device_setting(options.device),
    ylim=None,
    run_prefix=lambda args: game_name(args.env_id).lower(),
    video=lambda module, trainer, folder, seed: record_atari_video(
        trainer.actor, trainer.args.env_id, folder, seed, episodic_life=_life(module, trainer),
        frame_stack=trainer.args.frame_stack),
    eval_label="sampled-action evaluation",
    video_modules=("moviepy",),  # the ALE renders its own frames; RecordVideo writes them with moviepy
    run_name_pattern="<game>",
)


@command
def main(argv: list[str] | None = None) -> int:
    return run_command(argv, ATARI)


if __name__ == "__main__":
    sys.exit(main())
