"""The repository's promises about its own layout (these check the workbook, not your code).

- exercises/X.py is solutions/X.py with the exercise bodies replaced by a stub;
- every exercise a test grades is a stub in exercises/ and implemented in solutions/;
- every exercise has at least three known-wrong versions with the reference's signature;
- every exercise of Parts 1–3 (and of any part that registers one) has a correct alternative
  with the reference's signature (tests/test_alternatives_pass.py proves each one passes).
The stub checks are skipped with --impl=exercises, where a learner has filled stubs in.
"""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import pytest

from workbook import alternatives, mistakes
from workbook.mirror import exercise_names, make_exercise_text, mirror_problems, stubbed_functions

ROOT = Path(__file__).resolve().parent.parent
SOLUTION_FILES = sorted(p for p in (ROOT / "solutions").glob("part*.py"))
TEST_MODULES = {p.stem.removeprefix("test_"): p for p in (ROOT / "tests").glob("test_part*.py")}


def points_of(part: str) -> dict[str, int]:
    tree = ast.parse(TEST_MODULES[part].read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "POINTS" for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError(f"{TEST_MODULES[part]} has no POINTS")


@pytest.fixture
def maintainer_mode(request):
    if request.config.workbook_impl == "exercises":
        pytest.skip("checks that exercises/ holds stubs; run with --impl=solutions")


def test_every_part_has_exercises_solutions_and_tests():
    assert SOLUTION_FILES, "no solutions/part*.py found"
    for solution in SOLUTION_FILES:
        assert (ROOT / "exercises" / solution.name).exists(), f"exercises/{solution.name} is missing"
        assert solution.stem in TEST_MODULES, f"tests/test_{solution.stem}.py is missing"


@pytest.mark.parametrize("solution", SOLUTION_FILES, ids=[p.stem for p in SOLUTION_FILES])
def test_exercises_mirror_solutions(maintainer_mode, solution):
    exercise = ROOT / "exercises" / solution.name
    problems = mirror_problems(exercise, solution)
    assert not problems, "\n".join(problems)
    # The maintainers' generator reproduces the exercise file exactly.
    assert make_exercise_text(solution.read_text(), stubbed_functions(exercise)) == exercise.read_text(), (
        f"regenerate with: python scripts/make_stubs.py solutions/{solution.name}")


@pytest.mark.parametrize("solution", SOLUTION_FILES, ids=[p.stem for p in SOLUTION_FILES])
def test_graded_exercises_are_exactly_the_stubs(maintainer_mode, solution):
    stubs = exercise_names(ROOT / "exercises" / solution.name)
    graded = set(points_of(solution.stem))
    assert stubs == graded, f"stubs without points: {sorted(stubs - graded)}; points without a stub: {sorted(graded - stubs)}"
    assert not stubbed_functions(solution), f"solutions/{solution.name} still has stubs: {sorted(stubbed_functions(solution))}"


@pytest.mark.parametrize("solution", SOLUTION_FILES, ids=[p.stem for p in SOLUTION_FILES])
def test_every_exercise_has_three_known_mistakes(solution):
    for exercise in points_of(solution.stem):
        found = mistakes.mistakes_for(solution.stem, exercise)
        assert len(found) >= 3, f"{solution.stem}.{exercise} has {len(found)} known mistakes; keep at least 3"


PARTS_NEEDING_ALTERNATIVES = {"part1_ppo_core", "part2_cartpole", "part3_rlhf"}


@pytest.mark.parametrize("solution", SOLUTION_FILES, ids=[p.stem for p in SOLUTION_FILES])
def test_every_exercise_has_a_correct_alternative(solution):
    registered = {a.part for a in alternatives.all_alternatives()}
    if solution.stem not in PARTS_NEEDING_ALTERNATIVES | registered:
        pytest.skip(f"{solution.stem} registers no alternatives yet (workbook/alternatives/{solution.stem}.py)")
    missing = [e for e in points_of(solution.stem) if not alternatives.alternatives_for(solution.stem, e)]
    assert not missing, f"{solution.stem}: no correct alternative in workbook/alternatives/ for {missing}"


@pytest.mark.parametrize("mistake", mistakes.all_mistakes() + alternatives.all_alternatives(),
                         ids=lambda m: m.choice)
def test_variant_has_the_reference_signature(mistake):
    reference = getattr(importlib.import_module(f"solutions.{mistake.part}"), mistake.exercise)
    if inspect.isclass(reference):
        assert inspect.isclass(mistake.impl), f"{mistake.id} must be a class like {mistake.exercise}"
        for name in stubbed_functions(ROOT / "exercises" / f"{mistake.part}.py"):
            if name.startswith(mistake.exercise + "."):
                method = name.split(".", 1)[1]
                assert list(inspect.signature(getattr(mistake.impl, method)).parameters) == list(
                    inspect.signature(getattr(reference, method)).parameters), f"{mistake.id}.{method}: parameters differ"
    else:
        assert list(inspect.signature(mistake.impl).parameters) == list(inspect.signature(reference).parameters), (
            f"{mistake.id}: parameters differ from the reference")


def test_graded_tests_name_a_known_exercise():
    for part, path in TEST_MODULES.items():
        points = points_of(part)
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and ast.unparse(node.func) == "pytest.mark.exercise":
                name = ast.literal_eval(node.args[0])
                assert name in points, f"{path.name}: @pytest.mark.exercise({name!r}) is not in POINTS"
