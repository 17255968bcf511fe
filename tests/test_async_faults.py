"""Each fault path of Part 10's sampler engine, 20 times in a row, ends the same way every time (issue 36) — but a
Ctrl-C while the sampler starts, which has two clean endings depending on when it lands.

Not graded: the given engine (workbook/async_rl/processes.py) under tests/stress_async_faults.py, run
as a process of its own, so that its exit is checked too: a process group torn down while a thread
still waited inside gloo aborted 2 runs in 6 ("terminate called without an active exception", exit
status 134). Samplers start from a fork server here (the same engine, started in milliseconds), so
the 160 tries take about 30 s on two cores, most of it the deadlines they wait out; ``--start spawn``
runs them as real runs start them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TRIES = 20

EXPECTED = {
    "start-fails": r"NotImplementedError while starting",
    "sampler-raises": r"sampler 1 raised RuntimeError: the verifier broke",
    "killed": r"sampler 1 \(pid N\) was killed by SIGKILL before sending batch \d+",
    "stops-answering": r"sampler 1 \(pid N\) stopped answering \(nothing received for 0.5 s\) before sending batch \d+",
    # Named as soon as it exits: the learner watches the samplers while it waits for them to join (it used to wait
    # out the group's deadline, 60 s there and 600 s in a run, then end in a traceback).
    "dies-before-joining": r"sampler 1 \(pid N\) exited with status 1 before it joined the learner",
    "learner-raises": r"the learner raised the update broke",
    "ctrl-c": r"interrupted: sampler 1 stopped on SIGINT",
    # Ignored until its handlers exist, then a Ctrl-C like any other: which of the two a try meets depends on how far
    # the sampler got when the signal came (under load, 1 try in 20 came after: make test, 2026-11-27). Either is
    # one clean ending; a try that ends any other way, or leaves anything behind, fails.
    "ctrl-c-while-starting": r"finished|interrupted: sampler 1 stopped on SIGINT",
}
ONE_ENDING = set(EXPECTED) - {"ctrl-c-while-starting"}


@pytest.mark.slow
def test_every_fault_path_ends_the_same_way_every_time():
    import re

    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
               OMP_NUM_THREADS="1")
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "stress_async_faults.py"), "--tries", str(TRIES)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0 and "terminate called" not in done.stderr, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(report) == set(EXPECTED)
    for path, pattern in EXPECTED.items():
        endings = report[path]["endings"]
        assert (len(endings) == 1 or path not in ONE_ENDING) and sum(endings.values()) == TRIES, (path, endings)
        for ending in endings:
            assert re.fullmatch(pattern, ending), (path, ending)  # and nothing left behind: it would be appended
