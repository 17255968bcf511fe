"""Correct alternatives to the Part 3 exercises (see workbook/alternatives/__init__.py)."""

from __future__ import annotations

import copy
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from solutions import part3_rlhf as _ref
from workbook.alternatives import alternative

part3 = partial(alternative, "part3_rlhf")


@part3("logprobs_from_logits", "one_hot_dot_product", "log_softmax dotted with a one-hot of the labels instead of gather")
def logprobs_one_hot(logits, labels):
    return (logits.log_softmax(-1) * F.one_hot(labels, logits.shape[-1]).to(logits.dtype)).sum(-1)


@part3("entropy_from_logits", "categorical_entropy", "torch.distributions.Categorical(logits=...).entropy()")
def entropy_categorical(logits):
    return torch.distributions.Categorical(logits=logits).entropy()


@part3("entropy_from_logits", "p_times_log_softmax",
       "−Σ softmax · log_softmax: no 0 · log 0 (log_softmax stays finite), and no cancellation of two large numbers")
def entropy_p_log_softmax(logits):
    return -(F.softmax(logits, dim=-1) * F.log_softmax(logits, dim=-1)).sum(-1)


@part3("whiten", "var_mean_and_sqrt", "torch.var_mean, then a division by sqrt(var + 1e-8)")
def whiten_var_mean(values, shift_mean=True):
    var, mean = torch.var_mean(values, unbiased=True)
    out = (values - mean) / torch.sqrt(var + 1e-8)
    return out + mean if not shift_mean else out


@part3("masked_mean", "boolean_indexing", "boolean indexing (values[mask.bool()]) for one number, torch.where for an axis")
def masked_mean_indexing(values, mask, axis=None):
    keep = mask.bool()
    if axis is None:
        return values[keep].mean()
    return torch.where(keep, values, torch.zeros_like(values)).sum(axis) / keep.sum(axis)


@part3("masked_var", "torch_var_of_the_selection", "torch.var of values[mask.bool()] (two-pass, any mask dtype)")
def masked_var_selection(values, mask, unbiased=True):
    selected = values[mask.bool()]
    if selected.numel() < (2 if unbiased else 1):
        raise ValueError(f"masked_var needs at least {2 if unbiased else 1} masked-in element(s), got {selected.numel()}")
    return torch.var(selected, unbiased=unbiased)


@part3("masked_whiten", "statistics_of_the_selection", "mean and unbiased variance of values[mask.bool()], then rsqrt")
def masked_whiten_selection(values, mask, shift_mean=True):
    selected = values[mask.bool()]
    var, mean = torch.var_mean(selected, unbiased=True)
    out = (values - mean) * (var + 1e-8).rsqrt()
    return out if shift_mean else out + mean


@part3("clip_by_value", "nested_where", "two torch.where: above the upper bound → upper, below the lower → lower")
def clip_where(x, tensor_min, tensor_max):
    return torch.where(x < tensor_min, tensor_min, torch.where(x > tensor_max, tensor_max, x))


@part3("clip_by_value", "torch_clamp", "torch.clamp(x, tensor_min, tensor_max): the lower bound first (the same for ordered bounds)")
def clip_clamp(x, tensor_min, tensor_max):
    return torch.clamp(x, tensor_min, tensor_max)


@part3("kl_penalty", "dict_dispatch_and_kl_div",
       "a dict of estimators; k3 as ratio − 1 − log ratio; full with F.kl_div(log_target=True)")
def kl_dispatch(logprob, ref_logprob, kind="kl"):
    def k3(lp, rlp):
        ratio = torch.exp(rlp - lp)
        return ratio - 1 - torch.log(ratio)

    estimators = {
        "kl": lambda lp, rlp: lp - rlp,
        "abs": lambda lp, rlp: torch.abs(lp - rlp),
        "mse": lambda lp, rlp: (lp - rlp).square() / 2,
        "k3": k3,
        "full": lambda lp, rlp: F.kl_div(rlp, lp, reduction="none", log_target=True).sum(-1),
    }
    if kind not in estimators:
        raise ValueError(f"unknown KL penalty kind {kind!r}")
    return estimators[kind](logprob, ref_logprob)


@part3("compute_rewards", "flip_argmax_and_scatter",
       "the last real token from argmax of the flipped mask, the scores placed with scatter")
def rewards_scatter(scores, logprobs, ref_logprobs, masks, kl_coef, kind="kl"):
    m = masks.to(scores.dtype)
    if (m.sum(1) == 0).any():
        raise ValueError("a response row has no real token")
    kls = _ref.kl_penalty(logprobs, ref_logprobs, kind) * m
    non_score_rewards = -kl_coef * kls
    last = m.shape[1] - 1 - m.flip(1).argmax(1)
    score_matrix = torch.zeros_like(non_score_rewards).scatter(1, last[:, None], scores[:, None])
    return non_score_rewards + score_matrix, non_score_rewards, kls


class KLControllerMinMax(_ref.AdaptiveKLController):
    def update(self, current, n_steps):
        error = min(0.2, max(-0.2, current / self.target - 1))
        self.value = self.value + self.value * error * n_steps / self.horizon


part3("AdaptiveKLController", "min_max_and_additive_form",
      "the clip as min/max of Python floats, and β + β·e·n/h instead of β·(1 + e·n/h)")(KLControllerMinMax)


@part3("compute_advantages", "discount_matrix",
       "GAE as one batched matrix product A = δ · W with W[s, t] = (γλ)^(k_s − k_t) for s ≥ t (k: the rank among "
       "real tokens, so gaps are skipped), the next real token's value found with a reversed cummin; no Python loop")
def advantages_matrix(values, rewards, mask, gamma, lam):
    if not (0.0 <= gamma <= 1.0 and 0.0 <= lam <= 1.0):
        raise ValueError("gamma and lam must lie in [0, 1]")
    m = mask.to(values.dtype)
    values, rewards = values.detach() * m, rewards.detach() * m
    batch, width = values.shape
    steps = torch.arange(width)
    # Index of the next real column after each column (width: none, whose value is 0).
    candidates = torch.where(m > 0, steps.expand(batch, width), torch.full((batch, width), width))
    after = torch.cat([candidates[:, 1:], torch.full((batch, 1), width)], dim=1)
    next_index = after.flip(1).cummin(1).values.flip(1)
    next_values = F.pad(values, (0, 1)).gather(1, next_index)
    deltas = (rewards + gamma * next_values - values) * m
    rank = m.cumsum(1)
    power = rank[:, :, None] - rank[:, None, :]  # [batch, s, t]: real tokens from t to s, minus one
    later = (steps[:, None] >= steps[None, :])[None]
    weights = torch.where(later, torch.tensor(gamma * lam, dtype=values.dtype) ** power.clamp(min=0),
                          torch.zeros((), dtype=values.dtype))
    advantages = torch.einsum("bs,bst->bt", deltas, weights)
    returns = (advantages + values) * m
    return values, _ref.masked_whiten(advantages, m) * m, returns


@part3("ppo_loss", "where_by_sign_and_indexing",
       "the policy loss with torch.where on the advantage's sign, clamp with tensor bounds for the value, "
       "and every statistic from boolean indexing; one extra stat (policy/entropy_free) beside the documented ones")
def ppo_loss_indexing(old_logprobs, values, logprobs, vpreds, mask, advantages, returns, cliprange, cliprange_value,
                      vf_coef):
    keep = mask.bool()
    ratio = (logprobs - old_logprobs).exp()
    capped = torch.where(advantages >= 0, ratio.clamp(max=1 + cliprange), ratio.clamp(min=1 - cliprange))
    pg_losses = -advantages * capped
    clipped = ((advantages > 0) & (ratio > 1 + cliprange)) | ((advantages < 0) & (ratio < 1 - cliprange))
    v_clip = torch.clamp(vpreds, values - cliprange_value, values + cliprange_value)
    err, err_clipped = (vpreds - returns).square(), (v_clip - returns).square()
    pg_loss = pg_losses[keep].mean()
    vf_loss = 0.5 * torch.maximum(err, err_clipped)[keep].mean()
    with torch.no_grad():
        stats = {
            "loss/policy": pg_loss.detach(), "loss/value": vf_loss.detach(),
            "loss/total": (pg_loss + vf_coef * vf_loss).detach(),
            "policy/approxkl": 0.5 * (logprobs - old_logprobs)[keep].square().mean(),
            "policy/policykl": (old_logprobs - logprobs)[keep].mean(),
            "policy/clipfrac": clipped[keep].float().mean(),
            "policy/advantages_mean": advantages[keep].mean(), "policy/ratio": ratio[keep].mean(),
            "returns/mean": returns[keep].mean(), "returns/var": returns[keep].var(),
            "val/vpred": vpreds[keep].mean(), "val/error": err[keep].mean(),
            "val/clipfrac": (err_clipped > err)[keep].float().mean(),
            "val/mean": values[keep].mean(), "val/var": values[keep].var(),
            "policy/entropy_free": torch.tensor(1.0),  # an extra key: the docstring does not say "exactly"
        }
    return pg_loss, vf_coef * vf_loss, stats


class ValueHeadZeroedInPlace(_ref.GPTWithValueHead):
    def __init__(self, lm):
        nn.Module.__init__(self)
        self.lm = lm
        head = nn.Linear(lm.config.d_model, 1)
        with torch.no_grad():
            head.weight.zero_()
            head.bias.zero_()
        self.value_head = head

    def forward(self, input_ids, attention_mask=None):
        logits, hidden = self.lm(input_ids, attention_mask, return_hidden=True)
        return logits, self.value_head(hidden)[..., 0]


part3("GPTWithValueHead", "zeroed_in_place_and_indexed",
      "the head zeroed in place under no_grad, the values taken with [..., 0] instead of squeeze")(ValueHeadZeroedInPlace)


@part3("create_reference_model", "module_requires_grad", "eval() first, then the module-wide requires_grad_(False)")
def reference_module_wide(model):
    return copy.deepcopy(model).eval().requires_grad_(False)


@part3("batched_forward_pass", "one_call_then_a_loop_over_rows",
       "the model runs once on the right-padded batch; each row's outputs are then sliced out in a Python loop "
       "and padded back with pad_sequence")
def forward_row_loop(model, queries, responses, *, temperature=1.0, pad_id=0, return_logits=False):
    if len(queries) != len(responses) or not queries or any(len(x) == 0 for x in [*queries, *responses]):
        raise ValueError("need as many non-empty queries as non-empty responses")
    if temperature <= 0:
        raise ValueError("temperature must be positive")
    rows = [torch.cat([q, r]) for q, r in zip(queries, responses)]
    width = max(len(r) for r in rows)
    input_ids = torch.full((len(rows), width), pad_id, dtype=rows[0].dtype)
    attention_mask = torch.zeros(len(rows), width, dtype=torch.long)
    for b, row in enumerate(rows):
        input_ids[b, :len(row)], attention_mask[b, :len(row)] = row, 1
    logits, values = model(input_ids, attention_mask)
    logits = logits / temperature
    row_logprobs, row_logits, row_values = [], [], []
    for b, (q, r) in enumerate(zip(queries, responses)):
        before = slice(len(q) - 1, len(q) - 1 + len(r))  # the outputs that predict the response tokens
        row_logits.append(logits[b, before])
        row_logprobs.append(row_logits[-1].log_softmax(-1).gather(-1, r[:, None]).squeeze(-1))
        row_values.append(values[b, before])
    pad = partial(nn.utils.rnn.pad_sequence, batch_first=True, padding_value=0.0)
    masks = pad([torch.ones(len(r), dtype=logits.dtype) for r in responses])
    return pad(row_logprobs), (pad(row_logits) if return_logits else None), pad(row_values), masks


@part3("preference_loss", "softplus", "softplus(−(r_w − r_l − m)), which equals −logsigmoid and is as stable")
def preference_softplus(r_chosen, r_rejected, margin=None):
    gap = r_chosen - r_rejected - (margin if margin is not None else 0.0)
    return F.softplus(-gap).mean()


class RewardFromFlippedArgmax(_ref.RewardModel):
    def forward(self, input_ids, attention_mask):
        mask = attention_mask.long()
        if (mask.sum(1) == 0).any():
            raise ValueError("an attention_mask row is all 0")
        _, hidden = self.lm(input_ids, attention_mask, return_hidden=True)
        last = mask.shape[1] - 1 - mask.flip(1).argmax(1)
        chosen = hidden.gather(1, last[:, None, None].expand(-1, 1, hidden.shape[-1])).squeeze(1)
        return self.head(chosen)[:, 0]


part3("RewardModel", "flipped_argmax_and_gather",
      "the last real token from argmax of the flipped mask, its hidden state picked with gather")(RewardFromFlippedArgmax)


class TrainerReordered(_ref.PPOTrainer):
    def step(self, queries, responses, scores, response_masks=None):
        cfg, n = self.config, len(queries)
        if len(responses) != n or len(scores) != n:
            raise ValueError("queries, responses and scores must have the same length")
        full = cfg.kl_penalty == "full"
        self.model.eval()
        with torch.no_grad():  # the reference first, then the policy: independent passes
            ref_lp, ref_logits, _, _ = self._forward(self.ref_model, queries, responses, return_logits=full)
            old_lp, logits, old_values, masks = self._forward(self.model, queries, responses, return_logits=True)
        if response_masks is not None:  # the policy's own tokens, multiplied in by hand
            masks = masks * torch.stack([F.pad(rm.float(), (0, masks.shape[1] - len(rm))) for rm in response_masks])
        beta = self.kl_ctl.value
        if full:
            rewards, non_score, kls = _ref.compute_rewards(scores, logits.log_softmax(-1), ref_logits.log_softmax(-1),
                                                           masks, beta, "full")
        else:
            rewards, non_score, kls = _ref.compute_rewards(scores, old_lp, ref_lp, masks, beta, cfg.kl_penalty)
        old_values, advantages, returns = _ref.compute_advantages(old_values, rewards, masks, cfg.gamma, cfg.lam)
        # β is only read when rewards are built, so the controller may move before the epochs.
        seq_kl = kls.sum(-1).mean().item()
        self.kl_ctl.update(seq_kl, n)
        stats = {
            "objective/kl": seq_kl, "objective/kl_coef": beta,
            "objective/entropy": _ref.masked_mean(_ref.entropy_from_logits(logits), masks).item(),
            "objective/logprobs": (old_lp * masks).sum(-1).mean().item(),
            "objective/ref_logprobs": (ref_lp * masks).sum(-1).mean().item(),
            "ppo/mean_scores": scores.mean().item(), "ppo/std_scores": scores.std().item() if n > 1 else 0.0,
            "ppo/mean_non_score_reward": non_score.sum(-1).mean().item(),
            "tokens/responses_len_mean": masks.sum(-1).mean().item(),
        }
        sums, count = {}, 0
        for _ in range(cfg.ppo_epochs):
            for chunk in torch.randperm(n, generator=self.generator).split(cfg.mini_batch_size):
                rows = chunk.tolist()
                lp, lg, vp, m = self._forward(self.model, [queries[i] for i in rows], [responses[i] for i in rows],
                                              return_logits=True)
                w = m.shape[1]
                m = m * masks[chunk, :w]  # the rollout's masks already hold the policy's tokens
                pg, vf, mb_stats = _ref.ppo_loss(old_lp[chunk, :w], old_values[chunk, :w], lp, vp, m,
                                                 advantages[chunk, :w], returns[chunk, :w], cfg.cliprange,
                                                 cfg.cliprange_value, cfg.vf_coef)
                ent = _ref.masked_mean(_ref.entropy_from_logits(lg), m)
                self.optimizer.zero_grad()
                (pg + vf - cfg.ent_coef * ent).backward()
                if cfg.max_grad_norm is not None:
                    nn.utils.clip_grad_norm_(self.model.parameters(), cfg.max_grad_norm)
                self.optimizer.step()
                mb_stats["policy/entropy"] = ent.detach()
                for k, v in mb_stats.items():
                    sums[k] = sums.get(k, 0.0) + v.item()
                count += 1
        stats.update({f"ppo/{k}": v / count for k, v in sums.items()})
        return stats


part3("PPOTrainer", "reference_first_controller_before_epochs",
      "the reference pass before the policy's, β updated before the PPO epochs (it is only read for the rewards), "
      "stats averaged with running sums")(TrainerReordered)
