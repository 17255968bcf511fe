"""The grading harness itself: shape errors, comparisons, the grade table."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from jaxtyping import TypeCheckError

from workbook.checking import compare, known_mistake
from workbook.grading import FAILING, NOT_STARTED, PASSING, aggregate

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


@pytest.mark.slow
def test_grade_reports_stubs_as_not_started(tmp_path):
    out = tmp_path / "grade.json"
    proc = subprocess.run([sys.executable, "-m", "workbook", "grade", "--impl", "exercises", "--part", "part1_ppo_core",
                           "--json", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    payload = json.loads(out.read_text())
    assert payload["points"] == 0 and payload["max_points"] > 0
    assert {e["status"] for e in payload["exercises"]} == {NOT_STARTED}
    assert "not started" in proc.stdout and "total" in proc.stdout


def test_pytest_rejects_an_unknown_impl():
    proc = subprocess.run([sys.executable, "-m", "pytest", "tests/test_harness.py", "--impl=nonsense", "-q",
                           "-p", "no:cacheprovider"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "--impl must be one of" in proc.stderr + proc.stdout
