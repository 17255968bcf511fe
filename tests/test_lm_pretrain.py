"""Pretraining on a tiny config: it learns, it is deterministic, and the cache is used."""

import dataclasses
import math
import time

import pytest
import torch

import importlib

# (`workbook.lm.pretrain` the attribute is the function; the module is reached by name.)
pretrain_mod = importlib.import_module("workbook.lm.pretrain")
from workbook.lm import TINY_ARGS, PretrainArgs, checkpoint_path, load_or_pretrain, pretrain, sample_texts


@pytest.fixture(scope="module")
def tiny_run():
    start = time.process_time()
    model, tok, stats = pretrain(TINY_ARGS, progress=False)
    return model, tok, stats | {"cpu_s": time.process_time() - start}


def test_tiny_pretraining_reduces_the_loss(tiny_run):
    model, tok, stats = tiny_run
    assert stats["params"] == model.num_params() < 10_000
    first = stats["curve"][0][1]
    assert first == pytest.approx(math.log(tok.vocab_size), abs=0.3)  # starts near uniform
    assert stats["final_loss"] < first - 0.8
    assert stats["heldout_loss"] < first - 0.8
    assert stats["cpu_s"] < 10  # CPU time: a guard a busy machine cannot trip (benchmarks/pretrain.py times it)
    assert not model.training
    (text,) = sample_texts(model, tok, ["the movie"], max_new_tokens=20, seed=0)
    assert text.startswith("the movie")


def test_pretraining_is_deterministic_and_leaves_global_rng_alone(tiny_run):
    torch.manual_seed(123)
    expected = torch.rand(1)
    torch.manual_seed(123)
    model, _, stats = pretrain(TINY_ARGS, progress=False)
    assert torch.equal(torch.rand(1), expected)
    ref_model, _, ref_stats = tiny_run
    assert stats["curve"] == ref_stats["curve"]
    assert stats["heldout_loss"] == ref_stats["heldout_loss"]
    for (name, a), b in zip(model.state_dict().items(), ref_model.state_dict().values()):
        assert torch.equal(a, b), name
    other, _, _ = pretrain(dataclasses.replace(TINY_ARGS, seed=1, steps=5), progress=False)
    assert not torch.equal(other.wte.weight, model.wte.weight)


def test_load_or_pretrain_trains_once_then_uses_the_cache(tmp_path, monkeypatch):
    args = dataclasses.replace(TINY_ARGS, steps=10, cache_dir=str(tmp_path))
    calls = []
    real = pretrain_mod.pretrain

    def counting(*a, **k):
        calls.append(1)
        return real(*a, **k)

    monkeypatch.setattr(pretrain_mod, "pretrain", counting)
    m1, tok1 = load_or_pretrain(args, progress=False)
    assert len(calls) == 1 and checkpoint_path(args).exists()
    m2, tok2 = load_or_pretrain(dataclasses.replace(args, threads=2, log_every=1), progress=False)
    assert len(calls) == 1  # same weights-relevant settings: loaded, not retrained
    ids = torch.randint(0, tok1.vocab_size, (2, 6))
    assert torch.equal(m1(ids), m2(ids))
    load_or_pretrain(dataclasses.replace(args, seed=9), progress=False)
    assert len(calls) == 2  # a different config gets its own file
    assert len(list(tmp_path.glob("pretrained-*.pt"))) == 2


def test_cache_key_and_cache_dir():
    a = PretrainArgs(cache_dir="/x")
    assert a.cache_key() == PretrainArgs(cache_dir="/y", threads=7).cache_key()
    assert a.cache_key() != PretrainArgs(cache_dir="/x", lr=1e-4).cache_key()


def test_cache_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("WORKBOOK_CACHE", str(tmp_path))
    assert PretrainArgs().cache_dir == str(tmp_path)
    monkeypatch.delenv("WORKBOOK_CACHE")
    assert PretrainArgs().cache_dir.endswith("ppo-rlhf-workbook")


def test_command_line_entry_point(tmp_path, capsys):
    out = tmp_path / "lm.pt"
    argv = ["--steps", "5", "--n-reviews", "200", "--n-heldout", "20", "--d-model", "16", "--n-layer", "1",
            "--n-head", "2", "--threads", "1", "--log-every", "5", "--out", str(out), "--samples", "2"]
    assert pretrain_mod.main(argv) == 0
    assert out.exists()
    printed = capsys.readouterr().out
    assert "held-out" in printed and "step     5/5" in printed

    cache_argv = [a for a in argv if a not in ("--out", str(out))] + ["--cache-dir", str(tmp_path / "cache")]
    assert pretrain_mod.main(cache_argv) == 0
    assert "step     5/5" in capsys.readouterr().out  # trained into the cache
    assert pretrain_mod.main(cache_argv) == 0
    printed = capsys.readouterr().out
    assert "using the cached model" in printed and "step " not in printed and "held-out" in printed


def test_block_size_must_hold_a_review():
    with pytest.raises(ValueError, match="block_size"):
        pretrain(dataclasses.replace(TINY_ARGS, block_size=64), progress=False)


def test_encode_reviews_is_right_padded_bos_text_eos():
    from workbook.lm.pretrain import encode_reviews
    from workbook.lm.tokenizer import CharTokenizer, pad_batch

    tok = CharTokenizer()
    texts = ["a fine film.", "i loved it!", "x", "the plot was thin, the cast was not."]
    expected, _ = pad_batch([tok.encode(t, add_bos=True, add_eos=True) for t in texts], side="right", pad_id=tok.pad_id)
    assert torch.equal(encode_reviews(texts, tok), expected)
