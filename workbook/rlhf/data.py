"""Prompts in, (query ids, response ids, texts) out: the rollout half of an RLHF iteration."""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Callable, Protocol, runtime_checkable

import torch
from torch import Tensor, nn

from workbook.lm.corpus import review_prompts
from workbook.lm.model import GPT
from workbook.lm.tokenizer import CharTokenizer, pad_batch
from workbook.runs import load_part


def load_part3(impl: str) -> ModuleType:
    """``exercises.part3_rlhf`` or ``solutions.part3_rlhf``."""
    return load_part(impl, "part3_rlhf")


def encode_queries(prompts: list[str], tok: CharTokenizer) -> list[Tensor]:
    """Each prompt as a 1-D tensor: BOS + its characters (no EOS: the review goes on)."""
    return [torch.tensor(tok.encode(p, add_bos=True), dtype=torch.long) for p in prompts]


@dataclass
class Rollout:
    prompts: list[str]
    queries: list[Tensor]
    responses: list[Tensor]
    texts: list[str]
    """prompt + decoded response (specials dropped): what the reward sees."""
    completions: list[str]
    """The decoded responses alone (specials dropped)."""
    finished: list[bool]
    """Whether the response ended with EOS (False: cut off at max_new_tokens)."""
    masks: list[Tensor] | None = None
    """Per response, True where the policy wrote the token (a tool's tokens are False); None: every token is the policy's."""
    sampler_logprobs: Tensor | None = None
    """Part 10: the sampler's log-probs of the response tokens, ``[batch, resp]`` right-padded; None: the policy itself sampled."""


@torch.no_grad()
def rollout(lm: GPT, tok: CharTokenizer, prompts: list[str], *, max_new_tokens: int, temperature: float,
            generator: torch.Generator, chunk: int = 64, sampler_logprobs: bool = False) -> Rollout:
    """Sample one response per prompt from ``lm`` (KV-cached, left-padded queries, on ``lm``'s device).

    ``sampler_logprobs`` (Part 10): also keep the log-prob of each sampled token under the
    distribution it was drawn from (logits / temperature), as an inference engine returns them —
    no second forward pass; float32, ``[batch, resp]`` right-padded with 0.
    """
    device = next(lm.parameters()).device
    queries = [q.to(device) for q in encode_queries(prompts, tok)]
    responses: list[Tensor] = []
    logprobs: list[Tensor] = []
    for i in range(0, len(queries), chunk):
        ids, mask = pad_batch(queries[i:i + chunk], side="left", pad_id=tok.pad_id)
        room = lm.config.block_size - ids.shape[1]
        out = lm.generate(ids, mask, max_new_tokens=min(max_new_tokens, room), eos_id=tok.eos_id, pad_id=tok.pad_id,
                          temperature=temperature, generator=generator, return_logits=sampler_logprobs)
        if sampler_logprobs:
            out, logits = out
            logprobs += [torch.log_softmax(z.float() / temperature, dim=-1).gather(1, r[:, None]).squeeze(1).cpu()
                         for r, z in zip(out, logits)]
        responses += out
    completions = [tok.decode(r) for r in responses]
    texts = [p + c for p, c in zip(prompts, completions)]
    finished = [bool(r[-1] == tok.eos_id) for r in responses]
    batch = Rollout(prompts, queries, responses, texts, completions, finished)
    if sampler_logprobs:
        batch.sampler_logprobs = nn.utils.rnn.pad_sequence(logprobs, batch_first=True)
    return batch


@runtime_checkable
class OwnRollout(Protocol):
    """A task that writes its own responses instead of :func:`rollout`'s one turn (Part 9: multi-turn, with a tool).

    The LM loop (``workbook/loop/task.py``) and Part 10's samplers call it through
    :func:`own_rollout`. ``texts``: the prompts' texts, in the batch's order. It returns a
    :class:`Rollout` as :func:`rollout` makes one, with ``masks`` where some response tokens are
    not the model's, and draws only from ``generator``.
    """

    def rollout(self, lm: nn.Module, tok, texts: list[str], *, max_new_tokens: int, temperature: float,
                generator: torch.Generator, chunk: int) -> Rollout: ...


def own_rollout(task) -> Callable[..., Rollout] | None:
    """``task``'s own rollout (an :class:`OwnRollout`), or None when it takes :func:`rollout`'s one turn."""
    return task.rollout if isinstance(task, OwnRollout) else None


def prompt_batch(batch_size: int, seed: int, iteration: int) -> list[str]:
    """The prompts of one iteration: fresh review openers, seeded per (seed, iteration)."""
    return review_prompts(batch_size, seed=1_000_003 * (seed + 1) + iteration)


def eval_prompts(n: int, seed: int = 12345) -> list[str]:
    """A fixed set of held-out prompts for before/after comparisons."""
    return review_prompts(n, seed=seed)


class ReviewPrompts:
    """The default prompt source (``--prompts reviews``): the functions above, as an object."""

    batch = staticmethod(prompt_batch)
    eval = staticmethod(eval_prompts)


REVIEW_PROMPTS = ReviewPrompts()


def freeze(model: nn.Module) -> nn.Module:
    for p in model.parameters():
        p.requires_grad_(False)
    return model.eval()
