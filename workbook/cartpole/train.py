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
  checkpoint.pt        everything needed to continue (``--resume``), every ``--checkpoint-every`` updates and at the end
  summary.json         the full configuration and the outcome
With several seeds, ``runs/<run-name>-seeds.png`` (``cartpole-<impl>-seeds-<time>.png`` by
default) draws them together: each seed, their mean, and the band from the lowest to the highest.
Each seed ends with a greedy evaluation over 20 episodes; CartPole-v1 is solved at a mean of ≥ 475.
While training, a greedy check runs whenever the recent episodes look good; the run stops at the
first check that passes (``--full-budget`` trains every step instead). The exit status is 0 when
every seed solved it, else 1 — except under torchrun, which reports a non-zero exit as a crash:
there it is 0 once training finished, and rank 0 prints "not solved for seed …" in one line.
After Ctrl-C it is 130, after a NaN or inf 3. An existing run folder is never overwritten:
reusing a ``--run-name`` is an error unless ``--overwrite`` is given (which replaces the old run).

Owning the run afterwards:
    python -m workbook evaluate runs/<run-name> [--episodes 100] [--sample] [--video]
    python -m workbook cartpole --resume runs/<run-name>     # after Ctrl-C, a crash, or to train the full budget
Ctrl-C (or SIGTERM) finishes the update in progress, writes checkpoint.pt, the metrics and the
curve, and prints the line that resumes it (Ctrl-C twice stops at once, from the last finished
update). A resumed run continues the weights, optimizer, learning-rate schedule, normalisers,
step count and random streams; its environments start new episodes.

This module is the training that the three environment commands share (``cartpole``, Part 4's
``continuous``, Part 8's ``atari``); what each does its own way, and their options and checks,
are ``options.py``'s.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import importlib.util
import inspect
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
from workbook.cartpole.options import (Task, check_env, check_settings, parse_args, resume_settings, run_names,
                                       saved_options, seeds_plot_name)
from workbook.checkpoints import (CHECKPOINT, INTERRUPTED, LAYOUT, NON_FINITE, Abandoned, AppendLog, StopSignals,
                                  env_trainer_state, episode_seed, first_non_finite, load_run, non_finite_weights,
                                  restore_env_trainer, save, stop_at_once, write_json)
from workbook.cli import make_parser, require
from workbook.progress import Progress
from workbook.runs import (IMPLS, ConfigError, check_can_create, check_new_run_dir, command, discard_new_run, new_run_dir,
                           start_wandb, stub_error, wandb_sync_line)
from workbook.typecheck import set_shape_checks


def record_video(actor: torch.nn.Module, env_id: str, folder: Path, seed: int,
                 act: Callable[[torch.Tensor], Any] | None = None, name_prefix: str = "greedy") -> Path | None:
    """One greedy episode as MP4 with gymnasium's RecordVideo; None (with a hint) without moviepy.

    ``act(observation)`` picks each action (default: the argmax of the actor's logits);
    the file is ``<folder>/<name_prefix>-episode-0.mp4``.
    """
    try:
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")  # headless rendering
        import moviepy  # noqa: F401  (RecordVideo writes the MP4 with it)
    except ImportError as error:
        print(f"--video needs moviepy ({error}): pip install -e '.[video]'; skipping the video")
        return None
    import gymnasium as gym

    try:  # CartPole draws with pygame; MuJoCo renders offscreen with OpenGL (MUJOCO_GL=egl or osmesa)
        env = gym.wrappers.RecordVideo(gym.make(env_id, render_mode="rgb_array"), str(folder), name_prefix=name_prefix,
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


def train_one(module, options: argparse.Namespace, args, run_name: str, task: Task | None = None,
              resume: dict | None = None) -> dict:
    """Train one seed (or continue ``resume``, a checkpoint) and write its run folder; the outcome as a dict.

    ``status`` in the result: ``solved`` (stopped at a passing check), ``finished`` (the whole
    budget), ``interrupted`` (SIGINT/SIGTERM) or ``non-finite`` (a NaN or inf stopped it).
    """
    task = task or CARTPOLE
    seed = args.seed
    ctx = distributed.context()
    start_phase = resume["trainer"]["phase"] if resume else 0
    if not distributed.is_main():  # under torchrun, the other ranks train and stay quiet; rank 0 decides when to stop
        trainer = task.make_trainer(module, args)
        if resume:
            restore_env_trainer(trainer, resume["trainer"], episode_seed(trainer.args.seed, start_phase))
        set_shape_checks(True)  # like rank 0: shapes checked in the first phase only
        with StopSignals(message=None):  # the signal reaches every rank; only rank 0 acts on it
            trainer.train(lambda report: set_shape_checks(False) and False)
            status = ctx.gather(None)[0]
        return {"seed": seed, "solved": status not in ("interrupted", "non-finite"), "status": status}  # rank 0 reports
    with StopSignals() as stop:  # from here on, Ctrl-C is noted and acted on after the update in progress
        try:
            return _train_main_rank(module, options, args, run_name, task, resume, stop)
        except Abandoned:  # a second Ctrl-C before the first update finished
            print(f"{task.name}: stopped before the first update finished; nothing to save", flush=True)
            return {"seed": seed, "solved": False, "status": "interrupted"}


def _train_main_rank(module, options: argparse.Namespace, args, run_name: str, task: Task, resume: dict | None,
                     stop: StopSignals) -> dict:
    """:func:`train_one` on rank 0 (or in a single process): everything that writes the run folder."""
    seed = args.seed
    ctx = distributed.context()
    start_phase = resume["trainer"]["phase"] if resume else 0
    run_dir = Path(options.resume) if resume else Path(options.runs_dir) / run_name
    trainer = task.make_trainer(module, args)  # first: an unfinished exercise fails here, before anything is written
    if resume:
        restore_env_trainer(trainer, resume["trainer"], episode_seed(trainer.args.seed, start_phase))
    else:
        run_dir = new_run_dir(options.runs_dir, run_name, options.overwrite)
    print(f"== seed {seed}: {run_dir}{f' (resuming at update {start_phase})' if resume else ''} ==", flush=True)
    wandb_id = resume.get("wandb_id") if resume else None
    run = start_wandb(options.wandb, project=options.wandb_project, run_name=run_dir.name, run_dir=run_dir,
                      config=dataclasses.asdict(args) | {"impl": options.impl}, run_id=wandb_id)
    wandb_id = run.id if run is not None else wandb_id
    episodes: list[tuple[int, float]] = list(map(tuple, resume["episodes"])) if resume else []  # (global step, return)
    sigma: list[tuple[int, float]] = list(map(tuple, resume["sigma"])) if resume else []  # (global step, policy σ), Part 4
    metrics = AppendLog(run_dir / "metrics.jsonl", keep=(lambda r: r.get("phase", 0) <= start_phase) if resume else None)
    progress = Progress(args.total_phases * args.batch_size, initial=resume["global_step"] if resume else 0,
                        counter="global_step", prefix=task.name, unit="step", unit_scale=True,
                        enabled=not options.no_progress)
    seconds_before = resume["train_seconds"] if resume else 0.0
    start = time.perf_counter()
    goal = task.solved_return(args.env_id)
    check_gap = max(args.batch_size, args.total_timesteps // 100)  # env steps between two solve checks, at least
    outcome: dict[str, Any] = {"status": "finished", "solved_at": resume.get("solved_at") if resume else None,
                               "check_returns": None, "bad": None}
    last_check = [-check_gap]

    def snapshot(global_step: int) -> dict:
        """The state after the last finished update: what a checkpoint holds."""
        return {"trainer": env_trainer_state(trainer), "episodes": len(episodes), "sigma": len(sigma),
                "global_step": global_step, "train_seconds": seconds_before + time.perf_counter() - start}

    def checkpoint(good: dict, status: str) -> dict:
        return {"layout": LAYOUT, "command": task.name, "impl": options.impl, "args": dataclasses.asdict(args),
                "options": saved_options(options), "trainer": good["trainer"], "episodes": episodes[:good["episodes"]],
                "sigma": sigma[:good["sigma"]],
                "global_step": good["global_step"], "train_seconds": good["train_seconds"], "status": status,
                "solved_at": outcome["solved_at"], "wandb_id": wandb_id, "world_size": ctx.world_size}

    good = snapshot(resume["global_step"] if resume else 0)
    every = options.checkpoint_every or max(1, args.total_phases // 10)

    def on_phase_end(report) -> bool:
        nonlocal good
        elapsed = seconds_before + time.perf_counter() - start
        episodes.extend((report.global_step, r) for r, _ in report.episodes)
        if "std" in report.stats:
            sigma.append((report.global_step, float(report.stats["std"])))
        recent = [r for _, r in episodes[-20:]]
        record = {"global_step": report.global_step, "phase": report.phase, "sps": report.global_step / elapsed,
                  **{f"losses/{k}": v for k, v in report.stats.items()}}
        if report.episodes:
            record["charts/episode_return"] = float(np.mean([r for r, _ in report.episodes]))
            record["charts/episode_length"] = float(np.mean([n for _, n in report.episodes]))
        metrics.write(record)
        if run is not None:
            run.log(record, step=report.global_step)
        progress.update(report.global_step, **({"episodic_return": f"{np.mean(recent):.1f}"} if recent else {}),
                        sps=f"{record['sps']:.0f}")
        if report.phase == start_phase + 1:  # every shape has been checked once; the checks would cost ~10% from here on
            set_shape_checks(False)
        bad = (first_non_finite(record, allowed_nan=("losses/explained_variance",))  # NaN when all returns are equal
               or non_finite_weights(trainer.actor, trainer.critic))
        if bad is not None:
            outcome.update(status="non-finite", bad=(*bad, report.phase))
            return True
        good = snapshot(report.global_step)
        if report.phase % every == 0 and report.phase < args.total_phases:
            save(checkpoint(good, "running"), run_dir / CHECKPOINT)
        if stop.requested:
            outcome["status"] = "interrupted"
            return True
        if (task.solve_checks and outcome["solved_at"] is None and np.isfinite(goal)
                and report.global_step - last_check[0] >= check_gap):
            # Check when the recent (sampled-action) episodes look good, or none ended (long episodes).
            if not report.episodes or (recent and np.mean(recent[-10:]) >= task.check_fraction * goal):
                last_check[0] = report.global_step
                give_up = {"give_up_below": goal} if "give_up_below" in inspect.signature(task.evaluate).parameters else {}
                returns = task.evaluate(module, trainer, options.eval_episodes, 10_000 + seed, **give_up)
                if returns.mean() >= goal:
                    outcome["solved_at"] = report.global_step
                    print(f"solve check passed at step {report.global_step}: {task.eval_label.replace(' evaluation', '')} "
                          f"mean {returns.mean():.1f} ≥ {goal:g}"
                          + ("" if options.full_budget else "; stopping (--full-budget trains every step)"), flush=True)
                    if not options.full_budget:
                        outcome.update(status="solved", check_returns=returns)
                        return True
        return False

    checks_were_on = set_shape_checks(True)
    try:
        try:
            trainer.train(on_phase_end)
        finally:
            set_shape_checks(checks_were_on)
        if ctx.enabled:
            ctx.gather(outcome["status"])  # tells the other ranks why the loop ended
    except Abandoned:  # the second signal: the update in progress is dropped, the last finished one saved
        outcome["status"] = "interrupted"
    except NotImplementedError as error:  # a stub of the learner's, reached in the first update: nothing was trained
        progress.close()
        metrics.close()
        if run is not None:
            run.finish(exit_code=1)
        if not resume and good["global_step"] == 0 and discard_new_run(run_dir):
            error.removed = run_dir  # run_command says so in its one line
        raise
    progress.close()
    metrics.close()
    try:
        return finish_run(module, options, args, task, trainer, run, run_dir, episodes, sigma, outcome,
                          checkpoint(good, outcome["status"]), seconds_before + time.perf_counter() - start)
    except Abandoned:  # a signal again while writing: the checkpoint of the last finished update at least
        save(checkpoint(good, "interrupted"), run_dir / CHECKPOINT)
        print(f"{task.name}: stopped; resume with: python -m workbook {task.name} --resume {run_dir}", flush=True)
        return {"seed": seed, "solved": False, "status": "interrupted", "run_dir": str(run_dir)}


def finish_run(module, options, args, task: Task, trainer, run, run_dir: Path, episodes: list, sigma: list,
               outcome: dict, state: dict, train_seconds: float) -> dict:
    """After the loop: checkpoint, summary, curve; and for a run that ended normally the evaluation, agent.pt, video."""
    seed, status = args.seed, outcome["status"]
    steps_done = state["global_step"]
    summary = {"command": task.name, "status": status, "impl": options.impl, "config": dataclasses.asdict(args),
               "options": saved_options(options) | {"seeds": options.seeds}, "global_step": steps_done,
               "updates": state["trainer"]["phase"], "solved_at_step": outcome["solved_at"],
               "train_seconds": round(train_seconds, 2)}
    save(state, run_dir / CHECKPOINT)
    world = distributed.context().world_size
    launcher = f"torchrun --standalone --nproc_per_node={world}" if world > 1 else "python"
    resume_line = f"{launcher} -m workbook {task.name} --resume {run_dir}"
    solved_return = task.solved_return(args.env_id)
    if status in ("interrupted", "non-finite"):
        write_json(summary, run_dir / "summary.json")
        plot_learning_curve(episodes, run_dir / "learning_curve.png",
                            f"PPO on {args.env_id} ({options.impl}, seed {seed}): {status} at step {steps_done}",
                            solved_return, task.ylim, sigma, goal_label=task.goal_label(solved_return))
        if run is not None:
            run.summary.update({"status": status})
            run.finish(exit_code=1)
        if status == "interrupted":
            print(f"interrupted after update {state['trainer']['phase']} (step {steps_done}); wrote {CHECKPOINT}, "
                  f"metrics.jsonl, learning_curve.png; resume with: {resume_line}", flush=True)
        else:
            stat, value, update = outcome["bad"]
            lr = args.learning_rate / 2
            print(f"error: {stat}: {value} at update {update}; stopped and wrote the last good checkpoint (update "
                  f"{state['trainer']['phase']}); resume from it with a lower learning rate: {resume_line} "
                  f"--set learning_rate={lr:g}", file=sys.stderr, flush=True)
        return {"seed": seed, "solved": False, "status": status, "run_dir": str(run_dir)}

    agent = task.checkpoint(trainer) | {"layout": LAYOUT, "command": task.name, "impl": options.impl,
                                        "args": dataclasses.asdict(args), "global_step": steps_done}
    returns = outcome["check_returns"]
    if returns is None:
        print(f"evaluating the trained agent on {options.eval_episodes} episodes ({task.eval_label}) …", flush=True)
        try:
            with stop_at_once():  # Ctrl-C stops the evaluation itself: training is over and saved
                returns = task.evaluate(module, trainer, options.eval_episodes, 10_000 + seed)
        except Abandoned:
            save(agent, run_dir / "agent.pt")
            write_json(summary | {"evaluation": None}, run_dir / "summary.json")
            plot_learning_curve(episodes, run_dir / "learning_curve.png",
                                f"PPO on {args.env_id} ({options.impl}, seed {seed}): not evaluated",
                                solved_return, task.ylim, sigma, goal_label=task.goal_label(solved_return))
            if run is not None:
                run.finish(exit_code=1)
            print(f"interrupted during the final evaluation; training finished ({steps_done} steps) and is saved in "
                  f"{run_dir}/ (agent.pt, {CHECKPOINT}, metrics.jsonl, learning_curve.png); evaluate it with: "
                  f"python -m workbook evaluate {run_dir}", flush=True)
            return {"seed": seed, "solved": False, "status": "interrupted", "run_dir": str(run_dir)}
    solved = bool(returns.mean() >= solved_return)
    reached, missed = task.goal_words
    when = (f"(stopped when the solve check passed at step {steps_done})" if status == "solved"
            else f"after {steps_done} steps" + (f" (the solve check first passed at step {outcome['solved_at']})"
                                                if outcome["solved_at"] is not None else ""))
    print(f"{task.eval_label} over {len(returns)} episodes: mean {returns.mean():.1f} ± {returns.std():.1f} "
          f"(min {returns.min():.0f}) — {reached if solved else missed} {when}, "
          f"{train_seconds:.1f} s of training", flush=True)
    evaluation = {"episodes": len(returns), "seed": 10_000 + seed, "mean_return": float(returns.mean()),
                  "std_return": float(returns.std()), "min_return": float(returns.min()), "solved": solved}
    save(agent | {"eval_returns": returns.tolist(), "eval_seed": 10_000 + seed}, run_dir / "agent.pt")
    write_json(summary | {"evaluation": evaluation}, run_dir / "summary.json")
    label = task.eval_label.replace("evaluation", "eval")
    plot_learning_curve(episodes, run_dir / "learning_curve.png",
                        f"PPO on {args.env_id} ({options.impl}, seed {seed}): {label} {returns.mean():.1f}",
                        solved_return, task.ylim, sigma, solved_at=outcome["solved_at"],
                        goal_label=task.goal_label(solved_return))
    video = None
    if options.video and task.video is not None:
        video = task.video(module, trainer, run_dir / "video", seed)
    elif options.video:
        video = record_video(trainer.actor, args.env_id, run_dir / "video", seed, task.greedy_action(module, trainer))
    if run is not None:
        run.summary.update({"eval/mean_return": float(returns.mean()), "eval/solved": solved,
                            "train_seconds": train_seconds, "status": status})
        if video is not None:
            import wandb

            run.log({"video": wandb.Video(str(video), format="mp4")})
        run.finish()
    print(f"wrote {run_dir}/: metrics.jsonl, learning_curve.png, agent.pt, {CHECKPOINT}, summary.json"
          + (", wandb/" if run is not None else "") + (", video/" if video is not None else ""), flush=True)
    sync = wandb_sync_line(run_dir)
    if sync:
        print(sync, flush=True)
    print(f"next: python -m workbook evaluate {run_dir}", flush=True)
    return {"seed": seed, "solved": solved, "status": status, "mean_return": float(returns.mean()),
            "train_seconds": train_seconds, "run_dir": str(run_dir), "episodes": episodes, "sigma": sigma,
            "solved_return": solved_return, "solved_at": outcome["solved_at"]}


CARTPOLE = Task(
    name="cartpole", part="part2_cartpole", description="Train PPO on CartPole-v1.",
    make_trainer=distributed.cartpole_trainer,
    evaluate=lambda module, trainer, episodes, seed, give_up_below=None: evaluate_greedy(
        trainer.actor, trainer.args.env_id, episodes, seed, give_up_below),
    solved_return=lambda env_id: SOLVED_RETURN,
    checkpoint=lambda trainer: {"actor": trainer.actor.state_dict(), "critic": trainer.critic.state_dict()},
    greedy_action=lambda module, trainer: None,
    check_env=check_env, ylim=(0, 520), check_fraction=0.4,  # the benchmark's: check once recent episodes reach 200
)


@command
def main(argv: list[str] | None = None) -> int:
    return run_command(argv, CARTPOLE)


def run_command(argv: list[str] | None, task: Task) -> int:
    """The whole command for ``task``: parse and check every setting, then train, evaluate, save each seed."""
    torch.set_num_threads(1)  # small networks: one thread is faster and steadier
    torch.distributions.Distribution.set_default_validate_args(False)  # ~20% faster rollouts
    argv = list(sys.argv[1:] if argv is None else argv)
    probe = make_parser(f"python -m workbook {task.name}", add_help=False)
    probe.add_argument("--impl", default=None)
    probe.add_argument("--resume", default=None)
    known = probe.parse_known_args(argv)[0]
    saved = load_run(known.resume, "--resume", (task.name,)) if known.resume is not None else None
    impl = known.impl or (saved["impl"] if saved else "exercises")
    if impl not in IMPLS:
        raise ConfigError("--impl", f"invalid choice {impl!r} (choose from exercises, solutions)")
    module = importlib.import_module(f"{(saved or {}).get('impl', impl)}.{task.part}")
    args_cls = getattr(module, task.args_class)
    options = parse_args(argv, args_cls, task)
    if saved:
        all_args = resume_settings(argv, options, saved, args_cls, task)
        check_can_create(Path(options.resume) / CHECKPOINT, "--resume")
        names = [Path(options.resume).name]
    else:
        all_args = check_settings(options, args_cls, task)
        names = run_names(options, task.run_prefix(all_args[0]) if task.run_prefix else task.name)
    try:
        distributed.init(impl)  # only under torchrun (WORLD_SIZE set); see workbook/distributed.py
    except distributed.Unfinished as error:
        print(error, file=sys.stderr)
        return 2
    if saved:
        require(saved["world_size"] == distributed.context().world_size, "--resume",
                f"the checkpoint was written by {saved['world_size']} process(es); resume it with as many "
                "(torchrun --nproc_per_node)")
    for name in names if distributed.is_main() and not saved else []:
        check_new_run_dir(options.runs_dir, name, options.overwrite)
    seeds_plot = Path(options.runs_dir) / seeds_plot_name(names, options.seeds) if len(names) > 1 else None
    if seeds_plot is not None and seeds_plot.exists() and not options.overwrite and distributed.is_main():
        raise ConfigError("--run-name", f"{seeds_plot} already exists; pick another --run-name or pass --overwrite")
    results = []
    for args, name in zip(all_args, names):
        try:
            results.append(train_one(module, options, args, name, task, resume=saved))
        except NotImplementedError as error:  # a stub of the learner's: one line, exit status 2 (workbook/runs.py)
            raise stub_error(impl, f"exercises/{task.part}.py", getattr(error, "removed", None)) from None
        if results[-1]["status"] == "interrupted":
            return INTERRUPTED  # no further seeds after Ctrl-C
    if len(results) > 1 and distributed.is_main():
        print("seed  solved  mean return  train s")
        for r in results:
            print(f"{r['seed']:>4}  {str(r['solved']):>6}  {r.get('mean_return', float('nan')):>11.1f}  "
                  f"{r.get('train_seconds', float('nan')):>7.1f}")
        plot_seeds({r["seed"]: (r["episodes"], r["sigma"]) for r in results if "episodes" in r}, seeds_plot,
                   f"PPO on {all_args[0].env_id} ({impl})", task.solved_return(all_args[0].env_id), task.ylim,
                   solved_at={r["seed"]: r.get("solved_at") for r in results if "episodes" in r},
                   goal_label=task.goal_label(task.solved_return(all_args[0].env_id)))
        print(f"wrote {seeds_plot} (every seed, their mean and spread)")
    if any(r["status"] == "non-finite" for r in results):
        return NON_FINITE
    if distributed.context().enabled:
        # torchrun reports any rank's non-zero exit as a crash (a ChildFailedError traceback): a finished
        # run that did not solve the task exits 0 here, and rank 0 says so in one line instead.
        unsolved = [r["seed"] for r in results if not r["solved"]]
        if unsolved and distributed.is_main():
            print(f"{task.goal_words[1]} for seed{'s' * (len(unsolved) > 1)} {' '.join(map(str, unsolved))} (under torchrun the "
                  "exit status is 0 once training finished; the plain command exits 1)", flush=True)
        return 0
    return 0 if all(r["solved"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
