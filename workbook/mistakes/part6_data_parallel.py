"""Known-wrong versions of the Part 6 exercises (see workbook/mistakes/__init__.py)."""

from __future__ import annotations

from functools import partial

import torch
import torch.distributed as dist

from solutions.part3_rlhf import masked_whiten
from workbook.distributed import world
from workbook.mistakes import mistake

part6 = partial(mistake, "part6_data_parallel")


# --- data_seed ------------------------------------------------------------------------------

@part6("data_seed", "same_seed_on_every_rank",
       "every rank seeds its environments with the same seed, so all ranks collect the same data")
def data_seed_same(seed, rank):
    return seed


@part6("data_seed", "seed_plus_rank",
       "the data seed is seed + rank, so rank 1 of seed s replays rank 0 of seed s + 1")
def data_seed_plus_rank(seed, rank):
    return seed + rank


@part6("data_seed", "seed_times_rank_plus_one",
       "the data seed is seed · (rank + 1), so with seed 0 every rank gets 0")
def data_seed_times(seed, rank):
    return seed * (rank + 1)


@part6("data_seed", "stride_below_the_seeds_in_use",
       "the rank stride (10 007) is smaller than the seeds in use, so rank 1 of seed s replays rank 0 of seed s + 10 007")
def data_seed_small_stride(seed, rank):
    if seed < 0 or rank < 0:
        raise ValueError("negative seed or rank")
    return seed + rank * 10_007


@part6("data_seed", "rank_zero_shifted",
       "rank 0 does not keep the run's seed, so one process under torchrun differs from python -m workbook")
def data_seed_shifted(seed, rank):
    return seed + (rank + 1) * 1_000_003


@part6("data_seed", "negative_input_accepted",
       "a negative seed or rank was not refused (the data seed can come out negative, which gymnasium and numpy reject)")
def data_seed_unchecked(seed, rank):
    return seed + rank * 1_000_003


# --- average_gradients ----------------------------------------------------------------------

def _grads(parameters):
    return [p.grad for p in parameters if p.grad is not None]


@part6("average_gradients", "summed_not_averaged",
       "the gradients were all-reduced (a sum over ranks) but not divided by the world size")
def average_gradients_sum(parameters):
    _, world_size = world()
    if world_size == 1:
        return
    for g in _grads(parameters):
        dist.all_reduce(g)


@part6("average_gradients", "reduce_to_rank_zero_only",
       "dist.reduce was used: only rank 0 receives the average, the other ranks keep stale gradients")
def average_gradients_reduce(parameters):
    _, world_size = world()
    if world_size == 1:
        return
    grads = _grads(parameters)
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.reduce(flat, dst=0)
    if dist.get_rank() == 0:
        flat /= world_size
        offset = 0
        for g in grads:
            g.copy_(flat[offset:offset + g.numel()].view_as(g))
            offset += g.numel()


@part6("average_gradients", "generator_consumed_twice",
       "the parameters generator was iterated twice, so the averaged gradients were never written back")
def average_gradients_generator(parameters):
    _, world_size = world()
    if world_size == 1:
        return
    parameters = iter(parameters)  # what model.parameters() hands you
    flat = torch.cat([p.grad.reshape(-1) for p in parameters if p.grad is not None])
    dist.all_reduce(flat)
    flat /= world_size
    offset = 0
    for p in parameters:  # already exhausted: nothing happens
        if p.grad is not None:
            p.grad.copy_(flat[offset:offset + p.grad.numel()].view_as(p.grad))
            offset += p.grad.numel()


@part6("average_gradients", "slices_shifted_by_a_parameter_without_grad",
       "parameters without a gradient were packed as zeros but skipped without advancing the offset when copying "
       "back, so after one of them every slice lands in the wrong tensor")
def average_gradients_shifted(parameters):
    _, world_size = world()
    if world_size == 1:
        return
    params = list(parameters)
    flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in params])
    dist.all_reduce(flat)
    flat /= world_size
    offset = 0
    for p in params:
        if p.grad is None:
            continue  # ...but its zeros are still in flat
        p.grad.copy_(flat[offset:offset + p.grad.numel()].view_as(p.grad))
        offset += p.grad.numel()


# --- global_masked_whiten -------------------------------------------------------------------

@part6("global_masked_whiten", "whitened_per_rank",
       "each rank whitened with its own mean and variance (no all-reduce)")
def whiten_per_rank(values, mask, shift_mean=True):
    return masked_whiten(values, mask, shift_mean)


@part6("global_masked_whiten", "mean_of_rank_means",
       "the ranks' means and variances were averaged, so a rank with few tokens weighs as much as one with many")
def whiten_mean_of_means(values, mask, shift_mean=True):
    _, world_size = world()
    n = mask.sum()
    mean = (values * mask).sum() / n
    var = ((values - mean) ** 2 * mask).sum() / (n - 1)
    stats = torch.stack([mean, var])
    if world_size > 1:
        dist.all_reduce(stats)
        stats /= world_size
    whitened = (values - stats[0]) * torch.rsqrt(stats[1] + 1e-8)
    return whitened if shift_mean else whitened + stats[0]


@part6("global_masked_whiten", "squares_around_local_mean",
       "each rank centred its squares on its own mean, which drops the spread between the ranks' means")
def whiten_local_centre(values, mask, shift_mean=True):
    _, world_size = world()
    local_mean = (values * mask).sum() / mask.sum()
    sums = torch.stack([(values * mask).sum(), mask.sum(), ((values - local_mean) ** 2 * mask).sum()])
    if world_size > 1:
        dist.all_reduce(sums)
    mean, var = sums[0] / sums[1], sums[2] / (sums[1] - 1)
    whitened = (values - mean) * torch.rsqrt(var + 1e-8)
    return whitened if shift_mean else whitened + mean


@part6("global_masked_whiten", "biased_global_variance",
       "the global variance divides by n instead of n − 1 (Part 3's masked_whiten is unbiased)")
def whiten_biased(values, mask, shift_mean=True):
    _, world_size = world()
    sums = torch.stack([(values * mask).sum(), mask.sum()])
    if world_size > 1:
        dist.all_reduce(sums)
    mean = sums[0] / sums[1]
    squares = ((values - mean) ** 2 * mask).sum()
    if world_size > 1:
        dist.all_reduce(squares)
    whitened = (values - mean) * torch.rsqrt(squares / sums[1] + 1e-8)
    return whitened if shift_mean else whitened + mean


@part6("global_masked_whiten", "eps_only_when_the_variance_is_zero",
       "the 1e-8 was used only when the variance is exactly 0 (rsqrt(var) otherwise): a variance far below 1e-8 but "
       "not 0 (values like 0.1 ± 1e-5) scales the deviations ~10× too much")
def whiten_eps_only_at_zero(values, mask, shift_mean=True):
    _, world_size = world()
    sums = torch.stack([(values * mask).sum(), mask.sum()])
    if world_size > 1:
        dist.all_reduce(sums)
    if sums[1] < 2:
        raise ValueError("need at least 2 masked-in elements over all ranks")
    mean = sums[0] / sums[1]
    squares = ((values - mean) ** 2 * mask).sum()
    if world_size > 1:
        dist.all_reduce(squares)
    var = squares / (sums[1] - 1)
    whitened = (values - mean) * (torch.rsqrt(var) if var > 0 else torch.rsqrt(torch.tensor(1e-8)))
    return whitened if shift_mean else whitened + mean


@part6("global_masked_whiten", "no_global_count_check",
       "no ValueError when all ranks together hold fewer than 2 masked-in elements (the variance is then 0/0)")
def whiten_unchecked(values, mask, shift_mean=True):
    _, world_size = world()
    if world_size == 1:
        return masked_whiten(values, mask, shift_mean) if mask.sum() >= 2 else values - values
    sums = torch.stack([(values * mask).sum(), mask.sum()])
    dist.all_reduce(sums)
    mean = sums[0] / sums[1]
    squares = ((values - mean) ** 2 * mask).sum()
    dist.all_reduce(squares)
    whitened = (values - mean) * torch.rsqrt(squares / (sums[1] - 1) + 1e-8)
    return whitened if shift_mean else whitened + mean
