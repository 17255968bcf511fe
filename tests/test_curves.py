"""The curves the environment commands draw: several seeds as mean and spread, Part 4's σ in its panel."""

from __future__ import annotations

import matplotlib.image
import numpy as np
import pytest

from workbook.cartpole.curves import plot_learning_curve, plot_seeds, smoothed_at
from workbook.cartpole.train import seeds_plot_name

DPI = 120


def height_inches(path) -> float:
    return matplotlib.image.imread(path).shape[0] / DPI


def test_smoothing_uses_only_the_episodes_finished_by_each_step():
    episodes = [(10, 1.0), (10, 3.0), (20, 5.0), (30, 7.0)]
    got = smoothed_at(episodes, np.array([0, 10, 25, 30, 99]), window=2)
    np.testing.assert_allclose(got, [np.nan, 2.0, 4.0, 6.0, 6.0])
    assert np.isnan(smoothed_at([], np.array([5]))).all()


def test_sigma_gets_its_own_panel(tmp_path):
    episodes = [(100, 10.0), (200, 30.0)]
    plot_learning_curve(episodes, tmp_path / "plain.png", "t", 475)
    plot_learning_curve(episodes, tmp_path / "sigma.png", "t", 950, sigma=[(100, 1.0), (200, 0.8)])
    assert height_inches(tmp_path / "plain.png") == pytest.approx(4)
    assert height_inches(tmp_path / "sigma.png") == pytest.approx(5.5)


def test_several_seeds_on_one_figure(tmp_path):
    runs = {1: ([(100, 10.0), (200, 40.0)], []), 2: ([(150, 20.0)], [])}
    plot_seeds(runs, tmp_path / "seeds.png", "t", 475)
    assert height_inches(tmp_path / "seeds.png") == pytest.approx(4)
    plot_seeds({s: (e, [(100, 1.0), (200, 0.7)]) for s, (e, _) in runs.items()}, tmp_path / "sigma.png", "t", 950)
    assert height_inches(tmp_path / "sigma.png") == pytest.approx(5.5)
    plot_seeds({1: ([], []), 2: ([], [])}, tmp_path / "empty.png", "t", 475)  # no episode finished: still a figure


def test_seeds_figure_is_named_after_the_run_folders():
    assert seeds_plot_name(["cartpole-solutions-seed4-20260101-120000", "cartpole-solutions-seed5-20260101-120000"],
                           [4, 5]) == "cartpole-solutions-seeds-20260101-120000.png"
    assert seeds_plot_name(["mine-seed1", "mine-seed2"], [1, 2]) == "mine-seeds.png"


@pytest.mark.parametrize("command, extra, height", [
    ("cartpole", ["--set", "num_envs=4", "--set", "num_steps_per_rollout=64"], 4),
    ("continuous", ["--set", "num_envs=2", "--set", "num_steps_per_rollout=64", "--set", "num_minibatches=2"], 5.5),
])
def test_a_several_seed_run_writes_the_seeds_figure_and_never_overwrites_it(command, extra, height, tmp_path, capsys):
    from workbook.__main__ import main

    argv = [command, "--impl", "solutions", "--seeds", "3", "7", "--total-timesteps", "512", *extra, "--wandb",
            "disabled", "--no-progress", "--eval-episodes", "1", "--runs-dir", str(tmp_path), "--run-name", "s"]
    assert main(argv) in (0, 1)
    figure = tmp_path / "s-seeds.png"
    assert f"wrote {figure}" in capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s-seed3", "s-seed7", "s-seeds.png"]
    assert height_inches(figure) == pytest.approx(height)  # with σ below for Part 4
    (tmp_path / "s-seed3").rename(tmp_path / "elsewhere")  # the folders are free again, the figure is not
    (tmp_path / "s-seed7").rename(tmp_path / "elsewhere7")
    before = figure.read_bytes()
    assert main(argv) == 2
    assert "s-seeds.png already exists" in capsys.readouterr().err and figure.read_bytes() == before


def legend_texts(monkeypatch, draw) -> list[str]:
    import matplotlib.pyplot as plt

    kept = []
    monkeypatch.setattr(plt, "close", lambda fig=None: kept.append(fig))  # keep the figure to read its legend
    draw()
    return [t.get_text() for t in kept[-1].axes[0].get_legend().get_texts()]


def test_the_step_where_the_greedy_check_passed_is_marked(tmp_path, monkeypatch):
    # A run that stops when solved ends with sampled-action returns under the solved line: the
    # figure must show where the (greedy) check passed, per seed and for one run.
    runs = {1: ([(100, 10.0), (200, 40.0)], []), 2: ([(150, 20.0)], [])}
    texts = legend_texts(monkeypatch, lambda: plot_seeds(runs, tmp_path / "s.png", "t", 475, solved_at={1: 200, 2: None}))
    assert "greedy check passed (1 of 2 seeds)" in texts
    texts = legend_texts(monkeypatch, lambda: plot_seeds(runs, tmp_path / "s.png", "t", 475))
    assert not any("greedy check" in t for t in texts)
    texts = legend_texts(monkeypatch, lambda: plot_learning_curve(runs[1][0], tmp_path / "p.png", "t", 475, solved_at=200))
    assert "greedy check passed (step 200)" in texts


def test_the_smoothed_line_has_one_point_per_learning_phase_and_the_goal_says_how_it_is_measured(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    # Three learning phases; every episode of a rollout ends at that phase's step (as the commands record them).
    episodes = [(1024, r) for r in (0.0, 1.0, 2.0)] + [(2048, r) for r in (3.0, 4.0)] + [(3072, r) for r in (5.0, 6.0, 7.0)]
    kept = []
    monkeypatch.setattr(plt, "close", lambda fig=None: kept.append(fig))
    plot_learning_curve(episodes, tmp_path / "p.png", "t", 8.5, goal_label="goal 8.5 (5× random, sampled actions)")
    ax = kept[-1].axes[0]
    smooth = next(line for line in ax.get_lines() if line.get_label().startswith("mean of last"))
    x, y = smooth.get_data()
    assert list(x) == [1024, 2048, 3072], "one point per phase: no vertical run of points at one step"
    assert list(y) == pytest.approx([1.0, 2.0, 3.5]), "the mean of the (up to 20) episodes finished by each phase"
    texts = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "goal 8.5 (5× random, sampled actions)" in texts and not any("greedy" in t or "solved" in t for t in texts)
    plot_learning_curve(episodes, tmp_path / "c.png", "t", 475)
    assert "solved (475, greedy)" in [t.get_text() for t in kept[-1].axes[0].get_legend().get_texts()], "CartPole's"
