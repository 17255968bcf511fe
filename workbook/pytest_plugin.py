"""The workbook's pytest plugin (loaded from pyproject.toml's addopts).

- ``--impl=exercises|solutions`` (env ``WORKBOOK_IMPL`` as fallback, default exercises)
  picks the implementation the ``impl`` fixture returns; ``ref`` is always the reference,
  used only as the oracle. ``--impl=mistake:PART:EXERCISE:NAME`` swaps one known-wrong
  version into the reference, and ``--impl=mistakes`` runs each exercise's tests once per
  known mistake (the meta-test reads the results).
- A test that hits a stub (``NotImplementedError`` raised in exercises/) is reported as
  *not started*, not as a traceback, and the end of the run prints one line per exercise.
- ``--workbook-report=PATH`` writes one JSON line per collected exercise test and per
  result, for the ``grade`` command.

A test module declares ``PART = "part1_ppo_core"`` and ``POINTS = {exercise: points}``, and
marks each grading test with ``@pytest.mark.exercise("compute_advantages")``.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import random
import sys
import traceback
from pathlib import Path

import numpy as np
import pytest
import torch

from workbook import mistakes
from workbook.grading import FAILING, NOT_STARTED, PASSING, aggregate

ROOT = Path(__file__).resolve().parent.parent
EXERCISES_DIR = ROOT / "exercises"
CHOICES = ("exercises", "solutions", "mistakes")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("workbook")
    group.addoption("--impl", default=None,
                    help="implementation under test: exercises (default), solutions, "
                         "mistake:PART:EXERCISE:NAME, or mistakes (every known mistake)")
    group.addoption("--workbook-report", default=None, metavar="PATH",
                    help="write per-test results as JSON lines (used by `python -m workbook grade`)")


def pytest_configure(config: pytest.Config) -> None:
    choice = config.getoption("--impl") or os.environ.get("WORKBOOK_IMPL") or "exercises"
    if choice not in CHOICES and not choice.startswith("mistake" + mistakes.SEPARATOR):
        raise pytest.UsageError(f"--impl must be one of {', '.join(CHOICES)} or mistake:PART:EXERCISE:NAME, got {choice!r}")
    if choice.startswith("mistake" + mistakes.SEPARATOR):
        mistakes.get(choice.split(mistakes.SEPARATOR, 1)[1])  # fail early on a typo
    config.workbook_impl = choice
    config.workbook_records = []
    path = config.getoption("--workbook-report")
    config.workbook_report = Path(path) if path else None
    if config.workbook_report:
        config.workbook_report.write_text("")
    # Small models on 2 cores: one thread is faster and far steadier.
    torch.set_num_threads(1)
    # Hypothesis: no example database in the work tree; with known mistakes, skip shrinking
    # (we only need to know that a property fails, and the run covers dozens of mistakes).
    from hypothesis import Phase, settings

    settings.register_profile("workbook", database=None)
    settings.register_profile("workbook-mistakes", database=None, phases=(Phase.explicit, Phase.generate))
    settings.load_profile("workbook-mistakes" if choice == "mistakes" else "workbook")


def _record(config: pytest.Config, record: dict) -> None:
    config.workbook_records.append(record)
    if config.workbook_report:
        with config.workbook_report.open("a") as f:
            f.write(json.dumps(record) + "\n")


def _exercise_of(item: pytest.Item) -> tuple[str, str, int] | None:
    marker = item.get_closest_marker("exercise")
    if marker is None:
        return None
    module = item.module
    part, points = getattr(module, "PART", None), getattr(module, "POINTS", {})
    name = marker.args[0]
    if part is None or name not in points:
        raise pytest.UsageError(f"{item.nodeid}: exercise marker needs module-level PART and POINTS[{name!r}]")
    return part, name, points[name]


# --- implementations ------------------------------------------------------------------

_loaded: dict[str, object] = {}


def load_with_mistake(mistake_id: str):
    """A fresh copy of the reference module for the mistake's part, with the mistake swapped in.

    A copy (not a patched original) so the module's own functions see the wrong version too.
    """
    if mistake_id not in _loaded:
        m = mistakes.get(mistake_id)
        name = f"solutions.{m.part}__{m.exercise}__{m.name}"
        spec = importlib.util.spec_from_file_location(name, ROOT / "solutions" / f"{m.part}.py")
        module = importlib.util.module_from_spec(spec)
        module.__workbook_part__ = m.part
        sys.modules[name] = module
        spec.loader.exec_module(module)
        setattr(module, m.exercise, m.impl)
        _loaded[mistake_id] = module
    return _loaded[mistake_id]


def load_impl(choice: str, part: str):
    if choice in ("exercises", "solutions"):
        return importlib.import_module(f"{choice}.{part}")
    return load_with_mistake(choice.split(mistakes.SEPARATOR, 1)[1])


@pytest.fixture(scope="module")
def ref(request: pytest.FixtureRequest):
    """The reference solutions of this test module's part — the oracle, never under test."""
    return importlib.import_module(f"solutions.{request.module.PART}")


@pytest.fixture(scope="module")
def impl(request: pytest.FixtureRequest):
    """The implementation under test for this test module's part (see --impl)."""
    if hasattr(request, "param"):  # --impl=mistakes parametrises this fixture per mistake
        return load_with_mistake(request.param)
    choice = request.config.workbook_impl
    if choice == "mistakes":
        pytest.skip("no known mistakes are registered for this test's exercise")
    return load_impl(choice, request.module.PART)


@pytest.fixture(autouse=True)
def _seed_everything():
    """Same seed, same numbers: every test starts from the same global RNG state."""
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if metafunc.config.workbook_impl != "mistakes" or "impl" not in metafunc.fixturenames:
        return
    marker = metafunc.definition.get_closest_marker("exercise")
    if marker is None:
        return
    found = mistakes.mistakes_for(metafunc.module.PART, marker.args[0])
    metafunc.parametrize("impl", [m.id for m in found], indirect=True, ids=[m.name for m in found], scope="module")


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.workbook_impl == "mistakes":
        keep = [i for i in items if getattr(i, "callspec", None) and "impl" in i.callspec.params]
        config.hook.pytest_deselected(items=[i for i in items if i not in keep])
        items[:] = keep


def pytest_collection_finish(session: pytest.Session) -> None:
    # After -k/-m deselection, so a partial run grades only what it runs.
    config = session.config
    if config.workbook_impl == "mistakes":
        return
    for item in session.items:
        found = _exercise_of(item)
        if found:
            part, exercise, points = found
            _record(config, {"kind": "collected", "nodeid": item.nodeid, "part": part, "exercise": exercise, "points": points})


# --- results --------------------------------------------------------------------------

def _stub_location(excinfo: pytest.ExceptionInfo) -> str | None:
    """'exercises/part1_ppo_core.py::compute_advantages' if the error came from a stub."""
    for frame, _ in reversed(list(traceback.walk_tb(excinfo.tb))):
        path = Path(frame.f_code.co_filename)
        if EXERCISES_DIR in path.parents:
            name = getattr(frame.f_code, "co_qualname", frame.f_code.co_name)
            return f"{path.relative_to(ROOT)}::{name}"
    return None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    config = item.config
    failed_here = report.failed and call.excinfo is not None
    stub = None
    if failed_here and config.workbook_impl == "exercises" and call.excinfo.errisinstance(NotImplementedError):
        stub = _stub_location(call.excinfo)
    if stub is not None:
        found = _exercise_of(item)
        own = found and stub.split("::")[1].split(".")[0] == found[1]
        message = f"not started: fill in {stub}" if own or not found else f"not started: needs {stub}"
        report.outcome = "skipped"
        report.longrepr = (str(item.path), item.location[1] or 0, message)
        report.workbook_outcome = NOT_STARTED
    if failed_here and stub is None and str(call.excinfo.value).startswith("wrong answer from"):
        # Our own explanation says everything; a traceback through the harness adds nothing.
        where = f"{item.path.name}:{item.location[1] + 1 if item.location[1] is not None else '?'}"
        report.longrepr = f"{item.name} ({where})\n{call.excinfo.value}"
    if report.when == "call" or (report.when == "setup" and not report.passed):
        found = _exercise_of(item)
        if found is None:
            return
        part, exercise, _ = found
        if getattr(report, "workbook_outcome", None) == NOT_STARTED:
            status, message = NOT_STARTED, report.longrepr[2]
        elif report.passed:
            status, message = "passed", ""
        elif report.skipped:
            status, message = "skipped", str(report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr)
        else:
            status, message = "failed", _failure_text(call)
        record = {"kind": "result", "nodeid": item.nodeid, "part": part, "exercise": exercise,
                  "outcome": status, "message": message[:4000], "duration": round(report.duration, 3)}
        if getattr(item, "callspec", None) and "impl" in item.callspec.params:
            record["mistake"] = item.callspec.params["impl"]
            record["full_text"] = str(report.longrepr)[-20000:]
        _record(config, record)


def _failure_text(call: pytest.CallInfo) -> str:
    if call.excinfo is None:
        return "failed"
    return f"{call.excinfo.typename}: {call.excinfo.value}"


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    records = config.workbook_records
    if config.workbook_impl == "mistakes":
        results = [r for r in records if r.get("mistake")]
        caught = {r["mistake"] for r in results if r["outcome"] == "failed"}
        ids = {r["mistake"] for r in results}
        terminalreporter.write_sep("=", f"known mistakes: {len(caught)} of {len(ids)} caught by at least one test")
        return
    rows = aggregate(records)
    if not rows:
        return
    impl = config.workbook_impl
    terminalreporter.write_sep("=", f"workbook progress (--impl={impl})")
    width = max(len(f"{r.part}.{r.exercise}") for r in rows)
    for r in rows:
        marks = {PASSING: "✓", FAILING: "✗", NOT_STARTED: "·"}
        extra = f"  {r.detail}" if r.status == NOT_STARTED else (f"  ({r.tests - r.passed} of {r.tests} tests fail)" if r.status == FAILING else "")
        name = f"{r.part}.{r.exercise}"
        terminalreporter.write_line(f"  {marks.get(r.status, '?')} {name:<{width}}  {r.status}{extra}")
    total, most = sum(r.points for r in rows), sum(r.max_points for r in rows)
    terminalreporter.write_line(f"  points: {total}/{most}")
