"""Part 10's engine through the loop: sampler processes (``--samplers N``), stale sampling (``--lag K``), faults.

Not graded: loop tests of the given code, on the reference solutions and the shipped addition
reasoner, a few iterations each. What they hold the engine to (issue 30):

- lag 0 with a float32 sampler process is today's synchronous run, bit for bit;
- a fixed lag is reproducible: a sampler process gives what stale sampling in one process gives,
  two runs give the same, and a run stopped and resumed gives the run made in one go;
- free-running and several samplers finish, never staler than ``--lag``;
- a sampler killed, stopped or raising, a learner raising, Ctrl-C: one line, the last good
  checkpoint kept, ``--resume`` continues, no process left behind, no deadlock.

The fault tests run the command as a subprocess (the process's own exit status, its stderr, its
children are the point); the others call ``main`` in this process (the samplers are still
processes of their own). ``WORKBOOK_DIST_TIMEOUT_S`` is small everywhere, so a hang fails fast.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from workbook.async_rl import processes
from workbook.checkpoints import CHECKPOINT
from workbook.loop import reasoning, rlhf
from workbook.loop.reasoning import ReasonRun, Reasoner, reason_args
from workbook.loop.run import train
from workbook.loop.verifiable import ReasoningTask

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.usefixtures("no_curves")  # none of these tests looks at a curves.png
TIMEOUT_S = "30"
"""Every blocking receive's deadline in these tests (the engine's default is 600 s)."""

TINY = ["--impl", "solutions", "--batch-size", "64", "--group-size", "16", "--mini-batch-size", "32", "--eval-samples", "8",
        "--eval-k", "2", "--wandb", "disabled", "--no-progress"]
"""A tiny reason run: 4 problems × 16 samples per iteration, 8 held-out problems × 2 samples."""


@pytest.fixture(autouse=True)
def short_deadline(monkeypatch):
    monkeypatch.setenv("WORKBOOK_DIST_TIMEOUT_S", TIMEOUT_S)  # read when a run starts; its samplers inherit it


ORIGINAL_SAMPLER_MAIN = processes.sampler_main
FORK_SERVER_PRELOAD = ["workbook.async_rl.processes", "workbook.loop.verifiable", "solutions.part7_reasoning"]


@pytest.fixture(autouse=True, scope="module")
def samplers_from_a_fork_server():
    """The runs in this process start their samplers from a fork server (the engine's ``WORKBOOK_SAMPLER_START``):
    the modules are loaded once, so a sampler starts in a tenth of a second instead of the two CPU seconds of a
    fresh interpreter importing torch. Both start methods pickle the same process object and rebuild the same
    sampler; a test marked ``spawn``, and every run in a process of its own (``Command``, torchrun), start them
    as real runs do."""
    import multiprocessing

    multiprocessing.get_context("forkserver").set_forkserver_preload(FORK_SERVER_PRELOAD)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("WORKBOOK_SAMPLER_START", "forkserver")
        yield


@pytest.fixture(autouse=True)
def spawn_when_marked(request, monkeypatch):
    if request.node.get_closest_marker("spawn") is not None:
        monkeypatch.delenv("WORKBOOK_SAMPLER_START", raising=False)


def reason(runs: Path, name: str, *extra: str, iterations: int = 3) -> Path:
    """``python -m workbook reason`` in this process, tiny; the run's folder (the run must finish)."""
    assert reasoning.main(TINY + ["--iterations", str(iterations), "--runs-dir", str(runs), "--run-name", name,
                                  *extra]) == 0, name
    return runs / name


def rows(run: Path) -> list[dict]:
    path = run / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def metrics(run: Path, drop: tuple[str, ...] = ("time/", "async/sampler_s", "async/wait_s")) -> list[dict]:
    """The run's metrics without the keys that time them (which differ from run to run)."""
    return [{k: v for k, v in r.items() if not k.startswith(drop)} for r in rows(run)]


def checkpoint(run: Path) -> dict:
    return torch.load(run / CHECKPOINT, weights_only=False)


def assert_same_weights(a: Path, b: Path) -> None:
    pa, pb = checkpoint(a)["algo"]["policy"], checkpoint(b)["algo"]["policy"]
    assert pa.keys() == pb.keys()
    for name in pa:
        assert torch.equal(pa[name], pb[name]), f"{a.name} and {b.name} differ in {name}"


def staleness(run: Path) -> list[float]:
    return [r["async/staleness"] for r in rows(run)]


# --- reproducible although asynchronous ------------------------------------------------------------

@pytest.fixture(scope="module")
def sync_run(tmp_path_factory):
    """Today's synchronous run (no Part 10 option), 3 iterations."""
    return reason(tmp_path_factory.mktemp("sync"), "sync")


@pytest.mark.spawn
def test_lag_0_with_a_float32_sampler_process_is_the_synchronous_run(sync_run, tmp_path):
    # Uncorrected: a corrected run's weights are 1 only to within 1e-7 (the sampler's log-probs come from a KV cache).
    run = reason(tmp_path, "s1-lag0", "--samplers", "1", "--lag", "0", "--correction", "none")
    got, want = metrics(run, drop=("time/", "async/")), metrics(sync_run, drop=("time/", "async/"))
    assert len(got) == len(want) == 3
    for row in got:  # the same weights: only the last bits differ (kept while decoding with a KV cache, against one pass)
        assert 0 <= row.pop("mismatch/logp_abs_diff") < 1e-5 and 0 <= row.pop("mismatch/kl") < 1e-8
    assert got == want
    assert staleness(run) == [0.0, 0.0, 0.0]
    assert_same_weights(run, sync_run)
    assert checkpoint(run)["sampling"] is not None and checkpoint(sync_run)["sampling"] is None


@pytest.mark.spawn
def test_under_torchrun_rank_1_is_the_sampler_and_lag_0_is_the_synchronous_run(sync_run, tmp_path):
    """Across machines torchrun starts the ranks: rank 0 learns, rank 1 samples (here 2 processes, gloo)."""
    import os

    from workbook.distributed import torchrun

    root = Path(__file__).resolve().parent.parent
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])), "WANDB_MODE": "disabled",
           "WORKBOOK_DIST_TIMEOUT_S": "60"}
    proc = torchrun(["-m", "workbook", "reason", *TINY, "--iterations", "3", "--runs-dir", str(tmp_path), "--run-name", "tr",
                     "--samplers", "1", "--lag", "0", "--correction", "none"], 2, timeout=300, env=env, cwd=str(root))
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    got, want = metrics(tmp_path / "tr", drop=("time/", "async/", "mismatch/")), metrics(sync_run, drop=("time/", "async/"))
    assert got == want
    assert_same_weights(tmp_path / "tr", sync_run)
    assert [p.name for p in tmp_path.iterdir()] == ["tr"]  # the sampler rank wrote nothing


@pytest.fixture(scope="module")
def lag2_runs(tmp_path_factory):
    """Fixed lag 2, 6 iterations: in one process; with a sampler process (twice); in one process stopped after
    3 iterations and resumed; with a sampler process, stopped after 3 and resumed."""
    runs = tmp_path_factory.mktemp("lag2")
    out = {"local": reason(runs, "local", "--lag", "2", iterations=6),
           "remote": reason(runs, "remote", "--samplers", "1", "--lag", "2", iterations=6),
           "remote_again": reason(runs, "remote-again", "--samplers", "1", "--lag", "2", iterations=6)}
    for name, extra in (("local_resumed", ["--lag", "2"]), ("remote_resumed", ["--samplers", "1", "--lag", "2"])):
        out[name] = reason(runs, name, *extra, iterations=3)
        assert reasoning.main(["--resume", str(out[name]), "--iterations", "6", "--no-progress"]) == 0
    return out


def test_a_fixed_lag_is_reproducible_in_one_process_or_with_a_sampler_process(lag2_runs):
    local, remote, again = lag2_runs["local"], lag2_runs["remote"], lag2_runs["remote_again"]
    assert staleness(local) == [0.0, 1.0, 2.0, 2.0, 2.0, 2.0], "batch i is sampled by version max(0, i − 2)"
    assert metrics(remote) == metrics(local), "a sampler process must sample what stale sampling in one process does"
    assert metrics(again) == metrics(remote), "a fixed lag must be reproducible for a seed"
    assert_same_weights(remote, local)
    assert_same_weights(again, remote)
    assert all(r["mismatch/logp_abs_diff"] > 0 for r in rows(local)[1:]), "stale batches: the learner has moved on"


def test_a_stale_run_differs_from_the_synchronous_one(lag2_runs, sync_run):
    stale, sync = metrics(lag2_runs["local"], drop=("time/", "async/", "mismatch/", "is/")), metrics(sync_run)
    # Corrected by default (sequence_mask): batch 0's weights are 1 only to within 1e-7, and so is its loss.
    assert stale[0].pop("rlvr/loss/policy") == pytest.approx(sync[0].pop("rlvr/loss/policy"), rel=1e-4, abs=1e-7)
    assert stale[0] == sync[0], "batch 0 is sampled by version 0 either way"
    assert stale[1:] != sync[1:3], "batches 1 and 2: version 0 with lag 2, versions 1 and 2 without"


@pytest.mark.parametrize("which", ["local_resumed", "remote_resumed"])
def test_a_resumed_fixed_lag_run_is_the_run_made_in_one_go(lag2_runs, which):
    resumed, whole = lag2_runs[which], lag2_runs["local"]
    assert [r["iteration"] for r in rows(resumed)] == [1, 2, 3, 4, 5, 6]
    assert metrics(resumed) == metrics(whole)
    assert_same_weights(resumed, whole)


def test_free_running_finishes_and_is_never_staler_than_the_lag(tmp_path):
    run = reason(tmp_path, "free", "--samplers", "1", "--lag", "2", "--free-running", iterations=4)
    assert len(staleness(run)) == 4 and all(0 <= s <= 2 for s in staleness(run))


def remember_samplings(monkeypatch) -> list:
    """Every RemoteSampling the run makes, kept for the test to look at its processes afterwards (kept before it
    starts, so that one whose start fails is kept too)."""
    started = []
    original = processes.RemoteSampling.__init__

    def spy(self, *args, **kw):
        started.append(self)
        original(self, *args, **kw)

    monkeypatch.setattr(processes.RemoteSampling, "__init__", spy)
    return started


@pytest.mark.spawn
def test_two_sampler_processes_finish_and_are_never_staler_than_the_lag(tmp_path, monkeypatch):
    import multiprocessing.process
    import pickle

    started, sent = remember_samplings(monkeypatch), []
    original_start = multiprocessing.process.BaseProcess.start

    def start(self):
        sent.append(len(pickle.dumps(self._args)))  # what the spawn writes into the child's pipe (start() drops _args)
        original_start(self)

    monkeypatch.setattr(multiprocessing.process.BaseProcess, "start", start)
    run = reason(tmp_path, "two", "--samplers", "2", "--lag", "1", iterations=4)
    assert staleness(run) == [0.0, 1.0, 1.0, 1.0], "a fixed lag: batch i by version max(0, i − 1), whichever sampler"
    (sampling,) = started
    assert len(sampling.procs) == 2 and not any(p.is_alive() for p in sampling.procs.values())
    # What a spawned sampler is given travels through a pipe its parent holds both ends of until it is read: over
    # the pipe's 64 KiB, a sampler that dies while it starts would block the learner in start() forever. The model
    # goes through a file, removed when the samplers are closed.
    assert len(sent) == 2 and max(sent) < 64 * 1024, f"the model in the spawn's arguments: {sent} bytes"
    assert not Path(sampling.frozen).exists(), "the samplers' setup file left behind"


# --- corrections and mismatch ---------------------------------------------------------------------

def test_corrections_log_their_stats(tmp_path):
    run = reason(tmp_path, "corrected", "--lag", "1", "--correction", "token_truncate", "--is-cap", "2",
                 "--off-policy-delta", "0.05", "--kl-estimator", "k3_is", "--kl-coef", "0.01")
    for r in rows(run):
        for key in ("is/capped_frac", "is/sequences_masked_frac"):
            assert 0.0 <= r[key] <= 1.0, key
        assert r["is/weight_mean"] > 0 and "rlvr/loss/kl" in r and "mismatch/kl" in r
    assert rows(run)[0]["is/capped_frac"] == 0.0 and rows(run)[0]["is/weight_mean"] == pytest.approx(1.0), \
        "batch 0 is sampled by the policy itself: every weight is 1"


def test_a_bfloat16_sampler_mismatches_the_learner_even_at_lag_0(tmp_path):
    run = reason(tmp_path, "bf16", "--sampler-dtype", "bfloat16", "--lag", "0", iterations=2)
    assert staleness(run) == [0.0, 0.0]
    assert all(r["mismatch/logp_abs_diff"] > 0 for r in rows(run))


# --- the other commands -----------------------------------------------------------------------------

def test_rlhf_ppo_with_a_sampler_process_finishes(tmp_path):
    argv = ["--impl", "solutions", "--algo", "ppo", "--samplers", "1", "--iterations", "2", "--batch-size", "16",
            "--mini-batch-size", "8", "--eval-samples", "8", "--max-new-tokens", "24", "--wandb", "disabled",
            "--no-progress", "--runs-dir", str(tmp_path), "--run-name", "ppo"]
    assert rlhf.main(argv) == 0
    assert staleness(tmp_path / "ppo") == [0.0, 1.0]


def test_the_calculator_task_with_a_sampler_process_finishes(tmp_path):
    run = reason(tmp_path, "calc", "--task", "calculator", "--samplers", "1", "--batch-size", "16", "--group-size", "4",
                 "--mini-batch-size", "8", iterations=2)  # --max-new-tokens: the task's (its tool calls need room)
    assert staleness(run) == [0.0, 1.0]
    assert json.loads((run / "summary.json").read_text())["task"] == "calculator"


# --- bad options ----------------------------------------------------------------------------------

@pytest.mark.parametrize("command,argv,field", [
    ("reason", ["--samplers", "-1"], "--samplers"),
    ("reason", ["--lag", "-1"], "--lag"),
    ("reason", ["--free-running"], "--free-running"),
    ("reason", ["--lag", "1", "--free-running"], "--free-running"),
    ("reason", ["--algo", "grpo", "--correction", "token_mask"], "--correction"),
    ("reason", ["--algo", "grpo", "--kl-estimator", "k3_is"], "--kl-estimator"),
    ("reason", ["--algo", "ppo", "--off-policy-delta", "0.1"], "--off-policy-delta"),
    ("rlhf", ["--algo", "dpo", "--samplers", "1"], "--samplers"),
    ("rlhf", ["--algo", "dpo", "--lag", "1"], "--lag"),
    ("reason", ["--is-cap", "0"], "--is-cap"),
    ("reason", ["--is-cap", "inf"], "--is-cap"),
    ("reason", ["--off-policy-delta", "-1"], "--off-policy-delta"),
    ("reason", ["--correction", "bogus"], "--correction"),
    ("reason", ["--sampler-dtype", "float16"], "--sampler-dtype"),
])
def test_bad_part10_options_are_one_line_and_exit_2_before_anything_is_written(tmp_path, capsys, command, argv, field):
    runs = tmp_path / "runs"
    main = {"reason": reasoning.main, "rlhf": rlhf.main}[command]
    assert main(argv + ["--runs-dir", str(runs), "--wandb", "disabled", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {field}:") and "\n" not in err and "Traceback" not in err, err
    assert not runs.exists() or not any(runs.iterdir())


@pytest.mark.parametrize("variable", ["WORKBOOK_DIST_TIMEOUT_S", "WORKBOOK_SAMPLER_START_TIMEOUT_S"])
@pytest.mark.parametrize("value", ["abc", "-3", "0", "inf", "nan", ""])
def test_a_bad_deadline_in_the_environment_is_one_line_and_exit_2_before_anything_is_written(tmp_path, capsys,
                                                                                             monkeypatch, variable, value):
    monkeypatch.setenv(variable, value)
    runs = tmp_path / "runs"
    assert reasoning.main(TINY + ["--samplers", "1", "--runs-dir", str(runs)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"error: {variable}: expected a positive number of seconds, got {value!r}", err
    assert not runs.exists() or not any(runs.iterdir())


def test_a_good_deadline_in_the_environment_is_taken(monkeypatch):
    from workbook.async_rl.sampler import validate_sampling

    args = reason_args("dapo", impl="solutions", samplers=1)
    monkeypatch.setenv("WORKBOOK_DIST_TIMEOUT_S", "0.5")
    monkeypatch.setenv("WORKBOOK_SAMPLER_START_TIMEOUT_S", "90")
    validate_sampling(args)  # no error
    assert (processes.timeout_s(), processes.start_timeout_s()) == (0.5, 90.0)
    monkeypatch.delenv("WORKBOOK_SAMPLER_START_TIMEOUT_S")
    assert processes.start_timeout_s() == 0.5, "by default the start's deadline is the receive's"


# --- faults: a sampler or the learner that raises (in this process) ---------------------------------

class ScoreRaisesOnThirdCall(ReasoningTask):
    """A verifier that breaks on its third batch. It runs in the sampler process (a copy of this task, unpickled
    there: the count starts afresh); with sampler processes the learner scores nothing."""

    def __setstate__(self, state):
        self.__dict__.update(state)
        self.scored = 0

    def score(self, prompts, rollout):
        self.scored = getattr(self, "scored", 0) + 1
        if self.scored == 3:
            raise RuntimeError("the verifier broke on its third batch")
        return super().score(prompts, rollout)


class BatchStatsRaisesAtIteration3(ReasoningTask):
    """A batch statistic that breaks in iteration 3 (batch_stats runs in the learner, once per iteration)."""

    def batch_stats(self, rollout, scores):
        self.calls = getattr(self, "calls", 0) + 1
        if self.calls == 3:
            raise ValueError("a batch statistic broke in iteration 3")
        return super().batch_stats(rollout, scores)


class CannotBeRebuilt(ReasoningTask):
    """A task a sampler process cannot rebuild from what it is sent (as a class defined in a notebook could not be)."""

    def __setstate__(self, state):
        raise RuntimeError("this task cannot be rebuilt in another process")


def train_with_task(tmp_path, name: str, task_class: type, monkeypatch) -> tuple[dict, list]:
    """A tiny reason run with 1 sampler process (lag 1) and ``task_class``: (its summary, the RemoteSampling made)."""
    started = remember_samplings(monkeypatch)
    args = reason_args("dapo", impl="solutions", iterations=5, batch_size=64, group_size=16, mini_batch_size=32,
                       eval_samples=8, eval_k=2, wandb="disabled", runs_dir=str(tmp_path), run_name=name, quiet=True,
                       progress=False, samplers=1, lag=1)
    task = task_class("solutions", "addition", group_size=16, eval_k=2)
    return train(args, task=task, backend=Reasoner("addition"), run_class=ReasonRun), started


def test_a_sampler_that_raises_stops_the_run_in_one_line_with_its_traceback(tmp_path, capsys, monkeypatch):
    summary, (sampling,) = train_with_task(tmp_path, "raises", ScoreRaisesOnThirdCall, monkeypatch)
    run = tmp_path / "raises"
    assert summary["status"] == "failed" and summary["iterations"] == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        "error: sampler 1 raised RuntimeError: the verifier broke on its third batch"), err
    assert "last good checkpoint (iteration 2)" in err[0] and f"--resume {run}" in err[0]
    trace = (run / "error.txt").read_text()
    assert trace.startswith("Traceback") and "in score" in trace and "_serve" in trace, trace
    assert checkpoint(run)["iteration"] == 2 and len(rows(run)) == 2
    assert not sampling.procs[1].is_alive()


def test_a_learner_that_raises_stops_its_samplers_and_keeps_the_checkpoint(tmp_path, capsys, monkeypatch):
    summary, (sampling,) = train_with_task(tmp_path, "learner", BatchStatsRaisesAtIteration3, monkeypatch)
    run = tmp_path / "learner"
    assert summary["status"] == "failed"
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        "error: the learner raised ValueError: a batch statistic broke in iteration 3 at iteration 3"), err
    assert "ValueError" in (run / "error.txt").read_text()
    proc = sampling.procs[1]
    assert not proc.is_alive() and proc.exitcode is not None and not alive(proc.pid)
    saved = checkpoint(run)
    assert saved["iteration"] == 2 and saved["status"] == "failed" and len(rows(run)) == 2


def test_a_sampler_that_cannot_rebuild_its_task_says_so_at_once(tmp_path, capsys, monkeypatch):
    t0 = time.monotonic()
    summary, _ = train_with_task(tmp_path, "unbuilt", CannotBeRebuilt, monkeypatch)
    assert time.monotonic() - t0 < float(TIMEOUT_S), "the learner waited for the deadline instead of hearing why"
    assert summary["status"] == "failed" and summary["iterations"] == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        "error: sampler 1 raised RuntimeError: this task cannot be rebuilt in another process"), err
    assert "__setstate__" in (tmp_path / "unbuilt" / "error.txt").read_text()


def sampler_2_exits_before_joining(rank: int, world_size: int, port: int, setup: dict) -> None:
    """What the sampler processes run instead of ``sampler_main``: sampler 2 dies as it starts (a crash while it
    imports, say), sampler 1 starts as always and waits for the learner in the rendezvous."""
    if rank == 2:
        os._exit(1)
    processes.sampler_main(rank, world_size, port, setup)


def test_a_sampler_that_exits_before_it_joins_is_one_line_at_once(tmp_path, capsys, monkeypatch):
    import threading

    import torch.distributed as dist

    started, original = [], processes.RemoteSampling.__init__

    def spy(self, *args, **kw):
        started.append(self)
        t0 = time.monotonic()
        try:
            original(self, *args, **kw)
        finally:
            self.start_s = time.monotonic() - t0

    monkeypatch.setattr(processes.RemoteSampling, "__init__", spy)
    monkeypatch.setattr(processes, "sampler_main", sampler_2_exits_before_joining)
    assert reasoning.main(TINY + ["--samplers", "2", "--iterations", "3", "--runs-dir", str(tmp_path), "--run-name",
                                  "unjoined"]) == 2
    (sampling,) = started
    # Not the group's deadline (TIMEOUT_S), nor close()'s 10 s for sampler 1 to stop: it cannot be told, so it is killed.
    assert sampling.start_s < 10, f"{sampling.start_s:.1f} s to notice a sampler that exited before it joined"
    err = capsys.readouterr().err.strip().splitlines()
    pid = sampling.procs[2].pid
    assert err == [f"error: --samplers: sampler 2 (pid {pid}) exited with status 1 before it joined the learner; "
                   f"nothing was trained, so the new run folder {tmp_path / 'unjoined'} was removed"], err
    assert not (tmp_path / "unjoined").exists()
    assert all(p.exitcode is not None and not alive(p.pid) for p in sampling.procs.values())
    assert not dist.is_initialized() and not [t for t in threading.enumerate() if t.name.startswith("inbox-")]


def sampler_1_never_joins(rank: int, world_size: int, port: int, setup: dict) -> None:
    """What the sampler process runs instead of ``sampler_main``: it starts and never joins (stuck loading, say)."""
    time.sleep(600)


def test_a_sampler_that_never_joins_is_one_line_after_the_starts_deadline(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(processes, "sampler_main", sampler_1_never_joins)
    monkeypatch.setenv("WORKBOOK_SAMPLER_START_TIMEOUT_S", "1.5")  # the receive's deadline stays TIMEOUT_S
    sampling = remember_samplings(monkeypatch)
    t0 = time.monotonic()
    assert reasoning.main(TINY + ["--samplers", "1", "--iterations", "3", "--runs-dir", str(tmp_path), "--run-name",
                                  "unjoined"]) == 2
    assert time.monotonic() - t0 < float(TIMEOUT_S), "the start's deadline, not the receive's"
    proc = sampling[0].procs[1]
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: --samplers: sampler 1 (pid {proc.pid}) did not join the learner within 1.5 s "
                   f"(WORKBOOK_SAMPLER_START_TIMEOUT_S); nothing was trained, so the new run folder "
                   f"{tmp_path / 'unjoined'} was removed"], err
    assert not (tmp_path / "unjoined").exists()
    assert proc.exitcode is not None and not alive(proc.pid), "the sampler that never joined was left behind"


def sampler_1_says_it_joins_then_exits(rank: int, world_size: int, port: int, setup: dict) -> None:
    """What the sampler process runs instead of ``sampler_main``: it tells the learner it is joining, then dies (as one
    killed in the milliseconds between would)."""
    processes._store(port).set(f"joining/{rank}", "")
    os._exit(3)


def test_a_sampler_that_dies_between_saying_it_joins_and_joining_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(processes, "sampler_main", sampler_1_says_it_joins_then_exits)
    monkeypatch.setenv("WORKBOOK_DIST_TIMEOUT_S", "2")  # the group's deadline, which the learner's join waits out
    monkeypatch.setenv("WORKBOOK_SAMPLER_START_TIMEOUT_S", TIMEOUT_S)  # not the start's: it must say it joins first
    sampling = remember_samplings(monkeypatch)
    assert reasoning.main(TINY + ["--samplers", "1", "--iterations", "3", "--runs-dir", str(tmp_path), "--run-name",
                                  "half-joined"]) == 2
    pid = sampling[0].procs[1].pid
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    # The last line is ours (torch's c10d logs its store's timeout above it, from C++, as it happens).
    assert err.strip().splitlines()[-1] == (
        f"error: --samplers: sampler 1 (pid {pid}) exited with status 3 before it joined the learner; nothing was "
        f"trained, so the new run folder {tmp_path / 'half-joined'} was removed"), err
    assert not (tmp_path / "half-joined").exists()
    # And nothing of the failed join is left in this process (as a notebook's kernel): the next run starts its sampler.
    monkeypatch.setattr(processes, "sampler_main", ORIGINAL_SAMPLER_MAIN)
    monkeypatch.setenv("WORKBOOK_DIST_TIMEOUT_S", TIMEOUT_S)
    reason(tmp_path, "next", "--samplers", "1", iterations=1)


# --- faults: kill, Ctrl-C, stop (the command as a subprocess) ---------------------------------------

def proc_stat(pid: int) -> tuple[str, int, int] | None:
    """(state, parent pid, process group) of a process, None if there is none."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None
    return fields[0], int(fields[1]), int(fields[2])


def alive(pid: int) -> bool:
    stat = proc_stat(pid)
    return stat is not None and stat[0] not in ("Z", "X")


def processes_where(test) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            stat = proc_stat(int(entry.name))
            if stat is not None and stat[0] not in ("Z", "X") and test(*stat):
                found.append(int(entry.name))
    return found


def sampler_pids(learner: int) -> list[int]:
    """The learner's sampler processes: its children started by multiprocessing's spawn (not its resource tracker)."""
    def is_sampler(pid):
        try:
            return b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return False

    return [pid for pid in processes_where(lambda state, ppid, group: ppid == learner) if is_sampler(pid)]


def wait_for(condition, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


class Command:
    """``python -m workbook reason`` (tiny, ``--samplers 1``) in a session of its own, output to files."""

    def __init__(self, tmp_path: Path, name: str, *extra: str, timeout_s: str = TIMEOUT_S):
        self.run, self.out, self.err = tmp_path / name, tmp_path / f"{name}.out", tmp_path / f"{name}.err"
        # The start has a deadline of its own: a spawned sampler importing torch on a busy machine (make test's two
        # workers and the meta-run on 2 cores) once took over 5 s, a test's short receive deadline.
        env = dict(os.environ, WORKBOOK_DIST_TIMEOUT_S=timeout_s, WORKBOOK_SAMPLER_START_TIMEOUT_S="90", OMP_NUM_THREADS="1")
        env.pop("WORKBOOK_SAMPLER_START", None)  # spawned, as real runs start them
        with open(self.out, "w") as out, open(self.err, "w") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "workbook", "reason", *TINY, "--samplers", "1", "--iterations", "40",
                 "--runs-dir", str(tmp_path), "--run-name", name, *extra],
                cwd=ROOT, stdout=out, stderr=err, env=env, start_new_session=True)
        self.pid = self.proc.pid

    def sampler_once_training(self, iterations: int = 2) -> int:
        """The sampler's pid, once ``iterations`` iterations are done (mid-run: the run has 40)."""
        assert wait_for(lambda: len(rows(self.run)) >= iterations or self.proc.poll() is not None, 90), "no progress"
        assert self.proc.poll() is None, self.err.read_text()
        (sampler,) = sampler_pids(self.pid)
        return sampler

    def wait(self, seconds: float) -> int:
        return self.proc.wait(timeout=seconds)

    def stderr_lines(self) -> list[str]:
        return [line for line in self.err.read_text().splitlines() if line.strip()]

    def assert_nothing_left(self) -> None:
        """The learner, its samplers and its resource tracker (all in its process group) are gone."""
        assert wait_for(lambda: not processes_where(lambda state, ppid, group: group == self.pid or ppid == self.pid), 10), \
            "a process of the run was left behind"

    def kill(self) -> None:
        """Cleanup: whatever of this run is still there (stopped or not) is killed."""
        for pid in processes_where(lambda state, ppid, group: group == self.pid):
            os.kill(pid, signal.SIGKILL)
        if self.proc.poll() is None:
            self.proc.wait(timeout=10)


@pytest.fixture
def command(tmp_path):
    started: list[Command] = []

    def start(name: str, *extra: str, **kw) -> Command:
        started.append(Command(tmp_path, name, *extra, **kw))
        return started[-1]

    yield start
    for c in started:
        c.kill()


def resume_to(run: Path, iterations: int) -> None:
    """``--resume RUN_DIR --iterations N`` (in this process) finishes, and the metrics count every iteration once."""
    assert reasoning.main(["--resume", str(run), "--iterations", str(iterations), "--no-progress"]) == 0
    assert [r["iteration"] for r in rows(run)] == list(range(1, iterations + 1))
    assert json.loads((run / "summary.json").read_text())["status"] == "finished"


@pytest.mark.waits
def test_a_killed_sampler_is_one_line_and_resume_finishes_the_run(command):
    c = command("killed")
    sampler = c.sampler_once_training()
    os.kill(sampler, signal.SIGKILL)
    assert c.wait(60) == 1
    err = c.stderr_lines()
    assert len(err) == 1 and err[0].startswith(f"error: sampler 1 (pid {sampler}) was killed by SIGKILL "), err
    saved = checkpoint(c.run)
    assert saved["status"] == "failed" and saved["iteration"] == len(rows(c.run)) >= 2
    assert f"last good checkpoint (iteration {saved['iteration']})" in err[0]
    c.assert_nothing_left()
    resume_to(c.run, saved["iteration"] + 2)


@pytest.mark.waits
def test_ctrl_c_stops_learner_and_sampler_keeps_the_checkpoint_and_resumes(command):
    c = command("ctrl-c")
    sampler = c.sampler_once_training()
    os.killpg(c.pid, signal.SIGINT)  # as Ctrl-C in a terminal: to every process of the foreground group
    assert c.wait(60) == 130
    out = c.out.read_text()
    saved = checkpoint(c.run)
    assert f"interrupted after iteration {saved['iteration']}; wrote {CHECKPOINT}" in out, out
    assert saved["status"] == "interrupted" and saved["iteration"] == len(rows(c.run)) >= 2
    assert "Traceback" not in c.err.read_text()
    assert not processes_where(lambda state, ppid, group: ppid == c.pid)
    assert wait_for(lambda: not alive(sampler), 10), "the sampler outlived its learner"
    c.assert_nothing_left()
    resume_to(c.run, saved["iteration"] + 2)


@pytest.mark.waits
def test_a_sampler_that_stops_answering_ends_the_run_within_the_deadline(command):
    # 15 s, not less: the deadline holds for both ends all run long, and under make test's load (two workers and the
    # meta-run on 2 cores) a sampler once waited over 5 s for the learner's next message before it was stopped.
    c = command("stopped", timeout_s="15")
    sampler = c.sampler_once_training(1)
    os.kill(sampler, signal.SIGSTOP)
    # The deadline (15 s), then the learner kills the sampler at once (waiting for it to stop would be in vain).
    assert wait_for(lambda: "stopped answering" in c.err.read_text(), 15 + 15), "no deadline on a receive: a deadlock"
    assert c.wait(15) == 1
    err = c.stderr_lines()
    assert len(err) == 1 and err[0].startswith(f"error: sampler 1 (pid {sampler}) stopped answering"), err
    assert checkpoint(c.run)["iteration"] == len(rows(c.run)) >= 1
    c.assert_nothing_left()


def test_a_sampler_killed_while_the_learner_trains_is_named_not_the_learner(tmp_path, capsys, monkeypatch):
    """The learner's next send (the new weights) goes to a dead sampler: still the sampler's fault, in one line."""
    from workbook.loop.rlvr import RLVRTrainer

    started, steps = remember_samplings(monkeypatch), []
    original_step = RLVRTrainer.step

    def step_then_kill(self, *args, **kw):
        stats = original_step(self, *args, **kw)
        steps.append(1)
        if len(steps) == 2:  # iteration 2's update is made; its weights are not sent yet
            proc = started[0].procs[1]
            os.kill(proc.pid, signal.SIGKILL)
            proc.join(timeout=10)
            time.sleep(0.5)  # the connection's end reaches the learner's side
        return stats

    monkeypatch.setattr(RLVRTrainer, "step", step_then_kill)
    assert reasoning.main(TINY + ["--samplers", "1", "--iterations", "5", "--runs-dir", str(tmp_path), "--run-name",
                                  "killed"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    pid = started[0].procs[1].pid
    assert len(err) == 1 and err[0].startswith(f"error: sampler 1 (pid {pid}) was killed by SIGKILL"), err
    assert checkpoint(tmp_path / "killed")["iteration"] == len(rows(tmp_path / "killed")) in (2, 3)
