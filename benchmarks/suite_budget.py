"""Benchmark: the suite's budget for the learner's loop — each part's test file, and grade, on a fresh stub tree.

    python benchmarks/suite_budget.py                               # every part, stubs and reference, 3 repeats
    python benchmarks/suite_budget.py --part part6_data_parallel --repeats 1

In a temporary copy of this checkout whose exercises/ are the committed stubs (``git show HEAD:exercises/...``,
so a learner's work in exercises/ changes nothing), it times, ``--repeats`` times each:

- ``pytest tests/test_<part>.py`` with ``--impl=exercises`` (every exercise "not started") and ``--impl=solutions``;
- ``python -m workbook grade`` (every part, the stubs).

Goals (issue 38; medians of wall seconds on a quiet 2-core machine): each part's file ≤ 10 s on the stubs
and on the reference, grade ≤ 20 s. Each figure comes with its CPU seconds (user + system, the process and
its children): a busy machine inflates the wall figures far more than the CPU ones, so on a shared machine
read the CPU column (on a quiet one the two are close, the CPU one lower where a test waits on a subprocess).
``make test``'s own figure is the budget table at the end of each run (workbook/pytest_plugin.py,
docs/testing.md). Bytecode is written in the copy, as ``make test`` does (the first repeat pays the compiling).

The last line is one JSON object: ``{"runs": [{"what", "part", "impl", "wall_s", "cpu_s"}, ...],
"medians": [{"what", "part", "impl", "wall_s", "cpu_s", "budget_s", "over"}, ...], "over": [...],
"load_before": [1, 5, 15 min], "load_after": [...]}``.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from workbook.cli import make_parser, require_at_least  # noqa: E402
from workbook.grading import parts  # noqa: E402
from workbook.runs import command  # noqa: E402

PART_BUDGET_S = 10.0
GRADE_BUDGET_S = 20.0


def stub_tree(where: Path) -> Path:
    """This checkout's code and tests, with the committed exercises/ (the stubs a fresh clone has)."""
    root = where / "checkout"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache")
    for name in ("workbook", "solutions", "tests"):
        shutil.copytree(ROOT / name, root / name, ignore=ignore)
    for name in ("pyproject.toml", "part0_theory.md"):
        shutil.copy2(ROOT / name, root / name)
    (root / "exercises").mkdir()
    listed = subprocess.run(["git", "ls-tree", "--name-only", "HEAD", "exercises/"], cwd=ROOT, capture_output=True,
                            text=True, check=True).stdout.split()
    for path in listed:
        text = subprocess.run(["git", "show", f"HEAD:{path}"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
        (root / path).write_text(text)
    return root


def timed(cmd: list[str], root: Path) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the command and its children)."""
    env = dict(os.environ, PYTHONPATH=str(root), PYTHONDONTWRITEBYTECODE="", WANDB_MODE="disabled")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(cmd)} failed (exit {proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


@command
def main(argv: list[str] | None = None) -> int:
    parser = make_parser("benchmarks/suite_budget.py", __doc__.split("\n\n")[0])
    parser.add_argument("--part", action="append", default=[], choices=parts(), help="only this part (repeatable; default: all)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-grade", action="store_true", help="leave out python -m workbook grade")
    options = parser.parse_args(argv)
    require_at_least("--repeats", options.repeats, 1)
    chosen = options.part or parts()
    load_before = os.getloadavg()
    runs: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="suite-budget-") as tmp:
        root = stub_tree(Path(tmp))
        jobs = [("pytest", part, impl, [sys.executable, "-m", "pytest", f"tests/test_{part}.py", "-q", "-p", "no:cacheprovider",
                                        f"--impl={impl}"])
                for part in chosen for impl in ("exercises", "solutions")]
        if not options.no_grade:
            jobs.append(("grade", "all", "exercises", [sys.executable, "-m", "workbook", "grade"]))
        for repeat in range(options.repeats):
            for what, part, impl, cmd in jobs:
                wall, cpu = timed(cmd, root)
                runs.append({"what": what, "part": part, "impl": impl, "wall_s": round(wall, 2), "cpu_s": round(cpu, 2)})
                print(f"  [{repeat + 1}/{options.repeats}] {what} {part} --impl={impl}: {wall:.1f} s wall, {cpu:.1f} s CPU", flush=True)
    medians = []
    for what, part, impl, _ in jobs:
        mine = [r for r in runs if (r["what"], r["part"], r["impl"]) == (what, part, impl)]
        budget = GRADE_BUDGET_S if what == "grade" else PART_BUDGET_S
        wall = statistics.median(r["wall_s"] for r in mine)
        medians.append({"what": what, "part": part, "impl": impl, "wall_s": wall,
                        "cpu_s": statistics.median(r["cpu_s"] for r in mine), "budget_s": budget, "over": wall > budget})
    print(f"\n{'what':<8} {'part':<20} {'impl':<10} {'wall s':>7} {'CPU s':>7} {'budget':>7}")
    for m in medians:
        print(f"{m['what']:<8} {m['part']:<20} {m['impl']:<10} {m['wall_s']:7.1f} {m['cpu_s']:7.1f} {m['budget_s']:7.0f}"
              + ("  over" if m["over"] else ""))
    over = [f"{m['what']} {m['part']} --impl={m['impl']}" for m in medians if m["over"]]
    print(json.dumps({"runs": runs, "medians": medians, "over": over, "load_before": load_before, "load_after": os.getloadavg()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
