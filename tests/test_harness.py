"""The grading harness itself: shape errors, comparisons, the grade table."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from jaxtyping import TypeCheckError

from workbook.checking import compare, first_mismatch, known_mistake
from workbook.grading import FAILING, NOT_STARTED, PASSING, TIMED_OUT, aggregate

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("package", ["exercises", "solutions"])
def test_wrong_shape_is_named_by_its_dimension(package):
    module = __import__(f"{package}.part1_ppo_core", fromlist=["compute_advantages"])
    with pytest.raises(TypeCheckError, match="num_envs"):
        module.compute_advantages(torch.zeros(3), torch.zeros(3, dtype=torch.bool), torch.zeros(5, 4), torch.zeros(5, 4),
                                  torch.zeros(5, 4, dtype=torch.bool), 0.99, 0.95)


def test_wrong_dtype_is_rejected():
    from solutions.part1_ppo_core import compute_advantages

    with pytest.raises(TypeCheckError, match="terminated"):
        compute_advantages(torch.zeros(4), torch.zeros(4), torch.zeros(5, 4), torch.zeros(5, 4),
                           torch.zeros(5, 4, dtype=torch.bool), 0.99, 0.95)


def test_out_of_range_discount_is_rejected():
    from solutions.part1_ppo_core import compute_advantages

    with pytest.raises(ValueError, match="gamma"):
        compute_advantages(torch.zeros(4), torch.zeros(4, dtype=torch.bool), torch.zeros(5, 4), torch.zeros(5, 4),
                           torch.zeros(5, 4, dtype=torch.bool), 1.5, 0.95)


def test_compare_checks_shape_dtype_then_values():
    a = torch.zeros(2, 3)
    assert compare(a, a.clone()) is None
    assert "shape" in compare(torch.zeros(3, 2), a)
    assert "dtype" in compare(a.double(), a)
    message = compare(a + torch.tensor([[0, 0, 0], [0, 1.0, 0]]), a)
    assert "max abs diff: 1 at index (1, 1)" in message and "first mismatch at index (1, 1)" in message
    assert "expected 2" in compare({"x": 1.0}, {"x": 2.0}) or "values differ" in compare({"x": 1.0}, {"x": 2.0})
    assert compare(np.arange(3), np.arange(3)) is None
    # Dicts of stats: name the missing and unexpected keys, not two long lists.
    keys = compare({"a": 1.0, "b": 2.0, "x": 0.0}, {"a": 1.0, "b": 2.0, "y": 0.0, "z": 0.0})
    assert "missing ['y', 'z']; unexpected ['x']" in keys and "2 keys in common" in keys, keys



def test_a_dtype_difference_alone_has_no_first_mismatch():
    # A bool mask where a float32 one is due: the message says "dtype", and finding "the first differing
    # element" (for the inputs at the mismatch) finds none instead of failing inside the harness.
    mask = torch.tensor([[1.0, 0.0], [0.0, 0.0]])
    assert "dtype" in compare((mask.bool(), torch.tensor([False, True])), (mask, torch.tensor([False, True])))
    assert first_mismatch((mask.bool(), torch.tensor([False, True])), (mask, torch.tensor([False, True]))) is None
    assert first_mismatch(mask.bool().float() + torch.tensor([[0.0, 1.0], [0.0, 0.0]]), mask)[0] == (0, 1)

def test_known_mistake_rejects_a_typo():
    with pytest.raises(KeyError):
        known_mistake("part1_ppo_core", "compute_advantages", "no_such_mistake")


def test_aggregate_statuses():
    def collected(n, ex):
        return {"kind": "collected", "nodeid": n, "part": "p", "exercise": ex, "points": 2}

    def result(n, ex, outcome):
        return {"kind": "result", "nodeid": n, "part": "p", "exercise": ex, "outcome": outcome, "message": outcome}

    rows = aggregate([collected("a1", "a"), collected("a2", "a"), collected("b1", "b"), collected("c1", "c"),
                      collected("d1", "d"), result("a1", "a", "passed"), result("a2", "a", "passed"),
                      result("b1", "b", "failed"), result("c1", "c", NOT_STARTED)])
    status = {r.exercise: (r.status, r.points) for r in rows}
    assert status == {"a": (PASSING, 2), "b": (FAILING, 0), "c": (NOT_STARTED, 0), "d": (FAILING, 0)}  # d never finished


def test_aggregate_lists_the_parts_by_their_numbers():
    # A string sort puts part10 before part1 and part9 (issue 36): the table follows the parts' numbers.
    parts = ["part10_async", "part9_agents", "part1_ppo_core", "part2_cartpole"]
    records = [{"kind": "collected", "nodeid": f"{p}::t", "part": p, "exercise": "e", "points": 1} for p in parts]
    records += [{"kind": "result", "nodeid": f"{p}::t", "part": p, "exercise": "e", "outcome": "passed", "message": ""}
                for p in parts]
    assert [r.part for r in aggregate(records)] == ["part1_ppo_core", "part2_cartpole", "part9_agents", "part10_async"]


def fresh_checkout(tmp_path: Path, part: str) -> Path:
    """A copy of the package and one part's tests in which every graded exercise is an unfilled stub.

    Independent of the state of exercises/ in this checkout, where a learner fills stubs in.
    """
    import ast
    import shutil

    from workbook.mirror import _functions, make_exercise_text

    root = tmp_path / "checkout"
    ignore = shutil.ignore_patterns("__pycache__")
    for name in ("workbook", "solutions"):
        shutil.copytree(ROOT / name, root / name, ignore=ignore)
    (root / "tests").mkdir()
    for name in ("conftest.py", f"test_{part}.py"):
        shutil.copy(ROOT / "tests" / name, root / "tests" / name)
    shutil.copy(ROOT / "pyproject.toml", root / "pyproject.toml")
    (root / "exercises").mkdir()
    (root / "exercises" / "__init__.py").write_text("")
    solution = (ROOT / "solutions" / f"{part}.py").read_text()
    points = ast.literal_eval(next(node.value for node in ast.parse((ROOT / "tests" / f"test_{part}.py").read_text()).body
                                   if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "POINTS"))
    names = {n for n in _functions(ast.parse(solution)) if n.split(".")[0] in points}
    (root / "exercises" / f"{part}.py").write_text(make_exercise_text(solution, names))
    return root


@pytest.mark.slow
def test_grade_reports_stubs_as_not_started(tmp_path):
    out = tmp_path / "grade.json"
    root = fresh_checkout(tmp_path, "part1_ppo_core")
    proc = subprocess.run([sys.executable, "-m", "workbook", "grade", "--impl", "exercises", "--part", "part1_ppo_core",
                           "--json", str(out)], cwd=root, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, PYTHONPATH=str(root)))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    payload = json.loads(out.read_text())
    assert payload["points"] == 0 and payload["max_points"] > 0
    assert {e["status"] for e in payload["exercises"]} == {NOT_STARTED}
    assert "not started" in proc.stdout and "total" in proc.stdout


def half_done_checkout(tmp_path: Path) -> Path:
    """Part 1 as a learner may leave it: one known mistake, one infinite loop, two stubs, the rest correct."""
    from workbook.mirror import make_exercise_text

    root = fresh_checkout(tmp_path, "part1_ppo_core")
    text = make_exercise_text((ROOT / "solutions" / "part1_ppo_core.py").read_text(), {"PPOScheduler.__init__", "PPOScheduler.step", "make_optimizer"})
    text += ("\n\nfrom workbook.mistakes.part1_ppo_core import value_loss_sum as calc_value_function_loss  # noqa: E402\n\n\n"
             "def calc_entropy_bonus(dist, ent_coef):\n    while True:\n        pass\n")
    (root / "exercises" / "part1_ppo_core.py").write_text(text)
    return root


@pytest.mark.slow
def test_an_infinite_loop_costs_one_timeout_and_grade_says_what_to_do(tmp_path):
    root = half_done_checkout(tmp_path)
    env = dict(os.environ, PYTHONPATH=str(root))
    out = tmp_path / "grade.json"
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "workbook", "grade", "--part", "part1_ppo_core", "--per-test-timeout", "3",
                           "--json", str(out)], cwd=root, capture_output=True, text=True, timeout=120, env=env)
    grade_s = time.monotonic() - start
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = {e["exercise"]: e for e in json.loads(out.read_text())["exercises"]}
    assert rows["calc_entropy_bonus"]["status"] == TIMED_OUT
    assert rows["calc_value_function_loss"]["status"] == FAILING and rows["PPOScheduler"]["status"] == NOT_STARTED
    assert rows["compute_advantages"]["status"] == PASSING
    # Progress while it runs: the timeout is reported as it happens, then the part.
    assert "part1_ppo_core.calc_entropy_bonus: timed out after 3 s of CPU time" in proc.stdout
    assert "part1_ppo_core: 8 exercises graded" in proc.stdout
    # The failing row's diagnosis (the known mistake) and the command that shows the details.
    lines = proc.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("✗ part1_ppo_core.calc_value_function_loss: failing"))
    assert "[known mistake: sum_instead_of_mean]" in lines[at + 1]
    assert lines[at + 2].strip() == "details: pytest tests/test_part1_ppo_core.py -k calc_value_function_loss"
    assert "timed out" in rows["calc_entropy_bonus"]["detail"]
    # Not started: one line for the part, not one per exercise.
    assert [line for line in lines if "not started (" in line] == [
        "· part1_ppo_core: 2 of 8 exercises not started (PPOScheduler, make_optimizer)"]
    assert grade_s < 60, f"grade took {grade_s:.0f} s"

    # Plain pytest on the part: one timeout, then the hung function fails at once wherever it is called.
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "pytest", "tests/test_part1_ppo_core.py", "-q", "-p", "no:cacheprovider",
                           "--timeout=3"], cwd=root, capture_output=True, text=True, timeout=120, env=env)
    assert time.monotonic() - start < 60
    # Count in the failure reports only: the workbook's summary gives each row's diagnosis, and with CI=true
    # pytest repeats each whole message in its short summary.
    reports = proc.stdout.split("workbook progress")[0]
    assert reports.count("s of CPU time in exercises/part1_ppo_core.py::calc_entropy_bonus (") == 1, proc.stdout[-3000:]
    assert "calc_entropy_bonus timed out earlier in this run" in proc.stdout

    # The details command selects exactly that exercise's tests.
    report = tmp_path / "details.jsonl"
    subprocess.run([sys.executable, "-m", "pytest", "tests/test_part1_ppo_core.py", "-k", "calc_value_function_loss", "-q",
                    "--collect-only", "-p", "no:cacheprovider", f"--workbook-report={report}"], cwd=root, capture_output=True,
                   text=True, timeout=120, env=env)
    records = [json.loads(line) for line in report.read_text().splitlines()]
    assert {r["exercise"] for r in records} == {"calc_value_function_loss"}
    assert sum(r["kind"] == "collected" for r in records) == rows["calc_value_function_loss"]["tests"]


def test_pytest_has_a_per_test_timeout_that_keeps_a_hung_part_under_a_minute():
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert 0 < float(config["timeout"]) <= 30  # one timeout + startup + the other tests of the part < 60 s


def test_details_command_excludes_exercises_whose_name_contains_this_one():
    row = aggregate([{"kind": "collected", "nodeid": f"t::{e}", "part": "part3_rlhf", "exercise": e, "points": 1}
                     for e in ("whiten", "masked_whiten")])[0]
    assert row.command == 'pytest tests/test_part3_rlhf.py -k "whiten and not masked_whiten"'


def test_shape_error_is_one_paragraph(tmp_path):
    """What a learner sees when jaxtyping rejects an argument: the parameter, expected vs actual, the dimension."""
    test = tmp_path / "test_shape.py"
    test.write_text("import torch\n"
                    "from exercises.part1_ppo_core import compute_advantages\n\n"
                    "def test_wrong_num_envs():\n"
                    "    compute_advantages(torch.zeros(3), torch.zeros(3, dtype=torch.bool), torch.zeros(5, 4),\n"
                    "                       torch.zeros(5, 4), torch.zeros(5, 4, dtype=torch.bool), 0.99, 0.95)\n")
    proc = subprocess.run([sys.executable, "-m", "pytest", str(test), "-q", "-p", "no:cacheprovider", "--rootdir", str(ROOT),
                           "-c", str(ROOT / "pyproject.toml")], cwd=ROOT, capture_output=True, text=True, timeout=120)
    failure = proc.stdout.split(" FAILURES ")[1].split("short test summary")[0]
    assert len([line for line in failure.splitlines() if line.strip() and not line.startswith(("_", "="))]) <= 5, failure
    assert ("compute_advantages() rejected parameter 'rewards': expected Float[Tensor, 'buffer_size num_envs'], "
            "got f32[5,4]") in failure
    assert "dimension num_envs: 4 here, but 3 in the earlier arguments (set by next_value: f32[3]" in failure


def test_pytest_rejects_an_unknown_impl():
    proc = subprocess.run([sys.executable, "-m", "pytest", "tests/test_harness.py", "--impl=nonsense", "-q",
                           "-p", "no:cacheprovider"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "--impl must be one of" in proc.stderr + proc.stdout


# --- the suite's budget and make test's two workers (docs/testing.md) ----------------------------------------

class _Lines:
    """A terminal reporter that keeps what the plugin writes, with the reports pytest would have collected."""

    def __init__(self, stats: dict) -> None:
        self.stats, self.lines = stats, []

    def write_sep(self, sep: str, title: str) -> None:
        self.lines.append(title)

    def write_line(self, line: str) -> None:
        self.lines.append(line)


def _report(nodeid: str, seconds: float) -> pytest.TestReport:
    return pytest.TestReport(nodeid, ("x", 0, "t"), {}, "passed", None, "call", duration=seconds)


def test_the_budget_table_names_the_slowest_files_a_part_over_budget_and_a_slow_file_the_workers_do_not_start_with():
    from types import SimpleNamespace

    from workbook import pytest_plugin as plugin

    stats = {"passed": [_report("tests/test_part6_data_parallel.py::a", 6.0), _report("tests/test_part6_data_parallel.py::b", 2.0),
                        _report("tests/test_part1_ppo_core.py::a", 3.0), _report("tests/test_new_thing.py::a", 30.0),
                        _report("tests/test_medium.py::a", plugin.UNLISTED_S - 1),
                        _report(f"tests/{plugin.LONGEST_FILES[0]}::a", 50.0)]}
    config = SimpleNamespace(workbook_impl="solutions", _workbook_started=time.perf_counter() - 300)
    out = _Lines(stats)
    plugin._budget_report(out, config)
    text = "\n".join(out.lines)
    assert "this run: 300 s" in text and "OVER BUDGET" in text
    assert text.index(plugin.LONGEST_FILES[0]) < text.index("test_new_thing.py") < text.index("test_part6")
    (unlisted,) = [line for line in out.lines if "not in pytest_plugin.LONGEST_FILES" in line]
    assert "test_new_thing.py" in unlisted and "test_medium.py" not in unlisted  # a short one hardly moves the end
    over = [line for line in out.lines if line.startswith("  over a part's budget")]
    assert len(over) == 1 and "test_part6_data_parallel.py" in over[0] and "8.0 s" in over[0]  # its two tests, summed
    # One file: no table (a learner's loop on one part).
    out = _Lines({"passed": [_report("tests/test_part1_ppo_core.py::a", 300.0)]})
    plugin._budget_report(out, config)
    assert out.lines == []


def test_the_workers_records_reach_the_controller_each_collected_test_once():
    from types import SimpleNamespace

    from workbook import pytest_plugin as plugin
    from workbook.grading import aggregate

    config = SimpleNamespace(workbook_records=[], workbook_report=None)
    collected = [{"kind": "collected", "nodeid": f"t::{i}", "part": "p", "exercise": "e", "points": 1} for i in range(3)]
    results = [{"kind": "result", "nodeid": f"t::{i}", "part": "p", "exercise": "e", "outcome": "passed", "message": ""}
               for i in range(3)]
    # Every worker collects every test; each runs its share.
    plugin.pytest_testnodedown(SimpleNamespace(config=config, workeroutput={"workbook_records": collected + results[:2]}), None)
    plugin.pytest_testnodedown(SimpleNamespace(config=config, workeroutput={"workbook_records": collected + results[2:]}), None)
    plugin.pytest_testnodedown(SimpleNamespace(config=config), "a worker that crashed sends nothing")
    assert sum(r["kind"] == "collected" for r in config.workbook_records) == 3
    (row,) = aggregate(config.workbook_records)
    assert row.status == PASSING and row.tests == 3


def test_an_interrupted_run_says_which_exercises_it_did_not_finish_not_that_they_fail():
    from types import SimpleNamespace

    from workbook import pytest_plugin as plugin

    def records(outcomes: dict[str, list[str]]) -> list[dict]:
        out = []
        for exercise, results in outcomes.items():
            out += [{"kind": "collected", "nodeid": f"t::{exercise}{i}", "part": "part1_ppo_core", "exercise": exercise,
                     "points": 1} for i in range(3)]
            out += [{"kind": "result", "nodeid": f"t::{exercise}{i}", "part": "part1_ppo_core", "exercise": exercise,
                     "outcome": o, "message": "wrong answer from x\n  output: 2, expected 3" if o == "failed" else ""}
                    for i, o in enumerate(results)]
        return out

    # Ctrl-C in the second exercise's tests: the first is done, the second half run, the third never started.
    done = records({"compute_advantages": ["passed"] * 3, "get_minibatch_indices": ["passed"], "make_optimizer": [],
                    "PPOScheduler": ["failed"]})
    for status, said in ((pytest.ExitCode.INTERRUPTED, "interrupted"), (pytest.ExitCode.TESTS_FAILED, "timeout")):
        out = _Lines({})
        plugin.pytest_terminal_summary(out, status, SimpleNamespace(workbook_impl="exercises", workbook_records=done))
        lines = {line.split()[1]: line for line in out.lines if line.startswith("  ") and "part1_ppo_core." in line}
        assert "passing" in lines["part1_ppo_core.compute_advantages"]
        assert "failing" in lines["part1_ppo_core.PPOScheduler"], "a test that ran and failed is a failure either way"
        for name in ("get_minibatch_indices", "make_optimizer"):
            line = lines[f"part1_ppo_core.{name}"]
            assert said in line and (("fail" not in line) == (said == "interrupted")), line
        if said == "interrupted":
            assert "1 of 3 tests passed before Ctrl-C" in lines["part1_ppo_core.get_minibatch_indices"]


def test_the_workers_read_the_meta_run_of_the_controller_or_its_error(tmp_path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("conftest_under_test", ROOT / "tests" / "conftest.py")
    conftest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conftest)
    with pytest.raises(RuntimeError, match="no results in 0 s"):
        conftest._results_from_controller(tmp_path, timeout=0.2)
    (tmp_path / "error.txt").write_text("RuntimeError: the variants run produced no results")
    with pytest.raises(RuntimeError, match="produced no results"):
        conftest._results_from_controller(tmp_path, timeout=5)
    (tmp_path / "error.txt").unlink()
    (tmp_path / "results.json").write_text(json.dumps({"mistake:p:e:n": [{"outcome": "failed"}]}))
    assert conftest._results_from_controller(tmp_path, timeout=5) == {"mistake:p:e:n": [{"outcome": "failed"}]}
