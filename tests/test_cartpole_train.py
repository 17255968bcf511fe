"""Smoke test of the Part 2 training command (the script, with the reference solutions; not graded)."""

from __future__ import annotations

import importlib.util
import json

import torch

from workbook.cartpole import train


def test_training_command_writes_its_outputs(tmp_path, capsys):
    # --video needs the video extra; without it the command refuses before training (tests/test_options.py).
    video = ["--video"] if all(importlib.util.find_spec(m) for m in ("moviepy", "pygame")) else []
    code = train.main(["--impl", "solutions", "--total-timesteps", "2048", "--wandb", "disabled", *video,
                       "--runs-dir", str(tmp_path), "--run-name", "smoke", "--eval-episodes", "3", "--no-progress"])
    out = capsys.readouterr().out
    assert code in (0, 1), out  # 2048 steps rarely solve CartPole; the script must still finish
    run_dir = tmp_path / "smoke"
    assert (run_dir / "learning_curve.png").stat().st_size > 0
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 2 and {"losses/approx_kl", "losses/explained_variance", "sps"} <= set(json.loads(lines[-1]))
    checkpoint = torch.load(run_dir / "agent.pt")
    assert {"actor", "critic", "args", "eval_returns"} <= set(checkpoint) and len(checkpoint["eval_returns"]) == 3
    assert "greedy evaluation over 3 episodes" in out
