"""The options of the environment commands (``cartpole``, Part 4's ``continuous``, Part 8's ``atari``).

What a command differs in (:class:`Task`), its command line (:func:`parse_args`), the check of
every setting before anything is loaded or written (:func:`check_settings`, :func:`check_env`),
the run folders' names, and what ``--resume`` keeps and may change (:func:`resume_settings`).
The training itself, which all three commands share too, is ``train.py``'s.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from workbook.cli import (add_impl_option, add_seeds_option, make_parser, parse_overrides, require, require_at_least,
                          require_divides, require_in, require_unique_seeds)
from workbook.runs import WANDB_MODES, ConfigError


@dataclasses.dataclass
class Task:
    """What each environment command (``cartpole``, ``continuous``, ``atari``) does its own way; the rest is shared."""

    name: str
    """The command's name (``python -m workbook NAME``) and the run folders' default prefix."""
    part: str
    """The part's module, e.g. ``part2_cartpole``: ``exercises.<part>`` or ``solutions.<part>`` is trained."""
    description: str
    make_trainer: Callable[[Any, Any], Any]
    """(module, args) → a trainer with ``train(on_phase_end)``, ``actor``, ``agent.step``."""
    evaluate: Callable[..., np.ndarray]
    """(module, trainer, episodes, seed) → evaluation returns; a ``give_up_below=None`` keyword, when it takes
    one, lets the solve check stop early (see ``evaluate_greedy``)."""
    solved_return: Callable[[str], float]
    """env_id → the mean greedy return that counts as solved."""
    checkpoint: Callable[[Any], dict]
    """trainer → what agent.pt holds besides the args and the evaluation returns."""
    greedy_action: Callable[[Any, Any], Callable[[torch.Tensor], Any]]
    """(module, trainer) → one observation → the action to take, for the video."""
    check_env: Callable[[str], None]
    add_options: Callable[[argparse.ArgumentParser], None] = lambda parser: None
    overrides: Callable[[argparse.Namespace], dict] = lambda options: {}
    """Settings the command's own options imply (``--env``), applied before ``--set``."""
    ylim: tuple[float, float] | None = None
    args_class: str = "PPOArgs"
    """The arguments dataclass in the part's module."""
    run_prefix: Callable[[Any], str] | None = None
    """args → the run folders' default prefix (default: ``name``)."""
    run_name_pattern: str = "cartpole"
    """How ``--help`` describes that prefix."""
    video_modules: tuple[str, ...] = ("moviepy", "pygame")
    """What ``--video`` needs installed (checked before training): moviepy writes the MP4, pygame draws classic control."""
    video: Callable[[Any, Any, Path, int], Path | None] | None = None
    """(module, trainer, folder, seed) → the MP4 of one episode, for tasks that film their own way (Atari)."""
    eval_label: str = "greedy evaluation"
    """How the final evaluation picks its actions, as the summary line says it."""
    check_fraction: float = 0.8
    """Run the greedy solve check once the last 10 training episodes average this fraction of the goal."""
    solve_checks: bool = True
    """Check for a solve while training and stop at the first pass (``--full-budget``: never stop early). False
    (Atari): no checks, every run trains its whole budget, as the benchmark's do."""
    goal_label: Callable[[float], str] = lambda goal: f"solved ({goal:g}, greedy)"
    """The goal line's legend on the curves: what the goal is and how it is measured."""
    goal_words: tuple[str, str] = ("SOLVED", "not solved")
    """What the summary line says when the evaluation reaches the goal, and when not."""
    video_help: str = "record one greedy episode"
    total_timesteps_help: str = "override PPOArgs.total_timesteps"


def parse_args(argv: list[str] | None, ppo_args: type, task: Task) -> argparse.Namespace:
    """The command line of ``task``'s command; ``overrides``: the ``ppo_args`` fields its options set."""
    parser = make_parser(f"python -m workbook {task.name}", task.description)
    add_impl_option(parser, "exercises", f"whose {task.part} to train: yours (exercises) or the reference (solutions)")
    task.add_options(parser)
    add_seeds_option(parser, [1], "one run per seed, e.g. --seeds 1 2 3")
    parser.add_argument("--total-timesteps", type=int, default=None, help=task.total_timesteps_help)
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                        help=f"override any {task.args_class} field, e.g. --set learning_rate=1e-3 (repeatable)")
    parser.add_argument("--wandb", choices=WANDB_MODES, default="offline",
                        help="offline (default: written under the run directory, no account needed), online, or disabled")
    parser.add_argument("--wandb-project", default="ppo-rlhf-workbook", help="the wandb project (default: %(default)s)")
    parser.add_argument("--run-name", default=None, help=f"default: {task.run_name_pattern}-<impl>-seed<seed>-<time>"
                        " (with several seeds: <run-name>-seed<seed>)")
    parser.add_argument("--runs-dir", default="runs", help="parent directory of the run directories")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing run of the same name (default: refuse)")
    parser.add_argument("--video", action="store_true",
                        help=f"{task.video_help} (needs {' and '.join(task.video_modules)}: pip install -e '.[video]')")
    parser.add_argument("--eval-episodes", type=int, default=20, help="evaluation episodes at the end (≥ 1)")
    parser.add_argument("--no-progress", action="store_true",
                        help="no progress bar on a terminal, no progress line every 30 s elsewhere")
    parser.add_argument("--checkpoint-every", type=int, default=None, metavar="N",
                        help="write checkpoint.pt every N updates (default: every tenth of the run) and at the end")
    if task.solve_checks:
        parser.add_argument("--full-budget", action="store_true",
                            help="train every step of total_timesteps (default: stop at the first passing solve check)")
    else:
        parser.set_defaults(full_budget=True)  # no solve checks: every run trains its whole budget
    parser.add_argument("--resume", default=None, metavar="RUN_DIR",
                        help="continue the run in RUN_DIR from its checkpoint.pt: same folder, same settings (only "
                             "learning_rate and end_learning_rate may change, with --set), metrics appended, wandb run "
                             "resumed; the environments start new episodes at the resume point")
    args = parser.parse_args(argv)
    args.overrides = task.overrides(args) | parse_overrides(args.set, ppo_args)
    if args.total_timesteps is not None:
        args.overrides["total_timesteps"] = args.total_timesteps
    return args


def check_settings(options: argparse.Namespace, ppo_args: type, task: Task) -> list:
    """Every run's PPOArgs, once each setting is checked; ConfigError names the first bad one."""
    values = {f.name: f.default for f in dataclasses.fields(ppo_args)} | options.overrides
    for name in ("num_envs", "num_steps_per_rollout", "total_timesteps", "num_minibatches", "batches_per_learning_phase"):
        require_at_least(name, values[name], 1)
    for name in ("learning_rate", "clip_coef", "max_grad_norm"):
        require(values[name] > 0, name, f"must be > 0, got {values[name]!r}")
    for name in ("end_learning_rate", "ent_coef", "vf_coef"):
        require_at_least(name, values[name], 0)
    require_in("gamma", values["gamma"], 0, 1, open_low=True)
    require_in("gae_lambda", values["gae_lambda"], 0, 1)
    batch = values["num_envs"] * values["num_steps_per_rollout"]
    require_divides("num_minibatches", values["num_minibatches"], "batch_size = num_envs × num_steps_per_rollout", batch)
    require(values["total_timesteps"] >= batch, "total_timesteps",
            f"{values['total_timesteps']} is less than one rollout (num_envs × num_steps_per_rollout = {batch})")
    require_at_least("--eval-episodes", options.eval_episodes, 1)
    if options.checkpoint_every is not None:
        require_at_least("--checkpoint-every", options.checkpoint_every, 1)
    require_unique_seeds(options.seeds)
    missing = [name for name in task.video_modules if importlib.util.find_spec(name) is None] if options.video else []
    require(not missing, "--video", f"needs {' and '.join(missing)}, not installed: pip install -e '.[video]' "
                                    "(or leave --video out)")
    task.check_env(values["env_id"])
    try:  # the learner's PPOArgs may check more; its ValueError is still one line
        return [ppo_args(**(options.overrides | {"seed": seed})) for seed in options.seeds]
    except ValueError as error:
        raise ConfigError("--set", str(error)) from None


def check_env(env_id: str, continuous: bool = False, field: str = "env_id") -> None:
    """The environment exists and fits the agent: a flat Box observation, and Discrete actions
    (Part 2) or, with ``continuous``, a 1-D Box of actions (Part 4). ``field`` names the option."""
    import gymnasium as gym

    try:
        env = gym.make(env_id)
    except gym.error.Error as error:
        raise ConfigError(field, f"{env_id!r} is not a gymnasium environment ({str(error).splitlines()[0]})") from None
    obs_space, action_space = env.observation_space, env.action_space
    env.close()
    box = isinstance(action_space, gym.spaces.Box) and len(action_space.shape) == 1
    if box != continuous or not (box or isinstance(action_space, gym.spaces.Discrete)):
        hint = {(True, False): " (continuous actions: use Part 4, `python -m workbook continuous`)",
                (False, True): " (Discrete actions: use Part 2, `python -m workbook cartpole`)"}.get((box, continuous), "")
        needs = "a 1-D Box of actions" if continuous else "Discrete actions"
        raise ConfigError(field, f"{env_id} has a {type(action_space).__name__} action space; this agent needs {needs}{hint}")
    require(isinstance(obs_space, gym.spaces.Box) and len(obs_space.shape) == 1, field,
            f"{env_id} has observations {obs_space}; this agent needs a 1-D Box")


def run_names(options: argparse.Namespace, prefix: str = "cartpole") -> list[str]:
    """One run folder name per seed."""
    stamp = time.strftime('%Y%m%d-%H%M%S')
    if options.run_name:
        return [options.run_name] if len(options.seeds) == 1 else [f"{options.run_name}-seed{s}" for s in options.seeds]
    return [f"{prefix}-{options.impl}-seed{s}-{stamp}" for s in options.seeds]


def seeds_plot_name(names: list[str], seeds: list[int]) -> str:
    """The several-seeds figure's file name, from the run folders' names: ``-seed<first>`` becomes ``-seeds``."""
    head, _, tail = names[0].rpartition(f"-seed{seeds[0]}")
    return f"{head}-seeds{tail}.png"


def saved_options(options: argparse.Namespace) -> dict:
    """The command options a checkpoint remembers (a resume reuses those it is not given)."""
    return {k: getattr(options, k) for k in ("impl", "eval_episodes", "checkpoint_every", "full_budget", "wandb",
                                             "wandb_project", "video")}


RESUME_MAY_CHANGE = ("learning_rate", "end_learning_rate")
"""The settings a resumed run may change (``--set``): lowering the learning rate after a NaN."""


def resume_settings(argv: list[str], options: argparse.Namespace, saved: dict, args_cls: type, task: Task) -> list:
    """The resumed run's arguments: the checkpoint's, with only :data:`RESUME_MAY_CHANGE` changed.

    Any other setting given on the command line must match the checkpoint, else ConfigError
    naming it; command options not given (``--eval-episodes``, ``--wandb``...) are the run's.
    """
    given = {token.split("=")[0] for token in argv if token.startswith("--")}
    for option in ("--run-name", "--runs-dir", "--overwrite"):
        require(option not in given, option, "does not apply to --resume (the run continues in its own folder)")
    require("--recipe" not in given, "--recipe", "does not apply to --resume (the run keeps its settings)")
    before = saved["args"]
    conflict = "conflicts with the checkpoint's {} (a resumed run keeps its settings; only " \
               f"{' and '.join(RESUME_MAY_CHANGE)} may change, with --set)"
    require("--impl" not in given or options.impl == saved["impl"], "--impl",
            f"{options.impl} " + conflict.format(saved["impl"]))
    require("--seeds" not in given or options.seeds == [before["seed"]], "--seeds",
            f"{' '.join(map(str, options.seeds))} " + conflict.format(f"seed {before['seed']}"))
    explicit = {name: ("--set", value) for name, value in parse_overrides(options.set, args_cls).items()}
    if "--total-timesteps" in given:
        explicit["total_timesteps"] = ("--total-timesteps", options.total_timesteps)
    if "--env" in given:
        explicit["env_id"] = ("--env", options.env)
    for name, (option, value) in explicit.items():
        if name not in RESUME_MAY_CHANGE and value != before[name]:
            raise ConfigError(option, f"{name}={value} " + conflict.format(f"{name}={before[name]}"))
    for name, value in saved["options"].items():
        if f"--{name.replace('_', '-')}" not in given and name != "impl":
            setattr(options, name, value)
    options.impl, options.seeds = saved["impl"], [before["seed"]]
    changed = {name: value for name, (_, value) in explicit.items() if name in RESUME_MAY_CHANGE}
    check_settings(argparse.Namespace(**{**vars(options), "overrides": before | changed}), args_cls, task)
    phase, total = saved["trainer"]["phase"], before["total_timesteps"] // (before["num_envs"] * before["num_steps_per_rollout"])
    if saved["status"] == "solved" and not options.full_budget:
        raise ConfigError("--resume", f"{options.resume} stopped when solved (step {saved['global_step']}); "
                                      "pass --full-budget to train the rest of its budget")
    require(phase < total, "--resume", f"{options.resume} finished all {total} updates: nothing left to train "
                                       f"(python -m workbook evaluate {options.resume} evaluates it)")
    return [args_cls(**(before | changed))]
