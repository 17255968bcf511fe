"""Turn per-test results into per-exercise statuses, points and a grade table.

The pytest plugin writes one JSON line per collected exercise test and one per result
(``--workbook-report``); :func:`aggregate` folds them into one row per exercise. The
``grade`` command runs the suite in a subprocess with timeouts, so an infinite loop in a
learner's code cannot hang it, and prints the table (or writes it as JSON).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOT_STARTED, FAILING, PASSING = "not started", "failing", "passing"


@dataclass
class Row:
    part: str
    exercise: str
    status: str
    points: int
    max_points: int
    tests: int
    passed: int
    detail: str = ""


def read_report(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def aggregate(records: list[dict]) -> list[Row]:
    """One row per exercise: passing only if every one of its tests passed."""
    collected: dict[tuple[str, str], dict] = {}
    results: dict[str, dict] = {}
    for rec in records:
        if rec["kind"] == "collected":
            key = (rec["part"], rec["exercise"])
            entry = collected.setdefault(key, {"points": rec["points"], "nodeids": []})
            entry["nodeids"].append(rec["nodeid"])
        elif rec["kind"] == "result":
            results[rec["nodeid"]] = rec
    rows = []
    for (part, exercise), entry in collected.items():
        outcomes = [results.get(n, {"outcome": "not run", "message": "did not finish (timeout?)"}) for n in entry["nodeids"]]
        passed = sum(o["outcome"] == "passed" for o in outcomes)
        if passed == len(outcomes):
            status, detail = PASSING, ""
        elif all(o["outcome"] == NOT_STARTED for o in outcomes):
            status, detail = NOT_STARTED, outcomes[0].get("message", "")
        else:
            status = FAILING
            first_bad = next(o for o in outcomes if o["outcome"] != "passed")
            detail = first_bad.get("message", "").strip().splitlines()[0:1]
            detail = detail[0] if detail else first_bad["outcome"]
        points = entry["points"] if status == PASSING else 0
        rows.append(Row(part, exercise, status, points, entry["points"], len(outcomes), passed, detail))
    return sorted(rows, key=lambda r: (r.part, list(collected).index((r.part, r.exercise))))


def format_table(rows: list[Row], impl: str) -> str:
    width = max([len(r.exercise) for r in rows] + [8])
    lines = [f"Grade for --impl={impl}", "",
             f"{'part':<16} {'exercise':<{width}}  {'status':<11}  {'tests':>7}  {'points':>6}",
             f"{'-' * 16} {'-' * width}  {'-' * 11}  {'-' * 7}  {'-' * 6}"]
    for r in rows:
        lines.append(f"{r.part:<16} {r.exercise:<{width}}  {r.status:<11}  {r.passed:>3}/{r.tests:<3}  {r.points:>2}/{r.max_points:<3}")
    total, most = sum(r.points for r in rows), sum(r.max_points for r in rows)
    lines += [f"{'-' * 16} {'-' * width}  {'-' * 11}  {'-' * 7}  {'-' * 6}",
              f"{'total':<16} {'':<{width}}  {'':<11}  {'':>7}  {total:>2}/{most:<3}"]
    return "\n".join(lines)


def run_suite(impl: str, *, paths: list[str], timeout: float, per_test_timeout: float, report: Path) -> int:
    """Run the exercise tests in a subprocess; returns pytest's exit code (or -9 on timeout)."""
    cmd = [sys.executable, "-m", "pytest", *paths, "-m", "exercise", f"--impl={impl}", f"--workbook-report={report}",
           "-q", "-p", "no:cacheprovider", "--no-header", "-o", "console_output_style=classic"]
    if importlib.util.find_spec("pytest_timeout") is not None:
        cmd.append(f"--timeout={per_test_timeout:g}")
    env = dict(os.environ, WORKBOOK_IMPL=impl)
    try:
        return subprocess.run(cmd, cwd=ROOT, env=env, timeout=timeout, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL).returncode
    except subprocess.TimeoutExpired:
        return -9


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workbook grade", description="Grade table: one row per exercise.")
    parser.add_argument("--impl", default=os.environ.get("WORKBOOK_IMPL", "exercises"),
                        help="exercises (your code, default) or solutions (the reference)")
    parser.add_argument("--part", action="append", default=[],
                        help="only this part's tests, e.g. part1_ppo_core (repeatable)")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON to PATH")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds for the whole run")
    parser.add_argument("--per-test-timeout", type=float, default=120.0, help="seconds for one test")
    parser.add_argument("--strict", action="store_true", help="exit 1 unless every exercise passes")
    args = parser.parse_args(argv)
    paths = [f"tests/test_{p}.py" for p in args.part] or ["tests"]
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.jsonl"
        code = run_suite(args.impl, paths=paths, timeout=args.timeout, per_test_timeout=args.per_test_timeout, report=report)
        rows = aggregate(read_report(report))
    if not rows:
        print(f"grade: no exercise tests ran (pytest exit code {code}); run `pytest --impl={args.impl}` to see why")
        return 2
    print(format_table(rows, args.impl))
    if code == -9:
        print(f"\n(the run hit the overall timeout of {args.timeout:g} s; unfinished exercises count as failing)")
    for r in rows:
        if r.status != PASSING and r.detail:
            print(f"  {r.exercise}: {r.detail}")
    if args.json:
        total, most = sum(r.points for r in rows), sum(r.max_points for r in rows)
        payload = {"impl": args.impl, "points": total, "max_points": most, "timed_out": code == -9,
                   "exercises": [asdict(r) for r in rows]}
        Path(args.json).write_text(json.dumps(payload, indent=2) + "\n")
        print(f"\nwrote {args.json}")
    if args.strict and any(r.status != PASSING for r in rows):
        return 1
    return 0
