"""The figures the docs claim: quoted where they are checked, and the base models behind them ship intact.

``benchmarks/check_figures.py`` holds each headline claim once, with the range it was measured
in and the benchmark that checks it; the pages quote it word for word. The base models of
Parts 3/5 and 7 ship as files (``workbook/lm/base_models/``) because pretraining is chaotic:
the same recipe on another CPU is another model (docs/base_models.md).
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from workbook.agents.base import AGENT_ARGS, agent_cache_key, load_or_pretrain_agent
from workbook.lm.pretrain import (BASE_MODELS_DIR, PretrainArgs, file_sha256, load_or_pretrain, shipped_base_models,
                                  shipped_checkpoint)
from workbook.reason import REASONER_ARGS, load_or_pretrain_reasoner
from workbook.reason.base import reasoner_cache_key, reasoner_checkpoint_path

ROOT = Path(__file__).resolve().parent.parent


def load_script(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


checks = load_script("check_figures")


@pytest.mark.parametrize("claim", checks.CLAIMS, ids=[c.id for c in checks.CLAIMS])
def test_every_claim_is_quoted_word_for_word_where_it_is_made(claim):
    for page in claim.pages:
        text = " ".join((ROOT / page).read_text().split())  # a claim may wrap across lines
        assert claim.text in text, f"{page} no longer quotes the claim {claim.id!r}: {claim.text!r} (benchmarks/check_figures.py)"
    assert claim.source in checks.SOURCES


def test_claims_hold_and_fail_on_the_numbers_they_name():
    base = {"runs": [{"task": "addition", "pass1": 0.56, "pass16": 0.99}, {"task": "multiplication", "pass1": 0.30, "pass16": 0.75}]}
    (addition,) = [c for c in checks.CLAIMS if c.id == "base-addition"]
    assert addition.check(base)[1]
    base["runs"][0]["pass1"] = 0.50
    said, holds = addition.check(base)
    assert not holds and "0.500" in said
    (dapo,) = [c for c in checks.CLAIMS if c.id == "reason-dapo"]
    runs = [{"task": "addition", "algo": "dapo", "seed": s, "pass1_before": 0.56, "pass1_after": 0.98} for s in range(3)]
    assert dapo.check({"runs": runs})[1]
    assert not dapo.check({"runs": runs[:2]})[1], "a seed missing must not count as holding"
    runs[1]["pass1_after"] = 0.93
    assert not dapo.check({"runs": runs})[1]


def test_check_figures_refuses_an_unknown_claim_in_one_line():
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "check_figures.py"), "--only", "no-such-claim"],
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 2
    assert done.stderr.strip().startswith("error: --only: no claim 'no-such-claim'") and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_the_shipped_base_models_match_their_checksums_and_todays_recipes():
    manifest = shipped_base_models()
    assert set(manifest) == {"review", "addition", "multiplication", "calculator"}
    keys = {"review": PretrainArgs().cache_key(), "calculator": agent_cache_key(AGENT_ARGS),
            **{task: reasoner_cache_key(task, REASONER_ARGS[task]) for task in ("addition", "multiplication")}}
    for name, entry in manifest.items():
        path = BASE_MODELS_DIR / entry["file"]
        assert file_sha256(path) == entry["sha256"], f"{path} does not match its checksum"
        assert path.stat().st_size < 3_000_000, f"{path} is too big to ship"
        assert entry["cache_key"] == keys[name], (
            f"the {name} recipe changed since its model was shipped: rebuild it with "
            "python benchmarks/base_models.py --write-shipped --kernels default, and measure it again (docs/base_models.md)")


def test_the_default_models_load_from_the_shipped_files_without_training(tmp_path, capsys):
    review = dataclasses.replace(PretrainArgs(), cache_dir=str(tmp_path))
    model, _ = load_or_pretrain(review, progress=True)
    shipped = torch.load(BASE_MODELS_DIR / "review.pt", weights_only=True)["state_dict"]
    assert all(torch.equal(v, shipped[k]) for k, v in model.state_dict().items())
    addition = dataclasses.replace(REASONER_ARGS["addition"], cache_dir=str(tmp_path))
    model, _ = load_or_pretrain_reasoner("addition", addition, progress=True)
    shipped = torch.load(BASE_MODELS_DIR / "addition.pt", weights_only=True)["state_dict"]
    assert all(torch.equal(v, shipped[k]) for k, v in model.state_dict().items())
    calculator = dataclasses.replace(AGENT_ARGS, cache_dir=str(tmp_path))
    model, _ = load_or_pretrain_agent(calculator, progress=True)
    shipped = torch.load(BASE_MODELS_DIR / "calculator.pt", weights_only=True)["state_dict"]
    assert all(torch.equal(v, shipped[k]) for k, v in model.state_dict().items())
    assert "pretraining" not in capsys.readouterr().out
    assert not any(tmp_path.iterdir()), "loading a shipped model must not write to the cache"


def test_a_model_rebuilt_into_the_cache_is_read_before_the_shipped_one(tmp_path):
    from workbook.lm.model import load_checkpoint, save_checkpoint

    args = dataclasses.replace(REASONER_ARGS["multiplication"], cache_dir=str(tmp_path))
    shipped, tok, _ = load_checkpoint(shipped_checkpoint("multiplication", reasoner_cache_key("multiplication", args)))
    rebuilt = type(shipped)(shipped.config)  # stands in for `pretrain --overwrite`'s model: other weights
    save_checkpoint(reasoner_checkpoint_path("multiplication", args), rebuilt, tok)
    model, _ = load_or_pretrain_reasoner("multiplication", args, progress=False)
    assert all(torch.equal(v, rebuilt.state_dict()[k]) for k, v in model.state_dict().items())


def test_a_damaged_shipped_file_is_refused_with_a_clear_message(tmp_path, monkeypatch):
    pretrain = importlib.import_module("workbook.lm.pretrain")  # (workbook.lm's `pretrain` is the function)

    for name in ("MANIFEST.json", "review.pt"):
        (tmp_path / name).write_bytes((BASE_MODELS_DIR / name).read_bytes())
    blob = bytearray((tmp_path / "review.pt").read_bytes())
    blob[-100] ^= 0xFF
    (tmp_path / "review.pt").write_bytes(bytes(blob))
    monkeypatch.setattr(pretrain, "BASE_MODELS_DIR", tmp_path)
    with pytest.raises(RuntimeError, match="does not match its checksum"):
        pretrain.shipped_checkpoint("review", PretrainArgs().cache_key())
    assert pretrain.shipped_checkpoint("review", "another-recipe") is None
