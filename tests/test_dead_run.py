"""A run that cannot learn says so (issue 28, item 13): ``workbook/loop/health.py`` and the loop's use of it.

Not graded. First the watcher on made-up streams of stats (each symptom reported after its
patience and not before, once, and a healthy stream never); then real runs of ``reason`` and
``rlhf`` with a setting that kills them (``--max-new-tokens 2``, a tiny ``--temperature``, a
huge ``--learning-rate``, ...), each asserting the one line, in the log, ``summary.json`` and on
the curves.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import re

import pytest

from workbook.loop.health import PATIENCE, SYMPTOMS, DeadRunWatch
from workbook.loop.reasoning import reason_args
from workbook.loop.rlhf import algo_args

# --- the watcher on made-up streams --------------------------------------------------------------

REASON = {  # a healthy reason-dapo iteration, as metrics.jsonl logs it (values of a real run)
    "env/finished_frac": 1.0, "env/accuracy": 0.6, "env/groups_with_signal": 0.7, "env/reward_mean": 0.64,
    "env/reward_std": 0.43, "objective/entropy": 0.11, "objective/kl": 1.3, "tokens/responses_len_mean": 42.3,
    "rlvr/policy/clipfrac_low": 0.004, "rlvr/policy/clipfrac_high": 0.003, "rlvr/loss/policy": -0.012,
    "rlvr/advantages_abs_mean": 0.5,
}
RLHF_PPO = {
    "env/finished_frac": 0.97, "env/reward_mean": 0.4, "env/reward_std": 0.5, "objective/entropy": 1.7,
    "objective/kl": 4.1, "tokens/responses_len_mean": 60.0, "ppo/policy/clipfrac": 0.12, "ppo/loss/policy": -0.03,
}
RLHF_GRPO = {
    "env/finished_frac": 0.95, "env/reward_mean": 0.3, "env/reward_std": 0.4, "objective/entropy": 1.6,
    "objective/kl": 2.2, "tokens/responses_len_mean": 55.0, "grpo/policy/clipfrac": 0.03, "grpo/loss/policy": 0.01,
    "grpo/advantages_abs_mean": 0.7,
}
DPO = {"env/finished_frac": 0.1, "env/reward_mean": 0.3, "env/reward_std": 0.0, "objective/entropy": 1.5,
       "objective/kl": 3.0, "tokens/responses_len_mean": 50.0, "dpo/loss": 0.6}

# symptom -> (algo, healthy row, the row's change that makes it hold)
SICK = {
    "truncated": ("dapo", REASON, {"env/finished_frac": 0.1}),
    "entropy": ("dapo", REASON, {"objective/entropy": 0.004}),  # under 5 % of the first iteration's 0.11
    "kl": ("dapo", REASON, {"objective/kl": 80.0}),
    "clipped": ("dapo", REASON, {"rlvr/policy/clipfrac_low": 0.3, "rlvr/policy/clipfrac_high": 0.3}),
    "no_signal": ("dapo", REASON, {"env/groups_with_signal": 0.0}),
    "zero_loss": ("dapo", REASON, {"rlvr/loss/policy": 0.0}),
}


def args_for(algo: str, **kw):
    """The reason command's options for its own algorithms, the rlhf command's for ppo, grpo, rloo and dpo."""
    return reason_args(algo, **kw) if algo in ("dapo", "gspo", "cispo", "dr_grpo") else algo_args(algo, **kw)


def stream(healthy: dict, sick: dict, pattern: str) -> list[dict]:
    """One row per character of ``pattern``: '.' healthy, 'x' with ``sick``'s changes; iterations from 1."""
    return [(healthy | (sick if c == "x" else {})) | {"iteration": i + 1} for i, c in enumerate(pattern)]


def feed(watch: DeadRunWatch, rows: list[dict]) -> list[tuple[int, str]]:
    return [(row["iteration"], line) for row in rows for line in watch.update(row)]


@pytest.mark.parametrize("algo,row", [("dapo", REASON), ("gspo", REASON), ("ppo", RLHF_PPO), ("grpo", RLHF_GRPO),
                                      ("rloo", {k.replace("grpo/", "rloo/"): v for k, v in RLHF_GRPO.items()}),
                                      ("dpo", DPO)])
def test_a_healthy_stream_is_never_reported(algo, row):
    watch = DeadRunWatch(args_for(algo))
    assert feed(watch, stream(row, {}, "." * 60)) == [] and watch.summary() == []


@pytest.mark.parametrize("name", list(SICK))
@pytest.mark.parametrize("patience", [PATIENCE, 5])
def test_each_symptom_is_reported_once_after_its_patience_and_not_before(name, patience):
    algo, row, sick = SICK[name]
    watch = DeadRunWatch(args_for(algo), patience=patience)
    pattern = "." * 4 + "x" * (patience - 1) + "." + "x" * (patience + 20) + "." * 3 + "x" * (patience + 2)
    said = feed(watch, stream(row, sick, pattern))
    onset = 4 + (patience - 1) + 1 + 1  # the second streak starts here (iterations from 1)
    assert len(said) == 1, f"{name}: reported {len(said)} times"
    (it, line), = said
    assert it == onset + patience - 1, "reported when the streak reached the patience, not before or after"
    assert line.startswith("warning: ") and f"(iterations {onset}–{it})" in line
    (record,) = watch.summary()
    assert record["symptom"] == name and record["line"] == line and record["iteration"] == it
    assert (record["first"], record["last"]) == (onset, onset + patience + 20 - 1), "the shaded span is its streak"


@pytest.mark.parametrize("name", list(SICK))
def test_a_broken_streak_starts_again(name):
    algo, row, sick = SICK[name]
    watch = DeadRunWatch(args_for(algo))
    assert feed(watch, stream(row, sick, (("." + "x" * (PATIENCE - 1)) * 10))) == []


@pytest.mark.parametrize("name,at,below,above,pattern", [
    ("truncated", "env/finished_frac", 0.1, 0.11, "xxx"),  # ≥ 90 % cut off: 1 - 0.1 holds, 1 - 0.11 does not
    ("entropy", "objective/entropy", 0.00099, 0.001, "xxx"),  # < 0.001 nats per token from the start
    ("entropy", "objective/entropy", 0.0054, 0.0056, ".xxx"),  # < 5 % of the first iteration's 0.11
    ("no_signal", "env/groups_with_signal", 0.05, 0.0625, "xxx"),
])
def test_the_thresholds_are_where_the_docstring_says(name, at, below, above, pattern):
    _, row, _ = SICK[name]
    for value, reported in ((below, True), (above, False)):
        watch = DeadRunWatch(args_for("dapo"))
        said = feed(watch, stream(row, {at: value}, pattern))
        assert bool(said) == reported, f"{name} at {at} = {value}"


def test_kl_and_clipped_thresholds_are_per_token_and_summed_over_both_clips():
    kl_at = {"objective/kl": 0.1 * 421, "tokens/responses_len_mean": 421.0}
    for kl, reported in ((1.1 * 42.3, True), (1.0 * 42.3, False)):  # per token: > 1 nat
        assert bool(feed(DeadRunWatch(args_for("dapo")), stream(REASON, {"objective/kl": kl}, "xxx"))) == reported
    assert not feed(DeadRunWatch(args_for("dapo")), stream(REASON, kl_at, "xxx"))
    for low, high, reported in ((0.3, 0.2, True), (0.3, 0.1, False), (0.0, 0.5, True)):
        sick = {"rlvr/policy/clipfrac_low": low, "rlvr/policy/clipfrac_high": high}
        assert bool(feed(DeadRunWatch(args_for("dapo")), stream(REASON, sick, "xxx"))) == reported
    for algo, row, key in (("ppo", RLHF_PPO, "ppo/policy/clipfrac"), ("grpo", RLHF_GRPO, "grpo/policy/clipfrac")):
        assert feed(DeadRunWatch(args_for(algo)), stream(row, {key: 0.6}, "xxx"))
        assert not feed(DeadRunWatch(args_for(algo)), stream(row, {key: 0.4}, "xxx"))


def test_no_spread_is_read_per_algorithm():
    # rlhf's groups: advantages all 0; PPO: every sample the same reward; exactly, not "small"
    assert feed(DeadRunWatch(args_for("grpo")), stream(RLHF_GRPO, {"grpo/advantages_abs_mean": 0.0}, "xxx"))
    assert not feed(DeadRunWatch(args_for("grpo")), stream(RLHF_GRPO, {"grpo/advantages_abs_mean": 1e-7}, "xxx"))
    assert feed(DeadRunWatch(args_for("ppo")), stream(RLHF_PPO, {"env/reward_std": 0.0}, "xxx"))
    assert not feed(DeadRunWatch(args_for("ppo")), stream(RLHF_PPO, {"env/reward_std": 1e-7}, "xxx"))
    # a NaN (the std of a one-sample batch) is no reading, not a symptom
    assert not feed(DeadRunWatch(args_for("ppo")), stream(RLHF_PPO, {"env/reward_std": math.nan}, "xxx"))


def test_a_solved_batch_is_not_a_dead_one():
    solved = {"env/accuracy": 0.95, "env/groups_with_signal": 0.0, "objective/entropy": 0.0005, "rlvr/loss/policy": 0.0}
    assert feed(DeadRunWatch(args_for("dapo")), stream(REASON, solved, "x" * 10)) == []
    unsolved = solved | {"env/accuracy": 0.85}
    said = feed(DeadRunWatch(args_for("dapo")), stream(REASON, unsolved, "x" * 10))
    assert [line.split(" (")[0] for _, line in said] == ["warning: entropy collapsed"], \
        "identical samples: the entropy is reported, the missing spread it causes is not"


def test_dpo_is_not_judged_on_samples_it_does_not_train_on():
    sick = {"env/finished_frac": 0.0, "env/reward_std": 0.0}
    assert feed(DeadRunWatch(args_for("dpo")), stream(DPO, sick, "x" * 10)) == []
    said = feed(DeadRunWatch(args_for("dpo")), stream(DPO, {"objective/kl": 100.0}, "xxx"))
    assert len(said) == 1 and "--dpo-beta (β, now 0.1)" in said[0][1] and "--kl-coef" not in said[0][1]


def test_a_consequence_is_not_reported_while_its_cause_is_and_is_once_the_cause_ends():
    both = {"env/finished_frac": 0.0, "env/groups_with_signal": 0.0, "rlvr/loss/policy": 0.0}
    only_flat = {"env/groups_with_signal": 0.0, "rlvr/loss/policy": 0.0}
    watch = DeadRunWatch(args_for("dapo"))
    rows = stream(REASON, both, "xxxxx") + [r | {"iteration": r["iteration"] + 5} for r in stream(REASON, only_flat, "xx")]
    said = feed(watch, rows)
    assert [(it, line.split(" (")[0]) for it, line in said] == [(3, "warning: completions cut off"),
                                                                (6, "warning: no reward spread")]
    assert watch.summary()[1]["first"] == 1, "the missing spread held from iteration 1"
    # a policy run away from its reference writes endless text: the KL line is the one that names the cause
    runaway = {"objective/kl": 200.0, "env/finished_frac": 0.0, "env/groups_with_signal": 0.0, "rlvr/loss/policy": 0.0,
               "rlvr/policy/clipfrac_low": 0.6}
    said = feed(DeadRunWatch(args_for("dapo")), stream(REASON, runaway, "xxxxxx"))
    assert [line.split(" (")[0] for _, line in said] == ["warning: KL exploding"]
    # a cause that was never reported explains nothing
    said = feed(DeadRunWatch(args_for("dapo")), stream(REASON, only_flat, "xxx"))
    assert [line.split(" (")[0] for _, line in said] == ["warning: no reward spread"]


def test_the_lines_name_the_fix_with_the_runs_own_values():
    a = args_for("dapo", max_new_tokens=7, temperature=0.3, learning_rate=0.05, kl_coef=0.0, ppo_epochs=3, group_size=8,
                 format_reward=0.2)
    expected = {"truncated": ["--max-new-tokens (now 7)", "--mask-truncated"],
                "entropy": ["--temperature (now 0.3)", "--learning-rate (now 0.05)"],
                "kl": ["--learning-rate (now 0.05)", "--kl-coef (β, now 0)"],
                "clipped": ["--learning-rate (now 0.05)", "--ppo-epochs (now 3)", "--cliprange (now 0.2)"],
                "no_signal": ["--temperature (now 0.3)", "--group-size (now 8)", "--format-reward (now 0.2)"],
                "zero_loss": ["every advantage is 0"]}
    for name, (_, row, sick) in SICK.items():
        (_, line), = feed(DeadRunWatch(a), stream(row, sick, ".xxx"))
        for part in expected[name]:
            assert part in line, f"{name}: {part!r} not in {line!r}"
    (_, line), = feed(DeadRunWatch(args_for("ppo")), stream(RLHF_PPO, {"env/reward_std": 0.0}, "xxx"))
    assert "every sample got the same reward" in line and "--group-size" not in line and "--format-reward" not in line
    (_, line), = feed(DeadRunWatch(args_for("dapo", mask_truncated=False)), stream(REASON, SICK["truncated"][2], "xxx"))
    assert "--mask-truncated" not in line


def command_options(command: str) -> str:
    import contextlib
    import io

    from workbook.loop import reasoning, rlhf

    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        (reasoning.main if command == "reason" else rlhf.main)(["--help"])
    return out.getvalue()


@pytest.mark.parametrize("command", ["reason", "rlhf"])
def test_every_option_a_line_names_is_an_option_of_the_command(command):
    known = set(re.findall(r"--[a-z][a-z-]*", command_options(command)))
    algos = ("dapo", "grpo", "ppo") if command == "reason" else ("ppo", "grpo", "rloo", "dpo")
    for algo in algos:
        a = reason_args(algo) if command == "reason" else algo_args(algo)
        a = dataclasses.replace(a, mask_truncated=True) if command == "reason" else a
        for symptom in SYMPTOMS:
            for value in (0.0, 0.5):
                named = set(re.findall(r"--[a-z][a-z-]*", symptom.line(value, a)))
                assert named <= known, f"{command} --algo {algo}, {symptom.name}: {named - known} not in --help"


def test_patience_must_be_positive():
    with pytest.raises(ValueError, match="patience"):
        DeadRunWatch(args_for("dapo"), patience=0)


# --- real runs with a setting that kills them ------------------------------------------------------


@pytest.fixture(scope="module")
def reasoner():
    from workbook.lm.pretrain import TINY_ARGS
    from workbook.reason import pretrain_reasoner

    tiny = dataclasses.replace(TINY_ARGS, n_reviews=2000, n_heldout=50, steps=100, block_size=80, d_model=32, n_layer=1,
                               n_head=2, lr=1e-2)
    model, tok, _ = pretrain_reasoner("addition", tiny, progress=False)
    return model, tok


@pytest.fixture(scope="module")
def review_gpt():
    from workbook.lm.pretrain import TINY_ARGS, pretrain

    model, tok, _ = pretrain(TINY_ARGS, progress=False)
    return model, tok


@pytest.fixture
def figures(monkeypatch):
    """The figures the loop draws (its curves.png), kept to read their notes."""
    from workbook.loop import run as loop

    drawn = []

    def keep(*args, **kw):
        drawn.append(real(*args, **kw))
        return drawn[-1]

    real = loop.save_curves
    monkeypatch.setattr(loop, "save_curves", keep)
    return drawn


def rows(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def dead_run(tmp_path, capsys, figures, train_one, args, model, tok) -> tuple[list[str], list[dict]]:
    """Train; (the warning lines printed, summary.json's warnings), after checking the three agree."""
    train_one(args, model=copy.deepcopy(model), tok=tok, progress=False)
    printed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("warning: ")]
    summary = json.loads((tmp_path / args.run_name / "summary.json").read_text())
    assert [w["line"] for w in summary["warnings"]] == printed, "the log and summary.json hold the same lines"
    notes = " ".join(t.get_text() for t in figures[-1].texts)
    for line in printed:
        assert " ".join(line.split()) in " ".join(notes.split()), "each line is written on curves.png"
    assert (tmp_path / args.run_name / "curves.png").exists()
    return printed, summary["warnings"]


def reason_run(tmp_path, algo: str, name: str, **kw):
    return reason_args(algo, **({"impl": "solutions", "iterations": PATIENCE, "batch_size": 8, "mini_batch_size": 4,
                                 "group_size": 4, "eval_samples": 4, "eval_k": 4, "max_new_tokens": 48, "sample_every": 1,
                                 "wandb": "disabled", "runs_dir": str(tmp_path), "run_name": name, "quiet": True} | kw))


def only(printed: list[str], title: str, *parts: str) -> None:
    assert len(printed) == 1, f"one line expected, got {printed}"
    assert printed[0].startswith(f"warning: {title} (iterations ")
    for part in parts:
        assert part in printed[0], f"{part!r} not in {printed[0]!r}"


def test_every_completion_cut_off_is_reported_with_max_new_tokens(reasoner, tmp_path, capsys, figures):
    from workbook.loop.reasoning import train_reason

    args = reason_run(tmp_path, "dapo", "short", max_new_tokens=2, overlong_cache=0)  # DAPO masks them all out, too
    printed, warnings = dead_run(tmp_path, capsys, figures, train_reason, args, *reasoner)
    only(printed, "completions cut off", "100% of completions", "--max-new-tokens (now 2)", "--mask-truncated")
    assert warnings[0]["first"] == 1 and warnings[0]["last"] == PATIENCE
    metrics = rows(tmp_path / "short" / "metrics.jsonl")
    assert all(m["rlvr/loss/policy"] == 0 and m["env/groups_with_signal"] == 0 for m in metrics), \
        "the spread and the loss are gone too; only the cause is reported"


def test_a_tiny_temperature_is_reported_as_no_spread_then_collapsed_entropy(reasoner, tmp_path, capsys, figures):
    from workbook.loop.reasoning import train_reason

    args = reason_run(tmp_path, "grpo", "cold", temperature=1e-3, iterations=PATIENCE + 1)
    printed, warnings = dead_run(tmp_path, capsys, figures, train_reason, args, *reasoner)
    # Every group's samples are identical from the first iteration; the entropy (of the tempered
    # distribution) falls under 0.001 nats per token from the second: each line names the temperature.
    assert [w["symptom"] for w in warnings] == ["no_signal", "entropy"]
    assert all("raise --temperature (now 0.001)" in line for line in printed)
    assert all(m["env/groups_with_signal"] == 0 for m in rows(tmp_path / "cold" / "metrics.jsonl"))


def test_no_reward_spread_is_reported_with_the_format_reward(reasoner, tmp_path, capsys, figures, monkeypatch):
    from workbook.loop import run as loop
    from workbook.loop.reasoning import train_reason

    # The tiny reasoner is (nearly) never right: without credit for a well-formed answer every reward is 0.
    args = reason_run(tmp_path, "grpo", "flat", format_reward=0.0)
    printed, _ = dead_run(tmp_path, capsys, figures, train_reason, args, *reasoner)
    only(printed, "no reward spread", "no group's rewards differ", "--temperature (now 1)", "--group-size (now 4)",
         "--format-reward (now 0)")
    # The watcher only reads: without it, the run's numbers are the same, bit for bit.
    silent = type("Silent", (), {"__init__": lambda self, a: None, "update": lambda self, s: [], "summary": lambda self: []})
    monkeypatch.setattr(loop, "DeadRunWatch", silent)
    train_reason(dataclasses.replace(args, run_name="unwatched"), model=copy.deepcopy(reasoner[0]), tok=reasoner[1],
                 progress=False)
    strip = lambda path: [{k: v for k, v in m.items() if not k.startswith("time/")} for m in rows(path)]  # noqa: E731
    assert strip(tmp_path / "unwatched" / "metrics.jsonl") == strip(tmp_path / "flat" / "metrics.jsonl")
    assert "warning: " not in capsys.readouterr().out


def test_a_huge_learning_rate_is_reported_as_exploding_kl(reasoner, tmp_path, capsys, figures):
    from workbook.loop.reasoning import train_reason

    args = reason_run(tmp_path, "grpo", "hot", learning_rate=0.05, ppo_epochs=2, iterations=PATIENCE + 1)
    printed, _ = dead_run(tmp_path, capsys, figures, train_reason, args, *reasoner)
    only(printed, "KL exploding", "--learning-rate (now 0.05)", "--kl-coef (β, now 0.04)")
    assert all(m["env/finished_frac"] == 0 for m in rows(tmp_path / "hot" / "metrics.jsonl")[1:]), \
        "its completions never end either: not reported again, the KL line names the cause"


def test_many_passes_at_a_high_learning_rate_are_reported_as_saturated_clipping(reasoner, tmp_path, capsys, figures):
    from workbook.loop.reasoning import train_reason

    # GSPO's clip range (3e-4 on a length-normalised sequence ratio) binds on ~8 % of sequences per side at its
    # defaults; four passes at 1e-3 move every later minibatch past it.
    args = reason_run(tmp_path, "gspo", "clipped", learning_rate=1e-3, ppo_epochs=4)
    printed, _ = dead_run(tmp_path, capsys, figures, train_reason, args, *reasoner)
    only(printed, "clip fraction saturated", "--learning-rate (now 0.001)", "--ppo-epochs (now 4)",
         "--cliprange (now 0.0003)")


def test_a_loss_that_masks_every_token_is_reported_as_exactly_zero(reasoner, tmp_path, capsys, figures, monkeypatch):
    import torch

    import solutions.part7_reasoning as sol7
    from workbook.loop.reasoning import train_reason

    def flags_inverted(responses, eos_id, mask_truncated=True):
        """A learner's completion_mask with the truncation test the wrong way round (== eos_id for "cut off")."""
        lengths = torch.tensor([len(r) for r in responses])
        mask = (torch.arange(int(lengths.max()))[None] < lengths[:, None]).float()
        truncated = torch.tensor([len(r) > 0 and int(r[-1]) == eos_id for r in responses])
        return (mask * (~truncated)[:, None] if mask_truncated else mask), truncated

    monkeypatch.setattr(sol7, "completion_mask", flags_inverted)
    args = reason_run(tmp_path, "dapo", "masked", dynamic_sampling=False, max_new_tokens=64, overlong_cache=0)
    printed, _ = dead_run(tmp_path, capsys, figures, train_reason, args, *reasoner)
    only(printed, "policy loss exactly 0", "check the loss and its mask")
    metrics = rows(tmp_path / "masked" / "metrics.jsonl")
    assert all(m["env/finished_frac"] == 1 for m in metrics) and metrics[0]["env/groups_with_signal"] > 0, \
        "every completion ended and the rewards differ: only the loss says something is wrong"


def test_the_rlhf_command_reports_too(review_gpt, tmp_path, capsys, figures):
    from workbook.loop.rlhf import train

    common = dict(impl="solutions", iterations=PATIENCE, batch_size=8, mini_batch_size=4, group_size=4, ppo_epochs=1,
                  eval_samples=4, max_new_tokens=30, sample_every=1, wandb="disabled", runs_dir=str(tmp_path), quiet=True)

    def run(algo, name, **kw):
        return dead_run(tmp_path, capsys, figures, lambda a, **k: train(a, **k), algo_args(algo, **(common | kw),
                        run_name=name), *review_gpt)[0]

    only(run("ppo", "short", max_new_tokens=2, eos_trick=True), "completions cut off", "--max-new-tokens (now 2)")
    only(run("rloo", "hot", learning_rate=0.05, iterations=PATIENCE + 1), "KL exploding", "--learning-rate (now 0.05)",
         "--kl-coef (β, now 0.05)")


def test_a_resumed_run_keeps_its_warnings_and_does_not_repeat_them(reasoner, tmp_path, capsys, figures):
    import torch

    from workbook.checkpoints import CHECKPOINT
    from workbook.loop.reasoning import train_reason

    args = reason_run(tmp_path, "dapo", "short", max_new_tokens=2, overlong_cache=0, iterations=PATIENCE + 1)
    full, _ = dead_run(tmp_path, capsys, figures, train_reason, dataclasses.replace(args, run_name="full"), *reasoner)
    train_reason(dataclasses.replace(args, iterations=PATIENCE), model=copy.deepcopy(reasoner[0]), tok=reasoner[1],
                 progress=False)
    assert capsys.readouterr().out.count("warning: ") == 1
    saved = torch.load(tmp_path / "short" / CHECKPOINT, weights_only=False)
    resumed = dataclasses.replace(args, resume=str(tmp_path / "short"))
    train_reason(resumed, model=copy.deepcopy(reasoner[0]), tok=reasoner[1], progress=False, resume=saved)
    assert "warning: " not in capsys.readouterr().out, "reported before the interruption: not again"
    a, b = (json.loads((tmp_path / name / "summary.json").read_text())["warnings"] for name in ("full", "short"))
    assert a == b and a[0]["last"] == PATIENCE + 1, "the same record as the uninterrupted run's, its span continued"


def test_part0_explains_every_symptom():
    from pathlib import Path

    text = (Path(__file__).resolve().parent.parent / "part0_theory.md").read_text(encoding="utf-8")
    section = text[text.index("### Debugging a dead run"):]
    section = section[:section.index("\n---")]
    for symptom in SYMPTOMS:
        assert f"\n| {symptom.title} | " in section, f"Part 0's table has no row for {symptom.title!r}"


def test_completions_cut_off_explain_a_collapsed_entropy_and_are_named_first():
    """A run cut to 4 tokens that copy the prompt: every completion truncated and their entropy ~0 from iteration 1."""
    cut = {"env/finished_frac": 0.0, "objective/entropy": 0.0002, "tokens/responses_len_mean": 4.0}
    said = feed(DeadRunWatch(args_for("dapo", max_new_tokens=4)), stream(REASON, cut, "xxxxx"))
    assert [line.split(" (")[0] for _, line in said] == ["warning: completions cut off"], said
    assert "--max-new-tokens (now 4)" in said[0][1]
    # Once the limit is raised and completions end, a collapse that remains is reported.
    watch = DeadRunWatch(args_for("dapo", max_new_tokens=4))
    rows = stream(REASON, cut, "xxx") + [r | {"iteration": r["iteration"] + 3}
                                         for r in stream(REASON, {"objective/entropy": 0.0002}, "xxx")]
    assert [(it, line.split(" (")[0]) for it, line in feed(watch, rows)] == [(3, "warning: completions cut off"),
                                                                            (4, "warning: entropy collapsed")]
    # An entropy that collapsed first is still reported first; the cut-off completions that follow are too.
    rows = stream(REASON, {"objective/entropy": 0.0002}, "xxx") + [
        r | {"iteration": r["iteration"] + 3} for r in stream(REASON, cut, "xxx")]
    assert [line.split(" (")[0] for _, line in feed(DeadRunWatch(args_for("dapo")), rows)] == [
        "warning: entropy collapsed", "warning: completions cut off"]
