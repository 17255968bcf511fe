"""Smoke tests of Part 5's given code: ``python -m workbook rlhf --algo grpo|rloo|dpo``.

Not graded: they run the reference solutions on a ~7k-parameter model pretrained for a second,
for two iterations each, and check that every algorithm writes Part 3's outputs.
"""

from __future__ import annotations

import copy
import json

import pytest
import torch

from workbook.lm.pretrain import TINY_ARGS, pretrain
from workbook.loop.rlhf import Args, train


@pytest.fixture(scope="module")
def tiny():
    model, tok, _ = pretrain(TINY_ARGS, progress=False)
    return model, tok


def tiny_args(tmp_path, algo: str, **kw) -> Args:
    return Args(impl="solutions", algo=algo, iterations=2, batch_size=8, mini_batch_size=4, group_size=4, ppo_epochs=1,
                eval_samples=8, max_new_tokens=24, sample_every=1, wandb="disabled", runs_dir=str(tmp_path),
                run_name=f"smoke-{algo}", quiet=True, **kw)


@pytest.mark.slow
@pytest.mark.parametrize("algo,extra", [("grpo", {"grpo_scale": "none", "loss_normalisation": "constant"}),
                                        ("rloo", {}), ("dpo", {})])
def test_each_algorithm_writes_the_rlhf_outputs(tiny, tmp_path, algo, extra):
    model, tok = tiny
    summary = train(tiny_args(tmp_path, algo, **extra), model=copy.deepcopy(model), tok=tok)
    out = tmp_path / f"smoke-{algo}"
    for name in ("metrics.jsonl", "samples.jsonl", "curves.png", "summary.json", "policy.pt"):
        assert (out / name).exists(), f"{name} was not written"
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and {"objective/kl", "objective/kl_coef", "objective/entropy", "env/reward_mean"} <= set(rows[0])
    assert all(torch.isfinite(torch.tensor(r["objective/kl"])) for r in rows)
    assert summary["algo"] == algo and summary["before"]["kl"] == pytest.approx(0.0, abs=1e-5)
    assert summary["after"]["kl"] != pytest.approx(0.0, abs=1e-7), "two updates must move the policy"
    if algo == "dpo":
        assert 0.0 <= summary["dpo_heldout_accuracy"] <= 1.0 and "dpo/rewards/accuracies" in rows[0]
    else:
        assert f"{algo}/loss/policy" in rows[0]


def test_group_algorithms_sample_whole_groups(tiny):
    from workbook.loop.algorithms import make_algorithm

    model, tok = tiny
    algo = make_algorithm(Args(impl="solutions", algo="grpo", batch_size=12, group_size=4), copy.deepcopy(model), tok)
    prompts = algo.prompts(0)
    assert len(prompts) == 12 and all(len(set(prompts[i:i + 4])) == 1 for i in range(0, 12, 4))


def test_each_algorithm_has_its_defaults_unless_an_option_overrides_them():
    from workbook.loop.algorithms import ALGO_DEFAULTS
    from workbook.loop.rlhf import parse_args

    for algo, defaults in ALGO_DEFAULTS.items():
        args = parse_args(["--algo", algo])
        assert {k: getattr(args, k) for k in defaults} == defaults
    assert parse_args(["--algo", "grpo", "--kl-coef", "0.01"]).kl_coef == 0.01
    assert parse_args(["--algo", "rloo", "--iterations=7"]).iterations == 7
    assert parse_args(["--algo", "grpo", "--set", "kl_coef=0.01"]).kl_coef == 0.01, "--set FIELD=VALUE wins too"
    assert parse_args(["--algo", "grpo", "--no-progress"]).iterations == ALGO_DEFAULTS["grpo"]["iterations"]
    assert parse_args([]).kl_coef == Args().kl_coef, "PPO keeps Part 3's defaults"
