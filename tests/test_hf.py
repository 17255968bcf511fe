"""Part 3 on Hugging Face causal LMs (workbook/hf), offline.

A tiny GPT-2 (random weights, 2 layers, d=64) and a BPE tokenizer trained on our review corpus are
built once per session, saved with ``save_pretrained`` and loaded back through the code path of
``--model PATH``; nothing reaches the hub (HF_HUB_OFFLINE=1). Not graded: they run the
reference solutions through the adapter.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"  # read when huggingface_hub is imported: before transformers

import pytest
import torch

pytest.importorskip("transformers")

from solutions import part3_rlhf as part3  # noqa: E402
from workbook.hf.model import NEVER, load_causal_lm  # noqa: E402
from workbook.hf.tiny import random_gpt2, save_tiny_gpt2, train_review_tokenizer  # noqa: E402
from workbook.lm.tokenizer import pad_batch  # noqa: E402
from workbook.rlhf.data import rollout  # noqa: E402
from workbook.rlhf.prompts import prompt_file  # noqa: E402
from workbook.rlhf.rewards import missing_eos_scores  # noqa: E402
from workbook.loop.task import IMDB_PRESET, review_task  # noqa: E402
from workbook.loop.rlhf import Args, main, parse_args  # noqa: E402
from workbook.runs import ConfigError  # noqa: E402

pytestmark = pytest.mark.usefixtures("no_curves")  # no test looks at a run's curves.png (the seeds' figure is drawn)

ROOT = Path(__file__).resolve().parents[1]
PROMPTS = ["the plot was", "I thought the acting", "This film", "overall, the music", "the ending felt so",
           "this movie is", "the cast", "i thought the script was"]


@pytest.fixture(scope="session")
def saved(tmp_path_factory) -> Path:
    """A tiny random GPT-2 and its review tokenizer, as a save_pretrained folder."""
    return save_tiny_gpt2(tmp_path_factory.mktemp("tiny-gpt2"))


@pytest.fixture(scope="session")
def saved_classifier(tmp_path_factory, saved) -> Path:
    """A tiny random sentiment classifier (GPT-2 trunk, labels NEGATIVE/POSITIVE) on the same tokenizer."""
    from transformers import AutoTokenizer, GPT2Config, GPT2ForSequenceClassification

    tok = AutoTokenizer.from_pretrained(saved)
    config = GPT2Config(vocab_size=len(tok), n_positions=128, n_embd=32, n_layer=1, n_head=2, pad_token_id=tok.pad_token_id,
                        id2label={0: "NEGATIVE", 1: "POSITIVE"}, label2id={"NEGATIVE": 0, "POSITIVE": 1})
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("tiny-classifier")
    GPT2ForSequenceClassification(config).save_pretrained(path)
    tok.save_pretrained(path)
    return path


@pytest.fixture
def loaded(saved):
    torch.manual_seed(0)
    return load_causal_lm(str(saved))


def queries_of(tok, prompts=PROMPTS) -> list[torch.Tensor]:
    return [torch.tensor(tok.encode(p), dtype=torch.long) for p in prompts]


def eos_likely(lm, tok, p_eos: float = 0.12) -> None:
    """Rig the random model so EOS has probability ≈ p_eos at every step — and PAD is by far the likeliest token.

    The final LayerNorm then outputs (almost) its bias u whatever the input; the tied output
    embedding gives EOS the logit that makes it p_eos likely and PAD a logit of 20.
    """
    hf = lm.hf
    with torch.no_grad():
        u = torch.nn.functional.normalize(torch.randn(lm.config.d_model, generator=torch.Generator().manual_seed(0)), dim=0)
        hf.transformer.ln_f.weight.mul_(0.01)
        hf.transformer.ln_f.bias.copy_(u)
        wte = hf.transformer.wte.weight
        wte.mul_(0.1)
        others = lm.config.vocab_size - 2
        wte[tok.eos_id] = u * float(torch.log(torch.tensor(p_eos / (1 - p_eos) * others)))
        wte[tok.pad_id] = u * 20.0


# ---------------------------------------------------------------- loading and the tokenizer


def test_loading_a_saved_folder_gives_the_interface_part3_expects(loaded):
    lm, tok = loaded
    assert lm.config.d_model == 64 and lm.config.block_size == 128 and lm.config.vocab_size == tok.vocab_size
    assert tok.pad_id != tok.eos_id, "PAD must not be EOS"
    ids = tok.encode("the plot was great", add_bos=True, add_eos=True)
    assert ids[0] == tok.bos_id and ids[-1] == tok.eos_id
    assert tok.decode(ids) == "the plot was great", "decode drops the specials and restores the text"


def test_a_tokenizer_without_pad_gets_its_own_pad_token(tmp_path):
    """GPT-2 ships without PAD: loading adds <pad> (not EOS) and grows the embedding by one row."""
    tokenizer = train_review_tokenizer(vocab_size=300, n_reviews=200, pad=False)
    model = random_gpt2(tokenizer)
    tokenizer.save_pretrained(tmp_path)
    model.save_pretrained(tmp_path)
    lm, tok = load_causal_lm(str(tmp_path))
    assert tok.pad_id not in (None, tok.eos_id) and lm.config.vocab_size == len(tokenizer) + 1 == tok.vocab_size
    logits = lm(torch.tensor([tok.encode("the plot")]))
    assert (logits[..., tok.pad_id] == NEVER).all(), "PAD is never a next token"


def test_a_missing_folder_or_an_unreachable_hub_is_one_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="no such folder"):
        load_causal_lm(str(tmp_path / "nowhere"))
    with pytest.raises(ConfigError, match="hub cannot be reached") as info:
        load_causal_lm("gpt2")
    assert info.value.field == "--model" and "\n" not in str(info.value)


@pytest.mark.parametrize("options, field", [
    (["--model", "gpt2"], "--model"),
    (["--model", "{saved}", "--reward", "lvwerra/distilbert-imdb"], "--reward"),
    (["--model", "{saved}", "--prompts", "no-such-prompts.txt"], "--prompts"),
    (["--prompts", "imdb"], "--prompts"),
    (["--device", "tpu"], "--device"),
    (["--reward", "sentiment"], "--reward"),
    (["--model", "{tmp}"], "--model"),  # a folder, but no saved model in it (e.g. --model runs)
    (["--model", "./nowhere/model"], "--model"),
    (["--model", "{saved}/config.json"], "--model"),
    (["--seeds", "-1"], "--seeds"),
    (["--seeds", "1", "1"], "--seeds"),
    (["--seed", "1"], "--seed"),
    (["--run-dir", "x"], "--run-dir"),
])
def test_rlhf_command_says_what_cannot_be_loaded_before_writing_anything(options, field, saved, tmp_path, capsys):
    argv = [o.format(saved=saved, tmp=tmp_path) for o in options] + ["--impl", "solutions", "--runs-dir", str(tmp_path / "runs"), "--wandb", "disabled"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {field}: "), err
    assert not (tmp_path / "runs").exists(), "a run that cannot start must not leave a folder behind"


# ---------------------------------------------------------------- the forward pass


@pytest.mark.parametrize("side", ["left", "right"])
def test_forward_pass_is_the_same_whatever_the_padding_and_the_batch(loaded, side):
    """Each row's logits and hidden states on real tokens equal those of the row run alone, unpadded."""
    lm, tok = loaded
    rows = queries_of(tok)
    ids, mask = pad_batch(rows, side=side, pad_id=tok.pad_id)
    assert (mask == 0).any(), "the rows should need padding"
    with torch.no_grad():
        logits, hidden = lm(ids, mask, return_hidden=True)
        for b, row in enumerate(rows):
            alone_logits, alone_hidden = lm(row[None], return_hidden=True)
            real = mask[b].bool()
            torch.testing.assert_close(logits[b, real], alone_logits[0], rtol=1e-4, atol=1e-4)
            torch.testing.assert_close(hidden[b, real], alone_hidden[0], rtol=1e-4, atol=1e-4)


def test_batched_forward_pass_does_not_depend_on_the_rest_of_the_batch(loaded):
    lm, tok = loaded
    policy = part3.GPTWithValueHead(lm)
    with torch.no_grad():
        policy.value_head.weight.normal_()  # values that differ per position
    queries = queries_of(tok)
    responses = [torch.tensor(tok.encode(t, add_bos=False)) for t in ["great fun", "a dull mess of a film", "fine", "loved it"] * 2]
    together = part3.batched_forward_pass(policy, queries, responses, temperature=0.7, pad_id=tok.pad_id)
    for b in range(len(queries)):
        alone = part3.batched_forward_pass(policy, queries[b:b + 1], responses[b:b + 1], temperature=0.7, pad_id=tok.pad_id)
        n = len(responses[b])
        for got, want in zip((together[0], together[2], together[3]), (alone[0], alone[2], alone[3])):
            torch.testing.assert_close(got[b, :n], want[0, :n], rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------- sampling


def test_generation_stops_at_eos_and_never_emits_pad(loaded):
    lm, tok = loaded
    eos_likely(lm, tok)
    ids, mask = pad_batch(queries_of(tok) * 4, side="left", pad_id=tok.pad_id)
    responses = lm.generate(ids, mask, max_new_tokens=20, eos_id=tok.eos_id, pad_id=tok.pad_id, temperature=1.0,
                            generator=torch.Generator().manual_seed(0))
    assert len(responses) == 32
    assert not any((r == tok.pad_id).any() for r in responses), "PAD was sampled as content"
    assert not any((r[:-1] == tok.eos_id).any() for r in responses), "a response goes on after its EOS"
    finished = [int(r[-1] == tok.eos_id) for r in responses]
    assert all(len(r) == 20 for r, f in zip(responses, finished) if not f), "an unfinished response stopped early"
    assert 0 < sum(finished) < 32 and len({len(r) for r in responses}) > 3, "EOS at p≈0.12 per step: ragged lengths"


def test_generation_is_seeded_by_the_generator_alone(loaded):
    lm, tok = loaded
    ids, mask = pad_batch(queries_of(tok), side="left", pad_id=tok.pad_id)
    run = lambda seed: lm.generate(ids, mask, max_new_tokens=8, eos_id=tok.eos_id, pad_id=tok.pad_id, temperature=1.0,
                                   generator=torch.Generator().manual_seed(seed))
    state = torch.get_rng_state()
    first, again, other = run(1), run(1), run(2)
    assert torch.equal(state, torch.get_rng_state()), "generate must not consume the global RNG"
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    assert any(not torch.equal(a, b) for a, b in zip(first, other))


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_tokens_are_scored_with_the_distribution_they_were_sampled_from(loaded, temperature):
    """KV-cached generate (left padding) and batched_forward_pass (right padding) see the same logits."""
    lm, tok = loaded
    queries = queries_of(tok)
    ids, mask = pad_batch(queries, side="left", pad_id=tok.pad_id)
    responses, raw = lm.generate(ids, mask, max_new_tokens=10, eos_id=tok.eos_id, pad_id=tok.pad_id, temperature=temperature,
                                 generator=torch.Generator().manual_seed(0), return_logits=True)
    _, logits, _, _ = part3.batched_forward_pass(part3.GPTWithValueHead(lm), queries, responses, temperature=temperature,
                                                 pad_id=tok.pad_id, return_logits=True)
    for b, r in enumerate(responses):
        torch.testing.assert_close(logits[b, :len(r)], raw[b] / temperature, rtol=1e-4, atol=1e-4)
    # Nothing truncates the distribution (a checkpoint's generation_config may ask for top-k 50):
    # this random model is nearly uniform over 512 tokens, so most samples rank below the top 50.
    ranks = [(raw[b] > raw[b].gather(1, r[:, None])).sum(dim=1) for b, r in enumerate(responses)]
    assert (torch.cat(ranks) >= 50).float().mean() > 0.5, "sampling looks truncated to the top-k tokens"


def test_the_eos_trick_scores_every_unfinished_response_the_same(loaded):
    lm, tok = loaded
    eos_likely(lm, tok, p_eos=0.2)
    batch = rollout(lm, tok, PROMPTS * 2, max_new_tokens=6, temperature=1.0, generator=torch.Generator().manual_seed(0))
    assert batch.finished == [bool(r[-1] == tok.eos_id) for r in batch.responses]
    assert 0 < sum(batch.finished) < len(batch.finished), "the test needs finished and unfinished responses"
    scores = torch.linspace(-0.5, 0.9, len(PROMPTS) * 2)
    out = missing_eos_scores(scores, batch.finished, -3.0)
    done = torch.tensor(batch.finished)
    assert torch.equal(out[done], scores[done]) and (out[~done] == -3.0).all()


# ---------------------------------------------------------------- PPO on the adapter


def test_one_ppo_step_trains_the_policy_and_never_the_reference(loaded):
    lm, tok = loaded
    policy = part3.GPTWithValueHead(lm)
    reference = part3.create_reference_model(policy)
    before = {k: v.clone() for k, v in policy.state_dict().items()}
    ref_before = {k: v.clone() for k, v in reference.state_dict().items()}
    batch = rollout(lm, tok, PROMPTS, max_new_tokens=10, temperature=1.0, generator=torch.Generator().manual_seed(0))
    trainer = part3.PPOTrainer(part3.PPOConfig(mini_batch_size=4, ppo_epochs=2), policy, reference, tok.pad_id)
    stats = trainer.step(batch.queries, batch.responses, torch.linspace(-1, 1, len(PROMPTS)))
    assert all(torch.isfinite(torch.tensor(v)) for v in stats.values())
    assert stats["objective/kl"] == pytest.approx(0.0, abs=1e-5), "the reference equals the policy before the step"
    assert all(p.grad is None for p in reference.parameters()), "the reference got a gradient"
    assert all(torch.equal(v, ref_before[k]) for k, v in reference.state_dict().items()), "the reference moved"
    moved = [k for k, v in policy.state_dict().items() if not torch.equal(v, before[k])]
    assert "value_head.weight" in moved and any(k.startswith("lm.hf.transformer.h.") for k in moved)


# ---------------------------------------------------------------- the command and the preset


def test_imdb_preset_fills_in_only_what_the_command_line_leaves_out():
    args = parse_args(["--prompts", "imdb", "--learning-rate", "1e-4", "--iterations=3"])
    assert args.learning_rate == 1e-4 and args.iterations == 3
    assert args.kl_coef == IMDB_PRESET["kl_coef"] and args.max_new_tokens == IMDB_PRESET["max_new_tokens"]
    assert parse_args([]).learning_rate == Args().learning_rate, "the default path keeps its own settings"


def test_prompt_file_and_classifier_reward_load_from_local_paths(saved, saved_classifier, tmp_path):
    path = tmp_path / "prompts.txt"
    path.write_text("The plot was\n\n  I thought the acting  \n")
    assert prompt_file(str(path)).eval(4, seed=0) and set(prompt_file(str(path)).batch(8, 0, 0)) <= {"The plot was", "I thought the acting"}
    args = parse_args(["--model", str(saved), "--prompts", str(path), "--reward", str(saved_classifier)])
    lm, tok = load_causal_lm(str(saved))
    task = review_task(args, tok)
    assert [p.text for p in task.eval_prompts(4)] and {p.text for p in task.batch(8, 0, 0)} <= {"The plot was", "I thought the acting"}
    scores = task.scorer(["a great film.", "a dull film, badly acted.", "ok"])
    assert scores.shape == (3,) and scores.dtype == torch.float32 and torch.isfinite(scores).all()
    assert len(set(scores.tolist())) == 3


@pytest.mark.slow
def test_rlhf_command_runs_end_to_end_on_a_saved_model(saved, saved_classifier, tmp_path):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("\n".join(PROMPTS))
    cmd = [sys.executable, "-m", "workbook", "rlhf", "--impl", "solutions", "--model", str(saved), "--prompts", str(prompts),
           "--reward", str(saved_classifier), "--eos-trick", "--iterations", "2", "--batch-size", "8", "--mini-batch-size", "4",
           "--ppo-epochs", "1", "--eval-samples", "8", "--max-new-tokens", "12", "--wandb", "disabled",
           "--runs-dir", str(tmp_path / "runs"), "--run-name", "hf"]
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    out = tmp_path / "runs" / "hf"
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and all(0.0 <= r["env/finished_frac"] <= 1.0 for r in rows)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["before"]["kl"] == pytest.approx(0.0, abs=1e-4)
    lm, tok = load_causal_lm(str(out / "policy"))  # the trained policy loads back through --model
    assert lm.config.d_model == 64 and tok.pad_id != tok.eos_id


@pytest.mark.parametrize("algo", ["grpo", "rloo", "dpo"])
def test_part5_algorithms_run_unchanged_on_the_adapter(loaded, algo, tmp_path):
    from workbook.loop.task import ReviewTask
    from workbook.loop.rlhf import algo_args, train
    from workbook.rlhf.prompts import PromptPool

    lm, tok = loaded
    args = algo_args(algo, impl="solutions", iterations=1, batch_size=8, mini_batch_size=4, ppo_epochs=1, group_size=4,
                     eval_samples=4, max_new_tokens=8, wandb="disabled", runs_dir=str(tmp_path), run_name=algo, quiet=True)
    task = ReviewTask(PromptPool(PROMPTS, PROMPTS, tok=None), lambda texts: torch.tensor([float(len(t) % 3) for t in texts]))
    summary = train(args, model=lm, tok=tok, task=task)
    assert summary["iterations"] == 1 and summary["before"]["kl"] == pytest.approx(0.0, abs=1e-5)
    assert (tmp_path / algo / "policy" / "config.json").exists(), "the policy is saved in Hugging Face format"


@pytest.mark.slow
def test_several_seeds_write_a_run_each_and_their_mean_and_spread(saved, tmp_path, capsys):
    prompts, runs = tmp_path / "prompts.txt", tmp_path / "runs"
    prompts.write_text("\n".join(PROMPTS))
    base = ["--impl", "solutions", "--model", str(saved), "--prompts", str(prompts), "--iterations", "2", "--batch-size", "8",
            "--mini-batch-size", "4", "--ppo-epochs", "1", "--eval-samples", "8", "--max-new-tokens", "12", "--wandb", "disabled",
            "--runs-dir", str(runs)]
    assert main(base + ["--seeds", "0", "1", "--run-name", "multi", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "iteration=" not in out and "2/2" not in out, "--no-progress: no bar, no progress line"
    assert main(base + ["--seeds", "1", "--run-name", "single"]) == 0
    out = capsys.readouterr().out
    # captured output is no terminal: no bar, a plain progress line (every 30 s, and the last one at the end)
    assert "it/s" not in out and "%|" not in out, "no tqdm bar off a terminal"
    assert "rlhf ppo: iteration=2/2 (100%), reward=" in out, "the final progress line"

    def metrics(name: str) -> list[dict]:
        rows = [json.loads(line) for line in (runs / name / "metrics.jsonl").read_text().splitlines()]
        return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows]

    assert metrics("multi-seed1") == metrics("single"), "the same seed gives the same numbers, alone or among others"
    assert metrics("multi-seed0") != metrics("multi-seed1"), "different seeds give different runs"
    summary = json.loads((runs / "multi-seeds" / "summary.json").read_text())
    after = [json.loads((runs / f"multi-seed{s}" / "summary.json").read_text())["after"]["reward"] for s in (0, 1)]
    assert summary["seeds"] == [0, 1] and summary["after"]["reward"]["per_seed"] == after
    assert summary["after"]["reward"]["mean"] == pytest.approx(sum(after) / 2)
    assert (runs / "multi-seeds" / "curves.png").stat().st_size > 0
    assert main(base + ["--seeds", "0", "1", "--run-name", "multi"]) == 2, "existing runs are refused before anything runs"
