"""Shared fixtures of the test suite (the workbook's own pytest plugin is workbook/pytest_plugin.py)."""

from __future__ import annotations

import pytest

from workbook import variants


@pytest.fixture(scope="session")
def variant_results(request) -> dict[str, list[dict]]:
    """Results of the whole suite on every known mistake and every correct alternative.

    One run for both meta-tests (tests/test_mistakes_are_caught.py, tests/test_alternatives_pass.py),
    sharded over the CPUs; keyed by the variant's --impl value, e.g. 'mistake:PART:EXERCISE:NAME'.
    """
    if request.config.workbook_impl != "solutions":
        pytest.skip("meta-test of the test suite: run with --impl=solutions")
    return variants.run_suite_on_variants("variants")
