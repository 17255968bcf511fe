"""The Part 8 training command and benchmark (these check the workbook, not your code).

``python -m workbook atari`` on bad settings: one line, exit status 2, no run folder; a tiny run
on the real ALE writes its run folder; a missing ale-py is one line, never a download.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest
import torch

from workbook.__main__ import main as workbook_main
from workbook.atari import check_atari_env

ROOT = Path(__file__).resolve().parent.parent
ONE_LINE_ERROR = re.compile(r"error: [^\n]+\n")

BAD = [
    (["--env", "CartPole-v1"], "--env", "not an Atari game"),
    (["--env", "ALE/NoSuchGame-v5"], "--env", "not a gymnasium environment"),
    (["--set", "frame_stack=0"], "--set", "frame_stack must be a positive integer"),
    (["--set", "num_minibatches=3"], "num_minibatches", "does not divide"),
    (["--set", "episodic_life=maybe"], "episodic_life", "expected bool"),
    (["--device", "tpu9"], "--device", "expected cpu or cuda"),
]


@pytest.mark.parametrize("argv, field, what", BAD, ids=[" ".join(a) for a, _, _ in BAD])
def test_bad_setting_is_one_line_and_writes_nothing(argv, field, what, tmp_path, capsys):
    runs = tmp_path / "runs"
    assert workbook_main(["atari", "--impl", "solutions", *argv, "--runs-dir", str(runs)]) == 2
    err = capsys.readouterr().err
    assert ONE_LINE_ERROR.fullmatch(err), err
    assert err.startswith(f"error: {field}: ") and what in err, err
    assert not runs.exists()


def test_missing_ale_py_is_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "ale_py", None)  # import ale_py now raises ImportError
    problem = check_atari_env("BreakoutNoFrameskip-v4")
    assert problem is not None and "\n" not in problem and "pip install 'ale-py" in problem


@pytest.mark.slow
def test_a_tiny_run_writes_its_run_folder(tmp_path, capsys):
    status = workbook_main(["atari", "--impl", "solutions", "--set", "num_envs=2", "--set", "num_steps_per_rollout=8",
                            "--set", "num_minibatches=2", "--total-timesteps", "32", "--eval-episodes", "1",
                            "--runs-dir", str(tmp_path), "--run-name", "tiny", "--wandb", "disabled", "--no-progress"])
    out = capsys.readouterr().out
    assert status == 1, out  # the goal (8.5 at Breakout) not reached after 32 steps: exit status 1, as documented
    run = tmp_path / "tiny"
    assert {"metrics.jsonl", "learning_curve.png", "agent.pt"} <= {p.name for p in run.iterdir()}
    assert "sampled-action evaluation over 1 episodes" in out and "goal not reached after 32 steps" in out
    assert "greedy" not in out and "solved" not in out.lower(), "Atari is evaluated with sampled actions, against a goal"
    assert f"next: python -m workbook evaluate {run}" in out
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["global_step"] for r in records] == [16, 32]
    saved = torch.load(run / "agent.pt", weights_only=False)
    from solutions.part8_atari import NatureCNN

    NatureCNN(4, saved["args"]["frame_stack"]).load_state_dict(saved["network"])


def test_benchmark_rejects_bad_options(capsys):
    spec = importlib.util.spec_from_file_location("atari_benchmark", ROOT / "benchmarks" / "atari.py")
    benchmark = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(benchmark)
    for argv, field in ((["--budget-s", "0"], "--budget-s"), (["--seeds", "1", "1"], "--seeds"),
                        (["--set", "frame_stack=2"], "--set"), (["--env", "Pong"], "--env")):
        assert benchmark.main(argv) == 2
        err = capsys.readouterr().err
        assert ONE_LINE_ERROR.fullmatch(err) and err.startswith(f"error: {field}: "), err


def atari_settings(*argv: str):
    from solutions.part8_atari import AtariPPOArgs
    from workbook.atari.train import ATARI
    from workbook.cartpole.train import check_settings, parse_args

    options = parse_args(list(argv), AtariPPOArgs, ATARI)
    return options, check_settings(options, AtariPPOArgs, ATARI)[0]


def test_the_default_is_the_15_minute_recipe_and_cleanrls_is_one_option_away(capsys):
    from workbook.atari.train import RECIPES

    options, args = atari_settings()
    assert (args.total_timesteps, args.learning_rate) == (165_000, 5e-4)
    assert options.full_budget, "no solve checks: every run trains its whole budget, as the benchmark's"
    _, args = atari_settings("--recipe", "cleanrl")
    assert (args.total_timesteps, args.learning_rate) == (10_000_000, 2.5e-4), "AtariPPOArgs' own (CleanRL's)"
    _, args = atari_settings("--total-timesteps", "2048", "--set", "clip_coef=0.2")
    assert (args.total_timesteps, args.learning_rate, args.clip_coef) == (2048, 5e-4, 0.2), "options over the recipe"
    _, args = atari_settings("--set", "learning_rate=1e-4", "--set", "total_timesteps=4096")
    assert (args.total_timesteps, args.learning_rate) == (4096, 1e-4)
    spec = importlib.util.spec_from_file_location("atari_benchmark", ROOT / "benchmarks" / "atari.py")
    benchmark = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(benchmark)
    assert benchmark.RECIPE | {"total_timesteps": benchmark.BUDGET_STEPS} == RECIPES["15min"], "one source"
    with pytest.raises(SystemExit):
        workbook_main(["atari", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "15min (default): total_timesteps=165000, learning_rate=0.0005" in text
    assert "cleanrl: AtariPPOArgs' defaults (CleanRL's ppo_atari.py: total_timesteps=10000000, learning_rate=2.5e-4)" in text
    assert "--full-budget" not in text and "greedy" not in text


def test_atari_labels_say_goal_and_sampled_actions():
    from workbook.atari.train import ATARI

    assert ATARI.goal_label(8.5) == "goal 8.5 (5× random, sampled actions)"
    assert ATARI.goal_label(0.0) == "goal 0 (sampled actions)"  # Pong: as many points won as lost
    assert ATARI.goal_words == ("goal reached", "goal not reached") and "greedy" not in ATARI.video_help
