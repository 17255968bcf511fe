"""``python -m workbook goodhart`` (Part 11's measurement) end to end on a tiny configuration: what it writes,
``evaluate``, Ctrl-C and ``--resume``, bad options, a stub of the learner's."""

from __future__ import annotations

import json
import math
import re
import runpy
from pathlib import Path

import pytest
import torch

from workbook.__main__ import main as workbook_main

pytestmark = pytest.mark.usefixtures("no_curves")  # none of these tests looks at a run's curves.png

TINY = ["--proxy-pairs", "4,8", "--proxy-min-steps", "2", "--bank-samples", "40", "--heldout-pairs", "10",
        "--pool-prompts", "2", "--pool-size", "8", "--max-new-tokens", "12", "--ensemble", "2",
        "--rl-iterations", "3", "--rl-batch-size", "8", "--eval-samples", "2", "--wandb", "disabled", "--no-progress"]
ONE_LINE_ERROR = re.compile(r"error: [^\n]+: [^\n]+\n")


def tiny(runs, name="t", *extra):
    return ["goodhart", "--impl", "solutions", "--runs-dir", str(runs), "--run-name", name, *TINY, *extra]


def test_a_tiny_run_interrupted_then_resumed_writes_the_benchmarks_keys(tmp_path, capsys, monkeypatch):
    from workbook.goodhart import run

    trained, real_train = [], run.Stages.train

    def interrupted_proxies(self, *args, **kwargs):  # Ctrl-C while the second proxy trains
        trained.append(kwargs["seed"])
        if len(trained) == 2:
            raise KeyboardInterrupt
        return real_train(self, *args, **kwargs)

    monkeypatch.setattr(run.Stages, "train", interrupted_proxies)
    runs = tmp_path / "runs"
    folder = runs / "t"
    assert workbook_main(tiny(runs)) == 130
    assert f"--resume {folder}" in capsys.readouterr().out
    assert not (folder / "seed0" / "proxies.pt").exists() and (folder / "seed0" / "proxies.partial.pt").exists()
    monkeypatch.setattr(run.Stages, "train", real_train)

    calls = []
    real = run.Stages.rl

    def interrupted_second(self, *args, **kwargs):  # Ctrl-C in the second RL run, before it trains
        calls.append(args[2])
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(self, *args, **kwargs)

    monkeypatch.setattr(run.Stages, "rl", interrupted_second)
    monkeypatch.setattr(run.Stages, "train", lambda self, *a, **kw: trained.append(kw["seed"]) or real_train(self, *a, **kw))
    assert workbook_main(["goodhart", "--resume", str(folder), "--wandb", "disabled", "--no-progress"]) == 130
    assert len(trained) == 2 + 2, "the proxy trained before the stop was kept, the one it stopped and the third trained"
    assert trained[2] == trained[1], "the stopped proxy is trained again from its own seed"
    out = capsys.readouterr().out
    assert f"python -m workbook goodhart --resume {folder}" in out
    assert json.loads((folder / "summary.json").read_text())["status"] == "interrupted"
    kept = {p: p.stat().st_mtime_ns for p in (folder / "seed0").glob("*.*")}
    assert {p.name for p in kept} == {"bank.json", "proxies.pt", "bon.json"}
    assert (folder / "seed0" / "rl" / "pairs4" / "summary.json").exists()

    monkeypatch.setattr(run.Stages, "rl", real)
    import workbook.loop.run as loop

    starts, train = [], loop.train

    def recorded(args, *, model, **kwargs):  # the weights each RL run starts from
        starts.append(sum(float(p.detach().double().square().sum()) for p in model.parameters()))
        return train(args, model=model, **kwargs)

    monkeypatch.setattr(loop, "train", recorded)
    assert workbook_main(["goodhart", "--resume", str(folder), "--wandb", "disabled", "--no-progress"]) == 0
    assert len(starts) == 2 and starts[0] == starts[1], "every RL run starts from the base model, not the last run's policy"
    assert {p: p.stat().st_mtime_ns for p in kept} == kept, "the stages done were read back, not redone"
    res = json.loads((folder / "results.json").read_text())
    assert res["gold"] == "vader-words"
    assert {"pairs", "heldout_accuracy"} <= set(res["proxies"][0])
    assert {"proxy_pairs", "seed", "n", "kl", "proxy", "gold"} <= set(res["bon"][0])
    assert {"proxy_pairs", "seed", "step", "kl", "proxy", "gold", "ensemble"} <= set(res["rl"][0])
    assert {"method", "proxy_pairs", "alpha", "beta", "r2", "d_peak"} <= set(res["fits"][0])
    assert [r["n"] for r in res["bon"] if r["proxy_pairs"] == 4] == [1, 2, 4, 8]
    assert {r["ensemble"] for r in res["rl"]} == {None, "wco"}
    assert (folder / "goodhart.png").stat().st_size > 10_000
    import matplotlib.figure

    from workbook.goodhart.figure import draw

    import matplotlib.axes

    titles, suptitle, ylabel = [], matplotlib.figure.Figure.suptitle, matplotlib.axes.Axes.set_ylabel
    monkeypatch.setattr(matplotlib.figure.Figure, "suptitle", lambda fig, t, **kw: titles.append(t) or suptitle(fig, t, **kw))
    monkeypatch.setattr(matplotlib.axes.Axes, "set_ylabel", lambda ax, t, **kw: titles.append(t) or ylabel(ax, t, **kw))
    for share in (0.0, 0.25):  # a figure not of the design says so, and what its proxies were standardised on
        draw(res, tmp_path / f"near{share}.png", run.GoodhartArgs(bank_near_misses=share))
    design, option = titles[:len(titles) // 2], titles[len(titles) // 2:]
    assert not any("near-miss" in t for t in design) and "proxy score (std. on base samples)" in design, titles
    assert any("25% of the proxies' samples given a near-miss" in t for t in option), titles
    assert "proxy score (std. on its bank)" in option, titles
    capsys.readouterr()
    assert workbook_main(["evaluate", str(folder)]) == 0
    shown = capsys.readouterr().out
    assert "peak √KL" in shown and "gold: vader-words" in shown
    assert sum(" bon " in line or " rl " in line for line in shown.splitlines()) == 5, "one row per curve"
    # An RL run of it, evaluated on its own: its samples again, scored by the gold too; the reward it was trained on
    # was the proxy's, so its "reward" is not compared with VADER's (which said DIFFERENT every time).
    assert workbook_main(["evaluate", str(folder / "seed0" / "rl" / "pairs4")]) == 0
    said = capsys.readouterr().out
    assert "gold (vader-words) of these samples" in said and said.rstrip().endswith("— reproduced"), said
    written_before = dict(res, fits=[dict(f, seed="all") for f in res["fits"] if f["seed"] == "mean"])
    (folder / "results.json").write_text(json.dumps(written_before))  # a run from before the fits were of the mean
    assert workbook_main(["evaluate", str(folder)]) == 0
    assert capsys.readouterr().out == shown, "its fits are made again, of each curve's mean"

    # One round of refreshing the smallest proxy (benchmarks/goodhart_refresh.py) reads the finished run, writes elsewhere.
    refresh = runpy.run_path(str(Path(__file__).resolve().parent.parent / "benchmarks" / "goodhart_refresh.py"))["main"]
    before = {p: p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file()}
    assert refresh([str(folder), "--runs-dir", str(folder / "inside"), "--overwrite"]) == 2
    assert "must lie outside the measurement" in capsys.readouterr().err
    assert refresh([str(folder), "--runs-dir", str(tmp_path / "refresh"), "--new-pairs", "4", "--policy-samples", "6"]) == 0
    res = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert [s["seed"] for s in res["per_seed"]] == [0] and {"original", "refreshed"} <= set(res["mean"])
    assert res["per_seed"][0]["proxy"]["pairs"] == 4 + 4, "the smallest proxy's own pairs and the new ones"
    assert (tmp_path / "refresh" / "t" / "seed0" / "rl" / "refreshed" / "summary.json").exists()
    assert {p: p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file()} == before, "the measurement only read"


BAD = [
    (["--proxy-pairs", "8,4"], "--proxy-pairs", "ascending"),
    (["--proxy-pairs", "a,b"], "--proxy-pairs", "whole numbers"),
    (["--pool-size", "1"], "--pool-size", "≥ 2"),
    (["--rl-batch-size", "0"], "--rl-batch-size", "≥ 1"),
    (["--ensemble-method", "max"], "--ensemble-method", "invalid choice"),
    (["--gold", "gpt"], "--gold", "invalid choice"),
    (["--label-noise", "-1"], "--label-noise", "≥ 0"),
    (["--bank-near-misses", "1.5"], "--bank-near-misses", "in [0, 1], got 1.5"),
    (["--bank-near-misses", "-0.1"], "--bank-near-misses", "in [0, 1], got -0.1"),
    (["--seeds", "0", "0"], "--seeds", "repeated"),
    (["--max-new-tokens", "500"], "--max-new-tokens", "in [1, 100]"),
    (["--rl-algo", "dpo"], "--rl-algo", "invalid choice"),
    (["--rl-algo", "rloo", "--rl-group-size", "1"], "--rl-group-size", "≥ 2"),
    (["--rl-algo", "grpo", "--rl-group-size", "5"], "--rl-group-size", "5 does not divide --rl-batch-size = 64"),
    (["--rl-algo", "grpo", "--rl-group-size", "4", "--rl-batch-size", "6"], "--rl-group-size", "does not divide"),
    # 219 samples give 219·218/4 = 11,935 pairs, 220 give 12,045: the defaults' 12,000 need 220.
    (["--bank-samples", "219"], "--bank-samples", "at most 11935 distinct pairs; --proxy-pairs 1000,3000,10000 and "
                                                  "--ensemble 3 need 12000 (at least 220 samples)"),
]


@pytest.mark.parametrize("argv, field, what", BAD, ids=[" ".join(a) for a, _, _ in BAD])
def test_bad_options_are_one_line_and_write_nothing(argv, field, what, tmp_path, capsys):
    runs = tmp_path / "runs"
    assert workbook_main(["goodhart", "--runs-dir", str(runs), "--wandb", "disabled", *argv]) == 2
    out, err = capsys.readouterr()
    assert ONE_LINE_ERROR.fullmatch(err) and err.startswith(f"error: {field}: ") and what in err, err
    assert not runs.exists()


def test_resume_refuses_other_settings_and_non_runs(tmp_path, capsys):
    folder = tmp_path / "old"
    folder.mkdir()
    assert workbook_main(["goodhart", "--resume", str(folder)]) == 2
    assert "not a goodhart run folder" in capsys.readouterr().err
    (folder / "config.json").write_text(json.dumps({"command": "goodhart", "args": {}, "seeds": [0]}))
    assert workbook_main(["goodhart", "--resume", str(folder), "--pool-size", "8"]) == 2
    assert capsys.readouterr().err.startswith("error: --pool-size: a resumed run keeps its settings")


def edits(a: str, b: str) -> int:
    """Levenshtein distance."""
    row = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, y in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (x != y))
    return row[-1]


def test_misspell_makes_one_or_two_edits_and_keeps_two_letters():
    import random

    from workbook.goodhart.measure import misspell

    rng = random.Random(0)
    for word in ["excellent", "good", "fun", "ok"] * 250:
        wrong = misspell(word, rng)
        assert edits(word, wrong) <= 2 and len(wrong) >= 2 and re.fullmatch("[a-z]+", wrong), (word, wrong)
    seen = [misspell("excellent", random.Random(s)) for s in range(400)]
    assert sum(w != "excellent" for w in seen) > 350 and len(set(seen)) > 100, "edits of every kind, not one"
    assert any(len(w) == 8 for w in seen) and any(len(w) == 10 for w in seen) and any(len(w) == 9 != w for w in seen)


@pytest.mark.parametrize("share", [0.25, 0.6])
def test_near_misses_misspell_the_sentiment_word_of_that_share_of_the_bank(share):
    from workbook.goodhart.measure import WordsGold, near_misses

    gold = WordsGold()
    prompts = ["the film was", "i", "the plot", "to me, the acting"] * 100
    completions = [" excellent.", " watched it on a friday.", " was dull and slow", " was superb! a good film"] * 100
    texts = [p + c for p, c in zip(prompts, completions)]
    sentiment = gold.vader.lexicon.__contains__
    out, changed = near_misses(texts, prompts, share, seed=3, sentiment=sentiment)
    assert changed == sorted(changed) and len(set(changed)) == len(changed)
    assert round(400 * share) - 40 <= len(changed) <= round(400 * share), "that share, less the edits that change nothing"
    assert [j for j in range(400) if out[j] != texts[j]] == changed
    assert out[:] != texts and near_misses(texts, prompts, share, seed=3, sentiment=sentiment) == (out, changed)
    assert near_misses(texts, prompts, share, seed=4, sentiment=sentiment)[1] != changed, "the seed draws them"
    assert near_misses(texts, prompts, 0.0, seed=3, sentiment=sentiment) == (texts, [])
    for j in changed:
        assert out[j].startswith(prompts[j]), "the opener is never misspelled"
        before, after = texts[j][len(prompts[j]):].split(), out[j][len(prompts[j]):].split()
        which = [k for k, (b, a) in enumerate(zip(before, after)) if b != a]
        assert len(before) == len(after) and len(which) == 1, (texts[j], out[j])
        word = re.sub("[^a-z]", "", before[which[0]])
        if j % 4 == 1:  # no sentiment word: any word of three letters or more
            assert len(word) >= 3
        else:
            assert sentiment(word), (texts[j], out[j])
    hit = [j for j in changed if j % 4 == 0]
    assert hit and all(gold([out[j]]).item() < gold([texts[j]]).item() - 0.5 for j in hit), "a near-miss costs the gold"


def test_near_misses_change_the_nearest_whole_number_of_samples(monkeypatch):
    from workbook.goodhart import measure

    monkeypatch.setattr(measure, "misspell", lambda word, rng: word + "x")  # every edit changes its word
    texts = [f"the film was excellent number {k}." for k in range(100)]
    for share, n in [(0.29, 29), (0.5, 50), (0.07, 7), (1.0, 100)]:
        out, changed = measure.near_misses(texts, ["the film was"] * 100, share, seed=0,
                                           sentiment=lambda w: w == "excellent")
        assert len(changed) == n and all(out[j] == texts[j].replace("excellent", "excellentx") for j in changed), share


def test_the_rl_runs_take_the_rl_algo_and_its_group_size(tmp_path):
    """--rl-algo rloo|grpo: Part 5's critic-free method, as ``rlhf --algo`` runs it with the same options given (its
    loss per token), --rl-group-size samples a prompt; ppo: Part 3's, unchanged."""
    from workbook.goodhart.run import GoodhartArgs, rl_args

    def args(**kw):
        return rl_args(GoodhartArgs(**kw), 0, tmp_path, "rl", False)

    ppo, rloo = args(), args(rl_algo="rloo")
    assert (ppo.algo, rloo.algo, args(rl_algo="grpo").algo) == ("ppo", "rloo", "grpo")
    assert (rloo.group_size, args(rl_algo="rloo", rl_group_size=2).group_size) == (4, 2)
    assert rloo.loss_normalisation == "token" and ppo.loss_normalisation == type(ppo)().loss_normalisation
    for a in (ppo, rloo, args(rl_algo="grpo", rl_learning_rate=1e-4, rl_kl_coef=0.5, rl_ent_coef=0.0, rl_iterations=7)):
        assert (a.iterations, a.learning_rate, a.kl_coef, a.ent_coef) == (
            (7, 1e-4, 0.5, 0.0) if a.algo == "grpo" else (80, 2.5e-4, 0.0, 0.03)), "the command's settings, not the algorithm's defaults"


@pytest.mark.slow
def test_a_tiny_run_with_rloo_calls_what_its_stub_check_lists(tmp_path, lists_what_it_calls):
    """--rl-algo rloo end to end, traced: the learner's functions it calls are those ``learner_calls`` lists, so that
    the check before the run names every stub it would reach (PPO's update is traced in tests/test_learner_calls.py)."""
    from workbook.goodhart.run import learner_calls, parse_command

    runs = tmp_path / "runs"
    argv = tiny(runs, "r", "--rl-algo", "rloo", "--rl-group-size", "2", "--proxy-pairs", "4")
    a, _ = parse_command(argv[1:])
    assert lists_what_it_calls(lambda: workbook_main(argv), learner_calls(a)) == 0
    saved = json.loads((runs / "r" / "seed0" / "rl" / "pairs4" / "summary.json").read_text())
    assert (saved["algo"], saved["config"]["group_size"]) == ("rloo", 2)
    res = json.loads((runs / "r" / "results.json").read_text())
    assert res["rl_algo"] == "rloo" and {r["ensemble"] for r in res["rl"]} == {None, "wco"}


@pytest.mark.parametrize("algo, part, stub", [("ppo", "part11_goodhart", "best_of_n_kl"),
                                              ("ppo", "part3_rlhf", "compute_advantages"),
                                              ("rloo", "part5_beyond_ppo", "rloo_advantages")])
def test_a_stub_is_one_line_and_no_folder(algo, part, stub, tmp_path, capsys, filled, plant_stub):
    """Every stub the run would reach is named before anything is written — PPO's update too, not minutes into the
    run after the proxies and best-of-n — and only those of the --rl-algo chosen."""
    import importlib

    pytest.importorskip("exercises.part11_goodhart")
    plant_stub(importlib.import_module(f"exercises.{part}"), stub)
    runs = tmp_path / "runs"
    argv = ["goodhart", "--impl", "exercises", "--runs-dir", str(runs), *TINY, "--rl-algo", algo, "--rl-group-size", "2"]
    assert workbook_main(argv) == 2
    err = capsys.readouterr().err
    assert ONE_LINE_ERROR.fullmatch(err), err
    assert err.startswith(f"error: --impl: exercises: {stub} in exercises/{part}.py (Part {part[4:].split('_')[0]}) "
                          "is still a stub"), err
    assert not runs.exists()


def test_the_words_gold_counts_what_no_reader_knows_as_the_worst_review():
    from workbook.goodhart.measure import GOLDS, WordsGold, gold_scorer
    from workbook.lm.reward import VaderScorer

    gold, vader = WordsGold(), VaderScorer()
    known = ["the film is good.", "the acting was superb and the dia", "i watched it on a friday.", "", "!!"]
    assert gold(known).tolist() == vader(known).tolist(), "known words (and a word cut off at the end) cost nothing"
    assert gold.unknown_share("the film is perfectie.") == 0.25
    assert gold.unknown_share("the film is perfectie") == 0.25, "a last word that begins no known word is unknown"
    assert gold.unknown_share("grstan, grstan") == 1.0
    scores = gold(["the film is perfectie.", "the film is perfectie great.", "grstan, grstan", "tis great! the zzq"])
    assert scores[0].item() == pytest.approx(-0.25), "VADER's 0 for a near-miss becomes (1 − f)·0 − f"
    great = vader(["the film is perfectie great."]).item()
    assert scores[1].item() == pytest.approx(0.8 * great - 0.2)
    assert scores[2].item() == -1.0
    assert -1 <= scores[3].item() < vader(["tis great! the zzq"]).item()
    assert GOLDS == ("vader", "vader-words") and isinstance(gold_scorer("vader-words"), WordsGold)
    assert isinstance(gold_scorer("vader"), VaderScorer)
    with pytest.raises(ValueError, match="unknown gold"):
        gold_scorer("gpt")


def test_the_reference_fit_is_the_same_bits_every_call():
    """Same seed, same numbers: the measurement's fits (the reference's fit_gao) do not move in the last bit from one
    call to the next — MKL's default least-squares driver does, on some inputs, with the memory's alignment."""
    from solutions import part11_goodhart as part11

    g = torch.Generator().manual_seed(0)
    d = torch.rand(64, generator=g, dtype=torch.float64) * 5
    r = d * (0.3 - 0.1 * d) + 0.01 * torch.randn(64, generator=g, dtype=torch.float64)
    fits, keep = set(), []
    for i in range(200):
        keep.append(torch.empty(1 + 37 * i % 997))  # other allocations between the calls, as in a run
        fits.add(part11.fit_gao(d.clone(), r.clone(), "bon" if i % 2 else "rl")[:2] + (i % 2,))
    assert len(fits) == 2, sorted(fits)


def test_each_curve_is_fitted_on_its_mean_over_the_seeds_on_the_points_every_seed_has():
    """The fit drawn dashed is the fit of the solid curve drawn: the seeds' mean, point by point, cut to the shortest
    run. Three RL runs whose gold is Gao's form plus a per-seed offset that cancels in the mean: the mean curve's fit
    gives the form back exactly; each seed's own fit does not."""

    from solutions import part11_goodhart as part11
    from workbook.goodhart.fits import RL_BIN, fit_rows

    alpha, beta = 0.3, 0.2
    ds = [0.0, 0.5, 1.5, 2.5, 4.0, 6.0]
    rows = []
    for seed, offset in ((0, -0.1), (1, 0.0), (2, 0.1)):
        points = ds if seed != 2 else ds + [8.0]  # a longer run: its last point is not in the mean
        steps = [1] + [1 + i for i in range(1, RL_BIN * (len(points) - 1) + 1)]
        for step in steps:
            d = points[0 if step == 1 else (step - 2) // RL_BIN + 1]
            gold = d * (alpha - beta * math.log(d)) if d > 0 else 0.0
            rows.append({"proxy_pairs": 10, "seed": seed, "step": step, "kl": d * d, "proxy": d, "ensemble": None,
                         "gold": gold + (offset if d > 0 else 0.0), "base_gold": 0.0})
    fits = fit_rows(part11, [], rows)
    mean = [f for f in fits if f["seed"] == "mean"]
    assert len(mean) == 1 and len(fits) == 4
    assert mean[0]["alpha"] == pytest.approx(alpha, abs=1e-9) and mean[0]["beta"] == pytest.approx(beta, abs=1e-9)
    assert mean[0]["r2"] == pytest.approx(1.0, abs=1e-9)
    assert mean[0]["final_d"] == pytest.approx(6.0), "cut to the points every seed has"
    assert mean[0]["measured_peak_d"] == pytest.approx(1.5) and mean[0]["d_peak"] == pytest.approx(math.exp(0.5))
    assert all(f["r2"] < 0.999 for f in fits if f["seed"] in (0, 2))


@pytest.mark.parametrize("peak_d, holds", [(2.0, True), (0.0, False)])
def test_goal_1_asks_for_a_peak_after_the_base_policys_own_batch(peak_d, holds):
    """A gold whose best point is iteration 1 (the base policy's own batch, above the bank's mean by its noise) and
    only falls after it bought nothing: no rise, however high that first batch happened to score."""
    goals = runpy.run_path(str(Path(__file__).resolve().parent.parent / "benchmarks" / "goodhart.py"))["goals"]
    shape = {"alpha": 0.3, "beta": 0.1, "r2": 0.95, "d_peak": 2.0, "measured_peak_d": peak_d, "measured_peak_gold": 0.3,
             "final_gold": -0.3, "fall": 0.6, "proxy_at_peak": 1.0, "proxy_final": 3.0, "final_d": 8.0}
    fits = [{"method": m, "proxy_pairs": n, "ensemble": None, "seed": s, **shape}
            for m in ("bon", "rl") for n in (10, 30) for s in (0, "mean")]
    g = goals({"fits": fits, "rl": []}, [0], [10, 30], 1.0, [1.0])
    assert g["1_rl_gold_falls_smallest_proxy"]["holds"] is holds
    assert g["1_rl_gold_falls_each_proxy"]["holds"] == {"10": holds, "30": holds}
    falls = runpy.run_path(str(Path(__file__).resolve().parent.parent / "benchmarks" / "check_figures.py"))["_goodhart_falls"]
    g["1_rl_gold_falls_each_proxy"]["per_size"]["100"] = g["1_rl_gold_falls_each_proxy"]["per_size"]["30"]  # its 3 sizes
    assert falls(0.15, 0.4, 1)({"goals": g})[1] is holds, "make check-figures' claim asks the same"


def test_per_decade_is_the_within_seed_slope_on_log10_pairs():
    """The benchmark's size of goal 2's effect: a seed's own level does not count, only how its points move."""
    per_decade = runpy.run_path(str(Path(__file__).resolve().parent.parent / "benchmarks" / "goodhart.py"))["per_decade"]
    levels = {0: 2.0, 1: 3.5, 2: -1.0}  # far apart: a slope across seeds would mix them in
    points = [(s, n, level + 0.25 * math.log10(n)) for s, level in levels.items() for n in (100, 1000, 10000)]
    # Seed 1 without its 10,000-pair point (a fit without a peak): pooled over seeds, its high level would tilt the
    # slope; a seed with one point left is left out.
    uneven = [(s, n, None if (s, n) == (1, 10000) else y) for s, n, y in points]
    got = per_decade(uneven + [(3, 1000, 9.0), (4, 1000, None), (4, 3000, 5.0)])
    assert got["slope"] == pytest.approx(0.25, abs=1e-12) and got["se"] == pytest.approx(0.0, abs=1e-9)
    assert got["points"] == 8
    noisy = per_decade([(s, n, y + (0.1 if n == 1000 else 0.0)) for s, n, y in points])  # the middle one: no tilt
    assert noisy["slope"] == pytest.approx(0.25, abs=1e-12) and noisy["se"] > 0 and noisy["residual_sd"] > 0
    assert per_decade([(0, 1000, 1.0)])["slope"] is None


def test_the_benchmark_says_the_per_tenfold_effect_in_words():
    """Each method's line names the fitted and the measured peak's move and the gold's, with their errors; a method
    whose slopes are not all measured (no fitted peak, or an error that is NaN for too few seeds) gets none."""
    bench = runpy.run_path(str(Path(__file__).resolve().parent.parent / "benchmarks" / "goodhart.py"))
    per_tenfold, lines = bench["per_tenfold_data"], bench["tenfold_lines"]
    fits = [{"method": m, "seed": s, "proxy_pairs": n, "ensemble": None, "d_peak": 2.0 + 0.5 * math.log10(n / 1000) + 0.1 * s * (n == 3000),
             "measured_peak_d": 2.5 + 0.25 * math.log10(n / 1000) + 0.1 * s * (n == 3000),
             "measured_peak_gold": 0.3 + 0.1 * math.log10(n / 1000) + 0.01 * s * (n == 3000)}
            for m in ("rl", "bon") for s in (0, 1, 2) for n in (1000, 3000, 10000)]
    for f in fits:
        if f["method"] == "bon":
            f["d_peak"] = None  # best-of-n without a fitted peak: its slope is not measured
    said = lines(per_tenfold(fits))
    assert len(said) == 1 and "(RL)" in said[0], said
    rl = per_tenfold(fits)["rl"]  # per_decade's numbers themselves: test_per_decade_is_the_within_seed_slope_on_log10_pairs
    assert [round(rl[k]["slope"], 2) for k in ("d_peak", "measured_peak_d", "measured_peak_gold")] == [0.5, 0.25, 0.1]
    for words, k in (("fitted peak", "d_peak"), ("measured peak", "measured_peak_d"), ("gold at the peak", "measured_peak_gold")):
        assert f"{words} {rl[k]['slope']:+.2f} ± {rl[k]['se']:.2f}" in said[0], said
    assert f"one seed's scatter {rl['d_peak']['residual_sd']:.2f}" in said[0], said
    two = [f for f in fits if f["seed"] == 0 and f["method"] == "rl" and f["proxy_pairs"] != 10000]
    assert lines(per_tenfold(two)) == [], "one seed of two sizes: no residual, no error, no line"


def _measurement(root: Path, peaks: dict) -> Path:
    """A finished measurement of synthetic runs: ``peaks[(method, seed)]`` is that seed's peak √KL per proxy size (10, 30,
    100 pairs), each curve Gao's own form through it; an ensemble run whose peak would break any order is beside them."""
    sizes = (10, 30, 100)
    for seed in sorted({s for _, s in peaks}):
        bon, rl = [], []
        for size, p_bon, p_rl in zip(sizes, peaks[("bon", seed)], peaks[("rl", seed)]):
            for n in (2 ** i for i in range(11)):
                d = math.sqrt(math.log(n) - (n - 1) / n)
                bon.append({"proxy_pairs": size, "seed": seed, "n": n, "kl": d * d, "proxy": d, "gold": 0.1 + d * (0.2 * p_bon - 0.1 * d),
                            "base_gold": 0.1})
            for ensemble, p in ((None, p_rl), ("wco", 5.0) if size == 10 else (None, None)):
                if p is None:
                    continue
                for step in range(1, 42):
                    d = 0.1 * (step - 1)
                    gold = 0.1 + (d * 0.1 * (1 + math.log(p) - math.log(d)) if d > 0 else 0.0)
                    rl.append({"proxy_pairs": size, "seed": seed, "step": step, "kl": d * d, "proxy": d, "gold": gold,
                               "base_gold": 0.1, "ensemble": ensemble})
        run = root / f"seed{seed}"
        run.mkdir(parents=True)
        (run / "config.json").write_text("{}")
        (run / "results.json").write_text(json.dumps({"bon": bon, "rl": rl}))
    return root


def test_the_seeds_probe_counts_the_draws_whose_peaks_are_in_order(tmp_path, capsys):
    """benchmarks/goodhart_seeds.py: a bootstrap over a measurement's seeds of how often the mean curves' fitted peaks
    come out in order of data; the ensemble's run is not one of the sizes; bad options are one line."""
    probe = runpy.run_path(str(Path(__file__).resolve().parent.parent / "benchmarks" / "goodhart_seeds.py"))
    from workbook.goodhart.fits import peaks_in_order  # the benchmark's goal 2 asks the same

    assert peaks_in_order([1.0, 1.5, 2.0]) and not peaks_in_order([1.0, 1.0, 2.0]) and not peaks_in_order([2.0, 1.5, 3.0])
    # A fit that never turns down: its peak is beyond every other, so in order as the largest proxy's only.
    assert peaks_in_order([1.0, 1.5, None]) and not peaks_in_order([1.0, None, 2.0]) and not peaks_in_order([None, 1.0, 2.0])

    def bootstrap(root, *extra):
        assert probe["main"]([str(root), *extra]) == 0
        return json.loads(capsys.readouterr().out.strip().splitlines()[-1])

    up, down = (1.5, 2.0, 2.5), (2.5, 2.0, 1.5)
    moves = _measurement(tmp_path / "moves", {(m, s): tuple(p + 0.05 * s for p in up) for m in ("rl", "bon") for s in range(4)})
    got = bootstrap(moves, "--seed-counts", "1", "3", "--draws", "7")
    assert got["seeds"] == [0, 1, 2, 3] and got["proxy_pairs"] == [10, 30, 100] and got["draws"] == 7
    assert [row["seeds"] for row in got["bootstrap"]] == [1, 3]
    assert all(row["rl_in_order"] == row["bon_in_order"] == row["both_in_order"] == 1.0 for row in got["bootstrap"])
    assert bootstrap(moves, "--seed-counts", "1", "3", "--draws", "7") == got, "the draws are fixed"

    mixed = _measurement(tmp_path / "mixed", {**{("rl", s): up for s in range(4)}, **{("bon", s): down for s in range(4)}})
    (row,) = bootstrap(mixed, "--seed-counts", "2", "--draws", "3")["bootstrap"]
    assert (row["rl_in_order"], row["bon_in_order"], row["both_in_order"]) == (1.0, 0.0, 0.0)

    # Half the seeds one way, half the other, far apart: one seed a draw comes out in order about half the time, so the
    # draws do pick different seeds; and the mean curve of a draw's seeds is what is fitted (the reversed ones so far off
    # that a draw of 8 is out of order unless most of its seeds are the first two: a fit of one drawn seed alone would
    # be in order about half the time here too).
    split = _measurement(tmp_path / "split", {(m, s): (up if s < 2 else (4.0, 2.0, 1.0)) for m in ("rl", "bon") for s in range(4)})
    one, eight = bootstrap(split, "--seed-counts", "1", "8", "--draws", "40")["bootstrap"]
    assert 0.25 < one["rl_in_order"] < 0.75 and one["rl_in_order"] == one["bon_in_order"]
    assert eight["rl_in_order"] < 0.25 and eight["bon_in_order"] < 0.25

    # With replacement, a seed drawn twice counts twice: of two seeds, the mean curve is in order when seed 0 is at least
    # two of a draw's three (about half the draws), not only when it is all three (1 in 8, were repeats merged).
    two = _measurement(tmp_path / "two", {(m, s): (up if s == 0 else (2.7, 2.1, 1.6)) for m in ("rl", "bon") for s in range(2)})
    (row,) = bootstrap(two, "--seed-counts", "3", "--draws", "40")["bootstrap"]
    assert 0.3 < row["rl_in_order"] < 0.7 and row["bon_in_order"] == row["rl_in_order"], row

    for argv, field in ((["--draws", "0"], "--draws"), (["--seed-counts", "3", "0"], "--seed-counts")):
        assert probe["main"]([str(moves), *argv]) == 2
        assert capsys.readouterr().err.startswith(f"error: {field}: ")
    assert probe["main"]([str(tmp_path / "nothing")]) == 2
    assert capsys.readouterr().err.startswith("error: measurement: ")
