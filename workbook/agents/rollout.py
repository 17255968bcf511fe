"""The multi-turn rollout of Part 9: the model writes, the calculator answers, the model goes on.

    from workbook.agents.rollout import run_episodes
    batch = run_episodes(lm, tok, ["37*8*6:"], impl=part9, max_new_tokens=112, temperature=1.0,
                         generator=torch.Generator().manual_seed(0))
    batch.responses[0], batch.masks[0]      # every token after the prompt, and which the model wrote
    batch.episodes[0]                        # [("model", "<calc>37*8</calc>"), ("tool", "<result>296</result>"), ...]

How (one batch of episodes, one forward step per token, the KV cache kept throughout):

1. The prompts, left-padded, go through the model once (the prefill).
2. Every step, a token is sampled for every row from the last logits. A row whose environment
   has tokens waiting takes the next of those instead, and marks it the tool's; a finished row
   takes a padding token that the cache masks out.
3. A sampled token is the model's. When the model's current turn ends with ``</calc>``, the
   learner's ``tool_reply`` (Part 9) gives the text the environment appends — its tokens wait
   for the next steps — or None: the turn budget is spent and the episode ends, cut off. EOS
   ends an episode, finished.
4. The chosen tokens of every row go through the model as one step (``kv_cache``), so the tool's
   tokens enter the context exactly as the model's do, and no prefix is ever recomputed.

Sampling draws the same random numbers whatever the environment does (a row that takes a tool's
token still draws, and discards, a sample), so a seed gives the same episodes every time. As in
``GPT.generate``, finished episodes leave the batch (and the GPT's cache) once they are a quarter
of it, so the long tail of a batch runs small. The
token budget ``max_new_tokens`` counts every token after the prompt, the tool's included; an
episode that reaches it without EOS is cut off (truncated). With ``tool=False`` nothing stops at
``</calc>``: the model writes everything, its own ``<result>`` values included (the same model,
the calculator taken away).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType

import torch
from torch import Tensor

from workbook.lm.model import GPT, KVCache, _sample
from workbook.lm.tokenizer import pad_batch
from workbook.rlhf.data import Rollout, encode_queries

STOP = "</calc>"


@dataclass
class AgentRollout(Rollout):
    """A :class:`Rollout` of multi-turn episodes: ``by_model[b]`` is True where the model wrote the token.

    ``masks`` (what the trainers mask with) is ``by_model``, or None when the tool's tokens are
    to be trained on as if the model had written them (the ablation of ``--no-mask-tool-tokens``).
    """

    by_model: list[Tensor] | None = None
    episodes: list[list[tuple[str, str]]] | None = None
    """Per episode, its turns in order: ("model", text) and ("tool", text)."""
    calls: list[int] | None = None
    """Tool calls per episode."""
    invalid_calls: list[int] | None = None
    """Calls whose result was an error, per episode."""


def _new_cache(lm, capacity: int):
    """The model's incremental-decoding cache: the GPT's KVCache, or a Hugging Face adapter's own."""
    return KVCache(capacity=capacity) if isinstance(lm, GPT) else lm.new_kv_cache()


@torch.no_grad()
def run_episodes(lm, tok, prompts: list[str], *, impl: ModuleType, max_new_tokens: int, temperature: float,
                 generator: torch.Generator, tool: bool = True, max_calls: int = 4, chunk: int = 256,
                 mask_tool_tokens: bool = True) -> AgentRollout:
    """One episode per prompt (see the module docstring); ``impl`` is the part9_agents module whose ``tool_reply`` runs."""
    device = next(lm.parameters()).device
    queries = [q.to(device) for q in encode_queries(prompts, tok)]
    out: dict[str, list] = {k: [] for k in ("responses", "masks", "episodes", "calls", "invalid", "finished")}
    for i in range(0, len(queries), chunk):
        _episodes(lm, tok, queries[i:i + chunk], out, impl=impl, max_new_tokens=max_new_tokens, temperature=temperature,
                  generator=generator, tool=tool, max_calls=max_calls)
    completions = ["".join(text for _, text in ep) for ep in out["episodes"]]
    return AgentRollout(prompts, queries, out["responses"], [p + c for p, c in zip(prompts, completions)], completions,
                        out["finished"], masks=out["masks"] if mask_tool_tokens else None, by_model=out["masks"], episodes=out["episodes"], calls=out["calls"],
                        invalid_calls=out["invalid"])


def _episodes(lm, tok, queries: list[Tensor], out: dict, *, impl, max_new_tokens, temperature, generator, tool, max_calls):
    was_training = lm.training
    lm.eval()
    try:
        ids, mask = pad_batch(queries, side="left", pad_id=tok.pad_id)
        room = min(max_new_tokens, lm.config.block_size - ids.shape[1])
        B = len(queries)
        cache = _new_cache(lm, ids.shape[1] + room)
        logits = lm(ids, mask, kv_cache=cache)[:, -1]
        tokens: list[list[int]] = [[] for _ in range(B)]
        by_model: list[list[bool]] = [[] for _ in range(B)]
        turns: list[list[tuple[str, str]]] = [[] for _ in range(B)]
        turn = [""] * B          # what the model has written since the tool last spoke
        waiting: list[list[int]] = [[] for _ in range(B)]  # the tool's tokens still to feed, in order
        reply_ids: list[list[int]] = [[] for _ in range(B)]  # the last reply's tokens (a cut-off one is shown as fed)
        calls, invalid = [0] * B, [0] * B
        done, finished = [False] * B, [False] * B
        text_of: dict[int, str] = {}
        rows = list(range(B))  # the episodes still in the batch, in the cache's row order
        shrink = isinstance(cache, KVCache)  # the GPT's cache can drop finished rows (a Hugging Face one keeps them)
        for _ in range(room):
            sampled = _sample(logits, temperature, None, generator).tolist()
            step, live = [], []
            for i, b in enumerate(rows):
                if done[b]:
                    step.append(tok.pad_id)
                    live.append(False)
                    continue
                live.append(True)
                if waiting[b]:
                    t = waiting[b].pop(0)
                    step.append(t)
                    tokens[b].append(t)
                    by_model[b].append(False)
                    continue
                t = sampled[i]
                step.append(t)
                tokens[b].append(t)
                by_model[b].append(True)
                if t == tok.eos_id:
                    done[b] = finished[b] = True
                    if turn[b]:
                        turns[b].append(("model", turn[b]))
                    continue
                if t not in text_of:
                    text_of[t] = tok.decode([t])
                turn[b] += text_of[t]
                if tool and turn[b].endswith(STOP):
                    reply = impl.tool_reply(turn[b], calls[b], max_calls)
                    turns[b].append(("model", turn[b]))
                    turn[b] = ""
                    if reply is None:  # the turn budget is spent: cut off here
                        done[b] = True
                        continue
                    calls[b] += 1
                    invalid[b] += "error:" in reply
                    turns[b].append(("tool", reply))
                    waiting[b] = tok.encode(reply, add_bos=False)
                    reply_ids[b] = list(waiting[b])
            if all(done[b] for b in rows):
                break
            if shrink and sum(live) <= 3 * len(rows) // 4:  # as GPT.generate: the long tail of a batch runs small
                keep = [i for i, alive in enumerate(live) if alive]
                cache.keep(torch.tensor(keep, device=ids.device))
                rows, step, live = [rows[i] for i in keep], [step[i] for i in keep], [True] * len(keep)
            nxt = torch.tensor(step, dtype=torch.long, device=ids.device)[:, None]
            logits = lm(nxt, torch.tensor(live, device=ids.device)[:, None], kv_cache=cache)[:, -1]
    finally:
        lm.train(was_training)
    for b in range(B):
        if not done[b] and turn[b]:
            turns[b].append(("model", turn[b]))
        if waiting[b]:  # the token budget ran out inside the tool's reply: show what was fed
            fed = len(reply_ids[b]) - len(waiting[b])
            if fed:
                turns[b][-1] = ("tool", tok.decode(reply_ids[b][:fed]))
            else:  # it ran out on the model's </calc>: the reply never reached the model, so no call was made
                _, reply = turns[b].pop()
                calls[b] -= 1
                invalid[b] -= "error:" in reply
        out["responses"].append(torch.tensor(tokens[b], dtype=torch.long, device=ids.device))
        out["masks"].append(torch.tensor(by_model[b], dtype=torch.bool))
        out["episodes"].append(turns[b])
        out["calls"].append(calls[b])
        out["invalid"].append(invalid[b])
        out["finished"].append(finished[b])
