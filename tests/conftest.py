"""Shared fixtures of the test suite (the workbook's own pytest plugin is workbook/pytest_plugin.py)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

import pytest

from workbook import variants
from workbook.pytest_plugin import LONGEST_FILES, META_FILES

META_FIXTURE = "variant_results"


def pytest_addoption(parser) -> None:
    parser.addoption("--all-notebooks", action="store_true",
                     help="execute the notebooks in real Jupyter kernels (make test-notebooks; CI runs it): "
                          "about 2 minutes more, so `make test` leaves it out")


def pytest_collection_modifyitems(session, config, items) -> None:
    """Start the meta-run in the background as soon as we know it is wanted, and grade it last.

    The meta-run (the suite on every known mistake and correct alternative) is the longest
    job of the suite, and it runs in subprocesses. Started here, it shares the CPUs with
    every other test — most of which are one process waiting on one core — instead of
    running alone while the rest waits; the meta-tests, moved to the end, then find it done
    or nearly so.
    """
    if hasattr(config, "workerinput"):
        _slow_files_first(items)
    meta = [item for item in items if META_FIXTURE in getattr(item, "fixturenames", ())]
    if not meta or config.workbook_impl != "solutions":
        return
    items[:] = [item for item in items if META_FIXTURE not in getattr(item, "fixturenames", ())] + meta
    if not hasattr(config, "workerinput"):  # under pytest-xdist the controller starts it, once (below)
        config._workbook_variant_run = variants.start_suite_on_variants("variants")


def _slow_files_first(items: list) -> None:
    """Under pytest-xdist (--dist loadfile hands out whole files in this order): the longest files first, so that
    no long file starts last while the other worker has run out of work; and in a file, the tests marked ``waits``
    first, so that their waiting overlaps the meta-run's computing instead of leaving a CPU idle after it (the
    order only; every test still runs)."""
    rank = {name: i for i, name in enumerate(LONGEST_FILES)}
    # stable: the others keep their order
    items.sort(key=lambda item: (rank.get(item.path.name, len(rank)), item.get_closest_marker("waits") is None))


# --- under pytest-xdist (make test runs -n 2): one meta-run for all workers ---------------------------
# Every worker collects every test, so starting the meta-run at collection would start it once per worker.
# The controller starts it instead, as soon as a worker reports the meta-tests among its tests; a thread
# writes its results to a folder every worker was told of, where the fixture below reads them.

def pytest_configure(config) -> None:
    if config.pluginmanager.hasplugin("xdist") and config.getoption("numprocesses", None) \
            and not hasattr(config, "workerinput"):
        config._workbook_meta_dir = Path(tempfile.mkdtemp(prefix="workbook-meta-"))


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    node.workerinput["workbook_meta_dir"] = str(node.config._workbook_meta_dir)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node, ids) -> None:
    config = node.config
    if (config.workbook_impl != "solutions" or getattr(config, "_workbook_variant_run", None) is not None
            or not any(i.split("::")[0] in META_FILES for i in ids)):
        return
    # The CPUs the workers leave (at least one shard): each shard pays its own start-up and collection (about 6 s).
    usable = variants.usable_cpus()
    workers = config.getoption("numprocesses")
    workers = workers if isinstance(workers, int) else usable  # "auto" and "logical" become a number before this
    jobs = int(os.environ.get("WORKBOOK_META_JOBS", 0)) or max(1, usable - workers)
    run = config._workbook_variant_run = variants.start_suite_on_variants("variants", jobs)
    folder = config._workbook_meta_dir

    def wait_and_write() -> None:
        try:
            text, name = json.dumps(run.results()), "results.json"
        except Exception as error:  # the workers' meta-tests fail with it, instead of waiting for a file
            text, name = f"{type(error).__name__}: {error}", "error.txt"
        (folder / f"{name}.part").write_text(text)
        (folder / f"{name}.part").rename(folder / name)  # whole, or not there

    threading.Thread(target=wait_and_write, name="workbook-meta-run", daemon=True).start()


def _results_from_controller(folder: Path, timeout: float = 1500) -> dict[str, list[dict]]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (folder / "results.json").exists():
            return json.loads((folder / "results.json").read_text())
        if (folder / "error.txt").exists():
            raise RuntimeError((folder / "error.txt").read_text())
        time.sleep(0.5)
    raise RuntimeError(f"the meta-run gave no results in {timeout:.0f} s ({folder})")


def pytest_unconfigure(config) -> None:
    run = getattr(config, "_workbook_variant_run", None)
    if run is not None:  # never waited for here (an interrupted session; or the xdist controller's, already finished)
        run.cancel()
    if getattr(config, "_workbook_meta_dir", None) is not None:
        shutil.rmtree(config._workbook_meta_dir, ignore_errors=True)


@pytest.fixture(scope="session")
def variant_results(request) -> dict[str, list[dict]]:
    """Results of the whole suite on every known mistake and every correct alternative.

    One run for both meta-tests (tests/test_mistakes_are_caught.py, tests/test_alternatives_pass.py),
    sharded over the CPUs and started at collection (above); keyed by the variant's --impl
    value, e.g. 'mistake:PART:EXERCISE:NAME'.
    """
    if request.config.workbook_impl != "solutions":
        pytest.skip("meta-test of the test suite: run with --impl=solutions")
    if "workbook_meta_dir" in getattr(request.config, "workerinput", {}):
        return _results_from_controller(Path(request.config.workerinput["workbook_meta_dir"]))
    run = getattr(request.config, "_workbook_variant_run", None)
    if run is None:
        return variants.run_suite_on_variants("variants")
    request.config._workbook_variant_run = None
    return run.results()


@pytest.fixture(scope="module")
def no_curves():
    """The loop's runs in this process draw no curves.png (``pytestmark = pytest.mark.usefixtures("no_curves")`` in a
    test file none of whose tests looks at one): drawing a run's panels costs about half a CPU second, more than a tiny
    run's training, and a file of such runs drew dozens. Runs in processes of their own still draw theirs; the
    figures are tested where they are looked at (tests/test_curves.py, the commands' run-folder tests)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("workbook.loop.run.save_curves", lambda *args, **kw: None)
        yield


@pytest.fixture
def draws_curves(monkeypatch):
    """In a file that uses ``no_curves``: this test's runs draw their curves.png as runs do (it looks for it)."""
    from workbook.loop import curves

    monkeypatch.setattr("workbook.loop.run.save_curves", curves.save_curves)


@pytest.fixture
def lists_what_it_calls():
    """``lists_what_it_calls(run, listed)``: run ``run()`` (a tiny run of the reference solutions), tracing which of the
    solutions' functions it calls, and fail if that is not ``listed`` (per module stem, the names a check for stubs
    looks at: workbook/loop/calls.py) — called and not listed, a stub there would go unnamed; listed and not called,
    a stub there would stop a run that does not need it. A class listed stands for every method of its. Returns what
    ``run`` returned."""
    import re
    import sys

    def check(run, listed: dict[str, list[str]]):
        called: set[tuple[str, str]] = set()

        def profile(frame, event, arg):
            if event == "call":
                found = re.search(r"solutions[/\\](part\d+_\w+)\.py$", frame.f_code.co_filename)
                name = frame.f_code.co_qualname.split(".<locals>")[0]
                if found and name != "<module>":
                    called.add((found.group(1), name))

        sys.setprofile(profile)
        try:
            out = run()
        finally:
            sys.setprofile(None)
        classes = {(stem, name) for stem, names in listed.items() for name in names
                   if isinstance(getattr(__import__(f"solutions.{stem}", fromlist=["x"]), name, None), type)}
        functions = {(stem, name) for stem, names in listed.items() for name in names} - classes
        exercises = {(stem, name) for stem, name in called if not name[0].isupper() or "." in name}  # not a class body
        in_list = lambda stem, name: name in listed.get(stem, []) or (stem, name.split(".")[0]) in classes
        assert not [c for c in exercises if not in_list(*c)], "called, not listed: a stub there would go unnamed"
        assert not functions - exercises, "listed, not called: a stub there would stop a run that does not need it"
        return out

    return check


@pytest.fixture
def filled(monkeypatch):
    """Every part's exercises are the reference's (the learner is done), until a test plants a stub (``plant_stub``):
    the commands' checks for stubs can be tested whatever the learner has filled in so far."""
    import importlib

    for part in ("part3_rlhf", "part5_beyond_ppo", "part7_reasoning", "part9_agents", "part10_async", "part11_goodhart"):
        ex, sol = importlib.import_module(f"exercises.{part}"), importlib.import_module(f"solutions.{part}")
        for name in dir(sol):
            if not name.startswith("_") and callable(getattr(sol, name)) and hasattr(ex, name):
                monkeypatch.setattr(ex, name, getattr(sol, name))


@pytest.fixture
def plant_stub(monkeypatch):
    """``plant_stub(module, "Class.method")``: make that function of an exercises module a stub, as it ships.

    The stub raises ``NotImplementedError`` from code that claims the module's file and the
    function's name, as the learner's unfinished stub would: the commands' messages that name a
    stub can be tested whatever the learner has filled in so far.
    """
    import types

    def plant(module, qualname: str) -> None:
        *outer, name = qualname.split(".")
        owner = module
        for part in outer:
            owner = getattr(owner, part)

        def stub(*args, **kwargs):
            raise NotImplementedError()

        code = stub.__code__.replace(co_filename=module.__file__, co_name=name, co_qualname=qualname)
        monkeypatch.setattr(owner, name, types.FunctionType(code, stub.__globals__, name))

    return plant
