"""Shared fixtures of the test suite (the workbook's own pytest plugin is workbook/pytest_plugin.py)."""

from __future__ import annotations

import pytest

from workbook import variants

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
    meta = [item for item in items if META_FIXTURE in getattr(item, "fixturenames", ())]
    if not meta or config.workbook_impl != "solutions":
        return
    items[:] = [item for item in items if META_FIXTURE not in getattr(item, "fixturenames", ())] + meta
    config._workbook_variant_run = variants.start_suite_on_variants("variants")


def pytest_unconfigure(config) -> None:
    run = getattr(config, "_workbook_variant_run", None)
    if run is not None:  # started but never waited for (e.g. the session was interrupted)
        run.cancel()


@pytest.fixture(scope="session")
def variant_results(request) -> dict[str, list[dict]]:
    """Results of the whole suite on every known mistake and every correct alternative.

    One run for both meta-tests (tests/test_mistakes_are_caught.py, tests/test_alternatives_pass.py),
    sharded over the CPUs and started at collection (above); keyed by the variant's --impl
    value, e.g. 'mistake:PART:EXERCISE:NAME'.
    """
    if request.config.workbook_impl != "solutions":
        pytest.skip("meta-test of the test suite: run with --impl=solutions")
    run = getattr(request.config, "_workbook_variant_run", None)
    if run is None:
        return variants.run_suite_on_variants("variants")
    request.config._workbook_variant_run = None
    return run.results()


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
