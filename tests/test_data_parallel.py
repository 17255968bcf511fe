"""Data-parallel training with torchrun: two processes on CPU (gloo), tiny settings.

Not graded (Part 6's exercises are in test_part6_data_parallel.py). One torchrun job runs
workbook/distributed_check.py: its checks, then the CartPole, RLHF (PPO, GRPO, DPO) and calculator (Part 9)
commands with each rank in its own working directory, then a rank that fails on purpose.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
import torch

from workbook.distributed import torchrun

ROOT = Path(__file__).resolve().parent.parent
ENV = {"PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
       "WANDB_MODE": "disabled"}


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> tuple[Path, list[dict], str, int, float]:
    out = tmp_path_factory.mktemp("dp-job")
    proc = torchrun(["-m", "workbook.distributed_check", "job", str(out)], 2, timeout=240, env=ENV, cwd=str(ROOT))
    ended = time.time()
    log = proc.stdout + proc.stderr
    missing = [r for r in range(2) if not (out / f"result{r}.json").exists()]
    assert not missing, f"the two-process job failed before rank(s) {missing} wrote their results:\n{log[-4000:]}"
    return out, [json.loads((out / f"result{r}.json").read_text()) for r in range(2)], log, proc.returncode, ended


@pytest.mark.slow
def test_two_ranks_on_gloo(job):
    _, results, *_ = job
    assert [r["rank"] for r in results] == [0, 1] and all(r["world_size"] == 2 for r in results)
    assert "gloo" in results[0]["backend"]  # "cpu:gloo,cuda:nccl" where CUDA is present


@pytest.mark.slow
def test_cartpole_weights_stay_bit_identical_while_the_data_differs(job):
    _, results, *_ = job
    for r in results:
        c = r["cartpole"]
        assert c["phases"] == 3, "total_timesteps counts both ranks: 768 steps = 3 phases of 2 × 128"
        assert c["params_identical"], "after 3 updates the ranks' weights differ"
        assert c["first_obs_differ"], "both ranks reset their environments to the same states (same data seed?)"
        assert c["params_moved"], "the weights never changed: no update happened"
    assert results[0]["cartpole"]["global_steps"] == [256, 512, 768], "global_step counts the steps of both ranks"


@pytest.mark.slow
def test_continuous_weights_and_normaliser_statistics_stay_identical(job):
    _, results, *_ = job
    c = results[0]["continuous"]
    assert c["phases"] == 3 and c["params_identical"], "after 3 updates the ranks' Part 4 weights differ"
    assert c["stats_identical"], "the ranks' observation / reward statistics differ after merging"
    per_phase = [b - a for a, b in zip([0.0] + c["obs_counts"], c["obs_counts"])]
    assert all(n == pytest.approx(2 * 4 * 16) for n in per_phase), (
        f"each phase should fold in both ranks' 2 × 4 envs × 16 steps of observations, got {per_phase}")


@pytest.mark.slow
def test_one_data_parallel_step_equals_one_process_on_the_union(job):
    _, results, *_ = job
    step = results[0]["rlhf_step"]
    assert all(r["rlhf_step"]["params_identical"] for r in results)
    assert step["step_size"] > 1e-3, "the step was too small for the comparison to mean anything"
    assert step["max_abs_diff_vs_single"] < 1e-5, (
        f"data-parallel step differs from the single-process step on the union by {step['max_abs_diff_vs_single']:.3g}")
    assert step["kl_coef"] == pytest.approx(step["kl_coef_single"], rel=1e-12), "β adapted to a per-rank KL or count"
    assert results[1]["rlhf_step"]["kl_coef"] == step["kl_coef"], "the ranks disagree on β"


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["grpo", "dpo"])
def test_part5_algorithms_train_data_parallel_with_identical_weights(job, algo):
    _, results, *_ = job
    run = results[0]["commands"][algo]
    assert run["iterations"] == 2 and run["rank0_wrote_samples"]
    assert run["params_identical"], f"after 2 {algo} updates the ranks' weights differ (gradients not averaged?)"
    assert run["params_moved"], "the weights never changed: no update happened"


@pytest.mark.slow
def test_only_rank_zero_writes_outputs(job):
    out, results, log, *_ = job
    assert results[0]["commands"]["rlhf_iterations"] == 2
    # 512 steps do not solve CartPole: under torchrun that is one line from rank 0 and exit status 0 on
    # every rank (a non-zero one would make torchrun print a ChildFailedError traceback).
    assert [r["commands"]["cartpole_exit"] for r in results] == [0, 0]
    assert log.count("not solved for seed 1 (under torchrun the exit status is 0") == 1
    rank0 = {p.relative_to(out / "rank0").as_posix() for p in (out / "rank0").rglob("*") if p.is_file()}
    assert {"runs/cartpole/metrics.jsonl", "runs/cartpole/agent.pt", "runs/cartpole/learning_curve.png",
            "runs/rlhf/metrics.jsonl", "runs/rlhf/curves.png", "runs/rlhf/summary.json", "runs/rlhf/policy.pt"} <= rank0
    assert len((out / "rank0/runs/cartpole/metrics.jsonl").read_text().splitlines()) == 2
    rank1 = [p for p in (out / "rank1").rglob("*")]
    assert rank1 == [], f"rank 1 wrote {rank1}"
    assert log.count("greedy evaluation over 2 episodes") == 1, "only rank 0 prints"


@pytest.mark.slow
def test_the_calculator_task_runs_data_parallel(job):
    """Part 9's task (``reason --task calculator``): rank 0 writes the run folder and its samples with their turns, the
    other rank nothing (it once tried: test_only_rank_zero_writes_outputs)."""
    out, results, *_ = job
    assert [r["commands"]["calculator_exit"] for r in results] == [0, 0]
    run = out / "rank0" / "runs" / "calculator"
    samples = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    assert samples and all("turns" in s for s in samples)
    assert json.loads((run / "summary.json").read_text())["iterations"] == 2


@pytest.mark.slow
def test_a_failing_rank_ends_the_job_with_its_error(job):
    out, _, log, returncode, ended = job
    assert returncode != 0, f"rank 1 raised, yet the job exited 0:\n{log[-3000:]}"
    assert "rank 1 fails on purpose" in log, log[-3000:]
    assert not (out / "rank0-finished").exists(), "rank 0 went on past a collective its peer never joined"
    # Ended by the failure (torchrun stops the other rank), well before the 60 s collective timeout.
    assert ended - float((out / "failed_at").read_text()) < 30


def test_merged_running_stats_are_the_stats_of_all_ranks_samples():
    """Part 4's normaliser statistics after a rollout: prior ⊕ rank 0's ⊕ rank 1's samples, on every rank."""
    from solutions.part4_continuous import RunningMeanStd
    from workbook.distributed import merge_running_stats, own_running_stats

    g = torch.Generator().manual_seed(0)
    prior, mine, theirs = (torch.randn(n, 3, generator=g) * s + m for n, s, m in ((50, 1.0, 0.0), (7, 2.0, 1.0),
                                                                                  (30, 0.5, -2.0)))
    start = RunningMeanStd((3,))
    start.update(prior)
    before = (start.mean.clone(), start.var.clone(), float(start.count))
    ranks = []
    for data in (mine, theirs):
        rms = RunningMeanStd((3,))
        rms.mean, rms.var, rms.count = before[0].clone(), before[1].clone(), before[2]
        rms.update(data[:4])
        rms.update(data[4:])
        ranks.append(rms)

    parts = [own_running_stats(rms, before) for rms in ranks]

    class TwoRanks:  # what ctx.gather returns on every rank
        @staticmethod
        def gather(obj):
            return parts

    expected = RunningMeanStd((3,))
    expected.update(torch.cat([prior, mine, theirs]))
    for rms in ranks:
        merge_running_stats(rms, before, TwoRanks())
        torch.testing.assert_close(rms.mean, expected.mean)
        torch.testing.assert_close(rms.var, expected.var)
        assert rms.count == pytest.approx(expected.count)


@pytest.mark.parametrize("value", ["abc", "0", "-1", "inf"])
def test_a_bad_deadline_in_the_environment_is_one_line_before_the_group_is_joined(monkeypatch, value):
    """Every rank of a torchrun job reads WORKBOOK_DIST_TIMEOUT_S when it joins: a bad one is the command's one line."""
    from workbook import distributed
    from workbook.runs import ConfigError

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("WORKBOOK_DIST_TIMEOUT_S", value)
    with pytest.raises(ConfigError) as raised:
        distributed.init("solutions")
    assert (raised.value.field, raised.value.message) == (
        "WORKBOOK_DIST_TIMEOUT_S", f"expected a positive number of seconds, got {value!r}")
    assert not torch.distributed.is_initialized()
    monkeypatch.setenv("WORKBOOK_DIST_TIMEOUT_S", "2.5")
    assert distributed.seconds_from_env("WORKBOOK_DIST_TIMEOUT_S", 600.0) == 2.5
    monkeypatch.delenv("WORKBOOK_DIST_TIMEOUT_S")
    assert distributed.seconds_from_env("WORKBOOK_DIST_TIMEOUT_S", 600.0) == 600.0


def test_ranks_get_torchruns_environment_and_a_failing_rank_stops_the_other():
    """``Ranks`` (Part 6's two-process job, started without torchrun's launcher): each rank is told who it is and
    where to meet, as torchrun tells it; a rank that fails ends the job with its status, as under torchrun."""
    from workbook.distributed import Ranks

    script = ("import os, sys, time\n"
              "print(*(os.environ[k] for k in ('RANK', 'LOCAL_RANK', 'WORLD_SIZE', 'LOCAL_WORLD_SIZE', 'MASTER_ADDR')))\n"
              "int(os.environ['MASTER_PORT'])\n"
              "sys.stdout.flush()\n"
              "sys.exit(3) if os.environ['RANK'] == '1' else time.sleep(120)")
    start = time.monotonic()
    done = Ranks(["-c", script], 2).finish(timeout=60)
    assert time.monotonic() - start < 30, "rank 0 was left to sleep after rank 1 failed"
    assert done.returncode == 3
    assert sorted(done.stdout.splitlines()) == ["[rank 0] 0 0 2 2 127.0.0.1", "[rank 1] 1 1 2 2 127.0.0.1"]


def test_ranks_that_outlive_the_timeout_are_stopped():
    from workbook.distributed import Ranks

    ranks = Ranks(["-c", "import time; time.sleep(120)"], 2)
    with pytest.raises(subprocess.TimeoutExpired):
        ranks.finish(timeout=0.5)
    assert all(p.returncode is not None for p in ranks.procs)
