"""Correct alternatives to the Part 10 exercises (see workbook/alternatives/__init__.py).

Each is written from the exercise's docstring alone, in a style the reference does not use.
"""

from __future__ import annotations

import math
from functools import partial

import torch

from workbook.alternatives import alternative

part10 = partial(alternative, "part10_async")

MODES = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")


# --- importance_weights ---------------------------------------------------------------------

@part10("importance_weights", "log_space_masked_fill",
        "compares in log space (ℓ > log C), caps with clamp(max=log C) before exp, removes padding with masked_fill")
def iw_log_space(learner_logprobs, sampler_logprobs, mask, mode="sequence_mask", cap=3.0):
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode}")
    if math.isnan(cap) or cap <= 0 or math.isinf(cap):
        raise ValueError("cap must be positive and finite")
    pad = ~mask.bool()
    with torch.no_grad():
        ell = (learner_logprobs - sampler_logprobs).to(learner_logprobs.dtype).masked_fill(pad, 0.0)
        log_cap = math.log(cap)
        if mode in ("token_truncate", "token_mask"):
            unit = ell
            unit_ok = ~pad
        else:
            unit = ell.sum(-1, keepdim=True)
            unit_ok = (~pad).any(-1, keepdim=True)
        over = unit > log_cap
        if mode.endswith("truncate"):
            w = torch.exp(unit.clamp(max=log_cap)).masked_fill(over, cap)  # exactly C where capped
        else:
            w = torch.exp(unit.masked_fill(over, 0.0)).masked_fill(over, 0.0)
        w = w.expand_as(ell).masked_fill(pad, 0.0)
        n_units = int(unit_ok.sum())
        n_tokens = int((~pad).sum())
        if n_units == 0:
            zero = torch.zeros((), dtype=learner_logprobs.dtype)
            return w.clone(), {"is/capped_frac": zero, "is/weight_mean": zero.clone(), "is/log_ratio_mean": zero.clone()}
        stats = {
            "is/capped_frac": (over & unit_ok).sum().to(ell.dtype) / n_units,
            "is/weight_mean": w.sum() / n_tokens,
            "is/log_ratio_mean": unit.masked_fill(~unit_ok, 0.0).sum() / n_units,
        }
    return w.clone(), stats


@part10("importance_weights", "row_loop_with_lists",
        "a Python loop over rows: boolean indexing of each row's real tokens, the sequence ratio by a cumulative sum, "
        "torch.minimum for truncation, stats gathered in lists")
def iw_loop(learner_logprobs, sampler_logprobs, mask, mode="sequence_mask", cap=3.0):
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode}")
    if not cap > 0 or cap == float("inf"):
        raise ValueError("cap must be positive and finite")
    learner, sampler = learner_logprobs.detach(), sampler_logprobs.detach()
    weights = torch.zeros_like(learner)
    capped, log_ratios, all_weights = [], [], []
    cap_t = torch.tensor(cap, dtype=learner.dtype)
    for b in range(learner.shape[0]):
        real = mask[b] != 0
        if not bool(real.any()):
            continue
        ell = (learner[b][real] - sampler[b][real]).to(learner.dtype)
        if mode.startswith("token"):
            ratio = torch.exp(ell)
            capped += (ratio > cap).tolist()
            log_ratios += ell.tolist()
        else:
            total = torch.cumsum(ell, dim=0)[-1]
            ratio = torch.exp(total).expand_as(ell)
            capped.append(bool(ratio[0] > cap))
            log_ratios.append(float(total))
        if mode.endswith("truncate"):
            w = torch.minimum(ratio, cap_t)
        else:
            w = torch.where(ratio <= cap, ratio, torch.zeros_like(ratio))
        weights[b, real] = w
        all_weights += w.tolist()

    def mean(values):
        return torch.tensor(sum(values) / len(values) if values else 0.0, dtype=learner.dtype)

    return weights, {"is/capped_frac": mean([float(c) for c in capped]), "is/weight_mean": mean(all_weights),
                     "is/log_ratio_mean": mean(log_ratios)}


# --- off_policy_sequence_mask -----------------------------------------------------------------

@part10("off_policy_sequence_mask", "nonzero_indexing",
        "finds the candidate rows (A < 0 and a real token) with nonzero(), then judges each one by indexing its real tokens")
def opm_indexing(learner_logprobs, sampler_logprobs, advantages, mask, delta):
    if delta < 0 or math.isnan(delta):
        raise ValueError("delta must be non-negative")
    keep = torch.ones(advantages.shape[0], dtype=torch.bool)
    real = mask.bool()
    candidates = ((advantages < 0) & real.any(dim=1)).nonzero().flatten().tolist()
    for b in candidates:
        d = (sampler_logprobs[b][real[b]] - learner_logprobs[b][real[b]]).mean()
        if d > delta:
            keep[b] = False
    return keep


@part10("off_policy_sequence_mask", "nan_to_num_and_counts",
        "zeros the padding with masked_fill, divides by the token counts (where there are any), keeps with a logical or")
def opm_counts(learner_logprobs, sampler_logprobs, advantages, mask, delta):
    if not delta >= 0:
        raise ValueError("delta must be non-negative")
    with torch.no_grad():
        pad = mask == 0
        diff = (sampler_logprobs - learner_logprobs).masked_fill(pad, 0.0)
        n = (~pad).sum(dim=1)
        mean = torch.where(n > 0, diff.sum(dim=1) / n.clamp(min=1), torch.zeros_like(advantages))
        return torch.logical_or(advantages >= 0, torch.logical_or(mean <= delta, n == 0))


# --- kl_loss_term -------------------------------------------------------------------------------

@part10("kl_loss_term", "expm1_and_a_lookup",
        "k3 with expm1, the estimators in a dict of lambdas, the ratio as exp(logprobs) / exp(sampler)")
def kl_expm1(logprobs, ref_logprobs, sampler_logprobs, estimator="k3_is"):
    ref, sampler = ref_logprobs.detach(), sampler_logprobs.detach()

    def k3():
        log_r = ref - logprobs
        return torch.expm1(log_r) - log_r

    table = {"k1": lambda: logprobs - ref, "k3": k3, "k3_is": lambda: torch.exp(logprobs) / torch.exp(sampler) * k3()}
    if estimator not in table:
        raise ValueError(f"unknown estimator {estimator}")
    return table[estimator]()


@part10("kl_loss_term", "ratio_times_r_form",
        "k3 written as π_ref/π − log(π_ref/π) − 1, and k3_is expanded as π_ref/π_sampler − ratio·(1 + log π_ref/π)")
def kl_expanded(logprobs, ref_logprobs, sampler_logprobs, estimator="k3_is"):
    if estimator not in ("k1", "k3", "k3_is"):
        raise ValueError(f"unknown estimator {estimator}")
    ref, sampler = ref_logprobs.detach(), sampler_logprobs.detach()
    if estimator == "k1":
        return -(ref - logprobs)
    log_r = ref - logprobs
    if estimator == "k3":
        return torch.exp(log_r) - log_r - 1.0
    ratio = torch.exp(logprobs - sampler)
    # ratio · (exp(log_r) − 1 − log_r), with ratio · exp(log_r) = π_ref / π_sampler (no gradient).
    return torch.exp(ref - sampler) - ratio * (1.0 + log_r)


# --- staleness ------------------------------------------------------------------------------------

@part10("sampling_version", "conditional", "an if/else instead of max: version 0 until the lag has passed")
def version_conditional(batch, lag):
    if min(batch, lag) < 0:
        raise ValueError("batch and lag must be non-negative")
    if batch <= lag:
        return 0
    return batch - lag


@part10("may_sample", "range_membership",
        "the allowed versions as a range: version in range(batch − max_staleness, batch + 1)")
def may_range(batch, version, max_staleness):
    if min(batch, version, max_staleness) < 0:
        raise ValueError("arguments must be non-negative")
    if version > batch:
        raise ValueError("a version newer than the batch does not exist yet")
    return version in range(batch - max_staleness, batch + 1)
