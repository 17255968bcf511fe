"""Known-wrong versions of Part 3's PPOTrainer.step, each one switch away from the reference."""

from __future__ import annotations

from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from solutions import part3_rlhf as _ref
from workbook.mistakes import mistake
from .models import _forward_pass

part3 = partial(mistake, "part3_rlhf")


# --- PPOTrainer -----------------------------------------------------------------------

def _trainer_step(self, queries, responses, scores, response_masks=None, *, use_temperature=True, ref_is_policy=False,
                  update_kl=True, dropout_on=False, shuffle=True, kind_ignored=False, clip="config", cliprange_swap=False,
                  entropy_sign=-1.0, kl_token_mean=False, std_of_one="zero", stats_as_tensors=False, ref_grad=False,
                  tool_masked_in_rollout=True, tool_masked_in_minibatch=True, tool_masked_in_logprob_stats=True,
                  gae_defaults=False):
    """PPOTrainer.step with switches; each mistake below flips one."""
    rollout_tool_masks = response_masks if tool_masked_in_rollout else None
    minibatch_tool_masks = response_masks if tool_masked_in_minibatch else None
    cfg = self.config
    batch = len(queries)
    temperature = cfg.temperature if use_temperature else 1.0
    kind = "kl" if kind_ignored else cfg.kl_penalty

    def forward(model, q, r, return_logits=False):
        return _ref.batched_forward_pass(model, q, r, temperature=temperature, pad_id=self.pad_id, return_logits=return_logits)

    self.model.train(dropout_on)
    with torch.no_grad():
        old_logprobs, logits, values, masks = forward(self.model, queries, responses, True)
        length_masks = masks
        masks = _ref.model_token_masks(masks, responses, rollout_tool_masks)
        entropy = _ref.masked_mean(_ref.entropy_from_logits(logits), masks)
    with torch.enable_grad() if ref_grad else torch.no_grad():
        ref_logprobs, ref_logits, _, _ = forward(self.model if ref_is_policy else self.ref_model, queries, responses,
                                                 kind == "full")
    ref_logprobs = ref_logprobs.detach()
    kl_coef = self.kl_ctl.value
    if kind == "full":
        lp, ref_lp = F.log_softmax(logits, -1), F.log_softmax(ref_logits.detach(), -1)
    else:
        lp, ref_lp = old_logprobs, ref_logprobs
    rewards, non_score, kls = _ref.compute_rewards(scores, lp, ref_lp, masks, kl_coef, kind)
    gamma, lam = (1.0, 0.95) if gae_defaults else (cfg.gamma, cfg.lam)
    values, advantages, returns = _ref.compute_advantages(values, rewards, masks, gamma, lam)
    collected = {}
    for _ in range(cfg.ppo_epochs):
        order = torch.randperm(batch, generator=self.generator) if shuffle else torch.arange(batch)
        for idx in order.split(cfg.mini_batch_size):
            mq, mr = [queries[i] for i in idx.tolist()], [responses[i] for i in idx.tolist()]
            new_lp, new_logits, vpreds, mm = forward(self.model, mq, mr, True)
            if minibatch_tool_masks is not None:
                mm = _ref.model_token_masks(mm, mr, [minibatch_tool_masks[i] for i in idx.tolist()])
            w = mm.shape[1]
            cliprange, cliprange_value = ((cfg.cliprange_value, cfg.cliprange) if cliprange_swap
                                          else (cfg.cliprange, cfg.cliprange_value))
            pg, vf, stats = _ref.ppo_loss(old_logprobs[idx, :w], values[idx, :w], new_lp, vpreds, mm, advantages[idx, :w],
                                          returns[idx, :w], cliprange, cliprange_value, cfg.vf_coef)
            ent = _ref.masked_mean(_ref.entropy_from_logits(new_logits), mm)
            loss = pg + vf + entropy_sign * cfg.ent_coef * ent
            self.optimizer.zero_grad()
            loss.backward()
            if clip == "config" and cfg.max_grad_norm is not None:
                nn.utils.clip_grad_norm_(self.model.parameters(), cfg.max_grad_norm)
            elif clip == "default_when_none":
                nn.utils.clip_grad_norm_(self.model.parameters(), cfg.max_grad_norm or 1.0)
            self.optimizer.step()
            stats["policy/entropy"] = ent.detach()
            for k, v in stats.items():
                collected.setdefault(k, []).append(v)
    mean_kl = kls.sum(1).mean()
    if update_kl:
        self.kl_ctl.update((_ref.masked_mean(kls, masks) if kl_token_mean else mean_kl).item(), batch)
    std = scores.std().item() if batch > 1 or std_of_one == "nan" else 0.0
    stat_masks = masks if tool_masked_in_logprob_stats else length_masks
    out = {
        "objective/kl": mean_kl.item(), "objective/kl_coef": kl_coef, "objective/entropy": entropy.item(),
        "objective/logprobs": (old_logprobs * stat_masks).sum(1).mean().item(),
        "objective/ref_logprobs": (ref_logprobs * stat_masks).sum(1).mean().item(),
        "ppo/mean_scores": scores.mean().item(), "ppo/std_scores": std,
        "ppo/mean_non_score_reward": non_score.sum(1).mean().item(), "tokens/responses_len_mean": masks.sum(1).mean().item(),
    }
    out.update({f"ppo/{k}": torch.stack(v).mean().item() for k, v in collected.items()})
    if stats_as_tensors:
        out = {k: torch.tensor(v) for k, v in out.items()}
    return out


@part3("PPOTrainer", "temperature_forgotten", "the forward passes forgot the sampling temperature (logits not divided by it)")
class TrainerNoTemperature(_ref.PPOTrainer):
    def step(self, queries, responses, scores, response_masks=None):
        return _trainer_step(self, queries, responses, scores, response_masks, use_temperature=False)


@part3("PPOTrainer", "reference_is_the_policy", "the reference log-probs were computed with the policy, so the KL is always 0")
class TrainerRefIsPolicy(_ref.PPOTrainer):
    def step(self, queries, responses, scores, response_masks=None):
        return _trainer_step(self, queries, responses, scores, response_masks, ref_is_policy=True)


@part3("PPOTrainer", "kl_controller_not_updated", "self.kl_ctl.update was never called, so β never adapts")
class TrainerNoKLUpdate(_ref.PPOTrainer):
    def step(self, queries, responses, scores, response_masks=None):
        return _trainer_step(self, queries, responses, scores, response_masks, update_kl=False)


@part3("PPOTrainer", "dropout_left_on", "the policy was left in train mode: dropout makes the log-probs random")
class TrainerDropout(_ref.PPOTrainer):
    def step(self, queries, responses, scores, response_masks=None):
        return _trainer_step(self, queries, responses, scores, response_masks, dropout_on=True)


@part3("PPOTrainer", "minibatches_not_shuffled", "the minibatches were taken in order instead of from a permutation drawn from self.generator")
class TrainerNoShuffle(_ref.PPOTrainer):
    def step(self, queries, responses, scores, response_masks=None):
        return _trainer_step(self, queries, responses, scores, response_masks, shuffle=False)


@part3("PPOTrainer", "kl_penalty_kind_ignored", "config.kl_penalty was ignored (the default 'kl' estimator was always used)")
class TrainerKindIgnored(_ref.PPOTrainer):
    def step(self, queries, responses, scores, response_masks=None):
        return _trainer_step(self, queries, responses, scores, response_masks, kind_ignored=True)


@part3("PPOTrainer", "gradient_never_clipped", "the gradient norm was never clipped to config.max_grad_norm")
class TrainerNoClip(_ref.PPOTrainer):
    def step(self, queries, responses, scores, response_masks=None):
        return _trainer_step(self, queries, responses, scores, response_masks, clip=None)


@part3("PPOTrainer", "clipped_when_max_grad_norm_is_none",
       "the gradient was clipped to a default norm of 1 when config.max_grad_norm is None (None means no clipping)")
class TrainerClipsNone(_ref.PPOTrainer):
    def step(self, queries, responses, scores, response_masks=None):
        return _trainer_step(self, queries, responses, scores, response_masks, clip="default_when_none")


@part3("PPOTrainer", "clipranges_swapped", "cliprange and cliprange_value were passed to ppo_loss in each other's place")
class TrainerClipRangesSwapped(_ref.PPOTrainer):
    def step(self, queries, responses, scores, response_masks=None):
        return _trainer_step(self, queries, responses, scores, response_masks, cliprange_swap=True)


@part3("PPOTrainer", "entropy_bonus_added_to_loss",
       "ent_coef · entropy was added to the loss (it is a bonus: subtract it from the loss we minimise)")
class TrainerEntropyAdded(_ref.PPOTrainer):
    def step(self, queries, responses, scores, response_masks=None):
        return _trainer_step(self, queries, responses, scores, response_masks, entropy_sign=1.0)


@part3("PPOTrainer", "kl_controller_fed_token_mean",
       "the KL controller was given the mean KL per token instead of the mean per-sequence KL (sum over tokens)")
class TrainerTokenMeanKL(_ref.PPOTrainer):
    def step(self, queries, responses, scores, response_masks=None):
        return _trainer_step(self, queries, responses, scores, response_masks, kl_token_mean=True)


@part3("PPOTrainer", "gamma_and_lam_not_from_config",
       "compute_advantages got γ = 1 and λ = 0.95 (PPOConfig's defaults, written in) instead of config.gamma and config.lam")
class TrainerGAEDefaults(_ref.PPOTrainer):
    def step(self, queries, responses, scores, response_masks=None):
        return _trainer_step(self, queries, responses, scores, response_masks, gae_defaults=True)


@part3("PPOTrainer", "std_of_one_score_is_nan",
       "ppo/std_scores is NaN for a batch of one (the unbiased std of one number; the docstring asks for 0.0)")
class TrainerStdNaN(_ref.PPOTrainer):
    def step(self, queries, responses, scores, response_masks=None):
        return _trainer_step(self, queries, responses, scores, response_masks, std_of_one="nan")


@part3("PPOTrainer", "stats_are_tensors", "the stats are returned as tensors instead of Python floats")
class TrainerTensorStats(_ref.PPOTrainer):
    def step(self, queries, responses, scores, response_masks=None):
        return _trainer_step(self, queries, responses, scores, response_masks, stats_as_tensors=True)


@part3("PPOTrainer", "reference_run_with_grad",
       "the reference model ran with autograd on (outside torch.no_grad()), building a graph nobody uses")
class TrainerRefWithGrad(_ref.PPOTrainer):
    def step(self, queries, responses, scores, response_masks=None):
        return _trainer_step(self, queries, responses, scores, response_masks, ref_grad=True)


@part3("PPOTrainer", "response_masks_ignored",
       "response_masks were ignored: the tool's tokens were trained on as if the policy had written them (their "
       "log-prob ratio, KL charge and advantage all counted), and the score went on the response's last token "
       "even when a tool wrote it")
class TrainerIgnoresToolMasks(_ref.PPOTrainer):
    def step(self, queries, responses, scores, response_masks=None):
        return _trainer_step(self, queries, responses, scores, response_masks, tool_masked_in_rollout=False,
                             tool_masked_in_minibatch=False, tool_masked_in_logprob_stats=False)


@part3("PPOTrainer", "response_masks_only_in_the_loss",
       "response_masks were applied to the minibatches' masks (the loss) but not to the rollout's: the KL charge, "
       "the score's position, the advantages and the stats still counted the tool's tokens")
class TrainerToolMasksOnlyInLoss(_ref.PPOTrainer):
    def step(self, queries, responses, scores, response_masks=None):
        return _trainer_step(self, queries, responses, scores, response_masks, tool_masked_in_rollout=False,
                             tool_masked_in_logprob_stats=False)


@part3("PPOTrainer", "response_masks_only_in_the_rollout",
       "response_masks were applied to the rollout's masks but not to the minibatches' forward passes: the loss "
       "still took the ratio (and the value error) of the tool's tokens")
class TrainerToolMasksOnlyInRollout(_ref.PPOTrainer):
    def step(self, queries, responses, scores, response_masks=None):
        return _trainer_step(self, queries, responses, scores, response_masks, tool_masked_in_minibatch=False)


@part3("PPOTrainer", "logprob_stats_count_tool_tokens",
       "objective/logprobs and objective/ref_logprobs summed every real token, the tool's included (sum over the "
       "policy's tokens: multiply by the masks)")
class TrainerLogprobStatsUnmasked(_ref.PPOTrainer):
    def step(self, queries, responses, scores, response_masks=None):
        return _trainer_step(self, queries, responses, scores, response_masks, tool_masked_in_logprob_stats=False)


@part3("batched_forward_pass", "mask_from_token_ids",
       "the masks were computed from the token ids (response != pad_id), so a PAD token sampled inside a response "
       "is masked out; masks must come from the lengths")
def forward_mask_from_ids(model, queries, responses, *, temperature=1.0, pad_id=0, return_logits=False):
    return _forward_pass(model, queries, responses, temperature, pad_id, return_logits, mask_from_ids=True)
