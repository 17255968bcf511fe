"""Part 7 — reasoning with verifiable rewards: GRPO as it is run today, on arithmetic.

Part 5 trained the review model with GRPO against a sentiment score. Most RL on language
models now uses a reward nobody has to learn: a program *checks the answer* (RL with
verifiable rewards, RLVR — DeepSeek-R1, TinyZero, CS336's assignment 5). Here the model is
Part 3's character GPT pretrained on worked arithmetic (``workbook/reason``): it writes a
column-by-column scratchpad, then ``<answer>…</answer>``; its pretraining corpus forgets
carries, so its first guess is often a slip while the right answer is among its samples.

The pieces that are new compared with Part 5:

- **the reward**: parse the completion, 1 for a right answer, a small format reward for a
  well-formed wrong one, 0 for anything else — and never an exception, whatever the text;
- **pass@k** (Chen et al. 2021): the chance that at least one of k samples is right,
  estimated without bias from n ≥ k samples;
- **DAPO**'s data-side techniques (Yu et al. 2025): keep only groups whose rewards differ
  (dynamic sampling), a soft penalty for answers that run long, and no loss on completions
  cut off by the length limit;
- **the policy losses** used beside GRPO's: clip-higher (DAPO), GSPO's sequence-level ratio,
  CISPO's clipped, stop-gradient importance weight.

Exercises (tests: ``pytest tests/test_part7_reasoning.py``):
  1. answer_reward         parse, check, score: 1 / format_reward / 0, robust to any string
  2. pass_at_k             the unbiased estimator 1 − C(n−c, k)/C(n, k), stable for large n
  3. groups_with_signal    DAPO's dynamic sampling: which groups have a reward spread
  4. overlong_penalty      DAPO's soft overlong punishment, linear in the last L_cache tokens
  5. completion_mask       the loss mask of sampled completions, truncated ones masked out
  6. clip_higher_loss      PPO's clipped ratio with ε_low ≠ ε_high, token or sequence mean
  7. gspo_loss             one length-normalised ratio per sequence, clipped per sequence
  8. cispo_loss            −sg(clip(ratio)) · A · log π: clip the weight, keep every gradient

Your Part 7 calls *your* Parts 3 and 5 (``masked_mean``, ``repeat_for_groups``,
``grpo_advantages``): :func:`group_advantages_with_signal` below is given code that joins
them with your dynamic sampling. Conventions are Part 5's: losses are minimised; response
tensors are ``[batch, resp]``, right-padded; a mask is 1 on real response tokens (bool, int
or float). A row of a mask may be all zeros (a completion masked out): it must never make
a loss NaN.

Theory: part0_theory.md, section 13.
"""

from __future__ import annotations

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from workbook.typecheck import Mask, typechecked

from .part3_rlhf import masked_mean
from .part5_beyond_ppo import grpo_advantages, repeat_for_groups

OPEN_TAG, CLOSE_TAG = "<answer>", "</answer>"
ASCII_DIGITS = frozenset("0123456789")

# --------------------------------------------------------------------------------------
# The verifier
# --------------------------------------------------------------------------------------


@typechecked
def answer_reward(completions: list[str], answers: list[str], format_reward: float = 0.1) -> Float[Tensor, "batch"]:
    """Score each completion against its answer: 1, ``format_reward`` or 0 (float32, ``[batch]``).

    The answer of a completion is the text between its *first* ``<answer>`` and the first
    ``</answer>`` after that; text before or after the pair is ignored. It is **well-formed**
    when both tags are there and what lies between is one or more ASCII digits ``0-9`` and
    nothing else (no spaces, newlines, signs or other characters). Then:

        well-formed and equal to the answer as a number      → 1.0
        well-formed but a different number                   → format_reward
        anything else (no tags, empty, "12 ", "x", …)        → 0.0

    "As a number": leading zeros do not matter, in the completion or in the answer (``0632``
    is ``632``, ``000`` is ``0``); ``answers`` hold plain digit strings.

    Why a format reward: early in training many samples have the right shape and the wrong
    number; a little reward for the shape (TinyZero gives 0.1) keeps the format from
    drifting. Why small: it must never pay as much as being right — CS336 sets it to 0 so
    a policy cannot farm it. Both are allowed: ``0 <= format_reward < 1`` (else ValueError,
    NaN included, as for lists of different lengths).

    Traps:
    - This runs on whatever a policy writes: it must never raise, whatever the string.
    - ``str.isdigit`` and the regex ``\\d`` accept non-ASCII digits ("²", "٣"): not well-formed.
      A regex's ``$`` also matches before a final newline (``re.match(r"[0-9]+$", "12\\n")``
      succeeds): use ``re.fullmatch``.
    - ``int(s)`` refuses strings of more than 4300 digits (Python ≥ 3.11 raises): compare
      digit strings with the leading zeros stripped instead.
    - The *first* tag pair counts: a completion that writes several answers must not get to
      pick the right one.
    """
    if len(completions) != len(answers):
        raise ValueError(f"{len(completions)} completions but {len(answers)} answers")
    if not 0.0 <= format_reward < 1.0:
        raise ValueError(f"format_reward must be in [0, 1), got {format_reward}")
    scores = []
    for text, answer in zip(completions, answers):
        start = text.find(OPEN_TAG)
        end = text.find(CLOSE_TAG, start + len(OPEN_TAG)) if start >= 0 else -1
        inside = text[start + len(OPEN_TAG):end] if end >= 0 else ""
        if not inside or not set(inside) <= ASCII_DIGITS:
            scores.append(0.0)
        elif (inside.lstrip("0") or "0") == (answer.lstrip("0") or "0"):
            scores.append(1.0)
        else:
            scores.append(format_reward)
    return torch.tensor(scores, dtype=torch.float32)


# --------------------------------------------------------------------------------------
# pass@k
# --------------------------------------------------------------------------------------


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from ``n`` samples of which ``c`` are correct (Chen et al. 2021).

    pass@k is the probability that at least one of k samples is correct. Drawing k of the n
    samples without replacement, all k are wrong with probability C(n−c, k) / C(n, k), so

        pass@k = 1 − C(n−c, k) / C(n, k)
               = 1 − Π_{i = n−c+1 … n} (1 − k / i)            (the same number, stably)

    which is 1 exactly when n − c < k (every draw of k must include a correct one). Returns
    a Python float in [0, 1]. ``ValueError`` unless ``0 <= c <= n`` and ``1 <= k <= n``.

    Why not 1 − (1 − c/n)^k: plugging the estimate p̂ = c/n into 1 − (1 − p)^k is biased —
    the function is concave in p, so on average it *under*estimates pass@k (by whole points
    when c is small); the combinatorial form is exactly unbiased for the n samples you have.

    Traps:
    - Factorials in floating point overflow for n in the hundreds (``float(math.factorial(171))``
      raises), binomials for n in the thousands (``float(math.comb(1100, 550))`` raises); the
      product never leaves [0, 1].
    - c = n, k = n and n − c < k are edges, not special cases to forget: pass@k is 1 there
      (for c > 0), and pass@k is 0 when c = 0.
    """
    if not (0 <= c <= n and 1 <= k <= n):
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    all_wrong = 1.0
    for i in range(n - c + 1, n + 1):
        all_wrong *= 1.0 - k / i
    return 1.0 - all_wrong


# --------------------------------------------------------------------------------------
# DAPO's data-side techniques
# --------------------------------------------------------------------------------------


@typechecked
def groups_with_signal(rewards: Float[Tensor, "batch"], group_size: int) -> Bool[Tensor, "groups"]:
    """DAPO's dynamic sampling: True for each group whose rewards are not all equal.

    ``rewards`` is laid out as Part 5's ``repeat_for_groups`` lays out samples (group g is
    rows ``g·G … g·G + G − 1``); the result has one entry per group. A group carries a
    signal when its reward *spread* is positive, ``max − min > 0`` (exactly, no tolerance).

    Why: with group-relative advantages, a group whose G answers are all right (or all wrong)
    has advantage 0 everywhere — it costs a forward and backward pass and teaches nothing,
    and as training succeeds more and more groups are all right, so the effective batch
    shrinks. DAPO (Yu et al. 2025, arXiv 2503.14476) drops such groups and samples more
    prompts until the batch is full of groups with a signal.

    Traps:
    - "Mean ≠ 0" is not a signal: an all-correct group of 0/1 rewards has mean 1.
    - ``view(G, −1)`` groups samples of different prompts.
    - ``ValueError`` for ``group_size < 2`` or a batch that is not a whole number of groups.
    """
    if group_size < 2:
        raise ValueError(f"group_size must be at least 2, got {group_size}")
    if rewards.shape[0] % group_size:
        raise ValueError(f"{rewards.shape[0]} rewards are not a whole number of groups of {group_size}")
    grouped = rewards.detach().view(-1, group_size)
    return grouped.amax(dim=1) > grouped.amin(dim=1)


@typechecked
def overlong_penalty(lengths: Int[Tensor, "batch"], max_len: int, cache_len: int) -> Float[Tensor, "batch"]:
    """DAPO's soft overlong punishment, added to the reward of each completion (float32, ≤ 0).

    With ``L`` a completion's length in tokens and ``L_max = max_len``:

        L ≤ L_max − cache_len                 →  0
        L_max − cache_len < L ≤ L_max         →  (L_max − cache_len − L) / cache_len    (0 → −1)
        L > L_max                             →  −1

    Why soft: cutting long answers off with a hard penalty punishes a sound but long
    solution as hard as a rambling one, which is noise in the reward. A ramp over the last
    ``cache_len`` tokens before the limit tells the model "shorter, please" gradually (DAPO,
    Yu et al. 2025, arXiv 2503.14476).

    Traps:
    - Divide by ``cache_len``, not by ``max_len``: the ramp falls from 0 to −1 over the cache.
    - Past the limit the penalty stays at −1; it does not keep falling.
    - ``ValueError`` unless ``1 <= cache_len <= max_len``.
    """
    if not 1 <= cache_len <= max_len:
        raise ValueError(f"need 1 <= cache_len <= max_len, got cache_len={cache_len}, max_len={max_len}")
    expected = max_len - cache_len
    ramp = (expected - lengths).to(torch.float32) / cache_len
    return ramp.clamp(min=-1.0, max=0.0)


@typechecked
def completion_mask(
    responses: list[Int[Tensor, "_resp"]], eos_id: int, mask_truncated: bool = True
) -> tuple[Float[Tensor, "batch resp"], Bool[Tensor, "batch"]]:
    """The loss mask of sampled completions, and which of them were truncated.

    ``responses`` are the sampled token ids, one 1-D tensor per completion, each ending with
    ``eos_id`` if the model finished it and without if sampling stopped at the length limit.
    Returns ``(mask, truncated)``:

    - ``mask[b, t]`` (float32) = 1.0 for ``t < len(responses[b])`` (the EOS is a real token: the model
      chose to stop, and that choice is trained like any other), 0.0 after; ``resp`` is the
      longest response's length;
    - ``truncated[b]`` (bool) = True if response b does not end with ``eos_id`` (an empty response
      never ended either: truncated);
    - with ``mask_truncated``, every truncated row of ``mask`` is all zeros: its tokens are
      kept out of the loss (DAPO's overlong filtering; TRL's ``mask_truncated_completions``).

    Why: a completion cut off at the limit has no answer, so it scores 0 — but not because
    its reasoning was wrong, only because it was long. Training on it pushes down good but
    long reasoning; masking it out removes that noise (the soft penalty above is the
    gentler alternative).

    Traps:
    - The length of a response is ``len(r)``, not "where the padding starts": a sampled token
      may have any id, and the mask must come from the lengths. So must "truncated": ``eos_id``
      may be 0 (some tokenizers' EOS), and the last id of an empty response read from a batch
      padded with 0 would then be an EOS.
    - "Truncated" is "does not end with EOS", not "as long as the limit": an answer whose
      EOS falls exactly on the last allowed token finished.
    - Only the *last* token decides, and an EOS earlier in a response changes nothing (a
      sampler forced to continue, e.g. by a minimum length, or a tokenizer whose EOS id is
      also an ordinary token's): ``[5, EOS, 7]`` is truncated and 3 tokens long,
      ``[4, EOS, 6, EOS]`` finished and 4 tokens long.
    - ``ValueError`` for an empty list.
    """
    if not responses:
        raise ValueError("need at least one response")
    lengths = torch.tensor([len(r) for r in responses])
    width = int(lengths.max())
    mask = (torch.arange(width)[None, :] < lengths[:, None]).to(torch.float32)
    truncated = torch.tensor([len(r) == 0 or int(r[-1]) != eos_id for r in responses])
    if mask_truncated:
        mask = mask * (~truncated)[:, None]
    return mask, truncated


# --------------------------------------------------------------------------------------
# The policy losses
# --------------------------------------------------------------------------------------


@typechecked
def clip_higher_loss(
    logprobs: Float[Tensor, "batch resp"],
    old_logprobs: Float[Tensor, "batch resp"],
    advantages: Float[Tensor, "batch"],
    mask: Mask[Tensor, "batch resp"],
    eps_low: float = 0.2,
    eps_high: float = 0.28,
    normalisation: str = "token",
    weights: Float[Tensor, "batch resp"] | None = None,
) -> tuple[Float[Tensor, ""], dict[str, Tensor]]:
    """PPO's clipped surrogate with an asymmetric clip range: DAPO's clip-higher.

        ratio    = exp(logprobs − old_logprobs)
        per_tok  = −min(ratio · A, clip(ratio, 1 − eps_low, 1 + eps_high) · A),    A = advantages[:, None]

    then one number from the real tokens (``n_b`` = real tokens of row b):

        "token":     Σ_bt per_tok / Σ_b n_b               DAPO: every token weighs the same
        "sequence":  mean over rows with n_b > 0 of (Σ_t per_tok / n_b)      GRPO's 1/|o|

    A row with no real token (masked out) adds nothing; if no row has one, the loss is 0, and
    still a tensor that ``loss.backward()`` runs through (build it from ``logprobs``, e.g.
    ``(per_tok * mask).sum()``): the trainer calls backward on every minibatch, and one whose
    completions were all truncated must not stop training.
    ``stats`` (detached 0-dim tensors, token means over real tokens): ``policy/clipfrac_low``
    = share of tokens where the lower clip binds (A < 0 and ratio < 1 − eps_low),
    ``policy/clipfrac_high`` = share where the upper clip binds (A > 0 and ratio > 1 + eps_high),
    ``policy/ratio`` = mean ratio. With no real token at all every stat is 0, not NaN (the
    trainer stops on a NaN stat, and a minibatch whose completions were all truncated is no error).

    Why higher: with ε = 0.2 on both sides a token sampled with probability 0.01 may rise
    only to 0.012 in one update, while a likely token moves freely; the clip throttles
    exploration of unlikely-but-right tokens, and entropy collapses. Raising only the upper
    bound (ε_high = 0.28, ε_low = 0.2; Yu et al. 2025, arXiv 2503.14476) lets rare good
    tokens grow while still stopping the policy from crushing tokens with negative advantage.

    Traps:
    - Which ε goes where: the ratio is capped *above* at 1 + eps_high, *below* at 1 − eps_low.
    - ``max`` of the two losses (= min of the objectives), as in Parts 1 and 3.
    - Stats are detached: returning them with their graph keeps every activation alive.
    - ``ValueError`` for an unknown normalisation.

    ``weights`` (Part 10; ``None`` in every earlier part): per-token importance weights of a
    rollout sampled by *another* policy (Part 10's ``importance_weights``: detached, ≥ 0, 0
    outside the mask). Each token's term is multiplied by its weight before the reduction,
    and the reduction's denominators stay the counts of real tokens (``Σ_b n_b`` for
    "token", ``n_b`` per row for "sequence"), as TRL does:

        per_tok  ←  per_tok · weights

    ``None`` is all ones: exactly the unweighted result (bit for bit). The stats stay
    *unweighted*: they describe the policy's ratio and clip, not the correction.

    Why: the old log-probs of a rollout made by a stale or lower-precision sampler are the
    learner's, recomputed, so the ratio above corrects only the learner's own update; the
    weight π_old / π_sampler corrects for having sampled from someone else (truncated or
    masked in Part 10 so its variance is bounded).

    Traps (weights):
    - Multiply the *term*, not the ratio: ``clip(w · ratio)`` moves the clip to other tokens
      (a small weight pulls a ratio into the range, a large one pushes it out).
    - Do not divide by ``Σ w·m``: renormalising is self-normalised IS, a different (biased)
      estimator whose scale changes with the sampler; a token of weight 0 loses its term
      and keeps its count.
    - The weights are constants: ``detach`` them, or the loss pushes gradient into them.
    """
    if normalisation not in ("token", "sequence"):
        raise ValueError(f"unknown normalisation {normalisation!r}; expected token or sequence")
    m = mask.to(logprobs.dtype)
    ratio = torch.exp(logprobs - old_logprobs)
    adv = advantages[:, None]
    per_tok = torch.maximum(-adv * ratio, -adv * torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high))
    if weights is not None:  # the sampler's correction: on each token's term, after the clip, as a constant
        per_tok = per_tok * weights.detach()
    lengths = m.sum(dim=1)
    if normalisation == "token":  # Part 3's masked_mean, unless there is no real token at all
        loss = masked_mean(per_tok, m) if lengths.sum() > 0 else (per_tok * m).sum()
    else:
        has_tokens = (lengths > 0).to(m.dtype)
        per_row = (per_tok * m).sum(dim=1) / lengths.clamp(min=1.0)
        loss = (per_row * has_tokens).sum() / has_tokens.sum().clamp(min=1.0)
    total = m.sum().clamp(min=1.0)
    stats = {
        "policy/clipfrac_low": (((ratio < 1.0 - eps_low) & (adv < 0)).to(m.dtype) * m).sum() / total,
        "policy/clipfrac_high": (((ratio > 1.0 + eps_high) & (adv > 0)).to(m.dtype) * m).sum() / total,
        "policy/ratio": (ratio * m).sum() / total,
    }
    return loss, {k: v.detach() for k, v in stats.items()}


@typechecked
def gspo_loss(
    logprobs: Float[Tensor, "batch resp"],
    old_logprobs: Float[Tensor, "batch resp"],
    advantages: Float[Tensor, "batch"],
    mask: Mask[Tensor, "batch resp"],
    eps_low: float = 3e-4,
    eps_high: float = 4e-4,
    weights: Float[Tensor, "batch resp"] | None = None,
) -> tuple[Float[Tensor, ""], dict[str, Tensor]]:
    """GSPO: one importance ratio per *sequence*, length-normalised, clipped per sequence.

        s_b      = exp( Σ_t (logprobs − old_logprobs)_bt · mask_bt / n_b )     = (π/π_old)(o_b)^(1/n_b)
        loss_b   = −min(s_b · A_b, clip(s_b, 1 − eps_low, 1 + eps_high) · A_b)
        loss     = mean of loss_b over rows with n_b > 0     (0 if there are none: a 0 that
                                                              backward() runs through, as in clip_higher_loss)

    ``stats`` (detached 0-dim tensors, means over rows with tokens): ``policy/clipfrac_low``
    (A_b < 0 and s_b < 1 − eps_low), ``policy/clipfrac_high`` (A_b > 0 and s_b > 1 + eps_high),
    ``policy/ratio`` (mean s_b). With no row holding a token every stat is 0, not NaN (as in
    clip_higher_loss).

    Why: the reward is given to the whole sequence, so GSPO (Zheng et al. 2025, arXiv
    2507.18071) corrects off-policy-ness for the whole sequence too. Per-token ratios are
    noisy single-sample estimates whose noise accumulates over long answers (and is what
    destabilises mixture-of-experts models); the geometric mean over the tokens keeps the
    ratio's scale the same for any length, which is why its clip range is tiny (3e-4, 4e-4).

    Traps:
    - The log-ratio is *averaged* over real tokens, not summed (a sum is the raw sequence
      ratio, which explodes or vanishes with length) and not divided by the padded width.
    - The clip decides per sequence: when it binds, every token of that sequence loses its
      gradient together.

    ``weights`` (Part 10; ``None`` in every earlier part): per-token importance weights of a
    rollout sampled by another policy, as in :func:`clip_higher_loss` (detached, ≥ 0, 0
    outside the mask). GSPO's term is per sequence, and each real token carries it; weighting
    each token's copy and averaging over the row's n_b tokens gives each row's loss times the
    **mean of its real tokens' weights**:

        w̄_b      = Σ_t weights_bt · mask_bt / n_b
        loss     = mean of loss_b · w̄_b over rows with n_b > 0

    — the row count, like n_b, is unchanged by the weights (a row whose weights are all 0
    adds 0 and still counts). ``None`` is all ones: exactly the unweighted result (bit for
    bit). The stats stay unweighted (they describe s_b and its clip).

    Traps (weights): the weight multiplies the sequence's loss after the clip, not s_b before
    it; it is the *mean* of the tokens' weights, not their product (that is a sequence-level
    ratio, Part 10's other mode, and it vanishes or explodes with length) nor their sum (that
    weighs long rows more); and the weights are constants (``detach``).
    """
    m = mask.to(logprobs.dtype)
    lengths = m.sum(dim=1)
    has_tokens = (lengths > 0).to(m.dtype)
    log_s = ((logprobs - old_logprobs) * m).sum(dim=1) / lengths.clamp(min=1.0)
    s = torch.exp(log_s)
    per_seq = torch.maximum(-advantages * s, -advantages * torch.clamp(s, 1.0 - eps_low, 1.0 + eps_high))
    if weights is not None:  # each row's loss times the mean weight of its real tokens, a constant
        mean_weight = (weights.detach() * m).sum(dim=1) / lengths.clamp(min=1.0)
        per_seq = per_seq * mean_weight
    rows = has_tokens.sum().clamp(min=1.0)
    loss = (per_seq * has_tokens).sum() / rows
    stats = {
        "policy/clipfrac_low": (((s < 1.0 - eps_low) & (advantages < 0)).to(m.dtype) * has_tokens).sum() / rows,
        "policy/clipfrac_high": (((s > 1.0 + eps_high) & (advantages > 0)).to(m.dtype) * has_tokens).sum() / rows,
        "policy/ratio": (s * has_tokens).sum() / rows,
    }
    return loss, {k: v.detach() for k, v in stats.items()}


@typechecked
def cispo_loss(
    logprobs: Float[Tensor, "batch resp"],
    old_logprobs: Float[Tensor, "batch resp"],
    advantages: Float[Tensor, "batch"],
    mask: Mask[Tensor, "batch resp"],
    eps_low: float = 1.0,
    eps_high: float = 0.28,
    normalisation: str = "token",
    weights: Float[Tensor, "batch resp"] | None = None,
) -> tuple[Float[Tensor, ""], dict[str, Tensor]]:
    """CISPO: clip the importance weight, stop its gradient, and keep every token's gradient.

        w        = sg( clip(exp(logprobs − old_logprobs), 1 − eps_low, 1 + eps_high) )
        per_tok  = −w · A · logprobs,        A = advantages[:, None]

    reduced as :func:`clip_higher_loss` does ("token" or "sequence"; rows without tokens add
    nothing, no tokens at all gives a 0 that backward() runs through). ``sg`` is stop-gradient (``detach``): the gradient is
    ``−w · A · ∇log π`` — REINFORCE weighted by a capped importance weight. ``stats``
    (detached 0-dim tensors, token means): ``policy/clipfrac_low`` (ratio < 1 − eps_low),
    ``policy/clipfrac_high`` (ratio > 1 + eps_high) — whatever the advantage's sign, since
    the weight is clipped either way — and ``policy/ratio`` (mean ratio); with no real token
    at all every stat is 0, not NaN (as in clip_higher_loss).

    Why: in PPO's clipped objective a token whose ratio left the range contributes *no*
    gradient; MiniMax (MiniMax-M1, arXiv 2506.13585) found those were often the rare
    "reflective" tokens that matter. CISPO bounds the *weight* instead, so the variance is
    capped but no token is dropped. The paper sets no lower bound (``eps_low = 1``: the
    weight may fall to 0) and tunes only the upper one.

    Traps:
    - Without ``detach`` the weight's own gradient adds ``−A·w·log π`` terms: a different
      (and unbounded) update.
    - The loss is ``−w · A · logprobs``, with the log-probs themselves, not the ratio.
    - ``ValueError`` for an unknown normalisation.

    ``weights`` (Part 10; ``None`` in every earlier part): per-token importance weights of a
    rollout sampled by another policy, as in :func:`clip_higher_loss` (detached, ≥ 0, 0
    outside the mask) — not CISPO's own ``w``: each token's term is multiplied by its weight
    before the reduction, ``per_tok ← per_tok · weights``, denominators unchanged (real-token
    counts). ``None`` is all ones: exactly the unweighted result (bit for bit). The stats stay
    unweighted. Traps as in :func:`clip_higher_loss`: the weight goes on the term, not into
    the ratio before the clip (``clip(weights · ratio)`` caps the product at 1 + eps_high and
    undoes the correction); no renormalising by ``Σ weights·m``; ``detach`` it.
    """
    if normalisation not in ("token", "sequence"):
        raise ValueError(f"unknown normalisation {normalisation!r}; expected token or sequence")
    m = mask.to(logprobs.dtype)
    ratio = torch.exp(logprobs - old_logprobs)
    weight = torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high).detach()
    per_tok = -weight * advantages[:, None] * logprobs
    if weights is not None:  # the sampler's correction, on the term (after CISPO's own clip), a constant
        per_tok = per_tok * weights.detach()
    lengths = m.sum(dim=1)
    if normalisation == "token":  # Part 3's masked_mean, unless there is no real token at all
        loss = masked_mean(per_tok, m) if lengths.sum() > 0 else (per_tok * m).sum()
    else:
        has_tokens = (lengths > 0).to(m.dtype)
        per_row = (per_tok * m).sum(dim=1) / lengths.clamp(min=1.0)
        loss = (per_row * has_tokens).sum() / has_tokens.sum().clamp(min=1.0)
    total = m.sum().clamp(min=1.0)
    stats = {
        "policy/clipfrac_low": ((ratio < 1.0 - eps_low).to(m.dtype) * m).sum() / total,
        "policy/clipfrac_high": ((ratio > 1.0 + eps_high).to(m.dtype) * m).sum() / total,
        "policy/ratio": (ratio * m).sum() / total,
    }
    return loss, {k: v.detach() for k, v in stats.items()}


# --------------------------------------------------------------------------------------
# Given code: your Parts 3, 5 and 7 together
# --------------------------------------------------------------------------------------


def group_advantages_with_signal(
    prompts: list[str], rewards: Float[Tensor, "batch"], group_size: int, scale: str = "none"
) -> tuple[list[str], Float[Tensor, "batch"], Bool[Tensor, "batch"]]:
    """Part 5's group advantages with DAPO's dynamic sampling: ``(prompts per row, advantages, keep)``.

    ``prompts`` are the distinct prompts; each was sampled ``group_size`` times in
    :func:`repeat_for_groups`' layout. ``keep`` is True on every row of a group with a signal
    (``groups_with_signal``); the advantages of the other rows are 0 and a trainer skips
    them. ``scale="none"`` is Dr. GRPO's choice (no division by the group's std).
    """
    rows, _ = repeat_for_groups(prompts, group_size)
    keep = groups_with_signal(rewards, group_size).repeat_interleave(group_size)
    return rows, grpo_advantages(rewards, group_size, scale), keep

