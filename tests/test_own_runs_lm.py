"""Owning a language-model run (issue 19): resume exactly, Ctrl-C, NaN stop, evaluate. The reference solutions."""

from __future__ import annotations

import copy
import json
import os
import re
import signal

import pytest
import torch

from workbook.checkpoints import CHECKPOINT, INTERRUPTED, NON_FINITE
from workbook.lm.pretrain import TINY_ARGS, pretrain
from workbook.loop import rlhf as loop
from workbook.loop.rlhf import Args
from workbook.loop.run import Run

pytestmark = pytest.mark.usefixtures("no_curves")  # none of these tests looks at a run's curves.png


@pytest.fixture(scope="module")
def tiny():
    model, tok, _ = pretrain(TINY_ARGS, progress=False)
    return model, tok


def small(tmp_path, name: str, algo: str, **kw) -> Args:
    settings = dict(impl="solutions", iterations=4, batch_size=8, mini_batch_size=4, ppo_epochs=1, eval_samples=4,
                    max_new_tokens=20, group_size=4, sample_every=1, wandb="disabled", runs_dir=str(tmp_path),
                    run_name=name, quiet=True, progress=False)
    return loop.algo_args(algo, **(settings | kw))


def signal_after_iteration(monkeypatch, iteration: int, sig: int = signal.SIGINT) -> None:
    original = Run.iteration

    def iteration_then_signal(self, it):
        stats = original(self, it)
        if it + 1 == iteration:
            os.kill(os.getpid(), sig)
        return stats

    monkeypatch.setattr(Run, "iteration", iteration_then_signal)


def rows(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("algo", ["ppo", "grpo", "dpo"])
def test_n_iterations_resumed_for_n_more_end_with_the_weights_of_2n(tiny, tmp_path, monkeypatch, algo):
    model, tok = tiny
    full = loop.train(small(tmp_path, "full", algo), model=copy.deepcopy(model), tok=tok)
    assert full["status"] == "finished"
    signal_after_iteration(monkeypatch, 2)
    part = loop.train(small(tmp_path, "part", algo), model=copy.deepcopy(model), tok=tok)
    assert part["status"] == "interrupted" and part["iterations"] == 2
    monkeypatch.undo()
    saved = torch.load(tmp_path / "part" / CHECKPOINT, weights_only=False)
    assert saved["iteration"] == 2 and saved["status"] == "interrupted"
    resumed_args = small(tmp_path, "part", algo, resume=str(tmp_path / "part"))
    loop.train(resumed_args, model=copy.deepcopy(model), tok=tok, resume=saved)
    a = torch.load(tmp_path / "full" / CHECKPOINT, weights_only=False)
    b = torch.load(tmp_path / "part" / CHECKPOINT, weights_only=False)
    for name, value in a["algo"]["policy"].items():
        assert torch.equal(value, b["algo"]["policy"][name]), name
    assert a.get("algo", {}).get("kl_coef") == b.get("algo", {}).get("kl_coef")
    full_rows, part_rows = rows(tmp_path / "full" / "metrics.jsonl"), rows(tmp_path / "part" / "metrics.jsonl")
    assert [r["iteration"] for r in part_rows] == [1, 2, 3, 4]
    assert [r["env/reward_mean"] for r in part_rows] == [r["env/reward_mean"] for r in full_rows]
    assert rows(tmp_path / "part" / "samples.jsonl") == rows(tmp_path / "full" / "samples.jsonl")


def test_a_nan_in_the_loss_stops_the_run_at_the_last_good_iteration(tiny, tmp_path, monkeypatch, capsys):
    import solutions.part3_rlhf as part3

    model, tok = tiny
    calls, ppo_loss = {"n": 0}, part3.ppo_loss

    def poisoned(*args, **kwargs):  # 2 minibatches per iteration: NaN from iteration 3 on
        calls["n"] += 1
        pg_loss, vf_loss, stats = ppo_loss(*args, **kwargs)
        return (pg_loss * float("nan") if calls["n"] > 4 else pg_loss), vf_loss, stats

    monkeypatch.setattr(part3, "ppo_loss", poisoned)
    summary = loop.train(small(tmp_path, "nan", "ppo"), model=copy.deepcopy(model), tok=tok)
    assert summary["status"] == "non-finite" and summary["iterations"] == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and re.match(r"error: [\w/]+: nan at iteration 3; .*last good checkpoint \(iteration 2\)", err[0])
    assert f"--resume {tmp_path / 'nan'} --learning-rate" in err[0]
    saved = torch.load(tmp_path / "nan" / CHECKPOINT, weights_only=False)
    assert saved["iteration"] == 2 and all(torch.isfinite(v).all() for v in saved["algo"]["policy"].values())
    monkeypatch.undo()
    args = small(tmp_path, "nan", "ppo", resume=str(tmp_path / "nan"), learning_rate=1e-4)
    summary = loop.train(args, model=copy.deepcopy(model), tok=tok, resume=saved)
    assert summary["status"] == "finished" and [r["iteration"] for r in rows(tmp_path / "nan" / "metrics.jsonl")] == [1, 2, 3, 4]
    after = torch.load(tmp_path / "nan" / CHECKPOINT, weights_only=False)
    assert after["algo"]["optimizer"]["param_groups"][0]["lr"] == 1e-4


def test_evaluate_reproduces_an_rlhf_runs_final_figures(tiny, tmp_path, capsys):
    import argparse

    from workbook import evaluate

    model, tok = tiny
    summary = loop.train(small(tmp_path, "run", "grpo", iterations=2), model=copy.deepcopy(model), tok=tok)
    state = torch.load(tmp_path / "run" / CHECKPOINT, weights_only=False)
    capsys.readouterr()
    options = argparse.Namespace(impl=None, episodes=None, seeds=None)
    assert evaluate.evaluate_lm(tmp_path / "run", state, options, model=copy.deepcopy(model), tok=tok) == 0
    out = capsys.readouterr().out
    assert f"reward {summary['after']['reward']:+.3f}" in out and "— reproduced" in out
    assert out.count("\n  ") == len(summary["samples_after"])  # each sample with its score
    options = argparse.Namespace(impl=None, episodes=3, seeds=[5])
    assert evaluate.evaluate_lm(tmp_path / "run", state, options, model=copy.deepcopy(model), tok=tok) == 0
    out = capsys.readouterr().out
    assert "3 held-out prompts (seed 5" in out and "reproduced" not in out


def test_bad_resume_options_give_one_line(tiny, tmp_path, capsys):
    model, tok = tiny
    loop.train(small(tmp_path, "run", "ppo", iterations=2), model=copy.deepcopy(model), tok=tok)
    run = str(tmp_path / "run")
    cases = [(["--resume", run, "--batch-size", "16"], "--batch-size", "16 conflicts with the checkpoint's 8"),
             (["--resume", run, "--algo", "grpo"], "--algo", "grpo conflicts with the checkpoint's ppo"),
             (["--resume", run, "--seeds", "3"], "--seeds", "conflicts with the checkpoint's seed 0"),
             (["--resume", run, "--run-name", "x"], "--run-name", "does not apply to --resume"),
             (["--resume", run], "--resume", "has done 2 of its 2 iterations: nothing left to train"),
             (["--resume", str(tmp_path / "nope")], "--resume", "does not exist"),
             (["--resume", str(tmp_path / "cartpole")], "--resume", "is a run of `python -m workbook cartpole`")]
    (tmp_path / "cartpole").mkdir()
    (tmp_path / "cartpole" / "summary.json").write_text(json.dumps({"command": "cartpole"}))
    for argv, field, words in cases:
        assert loop.main(argv) == 2, argv
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and err.startswith(f"error: {field}: ") and words in err, err
