"""Part 9's given multi-turn rollout (``workbook/agents/rollout.py``): who wrote which token, the budgets, the cache.

Not graded. Two models: a scripted one (it writes exactly what a rule says, given everything
after the prompt — the tool's replies included — so each case is exact) and Part 3's GPT
pretrained for a few seconds on calculator traces (for the seeds and the KV cache).
"""

from __future__ import annotations

import dataclasses
import types
from types import SimpleNamespace

import pytest
import torch
from torch import nn

import solutions.part5_beyond_ppo as sol5
import solutions.part9_agents as sol9
from solutions.part3_rlhf import batched_forward_pass
from workbook.agents import rollout as rollout_module
from workbook.agents.base import pretrain_agent
from workbook.agents.rollout import run_episodes
from workbook.agents.task import Triple, make_problems, trace
from workbook.lm.pretrain import TINY_ARGS
from workbook.reason.base import reasoner_tokenizer

TINY_AGENT = dataclasses.replace(TINY_ARGS, n_reviews=2000, n_heldout=50, steps=100, block_size=128, d_model=32,
                                 n_layer=1, n_head=2, lr=1e-2)
PROMPT = "37*8*6:"
RIGHT = trace(Triple(37, 8, 6), "right")  # <calc>37*8</calc><result>296</result><calc>296*6</calc><result>1776</result><answer>1776</answer>
CALL = "<calc>1+1</calc>"


class ScriptCache:
    """What a scripted model has been fed, per row (real tokens only): the rollout's cache for it."""

    def __init__(self):
        self.rows: list[list[int]] | None = None


class ScriptedLM(nn.Module):
    """Writes ``rule(text)`` next, ``text`` being everything fed after the prompt (the model's and the tool's); None: EOS.

    (A rule of two arguments gets ``(prompt, text)``.)

    Not a GPT, so the rollout takes its cache from :meth:`new_kv_cache` (as for a Hugging Face
    model): the cache records every token the rollout fed, which is how the rule sees the tool.
    """

    def __init__(self, tok, rule, block_size: int = 512):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(()))  # a device for the rollout to read
        self.config = SimpleNamespace(block_size=block_size)
        self.tok, self.rule = tok, rule
        self.two_args = rule.__code__.co_argcount == 2

    @staticmethod
    def new_kv_cache() -> ScriptCache:
        return ScriptCache()

    def forward(self, ids, mask=None, *, kv_cache: ScriptCache):
        mask = torch.ones_like(ids, dtype=torch.bool) if mask is None else mask.bool()
        B, T = ids.shape
        if kv_cache.rows is None:
            kv_cache.rows = [[] for _ in range(B)]
        logits = torch.full((B, T, self.tok.vocab_size), -1e4)  # the chosen token gets probability 1, exactly
        for b in range(B):
            kv_cache.rows[b] += [t for t, m in zip(ids[b].tolist(), mask[b].tolist()) if m]
            prompt, colon, after = self.tok.decode(kv_cache.rows[b]).partition(":")
            nxt = self.rule(prompt + colon, after) if self.two_args else self.rule(after)
            logits[b, -1, self.tok.eos_id if nxt is None else self.tok.encode(nxt, add_bos=False)[0]] = 0.0
        return logits


def follow(target: str):
    """A rule: write ``target`` (while what was fed agrees with it), then EOS."""
    return lambda text: target[len(text)] if len(text) < len(target) and target.startswith(text) else None


def call_forever(text: str) -> str:
    """A rule: after every result (and at the start), call the calculator again."""
    written = text.rsplit("</result>", 1)[-1]
    return CALL[len(written) % len(CALL)]


def spans_of_results(text: str) -> list[bool]:
    """Per character of ``text``: False inside ``<result>…</result>`` (the tool's writing), else True."""
    out = [True] * len(text)
    at = 0
    while (start := text.find("<result>", at)) >= 0:
        end = text.index("</result>", start) + len("</result>")
        out[start:end] = [False] * (end - start)
        at = end
    return out


@pytest.fixture(scope="module")
def tok():
    return reasoner_tokenizer()


@pytest.fixture(scope="module")
def tiny():
    model, tok, _ = pretrain_agent(TINY_AGENT, progress=False)
    return model, tok


def episodes(lm, tok, prompts, impl=sol9, seed=0, **kw):
    kw = {"max_new_tokens": 112, "temperature": 1.0} | kw
    return run_episodes(lm, tok, prompts, impl=impl, generator=torch.Generator().manual_seed(seed), **kw)


# --- who wrote which token (scripted) ----------------------------------------------------------------

def test_the_tools_replies_are_fed_and_marked_as_the_tools(tok):
    batch = episodes(ScriptedLM(tok, follow(RIGHT)), tok, [PROMPT])
    assert batch.episodes[0] == [("model", "<calc>37*8</calc>"), ("tool", "<result>296</result>"),
                                 ("model", "<calc>296*6</calc>"), ("tool", "<result>1776</result>"),
                                 ("model", "<answer>1776</answer>")]
    response, by_model = batch.responses[0], batch.by_model[0]
    assert tok.decode(response) == RIGHT and response[-1].item() == tok.eos_id
    assert by_model.dtype == torch.bool and len(by_model) == len(response) == len(RIGHT) + 1
    assert by_model.tolist() == spans_of_results(RIGHT) + [True], "the tool's characters False, the model's (and its EOS) True"
    assert batch.finished == [True] and batch.calls == [2] and batch.invalid_calls == [0]
    assert batch.completions == [RIGHT] and batch.texts == [PROMPT + RIGHT]
    assert torch.equal(batch.masks[0], by_model)


def test_a_bad_call_is_answered_with_the_error_and_counted(tok):
    target = "<calc>3**2</calc><result>error: syntax</result><answer>9</answer>"
    batch = episodes(ScriptedLM(tok, follow(target)), tok, [PROMPT])
    (who, reply) = batch.episodes[0][1]
    assert who == "tool" and reply == sol9.tool_reply("<calc>3**2</calc>", 0, 4) and reply.startswith("<result>error: ")
    assert batch.calls == [1] and batch.invalid_calls == [1]


def test_the_impls_tool_reply_is_the_one_called_with_the_turn_and_the_budget(tok):
    seen = []

    def tool_reply(turn, calls_made, max_calls):
        seen.append((turn, calls_made, max_calls))
        return f"<result>{7 + calls_made}</result>"

    impl = types.SimpleNamespace(tool_reply=tool_reply)
    target = "ok <calc>1</calc><result>7</result>then<calc>2</calc><result>8</result><answer>8</answer>"
    batch = episodes(ScriptedLM(tok, follow(target)), tok, [PROMPT], impl=impl, max_calls=3)
    assert seen == [("ok <calc>1</calc>", 0, 3), ("then<calc>2</calc>", 1, 3)], "each turn since the tool last spoke, once"
    assert [text for who, text in batch.episodes[0] if who == "tool"] == ["<result>7</result>", "<result>8</result>"]
    assert batch.finished == [True] and batch.calls == [2]


def test_the_calculator_task_calls_the_learners_tool_reply(tok, monkeypatch):
    from workbook.loop.verifiable import CalculatorTask

    seen = []

    def spy(turn, calls_made, max_calls):
        seen.append(turn)
        return "<result>5</result>"

    monkeypatch.setattr(sol9, "tool_reply", spy)
    task = CalculatorTask("solutions", max_calls=2)
    batch = task.rollout(ScriptedLM(tok, follow("<calc>2+3</calc><result>5</result><answer>5</answer>")), tok, [PROMPT],
                         max_new_tokens=112, temperature=1.0, generator=torch.Generator().manual_seed(0), chunk=8)
    assert seen == ["<calc>2+3</calc>"] and batch.episodes[0][1] == ("tool", "<result>5</result>")


# --- the budgets ----------------------------------------------------------------------------------

@pytest.mark.parametrize("max_calls", [0, 1, 3])
def test_the_turn_budget_ends_the_episode_unanswered_and_truncated(tok, max_calls):
    batch = episodes(ScriptedLM(tok, call_forever), tok, [PROMPT, "5*5*5:"], max_calls=max_calls, max_new_tokens=200)
    reply = "<result>2</result>"
    expected = [("model", CALL), ("tool", reply)] * max_calls + [("model", CALL)]
    for b in range(2):
        assert batch.episodes[b] == expected
        assert tok.decode(batch.responses[b]) == (CALL + reply) * max_calls + CALL, "nothing fed after the last call"
        assert batch.by_model[b].tolist() == [True] * len(CALL) + ([False] * len(reply) + [True] * len(CALL)) * max_calls
        assert batch.responses[b][-1].item() != tok.eos_id
    assert batch.calls == [max_calls] * 2 and batch.finished == [False, False]


def test_the_token_budget_cuts_an_episode_inside_the_tools_reply(tok):
    first = "<calc>37*8</calc>"
    batch = episodes(ScriptedLM(tok, follow(RIGHT)), tok, [PROMPT], max_new_tokens=len(first) + 5)
    assert tok.decode(batch.responses[0]) == first + "<resu"
    assert batch.episodes[0] == [("model", first), ("tool", "<resu")], "the episode shows what was fed, not the whole reply"
    assert batch.by_model[0].tolist() == [True] * len(first) + [False] * 5
    assert batch.finished == [False] and batch.completions == [first + "<resu"]


@pytest.mark.parametrize("budget", [10, 17, 40])
def test_the_token_budget_counts_every_token_after_the_prompt(tok, budget):
    batch = episodes(ScriptedLM(tok, follow(RIGHT)), tok, [PROMPT], max_new_tokens=budget)
    assert len(batch.responses[0]) == budget and tok.decode(batch.responses[0]) == RIGHT[:budget]
    assert batch.by_model[0].tolist() == spans_of_results(RIGHT)[:budget]
    assert "".join(text for _, text in batch.episodes[0]) == RIGHT[:budget] == batch.completions[0]
    assert batch.finished == [False]


def test_the_block_size_bounds_the_episode_too(tok):
    lm = ScriptedLM(tok, follow(RIGHT), block_size=len(PROMPT) + 1 + 20)  # BOS + prompt, then 20 tokens of room
    batch = episodes(lm, tok, [PROMPT], max_new_tokens=112)
    assert len(batch.responses[0]) == 20 and batch.finished == [False]


def test_without_the_tool_nothing_is_answered_and_the_model_writes_everything(tok):
    batch = episodes(ScriptedLM(tok, follow(RIGHT)), tok, [PROMPT], tool=False)
    assert batch.episodes[0] == [("model", RIGHT)] and batch.calls == [0] and batch.invalid_calls == [0]
    assert batch.by_model[0].all() and len(batch.by_model[0]) == len(RIGHT) + 1 and batch.finished == [True]
    forever = episodes(ScriptedLM(tok, call_forever), tok, [PROMPT], tool=False, max_calls=0, max_new_tokens=40)
    assert forever.calls == [0] and forever.episodes[0] == [("model", (CALL * 3)[:40])], "no turn budget without a tool"


def test_masks_are_none_only_when_the_tools_tokens_are_trained_on(tok):
    for mask_tool_tokens in (True, False):
        batch = episodes(ScriptedLM(tok, follow(RIGHT)), tok, [PROMPT, "5*5*5:"], mask_tool_tokens=mask_tool_tokens)
        assert (batch.masks is None) == (not mask_tool_tokens)
        assert batch.by_model is not None and [m.tolist() for m in batch.by_model][0] == spans_of_results(RIGHT) + [True]
        if mask_tool_tokens:
            assert all(torch.equal(m, b) for m, b in zip(batch.masks, batch.by_model))


def test_rows_of_one_batch_do_not_disturb_each_other(tok):
    """Rows at different turns, one finished early (padding fed to the cache): each episode as if alone."""
    scripts = {"37*8*6:": follow(RIGHT), "5*5*5:": follow("<answer>1</answer>"), "9*9*9:": call_forever}

    def rule(prompt, text):
        return scripts[prompt](text)

    prompts = list(scripts)
    together = episodes(ScriptedLM(tok, rule), tok, prompts, max_calls=2, max_new_tokens=100)
    for b, prompt in enumerate(prompts):
        alone = episodes(ScriptedLM(tok, rule), tok, [prompt], max_calls=2, max_new_tokens=100)
        assert together.episodes[b] == alone.episodes[0] and torch.equal(together.responses[b], alone.responses[0])
        assert torch.equal(together.by_model[b], alone.by_model[0]) and together.calls[b] == alone.calls[0]
    assert together.calls == [2, 0, 2] and together.finished == [True, True, False]


# --- the tiny GPT: seeds and the KV cache ---------------------------------------------------------

def test_the_same_seed_gives_the_same_episodes(tiny):
    model, tok = tiny
    prompts = [p.prompt for p in make_problems("train", 12, 0)]
    a, b, c = (episodes(model, tok, prompts, seed=s) for s in (0, 0, 1))
    assert a.episodes == b.episodes and a.calls == b.calls and a.finished == b.finished
    assert all(torch.equal(x, y) for x, y in zip(a.responses, b.responses))
    assert all(torch.equal(x, y) for x, y in zip(a.by_model, b.by_model))
    assert a.episodes != c.episodes, "another seed, other episodes"
    assert sum(a.calls) > 0 and not all(m.all() for m in a.by_model), "the tiny model calls the tool: the test sees replies"


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_the_sampling_distribution_is_the_models_given_the_whole_episode(tiny, monkeypatch, temperature):
    """The KV cache, the tool's tokens fed through it and left padding change nothing: the distribution
    each token was drawn from equals the one Part 3's ``batched_forward_pass`` computes afresh over
    query + response (the log-probs the trainers use), at every position, the model's and the tool's."""
    model, tok = tiny
    drawn = []  # per step, {episode: the log-distribution it was drawn from}
    rows = []   # the episodes in the cache's row order (finished ones leave the batch: KVCache.keep)

    def record(logits, temp, top_k, generator):
        if not rows:
            rows.extend(range(logits.shape[0]))
        lp = torch.log_softmax(logits / temp, dim=-1).clone()
        drawn.append({b: lp[i] for i, b in enumerate(rows)})
        return real(logits, temp, top_k, generator)

    def keep(self, kept):
        rows[:] = [rows[i] for i in kept.tolist()]
        return real_keep(self, kept)

    real, real_keep = rollout_module._sample, rollout_module.KVCache.keep
    monkeypatch.setattr(rollout_module, "_sample", record)
    monkeypatch.setattr(rollout_module.KVCache, "keep", keep)
    prompts = [p.prompt for p in make_problems("train", 10, 3)] + ["5*5*5:", "123*45*6:"]  # three prompt lengths
    batch = episodes(model, tok, prompts, temperature=temperature)
    assert sum(batch.calls) > 0 and len({len(r) for r in batch.responses}) > 1, "tool replies, and rows that end early"
    logprobs, logits, _, masks = batched_forward_pass(sol5.LanguageModelPolicy(model), batch.queries, batch.responses,
                                                      temperature=temperature, pad_id=tok.pad_id, return_logits=True)
    fresh = torch.log_softmax(logits, dim=-1)
    for b, response in enumerate(batch.responses):
        for t in range(len(response)):
            torch.testing.assert_close(drawn[t][b], fresh[b, t], atol=2e-4, rtol=0)
        model_lp = logprobs[b, :len(response)][batch.by_model[b]]
        sampled = torch.stack([drawn[t][b][response[t]] for t in range(len(response))])[batch.by_model[b]]
        torch.testing.assert_close(model_lp, sampled, atol=2e-4, rtol=0)


def test_greedy_episodes_are_what_the_whole_prefix_recomputed_gives(tiny):
    """At temperature 0 every model token is the argmax of the model run afresh on everything before it."""
    model, tok = tiny
    prompts = [p.prompt for p in make_problems("train", 6, 5)] + ["5*5*5:"]
    batch = episodes(model, tok, prompts, temperature=0.0)
    assert sum(batch.calls) > 0
    model.eval()
    with torch.no_grad():
        for q, r, by_model in zip(batch.queries, batch.responses, batch.by_model):
            logits = model(torch.cat([q, r])[None])[0, len(q) - 1:-1]
            best = logits.max(dim=-1).values
            chosen = logits.gather(1, r[:, None]).squeeze(1)
            assert (chosen[by_model] >= best[by_model] - 1e-4).all(), "a model token that the full recomputation does not pick"


def test_a_hugging_face_models_cache_keeps_the_tools_tokens_in_context(tmp_path, monkeypatch):
    """The HF adapter's ``kv_cache`` (a random tiny GPT-2): a tool reply after *every* model token
    (the stop string made empty), left padding and rows that end at different steps; the distributions drawn
    from equal those of the whole episode recomputed."""
    pytest.importorskip("transformers")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from workbook.hf.model import load_causal_lm
    from workbook.hf.tiny import save_tiny_gpt2

    lm, tok = load_causal_lm(str(save_tiny_gpt2(tmp_path / "gpt2")))
    drawn = []
    real = rollout_module._sample

    def record(logits, temp, top_k, generator):
        drawn.append(torch.log_softmax(logits / temp, dim=-1).clone())
        return real(logits, temp, top_k, generator)

    monkeypatch.setattr(rollout_module, "_sample", record)
    monkeypatch.setattr(rollout_module, "STOP", "")  # every model token ends a turn: the tool answers each

    def tool_reply(turn, calls, max_calls):  # replies of different lengths: the rows drift apart, some end early
        return None if calls >= max_calls else "<result>" + "42" * (1 + len(turn) % 4) + "</result>"

    impl = types.SimpleNamespace(tool_reply=tool_reply)
    prompts = ["37*8*6:", "5*5*5:", "the food was good and", "it was"]
    batch = episodes(lm, tok, prompts, impl=impl, max_calls=3, max_new_tokens=60)
    for m, episode in zip(batch.by_model, batch.episodes):
        replies = [len(tok.encode(text, add_bos=False)) for who, text in episode if who == "tool"]
        assert m.tolist() == sum(([True] + [False] * n for n in replies), []) + [True], "model, reply, …, the call past the budget"
    assert len({len(r) for r in batch.responses}) > 1
    _, logits, _, _ = batched_forward_pass(sol5.LanguageModelPolicy(lm), batch.queries, batch.responses, temperature=1.0,
                                           pad_id=tok.pad_id, return_logits=True)
    fresh = torch.log_softmax(logits, dim=-1)
    for b, response in enumerate(batch.responses):
        for t in range(len(response)):
            keep = fresh[b, t] > -1e3  # the adapter's never-sampled PAD column
            torch.testing.assert_close(drawn[t][b][keep], fresh[b, t][keep], atol=2e-4, rtol=0)
