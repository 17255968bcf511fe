"""Train PPO on CartPole-v1 with your Part 2 code (or the reference), log it, and evaluate it.

    python -m workbook cartpole --impl exercises          # your code (after the Part 2 tests pass)
    python -m workbook cartpole --impl solutions --seeds 1 2 3
    python -m workbook cartpole --impl solutions --wandb online --video
    torchrun --standalone --nproc_per_node=2 -m workbook cartpole --impl solutions   # data-parallel (Part 6)

Each seed writes ``runs/<run-name>/``:
  metrics.jsonl        one line per learning phase (what is also logged to wandb)
  learning_curve.png   episode returns against environment steps (no wandb needed); Part 4 adds σ below
  agent.pt             the final actor and critic (state dicts) and the PPOArgs
  wandb/               the wandb run — offline unless you ask for ``--wandb online``
                       (upload later with ``wandb sync runs/<run-name>/wandb/offline-run-*``)
  video/               with ``--video``: one greedy episode as MP4 (needs ``pip install moviepy pygame``)
With several seeds, ``runs/<run-name>-seeds.png`` (``cartpole-<impl>-seeds-<time>.png`` by
default) draws them together: each seed, their mean, and the band from the lowest to the highest.
Each seed ends with a greedy evaluation over 20 episodes; CartPole-v1 is solved at a mean of ≥ 475.
The exit status is 0 when every seed solved it, else 1 — except under torchrun, which reports
a non-zero exit as a crash: there it is 0 once training finished, and rank 0 prints "not solved
for seed …" in one line. An existing run folder is never overwritten:
reusing a ``--run-name`` is an error unless ``--overwrite`` is given (which replaces the old run).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import importlib.util
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from workbook import distributed
from workbook.cartpole.curves import plot_learning_curve, plot_seeds
from workbook.cartpole.evaluate import SOLVED_RETURN, evaluate_greedy
from workbook.cli import (add_seeds_option, make_parser, parse_overrides, require, require_at_least, require_divides,
                          require_in, require_unique_seeds)
from workbook.runs import WANDB_MODES, ConfigError, check_new_run_dir, command, new_run_dir, start_wandb
from workbook.typecheck import set_shape_checks


@dataclasses.dataclass
class Task:
    """What the CartPole command and Part 4's ``continuous`` command do differently; the rest is shared."""

    name: str
    """The command's name (``python -m workbook NAME``) and the run folders' default prefix."""
    part: str
    """The part's module, e.g. ``part2_cartpole``: ``exercises.<part>`` or ``solutions.<part>`` is trained."""
    description: str
    make_trainer: Callable[[Any, Any], Any]
    """(module, args) → a trainer with ``train(on_phase_end)``, ``actor``, ``agent.step``."""
    evaluate: Callable[[Any, Any, int, int], np.ndarray]
    """(module, trainer, episodes, seed) → greedy returns."""
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


def parse_args(argv: list[str] | None, ppo_args: type, task: Task | None = None) -> argparse.Namespace:
    task = task or CARTPOLE
    parser = make_parser(f"python -m workbook {task.name}", task.description)
    parser.add_argument("--impl", choices=("exercises", "solutions"), default="exercises",
                        help=f"whose {task.part} to train: yours (exercises, default) or the reference (solutions)")
    task.add_options(parser)
    add_seeds_option(parser, [1], "one run per seed, e.g. --seeds 1 2 3")
    parser.add_argument("--total-timesteps", type=int, default=None, help="override PPOArgs.total_timesteps")
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                        help="override any PPOArgs field, e.g. --set learning_rate=1e-3 (repeatable)")
    parser.add_argument("--wandb", choices=WANDB_MODES, default="offline",
                        help="offline (default: written under the run directory, no account needed), online, or disabled")
    parser.add_argument("--wandb-project", default="ppo-rlhf-workbook")
    parser.add_argument("--run-name", default=None, help=f"default: {task.run_name_pattern}-<impl>-seed<seed>-<time>"
                        " (with several seeds: <run-name>-seed<seed>)")
    parser.add_argument("--runs-dir", default="runs", help="parent directory of the run directories")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing run of the same name (default: refuse)")
    parser.add_argument("--video", action="store_true",
                        help=f"record one greedy episode (needs {' and '.join(task.video_modules)}: pip install -e '.[video]')")
    parser.add_argument("--eval-episodes", type=int, default=20, help="evaluation episodes at the end (≥ 1)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar (e.g. in CI logs)")
    args = parser.parse_args(argv)
    args.overrides = task.overrides(args) | parse_overrides(args.set, ppo_args)
    if args.total_timesteps is not None:
        args.overrides["total_timesteps"] = args.total_timesteps
    return args


def check_settings(options: argparse.Namespace, ppo_args: type, task: Task | None = None) -> list:
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
    require_unique_seeds(options.seeds)
    task = task or CARTPOLE
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


def record_video(actor: torch.nn.Module, env_id: str, folder: Path, seed: int,
                 act: Callable[[torch.Tensor], Any] | None = None) -> Path | None:
    """One greedy episode as MP4 with gymnasium's RecordVideo; None (with a hint) without moviepy.

    ``act(observation)`` picks each action (default: the argmax of the actor's logits).
    """
    try:
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")  # headless rendering
        import moviepy  # noqa: F401  (RecordVideo writes the MP4 with it)
    except ImportError as error:
        print(f"--video needs moviepy ({error}): pip install -e '.[video]'; skipping the video")
        return None
    import gymnasium as gym

    try:  # CartPole draws with pygame; MuJoCo renders offscreen with OpenGL (MUJOCO_GL=egl or osmesa)
        env = gym.wrappers.RecordVideo(gym.make(env_id, render_mode="rgb_array"), str(folder), name_prefix="greedy",
                                       episode_trigger=lambda _: True, disable_logger=True)
        obs, _ = env.reset(seed=seed)
        done = False
        with torch.inference_mode():
            while not done:
                obs = torch.as_tensor(obs, dtype=torch.float32)
                action = act(obs) if act is not None else int(actor(obs).argmax())
                obs, _, terminated, truncated, _ = env.step(action)
                done = terminated or truncated
        env.close()
    except Exception as error:  # a missing renderer (pygame, an OpenGL backend) must not lose the trained run
        print(f"--video: cannot render {env_id} ({type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}); "
              "skipping the video")
        return None
    videos = sorted(folder.glob("*.mp4"))
    return videos[-1] if videos else None


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


def train_one(module, options: argparse.Namespace, args, run_name: str, task: Task | None = None) -> dict:
    task = task or CARTPOLE
    seed = args.seed
    if not distributed.is_main():  # under torchrun, the other ranks train and stay quiet
        set_shape_checks(True)  # like rank 0: shapes checked in the first phase only
        task.make_trainer(module, args).train(lambda report: set_shape_checks(False) and False)
        return {"seed": seed, "solved": True}
    print(f"== seed {seed}: {Path(options.runs_dir) / run_name} ==", flush=True)
    trainer = task.make_trainer(module, args)  # first: an unfinished exercise fails here, before anything is written
    run_dir = new_run_dir(options.runs_dir, run_name, options.overwrite)
    run = start_wandb(options.wandb, project=options.wandb_project, run_name=run_name, run_dir=run_dir,
                      config=dataclasses.asdict(args) | {"impl": options.impl})
    episodes: list[tuple[int, float]] = []  # (global step at the end of the phase, return)
    sigma: list[tuple[int, float]] = []  # (global step, policy σ) for a Gaussian policy (Part 4)
    metrics_file = (run_dir / "metrics.jsonl").open("w")
    progress = None
    if not options.no_progress:
        from tqdm import tqdm

        progress = tqdm(total=args.total_phases * args.batch_size, unit="step", unit_scale=True, dynamic_ncols=True,
                        mininterval=0.5, disable=None)  # None: no bar when the output is not a terminal
    start = time.perf_counter()
    steps_done = 0  # global steps (all ranks under torchrun), from the phase reports

    def on_phase_end(report) -> bool:
        nonlocal steps_done
        elapsed = time.perf_counter() - start
        steps_done = report.global_step
        episodes.extend((report.global_step, r) for r, _ in report.episodes)
        if "std" in report.stats:
            sigma.append((report.global_step, float(report.stats["std"])))
        recent = [r for _, r in episodes[-20:]]
        record = {"global_step": report.global_step, "phase": report.phase, "sps": report.global_step / elapsed,
                  **{f"losses/{k}": v for k, v in report.stats.items()}}
        if report.episodes:
            record["charts/episode_return"] = float(np.mean([r for r, _ in report.episodes]))
            record["charts/episode_length"] = float(np.mean([n for _, n in report.episodes]))
        metrics_file.write(json.dumps(record) + "\n")
        if run is not None:
            run.log(record, step=report.global_step)
        if progress is not None:
            progress.update(report.global_step - progress.n)
            if recent:
                progress.set_postfix(ret=f"{np.mean(recent):.0f}", sps=f"{record['sps']:.0f}")
        if report.phase == 1:  # every shape has been checked once; the checks would cost ~10% from here on
            set_shape_checks(False)
        return False

    checks_were_on = set_shape_checks(True)
    try:
        trainer.train(on_phase_end)
    finally:
        set_shape_checks(checks_were_on)
    train_seconds = time.perf_counter() - start
    if progress is not None:
        progress.close()
    metrics_file.close()

    returns = task.evaluate(module, trainer, options.eval_episodes, 10_000 + seed)
    solved_return = task.solved_return(args.env_id)
    solved = bool(returns.mean() >= solved_return)
    print(f"{task.eval_label} over {len(returns)} episodes: mean {returns.mean():.1f} ± {returns.std():.1f} "
          f"(min {returns.min():.0f}) — {'SOLVED' if solved else 'not solved'} "
          f"after {steps_done} steps in {train_seconds:.1f} s", flush=True)

    torch.save(task.checkpoint(trainer) | {"args": dataclasses.asdict(args), "eval_returns": returns.tolist()},
               run_dir / "agent.pt")
    label = task.eval_label.replace("evaluation", "eval")
    plot_learning_curve(episodes, run_dir / "learning_curve.png",
                        f"PPO on {args.env_id} ({options.impl}, seed {seed}): {label} {returns.mean():.0f}",
                        solved_return, task.ylim, sigma)
    video = None
    if options.video and task.video is not None:
        video = task.video(module, trainer, run_dir / "video", seed)
    elif options.video:
        video = record_video(trainer.actor, args.env_id, run_dir / "video", seed, task.greedy_action(module, trainer))
    if run is not None:
        run.summary.update({"eval/mean_return": float(returns.mean()), "eval/solved": solved,
                            "train_seconds": train_seconds})
        if video is not None:
            import wandb

            run.log({"video": wandb.Video(str(video), format="mp4")})
        run.finish()
    print(f"wrote {run_dir}/: metrics.jsonl, learning_curve.png, agent.pt"
          + (", wandb/" if run is not None else "") + (", video/" if video is not None else ""), flush=True)
    return {"seed": seed, "solved": solved, "mean_return": float(returns.mean()), "train_seconds": train_seconds,
            "run_dir": str(run_dir), "episodes": episodes, "sigma": sigma, "solved_return": solved_return}


CARTPOLE = Task(
    name="cartpole", part="part2_cartpole", description="Train PPO on CartPole-v1.",
    make_trainer=distributed.cartpole_trainer,
    evaluate=lambda module, trainer, episodes, seed: evaluate_greedy(trainer.actor, trainer.args.env_id, episodes, seed),
    solved_return=lambda env_id: SOLVED_RETURN,
    checkpoint=lambda trainer: {"actor": trainer.actor.state_dict(), "critic": trainer.critic.state_dict()},
    greedy_action=lambda module, trainer: None,
    check_env=check_env, ylim=(0, 520),
)


@command
def main(argv: list[str] | None = None) -> int:
    return run_command(argv, CARTPOLE)


def run_command(argv: list[str] | None, task: Task) -> int:
    """The whole command for ``task``: parse and check every setting, then train, evaluate, save each seed."""
    torch.set_num_threads(1)  # small networks: one thread is faster and steadier
    torch.distributions.Distribution.set_default_validate_args(False)  # ~20% faster rollouts
    probe = argparse.ArgumentParser(add_help=False)
    probe.add_argument("--impl", default="exercises")
    impl = probe.parse_known_args(argv)[0].impl
    if impl not in ("exercises", "solutions"):
        raise ConfigError("--impl", f"invalid choice {impl!r} (choose from exercises, solutions)")
    module = importlib.import_module(f"{impl}.{task.part}")
    args_cls = getattr(module, task.args_class)
    options = parse_args(argv, args_cls, task)
    all_args = check_settings(options, args_cls, task)
    names = run_names(options, task.run_prefix(all_args[0]) if task.run_prefix else task.name)
    try:
        distributed.init(impl)  # only under torchrun (WORLD_SIZE set); see workbook/distributed.py
    except distributed.Unfinished as error:
        print(error, file=sys.stderr)
        return 2
    for name in names if distributed.is_main() else []:
        check_new_run_dir(options.runs_dir, name, options.overwrite)
    seeds_plot = Path(options.runs_dir) / seeds_plot_name(names, options.seeds) if len(names) > 1 else None
    if seeds_plot is not None and seeds_plot.exists() and not options.overwrite and distributed.is_main():
        raise ConfigError("--run-name", f"{seeds_plot} already exists; pick another --run-name or pass --overwrite")
    results = []
    for args, name in zip(all_args, names):
        try:
            results.append(train_one(module, options, args, name, task))
        except NotImplementedError:
            print(f"{impl}/{task.part}.py (or the parts it uses) still has unfinished exercises: "
                  f"run `pytest tests/test_{task.part}.py` to see which", file=sys.stderr)
            return 2
    if len(results) > 1 and distributed.is_main():
        print("seed  solved  mean return  train s")
        for r in results:
            print(f"{r['seed']:>4}  {str(r['solved']):>6}  {r['mean_return']:>11.1f}  {r['train_seconds']:>7.1f}")
        plot_seeds({r["seed"]: (r["episodes"], r["sigma"]) for r in results}, seeds_plot,
                   f"PPO on {all_args[0].env_id} ({impl})", results[0]["solved_return"], task.ylim)
        print(f"wrote {seeds_plot} (every seed, their mean and spread)")
    if distributed.context().enabled:
        # torchrun reports any rank's non-zero exit as a crash (a ChildFailedError traceback): a finished
        # run that did not solve the task exits 0 here, and rank 0 says so in one line instead.
        unsolved = [r["seed"] for r in results if not r["solved"]]
        if unsolved and distributed.is_main():
            print(f"not solved for seed{'s' * (len(unsolved) > 1)} {' '.join(map(str, unsolved))} (under torchrun the "
                  "exit status is 0 once training finished; the plain command exits 1)", flush=True)
        return 0
    return 0 if all(r["solved"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
