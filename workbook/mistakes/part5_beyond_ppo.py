"""Known-wrong versions of the Part 5 exercises (see workbook/mistakes/__init__.py)."""

from __future__ import annotations

from functools import partial

import torch
import torch.nn.functional as F

from solutions import part3_rlhf as _p3
from workbook.mistakes import mistake

part5 = partial(mistake, "part5_beyond_ppo")


# --- repeat_for_groups ----------------------------------------------------------------

def _check_groups(prompts, group_size):
    if group_size < 2:
        raise ValueError("group_size must be at least 2")
    if not prompts:
        raise ValueError("need at least one prompt")


@part5("repeat_for_groups", "tiled_not_interleaved",
       "the prompt list was tiled (a, b, a, b) instead of each prompt repeated G times in a row (a, a, b, b)")
def groups_tiled(prompts, group_size):
    _check_groups(prompts, group_size)
    return list(prompts) * group_size, torch.arange(len(prompts)).repeat(group_size)


@part5("repeat_for_groups", "index_within_group",
       "the index counts the position inside the group (0, 1, 2, 0, 1, 2) instead of naming the prompt (0, 0, 0, 1, 1, 1)")
def groups_position_index(prompts, group_size):
    _check_groups(prompts, group_size)
    return [p for p in prompts for _ in range(group_size)], torch.arange(group_size).repeat(len(prompts))


@part5("repeat_for_groups", "group_of_one_accepted",
       "a group size below 2 was accepted: a group of one has no baseline, its advantage is always 0")
def groups_no_check(prompts, group_size):
    return [p for p in prompts for _ in range(group_size)], torch.arange(len(prompts)).repeat_interleave(group_size)


# --- grpo_advantages ------------------------------------------------------------------

def _check_adv(rewards, group_size, scale):
    if group_size < 2 or rewards.shape[0] % group_size or scale not in ("group", "batch", "none"):
        raise ValueError("bad arguments")


def _scaled(rewards, group_size, scale, eps, centre, group_std):
    _check_adv(rewards, group_size, scale)
    with torch.no_grad():
        grouped = rewards.view(-1, group_size)
        centred = grouped - centre(grouped)
        if scale == "group":
            centred = centred / (group_std(grouped) + eps)
        elif scale == "batch":
            centred = centred / (rewards.std() + eps)
        return centred.reshape(-1)


def _mean(g):
    return g.mean(dim=1, keepdim=True)


def _std(g):
    return g.std(dim=1, keepdim=True)


@part5("grpo_advantages", "batch_mean_baseline",
       "the baseline was the mean of the whole batch instead of each group's own mean")
def grpo_adv_batch_mean(rewards, group_size, scale="group", eps=1e-4):
    return _scaled(rewards, group_size, scale, eps, lambda g: g.mean(), _std)


@part5("grpo_advantages", "no_eps", "the std was divided by without eps: a group of equal rewards gives 0/0 = NaN")
def grpo_adv_no_eps(rewards, group_size, scale="group", eps=1e-4):
    return _scaled(rewards, group_size, scale, 0.0, _mean, _std)


@part5("grpo_advantages", "groups_transposed",
       "the rewards were grouped with view(G, -1): each 'group' mixes samples of different prompts")
def grpo_adv_transposed(rewards, group_size, scale="group", eps=1e-4):
    _check_adv(rewards, group_size, scale)
    grouped = rewards.view(group_size, -1).T
    centred = grouped - grouped.mean(dim=1, keepdim=True)
    if scale == "group":
        centred = centred / (grouped.std(dim=1, keepdim=True) + eps)
    elif scale == "batch":
        centred = centred / (rewards.std() + eps)
    return centred.T.reshape(-1)


@part5("grpo_advantages", "biased_std", "the biased std (unbiased=False) was used instead of torch's default")
def grpo_adv_biased(rewards, group_size, scale="group", eps=1e-4):
    return _scaled(rewards, group_size, scale, eps, _mean, lambda g: g.std(dim=1, keepdim=True, unbiased=False))


@part5("grpo_advantages", "scale_choice_ignored",
       "every scale choice divided by the group std (scale='batch' and 'none' were ignored)")
def grpo_adv_always_group(rewards, group_size, scale="group", eps=1e-4):
    return _scaled(rewards, group_size, "group" if scale in ("batch", "none") else scale, eps, _mean, _std)


@part5("grpo_advantages", "eps_inside_the_sqrt",
       "the std was computed as sqrt(var + eps) instead of std + eps")
def grpo_adv_eps_in_sqrt(rewards, group_size, scale="group", eps=1e-4):
    _check_adv(rewards, group_size, scale)
    with torch.no_grad():
        grouped = rewards.view(-1, group_size)
        centred = grouped - grouped.mean(dim=1, keepdim=True)
        if scale == "group":
            centred = centred / torch.sqrt(grouped.var(dim=1, keepdim=True) + eps)
        elif scale == "batch":
            centred = centred / torch.sqrt(rewards.var() + eps)
        return centred.reshape(-1)


@part5("grpo_advantages", "eps_only_for_group_scale",
       "eps was used for scale='group' only: scale='batch' divided by rewards.std() + 1e-4 whatever eps was")
def grpo_adv_batch_fixed_eps(rewards, group_size, scale="group", eps=1e-4):
    _check_adv(rewards, group_size, scale)
    with torch.no_grad():
        grouped = rewards.view(-1, group_size)
        shifted = grouped - grouped[:, :1]
        centred = shifted - shifted.mean(dim=1, keepdim=True)
        if scale == "group":
            centred = centred / (shifted.std(dim=1, keepdim=True) + eps)
        elif scale == "batch":
            centred = centred / (rewards.std() + 1e-4)
        return centred.reshape(-1)


@part5("grpo_advantages", "advantages_keep_gradient",
       "the advantages were computed outside torch.no_grad() (or without detach()): they carry the rewards' graph")
def grpo_adv_with_grad(rewards, group_size, scale="group", eps=1e-4):
    _check_adv(rewards, group_size, scale)
    grouped = rewards.view(-1, group_size)
    shifted = grouped - grouped[:, :1].detach()
    centred = shifted - shifted.mean(dim=1, keepdim=True)
    if scale == "group":
        centred = centred / (shifted.std(dim=1, keepdim=True) + eps)
    elif scale == "batch":
        centred = centred / (rewards.std() + eps)
    return centred.reshape(-1)


# --- grpo_loss ------------------------------------------------------------------------

def _grpo(logprobs, old_logprobs, ref_logprobs, advantages, mask, cliprange, beta, normalisation, max_len, *,
          combine=torch.maximum, kl=None, reduce=None, kl_sign=1.0, clip_advantage=False, detach=True,
          clipfrac=None, kl_detached=False):
    if normalisation not in ("sequence", "token", "constant"):
        raise ValueError("bad normalisation")
    if normalisation == "constant" and (max_len is None or max_len < 1):
        raise ValueError("constant needs max_len")
    m = mask.to(logprobs.dtype)

    def default_reduce(x):
        if normalisation == "sequence":
            return ((x * m).sum(dim=1) / m.sum(dim=1)).mean()
        if normalisation == "token":
            return (x * m).sum() / m.sum()
        return (x * m).sum() / (x.shape[0] * max_len)

    red = (lambda x: reduce(x, m, normalisation, max_len)) if reduce else default_reduce
    ratio = torch.exp(logprobs - old_logprobs)
    adv = advantages[:, None]
    losses = -adv * ratio
    if clip_advantage:
        losses_clipped = -torch.clamp(adv, 1.0 - cliprange, 1.0 + cliprange) * ratio
    else:
        losses_clipped = -adv * torch.clamp(ratio, 1.0 - cliprange, 1.0 + cliprange)
    per_token = combine(losses, losses_clipped)
    kl_tok = kl(logprobs, ref_logprobs) if kl else _p3.kl_penalty(logprobs, ref_logprobs, "k3")
    if kl_detached:
        kl_tok = kl_tok.detach()
    pg, kl_loss = red(per_token), red(kl_tok)
    mm = lambda x: (x * m).sum() / m.sum()  # noqa: E731
    stats = {
        "loss/policy": pg, "loss/kl": kl_loss,
        "policy/clipfrac": mm((clipfrac(ratio, adv, cliprange) if clipfrac else losses_clipped > losses).to(m.dtype)),
        "policy/ratio": mm(ratio),
        "policy/approxkl": 0.5 * mm((logprobs - old_logprobs) ** 2),
    }
    return pg + kl_sign * beta * kl_loss, {k: v.detach() if detach else v for k, v in stats.items()}


@part5("grpo_loss", "stats_not_detached",
       "the stats were returned without .detach(): each keeps the step's autograd graph alive")
def grpo_loss_stats_attached(logprobs, old_logprobs, ref_logprobs, advantages, mask, cliprange=0.2, beta=0.04,
                             normalisation="sequence", max_len=None):
    return _grpo(logprobs, old_logprobs, ref_logprobs, advantages, mask, cliprange, beta, normalisation, max_len,
                 detach=False)


@part5("grpo_loss", "min_not_max", "the min of the two per-token losses was taken (optimistic) instead of the max")
def grpo_loss_min(logprobs, old_logprobs, ref_logprobs, advantages, mask, cliprange=0.2, beta=0.04,
                  normalisation="sequence", max_len=None):
    return _grpo(logprobs, old_logprobs, ref_logprobs, advantages, mask, cliprange, beta, normalisation, max_len,
                 combine=torch.minimum)


@part5("grpo_loss", "kl_subtracted", "β·KL was subtracted from the loss (a bonus for drifting away) instead of added")
def grpo_loss_kl_minus(logprobs, old_logprobs, ref_logprobs, advantages, mask, cliprange=0.2, beta=0.04,
                       normalisation="sequence", max_len=None):
    return _grpo(logprobs, old_logprobs, ref_logprobs, advantages, mask, cliprange, beta, normalisation, max_len,
                 kl_sign=-1.0)


@part5("grpo_loss", "kl_direction_flipped",
       "k3 was computed the wrong way round (kl_penalty(ref_logprobs, logprobs, 'k3')): KL(π_ref ‖ π), not KL(π ‖ π_ref)")
def grpo_loss_kl_flipped(logprobs, old_logprobs, ref_logprobs, advantages, mask, cliprange=0.2, beta=0.04,
                         normalisation="sequence", max_len=None):
    return _grpo(logprobs, old_logprobs, ref_logprobs, advantages, mask, cliprange, beta, normalisation, max_len,
                 kl=lambda lp, ref: _p3.kl_penalty(ref, lp, "k3"))


@part5("grpo_loss", "k1_not_k3", "the KL term used the k1 estimator (log π − log π_ref) instead of k3")
def grpo_loss_k1(logprobs, old_logprobs, ref_logprobs, advantages, mask, cliprange=0.2, beta=0.04,
                 normalisation="sequence", max_len=None):
    return _grpo(logprobs, old_logprobs, ref_logprobs, advantages, mask, cliprange, beta, normalisation, max_len,
                 kl=lambda lp, ref: lp - ref)


@part5("grpo_loss", "sequence_as_token_mean",
       "normalisation='sequence' took one masked mean over all tokens (DAPO's token level) instead of a mean of per-response means")
def grpo_loss_sequence_token(logprobs, old_logprobs, ref_logprobs, advantages, mask, cliprange=0.2, beta=0.04,
                             normalisation="sequence", max_len=None):
    def reduce(x, m, norm, max_len):
        if norm in ("sequence", "token"):
            return (x * m).sum() / m.sum()
        return (x * m).sum() / (x.shape[0] * max_len)
    return _grpo(logprobs, old_logprobs, ref_logprobs, advantages, mask, cliprange, beta, normalisation, max_len,
                 reduce=reduce)


@part5("grpo_loss", "constant_divides_by_real_tokens",
       "normalisation='constant' divided by the number of real tokens instead of batch · max_len")
def grpo_loss_constant_tokens(logprobs, old_logprobs, ref_logprobs, advantages, mask, cliprange=0.2, beta=0.04,
                              normalisation="sequence", max_len=None):
    def reduce(x, m, norm, max_len):
        if norm == "sequence":
            return ((x * m).sum(dim=1) / m.sum(dim=1)).mean()
        return (x * m).sum() / m.sum()
    return _grpo(logprobs, old_logprobs, ref_logprobs, advantages, mask, cliprange, beta, normalisation, max_len,
                 reduce=reduce)


@part5("grpo_loss", "padding_in_the_mean",
       "each response's mean was taken over all columns, padding included, instead of over its real tokens")
def grpo_loss_unmasked(logprobs, old_logprobs, ref_logprobs, advantages, mask, cliprange=0.2, beta=0.04,
                       normalisation="sequence", max_len=None):
    def reduce(x, m, norm, max_len):
        if norm == "sequence":
            return (x * m).mean(dim=1).mean()
        if norm == "token":
            return (x * m).mean()
        return (x * m).sum() / (x.shape[0] * max_len)
    return _grpo(logprobs, old_logprobs, ref_logprobs, advantages, mask, cliprange, beta, normalisation, max_len,
                 reduce=reduce)


@part5("grpo_loss", "length_from_the_last_real_token",
       "n_b, the number of real tokens of row b, was taken as the position of its last real token + 1 (a response's "
       "length): the same for right-padded masks, but a row with masked-out tokens inside it (a tool's, in Part 9) "
       "is divided by too many tokens")
def grpo_loss_length_to_last(logprobs, old_logprobs, ref_logprobs, advantages, mask, cliprange=0.2, beta=0.04,
                             normalisation="sequence", max_len=None):
    def reduce(x, m, norm, max_len):
        if norm == "sequence":
            positions = torch.arange(1, m.shape[1] + 1, dtype=m.dtype)
            lengths = (positions * (m > 0)).max(dim=1).values
            return ((x * m).sum(dim=1) / lengths).mean()
        if norm == "token":
            return (x * m).sum() / m.sum()
        return (x * m).sum() / (x.shape[0] * max_len)
    return _grpo(logprobs, old_logprobs, ref_logprobs, advantages, mask, cliprange, beta, normalisation, max_len,
                 reduce=reduce)


@part5("grpo_loss", "advantage_clipped", "the advantage was clipped to [1 − ε, 1 + ε] instead of the ratio")
def grpo_loss_clip_adv(logprobs, old_logprobs, ref_logprobs, advantages, mask, cliprange=0.2, beta=0.04,
                       normalisation="sequence", max_len=None):
    return _grpo(logprobs, old_logprobs, ref_logprobs, advantages, mask, cliprange, beta, normalisation, max_len,
                 clip_advantage=True)


@part5("grpo_loss", "kl_term_detached",
       "the k3 term was detached (a penalty computed like Part 3's KL in the reward): its value is right, but the "
       "loss no longer pulls the policy towards the reference — d loss / d logprobs lacks β·dk3/dlogprobs")
def grpo_loss_kl_detached(logprobs, old_logprobs, ref_logprobs, advantages, mask, cliprange=0.2, beta=0.04,
                          normalisation="sequence", max_len=None):
    return _grpo(logprobs, old_logprobs, ref_logprobs, advantages, mask, cliprange, beta, normalisation, max_len,
                 kl_detached=True)


@part5("grpo_loss", "clipfrac_counts_ratio_outside_range",
       "policy/clipfrac counted the tokens whose ratio is outside [1 − ε, 1 + ε] instead of those where the clipped "
       "term is the larger loss (a ratio below 1 − ε with A > 0 is not clipped)")
def grpo_loss_clipfrac_outside(logprobs, old_logprobs, ref_logprobs, advantages, mask, cliprange=0.2, beta=0.04,
                               normalisation="sequence", max_len=None):
    return _grpo(logprobs, old_logprobs, ref_logprobs, advantages, mask, cliprange, beta, normalisation, max_len,
                 clipfrac=lambda ratio, adv, eps: (ratio - 1).abs() > eps)


@part5("grpo_loss", "constant_divides_by_padded_width",
       "normalisation='constant' divided by the mask's size (batch · padded width) instead of batch · max_len")
def grpo_loss_constant_width(logprobs, old_logprobs, ref_logprobs, advantages, mask, cliprange=0.2, beta=0.04,
                             normalisation="sequence", max_len=None):
    def reduce(x, m, norm, max_len):
        if norm == "sequence":
            return ((x * m).sum(dim=1) / m.sum(dim=1)).mean()
        if norm == "token":
            return (x * m).sum() / m.sum()
        return (x * m).sum() / m.numel()
    return _grpo(logprobs, old_logprobs, ref_logprobs, advantages, mask, cliprange, beta, normalisation, max_len,
                 reduce=reduce)


# --- rloo_advantages ------------------------------------------------------------------

def _rloo(scores, logprobs, ref_logprobs, mask, group_size, kl_coef, *, baseline=None, kl_sign=1.0, reduce_kl=None,
          grad=False, per_token=None, transposed=False, detach_kl_only=False):
    if group_size < 2 or scores.shape[0] % group_size:
        raise ValueError("bad group size")
    with torch.set_grad_enabled(grad):
        m = mask.to(logprobs.dtype)
        token_kl = (per_token(logprobs, ref_logprobs) if per_token else logprobs - ref_logprobs) * m
        kl = reduce_kl(token_kl, m) if reduce_kl else token_kl.sum(dim=1)
        if detach_kl_only:
            kl = kl.detach()
        rewards = scores - kl_sign * kl_coef * kl
        if transposed:
            grouped = rewards.view(group_size, -1)
            base = (grouped.sum(dim=0, keepdim=True) - grouped) / (group_size - 1)
            return (grouped - base).reshape(-1), rewards
        grouped = rewards.view(-1, group_size)
        base = baseline(grouped) if baseline else (grouped.sum(dim=1, keepdim=True) - grouped) / (group_size - 1)
        return (grouped - base).reshape(-1), rewards


@part5("rloo_advantages", "baseline_includes_self",
       "the baseline was the whole group's mean (sample i included) instead of the mean of the other k − 1")
def rloo_group_mean(scores, logprobs, ref_logprobs, mask, group_size, kl_coef):
    return _rloo(scores, logprobs, ref_logprobs, mask, group_size, kl_coef, baseline=lambda g: g.mean(dim=1, keepdim=True))


@part5("rloo_advantages", "divided_by_k", "the leave-one-out sum was divided by k instead of k − 1")
def rloo_div_k(scores, logprobs, ref_logprobs, mask, group_size, kl_coef):
    return _rloo(scores, logprobs, ref_logprobs, mask, group_size, kl_coef,
                 baseline=lambda g: (g.sum(dim=1, keepdim=True) - g) / group_size)


@part5("rloo_advantages", "kl_added", "the KL was added to the score (a reward for drifting) instead of subtracted")
def rloo_kl_added(scores, logprobs, ref_logprobs, mask, group_size, kl_coef):
    return _rloo(scores, logprobs, ref_logprobs, mask, group_size, kl_coef, kl_sign=-1.0)


@part5("rloo_advantages", "kl_mean_not_sum",
       "the per-token KL was averaged over the response instead of summed (the sequence KL is a sum)")
def rloo_kl_mean(scores, logprobs, ref_logprobs, mask, group_size, kl_coef):
    return _rloo(scores, logprobs, ref_logprobs, mask, group_size, kl_coef,
                 reduce_kl=lambda x, m: x.sum(dim=1) / m.sum(dim=1))


@part5("rloo_advantages", "kl_keeps_gradient",
       "the KL in the reward kept its gradient: the advantages are numbers, computed under torch.no_grad()")
def rloo_with_grad(scores, logprobs, ref_logprobs, mask, group_size, kl_coef):
    return _rloo(scores, logprobs, ref_logprobs, mask, group_size, kl_coef, grad=True)


@part5("rloo_advantages", "padding_in_the_kl", "the KL was summed over every column, padding included")
def rloo_unmasked(scores, logprobs, ref_logprobs, mask, group_size, kl_coef):
    return _rloo(scores, logprobs, ref_logprobs, mask, group_size, kl_coef,
                 reduce_kl=lambda x, m: (logprobs - ref_logprobs).sum(dim=1))


@part5("rloo_advantages", "k3_not_k1",
       "the KL in the reward used GRPO's k3 estimator instead of Part 3's k1 (log π − log π_ref, summed)")
def rloo_k3(scores, logprobs, ref_logprobs, mask, group_size, kl_coef):
    return _rloo(scores, logprobs, ref_logprobs, mask, group_size, kl_coef,
                 per_token=lambda lp, ref: _p3.kl_penalty(lp, ref, "k3"))


@part5("rloo_advantages", "groups_transposed",
       "the rewards were grouped with view(k, -1): each 'group' mixes samples of different prompts")
def rloo_transposed(scores, logprobs, ref_logprobs, mask, group_size, kl_coef):
    return _rloo(scores, logprobs, ref_logprobs, mask, group_size, kl_coef, transposed=True)


@part5("rloo_advantages", "only_the_kl_detached",
       "only the KL was detached: scores that carry a gradient (a reward model's) pass it on to the rewards and "
       "advantages, which must be plain numbers")
def rloo_kl_detached(scores, logprobs, ref_logprobs, mask, group_size, kl_coef):
    return _rloo(scores, logprobs, ref_logprobs, mask, group_size, kl_coef, grad=True, detach_kl_only=True)


# --- dpo_loss -------------------------------------------------------------------------

def _dpo(chosen, rejected, ref_chosen, ref_rejected, chosen_mask, rejected_mask, beta, *, reduce=None,
         use_ref=True, sign=1.0, loss_fn=None, beta_inside=True, accuracy=torch.gt, detach=True, stats_beta=True):
    cm, rm = chosen_mask.to(chosen.dtype), rejected_mask.to(rejected.dtype)
    red = reduce or (lambda x, m: (x * m).sum(dim=1))
    b = beta if beta_inside else 1.0
    rc = b * red(chosen - (ref_chosen if use_ref else 0.0), cm)
    rr = b * red(rejected - (ref_rejected if use_ref else 0.0), rm)
    diff = sign * (rc - rr)
    loss = loss_fn(diff) if loss_fn else -F.logsigmoid(diff).mean()
    if not stats_beta:
        rc, rr = rc / beta, rr / beta
    stats = {"rewards/chosen": rc.mean(), "rewards/rejected": rr.mean(), "rewards/margins": (rc - rr).mean(),
             "rewards/accuracies": accuracy(rc, rr).to(rc.dtype).mean()}
    return loss, {k: v.detach() if detach else v for k, v in stats.items()}


@part5("dpo_loss", "stats_not_detached",
       "the stats were returned without .detach(): each keeps the step's autograd graph alive")
def dpo_stats_attached(chosen_logprobs, rejected_logprobs, ref_chosen_logprobs, ref_rejected_logprobs, chosen_mask,
                       rejected_mask, beta=0.1):
    return _dpo(chosen_logprobs, rejected_logprobs, ref_chosen_logprobs, ref_rejected_logprobs, chosen_mask, rejected_mask,
                beta, detach=False)


@part5("dpo_loss", "mean_not_sum",
       "the response log-prob was the mean of its tokens' log-probs instead of their sum")
def dpo_mean(chosen_logprobs, rejected_logprobs, ref_chosen_logprobs, ref_rejected_logprobs, chosen_mask, rejected_mask,
             beta=0.1):
    return _dpo(chosen_logprobs, rejected_logprobs, ref_chosen_logprobs, ref_rejected_logprobs, chosen_mask, rejected_mask,
                beta, reduce=lambda x, m: (x * m).sum(dim=1) / m.sum(dim=1))


@part5("dpo_loss", "reference_ignored", "the reference log-probs were not subtracted (log π instead of log π − log π_ref)")
def dpo_no_ref(chosen_logprobs, rejected_logprobs, ref_chosen_logprobs, ref_rejected_logprobs, chosen_mask, rejected_mask,
               beta=0.1):
    return _dpo(chosen_logprobs, rejected_logprobs, ref_chosen_logprobs, ref_rejected_logprobs, chosen_mask, rejected_mask,
                beta, use_ref=False)


@part5("dpo_loss", "rejected_minus_chosen",
       "the margin was rejected minus chosen inside the sigmoid: the loss pushes towards the rejected response")
def dpo_flipped(chosen_logprobs, rejected_logprobs, ref_chosen_logprobs, ref_rejected_logprobs, chosen_mask, rejected_mask,
                beta=0.1):
    return _dpo(chosen_logprobs, rejected_logprobs, ref_chosen_logprobs, ref_rejected_logprobs, chosen_mask, rejected_mask,
                beta, sign=-1.0)


@part5("dpo_loss", "beta_forgotten", "β was left out of the implicit reward (as if β = 1)")
def dpo_no_beta(chosen_logprobs, rejected_logprobs, ref_chosen_logprobs, ref_rejected_logprobs, chosen_mask, rejected_mask,
                beta=0.1):
    return _dpo(chosen_logprobs, rejected_logprobs, ref_chosen_logprobs, ref_rejected_logprobs, chosen_mask, rejected_mask,
                beta, beta_inside=False)


@part5("dpo_loss", "log_of_sigmoid",
       "−log(sigmoid(x)) was computed directly: it overflows to inf for a large negative margin (use logsigmoid)")
def dpo_log_sigmoid(chosen_logprobs, rejected_logprobs, ref_chosen_logprobs, ref_rejected_logprobs, chosen_mask,
                    rejected_mask, beta=0.1):
    return _dpo(chosen_logprobs, rejected_logprobs, ref_chosen_logprobs, ref_rejected_logprobs, chosen_mask, rejected_mask,
                beta, loss_fn=lambda d: -torch.log(torch.sigmoid(d)).mean())


@part5("dpo_loss", "accuracy_counts_ties",
       "the preference accuracy counted ties (r_chosen >= r_rejected) as correct")
def dpo_acc_ties(chosen_logprobs, rejected_logprobs, ref_chosen_logprobs, ref_rejected_logprobs, chosen_mask, rejected_mask,
                 beta=0.1):
    return _dpo(chosen_logprobs, rejected_logprobs, ref_chosen_logprobs, ref_rejected_logprobs, chosen_mask, rejected_mask,
                beta, accuracy=torch.ge)


@part5("dpo_loss", "summed_over_pairs", "the loss was summed over the pairs instead of averaged")
def dpo_summed(chosen_logprobs, rejected_logprobs, ref_chosen_logprobs, ref_rejected_logprobs, chosen_mask,
               rejected_mask, beta=0.1):
    return _dpo(chosen_logprobs, rejected_logprobs, ref_chosen_logprobs, ref_rejected_logprobs, chosen_mask, rejected_mask,
                beta, loss_fn=lambda d: -F.logsigmoid(d).sum())


@part5("dpo_loss", "stats_without_beta",
       "the rewards/* stats were the summed log-ratios without β (the implicit reward is β·(log π − log π_ref))")
def dpo_stats_no_beta(chosen_logprobs, rejected_logprobs, ref_chosen_logprobs, ref_rejected_logprobs, chosen_mask,
                      rejected_mask, beta=0.1):
    return _dpo(chosen_logprobs, rejected_logprobs, ref_chosen_logprobs, ref_rejected_logprobs, chosen_mask, rejected_mask,
                beta, stats_beta=False)
