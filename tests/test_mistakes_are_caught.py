"""Meta-test: the suite must catch — and name — every known-wrong implementation.

One subprocess runs ``pytest --impl=mistakes``: each exercise's tests run once per known
mistake of that exercise, with the mistake swapped into a copy of the reference solutions.
A mistake counts as caught when at least one of its exercise's tests fails, and as named
when a failing test's message carries the mistake's label. Runs with --impl=solutions
(this tests the test suite, not your code).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from workbook import mistakes

ROOT = Path(__file__).resolve().parent.parent
ALL = mistakes.all_mistakes()


@pytest.fixture(scope="session")
def mistake_results(request, tmp_path_factory) -> dict[str, list[dict]]:
    if request.config.workbook_impl != "solutions":
        pytest.skip("meta-test of the test suite: run with --impl=solutions")
    report = tmp_path_factory.mktemp("mistakes") / "report.jsonl"
    cmd = [sys.executable, "-m", "pytest", "tests", "--impl=mistakes", f"--workbook-report={report}", "-q",
           "-p", "no:cacheprovider", "--ignore", str(Path(__file__).relative_to(ROOT)),
           "-o", "console_output_style=classic", "-W", "ignore"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1500)
    results: dict[str, list[dict]] = {}
    for line in report.read_text().splitlines():
        rec = json.loads(line)
        if rec.get("mistake"):
            results.setdefault(rec["mistake"], []).append(rec)
    if not results:
        pytest.fail(f"the mistakes run produced no results:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return results


@pytest.mark.slow
@pytest.mark.parametrize("mistake", ALL, ids=[m.id for m in ALL])
def test_known_mistake_is_caught_and_named(mistake_results, mistake):
    runs = mistake_results.get(mistake.id, [])
    assert runs, f"no test of {mistake.part}.{mistake.exercise} ran against {mistake.id}"
    failed = [r for r in runs if r["outcome"] == "failed"]
    assert failed, f"{mistake.id} was NOT caught: all {len(runs)} tests of {mistake.exercise} pass with it"
    named = [r for r in failed if f"[known mistake: {mistake.name}]" in r.get("full_text", "")]
    assert named, (f"{mistake.id} was caught but not named; first failure said:\n"
                   + failed[0].get("full_text", failed[0]["message"])[-2000:])
