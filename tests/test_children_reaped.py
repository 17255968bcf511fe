"""No finished child process is left a zombie while the suite goes on.

The meta-run (tests/conftest.py starts it at collection; its results are read by the meta-tests
at the end of the session) runs in subprocesses: a shard that ends early is reaped when it ends,
not minutes later when its results are read; `grade` interrupted (Ctrl-C) stops its pytest
subprocess and reaps it.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from workbook import grading, variants


def state(pid: int) -> str | None:
    """The process's state letter ('Z': a zombie), None once it is gone (reaped)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def test_a_meta_run_shard_is_reaped_as_soon_as_it_ends(monkeypatch):
    popen = subprocess.Popen
    # Each shard a process that ends at once (the real one is the suite on the variants: minutes).
    monkeypatch.setattr(variants.subprocess, "Popen", lambda cmd, **kw: popen([sys.executable, "-c", "pass"], **kw))
    run = variants.start_suite_on_variants("variants", jobs=2)
    try:
        pids = [proc.pid for proc, _, _ in run.shards]
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and any(state(pid) is not None for pid in pids):
            time.sleep(0.05)
        assert [state(pid) for pid in pids] == [None, None], "a finished shard is still a zombie of this process"
        assert [proc.returncode for proc, _, _ in run.shards] == [0, 0]
    finally:
        run.cancel()


def test_an_interrupted_grade_run_stops_and_reaps_its_pytest(tmp_path, monkeypatch):
    started = []
    popen = subprocess.Popen
    monkeypatch.setattr(grading.subprocess, "Popen", lambda cmd, **kw: started.append(popen(cmd, **kw)) or started[-1])

    def ctrl_c(self):
        raise KeyboardInterrupt

    monkeypatch.setattr(grading.Progress, "poll", ctrl_c)  # Ctrl-C while grade watches the run
    with pytest.raises(KeyboardInterrupt):
        grading.run_suite("solutions", paths=["tests/test_part1_ppo_core.py"], timeout=60, per_test_timeout=5,
                          report=tmp_path / "report.jsonl")
    (proc,) = started
    assert proc.returncode is not None and state(proc.pid) is None, "the stopped pytest is left a zombie"
