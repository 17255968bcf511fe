"""Smoke tests of Part 7's given code: ``python -m workbook reason --algo ...`` and its trainer.

Not graded: they run the reference solutions on a ~20k-parameter reasoner pretrained for a few
seconds (it writes well-formed answers, rarely right ones: the format reward gives the groups a
spread), for two iterations each.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
from pathlib import Path

import pytest
import torch

import solutions.part3_rlhf as sol3
import solutions.part5_beyond_ppo as sol5
import solutions.part7_reasoning as sol7
from workbook.lm.pretrain import TINY_ARGS
from workbook.loop import reasoning
from workbook.loop.reasoning import REASON_ALGOS, REASON_DEFAULTS, main, parse_command, reason_args, train_reason
from workbook.loop.rlvr import RLVRConfig, RLVRTrainer
from workbook.reason import pretrain_reasoner

# The runs draw no curves.png (half a CPU second each), but where a test looks for one (draws_curves).
pytestmark = pytest.mark.usefixtures("no_curves")

TINY_REASONER = dataclasses.replace(TINY_ARGS, n_reviews=2000, n_heldout=50, steps=100, block_size=80, d_model=32,
                                    n_layer=1, n_head=2, lr=1e-2)


@pytest.fixture(scope="module")
def tiny():
    model, tok, _ = pretrain_reasoner("addition", TINY_REASONER, progress=False)
    return model, tok


def tiny_args(tmp_path, algo: str, **kw):
    return reason_args(algo, **({"impl": "solutions", "iterations": 2, "batch_size": 8, "mini_batch_size": 4, "group_size": 4,
                                 "eval_samples": 4, "eval_k": 4, "max_new_tokens": 48, "sample_every": 1, "wandb": "disabled",
                                 "runs_dir": str(tmp_path), "run_name": f"smoke-{algo}", "quiet": True} | kw))


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("algo", REASON_ALGOS)
def test_each_algorithm_writes_the_run_folder_and_learns(tiny, tmp_path, algo, draws_curves):
    model, tok = tiny
    before = copy.deepcopy(model.state_dict())
    summary = train_reason(tiny_args(tmp_path, algo), model=copy.deepcopy(model), tok=tok, progress=False)
    out = tmp_path / f"smoke-{algo}"
    for name in ("metrics.jsonl", "samples.jsonl", "curves.png", "summary.json", "policy.pt"):
        assert (out / name).exists(), f"{name} was not written"
    metrics = rows(out / "metrics.jsonl")
    assert len(metrics) == 2 and {"objective/kl", "objective/entropy", "env/accuracy", "env/reward_mean",
                                  "tokens/responses_len_mean"} <= set(metrics[0])
    assert ("env/groups_with_signal" in metrics[0]) == (algo != "ppo")
    for when in ("before", "after"):
        s = summary[when]
        assert 0 <= s["pass@1"] <= s["pass@4"] <= 1 and 0 <= s["format_valid"] <= 1 and s["length"] > 0
    assert summary["task"] == "addition" and summary["algo"] == algo
    from workbook.lm.model import load_checkpoint

    trained, _, _ = load_checkpoint(out / "policy.pt")
    signal = any(m.get("env/groups_with_signal", 1.0) > 0 for m in metrics)
    moved = any(not torch.equal(before[k], v) for k, v in trained.state_dict().items())
    assert moved == signal, "the policy must move when (and only when) some group's rewards differ"


def test_part7_algorithms_log_both_clip_fractions_and_their_settings(tiny, tmp_path):
    model, tok = tiny
    train_reason(tiny_args(tmp_path, "dapo", ppo_epochs=2), model=copy.deepcopy(model), tok=tok, progress=False)
    metrics = rows(tmp_path / "smoke-dapo" / "metrics.jsonl")
    for m in metrics:
        assert 0 <= m["rlvr/policy/clipfrac_low"] <= 1 and 0 <= m["rlvr/policy/clipfrac_high"] <= 1
        assert m["rlvr/groups_kept"] == pytest.approx(m["env/groups_with_signal"])


def test_samples_hold_the_checked_answers(tiny, tmp_path):
    model, tok = tiny
    fmt = 0.25
    train_reason(tiny_args(tmp_path, "grpo", format_reward=fmt), model=copy.deepcopy(model), tok=tok, progress=False)
    samples = rows(tmp_path / "smoke-grpo" / "samples.jsonl")
    assert len(samples) == 16  # 8 per iteration, every iteration
    for s in samples:
        assert s["prompt"].endswith(":") and s["answer"].isdigit()
        given = s["given"]
        right = given is not None and given.isdigit() and int(given) == int(s["answer"])
        assert s["correct"] == right
        expected = 1.0 if right else fmt if given and given.isascii() and given.isdigit() else 0.0
        assert s["reward"] == pytest.approx(expected)


def test_same_seed_same_numbers(tiny, tmp_path):
    model, tok = tiny
    runs = []
    for name in ("a", "b"):
        train_reason(tiny_args(tmp_path, "dapo", run_name=name), model=copy.deepcopy(model), tok=tok, progress=False)
        runs.append([{k: v for k, v in m.items() if not k.startswith("time/")} for m in rows(tmp_path / name / "metrics.jsonl")])
    assert runs[0] == runs[1]


# --- the trainer ----------------------------------------------------------------------------------

def trainer(tiny, **kw) -> RLVRTrainer:
    model, tok = tiny
    policy = sol5.LanguageModelPolicy(copy.deepcopy(model))
    config = RLVRConfig(**({"group_size": 2, "mini_batch_size": 4, "max_len": 6} | kw))
    return RLVRTrainer(config, policy, sol3.create_reference_model(policy), tok.pad_id, tok.eos_id, "solutions")


def batch(tok, finished: list[bool]):
    queries = [torch.tensor(tok.encode("123+456:", add_bos=True))] * len(finished)
    body = tok.encode("9+9=18", add_bos=False)
    responses = [torch.tensor(body[:4] + [tok.eos_id] if f else body[:6]) for f in finished]
    return queries, responses


def params(t: RLVRTrainer) -> list[torch.Tensor]:
    return [p.detach().clone() for p in t.model.parameters()]


def changed(a, b) -> bool:
    return any(not torch.equal(x, y) for x, y in zip(a, b))


@pytest.mark.parametrize("dynamic", [True, False])
def test_dynamic_sampling_drops_groups_without_a_spread(tiny, dynamic):
    t = trainer(tiny, dynamic_sampling=dynamic)
    q, r = batch(tiny[1], [True] * 4)
    start = params(t)
    stats = t.step(q, r, torch.tensor([1.0, 1.0, 0.0, 0.0]))  # two groups, each tied
    assert stats["rlvr/groups_kept"] == (0.0 if dynamic else 1.0)
    assert not changed(start, params(t)), "tied groups have zero advantage: nothing to learn either way"
    stats = t.step(q, r, torch.tensor([1.0, 0.0, 0.0, 0.0]))  # the first group has a spread
    assert stats["rlvr/groups_kept"] == (0.5 if dynamic else 1.0) and changed(start, params(t))


@pytest.mark.parametrize("mask_truncated", [True, False])
def test_truncated_completions_are_masked_out_of_the_loss(tiny, mask_truncated):
    t = trainer(tiny, mask_truncated=mask_truncated)
    q, r = batch(tiny[1], [False, False, True, True])  # only the first group has a spread, and it was cut off
    start = params(t)
    stats = t.step(q, r, torch.tensor([1.0, 0.0, 0.0, 0.0]))
    assert stats["tokens/truncated_frac"] == 0.5
    assert changed(start, params(t)) != mask_truncated


@pytest.mark.parametrize("cache", [0, 2, 4])
def test_the_overlong_penalty_shapes_the_reward(tiny, cache):
    t = trainer(tiny, overlong_cache=cache)
    q, r = batch(tiny[1], [True, False, True, False])  # lengths 5 and 6, max_len 6
    scores = torch.tensor([1.0, 0.0, 1.0, 1.0])
    stats = t.step(q, r, scores)
    penalty = sol7.overlong_penalty(torch.tensor([5, 6, 5, 6]), 6, cache) if cache else torch.zeros(4)
    assert cache == 0 or penalty.sum() < 0
    assert stats["rlvr/shaped_reward_mean"] == pytest.approx((scores + penalty).mean().item())


@pytest.mark.parametrize("algo,loss", [("dapo", "clip_higher_loss"), ("gspo", "gspo_loss"), ("cispo", "cispo_loss")])
def test_each_part7_algorithm_calls_its_loss_with_its_clip_range(tiny, tmp_path, monkeypatch, algo, loss):
    calls = []
    real = getattr(sol7, loss)

    def spy(*args, **kw):
        calls.append(args[4:6])
        return real(*args, **kw)

    monkeypatch.setattr(sol7, loss, spy)
    model, tok = tiny
    args = tiny_args(tmp_path, algo, iterations=1)
    monkeypatch.setattr(reasoning.ReasoningTask, "score", lambda self, p, b: torch.arange(len(p)).float() % 2)
    train_reason(args, model=copy.deepcopy(model), tok=tok, progress=False)
    assert calls and all(c == (args.cliprange, args.eps_high) for c in calls)


# --- options ----------------------------------------------------------------------------------------

def test_each_algorithm_has_its_defaults_unless_an_option_overrides_them():
    for algo, defaults in REASON_DEFAULTS.items():
        args, seeds = parse_command(["--algo", algo])
        assert {k: getattr(args, k) for k in defaults} == defaults and seeds == [0]
    assert parse_command([])[0].algo == "dapo" and parse_command([])[0].dynamic_sampling
    assert parse_command(["--algo", "gspo", "--cliprange", "0.01"])[0].cliprange == 0.01
    assert parse_command(["--algo", "dapo", "--set", "eps_high=0.3"])[0].eps_high == 0.3
    assert parse_command(["--algo", "dapo", "--no-dynamic-sampling"])[0].dynamic_sampling is False
    assert parse_command(["--seeds", "3", "4"])[1] == [3, 4]
    assert parse_command(["--max-new-tokens", "40"])[0].overlong_cache == 10, "a short limit, a shorter ramp"
    assert parse_command(["--max-new-tokens", "40", "--overlong-cache", "30"])[0].overlong_cache == 30
    from workbook.reason.task import eval_pool_size

    assert parse_command(["--task", "multiplication"])[0].eval_samples == min(256, eval_pool_size("multiplication"))
    assert parse_command(["--task", "addition"])[0].eval_samples == 256


@pytest.mark.parametrize("argv,field", [
    (["--algo", "dpo"], "--algo"),
    (["--task", "division"], "--task"),
    (["--seed", "1"], "--seed"),
    (["--seeds", "1", "1"], "--seeds"),
    (["--group-size", "3"], "--group-size"),
    (["--group-size", "1"], "--group-size"),
    (["--mini-batch-size", "100"], "--mini-batch-size"),
    (["--task", "multiplication", "--eval-samples", "300"], "--eval-samples"),
    (["--eval-samples", "0"], "--eval-samples"),
    (["--format-reward", "1"], "--format-reward"),
    (["--overlong-cache", "65"], "--overlong-cache"),
    (["--cliprange", "1.5"], "--cliprange"),
    (["--eps-high", "0"], "--eps-high"),
    (["--eval-k", "0"], "--eval-k"),
    (["--checkpoint-every", "-1"], "--checkpoint-every"),
    (["--run-dir", "x"], "--run-dir"),
    (["--prompts", "nowhere.tsv"], "--prompts"),
    (["--set", "reward=model"], "--set"),
    (["--set", "nope=1"], "--set"),
    (["--model", "./no-such-folder"], "--model"),
])
def test_bad_options_are_one_line_and_exit_2_before_anything_is_written(tmp_path, capsys, argv, field):
    runs = tmp_path / "runs"
    assert main(argv + ["--runs-dir", str(runs), "--wandb", "disabled"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {field}:") and "\n" not in err and "Traceback" not in err
    assert not runs.exists() or not any(runs.iterdir())


def test_a_problem_file_needs_a_model_and_well_formed_lines(tmp_path, capsys):
    good, bad = tmp_path / "good.tsv", tmp_path / "bad.tsv"
    good.write_text("".join(f"What is {i} plus {i}?\t{2 * i}\n" for i in range(12)))
    bad.write_text("What is 2 plus 2?\t4\nno answer here\n")
    assert main(["--prompts", str(good), "--wandb", "disabled"]) == 2
    assert "needs --model" in capsys.readouterr().err
    assert reasoning.read_problem_file(str(good))[3] == ("What is 3 plus 3?", "6")
    with pytest.raises(reasoning.ConfigError, match="bad.tsv:2"):
        reasoning.read_problem_file(str(bad))


@pytest.mark.parametrize("stub", ["answer_reward", "overlong_penalty"])
def test_impl_exercises_names_the_unfilled_part7_stub(tiny, tmp_path, capsys, monkeypatch, plant_stub, stub):
    import exercises.part3_rlhf as ex3
    import exercises.part5_beyond_ppo as ex5
    import exercises.part7_reasoning as ex7

    # Parts 3, 5 and 7 done (the reference's), except ``stub`` (whatever the learner has filled in).
    for ex, sol in ((ex3, sol3), (ex5, sol5), (ex7, sol7)):
        for name in dir(sol):
            if not name.startswith("_") and callable(getattr(sol, name)) and hasattr(ex, name):
                monkeypatch.setattr(ex, name, getattr(sol, name))
    plant_stub(ex7, stub)
    model, tok = tiny
    monkeypatch.setattr(reasoning.Reasoner, "load", lambda self, args, dp: (copy.deepcopy(model), tok))
    argv = ["--impl", "exercises", "--iterations", "1", "--batch-size", "8", "--group-size", "4", "--mini-batch-size", "4",
            "--eval-samples", "2", "--eval-k", "2", "--max-new-tokens", "48", "--wandb", "disabled", "--runs-dir",
            str(tmp_path), "--no-progress"]
    assert main(argv + ["--run-name", "stub"]) == 2, "a stub is an --impl that cannot run: exit status 2, as a bad option"
    err = capsys.readouterr().err.strip()
    named = (f"error: --impl: exercises: {stub} in exercises/part7_reasoning.py (Part 7) is still a stub; fill it in "
             "(pytest tests/test_part7_reasoning.py shows which are done) or use --impl solutions")
    # Both are named before anything starts (workbook/loop/calls.py): answer_reward, which the evaluation before
    # training reaches, and overlong_penalty, which the first iteration would reach (no folder to remove).
    assert err == named
    assert not (tmp_path / "stub").exists(), "no run folder is left of a run that trained nothing"


# --- a Hugging Face model ----------------------------------------------------------------------------

def test_model_path_runs_a_hugging_face_causal_lm(tmp_path):
    pytest.importorskip("transformers")
    os.environ["HF_HUB_OFFLINE"] = "1"
    from workbook.hf.tiny import save_tiny_gpt2

    path = save_tiny_gpt2(tmp_path / "tiny-gpt2")
    problems = tmp_path / "problems.tsv"
    problems.write_text("".join(f"{i} plus {i + 1}\t{2 * i + 1}\n" for i in range(12)))
    argv = ["--impl", "solutions", "--model", str(path), "--prompts", str(problems), "--iterations", "1", "--batch-size", "4",
            "--group-size", "2", "--mini-batch-size", "2", "--eval-samples", "2", "--eval-k", "2", "--max-new-tokens", "8",
            "--wandb", "disabled", "--runs-dir", str(tmp_path / "runs"), "--run-name", "hf", "--no-progress"]
    assert main(argv) == 0
    out = tmp_path / "runs" / "hf"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["task"] == "file" and (out / "policy" / "config.json").is_file()
    samples = rows(out / "samples.jsonl")
    assert all(s["prompt"].endswith(reasoning.INSTRUCTION) and s["answer"].isdigit() for s in samples)
    from workbook.hf.model import load_causal_lm

    load_causal_lm(str(out / "policy"))  # the trained policy loads back with --model


# --- the task ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("name,op", [("addition", "+"), ("multiplication", "*")])
def test_the_task_draws_fresh_training_problems_and_holds_out_the_evaluation(name, op):
    task = reasoning.ReasoningTask("solutions", name, group_size=4)
    first = task.batch(64, 0, 0)
    assert task.batch(64, 0, 0) == first, "same seed and iteration, same problems"
    assert task.batch(64, 0, 1) != first and task.batch(64, 1, 0) != first
    heldout = task.eval_prompts(100)
    assert all(op in p.text and p.answer.isdigit() for p in first + heldout)
    seen = {p.text for seed in range(3) for it in range(20) for p in task.batch(64, seed, it)}
    assert not seen & {p.text for p in heldout}, "a held-out problem was a training prompt"


@pytest.mark.parametrize("fmt", [0.1, 0.3])
def test_the_task_scores_with_the_verifier_and_counts_groups_with_a_signal(fmt):
    from workbook.loop.task import Prompt
    from workbook.rlhf.data import Rollout

    task = reasoning.ReasoningTask("solutions", "addition", group_size=2, format_reward=fmt)
    prompts = [Prompt("1+2:", "3")] * 2 + [Prompt("2+2:", "4")] * 2
    completions = ["<answer>3</answer>", "x", "<answer>5</answer>", "<answer>5</answer>"]
    batch = Rollout([p.text for p in prompts], [], [], [], completions, [True] * 4)
    scores = task.score(prompts, batch)
    assert scores.tolist() == pytest.approx([1.0, 0.0, fmt, fmt])
    stats = task.batch_stats(batch, scores)
    assert stats["env/accuracy"] == 0.25 and stats["env/format_valid"] == 0.75 and stats["env/groups_with_signal"] == 0.5
    assert "env/groups_with_signal" not in reasoning.ReasoningTask("solutions", group_size=1).batch_stats(batch, scores)


def test_evaluate_reproduces_a_reason_runs_final_pass_at_k(tiny, tmp_path, capsys):
    import argparse

    import torch

    from workbook import evaluate
    from workbook.checkpoints import CHECKPOINT

    model, tok = tiny
    summary = train_reason(tiny_args(tmp_path, "dapo", run_name="run"), model=copy.deepcopy(model), tok=tok, progress=False)
    state = torch.load(tmp_path / "run" / CHECKPOINT, weights_only=False)
    assert state["command"] == "reason"
    capsys.readouterr()
    options = argparse.Namespace(impl=None, episodes=None, seeds=None)
    assert evaluate.evaluate_lm(tmp_path / "run", state, options, model=copy.deepcopy(model), tok=tok) == 0
    out = capsys.readouterr().out
    assert f"pass@1 {summary['after']['pass@1']:.3f}" in out and "— reproduced" in out
    options = argparse.Namespace(impl=None, episodes=3, seeds=[5])
    assert evaluate.evaluate_lm(tmp_path / "run", state, options, model=copy.deepcopy(model), tok=tok) == 0
    out = capsys.readouterr().out
    assert "3 held-out prompts (seed 5" in out and "reproduced" not in out


# --- what the command shows and stores (issue 28) ---------------------------------------------------

def tiny_main(tiny, monkeypatch, tmp_path, *extra):
    """``main`` on the tiny reasoner (the reference code), with ``extra`` options."""
    model, tok = tiny
    monkeypatch.setattr(reasoning.Reasoner, "load", lambda self, args, dp: (copy.deepcopy(model), tok))
    argv = ["--impl", "solutions", "--iterations", "2", "--batch-size", "8", "--group-size", "4", "--mini-batch-size", "4",
            "--eval-samples", "3", "--eval-k", "2", "--max-new-tokens", "48", "--wandb", "disabled", "--runs-dir",
            str(tmp_path), "--run-name", "r", "--no-progress", *extra]
    return main(argv)


def test_summary_and_set_hold_only_the_commands_own_fields(tiny, tmp_path, monkeypatch, capsys):
    assert tiny_main(tiny, monkeypatch, tmp_path) == 0
    out = capsys.readouterr().out
    config = json.loads((tmp_path / "r" / "summary.json").read_text())["config"]
    for rlhf_only in ("reward", "eos_trick", "missing_eos_score", "dpo_beta"):  # the review task's
        assert rlhf_only not in config, f"{rlhf_only} is an rlhf setting, not one of reason's"
    assert config["eps_high"] == 0.28 and config["overlong_cache"] == 12, "the values dapo used (48 // 4 = 12)"
    assert config["format_reward"] == 0.1 and config["eval_k"] == 2
    # --set lists only fields it accepts: each one listed is accepted
    assert main(["--set", "not_a_field=3"]) == 2
    listed = capsys.readouterr().err.split("(fields: ")[1].rstrip(")\n").split(", ")
    assert not {"seed", "reward", "dpo_beta"} & set(listed) and "eps_high" in listed and "format_reward" in listed
    assert "policy.pt" in out and "checkpoint.pt" in out


def test_help_shows_the_defaults_of_the_default_algorithm(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--eps-high EPS_HIGH Upper clip" in text
    eps = text.split("--eps-high EPS_HIGH Upper clip")[1].split("--dynamic-sampling")[0]
    assert "0.28 with --algo dapo" in eps, eps
    assert "(default: 16" in text.split("--overlong-cache OVERLONG_CACHE DAPO")[1].split("--mask-truncated")[0]
    kl = text.split("--kl-target KL_TARGET Target")[1].split("--kl-horizon")[0]
    assert "per-completion" in kl and "review" not in kl
    # the parsed defaults stay the field's: another algorithm does not inherit dapo's
    grpo = parse_command(["--algo", "grpo"])[0]
    assert grpo.eps_high == 0.2 and not grpo.dynamic_sampling and grpo.overlong_cache == 0
    assert parse_command([])[0].eps_high == 0.28


@pytest.mark.parametrize("value", ["1", "1.5", "-0.1"])
def test_format_reward_has_one_range_in_every_message(value, capsys):
    assert main(["--format-reward", value]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --format-reward: must be in [0, 1) "), err
    assert parse_command(["--format-reward", "0.99"])[0].format_reward == 0.99


def test_the_run_says_when_it_evaluates_and_what_it_wrote(tiny, tmp_path, monkeypatch, capsys, draws_curves):
    assert tiny_main(tiny, monkeypatch, tmp_path) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    evaluating = [i for i, line in enumerate(lines) if line.startswith("evaluating ")]
    assert len(evaluating) == 2 and "3 held-out problems × 2 samples" in lines[evaluating[0]]
    assert lines[evaluating[0] + 1].startswith("before:") and lines[evaluating[1] + 1].startswith("after:")
    run = tmp_path / "r"
    wrote = next(line for line in lines if line.startswith(f"wrote {run}/"))
    for name in ("metrics.jsonl", "samples.jsonl", "curves.png", "summary.json", "checkpoint.pt", "policy.pt"):
        assert name in wrote and (run / name).exists()
    assert "wandb/" not in wrote, "--wandb disabled: no wandb folder to list"
    assert f"next: python -m workbook evaluate {run}" in lines


def test_a_resumed_run_says_where_it_resumes(tiny, tmp_path, monkeypatch, capsys):
    assert tiny_main(tiny, monkeypatch, tmp_path) == 0
    capsys.readouterr()
    model, tok = tiny
    assert main(["--resume", str(tmp_path / "r"), "--iterations", "3", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert f"resuming {tmp_path / 'r'} at iteration 2 of 3" in out


def interrupt_evaluation(monkeypatch, which: int):
    """SIGINT during the ``which``-th evaluation (1: before training, 2: after), as Ctrl-C would."""
    import signal

    calls = []
    original = reasoning.ReasoningTask.evaluate

    def evaluate(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == which:
            os.kill(os.getpid(), signal.SIGINT)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(reasoning.ReasoningTask, "evaluate", evaluate)


def test_ctrl_c_during_the_final_evaluation_stops_it_and_trains_no_more(tiny, tmp_path, monkeypatch, capsys):
    interrupt_evaluation(monkeypatch, 2)
    assert tiny_main(tiny, monkeypatch, tmp_path) == 130
    out = capsys.readouterr().out
    run = tmp_path / "r"
    assert "interrupted during the final evaluation" in out and f"python -m workbook evaluate {run}" in out
    assert len(rows(run / "metrics.jsonl")) == 2, "no iteration after the interruption"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["after"] is None and summary["iterations"] == 2
    assert (run / "policy.pt").exists() and (run / "checkpoint.pt").exists(), "the trained policy is saved"
    from workbook.checkpoints import load_run

    assert load_run(run, "--resume", ("reason",))["iteration"] == 2


def test_ctrl_c_during_the_first_evaluation_stops_before_any_training(tiny, tmp_path, monkeypatch, capsys):
    interrupt_evaluation(monkeypatch, 1)
    assert tiny_main(tiny, monkeypatch, tmp_path) == 130
    captured = capsys.readouterr()
    assert "stopping after this iteration" not in captured.err
    assert not (tmp_path / "r").exists(), "nothing was trained: no run folder"
