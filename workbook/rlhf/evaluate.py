"""Before/after numbers for an RLHF run: reward, KL to the reference, diversity, samples.

The measurement uses the reference ``batched_forward_pass`` from ``solutions/`` whatever
``--impl`` trains, so the numbers mean the same thing for everyone.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor, nn

from workbook.lm.metrics import distinct_n
from workbook.lm.tokenizer import CharTokenizer
from workbook.rlhf.data import rollout

Scorer = Callable[[list[str]], Tensor]


@torch.no_grad()
def evaluate(policy: nn.Module, reference: nn.Module, tok: CharTokenizer, scorer: Scorer, prompts: list[str], *,
             temperature: float, max_new_tokens: int, seed: int = 0, chunk: int = 64) -> dict:
    """Sample one response per prompt from ``policy.lm`` and measure it.

    Returns ``reward`` (mean score), ``kl`` (mean over samples of the summed per-token
    log π − log π_ref of the sampled tokens: a Monte-Carlo estimate of the sequence KL),
    ``distinct2``/``distinct1`` of the generated text (word n-grams, pooled), ``length``
    (mean response tokens), ``finished`` (fraction that ended with EOS), ``texts`` and
    ``scores``.
    """
    from solutions.part3_rlhf import batched_forward_pass

    was_training = policy.training
    policy.eval()
    gen = torch.Generator().manual_seed(seed)
    out = rollout(policy.lm, tok, prompts, max_new_tokens=max_new_tokens, temperature=temperature, generator=gen)
    scores = scorer(out.texts)
    kls = []
    for i in range(0, len(prompts), chunk):
        q, r = out.queries[i:i + chunk], out.responses[i:i + chunk]
        lp, _, _, masks = batched_forward_pass(policy, q, r, temperature=temperature, pad_id=tok.pad_id)
        ref_lp, _, _, _ = batched_forward_pass(reference, q, r, temperature=temperature, pad_id=tok.pad_id)
        kls.append(((lp - ref_lp) * masks).sum(dim=1))
    policy.train(was_training)
    generated = [tok.decode(r) for r in out.responses]
    return {
        "reward": scores.mean().item(),
        "kl": torch.cat(kls).mean().item(),
        "distinct1": distinct_n(generated, 1),
        "distinct2": distinct_n(generated, 2),
        "length": sum(len(r) for r in out.responses) / len(out.responses),
        "finished": sum(out.finished) / len(out.finished),
        "texts": out.texts,
        "scores": scores.tolist(),
    }
