"""Shared fixtures of the test suite (the workbook's own pytest plugin is workbook/pytest_plugin.py)."""

from __future__ import annotations

import json
import shutil
import tempfile
import threading
import time
from pathlib import Path

import pytest

from workbook import variants

META_FIXTURE = "variant_results"
META_TEST_FILES = ("tests/test_mistakes_are_caught.py", "tests/test_alternatives_pass.py")
META_DIR = "workbook_meta_dir"
"""pytest-xdist (`make test`): the folder, named in each worker's workerinput, where the controller's meta-run leaves
its results (results.json or error.txt, then done)."""


def pytest_collection_modifyitems(session, config, items) -> None:
    """Start the meta-run in the background as soon as we know it is wanted, and grade it last.

    The meta-run (the suite on every known mistake and correct alternative) is the longest
    job of the suite, and it runs in subprocesses. Started here, it shares the CPUs with
    every other test — most of which are one process waiting on one core — instead of
    running alone while the rest waits; the meta-tests, moved to the end, then find it done
    or nearly so. Under pytest-xdist every worker collects everything, so no worker starts it:
    the controller does, once (``pytest_xdist_node_collection_finished`` below).
    """
    meta = [item for item in items if META_FIXTURE in getattr(item, "fixturenames", ())]
    if not meta or config.workbook_impl != "solutions":
        return
    items[:] = [item for item in items if META_FIXTURE not in getattr(item, "fixturenames", ())] + meta
    if not hasattr(config, "workerinput"):
        config._workbook_variant_run = variants.start_suite_on_variants("variants")


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    """pytest-xdist's controller, for each worker it starts: where the meta-run's results will be."""
    config = node.config
    if getattr(config, "_workbook_meta_dir", None) is None:
        config._workbook_meta_dir = Path(tempfile.mkdtemp(prefix="workbook-meta-"))
    node.workerinput[META_DIR] = str(config._workbook_meta_dir)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node, ids) -> None:
    """pytest-xdist's controller, once a worker has collected: start the meta-run if a meta-test is selected."""
    config = node.config
    if getattr(config, "_workbook_meta_thread", None) is not None or config.workbook_impl != "solutions":
        return
    if not any(nodeid.startswith(META_TEST_FILES) for nodeid in ids):
        return
    run = config._workbook_variant_run = variants.start_suite_on_variants("variants")
    folder: Path = config._workbook_meta_dir

    def wait_and_hand_over() -> None:
        try:
            try:
                (folder / "results.json").write_text(json.dumps(run.results()))
            except Exception as error:  # the worker running the meta-tests reports it
                (folder / "error.txt").write_text(f"{type(error).__name__}: {error}")
            (folder / "done").touch()
        except OSError:  # the session ended first and removed the folder
            pass
        config._workbook_variant_run = None

    config._workbook_meta_thread = threading.Thread(target=wait_and_hand_over, daemon=True)
    config._workbook_meta_thread.start()


def pytest_unconfigure(config) -> None:
    run = getattr(config, "_workbook_variant_run", None)
    if run is not None:  # started but never waited for (e.g. the session was interrupted)
        run.cancel()
    folder = getattr(config, "_workbook_meta_dir", None)
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)


def _results_from_the_controller(folder: Path, timeout: float = 1600) -> dict[str, list[dict]]:
    """A pytest-xdist worker: wait for the controller's meta-run and read its results."""
    deadline = time.monotonic() + timeout
    while not (folder / "done").exists():
        if time.monotonic() > deadline:
            pytest.fail(f"the meta-run left no results in {folder} within {timeout:.0f} s")
        time.sleep(0.5)
    if (folder / "error.txt").exists():
        raise RuntimeError((folder / "error.txt").read_text())
    return json.loads((folder / "results.json").read_text())


@pytest.fixture(scope="session")
def variant_results(request) -> dict[str, list[dict]]:
    """Results of the whole suite on every known mistake and every correct alternative.

    One run for both meta-tests (tests/test_mistakes_are_caught.py, tests/test_alternatives_pass.py),
    sharded over the CPUs and started at collection (above); keyed by the variant's --impl
    value, e.g. 'mistake:PART:EXERCISE:NAME'.
    """
    if request.config.workbook_impl != "solutions":
        pytest.skip("meta-test of the test suite: run with --impl=solutions")
    folder = getattr(request.config, "workerinput", {}).get(META_DIR)
    if folder is not None:
        return _results_from_the_controller(Path(folder))
    run = getattr(request.config, "_workbook_variant_run", None)
    if run is None:
        return variants.run_suite_on_variants("variants")
    request.config._workbook_variant_run = None
    return run.results()
