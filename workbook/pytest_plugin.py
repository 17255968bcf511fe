"""The workbook's pytest plugin (loaded from pyproject.toml's addopts).

- ``--impl=exercises|solutions`` (env ``WORKBOOK_IMPL`` as fallback, default exercises)
  picks the implementation the ``impl`` fixture returns; ``ref`` is always the reference,
  used only as the oracle. ``--impl=mistake:PART:EXERCISE:NAME`` swaps one known-wrong
  version into the reference (``alternative:PART:EXERCISE:NAME`` one correct alternative), and
  ``--impl=mistakes`` / ``alternatives`` / ``variants`` (both) runs each exercise's tests once
  per variant of that exercise; ``--variant-shard=I/K`` keeps every K-th variant from the I-th
  (the meta-tests run K shards in parallel and read the results; see workbook/variants.py).
- A test that hits a stub (``NotImplementedError`` raised in exercises/) is reported as
  *not started*, not as a traceback — or, when the exercise itself is written and the stub
  belongs to another exercise it calls, as *waiting on part1_ppo_core.NAME*. The end of the
  run prints one line per exercise (with its diagnosis and how many tests fail) and why tests
  were skipped.
- An exercise's first failure is shown in full; its later ones in two lines (the test, the
  diagnosis), so one mistake does not fill the screen once per test.
- ``--workbook-report=PATH`` writes one JSON line per collected exercise test and per
  result, for the ``grade`` command.
- Hangs cost seconds: every test has pytest-timeout's limit (``timeout`` in pyproject.toml, in
  CPU seconds, with a wall-clock backstop; tests marked ``slow`` that grade no exercise get
  ``SLOW_TIMEOUT_S``). When a test times out
  inside a function of exercises/, that function is replaced for the rest of the run by one
  that fails at once, so the exercise's other tests (and everything that calls it) stop
  immediately instead of each waiting for its own timeout; the result reads "timed out".
- ``pytest -k compute_advantages`` selects an exercise's tests: the exercise name is a keyword
  of each test marked with it.

A test module declares ``PART = "part1_ppo_core"`` and ``POINTS = {exercise: points}``, and
marks each grading test with ``@pytest.mark.exercise("compute_advantages")``.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import random
import signal
import sys
import threading
import time
import traceback
from pathlib import Path

import numpy as np
import pytest
import torch
from jaxtyping import TypeCheckError

from workbook import alternatives, mistakes, variants
from workbook.grading import FAILING, NOT_STARTED, PASSING, TIMED_OUT, UNFINISHED, WAITING, aggregate, diagnosis
from workbook.mirror import stubbed_functions
from workbook.typecheck import explain_type_error


def registries() -> dict[str, variants.Registry]:
    """{'mistake': ..., 'alternative': ...} (here, above both: ``workbook.variants`` imports neither)."""
    return {"mistake": mistakes.REGISTRY, "alternative": alternatives.REGISTRY}


def from_choice(choice: str) -> variants.Variant:
    """The variant an ``--impl`` value like 'mistake:PART:EXERCISE:NAME' names (KeyError if none)."""
    kind, _, variant_id = choice.partition(variants.SEPARATOR)
    found = registries().get(kind)
    if found is None:
        raise KeyError(f"unknown kind of variant {kind!r} in {choice!r}")
    return found.get(variant_id)


ROOT = Path(__file__).resolve().parent.parent
EXERCISES_DIR = ROOT / "exercises"
VARIANT_RUNS = {"mistakes": ("mistake",), "alternatives": ("alternative",), "variants": ("mistake", "alternative")}
CHOICES = ("exercises", "solutions", *VARIANT_RUNS)
SLOW_TIMEOUT_S = 1800  # per-test limit of the `slow` tests that grade no exercise (the meta-tests run the suite)
WALL_FACTOR = 4  # a test times out after `timeout` s of CPU time, or WALL_FACTOR times that of wall time


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("workbook")
    group.addoption("--impl", default=None,
                    help="implementation under test: exercises (default), solutions, mistake:PART:EXERCISE:NAME, "
                         "alternative:PART:EXERCISE:NAME, mistakes (every known mistake), alternatives (every "
                         "correct alternative) or variants (both)")
    group.addoption("--variant-shard", default="0/1", metavar="I/K",
                    help="with --impl=mistakes|alternatives|variants: run only every K-th variant, from the I-th")
    group.addoption("--mistakes-stop-when-named", action="store_true",
                    help="with --impl=mistakes|variants: once a test has failed and named a known mistake, skip that "
                         "mistake's other tests (the meta-run: all it asks is caught and named)")
    group.addoption("--workbook-report", default=None, metavar="PATH",
                    help="write per-test results as JSON lines (used by `python -m workbook grade`)")


def pytest_configure(config: pytest.Config) -> None:
    choice = config.getoption("--impl") or os.environ.get("WORKBOOK_IMPL") or "exercises"
    if choice not in CHOICES:
        try:
            from_choice(choice)  # fail early on a typo
        except KeyError as e:
            raise pytest.UsageError(f"--impl must be one of {', '.join(CHOICES)}, mistake:PART:EXERCISE:NAME or "
                                    f"alternative:PART:EXERCISE:NAME, got {choice!r} ({e.args[0]})") from None
    shard, _, shards = config.getoption("--variant-shard").partition("/")
    if not (shard.isdigit() and shards.isdigit() and int(shard) < int(shards)):
        raise pytest.UsageError(f"--variant-shard must be I/K with 0 <= I < K, got {config.getoption('--variant-shard')!r}")
    config.workbook_shard = (int(shard), int(shards))
    config.workbook_impl = choice
    config.workbook_records = []
    path = config.getoption("--workbook-report")
    # Under pytest-xdist (make test's -n 2) the workers hand their records to the controller when they end
    # (pytest_testnodedown below), and only the controller writes the report and prints the tables.
    config.workbook_report = Path(path) if path and not _xdist_worker(config) else None
    if config.workbook_report:
        config.workbook_report.write_text("")
    # Small models on 2 cores: one thread is faster and far steadier.
    torch.set_num_threads(1)
    _seed_the_cpu_only_without_accelerators()
    # Hypothesis: no example database in the work tree; with known mistakes, skip shrinking
    # (we only need to know that a property fails, and the run covers dozens of mistakes).
    from hypothesis import Phase, settings

    settings.register_profile("workbook", database=None)
    settings.register_profile("workbook-mistakes", database=None, phases=(Phase.explicit, Phase.generate))
    settings.load_profile("workbook-mistakes" if choice in VARIANT_RUNS else "workbook")


def _seed_the_cpu_only_without_accelerators() -> None:
    """Where no CUDA, XPU or MTIA device exists, ``torch.manual_seed`` seeds the CPU generator only (what it would do
    with them in the end). torch also queues the seed for each of those devices, with a formatted stack trace for
    when the device starts — which on a CPU machine it never does: about a millisecond a call from a test's deep
    stack, 9,500 calls and some 10 CPU seconds in the meta-run (the autouse seeding below, and the tests' own)."""
    import torch.random

    impl = getattr(torch.random, "_manual_seed_impl", None)  # torch's private name (2.13): left alone if it moves
    if impl is None or torch.cuda.is_available() or torch.xpu.is_available() or torch.mtia.is_available():
        return
    torch.random._manual_seed_impl = lambda seed: torch.default_generator.manual_seed(int(seed))


def _xdist_worker(config: pytest.Config) -> bool:
    """Whether this process is a pytest-xdist worker (its results reach the terminal through the controller)."""
    return hasattr(config, "workerinput")


def pytest_sessionfinish(session: pytest.Session) -> None:
    if _xdist_worker(session.config):  # JSON-able dicts: execnet carries them to the controller
        session.config.workeroutput["workbook_records"] = session.config.workbook_records


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    """pytest-xdist's controller: a finished worker's records join this process's (each collected test once:
    every worker collects them all, and runs its share)."""
    config = node.config
    seen = config.__dict__.setdefault("_workbook_collected", set())
    for record in getattr(node, "workeroutput", {}).get("workbook_records", []):
        if record["kind"] == "collected":
            if record["nodeid"] in seen:
                continue
            seen.add(record["nodeid"])
        _record(config, record)


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


def load_variant(choice: str):
    """A fresh copy of the reference module for the variant's part, with the variant swapped in.

    ``choice`` is 'mistake:PART:EXERCISE:NAME' or 'alternative:PART:EXERCISE:NAME'. A copy
    (not a patched original) so the module's own functions see the swapped-in version too.
    """
    if choice not in _loaded:
        v = from_choice(choice)
        name = f"solutions.{v.part}__{v.kind}__{v.exercise}__{v.name}"
        spec = importlib.util.spec_from_file_location(name, ROOT / "solutions" / f"{v.part}.py")
        module = importlib.util.module_from_spec(spec)
        module.__workbook_part__ = v.part
        sys.modules[name] = module
        spec.loader.exec_module(module)
        setattr(module, v.exercise, v.impl)
        _loaded[choice] = module
    return _loaded[choice]


def load_with_mistake(mistake_id: str):
    """:func:`load_variant` of a known mistake, by its id 'PART:EXERCISE:NAME'."""
    return load_variant(mistakes.SEPARATOR.join(("mistake", mistake_id)))


def load_impl(choice: str, part: str):
    if choice in ("exercises", "solutions"):
        return importlib.import_module(f"{choice}.{part}")
    return load_variant(choice)


@pytest.fixture(scope="module")
def ref(request: pytest.FixtureRequest):
    """The reference solutions of this test module's part — the oracle, never under test."""
    return importlib.import_module(f"solutions.{request.module.PART}")


@pytest.fixture(scope="module")
def impl(request: pytest.FixtureRequest):
    """The implementation under test for this test module's part (see --impl)."""
    if hasattr(request, "param"):  # --impl=mistakes|alternatives|variants parametrises this fixture per variant
        return load_variant(request.param)
    choice = request.config.workbook_impl
    if choice in VARIANT_RUNS:
        pytest.skip("no variants of this test's exercise are in this run")
    return load_impl(choice, request.module.PART)


@pytest.fixture(autouse=True)
def _seed_everything():
    """Same seed, same numbers: every test starts from the same global RNG state."""
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)


def pytest_runtest_setup(item: pytest.Item) -> None:
    named = getattr(item.config, "_workbook_named_mistakes", ())
    if named and getattr(item, "callspec", None) and item.callspec.params.get("impl") in named:
        pytest.skip("this known mistake is already caught and named by an earlier test")


def _variants_in_run(config: pytest.Config) -> list:
    """The variants this run covers: the kinds --impl asks for, then every K-th of --variant-shard."""
    if not hasattr(config, "_workbook_variants"):
        found = [v for kind in VARIANT_RUNS[config.workbook_impl] for v in registries()[kind].all()]
        shard, shards = config.workbook_shard
        config._workbook_variants = found[shard::shards]
    return config._workbook_variants


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if metafunc.config.workbook_impl not in VARIANT_RUNS or "impl" not in metafunc.fixturenames:
        return
    marker = metafunc.definition.get_closest_marker("exercise")
    if marker is None:
        return
    found = [v for v in _variants_in_run(metafunc.config) if (v.part, v.exercise) == (metafunc.module.PART, marker.args[0])]
    if found:  # tests left unparametrised are deselected below
        metafunc.parametrize("impl", [v.choice for v in found], indirect=True, ids=[f"{v.kind}-{v.name}" for v in found],
                             scope="module")


def pytest_itemcollected(item: pytest.Item) -> None:
    marker = item.get_closest_marker("exercise")
    if marker is not None:  # `pytest -k NAME` selects the exercise's tests, whatever they are called
        item.extra_keyword_matches.add(marker.args[0])
    if item.get_closest_marker("slow") and marker is None and item.get_closest_marker("timeout") is None:
        item.add_marker(pytest.mark.timeout(SLOW_TIMEOUT_S))


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.workbook_impl in VARIANT_RUNS:
        keep = [i for i in items if getattr(i, "callspec", None) and "impl" in i.callspec.params]
        config.hook.pytest_deselected(items=[i for i in items if i not in keep])
        items[:] = keep


def pytest_collection_finish(session: pytest.Session) -> None:
    # After -k/-m deselection, so a partial run grades only what it runs.
    config = session.config
    if config.workbook_impl in VARIANT_RUNS:
        return
    for item in session.items:
        found = _exercise_of(item)
        if found:
            part, exercise, points = found
            _record(config, {"kind": "collected", "nodeid": item.nodeid, "part": part, "exercise": exercise, "points": points})


# --- hangs ----------------------------------------------------------------------------

class ExerciseHung(Exception):
    """Raised by an exercise function that already timed out once in this run."""

    def __init__(self, name: str, message: str):
        super().__init__(message)
        self.exercise = name.split(".")[0]


def _hung_exercise(frame) -> tuple[str, object, str] | None:
    """(module file, module, 'Class.method' or 'function') of the innermost exercises/ frame on the stack."""
    while frame is not None:
        path = Path(frame.f_code.co_filename)
        if EXERCISES_DIR in path.parents:
            qualname = getattr(frame.f_code, "co_qualname", frame.f_code.co_name).split(".<locals>")[0]
            module = next((m for m in list(sys.modules.values()) if getattr(m, "__file__", None) == str(path)), None)
            if module is not None and "<" not in qualname:
                return f"{path.relative_to(ROOT)}::{qualname}", module, qualname
        frame = frame.f_back
    return None


def _stop_hung_function(module, qualname: str, where: str, nodeid: str, limit: str) -> None:
    """Replace the hung function everywhere the learner's modules hold it by one that fails at once."""
    *owners, name = qualname.split(".")
    owner = module
    for attr in owners:
        owner = getattr(owner, attr)
    original = getattr(owner, name, None)
    message = (f"{where} timed out earlier in this run ({nodeid}, {limit}), so it is not called again: "
               "look for a loop that never ends")

    def hung(*args, **kwargs):
        raise ExerciseHung(qualname, message)

    setattr(owner, name, hung)
    if owners or original is None:
        return
    for other in list(sys.modules.values()):  # `from .part1_ppo_core import compute_advantages` elsewhere
        if getattr(other, "__name__", "").startswith("exercises") and getattr(other, name, None) is original:
            setattr(other, name, hung)


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_timeout_set_timer(item: pytest.Item, settings) -> bool | None:
    """pytest-timeout's limit counted in CPU seconds (a wall-clock backstop at WALL_FACTOR times it), plus:
    a test that times out inside an exercise stops that exercise.

    CPU time, because an infinite loop burns it while a test slowed down by a busy machine does not,
    so a shared 2-core laptop or CI runner does not turn slow tests into false timeouts.
    """
    if settings.method != "signal" or threading.current_thread() is not threading.main_thread():
        return None  # pytest-timeout's own implementation (thread method)

    def cancel():
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGPROF, signal.SIG_DFL)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)

    def on_timeout(signum, frame):
        cancel()
        found = _hung_exercise(frame)
        where = found[0] if found else item.name
        item.workbook_timed_out = where
        limit = (f"{settings.timeout:g} s of CPU time" if signum == signal.SIGPROF
                 else f"{settings.timeout * WALL_FACTOR:g} s of wall time")
        if found:
            _stop_hung_function(found[1], found[2], where, item.nodeid, limit)
        pytest.fail(f"timed out after {limit} in {where} (pytest-timeout; a loop that never ends?)", pytrace=False)

    item.cancel_timeout = cancel
    signal.signal(signal.SIGPROF, on_timeout)
    signal.signal(signal.SIGALRM, on_timeout)
    signal.setitimer(signal.ITIMER_PROF, settings.timeout)
    signal.setitimer(signal.ITIMER_REAL, settings.timeout * WALL_FACTOR)
    return True


class _StubReached(pytest.skip.Exception):
    """A stub's NotImplementedError carried out of Hypothesis, which re-raises a skip at once.

    Hypothesis treats any other error as a bug to shrink and explain: on a stub, which fails on
    every input, that was hundreds of calls and 1 to 2 s per property test for nothing.
    """

    def __init__(self, error: NotImplementedError) -> None:
        super().__init__("a stub", pytrace=False)
        self.error = error


@pytest.hookimpl(wrapper=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function):
    """On the stubs, a Hypothesis test stops at the first stub it reaches (reported as the stub, as before)."""
    handle = getattr(pyfuncitem.obj, "hypothesis", None)
    if handle is None or pyfuncitem.config.workbook_impl != "exercises":
        return (yield)
    inner = handle.inner_test  # Hypothesis's documented seam for wrapping the test it runs

    def stop_at_a_stub(*args, **kwargs):
        try:
            return inner(*args, **kwargs)
        except NotImplementedError as error:
            if any(EXERCISES_DIR in Path(frame.f_code.co_filename).parents for frame, _ in traceback.walk_tb(error.__traceback__)):
                raise _StubReached(error) from None
            raise

    handle.inner_test = stop_at_a_stub
    try:
        return (yield)
    except _StubReached as reached:
        raise reached.error from None
    finally:
        handle.inner_test = inner


# --- results --------------------------------------------------------------------------

def _stub_location(excinfo: pytest.ExceptionInfo) -> str | None:
    """'exercises/part1_ppo_core.py::compute_advantages' if the error came from a stub."""
    for frame, _ in reversed(list(traceback.walk_tb(excinfo.tb))):
        path = Path(frame.f_code.co_filename)
        if EXERCISES_DIR in path.parents:
            name = getattr(frame.f_code, "co_qualname", frame.f_code.co_name)
            return f"{path.relative_to(ROOT)}::{name}"
    return None


def _longrepr_replaced(item: pytest.Item, call: pytest.CallInfo) -> bool:
    """Whether the wrapper below will throw pytest's traceback of this failure away (and write its own).

    The same tests as the wrapper's, in its order: a stub, "wrong answer from", a hung exercise,
    a jaxtyping error, or an exercise's second or later failure in this run.
    """
    excinfo = call.excinfo
    if excinfo is None or isinstance(excinfo.value, (pytest.skip.Exception, pytest.xfail.Exception)):
        return False
    if item.get_closest_marker("xfail") is not None:
        return False  # the skipping plugin reads the report: leave it pytest's own
    config = item.config
    if config.workbook_impl == "exercises" and excinfo.errisinstance(NotImplementedError) and _stub_location(excinfo):
        return True
    if str(excinfo.value).startswith("wrong answer from") or excinfo.errisinstance((ExerciseHung, TypeCheckError)):
        return True
    if config.workbook_impl in VARIANT_RUNS or not (call.when == "call" or call.when == "setup"):
        return False
    found = _exercise_of(item)
    shown = config.__dict__.get("_workbook_failures_shown", {})
    return bool(found) and found[:2] in shown and shown[found[:2]][0] != item.nodeid


@pytest.hookimpl(tryfirst=True, specname="pytest_runtest_makereport")
def pytest_runtest_makereport_without_traceback(item: pytest.Item, call: pytest.CallInfo) -> pytest.TestReport | None:
    """pytest's report without its traceback where the wrapper below replaces it anyway.

    pytest's long traceback parses the source file of every frame (``ast``) to find each
    statement: 0.1 to 0.5 s a failure on 2 cores, so on the stubs (every test fails) it was
    most of a test file's time. It is thrown away for a stub, a known explanation or an
    exercise's repeated failure, so it is not made there. The first failure of an exercise
    keeps pytest's traceback in full.
    """
    if not _longrepr_replaced(item, call):
        return None  # pytest's own
    sections = [(f"Captured {key} {rwhen}", content) for rwhen, key, content in item._report_sections]
    return pytest.TestReport(item.nodeid, item.location, dict.fromkeys(item.keywords, 1), "failed",
                             f"{item.name}\n{call.excinfo.typename}: {call.excinfo.value}", call.when, sections,
                             call.duration, call.start, call.stop, user_properties=item.user_properties)


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
        stub_part, stub_name = Path(stub.split("::")[0]).stem, stub.split("::")[1]
        own = found and (stub_part, stub_name.split(".")[0]) == found[:2]
        report.outcome = "skipped"
        if found and not own and _is_written(*found[:2]):
            message, report.workbook_outcome = f"waiting on {stub_part}.{stub_name}", WAITING
        else:
            message = f"not started: fill in {stub}" if own else f"not started: needs {stub}"
            report.workbook_outcome = NOT_STARTED
        report.longrepr = (str(item.path), item.location[1] or 0, message)
    if failed_here and stub is None and str(call.excinfo.value).startswith("wrong answer from"):
        # Our own explanation says everything; a traceback through the harness adds nothing.
        where = f"{item.path.name}:{item.location[1] + 1 if item.location[1] is not None else '?'}"
        report.longrepr = f"{item.name} ({where})\n{call.excinfo.value}"
    if failed_here and call.excinfo.errisinstance(ExerciseHung):
        report.longrepr = f"{item.name}\n{call.excinfo.value}"
    if failed_here and stub is None and call.excinfo.errisinstance(TypeCheckError):
        # jaxtyping's report is ~50 lines through its own internals; the paragraph that matters:
        where = f"{item.path.name}:{item.location[1] + 1 if item.location[1] is not None else '?'}"
        report.longrepr = f"{item.name} ({where})\nshape/dtype error: {explain_type_error(call.excinfo.value)}"
    if report.when == "call" or (report.when == "setup" and not report.passed):
        found = _exercise_of(item)
        if found is None:
            return
        part, exercise, _ = found
        if getattr(report, "workbook_outcome", None) in (NOT_STARTED, WAITING):
            status, message = report.workbook_outcome, report.longrepr[2]
        elif report.failed and (getattr(item, "workbook_timed_out", None) or (
                call.excinfo is not None and call.excinfo.errisinstance(ExerciseHung)
                and call.excinfo.value.exercise == exercise)):
            status, message = TIMED_OUT, _failure_text(call)
        elif report.passed:
            status, message = "passed", ""
        elif report.skipped:
            status, message = "skipped", str(report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr)
        else:
            status, message = "failed", _failure_text(call)
        if status in (FAILING, TIMED_OUT, "failed") and config.workbook_impl not in VARIANT_RUNS:
            _shorten_repeated_failure(item, report, part, exercise, message)
        record = {"kind": "result", "nodeid": item.nodeid, "part": part, "exercise": exercise,
                  "outcome": status, "message": message[:4000], "duration": round(report.duration, 3)}
        if getattr(item, "callspec", None) and "impl" in item.callspec.params:
            v = from_choice(item.callspec.params["impl"])
            record["variant"] = v.choice
            record[v.kind] = v.id  # record["mistake"] or record["alternative"]
            record["full_text"] = str(report.longrepr)[-20000:]
            if (v.kind == "mistake" and status == "failed" and config.getoption("--mistakes-stop-when-named")
                    and f"[known mistake: {v.name}]" in record["full_text"]):
                config.__dict__.setdefault("_workbook_named_mistakes", set()).add(v.choice)
        _record(config, record)


_WRITTEN: dict[str, set[str]] = {}


def _is_written(part: str, exercise: str) -> bool:
    """Whether exercises/<part>.py holds ``exercise`` with no stubbed function or method left."""
    if part not in _WRITTEN:
        path = EXERCISES_DIR / f"{part}.py"
        try:
            _WRITTEN[part] = {name.split(".")[0] for name in stubbed_functions(path)}
        except (OSError, SyntaxError):
            _WRITTEN[part] = set()
    return exercise not in _WRITTEN[part]


def _shorten_repeated_failure(item: pytest.Item, report: pytest.TestReport, part: str, exercise: str, message: str) -> None:
    """The exercise's first failure stays in full; later ones become the test and the diagnosis."""
    shown = item.config.__dict__.setdefault("_workbook_failures_shown", {})
    first, first_diagnosis = shown.setdefault((part, exercise), (item.nodeid, diagnosis(message)))
    if first == item.nodeid:
        return
    where = f"{item.path.name}:{item.location[1] + 1 if item.location[1] is not None else '?'}"
    said = diagnosis(message)
    said = f"the same diagnosis as {first.split('::')[-1]} above" if said == first_diagnosis else said
    report.longrepr = f"{item.name} ({where}): {said} (select this test alone to see it in full)"


def _failure_text(call: pytest.CallInfo) -> str:
    if call.excinfo is None:
        return "failed"
    if call.excinfo.errisinstance(TypeCheckError):
        return f"shape/dtype error: {explain_type_error(call.excinfo.value)}"
    return f"{call.excinfo.typename}: {call.excinfo.value}"


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    _budget_report(terminalreporter, config)
    records = config.workbook_records
    if config.workbook_impl in VARIANT_RUNS:
        results = [r for r in records if r.get("mistake")]
        caught = {r["mistake"] for r in results if r["outcome"] == "failed"}
        if results:
            ids = {r["mistake"] for r in results}
            terminalreporter.write_sep("=", f"known mistakes: {len(caught)} of {len(ids)} caught by at least one test")
        results = [r for r in records if r.get("alternative")]
        if results:
            failing = {r["alternative"] for r in results if r["outcome"] != "passed"}
            ids = {r["alternative"] for r in results}
            terminalreporter.write_sep("=", f"correct alternatives: {len(ids) - len(failing)} of {len(ids)} pass "
                                            "every test of their exercise")
        return
    rows = aggregate(records)
    skips = _skip_reasons(terminalreporter)
    if not rows and not skips:
        return
    impl = config.workbook_impl
    interrupted = exitstatus == pytest.ExitCode.INTERRUPTED  # Ctrl-C: the tests after it never ran, none failed
    terminalreporter.write_sep("=", f"workbook progress (--impl={impl})" + (", interrupted" if interrupted else ""))
    width = max([len(f"{r.part}.{r.exercise}") for r in rows] + [1])
    for r in rows:
        marks = {PASSING: "✓", FAILING: "✗", TIMED_OUT: "✗", NOT_STARTED: "·", WAITING: "…"}
        if interrupted and r.status == FAILING and r.detail == UNFINISHED:
            terminalreporter.write_line(f"  - {r.part}.{r.exercise:<{width - len(r.part) - 1}}  interrupted  "
                                        f"({r.passed} of {r.tests} tests passed before Ctrl-C; the others did not run)")
            continue
        if r.status == NOT_STARTED:
            extra = f"  {r.detail.removeprefix('not started: ')}"
        elif r.status == WAITING:
            extra = r.detail.removeprefix(WAITING)  # so the row reads "waiting on part1_ppo_core.NAME"
        elif r.status in (FAILING, TIMED_OUT):
            extra = f"  ({r.tests - r.passed} of {r.tests} tests fail): {r.detail}"
        else:
            extra = ""
        name = f"{r.part}.{r.exercise}"
        terminalreporter.write_line(f"  {marks.get(r.status, '?')} {name:<{width}}  {r.status}{extra}")
    if rows:
        total, most = sum(r.points for r in rows), sum(r.max_points for r in rows)
        terminalreporter.write_line(f"  points: {total}/{most}")
    for reason, count in skips.items():
        terminalreporter.write_line(f"  {count} skipped: {reason}")


def _skip_reasons(terminalreporter) -> dict[str, int]:
    """Why tests that grade no exercise were skipped (graded ones have their row), reason → count."""
    reasons: dict[str, int] = {}
    for report in terminalreporter.stats.get("skipped", []):
        if getattr(report, "workbook_outcome", None) and _exercise_marked(report):
            continue
        longrepr = report.longrepr
        reason = str(longrepr[2] if isinstance(longrepr, tuple) else longrepr).removeprefix("Skipped: ")
        reasons[reason] = reasons.get(reason, 0) + 1
    return reasons


def _exercise_marked(report: pytest.TestReport) -> bool:
    return "exercise" in getattr(report, "keywords", {})


# --- the suite's budget (docs/testing.md) ------------------------------------------------

LONGEST_FILES = ("test_async_train.py", "test_async_faults.py", "test_agent_train.py", "test_harness.py", "test_cli.py",
                 "test_reason_train.py", "test_learner_calls.py", "test_hf.py", "test_part6_data_parallel.py",
                 "test_data_parallel.py")
"""The test files that take longest in make test, longest first: pytest-xdist's workers start with them
(tests/conftest.py), so that no long file starts last while the other worker has run out of work. The budget
table names a slow file that is missing here."""
META_FILES = ("tests/test_mistakes_are_caught.py", "tests/test_alternatives_pass.py")
"""The meta-tests: their time is the wait for the meta-run (tests/conftest.py), not work of their own."""
UNLISTED_S = 15.0
"""A file slower than this and missing from LONGEST_FILES is named by the budget table (shorter ones hardly change
how the two workers end)."""
PART_FILE_BUDGET_S = 7.0
"""A part's own test file: its tests' seconds, so that ``pytest tests/test_<part>.py`` (start-up included,
about 3 s) stays within the learner's 10 s."""
SUITE_BUDGET_S = 240.0
"""``make test``'s test step, so that ``make test`` with its setup (about a minute) stays within 5 minutes."""
SLOWEST_FILES = 8


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config._workbook_started = time.perf_counter()


def _budget_report(terminalreporter, config: pytest.Config) -> None:
    """Where this run's seconds went, file by file, against the budget: printed when a run covers several test files.

    Every ``make test`` ends with it, so a part (or a test) that pushes the suite over its budget is seen in the run
    that adds it, by whoever adds it. Timings are the run's own (a busy machine inflates them all alike); the
    learner's loop itself is measured by benchmarks/suite_budget.py.
    """
    if config.workbook_impl in VARIANT_RUNS or not hasattr(config, "_workbook_started"):
        return
    per_file: dict[str, float] = {}
    for reports in terminalreporter.stats.values():
        for report in reports:
            if isinstance(report, pytest.TestReport):
                path = report.nodeid.split("::")[0]
                per_file[path] = per_file.get(path, 0.0) + report.duration
    if len(per_file) < 2:
        return
    wall = time.perf_counter() - config._workbook_started
    terminalreporter.write_sep("=", "the suite's budget (docs/testing.md)")
    over = " — OVER BUDGET" if wall > SUITE_BUDGET_S else ""
    terminalreporter.write_line(f"  this run: {wall:.0f} s; make test's test step has {SUITE_BUDGET_S:.0f} s{over}")
    terminalreporter.write_line(f"  the {min(SLOWEST_FILES, len(per_file))} slowest test files (seconds of their tests in this run):")
    for path, seconds in sorted(per_file.items(), key=lambda kv: -kv[1])[:SLOWEST_FILES]:
        terminalreporter.write_line(f"    {seconds:6.1f} s  {path}")
    unlisted = [path for path, seconds in sorted(per_file.items(), key=lambda kv: -kv[1])[:len(LONGEST_FILES)]
                if seconds > UNLISTED_S and Path(path).name not in LONGEST_FILES
                and path not in META_FILES]
    if unlisted:
        terminalreporter.write_line(f"  among the slowest but not in pytest_plugin.LONGEST_FILES (add them, so that make test's "
                                    f"workers start with them): {', '.join(unlisted)}")
    parts = {path: seconds for path, seconds in per_file.items()
             if Path(path).name.startswith("test_part") and seconds > PART_FILE_BUDGET_S}
    for path, seconds in sorted(parts.items()):
        terminalreporter.write_line(f"  over a part's budget ({PART_FILE_BUDGET_S:.0f} s of tests, so that `pytest {path}` stays "
                                    f"under 10 s): {seconds:.1f} s")
