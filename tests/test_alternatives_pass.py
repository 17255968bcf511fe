"""Meta-test: every correct alternative must pass every test of its exercise.

The mirror image of tests/test_mistakes_are_caught.py. A docstring allows more than one
right answer (a loop or a vectorised GAE, ``torch.where`` or ``min``, ``Categorical(logits=)``
or ``probs=``, ...); workbook/alternatives/ keeps such versions, and the suite runs once per
alternative with it swapped into a copy of the reference (``pytest --impl=alternatives``).
A test that fails one of them judges how the reference is written, not what it does.
Runs with --impl=solutions. A new part's alternatives come from workbook/alternatives/<part>.py.
"""

from __future__ import annotations

import pytest

from workbook import alternatives

ALL = alternatives.all_alternatives()


@pytest.mark.slow
@pytest.mark.parametrize("alternative", ALL, ids=[a.id for a in ALL])
def test_correct_alternative_passes(variant_results, alternative):
    runs = variant_results.get(alternative.choice, [])
    assert runs, f"no test of {alternative.part}.{alternative.exercise} ran against {alternative.id}"
    rejected = [r for r in runs if r["outcome"] != "passed"]
    assert not rejected, (
        f"{len(rejected)} of {len(runs)} tests of {alternative.exercise} reject a correct alternative "
        f"({alternative.description}):\n"
        + "\n\n".join(f"{r['nodeid']}: {r['outcome']}\n{r.get('full_text') or r['message']}"[-2000:] for r in rejected[:3]))
