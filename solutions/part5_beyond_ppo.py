"""Part 5 — beyond PPO: GRPO, RLOO and DPO on the same review model.

Part 3 trained the review GPT with PPO: a value head (the critic) predicted, at every prefix,
how the review would be scored, and GAE turned its predictions into per-token advantages.
Most RL on language models today drops the critic. This part keeps Part 3's model, prompts,
reward and KL leash and changes only what is new:

- **GRPO** (Shao et al. 2024): sample G reviews per prompt; a review's advantage is how much
  better it scored than its *group*, ``(r − mean) / std``; every token of it gets that one
  number; PPO's clipped ratio per token; the KL to the reference goes into the *loss* (k3).
- **RLOO** (Ahmadian et al. 2024): also k reviews per prompt, but the baseline of review i is
  the mean of the *other* k − 1 (leave-one-out), which keeps the gradient unbiased; the KL is
  folded into the reward, as in Part 3, but per review.
- **DPO** (Rafailov et al. 2023): no sampling at all. The same preference pairs that trained
  Part 3's reward model train the policy directly, with Bradley–Terry on the implicit reward
  β·(log π − log π_ref).

Exercises (tests: ``pytest tests/test_part5_beyond_ppo.py``):
  1. repeat_for_groups     G copies of each prompt, laid out so groups reduce with a view
  2. grpo_advantages       group-relative advantages, scaled by group std, batch std, or not
  3. grpo_loss             clipped ratio per token + β·k3 KL, three ways to normalise by length
  4. rloo_advantages       leave-one-out baseline, KL folded into the reward without gradient
  5. dpo_loss              −log σ(β·[Δ_chosen − Δ_rejected]) from summed response log-probs

Your Part 5 calls *your* Part 3 (``from .part3_rlhf import ...``): log-probs, masked means,
the KL estimators, the batched forward pass and the Bradley–Terry loss are not written twice.
The trainers at the bottom are given code; ``python -m workbook rlhf --algo grpo|rloo|dpo``
runs them (``--impl solutions`` for the reference).

Conventions are Part 3's: losses are minimised; response tensors are ``[batch, resp]``,
right-padded; a mask is 1 on real response tokens and 0 on padding — here it may be bool,
int or float (convert it once with ``mask.to(logprobs.dtype)``).

Theory: part0_theory.md, section 10.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor, nn

from workbook.lm.model import GPT
from workbook.typecheck import Mask, typechecked

from .part3_rlhf import (batched_forward_pass, entropy_from_logits, kl_penalty, masked_mean, model_token_masks,
                         preference_loss)

Scale = Literal["group", "batch", "none"]
Normalisation = Literal["sequence", "token", "constant"]

# --------------------------------------------------------------------------------------
# Groups: G samples per prompt
# --------------------------------------------------------------------------------------


@typechecked
def repeat_for_groups(prompts: list[str], group_size: int) -> tuple[list[str], Int[Tensor, "batch"]]:
    """Each prompt ``group_size`` times in a row, and the index of the prompt each row came from.

        repeat_for_groups(["a", "b"], 3) == (["a", "a", "a", "b", "b", "b"], tensor([0, 0, 0, 1, 1, 1]))

    Sampling the whole list in one batch gives G completions per prompt. The *layout* is the
    point: with a prompt's G rows next to each other, any per-sample tensor ``x`` of length
    ``num_prompts · G`` becomes ``x.view(num_prompts, G)``, one row per group, and a group
    statistic is a reduction over ``dim=1`` (this is ``torch.repeat_interleave``'s layout).

    Raise a ``ValueError`` unless ``group_size >= 2`` and there is at least one prompt: a
    group of one has no baseline — its own reward is its mean, so its advantage is always 0.

    Traps:
    - ``prompts * G`` tiles the list (a, b, a, b, …): then ``view(num_prompts, G)`` groups
      samples of *different* prompts together, and every baseline is wrong.
    - The index is the prompt's position in ``prompts`` (int64), not the position inside
      the group.
    """
    if group_size < 2:
        raise ValueError(f"group_size must be at least 2 (a group of one has no baseline), got {group_size}")
    if not prompts:
        raise ValueError("need at least one prompt")
    repeated = [p for p in prompts for _ in range(group_size)]
    index = torch.arange(len(prompts)).repeat_interleave(group_size)
    return repeated, index


# --------------------------------------------------------------------------------------
# GRPO
# --------------------------------------------------------------------------------------


@typechecked
def grpo_advantages(
    rewards: Float[Tensor, "batch"], group_size: int, scale: str = "group", eps: float = 1e-4
) -> Float[Tensor, "batch"]:
    """Group-relative advantages: each reward minus its group's mean, optionally scaled.

    ``rewards`` is laid out as :func:`repeat_for_groups` lays out samples (group g is rows
    ``g·G … g·G + G − 1``). With ``grouped = rewards.view(−1, G)``:

        centred = grouped − grouped.mean(dim=1)                    (per group)
        scale="group":  centred / (grouped.std(dim=1) + eps)       GRPO (Shao et al. 2024)
        scale="batch":  centred / (rewards.std() + eps)            one std for the whole batch
        scale="none":   centred                                    Dr. GRPO (Liu et al. 2025)

    Standard deviations are torch's default (unbiased). The result is flat again (``[batch]``)
    and carries no gradient. A group whose rewards are all equal has nothing to learn from:
    its advantages are 0 — never NaN, which is what ``eps`` guarantees for ``"group"`` — up to
    float rounding (see the last trap).

    Why the choice: dividing by the group's std makes every prompt count equally, but it
    up-weights prompts where the samples barely differ (tiny std: easy or hopeless prompts)
    and biases the gradient; Dr. GRPO drops it, ``"batch"`` keeps one common scale.

    Traps:
    - The mean is per *group*, not over the batch: the baseline is "the other answers to
      the same prompt", not "all answers".
    - ``view(G, −1)`` instead of ``view(−1, G)`` groups samples of different prompts.
    - No ``eps`` (or ``eps`` inside a square root of the std) → 0/0 = NaN for a tied group.
    - Rounding in a tie: in float32 the mean of eight 0.3s is not exactly 0.3, so
      ``grouped − grouped.mean(dim=1)`` leaves ±3e-8, which ``/ (std + eps)`` makes ±3e-4 — the
      same sign for the whole group. That is harmless, and what TRL computes; exact zeros (centre
      on one member first, ``grouped − grouped[:, :1]``, or set a tied group to 0) are as right.
      The tests accept either: 0 within 1e-3 for a tie.
    - A ``ValueError`` for ``group_size < 2``, a batch that is not a whole number of groups,
      or an unknown ``scale``.
    """
    if group_size < 2:
        raise ValueError(f"group_size must be at least 2, got {group_size}")
    if rewards.shape[0] % group_size:
        raise ValueError(f"{rewards.shape[0]} rewards are not a whole number of groups of {group_size}")
    if scale not in ("group", "batch", "none"):
        raise ValueError(f"unknown scale {scale!r}; expected group, batch or none")
    with torch.no_grad():
        grouped = rewards.view(-1, group_size)
        centred = grouped - grouped.mean(dim=1, keepdim=True)
        if scale == "group":
            centred = centred / (grouped.std(dim=1, keepdim=True) + eps)
        elif scale == "batch":
            centred = centred / (rewards.std() + eps)
        return centred.reshape(-1)


@typechecked
def grpo_loss(
    logprobs: Float[Tensor, "batch resp"],
    old_logprobs: Float[Tensor, "batch resp"],
    ref_logprobs: Float[Tensor, "batch resp"],
    advantages: Float[Tensor, "batch"],
    mask: Mask[Tensor, "batch resp"],
    cliprange: float = 0.2,
    beta: float = 0.04,
    normalisation: str = "sequence",
    max_len: int | None = None,
) -> tuple[Float[Tensor, ""], dict[str, Tensor]]:
    """GRPO's loss: PPO's clipped ratio per token with the sequence's advantage, plus β·KL.

    ``logprobs`` come from the policy being trained, ``old_logprobs`` from the same policy
    when the responses were sampled (no gradient), ``ref_logprobs`` from the frozen
    reference; ``advantages[b]`` is one number per response, shared by all its tokens.

        ratio    = exp(logprobs − old_logprobs)
        clipped  = −min(ratio · A, clip(ratio, 1 − ε, 1 + ε) · A)       per token, A = advantages[:, None]
        kl       = kl_penalty(logprobs, ref_logprobs, "k3")              per token, ≥ 0
        per_tok  = clipped + β · kl

    then one number from ``per_tok`` and the mask (``L(x)`` below, with ``n_b`` = the
    number of real tokens of row b and ``B`` the number of rows):

        "sequence":  mean over rows of (Σ_t x_bt / n_b)        GRPO's paper: 1/|o| per response
        "token":     Σ_bt x_bt / Σ_b n_b                        DAPO: every token weighs the same
        "constant":  Σ_bt x_bt / (B · max_len)                  Dr. GRPO: a fixed denominator

    Returns ``(loss, stats)``, ``loss = L(clipped) + β · L(kl)``, and ``stats`` holds detached
    0-dim tensors: ``loss/policy`` = L(clipped), ``loss/kl`` = L(kl) (before β),
    ``policy/clipfrac`` = masked mean of 1[the clipped term is the larger loss],
    ``policy/ratio`` = masked mean ratio, ``policy/approxkl`` = ½ masked mean (logprobs −
    old_logprobs)².

    Why the KL is here and not in the reward: the advantage is a group-normalised score, and
    a KL charge folded into the rewards would be normalised along with it; as a loss term its
    gradient pulls each token back towards the reference directly. k3 = e^{−d} − 1 + d with
    d = log π − log π_ref is unbiased for KL(π‖π_ref) on samples from π and never negative.

    How the normalisations weigh lengths: "sequence" gives a long response's tokens less
    weight each (a long wrong answer is penalised less per token — a bias towards length
    when advantages are negative); "token" and "constant" weigh every token equally.

    Traps:
    - ``max`` of the two losses (= min of the objectives), as in Part 3.
    - k3's direction: ``kl_penalty(logprobs, ref_logprobs, "k3")``, policy first.
    - The KL is *added* (a penalty), with weight β; β = 0 must drop it exactly.
    - "sequence" is a mean of per-row means, not one masked mean over all tokens.
    - "constant" divides by ``B · max_len`` whatever the actual lengths; it needs
      ``max_len >= 1`` (``ValueError`` without it, for ``max_len < 1``, or for an unknown normalisation).
    """
    if normalisation not in ("sequence", "token", "constant"):
        raise ValueError(f"unknown normalisation {normalisation!r}; expected sequence, token or constant")
    if normalisation == "constant" and (max_len is None or max_len < 1):
        raise ValueError("normalisation='constant' needs max_len >= 1 (the fixed length to divide by)")
    m = mask.to(logprobs.dtype)

    def reduce(x: Tensor) -> Tensor:
        if normalisation == "sequence":
            return ((x * m).sum(dim=1) / m.sum(dim=1)).mean()
        if normalisation == "token":
            return masked_mean(x, m)
        return (x * m).sum() / (x.shape[0] * max_len)

    ratio = torch.exp(logprobs - old_logprobs)
    adv = advantages[:, None]
    losses = -adv * ratio
    losses_clipped = -adv * torch.clamp(ratio, 1.0 - cliprange, 1.0 + cliprange)
    clipped = torch.maximum(losses, losses_clipped)
    kl = kl_penalty(logprobs, ref_logprobs, "k3")
    pg_loss, kl_loss = reduce(clipped), reduce(kl)
    stats = {
        "loss/policy": pg_loss,
        "loss/kl": kl_loss,
        "policy/clipfrac": masked_mean((losses_clipped > losses).to(m.dtype), m),
        "policy/ratio": masked_mean(ratio, m),
        "policy/approxkl": 0.5 * masked_mean((logprobs - old_logprobs) ** 2, m),
    }
    return pg_loss + beta * kl_loss, {k: v.detach() for k, v in stats.items()}


# --------------------------------------------------------------------------------------
# RLOO
# --------------------------------------------------------------------------------------


@typechecked
def rloo_advantages(
    scores: Float[Tensor, "batch"],
    logprobs: Float[Tensor, "batch resp"],
    ref_logprobs: Float[Tensor, "batch resp"],
    mask: Mask[Tensor, "batch resp"],
    group_size: int,
    kl_coef: float,
) -> tuple[Float[Tensor, "batch"], Float[Tensor, "batch"]]:
    """RLOO: the KL folded into each response's reward, then a leave-one-out baseline.

    The whole response is one action. Its reward is the score minus β times its KL to the
    reference, summed over its real tokens (Part 3's k1 estimator, ``kl_penalty(…, "kl")``):

        rewards_b    = scores_b − kl_coef · Σ_t (logprobs_bt − ref_logprobs_bt) · mask_bt
        baseline_i   = mean of the *other* k − 1 rewards of i's group = (Σ_group r − r_i) / (k − 1)
        advantages_i = rewards_i − baseline_i

    with groups laid out as :func:`repeat_for_groups` does (k = ``group_size``). Returns
    ``(advantages, rewards)``, both ``[batch]``, with no gradient (the log-probs that reach
    this function may carry one: the KL here is part of the *reward*, a number, not a loss).

    Why leave one out: a baseline that does not depend on sample i keeps the policy gradient
    unbiased (E[b · ∇log π(y_i)] = 0 only if b is independent of y_i). The group mean
    *includes* r_i, which shrinks every advantage by (k − 1)/k — and that mean is not
    independent of y_i. Leave-one-out fixes both, and costs nothing: no critic, k samples.

    Traps:
    - The baseline includes the sample itself (plain group mean).
    - Divide by k − 1, not k.
    - The KL is summed over the response's tokens, not averaged: the sequence's KL is the
      sum of its per-token log-ratios.
    - ``ValueError`` for ``group_size < 2`` or a batch that is not whole groups.
    """
    if group_size < 2:
        raise ValueError(f"group_size must be at least 2 (leave-one-out needs another sample), got {group_size}")
    if scores.shape[0] % group_size:
        raise ValueError(f"{scores.shape[0]} scores are not a whole number of groups of {group_size}")
    with torch.no_grad():
        m = mask.to(logprobs.dtype)
        kl = (kl_penalty(logprobs, ref_logprobs, "kl") * m).sum(dim=1)
        rewards = scores - kl_coef * kl
        grouped = rewards.view(-1, group_size)
        baseline = (grouped.sum(dim=1, keepdim=True) - grouped) / (group_size - 1)
        return (grouped - baseline).reshape(-1), rewards


# --------------------------------------------------------------------------------------
# DPO
# --------------------------------------------------------------------------------------


@typechecked
def dpo_loss(
    chosen_logprobs: Float[Tensor, "batch resp_c"],
    rejected_logprobs: Float[Tensor, "batch resp_r"],
    ref_chosen_logprobs: Float[Tensor, "batch resp_c"],
    ref_rejected_logprobs: Float[Tensor, "batch resp_r"],
    chosen_mask: Mask[Tensor, "batch resp_c"],
    rejected_mask: Mask[Tensor, "batch resp_r"],
    beta: float = 0.1,
) -> tuple[Float[Tensor, ""], dict[str, Tensor]]:
    """DPO's loss on preference pairs, from per-token log-probs of both responses.

    The response log-probability is the *sum* of its tokens' log-probs (a whole-sequence
    probability). With the implicit reward of a response, ``β · (log π(y|x) − log π_ref(y|x))``:

        r_chosen   = β · Σ_t (chosen_logprobs − ref_chosen_logprobs) · chosen_mask
        r_rejected = β · Σ_t (rejected_logprobs − ref_rejected_logprobs) · rejected_mask
        loss       = mean over pairs of −log σ(r_chosen − r_rejected)

    — Part 3's Bradley–Terry ``preference_loss`` applied to the implicit rewards.
    ``stats`` (detached 0-dim tensors): ``rewards/chosen`` and ``rewards/rejected`` (means of
    the implicit rewards), ``rewards/margins`` (mean of r_chosen − r_rejected),
    ``rewards/accuracies`` (fraction of pairs with r_chosen > r_rejected, strictly).

    Why it works: the KL-regularised RL objective max E[r] − β·KL(π‖π_ref) has the closed-form
    optimum π*(y|x) ∝ π_ref(y|x)·exp(r(x, y)/β). Solved for r, the reward is β·log(π*/π_ref)
    up to a term that depends on x only — which cancels in a Bradley–Terry *difference*. So
    fitting the policy's implicit reward to the preferences fits the policy RLHF would find,
    with no reward model, no sampling and no critic.

    Traps:
    - Sum over tokens, not mean: a mean changes the model (it is length-normalised, as in
      SimPO) and the β no longer means what it means.
    - Subtract the reference's log-probs: without them this is just "raise chosen, lower
      rejected", with nothing holding the policy near π_ref.
    - Chosen minus rejected inside the sigmoid, β outside the difference of differences.
    - ``−log(sigmoid(x))`` overflows for large negative x; ``logsigmoid`` does not.
    """
    cm, rm = chosen_mask.to(chosen_logprobs.dtype), rejected_mask.to(rejected_logprobs.dtype)
    chosen_rewards = beta * ((chosen_logprobs - ref_chosen_logprobs) * cm).sum(dim=1)
    rejected_rewards = beta * ((rejected_logprobs - ref_rejected_logprobs) * rm).sum(dim=1)
    loss = preference_loss(chosen_rewards, rejected_rewards)
    stats = {
        "rewards/chosen": chosen_rewards.mean(),
        "rewards/rejected": rejected_rewards.mean(),
        "rewards/margins": (chosen_rewards - rejected_rewards).mean(),
        "rewards/accuracies": (chosen_rewards > rejected_rewards).to(chosen_rewards.dtype).mean(),
    }
    return loss, {k: v.detach() for k, v in stats.items()}


# --------------------------------------------------------------------------------------
# The trainers (given code: they call your functions above and Part 3's)
# --------------------------------------------------------------------------------------


class LanguageModelPolicy(nn.Module):
    """The policy without a critic: the LM's logits, and zeros where Part 3's values were.

    ``batched_forward_pass`` expects ``model(input_ids, attention_mask) → (logits, values)``;
    critic-free methods have no values, so this wrapper returns zeros for them and Part 3's
    forward pass, evaluation and checkpointing work unchanged (``self.lm`` is the GPT).
    """

    def __init__(self, lm: GPT):
        super().__init__()
        self.lm = lm

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        logits = self.lm(input_ids, attention_mask)
        return logits, logits.new_zeros(logits.shape[:2])


@dataclass
class GroupConfig:
    """Hyper-parameters of one GRPO or RLOO step."""

    algo: Literal["grpo", "rloo"] = "grpo"
    """grpo: group-relative advantages, k3 KL in the loss; rloo: leave-one-out, KL in the reward."""
    group_size: int = 8
    """Samples per prompt (G for GRPO, k for RLOO); the batch is whole groups."""
    learning_rate: float = 2e-4
    """Adam learning rate."""
    mini_batch_size: int = 32
    """Samples per gradient step."""
    epochs: int = 1
    """Passes over each batch (GRPO's μ; 1 = every step on fresh samples, ratio ≈ 1)."""
    cliprange: float = 0.2
    """ε of the clipped ratio."""
    beta: float = 0.04
    """KL weight: in the loss (GRPO, k3) or in the reward (RLOO, k1 summed per response)."""
    scale: Scale = "group"
    """GRPO's advantage scaling: group, batch or none (ignored by RLOO)."""
    normalisation: Normalisation = "sequence"
    """How per-token losses become one number: sequence, token or constant."""
    max_len: int = 110
    """The fixed length of normalisation='constant' (the generation limit)."""
    ent_coef: float = 0.0
    """Weight of an entropy bonus (masked mean token entropy, subtracted from the loss)."""
    temperature: float = 1.0
    """Sampling temperature; logits are divided by it in every forward pass."""
    max_grad_norm: float | None = 1.0
    """Clip the gradient's global norm to this (None: no clipping)."""
    seed: int = 0
    """Seeds the minibatch order."""


class GroupTrainer:
    """One critic-free step on whole groups of (query, response, score): GRPO or RLOO.

    The two differ only in the advantages (and so in where the KL goes); the update is
    GRPO's clipped per-token loss for both (RLOO with β = 0 in the loss: its KL is in the
    reward). With ``epochs=1`` and one minibatch the ratio is exactly 1 and the update is
    plain REINFORCE with the group baseline.
    """

    def __init__(self, config: GroupConfig, model: nn.Module, ref_model: nn.Module, pad_id: int):
        self.config, self.model, self.ref_model, self.pad_id = config, model, ref_model, pad_id
        self.optimizer = torch.optim.Adam(model.parameters(), lr=config.learning_rate)
        self.generator = torch.Generator().manual_seed(config.seed)

    def _forward(self, model: nn.Module, queries: list[Tensor], responses: list[Tensor], return_logits: bool = False):
        return batched_forward_pass(model, queries, responses, temperature=self.config.temperature,
                                    pad_id=self.pad_id, return_logits=return_logits)

    def advantages(self, scores: Tensor, logprobs: Tensor, ref_logprobs: Tensor, masks: Tensor) -> tuple[Tensor, float]:
        """(advantages, β in the loss): GRPO keeps β for its k3 loss term, RLOO spent it in the reward."""
        cfg = self.config
        if cfg.algo == "grpo":
            return grpo_advantages(scores, cfg.group_size, cfg.scale), cfg.beta
        if cfg.algo == "rloo":
            return rloo_advantages(scores, logprobs, ref_logprobs, masks, cfg.group_size, cfg.beta)[0], 0.0
        raise ValueError(f"unknown algo {cfg.algo!r}; expected grpo or rloo")

    def step(self, queries: list[Tensor], responses: list[Tensor], scores: Float[Tensor, "batch"],
             response_masks: list[Tensor] | None = None) -> dict[str, float]:
        """One update on the batch; returns its stats (floats).

        ``response_masks`` (Part 9; None before it): one bool tensor per response, True where the
        policy wrote the token, False where a tool did. As in Part 3's ``PPOTrainer.step``, the
        masks of every forward pass of the policy become ``model_token_masks(...)``, so the loss,
        the KL (in the loss or, for RLOO, in the reward) and every stat count the policy's tokens
        only: a tool's tokens are context the policy read, not actions it chose. A response with
        no token of the policy's (say, an episode cut off and masked out) still counts in its
        group's baseline through its score, but has nothing to train: it is left out of the
        minibatches' losses (a per-response mean over zero tokens would be 0/0).
        """
        cfg = self.config
        batch = len(queries)
        if len(responses) != batch or scores.shape[0] != batch:
            raise ValueError(f"queries, responses and scores must have the same length, got {batch}, {len(responses)}, {scores.shape[0]}")
        self.model.eval()  # no dropout: the "old" log-probs must be the sampling policy's
        with torch.no_grad():
            old_logprobs, logits, _, masks = self._forward(self.model, queries, responses, return_logits=True)
            masks = model_token_masks(masks, responses, response_masks)  # only the policy's tokens are actions
            ref_logprobs, _, _, _ = self._forward(self.ref_model, queries, responses)
            entropy = masked_mean(entropy_from_logits(logits), masks) if masks.sum() > 0 else masks.new_zeros(())
        advantages, loss_beta = self.advantages(scores, old_logprobs, ref_logprobs, masks)
        has_tokens = (masks.sum(dim=1) > 0).cpu()  # indexes the permutation, which lives on the CPU

        collected: dict[str, list[Tensor]] = {}
        for _ in range(cfg.epochs):
            for idx in torch.randperm(batch, generator=self.generator).split(cfg.mini_batch_size):
                if response_masks is not None:
                    idx = idx[has_tokens[idx]]  # rows without a token of the policy's: nothing to train
                    if len(idx) == 0:
                        continue
                rows = idx.tolist()
                new_logprobs, new_logits, _, mb_masks = self._forward(
                    self.model, [queries[i] for i in rows], [responses[i] for i in rows], return_logits=cfg.ent_coef > 0)
                if response_masks is not None:
                    mb_masks = model_token_masks(mb_masks, [responses[i] for i in rows], [response_masks[i] for i in rows])
                width = mb_masks.shape[1]
                loss, stats = grpo_loss(new_logprobs, old_logprobs[idx, :width], ref_logprobs[idx, :width], advantages[idx],
                                        mb_masks, cfg.cliprange, loss_beta, cfg.normalisation, cfg.max_len)
                if cfg.ent_coef > 0:
                    mb_entropy = masked_mean(entropy_from_logits(new_logits), mb_masks)
                    loss = loss - cfg.ent_coef * mb_entropy
                    stats["policy/entropy"] = mb_entropy.detach()
                self.optimizer.zero_grad()
                loss.backward()
                if cfg.max_grad_norm is not None:
                    nn.utils.clip_grad_norm_(self.model.parameters(), cfg.max_grad_norm)
                self.optimizer.step()
                for k, v in stats.items():
                    collected.setdefault(k, []).append(v)

        # The same headline numbers as PPOTrainer, so the training command and the curves
        # read every algorithm alike: objective/kl is the mean per-response k1 KL.
        out = {
            "objective/kl": ((old_logprobs - ref_logprobs) * masks).sum(dim=1).mean().item(),
            "objective/kl_coef": cfg.beta,
            "objective/entropy": entropy.item(),
            "objective/logprobs": (old_logprobs * masks).sum(dim=1).mean().item(),
            "objective/ref_logprobs": (ref_logprobs * masks).sum(dim=1).mean().item(),
            f"{cfg.algo}/mean_scores": scores.mean().item(),
            f"{cfg.algo}/advantages_abs_mean": advantages.abs().mean().item(),
            "tokens/responses_len_mean": masks.sum(dim=1).mean().item(),
        }
        for k, v in collected.items():
            out[f"{cfg.algo}/{k}"] = torch.stack(v).mean().item()
        return out


@dataclass
class DPOConfig:
    """Hyper-parameters of one DPO step."""

    beta: float = 0.1
    """β of the implicit reward β·log(π/π_ref): smaller lets the policy move further."""
    learning_rate: float = 1e-4
    """Adam learning rate."""
    max_grad_norm: float | None = 1.0
    """Clip the gradient's global norm to this (None: no clipping)."""


class DPOTrainer:
    """One DPO step on a batch of (prompt, chosen, rejected) token ids: no sampling, no reward model."""

    def __init__(self, config: DPOConfig, model: nn.Module, ref_model: nn.Module, pad_id: int):
        self.config, self.model, self.ref_model, self.pad_id = config, model, ref_model, pad_id
        self.optimizer = torch.optim.Adam(model.parameters(), lr=config.learning_rate)

    def _logprobs(self, model: nn.Module, queries: list[Tensor], chosen: list[Tensor], rejected: list[Tensor]):
        # Chosen and rejected in one forward pass: rows [0, n) are chosen, [n, 2n) rejected.
        logprobs, _, _, masks = batched_forward_pass(model, queries + queries, chosen + rejected, pad_id=self.pad_id)
        n = len(queries)
        return logprobs[:n], logprobs[n:], masks[:n], masks[n:]

    def step(self, queries: list[Tensor], chosen: list[Tensor], rejected: list[Tensor]) -> dict[str, float]:
        if not (len(queries) == len(chosen) == len(rejected)) or not queries:
            raise ValueError(f"need as many queries, chosen and rejected responses (at least one), got "
                             f"{len(queries)}, {len(chosen)}, {len(rejected)}")
        self.model.eval()
        with torch.no_grad():
            ref_chosen, ref_rejected, _, _ = self._logprobs(self.ref_model, queries, chosen, rejected)
        pol_chosen, pol_rejected, chosen_mask, rejected_mask = self._logprobs(self.model, queries, chosen, rejected)
        loss, stats = dpo_loss(pol_chosen, pol_rejected, ref_chosen, ref_rejected, chosen_mask, rejected_mask,
                               self.config.beta)
        self.optimizer.zero_grad()
        loss.backward()
        if self.config.max_grad_norm is not None:
            nn.utils.clip_grad_norm_(self.model.parameters(), self.config.max_grad_norm)
        self.optimizer.step()
        out = {"dpo/loss": loss.item(), "objective/kl_coef": self.config.beta}
        out.update({f"dpo/{k}": v.item() for k, v in stats.items()})
        return out
