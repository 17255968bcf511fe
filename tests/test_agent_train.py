"""Smoke tests of Part 9 through the loop: ``python -m workbook reason --task calculator`` and its options.

Not graded: they run the reference solutions on a ~20k-parameter agent pretrained for a few
seconds on calculator traces (it calls the tool, often badly), for one or two iterations each.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import json
import os
import signal
from pathlib import Path

import numpy as np
import pytest
import torch

import solutions.part3_rlhf as sol3
import solutions.part5_beyond_ppo as sol5
from workbook.agents.base import pretrain_agent
from workbook.checkpoints import CHECKPOINT
from workbook.lm.pretrain import TINY_ARGS
from workbook.loop import curves, reasoning
from workbook.loop.reasoning import REASON_ALGOS, main, reason_args, train_reason
from workbook.loop.rlvr import RLVRTrainer
from workbook.loop.run import Run
from workbook.loop.verifiable import CalculatorTask

# The runs draw no curves.png (half a CPU second each), but those algo_run makes: a test looks for them.
pytestmark = pytest.mark.usefixtures("no_curves")

TINY_AGENT = dataclasses.replace(TINY_ARGS, n_reviews=2000, n_heldout=50, steps=100, block_size=128, d_model=32,
                                 n_layer=1, n_head=2, lr=1e-2)


def widened(trainer) -> bool:
    """Whether Part 3's / Part 5's trainer takes ``response_masks`` (the tool's tokens out of its loss)."""
    return "response_masks" in inspect.signature(trainer.step).parameters


# ppo runs Part 3's PPOTrainer; grpo, rloo and dr_grpo Part 5's GroupTrainer; the others Part 7's RLVRTrainer.
TRAINER_OF = {"ppo": sol3.PPOTrainer, "grpo": sol5.GroupTrainer, "rloo": sol5.GroupTrainer, "dr_grpo": sol5.GroupTrainer}
ALGOS = [pytest.param(algo, marks=pytest.mark.skipif(
    algo in TRAINER_OF and not widened(TRAINER_OF[algo]),
    reason=f"{TRAINER_OF.get(algo, RLVRTrainer).__name__}.step takes no response_masks yet")) for algo in REASON_ALGOS]


@pytest.fixture(scope="module")
def tiny():
    model, tok, _ = pretrain_agent(TINY_AGENT, progress=False)
    return model, tok


def tiny_args(tmp_path, algo: str = "dapo", **kw):
    return reason_args(algo, **({"task": "calculator", "impl": "solutions", "iterations": 2, "batch_size": 8,
                                 "mini_batch_size": 4, "group_size": 4, "eval_samples": 4, "eval_k": 4, "sample_every": 1,
                                 "wandb": "disabled", "runs_dir": str(tmp_path), "run_name": f"agent-{algo}", "quiet": True}
                                | kw))


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def run(tiny, args) -> dict:
    model, tok = tiny
    return train_reason(args, model=copy.deepcopy(model), tok=tok, progress=False)


def spy_on_steps(monkeypatch, trainer=RLVRTrainer) -> tuple[list[dict], list]:
    """Record every ``trainer.step``'s keyword arguments (and responses), and every rollout of the calculator task."""
    steps, rollouts = [], []
    step, rollout = trainer.step, CalculatorTask.rollout

    def recording_step(self, queries, responses, scores, **kw):
        steps.append({"responses": responses, **kw})
        return step(self, queries, responses, scores, **kw)

    def recording_rollout(self, *args, **kw):
        batch = rollout(self, *args, **kw)
        rollouts.append(batch)
        return batch

    monkeypatch.setattr(trainer, "step", recording_step)
    monkeypatch.setattr(CalculatorTask, "rollout", recording_rollout)
    return steps, rollouts


def spread_scores(monkeypatch):
    """Rewards 0, 1, 0, 1, …: every group has a signal, so every algorithm steps."""
    monkeypatch.setattr(CalculatorTask, "score", lambda self, prompts, batch: torch.arange(len(prompts)).float() % 2)


# --- every algorithm --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def algo_run(tiny, tmp_path_factory):
    """``algo_run(algo)``: one 2-iteration run of ``algo`` on the calculator, made once for the tests that read it —
    (its summary, its folder, every trainer step's keyword arguments, every rollout of the task)."""
    made = {}

    def get(algo: str):
        if algo not in made:
            runs = tmp_path_factory.mktemp(f"agent-{algo}")
            with pytest.MonkeyPatch.context() as patch:
                patch.setattr("workbook.loop.run.save_curves", curves.save_curves)  # the file's no_curves aside: read below
                steps, rollouts = spy_on_steps(patch, TRAINER_OF.get(algo, RLVRTrainer))
                summary = run(tiny, tiny_args(runs, algo))
            made[algo] = summary, runs / f"agent-{algo}", steps, rollouts
        return made[algo]

    return get


@pytest.mark.parametrize("algo", ALGOS)
def test_each_algorithm_trains_on_the_calculator_and_logs_the_episodes(algo_run, algo):
    summary, out, _, _ = algo_run(algo)
    for name in ("metrics.jsonl", "samples.jsonl", "curves.png", "summary.json", "policy.pt"):
        assert (out / name).exists(), f"{name} was not written"
    assert summary["task"] == "calculator" and summary["status"] == "finished"
    for when in ("before", "after"):
        s = summary[when]
        assert 0 <= s["pass@1"] <= s["pass@4"] <= 1 and 0 <= s["invalid_call_rate"] <= 1
        assert 0 <= s["calls"] <= 4 and s["turns"] > 0 and s["length"] > 0
    metrics = rows(out / "metrics.jsonl")
    assert len(metrics) == 2
    for m in metrics:
        assert m["env/calls"] >= 0 and 0 <= m["env/invalid_call_rate"] <= 1 and m["env/turns"] > 0
    assert any(m["env/calls"] > 0 for m in metrics), "the tiny agent calls the tool"
    samples = rows(out / "samples.jsonl")
    assert len(samples) == 16  # 8 per iteration
    for s in samples:
        # written as a person reads it: a float32 0.1 as 0.1, not 0.10000000149011612
        assert s["reward"] == float(str(np.float32(s["reward"]))), f"samples.jsonl shows reward {s['reward']!r}"
        turns = s["turns"]
        assert all(len(t) == 1 and set(t) <= {"model", "tool"} for t in turns)
        assert "".join(next(iter(t.values())) for t in turns) == s["completion"], "the turns are the episode, in order"
        assert all(next(iter(t.values())).startswith("<result>") for t in turns if "tool" in t)
    assert any("tool" in t for s in samples for t in s["turns"])


@pytest.mark.parametrize("algo", ALGOS)
def test_the_trainer_gets_the_rollouts_model_tokens(algo_run, algo):
    _, _, steps, rollouts = algo_run(algo)
    assert len(steps) == len(rollouts) == 2
    for kw, batch in zip(steps, rollouts):
        assert kw["responses"] is batch.responses
        masks = kw["response_masks"]
        assert len(masks) == len(batch.by_model) and all(torch.equal(m, b) for m, b in zip(masks, batch.by_model))
    assert any(not m.all() for batch in rollouts for m in batch.by_model), "some tool tokens to mask"


def test_training_on_the_tools_tokens_passes_no_masks_and_trains_otherwise(tiny, tmp_path, monkeypatch):
    spread_scores(monkeypatch)
    steps, rollouts = spy_on_steps(monkeypatch)
    run(tiny, tiny_args(tmp_path, "cispo", iterations=1, run_name="masked"))
    run(tiny, tiny_args(tmp_path, "cispo", iterations=1, run_name="unmasked", mask_tool_tokens=False))
    assert steps[0]["response_masks"] is not None and steps[1].get("response_masks") is None
    assert rollouts[1].masks is None and rollouts[1].by_model is not None
    assert [r.tolist() for r in rollouts[0].responses] == [r.tolist() for r in rollouts[1].responses], "the same episodes"
    assert any(not m.all() for m in rollouts[0].by_model)
    from workbook.lm.model import load_checkpoint

    a = load_checkpoint(tmp_path / "masked" / "policy.pt")[0].state_dict()
    b = load_checkpoint(tmp_path / "unmasked" / "policy.pt")[0].state_dict()
    assert any(not torch.equal(a[k], b[k]) for k in a), "the tool's tokens in the loss must change the update"


def test_without_the_tool_no_episode_calls_it(tiny, tmp_path):
    summary = run(tiny, tiny_args(tmp_path, "dapo", tool=False, iterations=1))
    out = tmp_path / "agent-dapo"
    assert summary["before"]["calls"] == summary["after"]["calls"] == 0
    assert all(m["env/calls"] == 0 and m["env/invalid_call_rate"] == 0 for m in rows(out / "metrics.jsonl"))
    for s in rows(out / "samples.jsonl"):
        assert all("model" in t for t in s["turns"]) and len(s["turns"]) <= 1


@pytest.fixture(scope="module")
def tiny_reasoner():
    from workbook.reason import pretrain_reasoner

    model, tok, _ = pretrain_reasoner("addition", dataclasses.replace(TINY_AGENT, block_size=80), progress=False)
    return model, tok


@pytest.mark.parametrize("algo", ["dapo", "grpo", "ppo"])
def test_the_old_tasks_pass_no_masks(tiny_reasoner, monkeypatch, tmp_path, algo):
    model, tok = copy.deepcopy(tiny_reasoner[0]), tiny_reasoner[1]
    seen = []
    trainer = TRAINER_OF.get(algo, RLVRTrainer)
    step = trainer.step

    def recording_step(self, queries, responses, scores, *args, **kw):
        seen.append((args, kw))
        return step(self, queries, responses, scores, *args, **kw)

    monkeypatch.setattr(trainer, "step", recording_step)
    train_reason(tiny_args(tmp_path, algo, task="addition", max_new_tokens=48, iterations=1), model=model, tok=tok,
                 progress=False)
    assert seen == [((), {})], "a single-turn task calls the trainer exactly as before Part 9"


# --- the command line ---------------------------------------------------------------------------------

def tiny_main(tiny, monkeypatch, tmp_path, *extra, name="r"):
    """``main`` on the tiny agent (the reference code), with ``extra`` options."""
    model, tok = tiny
    monkeypatch.setattr(reasoning.Reasoner, "load", lambda self, args, dp: (copy.deepcopy(model), tok))
    argv = ["--impl", "solutions", "--task", "calculator", "--iterations", "2", "--batch-size", "8", "--group-size", "4",
            "--mini-batch-size", "4", "--eval-samples", "3", "--eval-k", "2", "--wandb", "disabled", "--runs-dir",
            str(tmp_path), "--run-name", name, "--no-progress", *extra]
    return main(argv)


def test_the_command_runs_the_calculator_task_with_its_options(tiny, tmp_path, monkeypatch, capsys):
    assert tiny_main(tiny, monkeypatch, tmp_path, "--max-calls", "1", "--no-mask-tool-tokens") == 0
    out = capsys.readouterr().out
    assert "calls" in out and "invalid calls" in out
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    config = summary["config"]
    assert config["task"] == "calculator" and config["max_calls"] == 1 and config["mask_tool_tokens"] is False
    assert config["max_new_tokens"] == 112, "the calculator task's own token budget"
    assert summary["before"]["calls"] <= 1 and summary["after"]["calls"] <= 1
    for s in rows(tmp_path / "r" / "samples.jsonl"):
        assert sum("tool" in t for t in s["turns"]) <= 1, "--max-calls 1: one reply at most"


@pytest.mark.parametrize("argv,field", [
    (["--task", "addition", "--no-tool"], "--no-tool"),
    (["--task", "addition", "--no-mask-tool-tokens"], "--no-mask-tool-tokens"),
    (["--task", "addition", "--max-calls", "2"], "--max-calls"),
    (["--task", "calculator", "--max-calls", "-1"], "--max-calls"),
    (["--task", "calculator", "--prompts", "PROBLEMS"], "--prompts"),
    (["--task", "calculator", "--eval-samples", "100000"], "--eval-samples"),
])
def test_bad_calculator_options_are_one_line_and_exit_2_before_anything_is_written(tmp_path, capsys, argv, field):
    problems = tmp_path / "problems.tsv"
    problems.write_text("".join(f"{i} plus {i}\t{2 * i}\n" for i in range(300)))
    runs = tmp_path / "runs"
    argv = [str(problems) if a == "PROBLEMS" else a for a in argv]
    assert main(argv + ["--runs-dir", str(runs), "--wandb", "disabled"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {field}:") and "\n" not in err and "Traceback" not in err, err
    assert not runs.exists() or not any(runs.iterdir())


def test_an_interrupted_calculator_run_resumes_to_the_weights_of_an_uninterrupted_one(tiny, tmp_path, monkeypatch):
    full = run(tiny, tiny_args(tmp_path, "dapo", run_name="full"))
    assert full["status"] == "finished"
    original = Run.iteration

    def iteration_then_signal(self, it):
        stats = original(self, it)
        if it == 0:
            os.kill(os.getpid(), signal.SIGINT)
        return stats

    monkeypatch.setattr(Run, "iteration", iteration_then_signal)
    part = run(tiny, tiny_args(tmp_path, "dapo", run_name="part"))
    assert part["status"] == "interrupted" and part["iterations"] == 1
    monkeypatch.undo()
    saved = torch.load(tmp_path / "part" / CHECKPOINT, weights_only=False)
    model, tok = tiny
    train_reason(tiny_args(tmp_path, "dapo", run_name="part", resume=str(tmp_path / "part")), model=copy.deepcopy(model),
                 tok=tok, progress=False, resume=saved)
    a = torch.load(tmp_path / "full" / CHECKPOINT, weights_only=False)["algo"]["policy"]
    b = torch.load(tmp_path / "part" / CHECKPOINT, weights_only=False)["algo"]["policy"]
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert rows(tmp_path / "part" / "samples.jsonl") == rows(tmp_path / "full" / "samples.jsonl")
    strip = lambda ms: [{k: v for k, v in m.items() if not k.startswith("time/")} for m in ms]  # noqa: E731
    assert strip(rows(tmp_path / "part" / "metrics.jsonl")) == strip(rows(tmp_path / "full" / "metrics.jsonl"))


def test_evaluate_reproduces_a_calculator_runs_final_figures(tiny, tmp_path, capsys):
    import argparse

    from workbook import evaluate

    model, tok = tiny
    summary = run(tiny, tiny_args(tmp_path, "dapo", run_name="run", iterations=1))
    state = torch.load(tmp_path / "run" / CHECKPOINT, weights_only=False)
    capsys.readouterr()
    options = argparse.Namespace(impl=None, episodes=None, seeds=None)
    assert evaluate.evaluate_lm(tmp_path / "run", state, options, model=copy.deepcopy(model), tok=tok) == 0
    out = capsys.readouterr().out
    after = summary["after"]
    assert f"pass@1 {after['pass@1']:.3f}" in out and f"calls {after['calls']:.2f}" in out and "— reproduced" in out


def test_model_path_runs_a_hugging_face_causal_lm_on_the_calculator(tmp_path):
    pytest.importorskip("transformers")
    os.environ["HF_HUB_OFFLINE"] = "1"
    from workbook.hf.tiny import save_tiny_gpt2

    path = save_tiny_gpt2(tmp_path / "tiny-gpt2")
    argv = ["--impl", "solutions", "--task", "calculator", "--algo", "dapo", "--model", str(path), "--iterations", "1",
            "--batch-size", "4", "--group-size", "2", "--mini-batch-size", "2", "--eval-samples", "2", "--eval-k", "2",
            "--max-new-tokens", "12", "--wandb", "disabled", "--runs-dir", str(tmp_path / "runs"), "--run-name", "hf",
            "--no-progress"]
    assert main(argv) == 0
    out = tmp_path / "runs" / "hf"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["task"] == "calculator" and (out / "policy" / "config.json").is_file()
    assert all("turns" in s for s in rows(out / "samples.jsonl"))
