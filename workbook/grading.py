"""Turn per-test results into per-exercise statuses, points and a grade table.

The pytest plugin writes one JSON line per collected exercise test and one per result
(``--workbook-report``); :func:`aggregate` folds them into one row per exercise. The
``grade`` command runs the suite in a subprocess with a per-test timeout (an exercise stops at
its first timeout, see workbook/pytest_plugin.py) and an overall one, prints progress while it
runs, then the table and, for each exercise that is not passing, what to do about it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from workbook.cli import add_impl_option, make_parser, require_positive
from workbook.runs import INTERRUPTED, check_can_create, command

ROOT = Path(__file__).resolve().parent.parent
NOT_STARTED, FAILING, PASSING, TIMED_OUT = "not started", "failing", "passing", "timed out"
WAITING = "waiting"
"""Written, but its tests stop at a stub of another exercise it calls (``detail`` names which)."""


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
    """Not passing: the one line that says why (a known mistake's name, the first mismatch, the timeout)."""
    command: str = ""
    """Not passing: the pytest command that shows this exercise's failures in full."""


def read_report(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


UNFINISHED = "did not finish (timeout?)"
"""The detail of an exercise whose first test without a pass has no result: the run ended before it did."""


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
        outcomes = [results.get(n, {"outcome": "not run", "message": UNFINISHED}) for n in entry["nodeids"]]
        passed = sum(o["outcome"] == "passed" for o in outcomes)
        timed_out = [o for o in outcomes if o["outcome"] == TIMED_OUT]
        if passed == len(outcomes):
            status, detail = PASSING, ""
        elif all(o["outcome"] == NOT_STARTED for o in outcomes):
            status, detail = NOT_STARTED, outcomes[0].get("message", "")
        elif timed_out:
            status, detail = TIMED_OUT, diagnosis(timed_out[0].get("message", ""))
        elif any(o["outcome"] == WAITING for o in outcomes) and all(
                o["outcome"] in ("passed", "skipped", NOT_STARTED, WAITING) for o in outcomes):
            on = dict.fromkeys(o["message"].removeprefix("waiting on ") for o in outcomes if o["outcome"] == WAITING)
            status, detail = WAITING, "waiting on " + ", ".join(on)
        else:
            status = FAILING
            first_bad = next(o for o in outcomes if o["outcome"] not in ("passed", NOT_STARTED, "skipped")) \
                if any(o["outcome"] not in ("passed", NOT_STARTED, "skipped") for o in outcomes) \
                else next(o for o in outcomes if o["outcome"] != "passed")
            detail = diagnosis(first_bad.get("message", "")) or first_bad["outcome"]
        points = entry["points"] if status == PASSING else 0
        rows.append(Row(part, exercise, status, points, entry["points"], len(outcomes), passed, detail))
    rows.sort(key=lambda r: (part_order(r.part), list(collected).index((r.part, r.exercise))))  # part9 before part10
    for r in rows:
        if r.status != PASSING:
            r.command = pytest_command(r, [x.exercise for x in rows if x.part == r.part])
    return rows


def diagnosis(message: str) -> str:
    """The most useful line of a failure message: a known mistake's name, else the first mismatch, else the problem."""
    lines = [line.strip().removeprefix("Failed: ") for line in message.strip().splitlines() if line.strip()]
    for marker in ("[known mistake:", "first mismatch at index", "timed out", "rejected parameter", "rejected the return"):
        found = [line for line in lines if marker in line]
        if found:
            return found[0]
    if lines and lines[0].startswith(("WrongAnswer: wrong answer from", "wrong answer from")) and len(lines) > 1:
        return lines[1]  # the problem ('output: shape (3,), expected (4,)'), not the call
    return lines[0] if lines else ""


def pytest_command(row: Row, part_exercises: list[str], impl: str = "exercises") -> str:
    """``pytest tests/test_<part>.py -k <exercise>`` selecting exactly this exercise's tests.

    The plugin makes each exercise's name a keyword of its tests; ``-k`` matches substrings,
    so exercises whose names contain this one (``masked_whiten`` for ``whiten``) are excluded.
    """
    longer = [e for e in part_exercises if e != row.exercise and row.exercise.lower() in e.lower()]
    expression = " and not ".join([row.exercise, *longer])
    quoted = f'"{expression}"' if longer else expression
    return f"pytest tests/test_{row.part}.py -k {quoted}" + ("" if impl == "exercises" else f" --impl={impl}")


def format_table(rows: list[Row], impl: str) -> str:
    pw, width = max([len(r.part) for r in rows] + [5]), max([len(r.exercise) for r in rows] + [8])
    rule = f"{'-' * pw} {'-' * width}  {'-' * 11}  {'-' * 7}  {'-' * 6}"
    lines = [f"Grade for --impl={impl}", "",
             f"{'part':<{pw}} {'exercise':<{width}}  {'status':<11}  {'tests':>7}  {'points':>6}", rule]
    for r in rows:
        lines.append(f"{r.part:<{pw}} {r.exercise:<{width}}  {r.status:<11}  {r.passed:>3}/{r.tests:<3}  "
                     f"{r.points:>2}/{r.max_points:<3}".rstrip())
    total, most = sum(r.points for r in rows), sum(r.max_points for r in rows)
    lines += [rule, f"{'total':<{pw}} {'':<{width}}  {'':<11}  {'':>7}  {total:>2}/{most:<3}".rstrip()]
    return "\n".join(lines)


def format_next_steps(rows: list[Row]) -> str:
    """For each exercise that is not passing, what to do: the diagnosis and the command; not started: one line a part."""
    lines = []
    for r in rows:
        if r.status in (FAILING, TIMED_OUT):
            lines += [f"✗ {r.part}.{r.exercise}: {r.status} ({r.tests - r.passed} of {r.tests} tests)",
                      f"    {r.detail}", f"    details: {r.command}"]
    for r in rows:
        if r.status == WAITING:
            lines.append(f"… {r.part}.{r.exercise}: written, {r.detail} (its tests run once that is filled in)")
    for part in dict.fromkeys(r.part for r in rows):
        todo = [r.exercise for r in rows if r.part == part and r.status == NOT_STARTED]
        if not todo:
            continue
        total = sum(r.part == part for r in rows)
        if len(todo) == total:
            lines.append(f"· {part}: all {total} exercises not started; the first is {todo[0]} in exercises/{part}.py")
        else:
            names = ", ".join(todo)
            names = names if len(names) <= 70 else names[:69].rsplit(", ", 1)[0] + ", …"
            lines.append(f"· {part}: {len(todo)} of {total} exercises not started ({names})")
    return "\n".join(lines)


class Progress:
    """Reads the plugin's report as pytest writes it and prints a line per finished part and per timeout."""

    def __init__(self, report: Path, per_test_timeout: float):
        self.report, self.per_test_timeout = report, per_test_timeout
        self.offset, self.records = 0, []
        self.last = time.perf_counter()  # when the previous part finished: each part prints its own duration
        self.done_parts: set[str] = set()

    def poll(self) -> None:
        if not self.report.exists():
            return
        with self.report.open() as f:
            f.seek(self.offset)
            chunk = f.read()
        complete = chunk[:chunk.rfind("\n") + 1]
        self.offset += len(complete.encode())
        for line in complete.splitlines():
            rec = json.loads(line)
            self.records.append(rec)
            if rec["kind"] == "result" and rec["outcome"] == TIMED_OUT and "timed out after" in rec.get("message", ""):
                print(f"  {rec['part']}.{rec['exercise']}: {rec['message'].split(' in ')[0].removeprefix('Failed: ')}; "
                      "its other tests are stopped", flush=True)
        results = {r["nodeid"] for r in self.records if r["kind"] == "result"}
        for part in dict.fromkeys(r["part"] for r in self.records if r["kind"] == "collected"):
            ids = [r["nodeid"] for r in self.records if r["kind"] == "collected" and r["part"] == part]
            if part not in self.done_parts and all(i in results for i in ids):
                self.done_parts.add(part)
                rows = [r for r in aggregate(self.records) if r.part == part]
                counts = ", ".join(f"{sum(r.status == s for r in rows)} {s}"
                                   for s in (PASSING, FAILING, TIMED_OUT, WAITING, NOT_STARTED) if any(r.status == s for r in rows))
                now = time.perf_counter()
                print(f"  {part}: {len(rows)} exercises graded ({counts}) in {now - self.last:.0f} s", flush=True)
                self.last = now


def run_suite(impl: str, *, paths: list[str], timeout: float, per_test_timeout: float, report: Path) -> int:
    """Run the exercise tests in a subprocess, printing progress; returns pytest's exit code (or -9 on timeout)."""
    cmd = [sys.executable, "-m", "pytest", *paths, "-m", "exercise", f"--impl={impl}", f"--workbook-report={report}",
           "-q", "-p", "no:cacheprovider", "--no-header", "-o", "console_output_style=classic"]
    if importlib.util.find_spec("pytest_timeout") is not None:
        cmd.append(f"--timeout={per_test_timeout:g}")
    env = dict(os.environ, WORKBOOK_IMPL=impl)
    progress = Progress(report, per_test_timeout)
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + timeout
    try:
        while proc.poll() is None:
            if time.monotonic() > deadline:
                proc.kill()
                proc.wait()
                return -9
            time.sleep(0.2)
            progress.poll()
        progress.poll()
        return proc.returncode
    finally:
        if proc.poll() is None:  # interrupted (Ctrl-C): stop it and reap it, no zombie left
            proc.kill()
            proc.wait()


def part_order(part: str) -> tuple[int, str]:
    """Sort key of a part by its number: part9_agents before part10_async (a string sort puts part10 first)."""
    digits = part.removeprefix("part").split("_", 1)[0]
    return (int(digits) if digits.isdigit() else 10**9, part)


def parts() -> list[str]:
    """The graded parts in the order of their numbers: one tests/test_<part>.py each."""
    return sorted((p.stem.removeprefix("test_") for p in (ROOT / "tests").glob("test_part*.py")), key=part_order)


@command
def main(argv: list[str] | None = None) -> int:
    parser = make_parser("python -m workbook grade", "Grade table: one row per exercise.")
    add_impl_option(parser, os.environ.get("WORKBOOK_IMPL", "exercises"), "whose code is graded: exercises (yours) or solutions (the reference)")
    parser.add_argument("--part", action="append", default=[], choices=parts(),
                        help="only this part's tests (repeatable)")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON to PATH")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds for the whole run")
    parser.add_argument("--per-test-timeout", type=float, default=20.0,
                        help="CPU seconds for one test (wall-clock backstop: 4x); an exercise whose test times out "
                             "is stopped there (default: 20)")
    parser.add_argument("--strict", action="store_true", help="exit 1 unless every exercise passes")
    args = parser.parse_args(argv)
    require_positive("--timeout", args.timeout)
    require_positive("--per-test-timeout", args.per_test_timeout)
    if args.json:
        check_can_create(args.json, "--json")
    # The files in the order of the parts' numbers (pytest, given the folder, would run part10 before part1).
    paths = [f"tests/test_{p}.py" for p in sorted(dict.fromkeys(args.part or parts()), key=part_order)]
    print(f"Grading --impl={args.impl}: running the exercise tests in a subprocess "
          f"(per-test timeout {args.per_test_timeout:g} s of CPU time)", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.jsonl"
        try:
            code = run_suite(args.impl, paths=paths, timeout=args.timeout, per_test_timeout=args.per_test_timeout,
                             report=report)
        except KeyboardInterrupt:  # Ctrl-C: run_suite has stopped its pytest; the parts it finished are printed above
            print("\ninterrupted: the parts listed above were graded, the others not "
                  "(python -m workbook grade --part PART grades one part)", flush=True)
            return INTERRUPTED
        rows = aggregate(read_report(report))
    if not rows:
        print(f"grade: no exercise tests ran (pytest exit code {code}); run `pytest --impl={args.impl}` to see why")
        return 2
    for r in rows:
        r.command = pytest_command(r, [x.exercise for x in rows if x.part == r.part], args.impl) if r.command else ""
    print()
    print(format_table(rows, args.impl))
    if code == -9:
        print(f"\n(the run hit the overall timeout of {args.timeout:g} s; unfinished exercises count as failing)")
    next_steps = format_next_steps(rows)
    if next_steps:
        print("\n" + next_steps)
    if args.json:
        total, most = sum(r.points for r in rows), sum(r.max_points for r in rows)
        payload = {"impl": args.impl, "points": total, "max_points": most, "timed_out": code == -9,
                   "exercises": [asdict(r) for r in rows]}
        Path(args.json).write_text(json.dumps(payload, indent=2) + "\n")
        print(f"\nwrote {args.json}")
    if args.strict and any(r.status != PASSING for r in rows):
        return 1
    return 0
