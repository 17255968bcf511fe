"""Smoke tests of the Part 4 training command (the script, with the reference solutions; not graded)."""

from __future__ import annotations

import json

import pytest
import torch

from workbook.continuous import train


def test_continuous_command_writes_its_outputs(tmp_path, capsys):
    code = train.main(["--env", "InvertedPendulum-v5", "--impl", "solutions", "--set", "total_timesteps=1024",
                       "--wandb", "disabled", "--runs-dir", str(tmp_path), "--run-name", "smoke",
                       "--eval-episodes", "2", "--no-progress"])
    out = capsys.readouterr().out
    assert code in (0, 1), out  # one phase does not balance the pendulum; the script must still finish
    run_dir = tmp_path / "smoke"
    assert (run_dir / "learning_curve.png").stat().st_size > 0
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 1 and {"losses/approx_kl", "losses/std", "sps"} <= set(json.loads(lines[0]))
    checkpoint = torch.load(run_dir / "agent.pt")
    assert {"actor", "critic", "obs_normalizer", "reward_scaler", "args", "eval_returns"} <= set(checkpoint)
    # 8 reset observations + 1024 steps (+ the prior's 1e-4): the evaluation did not touch the statistics.
    assert checkpoint["obs_normalizer"]["rms"]["count"] == pytest.approx(8 + 1024 + 1e-4)
    assert checkpoint["args"]["num_envs"] == 8  # the InvertedPendulum preset
    assert "greedy evaluation over 2 episodes" in out


@pytest.mark.parametrize("argv,message", [
    (["--env", "CartPole-v1"], "error: --env: CartPole-v1 has a Discrete action space; this agent needs a 1-D Box"),
    (["--env", "NoSuchEnv-v0"], "error: --env: 'NoSuchEnv-v0' is not a gymnasium environment"),
    (["--set", "obs_clip=0"], "error: --set: obs_clip must be positive"),
])
def test_bad_settings_give_one_line_and_write_nothing(tmp_path, capsys, argv, message):
    code = train.main(argv + ["--impl", "solutions", "--runs-dir", str(tmp_path / "runs"), "--wandb", "disabled"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith(message) and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "runs").exists()
