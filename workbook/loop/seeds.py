"""Several seeds of one LM command (``rlhf``, ``reason``): a run each, then the seeds' folder.

``--seeds 0 1 2`` makes one run per seed, named ``<run name>-seed<S>`` (or the command's own
name with ``-s<S>``), and then ``<runs-dir>/<group>/`` with ``curves.png`` (each panel's mean
and min–max over the seeds) and ``summary.json`` (every headline number's mean, std and
per-seed values, before and after training). The commands differ only in their names and their
curves' title; what they share is here.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Callable

import numpy as np

from workbook.loop.algorithms import ALGORITHMS
from workbook.loop.curves import save_seed_curves
from workbook.loop.options import LoopArgs
from workbook.loop.run import curve_panels
from workbook.loop.task import Task
from workbook.runs import new_run_dir


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
