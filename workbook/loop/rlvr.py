"""Part 7's algorithms for the loop: dapo, dr_grpo, gspo and cispo (registered into ``ALGORITHMS``).

    python -m workbook reason --impl solutions --algo dapo      # the reasoning task (workbook/loop/reasoning.py)

They are GRPO-family methods: no critic, ``G`` samples per problem, the group's mean as the
baseline. What differs is how the advantage is scaled, which samples count and how the
per-token terms become one loss:

==========  ====================  ================================================  ==================
algorithm   advantage             policy loss                                       samples in the loss
==========  ====================  ================================================  ==================
grpo        (r − mean) / std      clipped ratio, ε = 0.2 both sides, 1/|o| per      all
            (Part 5)              response, + β·k3 KL (Part 5's ``grpo_loss``)
dr_grpo     r − mean              clipped ratio, ÷ (B · max_new_tokens), β = 0      all
            (Part 5, Dr. GRPO)    (Part 5's trainer with ``scale="none"``,
                                  ``normalisation="constant"``)
dapo        (r − mean) / std      clip-higher (ε_low 0.2, ε_high 0.28), token       groups with a reward
            on r + overlong       mean (``clip_higher_loss``), β = 0                spread; no truncated
            penalty                                                                 completion
gspo        (r − mean) / std      one length-normalised ratio per sequence,         all
                                  clipped per sequence (``gspo_loss``)
cispo       (r − mean) / std      −sg(clip(ratio)) · A · log π (``cispo_loss``)     all
rloo        leave-one-out         Part 5 (KL in the reward)                         all
==========  ====================  ================================================  ==================

``dapo``, ``gspo`` and ``cispo`` run :class:`RLVRTrainer`, which calls the learner's Part 7
functions (``--impl``: ``overlong_penalty``, ``groups_with_signal``, ``completion_mask`` and
the three losses) together with their Part 3 and 5 (``batched_forward_pass``,
``grpo_advantages``, ``kl_penalty``, ``masked_mean``). ``dr_grpo`` is Part 5's trainer with
Dr. GRPO's two settings. Dynamic sampling here *drops* the groups without a signal from the
update rather than sampling more problems to refill the batch (DAPO's paper refills): the
update gets cheaper as more groups are solved, and the share kept is a curve.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from types import ModuleType

import torch
from torch import Tensor, nn

from workbook.loop.algorithms import ALGORITHMS, ENTROPY, KL, LENGTH, Algorithm, Group, load_part5, model_tokens
from workbook.loop.task import Task
from workbook.rlhf.data import load_part3
from workbook.runs import load_part

LOSSES = ("clip_higher", "gspo", "cispo")
KL_ROWS = 64
"""Completions the KL-to-reference curve is estimated on when β = 0 (it enters no loss then)."""


def load_part7(impl: str) -> ModuleType:
    """``exercises.part7_reasoning`` or ``solutions.part7_reasoning``."""
    return load_part(impl, "part7_reasoning")


@dataclass
class RLVRConfig:
    """Hyper-parameters of one step of :class:`RLVRTrainer`."""

    loss: str = "clip_higher"
    """clip_higher (DAPO), gspo or cispo."""
    group_size: int = 16
    """Samples per problem; the batch is whole groups."""
    learning_rate: float = 1e-4
    """Adam learning rate."""
    mini_batch_size: int = 256
    """Samples per gradient step (of the samples kept)."""
    epochs: int = 1
    """Passes over each batch (1 with one minibatch: every step on fresh samples, ratio = 1)."""
    eps_low: float = 0.2
    """Lower clip: the ratio (or CISPO's weight) is kept ≥ 1 − eps_low."""
    eps_high: float = 0.28
    """Upper clip: the ratio (or weight) is kept ≤ 1 + eps_high."""
    scale: str = "group"
    """Advantage scaling of Part 5's grpo_advantages: group, batch or none."""
    normalisation: str = "token"
    """token or sequence (clip_higher and cispo; gspo is per sequence by definition)."""
    beta: float = 0.0
    """Weight of a k3 KL-to-reference term in the loss (0: none, as DAPO)."""
    dynamic_sampling: bool = False
    """Train only on groups whose rewards differ (DAPO)."""
    overlong_cache: int = 0
    """Soft overlong penalty over the last this many tokens before max_len (0: off)."""
    mask_truncated: bool = False
    """Keep completions cut off at max_len out of the loss (DAPO's overlong filtering)."""
    max_len: int = 64
    """The generation limit (max_new_tokens)."""
    temperature: float = 1.0
    """Sampling temperature; logits are divided by it in every forward pass."""
    max_grad_norm: float | None = 1.0
    """Clip the gradient's global norm to this (None: no clipping)."""
    seed: int = 0
    """Seeds the minibatch order."""
    # Part 10: a batch another policy sampled (stale weights, lower precision) and what the step does about it.
    correction: str = "none"
    """none, or one of Part 10's importance_weights modes (token_truncate, token_mask, sequence_truncate, sequence_mask)."""
    is_cap: float = 3.0
    """The importance weight's cap C."""
    off_policy_delta: float = 0.0
    """Part 10's off-policy sequence mask threshold δ (0: off)."""
    kl_estimator: str = "k3"
    """The KL term in the loss (β > 0): k3, or Part 10's k3_is (k3 weighted by π/π_sampler)."""


class RLVRTrainer:
    """One critic-free step with Part 7's data-side techniques and one of its policy losses."""

    def __init__(self, config: RLVRConfig, model: nn.Module, ref_model: nn.Module, pad_id: int, eos_id: int, impl: str):
        if config.loss not in LOSSES:
            raise ValueError(f"unknown loss {config.loss!r}; expected one of {', '.join(LOSSES)}")
        self.config, self.model, self.ref_model, self.pad_id, self.eos_id = config, model, ref_model, pad_id, eos_id
        self.part3, self.part5, self.part7, self.impl = load_part3(impl), load_part5(impl), load_part7(impl), impl
        self.optimizer = torch.optim.Adam(model.parameters(), lr=config.learning_rate)
        self.generator = torch.Generator().manual_seed(config.seed)

    def part10(self) -> ModuleType:
        """The learner's Part 10 (loaded only when a setting needs it)."""
        return load_part(self.impl, "part10_async")

    def part9(self) -> ModuleType:
        """The learner's Part 9 (loaded only for a task with a tool: Part 7 runs without it)."""
        return load_part(self.impl, "part9_agents")

    def _forward(self, model: nn.Module, queries: list[Tensor], responses: list[Tensor], return_logits: bool = False):
        return self.part3.batched_forward_pass(model, queries, responses, temperature=self.config.temperature,
                                               pad_id=self.pad_id, return_logits=return_logits)

    def _loss(self, logprobs: Tensor, old: Tensor, adv: Tensor, mask: Tensor,
              weights: Tensor | None = None) -> tuple[Tensor, dict[str, Tensor]]:
        cfg, p7 = self.config, self.part7
        extra = {} if weights is None else {"weights": weights}  # only then: a learner's Part 7 from before Part 10 still runs
        if cfg.loss == "gspo":
            return p7.gspo_loss(logprobs, old, adv, mask, cfg.eps_low, cfg.eps_high, **extra)
        fn = p7.clip_higher_loss if cfg.loss == "clip_higher" else p7.cispo_loss
        return fn(logprobs, old, adv, mask, cfg.eps_low, cfg.eps_high, cfg.normalisation, **extra)

    def step(self, queries: list[Tensor], responses: list[Tensor], scores: Tensor,
             response_masks: list[Tensor] | None = None, sampler_logprobs: Tensor | None = None) -> dict[str, float]:
        """One step; ``response_masks`` (Part 9): per response, True where the policy wrote the token.

        With them the loss mask is the learner's Part 9 ``agent_loss_mask`` (the tool's tokens
        and, with ``mask_truncated``, cut-off episodes out) and every statistic counts the
        model's tokens only; without them it is Part 7's ``completion_mask``, as before.

        ``sampler_logprobs`` (Part 10, ``[batch, resp]``): the batch was sampled by another
        policy — an older version, a bfloat16 copy — with these log-probs. The step measures the
        mismatch against its own log-probs (``mismatch/*``), and with ``correction`` multiplies
        each token's loss term by the learner's ``importance_weights`` (π_learner/π_sampler,
        capped), with ``off_policy_delta`` leaves out the learner's ``off_policy_sequence_mask``
        rows, and with ``kl_estimator="k3_is"`` uses ``kl_loss_term(..., "k3_is")`` for the KL.
        PPO's ratio stays π_θ/π_old, π_old being the learner's policy at the step's start.
        """
        cfg, p3, p5, p7 = self.config, self.part3, self.part5, self.part7
        batch = len(queries)
        if len(responses) != batch or scores.shape[0] != batch:
            raise ValueError(f"queries, responses and scores must have the same length, got {batch}, {len(responses)}, {scores.shape[0]}")
        scores = scores.detach().float().cpu()
        # The reward the advantages see: the verifier's score, plus DAPO's soft overlong penalty.
        lengths = torch.tensor([len(r) for r in responses])
        shaped = scores + p7.overlong_penalty(lengths, cfg.max_len, cfg.overlong_cache) if cfg.overlong_cache else scores
        advantages = p5.grpo_advantages(shaped, cfg.group_size, cfg.scale)
        # Dynamic sampling decides on the verifier's scores: a group whose answers are all right
        # (or all wrong) teaches nothing, whatever their lengths.
        signal = p7.groups_with_signal(scores, cfg.group_size)
        keep = signal.repeat_interleave(cfg.group_size) if cfg.dynamic_sampling else torch.ones(batch, dtype=torch.bool)
        if response_masks is None:
            loss_mask, truncated = p7.completion_mask([r.cpu() for r in responses], self.eos_id, cfg.mask_truncated)
        else:
            loss_mask, truncated = self.part9().agent_loss_mask([r.cpu() for r in responses], [m.cpu() for m in response_masks],
                                                                self.eos_id, cfg.mask_truncated)

        self.model.eval()  # no dropout: the "old" log-probs must be the sampling policy's
        # With β = 0 (DAPO's default) the reference enters no loss, only the KL curve: it is then
        # estimated on the first KL_ROWS completions (whole groups), at a fraction of the cost of
        # a reference forward pass over the whole batch (about a tenth of an iteration).
        kl_rows = batch if cfg.beta > 0 else min(batch, KL_ROWS)
        with torch.no_grad():
            old_logprobs, logits, _, masks = self._forward(self.model, queries, responses, return_logits=True)
            # The tool's tokens are context, not actions: out of the KL and the stats too (Part 3's given helper).
            masks = p3.model_token_masks(masks, responses, response_masks)
            ref_logprobs, _, _, _ = self._forward(self.ref_model, queries[:kl_rows], responses[:kl_rows])
            entropy = p3.masked_mean(p3.entropy_from_logits(logits), masks)
        ref_width = ref_logprobs.shape[1]
        loss_mask = loss_mask.to(old_logprobs.device)[:, :masks.shape[1]]
        advantages = advantages.to(old_logprobs.device)
        weights, behaviour, off_stats = None, None, {}
        if sampler_logprobs is not None:  # Part 10: sampled by another policy
            behaviour = sampler_logprobs.to(old_logprobs.device)[:, :masks.shape[1]]
            off_stats = mismatch_stats(old_logprobs, behaviour, masks)
            if cfg.correction != "none":
                weights, is_stats = self.part10().importance_weights(old_logprobs, behaviour, masks, cfg.correction, cfg.is_cap)
                off_stats |= {k: float(v) for k, v in is_stats.items()}
            if cfg.off_policy_delta > 0:
                kept_rows = self.part10().off_policy_sequence_mask(old_logprobs, behaviour, advantages, masks,
                                                                   cfg.off_policy_delta)
                loss_mask = loss_mask * kept_rows.to(loss_mask.dtype)[:, None]
                off_stats["is/sequences_masked_frac"] = 1.0 - kept_rows.float().mean().item()

        kept = keep.nonzero().flatten()
        collected: dict[str, list[Tensor]] = {}
        for _ in range(cfg.epochs if len(kept) else 0):
            for pick in kept[torch.randperm(len(kept), generator=self.generator)].split(cfg.mini_batch_size):
                rows = pick.tolist()
                new_logprobs, _, _, mb_masks = self._forward(self.model, [queries[i] for i in rows], [responses[i] for i in rows])
                width = mb_masks.shape[1]
                idx = pick.to(old_logprobs.device)
                mask = loss_mask[idx, :width]
                loss, stats = self._loss(new_logprobs, old_logprobs[idx, :width], advantages[idx], mask,
                                         None if weights is None else weights[idx, :width])
                stats = {**stats, "loss/policy": loss.detach()}
                if cfg.beta > 0:  # k3 (unbiased, ≥ 0) per token, as a token mean over the loss's tokens
                    if cfg.kl_estimator == "k3_is":  # weighted by π/π_sampler: its expected gradient is KL's (Part 10)
                        sampled_by = (behaviour if behaviour is not None else old_logprobs)[idx, :width]
                        kl = self.part10().kl_loss_term(new_logprobs, ref_logprobs[idx, :width], sampled_by, "k3_is")
                    else:
                        kl = p3.kl_penalty(new_logprobs, ref_logprobs[idx, :width], "k3")
                    kl_loss = p3.masked_mean(kl, mask) if mask.sum() > 0 else (kl * mask).sum()
                    loss = loss + cfg.beta * kl_loss
                    stats["loss/kl"] = kl_loss.detach()
                self.optimizer.zero_grad()
                loss.backward()
                if cfg.max_grad_norm is not None:
                    nn.utils.clip_grad_norm_(self.model.parameters(), cfg.max_grad_norm)
                self.optimizer.step()
                for k, v in stats.items():
                    collected.setdefault(k, []).append(v.detach().float())

        out = {
            "objective/kl": ((old_logprobs[:kl_rows, :ref_width] - ref_logprobs) * masks[:kl_rows, :ref_width]).sum(dim=1).mean().item(),
            "objective/kl_coef": cfg.beta,
            "objective/entropy": entropy.item(),
            "tokens/responses_len_mean": masks.sum(dim=1).mean().item(),
            "tokens/truncated_frac": truncated.float().mean().item(),
            "rlvr/groups_kept": keep.float().mean().item(),
            "rlvr/advantages_abs_mean": advantages.abs().mean().item(),
            "rlvr/shaped_reward_mean": shaped.mean().item(),
        }
        for k in ("policy/clipfrac_low", "policy/clipfrac_high", "policy/ratio", "loss/policy"):
            out[f"rlvr/{k}"] = torch.stack(collected[k]).mean().item() if k in collected else 0.0
        if "loss/kl" in collected:
            out["rlvr/loss/kl"] = torch.stack(collected["loss/kl"]).mean().item()
        return out | off_stats


@torch.no_grad()
def mismatch_stats(learner: Tensor, sampler: Tensor, masks: Tensor) -> dict[str, float]:
    """How far the sampler's log-probs are from the learner's on the policy's tokens (Part 10's curves).

    ``mismatch/logp_abs_diff``: mean |log π_learner − log π_sampler| per token;
    ``mismatch/kl``: KL(π_sampler ‖ π_learner) per token, estimated with k3 on the sampler's samples.
    """
    n = masks.sum().clamp(min=1)
    d = torch.where(masks > 0, learner - sampler, torch.zeros_like(learner))  # log π_learner/π_sampler
    return {"mismatch/logp_abs_diff": (d.abs().sum() / n).item(), "mismatch/kl": ((torch.expm1(d) - d) * masks).sum().item() / n.item()}


class RLVR(Group):
    """dapo, gspo or cispo in the loop: Part 5's policy without a critic (:class:`Group`), :class:`RLVRTrainer`."""

    LOSS = {"dapo": "clip_higher", "gspo": "gspo", "cispo": "cispo"}

    def make_trainer(self, args, tok) -> RLVRTrainer:
        config = RLVRConfig(
            loss=self.LOSS[args.algo], group_size=args.group_size, learning_rate=args.learning_rate,
            mini_batch_size=args.mini_batch_size, epochs=args.ppo_epochs, eps_low=args.cliprange, eps_high=args.eps_high,
            scale=args.grpo_scale, normalisation=args.loss_normalisation, beta=args.kl_coef,
            dynamic_sampling=args.dynamic_sampling, overlong_cache=args.overlong_cache, mask_truncated=args.mask_truncated,
            max_len=args.max_new_tokens, temperature=args.temperature, seed=args.seed, correction=args.correction,
            is_cap=args.is_cap, off_policy_delta=args.off_policy_delta, kl_estimator=args.kl_estimator)
        return RLVRTrainer(config, self.policy, self.reference, tok.pad_id, tok.eos_id, args.impl)

    def step(self, batch, scores: Tensor, it: int) -> dict[str, float]:
        stale = {} if batch.sampler_logprobs is None else {"sampler_logprobs": batch.sampler_logprobs}
        return self.trainer.step(batch.queries, batch.responses, scores, **model_tokens(batch), **stale)


def dr_grpo(args, model, tok, task: Task, seed: int) -> Group:
    """Dr. GRPO: Part 5's GRPO trainer (its ``--grpo-scale none --loss-normalisation constant`` are defaults)."""
    return Group(dataclasses.replace(args, algo="grpo"), model, tok, task, seed)


CLIP_LOW = ("rlvr/policy/clipfrac_low", "clipped fraction, low (A < 0)")
CLIP_HIGH = ("rlvr/policy/clipfrac_high", "clipped fraction, high (A > 0)")


def _rlvr_title(args) -> str:
    parts = [f"G={args.group_size}", f"ε={args.cliprange:g}/{args.eps_high:g}", f"β={args.kl_coef:g}",
             f"scale={args.grpo_scale}", f"lr={args.learning_rate:g}"]
    if args.algo != "gspo":
        parts.append(f"loss per {args.loss_normalisation}")
    if args.dynamic_sampling:
        parts.append("dynamic sampling")
    if args.overlong_cache:
        parts.append(f"overlong ramp {args.overlong_cache}")
    if args.mask_truncated:
        parts.append("truncated masked")
    return ", ".join(parts)


PART7_ALGORITHMS: dict[str, Algorithm] = {
    name: Algorithm(name, "part7_reasoning", RLVR, panels=(ENTROPY, LENGTH, CLIP_LOW, CLIP_HIGH, KL),
                    x_label=f"{name.upper()} iteration", title=_rlvr_title)
    for name in ("dapo", "gspo", "cispo")
} | {
    "dr_grpo": Algorithm(
        "dr_grpo", "part5_beyond_ppo", dr_grpo,
        panels=(ENTROPY, LENGTH, ("grpo/policy/clipfrac", "clipped fraction"), KL), x_label="Dr. GRPO iteration",
        title=lambda a: f"G={a.group_size}, β={a.kl_coef:g}, scale={a.grpo_scale}, loss per {a.loss_normalisation}, "
                        f"lr={a.learning_rate:g}"),
}
ALGORITHMS.update(PART7_ALGORITHMS)  # the loop builds every algorithm from this one table
