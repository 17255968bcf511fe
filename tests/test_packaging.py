"""pyproject.toml as setuptools reads it during `make setup`: no deprecation warnings, an SPDX licence."""

from __future__ import annotations

import tomllib
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_license_is_an_spdx_expression_that_setuptools_reads_without_warnings(monkeypatch):
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["license"] == "MIT"
    assert "setuptools>=77" in project["build-system"]["requires"]  # the first setuptools that reads SPDX strings
    setuptools = pytest.importorskip("setuptools")
    if tuple(int(x) for x in setuptools.__version__.split(".")[:2]) < (77, 0):
        pytest.skip(f"setuptools {setuptools.__version__} predates SPDX licence strings")
    from setuptools.config.pyprojecttoml import apply_configuration
    from setuptools.dist import Distribution

    monkeypatch.chdir(ROOT)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dist = apply_configuration(Distribution(), "pyproject.toml")
    assert [str(w.message).splitlines()[0] for w in caught] == []
    assert dist.metadata.license_expression == "MIT"


@pytest.mark.slow
def test_editable_install_builds_without_a_warning_banner(tmp_path):
    """What `make setup`'s `pip install -e .` runs: setuptools' build_editable, here on a copy of the tracked files.

    A layout setuptools must install through an import hook prints "Editable installation ... Please be
    careful with folders in your working directory" (a BuildBackendWarning pip shows even with --quiet).
    """
    import shutil
    import subprocess
    import sys

    pytest.importorskip("setuptools")
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    if files.returncode != 0:
        pytest.skip("not a git checkout")
    copy = tmp_path / "project"
    for name in files.stdout.splitlines():
        if (ROOT / name).is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(ROOT / name, copy / name)
    (tmp_path / "dist").mkdir()
    script = ("import warnings, setuptools.build_meta as b\nwarnings.simplefilter('always')\n"
              "with warnings.catch_warnings(record=True) as caught:\n    b.build_editable(%r)\n"
              "print('WARNINGS', [str(w.message).splitlines()[0] for w in caught])\n") % str(tmp_path / "dist")
    proc = subprocess.run([sys.executable, "-c", script], cwd=copy, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.splitlines()[-1] == "WARNINGS []", proc.stdout[-2000:]
    assert "Please be careful" not in proc.stdout + proc.stderr
