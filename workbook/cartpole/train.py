"""Train PPO on CartPole-v1 with your Part 2 code (or the reference), log it, and evaluate it.

    python -m workbook cartpole --impl exercises          # your code (after the Part 2 tests pass)
    python -m workbook cartpole --impl solutions --seeds 1 2 3
    python -m workbook cartpole --impl solutions --wandb online --video

Each seed writes ``runs/<run-name>/``:
  metrics.jsonl        one line per learning phase (what is also logged to wandb)
  learning_curve.png   episode returns against environment steps (no wandb needed)
  agent.pt             the final actor and critic (state dicts) and the PPOArgs
  wandb/               the wandb run — offline unless you ask for ``--wandb online``
                       (upload later with ``wandb sync runs/<run-name>/wandb/offline-run-*``)
  video/               with ``--video``: one greedy episode as MP4 (needs ``pip install moviepy pygame``)
and ends with a greedy evaluation over 20 episodes; CartPole-v1 is solved at a mean of ≥ 475.
The exit status is 0 when every seed solved it.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

from workbook.cartpole.evaluate import SOLVED_RETURN, evaluate_greedy


def parse_args(argv: list[str] | None, ppo_fields: list[dataclasses.Field]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m workbook cartpole", description="Train PPO on CartPole-v1.")
    parser.add_argument("--impl", choices=("exercises", "solutions"), default="exercises",
                        help="whose Part 2 to train: yours (exercises, default) or the reference (solutions)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1], help="one run per seed (default: 1)")
    parser.add_argument("--total-timesteps", type=int, default=None, help="override PPOArgs.total_timesteps")
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                        help="override any PPOArgs field, e.g. --set learning_rate=1e-3 (repeatable)")
    parser.add_argument("--wandb", choices=("offline", "online", "disabled"), default="offline",
                        help="offline (default: written under the run directory, no account needed), online, or disabled")
    parser.add_argument("--wandb-project", default="ppo-rlhf-workbook")
    parser.add_argument("--run-name", default=None, help="default: cartpole-<impl>-seed<seed>-<time>")
    parser.add_argument("--runs-dir", default="runs", help="parent directory of the run directories")
    parser.add_argument("--video", action="store_true", help="record one greedy episode (needs moviepy and pygame)")
    parser.add_argument("--eval-episodes", type=int, default=20)
    parser.add_argument("--no-progress", action="store_true", help="no progress bar (e.g. in CI logs)")
    args = parser.parse_args(argv)
    names = {f.name: f for f in ppo_fields}
    overrides = {}
    for item in args.set:
        key, _, value = item.partition("=")
        if key not in names:
            parser.error(f"--set {item}: PPOArgs has no field {key!r} (fields: {', '.join(names)})")
        default = names[key].default
        overrides[key] = type(default)(float(value)) if isinstance(default, int) and not isinstance(default, bool) \
            else type(default)(value)
    if args.total_timesteps is not None:
        overrides["total_timesteps"] = args.total_timesteps
    args.overrides = overrides
    return args


def start_wandb(mode: str, project: str, run_name: str, run_dir: Path, config: dict):
    """A wandb run, or None when disabled or unavailable (training never depends on wandb)."""
    if mode == "disabled":
        return None
    try:
        import wandb

        os.environ.setdefault("WANDB_SILENT", "true")
        return wandb.init(project=project, name=run_name, dir=str(run_dir), mode=mode, config=config,
                          reinit="finish_previous")
    except Exception as error:  # no network for online mode, a broken install, ...
        print(f"wandb could not start ({type(error).__name__}: {error}); continuing without it", file=sys.stderr)
        return None


def plot_learning_curve(episodes: list[tuple[int, float]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    if episodes:
        steps, returns = np.array(episodes).T
        ax.scatter(steps, returns, s=4, alpha=0.3, label="episode return")
        window = min(20, len(returns))
        smooth = np.convolve(returns, np.ones(window) / window, mode="valid")
        ax.plot(steps[window - 1:], smooth, color="C1", label=f"mean of last {window}")
    ax.axhline(SOLVED_RETURN, color="grey", linestyle="--", linewidth=1, label=f"solved ({SOLVED_RETURN:g})")
    ax.set(xlabel="environment steps", ylabel="return", title=title, ylim=(0, 520))
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def record_video(actor: torch.nn.Module, env_id: str, folder: Path, seed: int) -> Path | None:
    """One greedy episode as MP4 with gymnasium's RecordVideo; None (with a hint) without moviepy."""
    try:
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")  # headless rendering
        import moviepy  # noqa: F401  (RecordVideo writes the MP4 with it)
        import pygame  # noqa: F401  (CartPole draws its frames with it)
    except ImportError as error:
        print(f"--video needs moviepy and pygame ({error}): pip install moviepy pygame; skipping the video")
        return None
    import gymnasium as gym

    env = gym.wrappers.RecordVideo(gym.make(env_id, render_mode="rgb_array"), str(folder), name_prefix="greedy",
                                   episode_trigger=lambda _: True, disable_logger=True)
    obs, _ = env.reset(seed=seed)
    done = False
    with torch.inference_mode():
        while not done:
            action = int(actor(torch.as_tensor(obs, dtype=torch.float32)).argmax())
            obs, _, terminated, truncated, _ = env.step(action)
            done = terminated or truncated
    env.close()
    videos = sorted(folder.glob("*.mp4"))
    return videos[-1] if videos else None


def train_one(module, options: argparse.Namespace, seed: int) -> dict:
    args = module.PPOArgs(**(options.overrides | {"seed": seed}))
    run_name = options.run_name or f"cartpole-{options.impl}-seed{seed}-{time.strftime('%Y%m%d-%H%M%S')}"
    if options.run_name and len(options.seeds) > 1:
        run_name = f"{options.run_name}-seed{seed}"
    run_dir = Path(options.runs_dir) / run_name
    print(f"== seed {seed}: {run_dir} ==", flush=True)
    trainer = module.PPOTrainer(args)  # first: an unfinished exercise fails here, before anything is written
    run_dir.mkdir(parents=True, exist_ok=True)
    run = start_wandb(options.wandb, options.wandb_project, run_name, run_dir,
                      dataclasses.asdict(args) | {"impl": options.impl})
    episodes: list[tuple[int, float]] = []  # (global step at the end of the phase, return)
    metrics_file = (run_dir / "metrics.jsonl").open("w")
    progress = None
    if not options.no_progress:
        from tqdm import tqdm

        progress = tqdm(total=args.total_phases * args.batch_size, unit="step", unit_scale=True, dynamic_ncols=True,
                        mininterval=0.5, disable=None)  # None: no bar when the output is not a terminal
    start = time.perf_counter()

    def on_phase_end(report) -> bool:
        elapsed = time.perf_counter() - start
        episodes.extend((report.global_step, r) for r, _ in report.episodes)
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
        return False

    trainer.train(on_phase_end)
    train_seconds = time.perf_counter() - start
    if progress is not None:
        progress.close()
    metrics_file.close()

    returns = evaluate_greedy(trainer.actor, args.env_id, options.eval_episodes, seed=10_000 + seed)
    solved = bool(returns.mean() >= SOLVED_RETURN)
    print(f"greedy evaluation over {len(returns)} episodes: mean {returns.mean():.1f} ± {returns.std():.1f} "
          f"(min {returns.min():.0f}) — {'SOLVED' if solved else 'not solved'} "
          f"after {trainer.agent.step} steps in {train_seconds:.1f} s", flush=True)

    torch.save({"actor": trainer.actor.state_dict(), "critic": trainer.critic.state_dict(),
                "args": dataclasses.asdict(args), "eval_returns": returns.tolist()}, run_dir / "agent.pt")
    plot_learning_curve(episodes, run_dir / "learning_curve.png",
                        f"PPO on {args.env_id} ({options.impl}, seed {seed}): greedy eval {returns.mean():.0f}")
    video = record_video(trainer.actor, args.env_id, run_dir / "video", seed) if options.video else None
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
            "run_dir": str(run_dir)}


def main(argv: list[str] | None = None) -> int:
    torch.set_num_threads(1)  # small networks: one thread is faster and steadier
    torch.distributions.Distribution.set_default_validate_args(False)  # ~20% faster rollouts
    argv = list(sys.argv[1:] if argv is None else argv)
    probe = argparse.ArgumentParser(add_help=False)
    probe.add_argument("--impl", default="exercises")
    impl = probe.parse_known_args(argv)[0].impl
    if impl not in ("exercises", "solutions"):
        print(f"--impl must be exercises or solutions, got {impl!r}", file=sys.stderr)
        return 2
    module = importlib.import_module(f"{impl}.part2_cartpole")
    options = parse_args(argv, dataclasses.fields(module.PPOArgs))
    results = []
    for seed in options.seeds:
        try:
            results.append(train_one(module, options, seed))
        except NotImplementedError:
            print(f"{impl}/part2_cartpole.py (or the Part 1 it uses) still has unfinished exercises: "
                  "run `pytest tests/test_part2_cartpole.py` to see which", file=sys.stderr)
            return 2
    if len(results) > 1:
        print("seed  solved  mean return  train s")
        for r in results:
            print(f"{r['seed']:>4}  {str(r['solved']):>6}  {r['mean_return']:>11.1f}  {r['train_seconds']:>7.1f}")
    return 0 if all(r["solved"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
