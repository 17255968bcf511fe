"""Correct alternatives to the Part 5 exercises (see workbook/alternatives/__init__.py).

Each is written from the exercise's docstring alone, in a style the reference does not use.
"""

from __future__ import annotations

from functools import partial

import torch
import torch.nn.functional as F

from workbook.alternatives import alternative

part5 = partial(alternative, "part5_beyond_ppo")


@part5("repeat_for_groups", "index_by_floor_division",
       "the index as arange(n·G) // G and the list by indexing with it")
def groups_by_division(prompts, group_size):
    if group_size < 2 or len(prompts) == 0:
        raise ValueError("need group_size >= 2 and at least one prompt")
    index = torch.div(torch.arange(len(prompts) * group_size), group_size, rounding_mode="floor")
    return [prompts[i] for i in index.tolist()], index


@part5("grpo_advantages", "loop_over_groups_with_var",
       "a Python loop over the groups, the std as sqrt of torch.var (unbiased), results written into a new tensor; "
       "a tied group set to 0 explicitly (its float32 mean may round)")
def grpo_adv_loop(rewards, group_size, scale="group", eps=1e-4):
    if group_size < 2 or rewards.shape[0] % group_size or scale not in ("group", "batch", "none"):
        raise ValueError("bad group size, batch or scale")
    r = rewards.detach()
    out = torch.empty_like(r)
    batch_std = torch.var(r).sqrt()
    for start in range(0, r.shape[0], group_size):
        group = r[start:start + group_size]
        if (group == group[0]).all():
            out[start:start + group_size] = 0.0
            continue
        centred = group - group.mean()
        if scale == "group":
            centred = centred / (torch.var(group).sqrt() + eps)
        elif scale == "batch":
            centred = centred / (batch_std + eps)
        out[start:start + group_size] = centred
    return out


@part5("grpo_loss", "where_and_explicit_k3",
       "the pessimistic term chosen with torch.where on the advantage's sign, k3 written out as exp(−d) − 1 + d, "
       "every reduction through per-row sums and lengths, and an extra stat (loss/total) beside the documented ones")
def grpo_loss_where(logprobs, old_logprobs, ref_logprobs, advantages, mask, cliprange=0.2, beta=0.04,
                    normalisation="sequence", max_len=None):
    if normalisation not in ("sequence", "token", "constant"):
        raise ValueError("unknown normalisation")
    if normalisation == "constant" and (max_len is None or max_len < 1):
        raise ValueError("constant needs max_len")
    m = mask.bool()
    ratio = (logprobs - old_logprobs).exp()
    adv = advantages.unsqueeze(1).expand_as(ratio)
    # For A ≥ 0 the pessimistic objective caps the ratio above, for A < 0 below.
    capped = torch.where(adv >= 0, torch.clamp(ratio, max=1 + cliprange), torch.clamp(ratio, min=1 - cliprange))
    objective = torch.minimum(ratio * adv, capped * adv)
    clipped_loss = -objective
    d = logprobs - ref_logprobs
    kl = torch.exp(-d) - 1 + d
    lengths = m.sum(dim=1).to(logprobs.dtype)

    def reduce(x):
        row_sums = torch.where(m, x, torch.zeros_like(x)).sum(dim=1)
        if normalisation == "sequence":
            return (row_sums / lengths).mean()
        if normalisation == "token":
            return row_sums.sum() / lengths.sum()
        return row_sums.sum() / (x.shape[0] * max_len)

    def token_mean(x):
        return x[m].mean()

    unclipped = -adv * ratio
    clipped_only = -adv * ratio.clamp(1 - cliprange, 1 + cliprange)
    stats = {
        "loss/policy": reduce(clipped_loss),
        "loss/kl": reduce(kl),
        "policy/clipfrac": token_mean((clipped_only > unclipped).to(logprobs.dtype)),
        "policy/ratio": token_mean(ratio),
        "policy/approxkl": token_mean((logprobs - old_logprobs) ** 2) / 2,
    }
    loss = stats["loss/policy"] + beta * stats["loss/kl"]
    stats["loss/total"] = loss
    return loss, {k: v.detach() for k, v in stats.items()}


@part5("rloo_advantages", "scaled_group_mean",
       "A_i = k/(k−1)·(r_i − group mean), the algebraic twin of the leave-one-out baseline; detach() instead of no_grad")
def rloo_scaled_mean(scores, logprobs, ref_logprobs, mask, group_size, kl_coef):
    if group_size < 2 or scores.shape[0] % group_size:
        raise ValueError("bad group size")
    m = mask.bool()
    kl = torch.where(m, logprobs - ref_logprobs, torch.zeros_like(logprobs)).sum(dim=1)
    rewards = (scores - kl_coef * kl).detach()
    grouped = rewards.reshape(-1, group_size)
    k = group_size
    advantages = k / (k - 1) * (grouped - grouped.mean(dim=1, keepdim=True))
    return advantages.flatten(), rewards


@part5("dpo_loss", "softplus_and_masked_fill",
       "padding zeroed with masked_fill before the sums; the loss as softplus(−margin), which equals −log σ(margin); "
       "extra stats (logps/chosen, logps/rejected) beside the documented ones")
def dpo_softplus(chosen_logprobs, rejected_logprobs, ref_chosen_logprobs, ref_rejected_logprobs, chosen_mask, rejected_mask,
                 beta=0.1):
    def summed(x, mask):
        return x.masked_fill(~mask.bool(), 0.0).sum(dim=1)

    chosen_ratio = summed(chosen_logprobs, chosen_mask) - summed(ref_chosen_logprobs, chosen_mask)
    rejected_ratio = summed(rejected_logprobs, rejected_mask) - summed(ref_rejected_logprobs, rejected_mask)
    chosen_rewards, rejected_rewards = beta * chosen_ratio, beta * rejected_ratio
    margins = chosen_rewards - rejected_rewards
    loss = F.softplus(-margins).mean()
    stats = {"rewards/chosen": chosen_rewards.mean(), "rewards/rejected": rejected_rewards.mean(),
             "rewards/margins": margins.mean(), "rewards/accuracies": (margins > 0).float().mean(),
             "logps/chosen": summed(chosen_logprobs, chosen_mask).mean(),
             "logps/rejected": summed(rejected_logprobs, rejected_mask).mean()}
    return loss, {k: v.detach() for k, v in stats.items()}


@part5("grpo_advantages", "index_add_by_prompt",
       "per-group sums with index_add_ over repeat_for_groups' index, deviations from each group's first reward "
       "(exact zeros for a tie), and the unbiased variance written out")
def grpo_adv_index_add(rewards, group_size, scale="group", eps=1e-4):
    if group_size < 2 or rewards.shape[0] % group_size or scale not in ("group", "batch", "none"):
        raise ValueError("bad group size, batch or scale")
    r = rewards.detach()
    n = r.shape[0] // group_size
    index = torch.arange(n).repeat_interleave(group_size)
    d = r - r[::group_size][index]
    centred = d - (torch.zeros(n, dtype=r.dtype).index_add_(0, index, d) / group_size)[index]
    if scale == "group":
        var = torch.zeros(n, dtype=r.dtype).index_add_(0, index, centred * centred) / (group_size - 1)
        centred = centred / (var.sqrt()[index] + eps)
    elif scale == "batch":
        centred = centred / (r.std() + eps)
    return centred


@part5("grpo_loss", "clipfrac_from_the_advantage_sign",
       "policy/clipfrac as (ratio > 1 + ε where A > 0) or (ratio < 1 − ε where A < 0), the cases where the clipped "
       "term is the larger loss; the per-token loss as −min of the two objectives")
def grpo_loss_sign_clipfrac(logprobs, old_logprobs, ref_logprobs, advantages, mask, cliprange=0.2, beta=0.04,
                            normalisation="sequence", max_len=None):
    if normalisation not in ("sequence", "token", "constant"):
        raise ValueError("unknown normalisation")
    if normalisation == "constant" and (max_len is None or max_len < 1):
        raise ValueError("constant needs max_len")
    m = mask.to(logprobs.dtype)
    n = m.sum(dim=1)

    def reduce(x):
        if normalisation == "sequence":
            return ((x * m).sum(dim=1) / n).mean()
        return (x * m).sum() / (n.sum() if normalisation == "token" else m.shape[0] * max_len)

    def mean(x):
        return (x * m).sum() / n.sum()

    ratio = (logprobs - old_logprobs).exp()
    a = advantages.unsqueeze(-1)
    per_token = -torch.min(ratio * a, ratio.clamp(1 - cliprange, 1 + cliprange) * a)
    kl = (ref_logprobs - logprobs).exp() - 1 - (ref_logprobs - logprobs)
    clipped = ((ratio > 1 + cliprange) & (a > 0)) | ((ratio < 1 - cliprange) & (a < 0))
    pg, kl_term = reduce(per_token), reduce(kl)
    stats = {"loss/policy": pg, "loss/kl": kl_term, "policy/clipfrac": mean(clipped.to(m.dtype)),
             "policy/ratio": mean(ratio), "policy/approxkl": 0.5 * mean((logprobs - old_logprobs).square())}
    return pg + beta * kl_term, {k: v.detach() for k, v in stats.items()}


@part5("rloo_advantages", "loop_over_the_others",
       "a loop over samples: the KL summed over the row's real tokens by boolean indexing, the baseline as the mean "
       "of the group with sample i cut out")
def rloo_loop(scores, logprobs, ref_logprobs, mask, group_size, kl_coef):
    if group_size < 2 or scores.shape[0] % group_size:
        raise ValueError("bad group size")
    with torch.no_grad():
        rewards = torch.stack([scores[b] - kl_coef * (logprobs[b] - ref_logprobs[b])[mask[b].bool()].sum()
                               for b in range(scores.shape[0])])
        advantages = torch.empty_like(rewards)
        for start in range(0, rewards.shape[0], group_size):
            group = rewards[start:start + group_size]
            for i in range(group_size):
                advantages[start + i] = group[i] - torch.cat([group[:i], group[i + 1:]]).mean()
        return advantages, rewards


@part5("dpo_loss", "difference_of_log_ratios",
       "TRL's layout: β · ((log π(c) − log π(r)) − (log π_ref(c) − log π_ref(r))) inside logsigmoid, β applied to "
       "the difference of differences")
def dpo_log_ratios(chosen_logprobs, rejected_logprobs, ref_chosen_logprobs, ref_rejected_logprobs, chosen_mask,
                   rejected_mask, beta=0.1):
    cm, rm = chosen_mask.to(chosen_logprobs.dtype), rejected_mask.to(rejected_logprobs.dtype)
    pc, pr = (chosen_logprobs * cm).sum(-1), (rejected_logprobs * rm).sum(-1)
    qc, qr = (ref_chosen_logprobs * cm).sum(-1), (ref_rejected_logprobs * rm).sum(-1)
    loss = -F.logsigmoid(beta * ((pc - pr) - (qc - qr))).mean()
    rc, rr = beta * (pc - qc), beta * (pr - qr)
    stats = {"rewards/chosen": rc.mean(), "rewards/rejected": rr.mean(), "rewards/margins": (rc - rr).mean(),
             "rewards/accuracies": (rc > rr).to(rc.dtype).mean()}
    return loss, {k: v.detach() for k, v in stats.items()}
