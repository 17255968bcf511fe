"""Environment steps per second with 1 and 2 processes. (A benchmark, not a test.)

    python benchmarks/data_parallel.py                        # CartPole, 3 repeats of each configuration
    python benchmarks/data_parallel.py --repeats 5 --total-timesteps 131072 --nproc 1 2 4
    python benchmarks/data_parallel.py --set num_envs=128     # a bigger batch per rank
    python benchmarks/data_parallel.py --env Hopper-v5 --total-timesteps 32768   # Part 4's command

Runs the reference trainer (``--impl solutions``; CartPole's default PPOArgs: 32 environments ×
32 steps per rank) as ``python -m workbook cartpole`` (or ``continuous --env ENV``) and as
``torchrun --standalone --nproc_per_node=N -m workbook …``. ``--total-timesteps`` counts the
steps of all ranks, so every configuration does the same amount of environment work; with N
ranks each phase's global batch is N× bigger (half as many learning phases with 2 ranks). SPS is the
command's own figure — global steps over training wall time, from its ``metrics.jsonl`` (imports,
process start and the final evaluation excluded) — and the median over repeats is reported,
with the whole command's wall time and the load average around the runs (the machine may be
shared: compare figures taken side by side). The last line is one JSON object.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from workbook.cli import make_parser, require_at_least  # noqa: E402
from workbook.runs import command  # noqa: E402

CONTINUOUS_ENVS = ["InvertedPendulum-v5", "Hopper-v5", "HalfCheetah-v5"]


def workbook_command(env_id: str) -> list[str]:
    """The training subcommand for ``env_id``: ``cartpole``, or ``continuous --env ENV`` for MuJoCo."""
    return ["cartpole"] if env_id == "CartPole-v1" else ["continuous", "--env", env_id]


def run_once(nproc: int | None, total_timesteps: int, out: Path, name: str, env_id: str = "CartPole-v1",
             overrides: list[str] = ()) -> dict:
    """One training run; ``nproc=None`` is the plain single-process command."""
    launcher = ([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"]
                if nproc else [sys.executable])
    command = workbook_command(env_id)
    sets = [arg for field in overrides for arg in ("--set", field)]
    cmd = [*launcher, "-m", "workbook", *command, "--impl", "solutions", "--total-timesteps", str(total_timesteps),
           *sets, "--wandb", "disabled", "--no-progress", "--eval-episodes", "1", "--runs-dir", str(out), "--run-name", name]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode not in (0, 1):  # 1: trained but not solved, fine for a speed figure
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    last = json.loads((out / name / "metrics.jsonl").read_text().splitlines()[-1])
    return {"sps": last["sps"], "global_step": last["global_step"], "command_wall_s": wall}


@command
def main(argv: list[str] | None = None) -> int:
    parser = make_parser("benchmarks/data_parallel.py", __doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--total-timesteps", type=int, default=65_536)
    parser.add_argument("--nproc", type=int, nargs="+", default=[1, 2], help="torchrun process counts to measure")
    parser.add_argument("--env", default="CartPole-v1", choices=["CartPole-v1", *CONTINUOUS_ENVS],
                        help="CartPole-v1 (python -m workbook cartpole) or a MuJoCo task (python -m workbook continuous)")
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                        help="passed on to every run (per-rank settings such as num_envs)")
    options = parser.parse_args(argv)
    require_at_least("--repeats", options.repeats, 1)
    require_at_least("--total-timesteps", options.total_timesteps, 1)
    for n in options.nproc:
        require_at_least("--nproc", n, 1)
    configs = [(f"python -m workbook {workbook_command(options.env)[0]}", None)] + [(f"torchrun --nproc_per_node={n}", n) for n in options.nproc]
    results: dict[str, list[dict]] = {label: [] for label, _ in configs}
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(options.repeats):  # interleaved, so a change in load hits every configuration
            for i, (label, nproc) in enumerate(configs):
                results[label].append(run_once(nproc, options.total_timesteps, Path(tmp), f"r{repeat}-c{i}",
                                               options.env, options.set))
    load_after = os.getloadavg()
    print(f"{options.env}, reference PPO{''.join(' --set ' + f for f in options.set)}, "
          f"{options.total_timesteps} env steps over all ranks, {os.cpu_count()} CPUs, "
          f"load average {load_before[0]:.1f} before, {load_after[0]:.1f} after")
    print(f"{'configuration':<30} {'median SPS':>10} {'runs (SPS)':>26} {'command wall s':>15}")
    summary = {}
    for label, runs in results.items():
        sps = [r["sps"] for r in runs]
        wall = statistics.median(r["command_wall_s"] for r in runs)
        summary[label] = {"median_sps": statistics.median(sps), "sps": sps, "median_command_wall_s": wall}
        print(f"{label:<30} {statistics.median(sps):>10,.0f} {' / '.join(f'{s:,.0f}' for s in sps):>26} {wall:>15.1f}")
    print(json.dumps({"benchmark": "data_parallel", "env": options.env, "set": options.set,
                      "total_timesteps": options.total_timesteps,
                      "cpus": os.cpu_count(), "loadavg_before": load_before[0], "loadavg_after": load_after[0],
                      "results": summary}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
