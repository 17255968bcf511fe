"""Part 10 — asynchronous RL: rollouts made by another policy, and how the learner corrects for them.

Every loop so far samples, then learns, then samples again: the policy that wrote a rollout is
exactly the policy that learns from it. That is not how RL on language models runs at scale.
Generation runs in an inference engine (vLLM, SGLang) on its own workers while the learner
trains, and what reaches the learner differs from on-policy data in two ways:

- **stale**: the sampler still holds the weights of a few updates ago. Batch i is sampled by
  policy version i − k while the learner, at version i, trains on it. Waiting for the newest
  weights before every batch would leave the sampler or the learner idle half the time;
  overlapping them is the whole speed-up — at the price of off-policy data.
- **mismatched**: even with the *same* weights, the sampler's log-probs are not the learner's.
  The engine computes in bfloat16 (or fp8), with other kernels, batched differently, and
  sometimes with top-p/top-k applied: log π_sampler(token) ≠ log π_learner(token). Ignoring
  this makes "on-policy" PPO silently off-policy (trl#4159, #4772, #6789).

Both are fixed the way Part 0's §5 fixes any sample from the wrong distribution: **importance
sampling**. A rollout drawn from the sampler (the *behaviour* policy) is reweighted by
π_learner / π_sampler (target over behaviour) — per token, or once per sequence — and the
weight is capped, because a ratio far from 1 has enormous variance. TRL's GRPOTrainer does
this by default (``vllm_importance_sampling_mode``, cap ``vllm_importance_sampling_cap`` = 3);
DeepSeek-V3.2 adds a mask for the most off-policy sequences, and an importance-weighted KL
estimator. Those are this part's exercises, with the bookkeeping of who samples what.

The processes (given code, not an exercise; they call your functions: ``workbook/async_rl/``,
``python -m workbook reason --samplers 1``, docs/async_rl.md). Sampler and learner are processes
of ``torch.distributed`` (gloo), as in Part 6. In order:

    sampler:  receive weights (version v) and orders ("sample batch i") in the order the learner
              sent them → sample the batch with the weights it holds, keeping its own log-probs of
              the sampled tokens → score it → send (tokens, log-probs, scores, v) → repeat. The
              learner orders batch i only once the version :func:`sampling_version` names (fixed
              lag: reproducible) has been sent, or while :func:`may_sample` allows it (free-running).
    learner:  receive batch i → recompute the log-probs with its own weights (PPO's "old"
              log-probs) → advantages → weights = :func:`importance_weights`, drop rows with
              :func:`off_policy_sequence_mask`, add β·:func:`kl_loss_term` → update → send the new
              weights (version i + 1) to every sampler, and the orders they now allow.

Exercises (tests: ``pytest tests/test_part10_async.py``):
  1. importance_weights          TRL's four correction modes, capped, masked, never NaN, with stats
  2. off_policy_sequence_mask    DeepSeek-V3.2: drop negative-advantage rows the learner would hardly write
  3. kl_loss_term                k1, k3 and the importance-weighted k3, and which gradient each gives
  4. sampling_version            fixed lag: batch i is sampled by version max(0, i − lag)
  5. may_sample                  free-running: may a sampler at version v sample batch i?

Conventions are Parts 3, 5 and 7's: response tensors ``[batch, resp]``, right-padded; a mask is
True (or 1) on the tokens the policy wrote, in any dtype; a row may be empty. Part 3's
:func:`kl_penalty` gives k1 and k3 — your Part 3 runs inside exercise 3.

Theory: part0_theory.md, section 16.
"""

from __future__ import annotations

import torch
from jaxtyping import Bool, Float
from torch import Tensor

from workbook.typecheck import Mask, typechecked

from .part3_rlhf import kl_penalty

MODES = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")
KL_ESTIMATORS = ("k1", "k3", "k3_is")

# --------------------------------------------------------------------------------------
# Importance weights for a rollout made by another policy
# --------------------------------------------------------------------------------------


@typechecked
def importance_weights(
    learner_logprobs: Float[Tensor, "batch resp"],
    sampler_logprobs: Float[Tensor, "batch resp"],
    mask: Mask[Tensor, "batch resp"],
    mode: str = "sequence_mask",
    cap: float = 3.0,
) -> tuple[Float[Tensor, "batch resp"], dict[str, Tensor]]:
    """Per-token importance weights that correct a rollout sampled by another policy (TRL's four modes).

    ``learner_logprobs`` are log π_learner of the sampled tokens (the policy taking this step: PPO's
    "old" log-probs, recomputed by the learner), ``sampler_logprobs`` the same tokens' log-probs as
    the sampler computed them (older weights, lower precision). With the log-ratio of a token

        ℓ_t = learner_logprobs_t − sampler_logprobs_t          (ratio = target / behaviour)

    and the cap C = ``cap``:

        token_truncate:     w_t = min(r_t, C)              r_t = exp(ℓ_t), one ratio per token
        token_mask:         w_t = r_t if r_t ≤ C else 0
        sequence_truncate:  w_t = min(r_b, C)              r_b = exp(Σ_t mask·ℓ_t), one ratio per row
        sequence_mask:      w_t = r_b if r_b ≤ C else 0    (r_b = the product of the row's token ratios)

    A sequence ratio is given to every real token of its row. Weights are 0 outside the mask. A
    ratio exactly C is kept (mask modes) and is C (truncate modes). Compare in probability space
    (r > C) or in log space (ℓ > log C), as you like: both are correct, and they can disagree only
    on a ratio within a rounding error of C (exp and log round), which no test judges — the ties
    the tests try (C = 1, ℓ = 0) are exact in both. The loss then multiplies each
    token's policy-gradient term by its weight. Returns ``(weights, stats)``: weights in the dtype
    of ``learner_logprobs``, without an autograd graph (they are constants of the loss, even when
    the inputs require grad), finite always. ``stats`` (detached 0-dim tensors, same dtype):

        "is/capped_frac"     share of units whose ratio > C (truncated or masked)
        "is/weight_mean"     mean weight over real tokens
        "is/log_ratio_mean"  mean log-ratio over units

    where a *unit* is a real token in the token modes (its ℓ_t) and a row with at least one real
    token in the sequence modes (its Σ_t ℓ_t). With no unit at all every stat is 0, not NaN.
    The dtype promise holds when the two log-probs differ in dtype too (a float64 or bfloat16
    sampler): ℓ in the promoted dtype is fine, the weights and stats are the learner's.
    ``ValueError`` for a mode not in :data:`MODES`, or a cap that is not a positive finite number:
    ``cap <= 0``, NaN (``nan <= 0`` is False: test ``not cap > 0``, or NaN on its own) or inf —
    an infinite cap is no cap, and a sequence ratio that overflows would then be an inf weight.

    Why a cap: an importance weight is unbiased but its variance grows with how far the two
    policies are apart; one token the sampler gave probability 0.001 and the learner 0.5 gets a
    weight of 500, and one such token steers the whole update. Capping trades a little bias for
    bounded variance (Ionides' truncated IS, TRL's default C = 3).
    **Truncate or mask**: truncating keeps the token at weight C — biased towards the sampler but
    the sample still counts; masking throws the token (or row) away — no bias from the samples
    kept, but fewer samples, so more variance, and a systematic drop of what the learner now likes
    much more than the sampler did. **Token or sequence**: a response's probability is the product
    of its tokens', so the correct ratio is per sequence; but a product of hundreds of ratios near
    1 explodes or vanishes (200 tokens at ℓ = 0.05 give e¹⁰ ≈ 22,000), so nearly every long row is
    capped — the token modes have lower variance, and are biased. **Direction**: the ratio is
    learner / sampler — the distribution we want over the one the data came from; inverted, every
    correction pushes the wrong way.

    Traps:
    - Positions outside the mask may hold *anything* (padding, −inf, NaN from a sampler that never
      scored them). ``w * mask`` gives ``NaN · 0 = NaN``: select with ``torch.where``.
    - A row of 200 tokens at ℓ = +5 each is a sequence ratio of e¹⁰⁰⁰ = inf in float: the weight
      must come out C (truncate) or 0 (mask), never inf or NaN (``inf · 0`` is NaN too).
    - ``is/capped_frac`` counts rows, not tokens, in the sequence modes.
    """
    if mode not in MODES:
        raise ValueError(f"unknown importance-sampling mode {mode!r}; expected one of {', '.join(MODES)}")
    if not 0 < cap < float("inf"):                     # False for NaN too
        raise ValueError(f"cap must be a positive finite number, got {cap}")
    real = mask != 0                                   # bool, whatever the mask's dtype
    zero = torch.zeros((), dtype=learner_logprobs.dtype, device=learner_logprobs.device)
    # The weights are constants of the loss: no gradient flows through them. The learner's dtype whatever the
    # sampler's (a float64 sampler would promote the difference).
    log_ratio = torch.where(real, (learner_logprobs.detach() - sampler_logprobs.detach()).to(zero.dtype), zero)

    if mode.startswith("token"):
        unit_log_ratio, unit_real = log_ratio, real    # one unit per token
        per_token_log_ratio = log_ratio
    else:
        unit_log_ratio = log_ratio.sum(dim=1)          # log of the product of the row's ratios
        unit_real = real.any(dim=1)                    # a row counts when it has a real token
        per_token_log_ratio = unit_log_ratio[:, None].expand_as(log_ratio)

    ratio = torch.exp(per_token_log_ratio)             # may be inf: never multiplied, only selected
    capped = ratio > cap
    if mode.endswith("truncate"):
        weights = torch.where(capped, torch.full_like(ratio, cap), ratio)
    else:
        weights = torch.where(capped, zero, ratio)
    weights = torch.where(real, weights, zero)

    units = unit_real.sum()
    tokens = real.sum()
    unit_capped = torch.exp(unit_log_ratio) > cap
    stats = {
        "is/capped_frac": (unit_capped & unit_real).sum().to(zero.dtype) / units.clamp(min=1),
        "is/weight_mean": weights.sum() / tokens.clamp(min=1),
        "is/log_ratio_mean": torch.where(unit_real, unit_log_ratio, zero).sum() / units.clamp(min=1),
    }
    return weights, {k: v.detach() for k, v in stats.items()}


# --------------------------------------------------------------------------------------
# The off-policy sequence mask
# --------------------------------------------------------------------------------------


@typechecked
def off_policy_sequence_mask(
    learner_logprobs: Float[Tensor, "batch resp"],
    sampler_logprobs: Float[Tensor, "batch resp"],
    advantages: Float[Tensor, "batch"],
    mask: Mask[Tensor, "batch resp"],
    delta: float,
) -> Bool[Tensor, "batch"]:
    """Which rows to keep in the loss: DeepSeek-V3.2's off-policy sequence mask (TRL ``off_policy_mask_threshold``).

    With ``n_b`` the real tokens of row b and the mean log-ratio of behaviour over target,

        D_b = (1 / n_b) · Σ_t mask_bt · (sampler_logprobs − learner_logprobs)_bt      (mean log π_old/π_θ)

    row b is **dropped** (False) when ``advantages[b] < 0`` **and** ``D_b > delta``; every other
    row is kept (True). Strict on both: a row at exactly ``D_b = delta`` is kept, and so is one
    with ``A_b = 0``. A row with no real token is kept (it weighs nothing anyway). Positions
    outside the mask may hold anything (NaN, −inf) and never decide a row. Returns a bool tensor
    (no graph). ``ValueError`` if ``delta < 0`` (or NaN): D_b estimates KL(π_sampler ‖ π_learner),
    which is ≥ 0 in expectation, so a negative threshold would drop negative-advantage rows whose
    two policies agree exactly — the rows nobody wants to drop.

    Why: a row with negative advantage pushes the probability of its tokens down. If the sampler
    wrote it while the learner would hardly write it (D_b large: the tokens are much less likely
    under the learner), pushing them down further teaches almost nothing about the learner's own
    behaviour, and the importance weights of such rows are the most extreme: these are the
    highest-variance, least informative updates, and DeepSeek found them to destabilise training.
    Rows with positive advantage are kept whatever their D_b: they pull the learner towards what
    worked.

    Traps:
    - D_b is a *mean* over the row's real tokens (not a sum, not over the padded width): δ is a
      per-token threshold, the same for short and long rows.
    - The sign: sampler − learner, the behaviour's log-prob over the target's.
    """
    if not delta >= 0:
        raise ValueError(f"delta must be >= 0, got {delta}")
    real = mask != 0
    zero = torch.zeros((), dtype=learner_logprobs.dtype, device=learner_logprobs.device)
    diff = torch.where(real, sampler_logprobs.detach() - learner_logprobs.detach(), zero)
    lengths = real.sum(dim=1)
    mean_diff = diff.sum(dim=1) / lengths.clamp(min=1)
    drop = (advantages.detach() < 0) & (mean_diff > delta) & (lengths > 0)
    return ~drop


# --------------------------------------------------------------------------------------
# KL placement: which estimator, and the gradient it gives
# --------------------------------------------------------------------------------------


@typechecked
def kl_loss_term(
    logprobs: Float[Tensor, "*shape"],
    ref_logprobs: Float[Tensor, "*shape"],
    sampler_logprobs: Float[Tensor, "*shape"],
    estimator: str = "k3_is",
) -> Float[Tensor, "*shape"]:
    """The per-token KL term to add to the loss (the trainer adds β times its masked mean).

    ``logprobs`` = log π_θ of the sampled tokens, **with** gradient (the policy being trained);
    ``ref_logprobs`` = log π_ref, ``sampler_logprobs`` = log of the policy that *sampled* the
    tokens: both constants — only ``logprobs`` receives a gradient, even when the others still
    require grad (detach them). With ``r = ref_logprobs − logprobs`` (log π_ref/π_θ):

        k1:     logprobs − ref_logprobs                               (Part 3's kl_penalty "kl")
        k3:     exp(r) − 1 − r                                        (Part 3's kl_penalty "k3")
        k3_is:  exp(logprobs − sampler_logprobs) · k3                 (DeepSeek-V3.2; TRL use_bias_correction_kl)

    elementwise, any shape (all three inputs the same shape). In ``k3_is`` the ratio π_θ/π_sampler
    **carries the gradient** (through ``logprobs``); the sampler's log-probs are constants.
    ``ValueError`` for an estimator not in :data:`KL_ESTIMATORS`.

    Why: what matters in a loss is its expected **gradient**, not its value. For tokens drawn from
    a sampler q, the loss's gradient in expectation is Σ_a q(a)·∇f(a). Then, exactly:

    - ``k3_is``: Σ_a q·∇(π/q · k3) = ∇ Σ_a π·k3 = ∇ KL(π_θ ‖ π_ref), for *any* q — unbiased even
      when the data is stale or mismatched. (Σ_a π·k3 = KL(π‖π_ref) because Σ_a π_ref = 1.)
    - ``k3`` on samples of π_θ itself: Σ_a π·∇k3 = Σ_a (π − π_ref)·∇log π = −Σ π_ref ∇log π =
      ∇ KL(π_ref ‖ π_θ): the gradient of the *other* direction — a fine value estimator, a biased
      gradient (trl#4967, verl#3276).
    - ``k1`` on samples of π_θ: Σ_a π·∇log π = ∇ Σ π = 0: as a loss it does nothing on average.
      k1 belongs in the **reward** (Part 3's ``compute_rewards``), where the policy gradient
      E_π[−k1·∇log π] = −∇ KL(π_θ ‖ π_ref) exactly.

    Traps:
    - The ratio of k3_is is π_θ / π_sampler (target over behaviour), with its gradient: detached,
      the expected gradient is that of KL(π_ref ‖ π_θ) again.
    - k3's r is ref − logprobs: flipped, it estimates KL(π_ref ‖ π_θ)'s value instead.
    """
    if estimator not in KL_ESTIMATORS:
        raise ValueError(f"unknown KL estimator {estimator!r}; expected one of {', '.join(KL_ESTIMATORS)}")
    ref = ref_logprobs.detach()
    if estimator == "k1":
        return kl_penalty(logprobs, ref, "kl")
    k3 = kl_penalty(logprobs, ref, "k3")
    if estimator == "k3":
        return k3
    return torch.exp(logprobs - sampler_logprobs.detach()) * k3


# --------------------------------------------------------------------------------------
# Staleness bookkeeping
# --------------------------------------------------------------------------------------


def sampling_version(batch: int, lag: int) -> int:
    """Fixed-lag mode: the policy version that samples batch ``batch``.

    Batches are numbered from 0; version v is the policy after v updates (version 0 the initial
    one), and the learner trains on batch i with version i. With a fixed lag k, batch i is
    sampled by version ``max(0, i − k)``: the first k + 1 batches by the initial policy, then
    always k updates behind. ``lag = 0`` is the synchronous loop (sample with the weights you
    train). ``ValueError`` for a negative ``batch`` or ``lag``.

    Why a fixed lag: a free-running sampler uses whatever version has arrived when it starts a
    batch, which depends on timing — fast, but not reproducible. Fixing the version of each batch
    makes an asynchronous run give bit-for-bit the same result for a seed, and lets you measure
    what staleness k alone does to learning.

    Trap: the first batches have no version i − k < 0 to wait for: they use version 0 — the
    int 0, not ``False`` (``batch > lag and batch - lag`` returns ``False`` there).
    """
    if batch < 0 or lag < 0:
        raise ValueError(f"batch and lag must be >= 0, got batch={batch}, lag={lag}")
    return max(0, batch - lag)


def may_sample(batch: int, version: int, max_staleness: int) -> bool:
    """Free-running mode: may a sampler holding policy ``version`` sample batch ``batch``?

    The learner trains on batch i with version i, so a batch sampled by version v is ``i − v``
    updates stale. Allowed iff ``0 ≤ batch − version ≤ max_staleness``: with ``max_staleness =
    0`` only the learner's own version (the synchronous loop); otherwise the sampler may run up
    to ``max_staleness`` batches ahead of the learner, and waits for new weights beyond that
    (TRL's ``AsyncGRPOTrainer`` ``max_staleness``). ``ValueError`` for a negative argument, or a
    ``version`` newer than ``batch`` (the learner makes version i + 1 by training on batch i,
    which must have been sampled first: while batch i is sampled, no version above i exists).

    Why a bound: without one a fast sampler runs ever further ahead, its batches ever staler;
    the importance weights then cap or mask nearly everything and the learner learns from
    almost nothing. The bound is the knob between throughput and staleness.

    Trap: the bound is inclusive — exactly ``max_staleness`` behind is allowed.
    """
    if batch < 0 or version < 0 or max_staleness < 0:
        raise ValueError(f"arguments must be >= 0, got batch={batch}, version={version}, max_staleness={max_staleness}")
    if version > batch:
        raise ValueError(f"version {version} cannot exist while batch {batch} is sampled (the learner trains batch i "
                         "with version i)")
    return batch - version <= max_staleness
