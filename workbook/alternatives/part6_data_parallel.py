"""Correct alternatives to the Part 6 exercises (see workbook/alternatives/__init__.py).

Each is written from the exercise's docstring alone, in a style the reference does not use.
"""

from __future__ import annotations

from functools import partial

import torch
import torch.distributed as dist

from solutions.part3_rlhf import masked_whiten
from workbook.alternatives import alternative
from workbook.distributed import world

part6 = partial(alternative, "part6_data_parallel")


@part6("data_seed", "rank_zero_then_large_offsets",
       "rank 0 returns seed, every other rank seed + rank · 2³¹ (any stride beyond the seeds in use works); "
       "negative input refused with min()")
def data_seed_large_offsets(seed, rank):
    if min(seed, rank) < 0:
        raise ValueError("negative seed or rank")
    return seed if rank == 0 else seed + rank * 2 ** 31


@part6("data_seed", "rank_in_the_bits_above_the_seed",
       "the rank in the bits above 2²⁰ (every promised seed < 10⁶ < 2²⁰) with a bitwise or; negative input "
       "refused by an explicit check on each")
def data_seed_rank_bits(seed, rank):
    if seed < 0:
        raise ValueError(f"negative seed {seed}")
    if rank < 0:
        raise ValueError(f"negative rank {rank}")
    return seed | (rank << 20)


@part6("average_gradients", "one_all_reduce_per_parameter",
       "one all_reduce per parameter and an in-place division (slower: a collective per tensor, but the same result)")
def average_gradients_per_parameter(parameters):
    _, world_size = world()
    if world_size == 1:
        return
    for p in list(parameters):
        if p.grad is not None:
            dist.all_reduce(p.grad)
            p.grad.div_(world_size)


@part6("global_masked_whiten", "one_pass_moments",
       "one all_reduce of [Σ x·m, Σ x²·m, Σ m]; var = (Σx² − n·μ²)/(n − 1) in float64")
def whiten_one_pass(values, mask, shift_mean=True):
    _, world_size = world()
    if world_size == 1:
        return masked_whiten(values, mask, shift_mean)
    v, m = values.double(), mask.double()
    sums = torch.stack([(v * m).sum(), (v * v * m).sum(), m.sum()])
    dist.all_reduce(sums)
    n = sums[2]
    if n < 2:
        raise ValueError("need at least 2 masked-in elements over all ranks")
    mean = sums[0] / n
    var = (sums[1] - n * mean ** 2) / (n - 1)
    out = (v - mean) * torch.rsqrt(var + 1e-8)
    return (out if shift_mean else out + mean).to(values.dtype)
