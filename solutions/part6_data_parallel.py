"""Part 6 — data-parallel PPO: one update, computed on several processes.

With ``torchrun --nproc_per_node=N`` the same script runs N times, once per *rank*. Each rank
steps its own environments (or samples its own prompts), computes the loss on its own share
of the batch, and the ranks then agree on one gradient and take the same optimizer step, so
the weights stay identical everywhere. Theory: part0_theory.md, section 11. Three pieces:

  1. data_seed              what each rank seeds with (different data, same weights)
  2. average_gradients      the all-reduce that DistributedDataParallel does for you
  3. global_masked_whiten   whitening over the *global* batch, not each rank's share

Tests: ``pytest tests/test_part6_data_parallel.py``. They start two processes (gloo backend,
CPU) with ``torchrun`` once, run every implementation in both, and compare. Then train:
``torchrun --standalone --nproc_per_node=2 -m workbook cartpole --impl exercises`` uses your
``data_seed``, and ``… -m workbook rlhf`` your ``global_masked_whiten`` too.

Every function here must also work in a plain single process (``torch.distributed`` not
initialised): that is a world of one rank.
"""

from __future__ import annotations

from typing import Iterable

import torch
import torch.distributed as dist
from jaxtyping import Float
from torch import Tensor, nn

from workbook.distributed import world
from workbook.typecheck import Mask, typechecked

from .part3_rlhf import masked_whiten

RANK_STRIDE = 1_000_003
"""A prime larger than any seed you would type: room for a whole run of seeds between two ranks."""


# --- 1. seeds ------------------------------------------------------------------------------

def data_seed(seed: int, rank: int) -> int:
    """The seed rank ``rank`` gives its environments, action sampling and prompts.

    Requirements (the tests check these properties, not one formula):

    - rank 0 keeps ``seed``: a one-process ``torchrun`` repeats ``python -m workbook`` exactly;
    - the ranks of one run get different seeds: otherwise every rank collects the *same*
      episodes and N processes do the work of one (the batch looks N× bigger, but it is the
      same data N times, so the gradient is no better than a single process's);
    - runs with nearby seeds don't share a stream: for every ``seed`` in ``0 … 999_999`` and
      every ``rank`` in ``0 … 7`` the 8 million data seeds are all different. Rank 1 of
      ``seed=1`` must not be rank 0 of ``seed=2`` (``seed + rank`` fails that), nor rank 1 of
      ``seed=0`` rank 0 of ``seed=10_007`` (a stride of 10 007 fails that: the stride between
      ranks must exceed every seed you would type);
    - a non-negative ``int`` (gymnasium and numpy refuse negative seeds); a negative ``seed``
      or ``rank`` is a ``ValueError``.

    What is *not* seeded per rank: the weights. They start identical on every rank —
    DistributedDataParallel broadcasts rank 0's at construction; code that averages
    gradients by hand must seed the weights with the shared ``seed`` (or broadcast them).

    Hint: a stride larger than any seed you would use, e.g. :data:`RANK_STRIDE`.

    Traps:
    - ``seed`` on every rank (identical data), or ``seed + rank`` (collides across runs).
    - ``seed · (rank + 1)``: every rank of ``seed=0`` gets 0.
    """
    if seed < 0 or rank < 0:
        raise ValueError(f"seed and rank must be non-negative, got seed={seed}, rank={rank}")
    return seed + rank * RANK_STRIDE


# --- 2. gradients ----------------------------------------------------------------------------

def average_gradients(parameters: Iterable[nn.Parameter]) -> None:
    """Replace every parameter's ``.grad`` by its mean over all ranks, in place.

    Each rank has just called ``loss.backward()`` on the mean loss of *its* minibatch share;
    after this call every rank holds ``(g_0 + g_1 + … + g_{N−1}) / N``. With equal shares
    that is exactly the gradient of the mean loss over the union of the shares (the global
    minibatch), so the optimizer step that follows is the single-process step on N× the data
    — and the same on every rank, which keeps the weights identical.

    How: collect the gradients (skip parameters whose ``.grad`` is None), flatten them into
    one vector (``torch.cat`` of the flattened grads), ``dist.all_reduce`` it (the default
    op is a SUM over ranks, written into the tensor on *every* rank), divide by the world
    size, and copy the slices back into the ``.grad`` tensors. One big all-reduce instead of
    one per parameter: each collective has a fixed latency, which dominates for small
    tensors — DistributedDataParallel does the same with ~25 MB "buckets", and starts them
    while backward is still running. In a single process (not initialised) do nothing.

    Call it after ``backward()`` and *before* gradient clipping and ``optimizer.step()``:
    clipping each rank's own gradient first would clip N different vectors.

    Traps:
    - The all-reduce *sums*: forget the division and the step is N× too big (Adam hides it
      because it divides by the gradient's own scale, but gradient clipping and plain SGD
      do not).
    - ``dist.reduce`` delivers the result to one rank only; the others keep a stale
      gradient and their weights drift apart.
    - ``parameters`` may be a generator (``model.parameters()``): iterating it twice gives
      nothing the second time. Make a list first.
    - A parameter without a gradient may come *before* ones with a gradient (a frozen or
      unused layer registered first): each slice must go back to the tensor it came from, so
      pack and unpack the same list of gradients with the same offsets.
    """
    _, world_size = world()
    if world_size == 1:
        return
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    flat /= world_size
    offset = 0
    for g in grads:
        g.copy_(flat[offset:offset + g.numel()].view_as(g))
        offset += g.numel()


# --- 3. statistics over the global batch ---------------------------------------------------------

@typechecked
def global_masked_whiten(values: Float[Tensor, "*shape"], mask: Mask[Tensor, "*shape"], shift_mean: bool = True
                         ) -> Float[Tensor, "*shape"]:
    """Part 3's ``masked_whiten``, with the mean and variance of the masked-in elements of
    *all ranks together*.

        n    = Σ_ranks Σ mask                     μ = Σ_ranks Σ values·mask / n
        var  = Σ_ranks Σ (values − μ)²·mask / (n − 1)          (unbiased, over the global n)
        out  = (values − μ) · rsqrt(var + 1e-8)   (+ μ if not shift_mean)

    Each rank returns its own ``values`` transformed with the *global* μ and var, so
    concatenating the ranks' outputs gives ``masked_whiten`` of the concatenated inputs. The
    ranks may hold different numbers of masked-in elements (responses have different
    lengths). In a single process this is exactly ``masked_whiten(values, mask, shift_mean)``.

    How: all-reduce the sums you need (a SUM of ``[Σ values·mask, Σ mask]`` gives μ; a second
    SUM of ``Σ (values − μ)²·mask`` gives var). Raise a ``ValueError`` if the global n < 2.

    Why it matters: PPO whitens the advantages of the whole batch, so that a rank whose share
    happens to be all good (or all bad) samples still sees them as good (or bad). Whitened per
    rank, every rank's advantages are forced to mean 0: its best-of-a-bad-lot samples are
    pushed up.

    Traps:
    - Whitening with each rank's own statistics (no communication at all).
    - Averaging the ranks' means: with 10 tokens on one rank and 1000 on the other, the
      10 weigh as much as the 1000. Sum, then divide by the global count.
    - Centring the squares on each rank's *own* mean drops the spread between the ranks.
    """
    _, world_size = world()
    if world_size == 1:
        return masked_whiten(values, mask, shift_mean)
    sums = torch.stack([(values * mask).sum(), mask.sum()])
    dist.all_reduce(sums)
    total, n = sums[0], sums[1]
    if n < 2:
        raise ValueError(f"global_masked_whiten needs at least 2 masked-in elements over all ranks, got {n.item():g}")
    mean = total / n
    squares = ((values - mean) ** 2 * mask).sum()
    dist.all_reduce(squares)
    var = squares / (n - 1)
    whitened = (values - mean) * torch.rsqrt(var + 1e-8)
    if not shift_mean:
        whitened = whitened + mean
    return whitened
