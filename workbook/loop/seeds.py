"""A command's runs (``rlhf``, ``reason``): one per seed, or the one ``--resume`` continues, then the seeds' folder.

``run.py`` is one run of the loop; this is what a command does around it.
:func:`prepare_runs` checks every setting and every run folder before anything is loaded or
written (``--seeds 0 1 2``: one run per seed, named ``<run name>-seed<S>``, or the command's own
name with ``-s<S>``: :func:`seed_runs`); :func:`train_runs` trains them one after the other and
ends Ctrl-C, a NaN, a failing rank or an unfilled stub in one line; :func:`write_seed_summary`
writes ``<runs-dir>/<group>/`` with ``curves.png`` (each panel's mean and min–max over the
seeds) and ``summary.json`` (every headline number's mean, std and per-seed values, before and
after training); :func:`print_written` says what a run wrote and what to run next. The
commands differ only in their names and their curves' title.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np

from workbook import distributed
from workbook.checkpoints import CHECKPOINT, INTERRUPTED, NON_FINITE, Abandoned
from workbook.cli import require_unique_seeds
from workbook.loop.algorithms import ALGORITHMS
from workbook.loop.curves import save_seed_curves
from workbook.loop.options import LoopArgs, resume_args
from workbook.loop.run import curve_panels
from workbook.loop.task import Task
from workbook.runs import check_new_run_dir, new_run_dir, stub_error, wandb_sync_line


def seed_runs(args: LoopArgs, seeds: list[int], run_name: Callable[[LoopArgs, str], str],
              group_stem: str) -> tuple[list[LoopArgs], str | None]:
    """One ``args`` per seed, named by ``run_name(args, stamp)``, and the seeds' folder (None for one seed).

    With ``--run-name NAME`` the runs are ``NAME-seed<S>`` and the folder ``NAME-seeds``; else the
    folder is ``<group_stem>-seeds<S-S-...>-<stamp>``, the stamp shared with the runs' names.
    """
    stamp = time.strftime("%Y%m%d-%H%M%S")
    if len(seeds) == 1:
        one = dataclasses.replace(args, seed=seeds[0])
        return [dataclasses.replace(one, run_name=run_name(one, stamp))], None
    runs = [dataclasses.replace(args, seed=s, run_name=f"{args.run_name}-seed{s}" if args.run_name else "") for s in seeds]
    runs = [dataclasses.replace(r, run_name=run_name(r, stamp)) for r in runs]
    group = f"{args.run_name}-seeds" if args.run_name else f"{group_stem}-seeds{'-'.join(map(str, seeds))}-{stamp}"
    return runs, group


def write_seed_summary(args: LoopArgs, group: str, summaries: list[dict], histories: dict[int, list[dict]], task: Task,
                       title: str) -> Path:
    """``<runs_dir>/<group>/``: curves.png (mean and min–max over the seeds, headed ``title``) and summary.json."""
    out = new_run_dir(args.runs_dir, group, args.overwrite)
    save_seed_curves(histories, out / "curves.png", title, curve_panels(args, task), x_label=ALGORITHMS[args.algo].x_label)
    table = {when: {k: {"mean": float(np.mean([s[when][k] for s in summaries])),
                        "std": float(np.std([s[when][k] for s in summaries])),
                        "per_seed": [s[when][k] for s in summaries]} for k, _, _ in task.headline}
             for when in ("before", "after")}
    (out / "summary.json").write_text(json.dumps({"seeds": sorted(histories), "runs": [s["run_dir"] for s in summaries],
                                                  **table}, indent=2))
    return out


def prepare_runs(args: LoopArgs, seeds: list[int], argv: list[str], *, command: str, args_class: type, check,
                 split_seeds) -> tuple[list[LoopArgs], str | None, dict | None]:
    """(one Args per run, the seeds' folder or None, the checkpoint to resume or None), every setting checked
    and no run folder in the way, before anything is loaded or written.

    The command's: ``command``, ``args_class``, ``check`` (its validate) and ``split_seeds(args, seeds)`` ->
    (one Args per seed with its run name, the seeds' folder or None)."""
    saved = None
    if args.resume:
        args, saved = resume_args(args, seeds, argv, command=command, args_class=args_class, check=check)
        seeds = [args.seed]
    require_unique_seeds(seeds)
    for seed in seeds:
        check(dataclasses.replace(args, seed=seed))
    runs, group = ([args], None) if saved else split_seeds(args, seeds)
    if os.environ.get("RANK", "0") == "0" and not saved:  # under torchrun, rank 0 alone checks
        for run in runs:
            check_new_run_dir(run.runs_dir, run.run_name, run.overwrite)
        if group:
            check_new_run_dir(args.runs_dir, group, args.overwrite)
    return runs, group, saved


def train_runs(runs: list[LoopArgs], saved: dict | None, train_one, *, command: str,
               stub_file: str) -> tuple[int | None, list[dict], dict[int, list[dict]]]:
    """Train each run with ``train_one(args, resume=)``: (exit status or None when all finished, summaries, histories).

    Ctrl-C, a NaN, a failing rank and an unfilled stub of the learner's each end here in one line."""
    summaries, histories = [], {}
    try:
        for run_args in runs:
            if len(runs) > 1 and not run_args.quiet and distributed.is_main():
                print(f"== seed {run_args.seed}: {Path(run_args.runs_dir) / run_args.run_name} ==", flush=True)
            try:
                summary = train_one(run_args, resume=saved)
            except Abandoned:  # a second Ctrl-C before the first iteration finished
                print(f"{command}: stopped before the first iteration finished; nothing to save", flush=True)
                return INTERRUPTED, summaries, histories
            if summary.get("status") in ("interrupted", "non-finite", "failed"):
                code = {"interrupted": INTERRUPTED, "non-finite": NON_FINITE, "failed": 1}[summary["status"]]
                return code, summaries, histories
            summaries.append(summary)
            if summary["run_dir"]:
                histories[run_args.seed] = [json.loads(line) for line in
                                            (Path(summary["run_dir"]) / "metrics.jsonl").read_text().splitlines()]
    except distributed.Unfinished as error:
        print(error, file=sys.stderr)
        return 2, summaries, histories
    except NotImplementedError as error:  # one line naming the stub, exit status 2 (workbook/runs.py: stub_error)
        raise stub_error(runs[0].impl, stub_file, getattr(error, "removed", None)) from None
    return None, summaries, histories


def print_written(summary: dict) -> None:
    """What the run wrote (the files that are there), where its offline wandb run is, and the next command."""
    run_dir = Path(summary["run_dir"])
    names = ["metrics.jsonl", "samples.jsonl", "curves.png", "summary.json", CHECKPOINT, summary.get("policy"), "wandb"]
    there = [f"{n}/" if (run_dir / n).is_dir() else n for n in names if n and (run_dir / n).exists()]
    print(f"wrote {run_dir}/: {', '.join(there)}", flush=True)
    sync = wandb_sync_line(run_dir)
    if sync:
        print(sync)
    print(f"next: python -m workbook evaluate {run_dir}", flush=True)
