"""Part 3 — RLHF: PPO on a language model with a value head.

The policy is a small GPT that already writes movie reviews; a reward (VADER sentiment, or a
learned reward model) says how positive each review is; PPO nudges the policy towards higher
reward while a KL penalty keeps it close to a frozen copy of itself (the *reference*).

The functions mirror TRL's ``core.py`` and ``PPOTrainer`` so that what you learn here carries
over to the library. Conventions for the whole part:

- **Losses are minimised** (TRL's convention), unlike Part 1 where we maximised an objective:
  ``pg_loss = −min(r·A, clip(r)·A)`` averaged over tokens, and the optimizer is plain Adam.
- **Response tensors** are ``[batch, resp]``: one row per sampled review, one column per
  *generated* token (the prompt is not in them), right-padded to the longest response.
- **Masks** hold 1 on real response tokens and 0 on padding. Like TRL's, every function here
  takes them as bool, integer (the int64 attention masks tokenizers return) or float tensors
  (``Mask[Tensor, ...]`` in the signatures), with identical results: convert once with
  ``mask.to(values.dtype)`` before arithmetic (``1 − mask`` fails on a bool tensor, and
  ``values[mask]`` with an int64 mask picks *rows by number*). Every mean over tokens is a
  *masked* mean; padding must never leak into a number. (In Part 9 a mask is also 0 on the
  tokens a tool wrote into a response: context the policy reads, not actions it took.)
- **One step = one token.** The "state" before response token ``t`` is prompt + response[:t];
  the "action" is token ``t``; the reward is a KL penalty on every token plus the score on
  the last real one.

Theory: part0_theory.md (RLHF sections). Tests: tests/test_part3_rlhf.py.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F
from jaxtyping import Bool, Float, Int
from torch import Tensor, nn

from workbook.lm.model import GPT
from workbook.lm.tokenizer import pad_batch
from workbook.typecheck import Mask, typechecked

KLKind = Literal["kl", "abs", "mse", "full", "k3"]

# --------------------------------------------------------------------------------------
# Small tensor functions (TRL's core.py)
# --------------------------------------------------------------------------------------


@typechecked
def logprobs_from_logits(logits: Float[Tensor, "*batch vocab"], labels: Int[Tensor, "*batch"]) -> Float[Tensor, "*batch"]:
    """Log-probability of each label under the categorical distribution given by ``logits``.

        out[..., i] = log softmax(logits[..., i, :])[labels[..., i]]

    This is how a language model scores a text it did not necessarily write: run it on the
    text and read off, at every position, the log-probability it gave the token that actually
    came next.

    Traps:
    - ``log(softmax(x))`` underflows to ``-inf`` for very unlikely tokens; ``log_softmax``
      computes the same thing stably.
    - Normalise over the *vocabulary* axis (the last one), then pick the label with
      ``gather`` — not the raw logit of the label, which is not a log-probability.
    """
    raise NotImplementedError()


@typechecked
def entropy_from_logits(logits: Float[Tensor, "*batch vocab"]) -> Float[Tensor, "*batch"]:
    """Entropy H(p) = −Σ p log p of the distribution ``softmax(logits)``, per position.

    Stable form: with ``p = softmax(x)`` and ``log p = x − logsumexp(x)``,

        H = logsumexp(x) − Σ_v p_v · x_v

    which never evaluates ``0 · log 0``. The entropy of a uniform distribution over V tokens
    is log V; a model that has collapsed onto one continuation has entropy near 0, so this is
    the first number to watch for mode collapse.

    Traps:
    - ``-(p * p.log()).sum()`` gives NaN as soon as some probability underflows to 0
      (``0 · −inf``). Logits of a trained model routinely span 50+ nats.
    - Sum over the vocabulary axis, not over positions.
    """
    raise NotImplementedError()


@typechecked
def whiten(values: Float[Tensor, "*shape"], shift_mean: bool = True) -> Float[Tensor, "*shape"]:
    """Standardise ``values`` over *all* its elements: ``(x − mean) / sqrt(var + 1e-8)``.

    ``var`` is the unbiased variance (``torch.var``'s default), computed over every element
    together (not per row). With ``shift_mean=False`` the mean is added back afterwards, so
    only the scale changes (TRL uses that to rescale rewards without moving their sign).

    Traps:
    - ``rsqrt(var + 1e-8)``: the 1e-8 sits inside the square root.
    - One mean and one variance for the whole tensor, not one per row.
    """
    raise NotImplementedError()


@typechecked
def masked_mean(values: Float[Tensor, "*shape"], mask: Mask[Tensor, "*shape"], axis: int | None = None) -> Float[Tensor, "..."]:
    """Mean of ``values`` over the positions where ``mask`` is 1.

        axis=None:  Σ values·mask / Σ mask                       (a 0-dim tensor)
        axis=k:     (values·mask).sum(k) / mask.sum(k)           (axis k removed)

    With responses of different lengths, the padding is not data: a plain ``.mean()`` counts
    the padding as zeros (or worse, as whatever the model output there).

    Traps:
    - Divide by the number of *real* tokens (``mask.sum()``), not by ``values.numel()``.
    - With ``axis=None``, do not average the per-row means: rows of different lengths would
      get equal weight instead of each token getting equal weight.
    """
    raise NotImplementedError()


@typechecked
def masked_var(values: Float[Tensor, "*shape"], mask: Mask[Tensor, "*shape"], unbiased: bool = True) -> Float[Tensor, ""]:
    """Variance of ``values`` over the positions where ``mask`` is 1 (one number).

        mean = masked_mean(values, mask)
        var  = masked_mean((values − mean)², mask)             the biased (population) variance
        var  = var · n / (n − 1)   if unbiased, with n = Σ mask (Bessel's correction)

    Raise a ``ValueError`` that says so when the mask holds fewer than 2 real elements (the
    unbiased variance of one number is 0/0) — or none at all when ``unbiased=False``.

    Traps:
    - Bessel's ``n`` is the number of *masked-in* elements, not ``values.numel()``.
    - Centre with the *masked* mean, not ``values.mean()``.
    - ``unbiased=True`` means divide by n − 1; don't invert the flag.
    - Not the one-pass ``E[x²] − E[x]²``: with a large mean and a small spread (1000 ± 0.01 in
      float32) the two terms cancel to rounding noise. Centre first, then square.
    """
    raise NotImplementedError()


@typechecked
def masked_whiten(values: Float[Tensor, "*shape"], mask: Mask[Tensor, "*shape"], shift_mean: bool = True) -> Float[Tensor, "*shape"]:
    """:func:`whiten` with the mean and (unbiased) variance taken over the masked-in elements only.

        out = (values − masked_mean) · rsqrt(masked_var + 1e-8)      (+ masked_mean if not shift_mean)

    Every position is transformed, padding included (callers ignore or zero the padding);
    on the masked-in positions the result equals ``whiten(values[mask == 1])``.

    Traps:
    - Statistics over the padding too (plain ``whiten``) shift and squash every real value.
    - Use the unbiased masked variance, like ``whiten`` does.
    """
    raise NotImplementedError()


@typechecked
def clip_by_value(x: Float[Tensor, "*shape"], tensor_min: Float[Tensor, "*shape"], tensor_max: Float[Tensor, "*shape"]) -> Float[Tensor, "*shape"]:
    """Elementwise clip of ``x`` into ``[tensor_min, tensor_max]`` (bounds are tensors).

        out = max(min(x, tensor_max), tensor_min)

    PPO's value clipping uses it with bounds that differ per token: ``old_value ± c``. The bounds
    are ordered (``tensor_min ≤ tensor_max`` everywhere), so which one is applied first does not
    matter (``torch.clamp(x, tensor_min, tensor_max)`` is the same thing).

    Traps: apply *both* bounds, each with the right operation (``min`` with the upper bound,
    ``max`` with the lower); keep the gradient (``torch.minimum``/``torch.maximum``, not a
    no-grad copy).
    """
    raise NotImplementedError()


# --------------------------------------------------------------------------------------
# KL penalty and rewards
# --------------------------------------------------------------------------------------


@typechecked
def kl_penalty(logprob: Float[Tensor, "*shape"], ref_logprob: Float[Tensor, "*shape"], kind: str = "kl") -> Float[Tensor, "..."]:
    """Per-token estimate of KL(π ‖ π_ref) from log-probabilities (TRL's five kinds).

    For ``kl``, ``abs``, ``mse`` and ``k3`` the inputs are the log-probs of the *sampled*
    tokens, ``[batch, resp]``, and the output has the same shape. With ``d = logprob −
    ref_logprob`` and ``r = ref_logprob − logprob = −d``:

        kl   (k1):  d                 unbiased, but single samples can be negative
        abs:        |d|
        mse  (k2):  ½ d²
        k3:         exp(r) − 1 − r    unbiased and never negative (Schulman's k3)
        full:       Σ_v exp(logprob_v) · (logprob_v − ref_logprob_v)

    For ``full`` the inputs are *full* log-prob tensors ``[..., vocab]`` (log_softmax of both
    models' logits) and the exact KL of each position's next-token distributions is returned,
    ``[...]``, summed over the vocabulary.

    Why per token: the sequence KL of autoregressive models is the sum of per-token KLs along
    the sampled path, so charging ``−β·kl_t`` at every token charges the whole sequence's KL.

    Traps:
    - Direction: KL(π ‖ π_ref) weighs by the *policy's* probabilities, ``d = π − ref`` in log
      space. Flipping the sign rewards the policy for drifting away.
    - ``mse`` has the factor ½.
    - An unknown ``kind`` is a ``ValueError``, not a silent default.
    """
    raise NotImplementedError()


@typechecked
def compute_rewards(
    scores: Float[Tensor, "batch"],
    logprobs: Float[Tensor, "batch resp *vocab"],
    ref_logprobs: Float[Tensor, "batch resp *vocab"],
    masks: Mask[Tensor, "batch resp"],
    kl_coef: float,
    kind: str = "kl",
) -> tuple[Float[Tensor, "batch resp"], Float[Tensor, "batch resp"], Float[Tensor, "batch resp"]]:
    """Per-token rewards: a KL penalty on every response token, the score on the last one.

        kls               = kl_penalty(logprobs, ref_logprobs, kind) · mask
        non_score_rewards = −kl_coef · kls
        rewards           = non_score_rewards, plus scores[b] at the last real token of row b

    Returns ``(rewards, non_score_rewards, kls)``, all ``[batch, resp]`` and 0 on padding.
    ``logprobs``/``ref_logprobs`` are ``[batch, resp]`` (``[batch, resp, vocab]`` full
    log-prob tensors when ``kind == "full"``).

    Intuition: the reward model only judges the finished text, so the score arrives at the
    end, like a game's win/lose signal; the KL term is a per-step tax for every token that
    the policy finds likelier than the reference did. GAE then spreads the score back.

    Traps:
    - The *last real* token, found from the mask (responses have different lengths) — not
      the last column, which is padding for every row but the longest.
    - The penalty is *minus* kl_coef times the KL.
    - Don't add the score into ``non_score_rewards`` by writing into a tensor they share
      (``rewards = non_score_rewards; rewards[...] += ...`` aliases them): clone first.
    - A row without any real token is an error (nowhere to put its score).
    """
    raise NotImplementedError()


class FixedKLController:
    """A constant KL coefficient β (``update`` does nothing)."""

    def __init__(self, kl_coef: float):
        self.value = float(kl_coef)

    def update(self, current: float, n_steps: int) -> None:
        pass


class AdaptiveKLController:
    """Adapts β so the measured KL tracks a target (Ziegler et al. 2019, as in TRL).

    ``value`` holds the current coefficient β, starting at ``init_kl_coef``. After each PPO
    step, ``update(current, n_steps)`` is called with the batch's mean per-sequence KL and
    the number of samples in the batch.
    """

    def __init__(self, init_kl_coef: float, target: float, horizon: float):
        if init_kl_coef < 0 or target <= 0 or horizon <= 0:
            raise ValueError(f"need init_kl_coef >= 0, target > 0 and horizon > 0, got {init_kl_coef}, {target}, {horizon}")
        self.value = float(init_kl_coef)
        self.target = float(target)
        self.horizon = float(horizon)

    def update(self, current: float, n_steps: int) -> None:
        """Proportional control of β towards the target KL:

            e     = clip(current / target − 1, −0.2, 0.2)
            value = value · (1 + e · n_steps / horizon)

        KL above target → e > 0 → β grows (the leash tightens); below → β shrinks. The clip
        bounds how fast β may move after one freak batch, and ``n_steps / horizon`` makes
        the rate per *sample*, so the batch size does not change the schedule.

        Traps: the error is relative (a ratio minus 1), not ``current − target``; the update
        multiplies, it does not add; don't drop the clip or ``n_steps``.
        """
        raise NotImplementedError()


# --------------------------------------------------------------------------------------
# Advantages and the PPO loss
# --------------------------------------------------------------------------------------


@typechecked
def compute_advantages(
    values: Float[Tensor, "batch resp"],
    rewards: Float[Tensor, "batch resp"],
    mask: Mask[Tensor, "batch resp"],
    gamma: float,
    lam: float,
) -> tuple[Float[Tensor, "batch resp"], Float[Tensor, "batch resp"], Float[Tensor, "batch resp"]]:
    """GAE over the response tokens, masked; returns ``(values, advantages, returns)``.

    Padding first becomes zero (``values ← values·mask``, ``rewards ← rewards·mask``), so the
    step after the last real token has value 0 (the episode ends there). Then, from the last
    column back to the first, with ``V_{T} = 0``:

        δ_t = r_t + γ · V_{t+1} − V_t
        A_t = δ_t + γ · λ · A_{t+1}

    and ``returns = (A + values) · mask`` (the critic's regression target), computed from the
    *raw* advantages. Only then are the advantages whitened over the mask (``masked_whiten``)
    and multiplied by the mask, so all three outputs are 0 wherever the mask is 0. No gradient
    flows out.

    A 0 *inside* the mask (``1 1 0 0 1``) is a token the policy did not write — in Part 9 a
    calculator's result, pasted into the response. It is not a step: the recursion skips it, so
    ``V_{t+1}`` and ``A_{t+1}`` above are those of the next *real* token (0 after the last one).
    For the ``1`` before the gap, ``δ = r + γ·V(next real token) − V``, with no discount and no
    λ spent on the gap: the tool's tokens are part of the state the next action sees, not
    moves of the agent. (Treating the gap as steps with value 0 would shrink the credit that
    reaches earlier tokens by a factor λ per tool token, and mix a 0 into every bootstrap.)
    With padding only at the end, skipping and zeroing are the same thing.

    Intuition: the reward is almost all at the end (the score), so γ = 1 and λ ≈ 0.95 carry
    it back along the sentence; the critic's V_t, trained on ``returns``, predicts at every
    prefix how the review will be scored, which cuts the variance of the credit each token gets.

    Traps:
    - Whiten *after* computing the returns; whitened advantages + values is not a return.
    - Mask values and rewards *before* the recursion: a padded column's value must not be
      bootstrapped into the last real token.
    - Across a gap, carry the next real token's value and advantage unchanged (``torch.where``
      on the mask column), rather than recursing through the gap as steps of value 0.
    - Whiten over the mask only (``masked_whiten``), not over the padding.
    - γ·λ in the recursion, γ alone in δ.
    - ``gamma`` or ``lam`` outside [0, 1] is a ``ValueError`` (0 and 1 themselves are fine; NaN is
      outside, though ``nan < 0`` and ``nan > 1`` are both False).
    """
    raise NotImplementedError()


@typechecked
def ppo_loss(
    old_logprobs: Float[Tensor, "batch resp"],
    values: Float[Tensor, "batch resp"],
    logprobs: Float[Tensor, "batch resp"],
    vpreds: Float[Tensor, "batch resp"],
    mask: Mask[Tensor, "batch resp"],
    advantages: Float[Tensor, "batch resp"],
    returns: Float[Tensor, "batch resp"],
    cliprange: float,
    cliprange_value: float,
    vf_coef: float,
) -> tuple[Float[Tensor, ""], Float[Tensor, ""], dict[str, Tensor]]:
    """PPO's clipped policy loss and clipped value loss over response tokens, to **minimise**.

    ``old_logprobs``/``values`` were recorded at rollout time; ``logprobs``/``vpreds`` come
    from the model being trained, on the same tokens. Every mean is ``masked_mean(·, mask)``.

        ratio   = exp(logprobs − old_logprobs)
        pg_loss = mean( max(−A · ratio, −A · clip(ratio, 1 − ε, 1 + ε)) )
        v_clip  = clip_by_value(vpreds, values − ε_v, values + ε_v)
        vf_loss = ½ · mean( max((vpreds − R)², (v_clip − R)²) )

    Returns ``(pg_loss, vf_coef · vf_loss, stats)``. The max of the two *losses* is the min of
    the two objectives (Part 1's form, negated). ``stats`` maps TRL's names to detached
    0-dim tensors:

        loss/policy = pg_loss                  loss/value = vf_loss (before vf_coef)
        loss/total  = pg_loss + vf_coef·vf_loss
        policy/approxkl = ½ mean((logprobs − old_logprobs)²)
        policy/policykl = mean(old_logprobs − logprobs)
        policy/clipfrac = mean(1[−A·clip(ratio) > −A·ratio])   fraction of tokens clipped
        policy/advantages_mean = mean(A)       policy/ratio = mean(ratio)
        returns/mean, returns/var = masked mean and (unbiased) var of R
        val/vpred = mean(vpreds)               val/error = mean((vpreds − R)²)
        val/clipfrac = mean(1[(v_clip − R)² > (vpreds − R)²])
        val/mean, val/var = masked mean and (unbiased) var of the rollout values

    Traps:
    - ``max`` of the losses (pessimistic), not ``min``.
    - Clip the value prediction around the *rollout values*, not around the returns.
    - Masked means everywhere: a plain ``.mean()`` averages in padding.
    - The returned value loss includes ``vf_coef``; ``loss/value`` does not (TRL's quirk).
    """
    raise NotImplementedError()


# --------------------------------------------------------------------------------------
# Models: the policy with a value head, the frozen reference, the reward model
# --------------------------------------------------------------------------------------


class GPTWithValueHead(nn.Module):
    """The policy *and* the critic: one GPT trunk, two heads.

    The language-model head gives next-token logits; a linear value head on the same final
    hidden state gives V(prefix) at every position. Sharing the trunk is cheap and lets the
    critic use everything the language model knows about the text (TRL's
    ``AutoModelForCausalLMWithValueHead``).
    """

    def __init__(self, lm: GPT):
        """Keep ``lm`` as ``self.lm`` and add ``self.value_head = nn.Linear(d_model, 1)``.

        Initialise the value head's weight *and* bias to zero: at the start every value is
        exactly 0, so the first advantages are just the (whitened) rewards, instead of
        rewards minus random noise from an untrained head.

        Traps: call ``super().__init__()`` first; zero both weight and bias; the head reads
        the hidden state (``d_model`` wide), not the logits (``vocab`` wide).
        """
        raise NotImplementedError()

    def forward(
        self, input_ids: Int[Tensor, "batch seq"], attention_mask: Bool[Tensor, "batch seq"] | Int[Tensor, "batch seq"] | None = None
    ) -> tuple[Float[Tensor, "batch seq vocab"], Float[Tensor, "batch seq"]]:
        """``(logits, values)``: the LM's logits and one value per position.

        Use ``self.lm(input_ids, attention_mask, return_hidden=True)`` to get the logits and
        the final hidden state; the value head maps each hidden vector to one number.

        Traps:
        - ``values`` is ``[batch, seq]``: squeeze the head's last dimension of size 1.
        - Don't detach the hidden state: the value loss also trains the shared trunk
          (that is what sharing means, and what TRL does).
        """
        raise NotImplementedError()


@typechecked
def create_reference_model(model: nn.Module) -> nn.Module:
    """A frozen copy of ``model``: the reference the KL penalty measures distance to.

    Return an independent deep copy (``copy.deepcopy``) with every parameter's
    ``requires_grad`` set to False, in eval mode (dropout off). The reference must stay
    exactly the pretrained model for the whole run: if it moves with the policy, the KL is
    always ~0 and nothing stops reward hacking.

    Traps:
    - Returning ``model`` itself, or a copy that shares parameter tensors with it (a shallow
      ``copy.copy``), makes the "reference" drift with every optimizer step.
    - Forgetting ``requires_grad_(False)``: the copy is frozen only by convention, autograd
      still tracks it, and one stray optimizer could train it.
    - Leaving it in train mode: with dropout, its log-probs become random.
    """
    raise NotImplementedError()


@typechecked
def batched_forward_pass(
    model: nn.Module,
    queries: list[Int[Tensor, "_query"]],
    responses: list[Int[Tensor, "_response"]],
    *,
    temperature: float = 1.0,
    pad_id: int = 0,
    return_logits: bool = False,
) -> tuple[
    Float[Tensor, "batch resp"],
    Float[Tensor, "batch resp vocab"] | None,
    Float[Tensor, "batch resp"],
    Float[Tensor, "batch resp"],
]:
    """Score sampled responses with ``model`` (a :class:`GPTWithValueHead` or a copy of one).

    Returns ``(logprobs, logits, values, masks)``, each row right-padded to the longest
    response (``resp`` columns), with 0 at padding (``logits`` is None unless
    ``return_logits``):

    - ``logprobs[b, t]`` = log π(response_b[t] | query_b + response_b[:t]), from logits
      divided by ``temperature``;
    - ``logits[b, t]`` = those temperature-scaled logits, ``[batch, resp, vocab]``;
    - ``values[b, t]`` = V(query_b + response_b[:t]), the value of the state *before* token t;
    - ``masks[b, t]`` = 1.0 if ``t < len(response_b)``, else 0.0 — from the lengths, never from
      the token ids: a sampled token that happens to equal ``pad_id`` is a real token.

    How: concatenate each query with its response, right-pad the rows with ``pad_id``
    (``pad_batch(..., side="right")``), run the model once with the attention mask, and read
    the output at position ``len(query_b) − 1 + t`` for response token t: the output at
    position i predicts token i + 1.

    Why the temperature: responses were *sampled* from ``softmax(logits / T)``. PPO's ratio
    and the KL must use the probabilities the tokens were actually drawn with; skipping the
    division silently trains (and penalises) a different policy than the one that sampled.

    Invariance: the result on real tokens is the same whatever other rows share the batch,
    and however much padding they force (the model takes positions from the attention mask).

    Traps:
    - Off by one: the log-prob of token i comes from position i − 1.
    - The value of response token t is read at the same position as its log-prob (the state
      before the token), not at the token's own position.
    - Zero the padding in every output, so stats and losses can't pick it up.
    - Don't wrap this in ``torch.no_grad()``: the PPO update calls it for gradients too.
    - ``ValueError`` for no rows, different numbers of queries and responses, an empty query or
      response, or ``temperature <= 0``.
    """
    raise NotImplementedError()


def model_token_masks(
    masks: Float[Tensor, "batch resp"], responses: list[Int[Tensor, "_response"]],
    response_masks: list[Bool[Tensor, "_response"]] | None,
) -> Float[Tensor, "batch resp"]:
    """``masks`` with the tokens the policy did not write zeroed (given code, used by the trainers).

    ``response_masks[b]`` is a bool tensor as long as ``responses[b]``: True where the policy
    sampled the token, False where something else wrote it — in Part 9, a calculator's result
    pasted into the response. The result is ``masks · response_masks`` (right-padded with 0 to
    ``masks``' width); ``None`` returns ``masks`` itself (every real token is the policy's).

    ``ValueError`` when there is not one mask per response or a mask's length is not its response's.
    """
    if response_masks is None:
        return masks
    if len(response_masks) != len(responses):
        raise ValueError(f"need one response mask per response, got {len(response_masks)} for {len(responses)}")
    for b, (m, r) in enumerate(zip(response_masks, responses)):
        if m.shape != r.shape:
            raise ValueError(f"response_masks[{b}] has shape {tuple(m.shape)}, its response {tuple(r.shape)}")
    padded = nn.utils.rnn.pad_sequence([m.to(masks.dtype) for m in response_masks], batch_first=True)
    return masks * padded.to(masks.device)


@typechecked
def preference_loss(
    r_chosen: Float[Tensor, "batch"], r_rejected: Float[Tensor, "batch"], margin: Float[Tensor, "batch"] | None = None
) -> Float[Tensor, ""]:
    """Bradley–Terry loss of a reward model on preference pairs: ``mean(−log σ(r_w − r_l − m))``.

    Bradley–Terry models P(chosen ≻ rejected) = σ(r_w − r_l); this is its negative
    log-likelihood, averaged over pairs. The optional ``margin`` m (per pair) asks for a
    gap of at least m before a pair stops pulling (Llama 2's reward models).

    Traps:
    - ``−log(sigmoid(x))`` overflows to ``inf`` for very negative x: use ``F.logsigmoid``.
    - Chosen minus rejected, and the margin is *subtracted*.
    - Mean over pairs, not sum.
    """
    raise NotImplementedError()


class RewardModel(nn.Module):
    """A GPT trunk with a scalar head: reward(prompt + response) read at the last real token.

    The last token is the only position whose hidden state has seen the whole text (the
    attention is causal), so that is where the judgement of the whole review lives.
    """

    def __init__(self, lm: GPT):
        super().__init__()
        self.lm = lm
        self.head = nn.Linear(lm.config.d_model, 1)
        nn.init.normal_(self.head.weight, std=1.0 / (lm.config.d_model + 1) ** 0.5)
        nn.init.zeros_(self.head.bias)

    def forward(self, input_ids: Int[Tensor, "batch seq"], attention_mask: Bool[Tensor, "batch seq"] | Int[Tensor, "batch seq"]
                ) -> Float[Tensor, "batch"]:
        """One reward per row: the head applied to the hidden state of the row's last real token.

        ``self.lm(input_ids, attention_mask, return_hidden=True)`` gives the hidden states;
        the last real token of row b is the last position where ``attention_mask[b]`` is 1
        — rows may be padded on the right *or* the left.

        Traps:
        - The last column is padding for every row but the longest (right padding).
        - ``attention_mask.sum(1) − 1`` is the last real index only for right padding.
        - A row may hold a single real token (then position 0 under right padding); a row
          with none (``attention_mask`` all 0) is a ``ValueError``.
        - A mean over all positions mixes in padding and judges half-written text.
        - Don't detach the hidden state or run the trunk under ``torch.no_grad()``: preference
          training (``preference_loss``) fine-tunes the trunk along with the head.
        """
        raise NotImplementedError()


# --------------------------------------------------------------------------------------
# The PPO trainer
# --------------------------------------------------------------------------------------


@dataclass
class PPOConfig:
    """Hyper-parameters of one PPO step (TRL's names where TRL has them)."""

    learning_rate: float = 1e-4
    """Adam learning rate for the policy and its value head."""
    mini_batch_size: int = 16
    """Samples per gradient step; a step's batch is cut into minibatches of this size."""
    ppo_epochs: int = 4
    """Passes over each batch of samples."""
    gamma: float = 1.0
    """Discount over response tokens (1: the score at the end counts fully for every token)."""
    lam: float = 0.95
    """GAE λ."""
    cliprange: float = 0.2
    """ε of the clipped policy ratio."""
    cliprange_value: float = 0.2
    """ε_v of the clipped value loss."""
    vf_coef: float = 0.1
    """Weight of the value loss."""
    ent_coef: float = 0.0
    """Weight of an entropy bonus (masked mean token entropy, subtracted from the loss)."""
    init_kl_coef: float = 0.2
    """β at the start (the KL coefficient)."""
    adap_kl_ctrl: bool = True
    """Adapt β towards `target` (AdaptiveKLController) instead of keeping it fixed."""
    target: float = 6.0
    """Target mean per-sequence KL for the adaptive controller."""
    horizon: float = 10_000.0
    """Samples over which the adaptive controller may move β by about ×e^0.2."""
    kl_penalty: KLKind = "kl"
    """Per-token KL estimator used in the rewards: kl, abs, mse, full or k3."""
    temperature: float = 1.0
    """Sampling temperature of the responses; logits are divided by it in every forward pass."""
    max_grad_norm: float | None = 1.0
    """Clip the gradient's global norm to this (None: no clipping)."""
    seed: int = 0
    """Seeds the minibatch order."""


class PPOTrainer:
    """One PPO step on a batch of (query, response, score) triples, TRL-style.

    Generation and scoring happen outside (see ``workbook/loop/run.py``): the trainer gets
    the token ids that were sampled and the score each text earned.
    """

    def __init__(self, config: PPOConfig, model: GPTWithValueHead, ref_model: nn.Module, pad_id: int):
        self.config = config
        self.model = model
        self.ref_model = ref_model
        self.pad_id = pad_id
        self.optimizer = torch.optim.Adam(model.parameters(), lr=config.learning_rate)
        if config.adap_kl_ctrl:
            self.kl_ctl = AdaptiveKLController(config.init_kl_coef, config.target, config.horizon)
        else:
            self.kl_ctl = FixedKLController(config.init_kl_coef)
        self.generator = torch.Generator().manual_seed(config.seed)

    def _forward(self, model: nn.Module, queries: list[Tensor], responses: list[Tensor], return_logits: bool = False):
        return batched_forward_pass(model, queries, responses, temperature=self.config.temperature,
                                    pad_id=self.pad_id, return_logits=return_logits)

    def step(self, queries: list[Tensor], responses: list[Tensor], scores: Float[Tensor, "batch"],
             response_masks: list[Tensor] | None = None) -> dict[str, float]:
        """Run one PPO step and return its stats (floats, TRL's names).

        ``response_masks`` (Part 9; None everywhere before it): one bool tensor per response,
        as long as ``responses[b]``, True where the policy wrote the token and False where a
        tool did. Right after *every* ``self._forward`` of the policy (the rollout pass and each
        minibatch's pass), replace its ``masks`` by ``model_token_masks(masks, responses,
        response_masks)`` (the minibatch's responses and masks for a minibatch), and use only
        those masks from then on: the rewards (the KL charge, and the score on the last token
        *the policy* wrote, even when a tool wrote the response's last tokens), GAE (which
        skips the tool's tokens), the whitening, the losses, the entropy and every stat below
        ("mean per-sequence sums" sum over the policy's tokens; ``tokens/responses_len_mean``
        counts them). A tool's tokens stay in the *input* — the policy read them before writing
        its next token — but they are not actions: the policy did not choose them, so neither a
        log-prob ratio, a KL charge nor an advantage belongs to them. With ``None`` nothing
        changes.

        1. **Rollout pass** (no gradient, dropout off: ``self.model.eval()``): log-probs, logits
           and values of the policy, and log-probs (and logits) of ``self.ref_model``, all
           with ``temperature=self.config.temperature`` (use ``self._forward``).
        2. **Rewards**: ``compute_rewards(scores, …, kl_coef=self.kl_ctl.value, kind=…)``;
           for ``kind="full"`` pass ``log_softmax`` of both models' logits instead.
        3. **Advantages**: ``compute_advantages(values, rewards, masks, gamma, lam)``.
        4. **PPO epochs**: ``ppo_epochs`` times, a permutation of the batch from
           ``torch.randperm(batch, generator=self.generator)`` cut into chunks of
           ``mini_batch_size``; for each chunk, a forward pass *with* gradient, then
           ``ppo_loss`` on the chunk's rows (slice the rollout tensors to the chunk's
           longest response: ``[:, :resp]``), the loss ``pg_loss + vf_loss −
           ent_coef · masked_mean(entropy_from_logits(logits), mask)``, backward, gradient
           clipping to ``max_grad_norm`` if set, and an optimizer step.
        5. **KL control**: ``self.kl_ctl.update(mean_kl, batch)`` with ``mean_kl`` the
           mean over the batch of each row's summed ``kls``.
        6. **Stats**: ``objective/kl`` (that mean_kl), ``objective/kl_coef`` (β used in the
           rewards), ``objective/entropy`` (masked mean token entropy of the rollout logits),
           ``objective/logprobs`` and ``objective/ref_logprobs`` (mean per-sequence sums over
           the mask),
           ``ppo/mean_scores``, ``ppo/std_scores`` (unbiased std; 0.0 for a batch of one),
           ``ppo/mean_non_score_reward`` (mean per-sequence sum), ``tokens/responses_len_mean``,
           and, averaged over all minibatches, every ``ppo_loss`` stat as ``ppo/<name>``
           (e.g. ``ppo/policy/clipfrac``) plus ``ppo/policy/entropy`` (the minibatch's masked
           mean token entropy, the term weighted by ``ent_coef``). Every value is a Python
           ``float``, with no autograd graph behind it.

        The reference model only ever runs under ``torch.no_grad()`` and never reaches the
        optimizer.

        Traps:
        - Temperature in *every* forward pass (rollout, reference and the PPO updates).
        - The reference log-probs come from ``self.ref_model``, not from the policy.
        - ``.eval()``: with dropout on, the "old" log-probs are noisy and the ratio is not 1
          even before the first update.
        - Forgetting ``self.kl_ctl.update``: β never adapts.
        - ``ValueError`` unless ``queries``, ``responses`` and ``scores`` have the same length.
        - With ``response_masks``: masking only the losses leaves the tool's tokens in the KL
          charge, the advantages and the stats; the score still goes on the last *masked-in*
          token (``compute_rewards`` finds it from the mask you give it).
        """
        raise NotImplementedError()
