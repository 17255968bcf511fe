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

from workbook.loop import health
from workbook.loop.health import PATIENCE, SYMPTOMS, DeadRunWatch
from workbook.loop.reasoning import reason_args
from workbook.loop.train import algo_args

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
    "entropy": ("dapo", REASON, {"objective/entropy": 0.01}),
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
    assert feed(watch, stream(row, sick, ("x" * (PATIENCE - 1) + ".") * 10)) == []


@pytest.mark.parametrize("name,at,below,above", [
    ("truncated", "env/finished_frac", 0.1, 0.11),  # ≥ 90 % cut off: 1 - 0.1 holds, 1 - 0.11 does not
    ("entropy", "objective/entropy", 0.0199, 0.02),
    ("no_signal", "env/groups_with_signal", 0.05, 0.0625),
])
def test_the_thresholds_are_where_the_docstring_says(name, at, below, above):
    _, row, _ = SICK[name]
    for value, reported in ((below, True), (above, False)):
        watch = DeadRunWatch(args_for("dapo"))
        said = feed(watch, stream(row, {at: value}, "x" * PATIENCE))
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
    solved = {"env/accuracy": 0.95, "env/groups_with_signal": 0.0, "objective/entropy": 0.001}
    assert feed(DeadRunWatch(args_for("dapo")), stream(REASON, solved, "x" * 10)) == []
    unsolved = solved | {"env/accuracy": 0.85}
    said = feed(DeadRunWatch(args_for("dapo")), stream(REASON, unsolved, "x" * 10))
    assert [line.split(" (")[0] for _, line in said] == ["warning: entropy collapsed"], \
        "identical samples: the entropy is reported, the missing spread it causes is not"


def test_dpo_is_not_judged_on_samples_it_does_not_train_on():
    sick = {"env/finished_frac": 0.0, "env/reward_std": 0.0}
    assert feed(DeadRunWatch(args_for("dpo")), stream(DPO, sick, "x" * 10)) == []
    said = feed(DeadRunWatch(args_for("dpo")), stream(DPO, {"objective/kl": 100.0}, "xxx"))
    assert len(said) == 1 and "--dpo-beta 0.1" in said[0][1] and "--kl-coef" not in said[0][1]


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
    expected = {"truncated": ["--max-new-tokens 7", "--mask-truncated"], "entropy": ["--temperature 0.3", "--learning-rate 0.05"],
                "kl": ["--learning-rate 0.05", "--kl-coef 0 (β)"], "clipped": ["--learning-rate 0.05", "--ppo-epochs 3", "--cliprange 0.2"],
                "no_signal": ["--temperature 0.3", "--group-size 8", "--format-reward 0.2"], "zero_loss": ["every advantage is 0"]}
    for name, (_, row, sick) in SICK.items():
        (_, line), = feed(DeadRunWatch(a), stream(row, sick, "xxx"))
        for part in expected[name]:
            assert part in line, f"{name}: {part!r} not in {line!r}"
    (_, line), = feed(DeadRunWatch(args_for("ppo")), stream(RLHF_PPO, {"env/reward_std": 0.0}, "xxx"))
    assert "every sample got the same reward" in line and "--group-size" not in line and "--format-reward" not in line
    (_, line), = feed(DeadRunWatch(args_for("dapo", mask_truncated=False)), stream(REASON, SICK["truncated"][2], "xxx"))
    assert "--mask-truncated" not in line


def command_options(command: str) -> str:
    import contextlib
    import io

    from workbook.loop import reasoning, train

    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        (reasoning.main if command == "reason" else train.main)(["--help"])
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
