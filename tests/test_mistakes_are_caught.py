"""Meta-test: the suite must catch — and name — every known-wrong implementation.

The suite runs once per known mistake (``pytest --impl=mistakes``, here sharded over the
CPUs together with the correct alternatives, see tests/conftest.py): each exercise's tests
run with the mistake swapped into a copy of the reference solutions. A mistake counts as
caught when at least one of its exercise's tests fails, and as named when a failing test's
message carries the mistake's label. Runs with --impl=solutions (this tests the test suite,
not your code). A new part's mistakes are picked up from workbook/mistakes/<part>.py.
"""

from __future__ import annotations

import pytest

from workbook import mistakes

ALL = mistakes.all_mistakes()


@pytest.mark.slow
@pytest.mark.parametrize("mistake", ALL, ids=[m.id for m in ALL])
def test_known_mistake_is_caught_and_named(variant_results, mistake):
    runs = variant_results.get(mistake.choice, [])
    assert runs, f"no test of {mistake.part}.{mistake.exercise} ran against {mistake.id}"
    failed = [r for r in runs if r["outcome"] == "failed"]
    assert failed, f"{mistake.id} was NOT caught: all {len(runs)} tests of {mistake.exercise} pass with it"
    named = [r for r in failed if f"[known mistake: {mistake.name}]" in r.get("full_text", "")]
    assert named, (f"{mistake.id} was caught but not named; first failure said:\n"
                   + failed[0].get("full_text", failed[0]["message"])[-2000:])
