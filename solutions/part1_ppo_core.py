"""Part 1 — the core PPO functions.

Each function below is one line of the PPO objective or one piece of its bookkeeping.
Sign convention for the whole workbook: we build an *objective* and maximise it,

    objective = clipped surrogate − value loss + entropy bonus,

with an optimizer created with ``maximize=True``. Theory: part0_theory.md, sections 4–7.
Tests: tests/test_part1_ppo_core.py (``pytest tests/test_part1_ppo_core.py``).
"""

from __future__ import annotations

import itertools

import numpy as np
import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor, nn, optim
from torch.distributions import Distribution

from workbook.typecheck import typechecked


@typechecked
def compute_advantages(
    next_value: Float[Tensor, "num_envs"],
    next_terminated: Bool[Tensor, "num_envs"],
    rewards: Float[Tensor, "buffer_size num_envs"],
    values: Float[Tensor, "buffer_size num_envs"],
    terminated: Bool[Tensor, "buffer_size num_envs"],
    gamma: float,
    gae_lambda: float,
) -> Float[Tensor, "buffer_size num_envs"]:
    """Generalised advantage estimates (GAE) for a rollout of ``buffer_size`` steps.

    Convention (CleanRL's): ``terminated[t]`` is True when observation ``t`` is the first
    one *after* an episode ended, so whether step ``t`` bootstraps is decided by the flag of
    the *next* observation: ``terminated[t + 1]``, or ``next_terminated`` for the last step.
    Likewise ``V(s_{t+1})`` is ``values[t + 1]``, or ``next_value`` for the last step.

        d_{t+1} = terminated[t + 1]                      (as a float, 1.0 or 0.0)
        δ_t     = r_t + γ · V(s_{t+1}) · (1 − d_{t+1}) − V(s_t)
        A_t     = δ_t + γ · λ · (1 − d_{t+1}) · A_{t+1}  (computed backwards, A_T = 0)

    Intuition: δ_t is the one-step surprise ("better or worse than the critic expected");
    A_t is an exponentially weighted sum of future surprises, with weight (γλ)^k. λ = 0
    gives the one-step TD error, λ = 1 the full discounted return minus V(s_t).

    Traps:
    - ``terminated[t]`` where ``terminated[t + 1]`` belongs: an episode's last step would
      bootstrap from the next episode's first value.
    - Forgetting ``(1 − d)`` in the recursion lets one episode's advantage leak into the
      previous one.
    - The recursion multiplies by γ·λ, the TD error by γ alone — don't swap them.
    - ``gamma`` or ``gae_lambda`` outside [0, 1] is a ``ValueError``: a typo such as λ = 9.5
      would otherwise blow the advantages up without a word. NaN is outside too, though
      ``nan < 0`` and ``nan > 1`` are both False.
    - No gradient may flow into the critic through the advantages: compute under
      ``torch.no_grad()`` (or detach). Return a tensor on the same device as the inputs.
    """
    if not (0.0 <= gamma <= 1.0 and 0.0 <= gae_lambda <= 1.0):
        raise ValueError(f"gamma and gae_lambda must lie in [0, 1], got gamma={gamma}, gae_lambda={gae_lambda}")
    with torch.no_grad():
        # Shift everything one step forward so index t holds "the next step's" quantity.
        next_values = torch.cat([values[1:], next_value[None]])
        next_nonterminal = 1.0 - torch.cat([terminated[1:], next_terminated[None]]).to(values.dtype)
        deltas = rewards + gamma * next_values * next_nonterminal - values

        advantages = torch.zeros_like(values)
        running = torch.zeros_like(next_value)
        for t in reversed(range(values.shape[0])):
            running = deltas[t] + gamma * gae_lambda * next_nonterminal[t] * running
            advantages[t] = running
    return advantages


@typechecked
def get_minibatch_indices(rng: np.random.Generator, batch_size: int, minibatch_size: int) -> list[np.ndarray]:
    """Shuffle ``range(batch_size)`` and cut it into equal minibatches.

    Returns ``batch_size // minibatch_size`` integer arrays of length ``minibatch_size``;
    together they contain every index exactly once, in an order drawn from ``rng``.

    Why a permutation: one epoch of PPO should look at every transition once, and
    shuffling breaks the strong correlation between consecutive steps of one environment.

    Traps:
    - Sampling *with* replacement (``rng.integers``) repeats some transitions and skips
      others — that is bootstrapping, not an epoch.
    - Drawing a fresh permutation for every minibatch makes minibatches overlap.
    - Use the ``rng`` you are given, never the global ``np.random`` state: the same seed
      must give the same minibatches.
    - If ``batch_size`` is not a multiple of ``minibatch_size``, raise a ``ValueError``
      that says so; silently dropping the remainder wastes data and hides a config bug.
      A size that is not positive is a ``ValueError`` too.
    """
    if minibatch_size <= 0 or batch_size <= 0:
        raise ValueError(f"batch_size and minibatch_size must be positive, got {batch_size} and {minibatch_size}")
    if batch_size % minibatch_size != 0:
        raise ValueError(f"batch_size={batch_size} is not a multiple of minibatch_size={minibatch_size}")
    permutation = rng.permutation(batch_size)
    return list(permutation.reshape(-1, minibatch_size))


@typechecked
def calc_clipped_surrogate_objective(
    dist: Distribution,
    mb_action: Int[Tensor, "minibatch_size"] | Float[Tensor, "minibatch_size action_dim"],
    mb_advantages: Float[Tensor, "minibatch_size"],
    mb_logprobs: Float[Tensor, "minibatch_size"],
    clip_coef: float,
    eps: float = 1e-8,
) -> Float[Tensor, ""]:
    """PPO's clipped surrogate objective L^CLIP, to be **maximised**.

        Â_t  = (A_t − mean(A)) / (std(A) + eps)          normalise within the minibatch
        r_t  = π_θ(a_t | s_t) / π_old(a_t | s_t) = exp(log π_θ − log π_old)
        L    = mean_t min( r_t · Â_t,  clip(r_t, 1 − ε, 1 + ε) · Â_t )

    ``dist`` is the *current* policy evaluated on the minibatch's observations;
    ``mb_logprobs`` are the log-probabilities the *old* policy gave the same actions when
    they were sampled. Any distribution works whose ``log_prob`` gives one number per
    sample: a ``Categorical`` over discrete actions (Part 2), or a diagonal Gaussian over
    vectors of actions, ``Independent(Normal(μ, σ), 1)``, which sums the per-dimension
    log-probabilities (Part 4). The min makes the objective a pessimistic bound: once the ratio has
    moved past 1 ± ε in the direction the advantage rewards, the gradient is zero, so one
    batch cannot push the policy far from the one that collected it.

    Traps:
    - Clip the *ratio*, not the advantage.
    - ``min``, not ``max`` — max would reward moving far from the old policy.
    - The ratio is ``exp(new − old)``: a plain difference of log-probs is not a ratio, and
      ``old − new`` is the inverse ratio.
    - Normalise the advantages (``std`` with its default unbiased estimate, plus ``eps``).
    - Return the objective itself; the optimizer maximises, so do not negate it here.
    - ``clip_coef <= 0`` is a ``ValueError`` (0 freezes every ratio at 1; a negative one
      inverts the clip range).
    """
    if clip_coef <= 0:
        raise ValueError(f"clip_coef must be positive, got {clip_coef}")
    advantages = (mb_advantages - mb_advantages.mean()) / (mb_advantages.std() + eps)
    ratio = torch.exp(dist.log_prob(mb_action) - mb_logprobs)
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1.0 - clip_coef, 1.0 + clip_coef) * advantages
    return torch.minimum(unclipped, clipped).mean()


@typechecked
def calc_value_function_loss(
    values: Float[Tensor, "minibatch_size"],
    mb_returns: Float[Tensor, "minibatch_size"],
    vf_coef: float,
) -> Float[Tensor, ""]:
    """The critic's weighted regression loss, c₁ · L^VF:  ``vf_coef · mean((V(s_t) − R_t)²)``.

    ``values`` come from the critic being trained; ``mb_returns`` are the targets computed
    during the rollout (``advantages + old values``), so they carry no gradient.

    Traps:
    - Forgetting ``vf_coef``: the value loss then dominates the objective's scale.
    - ``sum`` instead of ``mean`` ties the loss scale to the minibatch size.
    - This loss is *subtracted* from the objective by the caller; return it positive.
    """
    return vf_coef * (values - mb_returns).pow(2).mean()


@typechecked
def calc_clipped_value_function_loss(
    values: Float[Tensor, "minibatch_size"],
    old_values: Float[Tensor, "minibatch_size"],
    mb_returns: Float[Tensor, "minibatch_size"],
    vf_coef: float,
    clip_range: float,
) -> Float[Tensor, ""]:
    """The clipped value loss of OpenAI baselines and TRL:

        V_clip = old_values + clip(values − old_values, −c, c)
        loss   = vf_coef · 0.5 · mean( max( (values − R)², (V_clip − R)² ) )

    It mirrors the policy clipping: a new value prediction that moved more than ``c`` away
    from the value recorded during the rollout earns no credit for the extra move. Taking the
    *max* of the two squared errors makes it pessimistic. (Engstrom et al. 2020 and
    Andrychowicz et al. 2021 found it does not help and can hurt; TRL still uses it.)

    Traps:
    - ``min`` instead of ``max`` turns the pessimistic bound into an optimistic one.
    - Clip around the *old values*, not around the returns and not to ``[−c, c]``.
    - Keep the ``0.5`` — it is part of this form (and of TRL's numbers).
    - ``clip_range <= 0`` is a ``ValueError``.
    """
    if clip_range <= 0:
        raise ValueError(f"clip_range must be positive, got {clip_range}")
    clipped_values = old_values + torch.clamp(values - old_values, -clip_range, clip_range)
    unclipped_error = (values - mb_returns).pow(2)
    clipped_error = (clipped_values - mb_returns).pow(2)
    return vf_coef * 0.5 * torch.maximum(unclipped_error, clipped_error).mean()


@typechecked
def calc_entropy_bonus(dist: Distribution, ent_coef: float) -> Float[Tensor, ""]:
    """The entropy bonus c₂ · S[π](s): ``ent_coef · mean_t H(π(· | s_t))``.

    H(p) = −Σ_a p(a) log p(a) is largest (log n) for the uniform policy over n actions
    and 0 for a deterministic one (for a Gaussian it grows with log σ, Part 4). Adding it to the objective rewards keeping some
    randomness, which keeps the agent exploring early on.

    Traps:
    - It is a *bonus*: positive, added to the objective (the optimizer maximises).
    - Use ``dist.entropy()`` — it handles p(a) = 0 without producing NaNs.
    - Mean over the minibatch, and do not forget ``ent_coef``.
    """
    return ent_coef * dist.entropy().mean()


class PPOScheduler:
    """Linear learning-rate decay from ``initial_lr`` to ``end_lr`` over ``total_phases`` calls.

    After ``k`` calls to :meth:`step` every param group's learning rate is

        lr_k = initial_lr + (k / total_phases) · (end_lr − initial_lr),

    so the ``total_phases``-th call sets exactly ``end_lr`` (in floating point the formula at
    k = total_phases can miss it by a rounding: 1e-3 + 1.0 · (1e-4 − 1e-3) is
    1.0000000000000005e-4, so that call sets ``end_lr`` itself, or the rate is written in a form
    exact at both ends, (1 − k/T) · initial_lr + (k/T) · end_lr). Call it once per learning phase
    (not per minibatch). Annealing helps PPO: late updates become small, so a good policy is
    not knocked over by one noisy batch.
    """

    def __init__(self, optimizer: optim.Optimizer, initial_lr: float, end_lr: float, total_phases: int):
        if total_phases <= 0:
            raise ValueError(f"total_phases must be positive, got {total_phases}")
        if initial_lr < 0 or end_lr < 0:
            raise ValueError(f"learning rates must be non-negative, got initial_lr={initial_lr}, end_lr={end_lr}")
        self.optimizer = optimizer
        self.initial_lr = initial_lr
        self.end_lr = end_lr
        self.total_phases = total_phases
        self.n_step_calls = 0

    def step(self) -> None:
        """Advance one phase and write the new learning rate into *every* param group.

        Traps:
        - Count the call first: after ``total_phases`` calls the rate must equal ``end_lr``
          exactly (dividing by ``total_phases + 1``, or updating before counting, never
          gets there).
        - Update all param groups, not just the first.
        - Calling it more than ``total_phases`` times is a bug in the training loop: raise a
          ``RuntimeError`` instead of decaying past ``end_lr`` (or below zero).
        """
        if self.n_step_calls >= self.total_phases:
            raise RuntimeError(
                f"PPOScheduler.step() called more than total_phases={self.total_phases} times; "
                "step it once per learning phase"
            )
        self.n_step_calls += 1
        fraction = self.n_step_calls / self.total_phases
        lr = self.initial_lr + fraction * (self.end_lr - self.initial_lr)
        if self.n_step_calls == self.total_phases:
            lr = self.end_lr  # exactly: the formula at fraction 1.0 can be one rounding off
        for group in self.optimizer.param_groups:
            group["lr"] = lr


def make_optimizer(
    actor: nn.Module, critic: nn.Module, total_phases: int, initial_lr: float, end_lr: float = 0.0
) -> tuple[optim.Optimizer, PPOScheduler]:
    """Adam over the parameters of both networks, plus its :class:`PPOScheduler`.

    Settings that matter (CleanRL's and the PPO paper's details):
    - ``eps=1e-5`` instead of Adam's default 1e-8 (smaller steps when gradients are tiny);
    - ``maximize=True`` because we ascend the objective;
    - no weight decay; learning rate starts at ``initial_lr``.

    Traps: passing only the actor's parameters (the critic never learns); forgetting
    ``maximize=True`` (the agent then *minimises* its returns).
    """
    optimizer = optim.Adam(
        itertools.chain(actor.parameters(), critic.parameters()),
        lr=initial_lr,
        eps=1e-5,
        maximize=True,
    )
    scheduler = PPOScheduler(optimizer, initial_lr, end_lr, total_phases)
    return optimizer, scheduler
