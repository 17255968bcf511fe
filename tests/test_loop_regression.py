"""The LM loop (``workbook/loop/run.py``) behind both commands: repeatable, and the same options as before.

Guards refactors of the loop's rooms (the loop, ``rlhf.py``, ``reasoning.py``): the same tiny
run through each command's public ``train`` twice gives the same weights and metrics bit for
bit (on this machine: the numbers themselves differ across CPUs and kernel sets, so they are
not pinned), and the options, ``--set`` fields and ``summary.json`` config of each command are
those listed here (a field that moves between commands, or vanishes, fails).
"""

from __future__ import annotations

import dataclasses
import json
import re

import pytest
import torch

from workbook.checkpoints import load_run
from workbook.lm.model import GPT, GPTConfig
from workbook.lm.tokenizer import CharTokenizer
from workbook.loop import reasoning, rlhf
from workbook.reason.base import reasoner_tokenizer

pytestmark = pytest.mark.usefixtures("no_curves")  # none of these tests looks at a run's curves.png

# The fields of each command's options class: its summary.json config, its checkpoint's, its --set fields.
LOOP_FIELDS = ["impl", "algo", "seed", "model", "prompts", "device", "iterations", "time_budget_s", "batch_size",
               "mini_batch_size", "ppo_epochs", "learning_rate", "kl_coef", "adaptive_kl", "kl_target", "kl_horizon",
               "kl_penalty", "ent_coef", "temperature", "max_new_tokens", "vf_coef", "cliprange", "cliprange_value",
               "gamma", "lam", "eval_samples", "sample_every", "wandb", "runs_dir", "run_name", "overwrite",
               "checkpoint_every", "resume", "threads", "quiet", "progress", "group_size", "grpo_scale",
               "loss_normalisation",
               # Part 10 (issue 30): who samples, and how stale batches are corrected; old runs are unchanged by them.
               "samplers", "lag", "free_running", "correction", "is_cap", "off_policy_delta", "kl_estimator",
               "sampler_dtype"]
RLHF_ONLY = ["reward", "eos_trick", "missing_eos_score", "dpo_beta"]
REASON_ONLY = ["task", "format_reward", "eval_k", "eps_high", "dynamic_sampling", "overlong_cache", "mask_truncated",
               "tool", "max_calls", "mask_tool_tokens"]

# What --help lists: every field but seed (--seeds), quiet and progress (--no-progress), and --set, --debug, --help.
COMMON_OPTIONS = {"--" + f.replace("_", "-") for f in LOOP_FIELDS if f not in ("seed", "quiet", "progress")} | {
    "--seeds", "--no-progress", "--set", "--debug", "--help"}


def options_in_help(main, capsys) -> list[str]:
    """The options --help lists, in its order."""
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    return list(dict.fromkeys(re.findall(r"^\s{2}(?:-h, )?(--[a-z0-9-]+)", capsys.readouterr().out, re.M)))


def test_each_command_has_the_fields_and_options_it_had():
    assert [f.name for f in dataclasses.fields(rlhf.Args)] == LOOP_FIELDS + RLHF_ONLY
    # reason's class keeps the loop's order (its own defaults in place), then its own fields.
    assert [f.name for f in dataclasses.fields(reasoning.ReasonArgs)] == LOOP_FIELDS + REASON_ONLY


def test_each_command_lists_the_options_it_had(capsys):
    rlhf_options, reason_options = options_in_help(rlhf.main, capsys), options_in_help(reasoning.main, capsys)
    assert set(rlhf_options) == COMMON_OPTIONS | {"--" + f.replace("_", "-") for f in RLHF_ONLY}
    assert set(reason_options) == COMMON_OPTIONS | {"--" + f.replace("_", "-") for f in REASON_ONLY}
    # rlhf's review-task options sit next to the loop's they go with, as before the loop had its own module.
    assert rlhf_options[rlhf_options.index("--algo"):rlhf_options.index("--iterations")] == [
        "--algo", "--reward", "--model", "--prompts", "--device", "--eos-trick", "--missing-eos-score"]
    assert rlhf_options[-3:] == ["--dpo-beta", "--no-progress", "--set"]


@pytest.mark.parametrize(("main", "field"), [(rlhf.main, "eps_high"), (reasoning.main, "reward"),
                                             (reasoning.main, "dpo_beta")])
def test_a_field_of_the_other_command_is_refused(main, field, tmp_path, capsys):
    """rlhf has no eps_high, reason no reward nor dpo_beta: one line naming --set, exit 2, nothing written."""
    code = main(["--set", f"{field}=1", "--runs-dir", str(tmp_path), "--wandb", "disabled"])
    assert code == 2 and f"error: --set: this command has no field {field!r}" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def tiny_gpt(tok, block_size: int) -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=tok.vocab_size, block_size=block_size, n_layer=1, n_head=2, d_model=16))


def run_twice(train, args, tok, block_size: int, tmp_path) -> tuple[list, ...]:
    """(metrics, weights, summary) of two runs from the same fresh model and seed, in two folders."""
    out = []
    for name in ("first", "second"):
        summary = train(dataclasses.replace(args, runs_dir=str(tmp_path), run_name=name),
                        model=tiny_gpt(tok, block_size), tok=tok, progress=False)
        metrics = [{k: v for k, v in json.loads(line).items() if not k.startswith("time/")}
                   for line in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
        weights = load_run(tmp_path / name, "--resume", (summary["command"],))["algo"]["policy"]
        out.append((metrics, weights, summary))
    return tuple(out)


def assert_same_runs(first, second, iterations: int) -> None:
    (m1, w1, s1), (m2, w2, s2) = first, second
    assert len(m1) == iterations and m1 == m2, "the same seed must give the same metrics, bit for bit"
    assert w1.keys() == w2.keys() and all(torch.equal(w1[k], w2[k]) for k in w1), "... and the same weights"
    assert s1["after"] == s2["after"] and s1["before"] == s2["before"]


@pytest.mark.parametrize("algo", ["ppo", "grpo", "rloo", "dpo"])
def test_an_rlhf_run_is_repeatable_bit_for_bit(algo, tmp_path):
    tok = CharTokenizer()
    args = rlhf.algo_args(algo, impl="solutions", iterations=2, batch_size=4, mini_batch_size=2, group_size=2,
                          ppo_epochs=1, eval_samples=4, max_new_tokens=12, sample_every=1, wandb="disabled", quiet=True)
    first, second = run_twice(rlhf.train, args, tok, 160, tmp_path)  # DPO scores whole reviews: a longer context
    assert_same_runs(first, second, 2)
    summary = first[2]
    assert summary["command"] == "rlhf" and list(summary["config"]) == LOOP_FIELDS + RLHF_ONLY
    if algo in ("ppo", "dpo"):  # (an untrained GPT's reviews all score 0 with VADER: no group spread to learn from)
        start = tiny_gpt(tok, 160).state_dict()
        moved = [not torch.equal(v, start[k.removeprefix("lm.")]) for k, v in first[1].items()
                 if k.removeprefix("lm.") in start]
        assert moved and any(moved), "the runs trained (a loop that does nothing is repeatable too)"


@pytest.mark.parametrize("algo", ["dapo", "ppo"])
def test_a_reason_run_is_repeatable_bit_for_bit(algo, tmp_path):
    tok = reasoner_tokenizer()
    args = reasoning.reason_args(algo, impl="solutions", iterations=2, batch_size=8, mini_batch_size=4, group_size=4,
                                 eval_samples=4, eval_k=2, max_new_tokens=16, sample_every=1, wandb="disabled",
                                 quiet=True, format_reward=0.5, dynamic_sampling=False)
    first, second = run_twice(reasoning.train_reason, args, tok, 96, tmp_path)
    assert_same_runs(first, second, 2)
    assert first[2]["command"] == "reason" and list(first[2]["config"]) == LOOP_FIELDS + REASON_ONLY
