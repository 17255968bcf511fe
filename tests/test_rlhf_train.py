"""Smoke tests of Part 3's given code (workbook/rlhf): the training command and the reward model.

Not graded: they run the reference solutions on a ~7k-parameter model pretrained for a second.
"""

from __future__ import annotations

import json

import pytest
import torch

from workbook.lm.pretrain import TINY_ARGS, pretrain
from workbook.rlhf.reward_model import RewardModelArgs, RewardModelScorer, train_reward_model
from workbook.loop.rlhf import Args, main, train


@pytest.fixture(scope="module")
def tiny():
    model, tok, _ = pretrain(TINY_ARGS, progress=False)
    return model, tok


@pytest.mark.slow
def test_training_command_writes_its_outputs(tiny, tmp_path):
    model, tok = tiny
    args = Args(impl="solutions", iterations=2, batch_size=8, mini_batch_size=4, ppo_epochs=1, eval_samples=8, max_new_tokens=30,
                sample_every=1, wandb="disabled", runs_dir=str(tmp_path), run_name="smoke", quiet=True)
    summary = train(args, model=model, tok=tok)
    out = tmp_path / "smoke"
    for name in ("metrics.jsonl", "samples.jsonl", "curves.png", "summary.json", "policy.pt"):
        assert (out / name).exists(), f"{name} was not written"
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and {"objective/kl", "objective/kl_coef", "env/reward_mean", "ppo/loss/policy"} <= set(rows[0])
    assert summary["before"]["kl"] == pytest.approx(0.0, abs=1e-5), "before training the policy *is* the reference"
    assert 0.0 <= summary["after"]["distinct2"] <= 1.0


def test_kl_coef_zero_turns_the_leash_off(tiny):
    from solutions import part3_rlhf
    from workbook.loop.algorithms import ppo_config

    config = ppo_config(part3_rlhf, Args(impl="solutions", kl_coef=0.0))
    assert config.init_kl_coef == 0.0 and not config.adap_kl_ctrl


def test_reward_model_trains_and_scores(tiny):
    model, tok = tiny
    rm, stats = train_reward_model(RewardModelArgs(impl="solutions", n_pairs=64, n_heldout=32, steps=4, batch_size=8), model, tok,
                                   progress=False)
    assert 0.0 <= stats["heldout_accuracy"] <= 1.0 and stats["score_std"] > 0
    scores = RewardModelScorer(rm, tok, stats)(["the plot was great.", "the plot was dull."])
    assert scores.shape == (2,) and torch.isfinite(scores).all()


def test_rlhf_help_runs(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    assert "--kl-coef" in capsys.readouterr().out


def history(n: int, **extra) -> list[dict]:
    return [{"iteration": i + 1, "time/ppo_s": 0.9 * (i + 1), "env/reward_mean": 0.01 * i, "objective/kl": 0.05 * i,
             "objective/kl_coef": 0.05, "objective/entropy": 1.0, "env/distinct2": 0.5, "tokens/responses_len_mean": 30.0,
             **{k: v * (i + 1) for k, v in extra.items()}} for i in range(n)]


def panels_of(algo: str):
    from workbook.loop.algorithms import ALGORITHMS
    from workbook.loop.task import ReviewTask

    return ReviewTask.panels + ALGORITHMS[algo].panels


def test_curves_are_a_labelled_grid_against_the_iteration(tmp_path):
    from matplotlib.image import imread

    from workbook.loop.curves import save_curves

    fig = save_curves(history(20), tmp_path / "curves.png", "t", panels_of("ppo"), x_label="PPO iteration", kl_target=4.0,
                      reference_reward=0.03)
    height, width = imread(tmp_path / "curves.png").shape[:2]
    assert width / height < 2.5, "a grid, not a strip"
    assert len(fig.axes) == 6 and all(ax.get_ylabel() for ax in fig.axes)
    assert {ax.get_xlabel() for ax in fig.axes if ax.get_xlabel()} == {"PPO iteration"}
    assert max(fig.axes[0].lines[0].get_xdata()) == 20, "x is the iteration, not wall time"
    baselines = {ax.get_ylabel(): [tuple(line.get_ydata()) for line in ax.lines if len(set(line.get_ydata())) == 1]
                 for ax in fig.axes}
    assert (0.03, 0.03) in baselines["reward (mean score of the batch)"], "the reference model's reward as a baseline"
    assert (4.0, 4.0) in baselines["KL to reference (nats / response)"], "the KL target on the KL panel"


@pytest.mark.parametrize("algo", ["grpo", "rloo", "dpo"])
def test_each_algorithm_draws_its_own_panels(algo, tmp_path):
    from workbook.loop.algorithms import ALGORITHMS
    from workbook.loop.curves import save_curves

    extra = {"dpo": {"dpo/loss": 0.6, "dpo/rewards/accuracies": 0.1, "dpo/rewards/margins": 0.2}}.get(
        algo, {f"{algo}/loss/policy": 0.1, f"{algo}/policy/clipfrac": 0.01})
    spec = ALGORITHMS[algo]
    fig = save_curves(history(12, **extra), tmp_path / "curves.png", "t", panels_of(algo), x_label=spec.x_label,
                      kl_target=spec.kl_target(Args(algo=algo)), reference_reward=0.0)
    labels = {ax.get_ylabel() for ax in fig.axes}
    assert "β (KL coefficient)" not in labels, "a fixed β is no curve"
    assert not any("KL target" in text.get_text() for ax in fig.axes if ax.get_legend() for text in ax.get_legend().get_texts())
    assert {ax.get_xlabel() for ax in fig.axes if ax.get_xlabel()} == {spec.x_label} and "PPO" not in spec.x_label
    if algo == "dpo":
        assert {"DPO loss", "preference accuracy (batch)"} <= labels
    else:
        assert {"policy loss", "clipped fraction"} <= labels


def test_a_one_iteration_run_draws_no_empty_panel(tmp_path):
    from workbook.loop.curves import save_curves

    fig = save_curves(history(1), tmp_path / "curves.png", "t", panels_of("grpo"))
    assert len(fig.axes) == 5, "panels whose stat was never logged (loss, clipped fraction) are left out"
    for ax in fig.axes:
        drawn = [line for line in ax.lines if len(line.get_xdata())]
        assert drawn and drawn[0].get_marker() not in (None, "None", ""), "a single point is drawn as a marker"


def test_a_fixed_beta_gets_no_panel():
    from workbook.loop.task import ReviewTask
    from workbook.loop.rlhf import parse_args
    from workbook.loop.run import curve_panels

    def has_beta(argv):
        return "objective/kl_coef" in dict(curve_panels(parse_args(argv), ReviewTask))

    assert has_beta([]) and not has_beta(["--no-adaptive-kl"]) and not has_beta(["--kl-coef", "0"])
    assert not any(has_beta(["--algo", algo]) for algo in ("grpo", "rloo", "dpo"))


def test_the_title_names_the_settings_actually_used():
    from workbook.loop.rlhf import curves_title, parse_args

    assert "β=0.1" in curves_title(parse_args(["--algo", "dpo"]), "r") and "β₀" not in curves_title(parse_args(["--algo", "dpo"]), "r")
    assert "β=0.3" in curves_title(parse_args(["--algo", "grpo"]), "r")
    assert "β=0.2" in curves_title(parse_args(["--algo", "dpo", "--dpo-beta", "0.2"]), "r")
    assert "β₀=0.05" in curves_title(parse_args([]), "r") and "KL 4.5" in curves_title(parse_args([]), "r")
    assert "fixed" in curves_title(parse_args(["--no-adaptive-kl"]), "r")


def test_several_seeds_give_a_mean_and_spread_plot(tmp_path):
    from workbook.loop.curves import save_seed_curves

    runs = {0: history(5), 1: [h | {"env/reward_mean": h["env/reward_mean"] + 1.0} for h in history(5)], 2: history(4)}
    fig = save_seed_curves(runs, tmp_path / "seeds.png", "t", panels_of("ppo"), x_label="PPO iteration")
    reward = fig.axes[0]
    mean = next(line for line in reward.lines if line.get_label() == "mean")
    assert list(mean.get_xdata()) == [1, 2, 3, 4], "only the iterations every seed reached"
    assert mean.get_ydata()[0] == pytest.approx(1 / 3)
    band = reward.collections[0].get_paths()[0].vertices[:, 1]
    assert band.min() == pytest.approx(0.0) and band.max() == pytest.approx(1.03)
    assert (tmp_path / "seeds.png").exists()
