"""Part 11 — reward hacking, measured: Goodhart's law with a gold reward and its proxies.

"When a measure becomes a target, it ceases to be a good measure." Every RLHF policy is trained
against a *proxy* — a reward model fitted to a finite set of preferences — while what we want is
the *gold* reward the preferences stood for. Push the proxy hard enough and the two part: the
proxy keeps rising, the gold rises, peaks and falls. Part 0 §8 showed this qualitatively
(``rlhf --kl-coef 0`` drifts into gibberish); this part *measures* it, as Gao, Schulman & Hilton
(2022, "Scaling Laws for Reward Model Overoptimization") did, on a laptop:

- a **gold** reward scores every sample, and labels the preference pairs that train small
  Bradley–Terry **proxies** (Part 3's ``RewardModel`` and ``preference_loss``) of several sizes;
- two **optimisers** push against a proxy: best-of-n (draw n samples, keep the one the proxy
  likes best) and RL (Part 3's PPO, Part 5's methods), and every point is placed by its distance
  from the initial policy, d = √KL(π ‖ π_init);
- the gold against d follows Gao's forms, R_bon(d) = d(α − βd) and R_RL(d) = d(α − β log d),
  and it peaks. Gao et al. found the peak later for a proxy trained on more data; measured here,
  more of the base model's writing buys a *higher* peak, not a later one: its √KL moves by about
  ±0.4 from run to run whatever the data (docs/goodhart.md, and :func:`gao_peak`);
- an **ensemble** of proxies (Coste et al. 2024: the mean, the worst case, or the mean minus an
  uncertainty penalty) delayed the fall in Coste et al.'s runs; here the worst-case ensemble ended
  above a single proxy on 6 of 9 runs, no better than chance — its members, from one base model,
  fall for the same hacks (7 of 9 when their data hold the hacks' kind).

The exercises are the small exact pieces that measurement is made of:

Exercises (tests: ``pytest tests/test_part11_goodhart.py``):
  1. best_of_n_kl            KL(best-of-n ‖ base) = log n − (n−1)/n, and where it is only a bound
  2. best_of_n_kl_discrete   the exact KL when outcomes repeat (a discrete distribution)
  3. best_of_n_gold          the unbiased gold of best-of-n from N ≥ n samples ranked by the proxy
  4. fit_gao                 least squares of Gao's two forms through R(0) = 0, with R²
  5. gao_peak                the d at which a fitted form peaks
  6. standardise_proxies     put k proxies on one scale, with statistics of a reference set
  7. ensemble_reward         mean, worst-case (WCO) and uncertainty-weighted (UWO) aggregation

The measurement itself (pools of samples, proxies trained on gold labels, best-of-n and RL runs,
the fits and the figure) is given code in ``workbook/goodhart/``, run by
``python -m workbook goodhart`` (docs/goodhart.md); it calls *your* functions with
``--impl exercises``, the default. Conventions: rewards are "higher is better"; d is √KL in nats;
functions that return one number return a Python float.

Reading guide: part0_theory.md, section 17 (Goodhart's law and its kinds; why best-of-n's KL is
analytic; what α and β mean; ensembles), with section 8 for the KL leash and reward hacking,
and Part 7's pass@k (the exercise ``exercises/part7_reasoning.py::pass_at_k``; Part 0, section 13)
for the estimator exercise 3 generalises.
"""

from __future__ import annotations

import math
import numbers
import torch
from jaxtyping import Float
from torch import Tensor

from workbook.typecheck import typechecked

FORMS = ("bon", "rl")
METHODS = ("mean", "wco", "uwo")
PROB_TOLERANCE = 1e-6
"""How far from 1 the sum of ``probs`` may be in :func:`best_of_n_kl_discrete` (float32 rounding)."""

# --------------------------------------------------------------------------------------
# How far best-of-n moves from the base policy
# --------------------------------------------------------------------------------------


def best_of_n_kl(n: int) -> float:
    """KL(best-of-n ‖ base) in nats, for a reward with no ties: ``log n − (n − 1)/n``.

    Best-of-n draws n samples from the base policy and keeps the one the reward likes best. It
    is a policy too — π_bon — and its distance from the base is known in closed form: when
    every sample has its own reward (a continuous reward, no ties), the kept sample's rank u
    among the base's samples (its CDF value, uniform under the base) has density n·u^(n−1), so

        KL(π_bon ‖ π_base) = ∫₀¹ n u^(n−1) log(n u^(n−1)) du = log n − (n − 1)/n.

    It grows only like log n: best-of-1,000 is just 5.9 nats from the base, best-of-10⁶ 12.8.
    That is why best-of-n's points sit at small d = √KL in Gao's plots, while RL travels further.

    Returns a Python float, 0.0 at n = 1 (one sample is the base policy itself).
    ``ValueError`` unless n is an int ≥ 1 (a bool, or a float such as 4.0, is refused).

    The formula's assumption, and where it breaks: with ties — a discrete set of outcomes, or a
    reward that gives many samples the same score — the best of n cannot be as peaked as the
    formula says, and log n − (n−1)/n is only an **upper bound** (Beirami et al. 2024; exercise 2
    computes the exact value). However large n is, the true KL never exceeds −log p_top, the KL of
    always picking the best outcome (p_top its probability), and it approaches that as n grows:
    log 2 ≈ 0.69 for a fair coin, but 4.60 for outcomes of probability [0.99, 0.01] at n = 1,000
    (−log 0.01 ≈ 4.61).

    Traps:
    - log n alone (the log of the number of draws) overstates the KL by (n − 1)/n, almost 1 nat.
    - log n − (n − 1)/n = log n − 1 + 1/n: a sign slipped in the second form (− 1/n) is wrong
      by 2/n. Check n = 1 (0) and n = 2 (log 2 − ½ ≈ 0.193).
    - Natural log: the KL is in nats everywhere in this workbook (log₂ would give bits).
    """
    raise NotImplementedError()


@typechecked
def best_of_n_kl_discrete(probs: Float[Tensor, "outcomes"], n: int) -> float:
    """The exact KL(best-of-n ‖ base) when the base has finitely many outcomes (ties happen).

    ``probs`` are the base policy's probabilities of its outcomes, listed in order of strictly
    increasing reward (each outcome has its own reward; outcome i beats every j < i). Best-of-n
    keeps outcome i when the best of its n draws is i: with F the CDF in that order,
    F(i) = p₀ + … + p_i and F(−1) = 0,

        P_bon(i) = F(i)^n − F(i − 1)^n          (all n draws ≤ i, but not all < i)
        KL       = Σ_i P_bon(i) · log(P_bon(i) / p_i)

    with 0 · log 0 = 0: an outcome with P_bon(i) = 0 adds nothing (this includes outcomes with
    p_i = 0, which best-of-n never picks either). Computed in float64; returns a Python float.
    It is never above :func:`best_of_n_kl` (n) — it approaches it as the outcomes get many and
    tiny — nor above −log p_top, the KL of always picking the best outcome that can occur (p_top
    its probability), which it approaches as n grows; it is 0.0 for n = 1 or a base with one
    outcome.

    ``ValueError`` for bad ``probs`` — a NaN, a negative entry, or a sum further than
    :data:`PROB_TOLERANCE` (1e-6) from 1 (float32 probabilities such as ten 0.1s pass; an empty
    ``probs`` sums to 0) — and for n < 1 or a bool n (the signature refuses other types: jaxtyping
    raises a TypeError). ``probs`` is checked whatever n is: n = 1 or a single outcome gives 0.0
    only for good probabilities ([0.5] or [0.3, 0.3] at n = 1 are refused). ``probs`` may be
    float32 or float64.

    Why this matters: the proxies of the measurement score a *finite* pool of samples and often
    give many of them the same score; log n − (n − 1)/n then overstates how far best-of-n
    went. Example: a fair coin (p = [½, ½]) and n = 3 gives P_bon = [1/8, 7/8] and
    KL = ⅛ log(¼) + ⅞ log(7/4) ≈ 0.316 nats, where log 3 − 2/3 ≈ 0.432; at n = 100 the exact KL
    is log 2 ≈ 0.693 (best-of-100 is "heads" almost surely) while the formula says 3.62.

    Traps:
    - F(i)^n for the lowest outcomes underflows to 0 for large n: P_bon = 0 there, and 0·log(0/p)
      must give 0, not NaN (select, do not multiply).
    - The order matters: outcome 0 is the *worst*. Reversed, the same formula computes
      worst-of-n; sorted by probability, it ranks by a reward nobody asked for.
    """
    raise NotImplementedError()


# --------------------------------------------------------------------------------------
# The gold score of best-of-n, estimated from a pool
# --------------------------------------------------------------------------------------


def best_of_n_gold(proxy: Float[Tensor, "N"], gold: Float[Tensor, "N"], n: int) -> float:
    """Unbiased estimate of the *gold* score best-of-n gets when the *proxy* picks.

    You have N samples of one prompt from the base policy, each scored by the proxy and by the
    gold. Best-of-n draws n of them (without replacement) and keeps the one the proxy scores
    highest; we want E[gold of the kept sample] over every draw of n. Enumerating the C(N, n)
    draws is hopeless, but only ranks matter: sort the samples by proxy, **ascending**, and
    number them i = 1 … N. The sample of rank i is kept exactly when it is drawn and the other
    n − 1 come from the i − 1 below it, so

        E[gold] = Σ_i w_i · gold_(i),       w_i = C(i − 1, n − 1) / C(N, n)

    (w_i = 0 for i < n; the weights sum to 1). This is Part 7's pass@k again: with gold = proxy =
    "correct", it *is* pass@n. n = 1 gives the mean gold of the pool; n = N the gold of the
    proxy's top sample.

    **Ties in the proxy.** When several samples share a proxy score, best-of-n picks among the
    tied maxima uniformly at random. Then each tied sample is equally likely to hold any of the
    group's ranks, so every sample of a tie group counts with the group's **average gold** —
    whatever order a sort leaves them in. (So n = N gives the mean gold of the samples tied for
    the top proxy score.) Ties in the gold do not matter.

    Inputs: 1-D tensors of one length N, each of any float dtype (bfloat16 and float16 included;
    the two need not share one); n an int with 1 ≤ n ≤ N. Returns a Python float, computed in
    float64 whatever the inputs' dtypes (the tie groups' averages too: summed in float32, a group
    of 200 is off in the 7th digit). ``ValueError`` unless both are 1-D of the same length and
    n is an int (not a bool) with 1 ≤ n ≤ N. This function is not ``@typechecked``: those checks
    are part of the exercise.

    Traps (the pass@k lesson again):
    - ``math.comb(N, n)`` is exact, but its float overflows for N in the thousands
      (``float(math.comb(3000, 1500))`` raises OverflowError), and a ratio of two such floats is
      inf/inf = NaN. Compute the weights in log space (``torch.lgamma``) or as a product of
      ratios: w_N = n/N and w_(i−1) = w_i · (i − n)/(i − 1).
    - C(i, n − 1)/C(N, n) — the 0-based formula C(j, n − 1) given 1-based ranks — is one rank off;
      C(i, n)/C(N, n) does not even sum to 1.
    - A stable sort keeps tied samples in index order: without the averaging above, the estimate
      depends on how the pool happened to be listed.
    """
    raise NotImplementedError()


# --------------------------------------------------------------------------------------
# Gao et al.'s functional forms
# --------------------------------------------------------------------------------------


@typechecked
def fit_gao(d: Float[Tensor, "points"], r: Float[Tensor, "points"], form: str) -> tuple[float, float, float]:
    """Least-squares fit of Gao et al.'s form to measured points (d, R); returns (α, β, R²).

    Gao, Schulman & Hilton found the gold score R (relative to the initial policy's, so R(0) = 0)
    against d = √KL(π ‖ π_init) follows

        bon:  R(d) = d (α − β d)              = α·d − β·d²
        rl:   R(d) = d (α − β log d)          = α·d − β·(d log d)

    α is the initial slope — how much gold each unit of distance buys while the proxy is still
    right — and β how fast the proxy's errors eat it. Both forms are **linear in α and β**: with
    the columns x₁ = d and x₂ = −d² (bon) or x₂ = −d·log d (rl), R = α x₁ + β x₂ is an ordinary
    least-squares problem without an intercept (the forms pass through R(0) = 0). No optimiser,
    no initial guess: solve it (``torch.linalg.lstsq``, or the 2×2 normal equations), in float64.

    ``r2`` is the coefficient of determination on the given points,
    R² = 1 − Σ(r − r̂)² / Σ(r − mean r)², which can be negative (no intercept: the fit may be worse
    than the mean), and NaN when every r is the same (there is no variance to explain; decided by
    ``max == min``, since Σ(r − mean r)² of seven 0.1s comes out 1.3e-33, not exactly 0; and
    only then: r = 1000 + 1e-8·noise varies, and has an R², however far below 0).

    **Points with d = 0.** Both forms give R(0) = 0, and d·log d → 0 as d → 0: a point at d = 0
    has the row (0, 0) — it adds nothing to α and β, and must not bring a NaN in (0·log 0 is NaN
    in floating point: select, do not multiply). It still counts in R², with residual r − 0.

    ``ValueError`` for a ``form`` other than "bon" or "rl"; a NaN or infinite d or r; a negative
    d; or fewer than two *distinct* values of d > 0 (with one, α and β cannot be told apart;
    distinct means not equal: d = 1e-9 and 2e-9 are two values). d and r must have one length
    (the signature checks it). Returns Python floats. Nothing in the fit depends on the scale of d
    (no epsilon, no tolerance): points at d ~ 1e-9 on an exact rl curve give its α and β back.

    Traps:
    - ``d * torch.log(d)`` at d = 0 is 0 · (−inf) = NaN, and one NaN row makes the whole fit NaN;
      ``torch.log(d + 1e-12)`` hides it but moves every point with d near 1e-12 or below.
    - Dropping the d = 0 points changes R² (they count there), not α and β.
    - An intercept (``polyfit(d, r, 2)``) fits a different model: Gao's forms have none.
    - Not wrong, but not reproducible: on CPU, ``torch.linalg.lstsq``'s default driver (gelsy, in
      MKL) can differ in the last bit from one call to the next on the same inputs;
      ``driver="gelsd"`` (or the normal equations) gives the same bits every time.
    """
    raise NotImplementedError()


def gao_peak(alpha: float, beta: float, form: str) -> float:
    """The distance d ≥ 0 at which a fitted form's gold is highest (``math.inf``: it never peaks).

    Set the derivative to 0:

        bon:  R'(d) = α − 2βd = 0               →  d* = α / (2β)
        rl:   R'(d) = α − β log d − β = 0       →  d* = exp(α/β − 1)

    Both are maxima when β > 0. With β < 0 the gold never turns down: ``math.inf``. With β = 0
    both forms are R = αd: it never turns down when α ≥ 0 (``math.inf``) and falls from the start
    when α < 0 (0.0). A β however close to 0 is not 0: β = 1e-13 is positive (α = 1 peaks at
    5e12 for bon), β = −1e-13 negative (inf). For bon with α ≤ 0 (and β > 0) the gold falls from
    the start: the best d ≥ 0 is 0.0. Otherwise the rl peak is positive (in exact arithmetic:
    exp(α/β − 1) below the smallest float, α/β under about −744, comes out 0.0; a tiny one such
    as e^−701 is returned as it is, not raised to a floor).
    When exp(α/β − 1) is beyond the largest float (α/β − 1 above log of it, about 709.78: tiny β),
    the peak is ``math.inf`` too, not an OverflowError. Returns a Python float.

    ``ValueError`` for a ``form`` other than "bon" or "rl", or a NaN or infinite α or β.

    Why it matters: d* is where to stop optimising against this proxy — the early-stopping point
    in KL. Gao et al. find it moves out as the proxy gets more data (α up or β down), which is
    what ``python -m workbook goodhart`` measures with proxies of three sizes. (Here more of the
    base model's writing buys a higher peak, not a later one: proxies whose data held the hacks'
    kind, ``--bank-near-misses 0.25``, put the peaks in order on seeds 0–2 and the other way
    round on seeds 3–5 — docs/goodhart.md.)

    Traps:
    - α/β is where the bon curve comes back to 0, not its peak: differentiating βd² gives 2βd.
    - exp(α/β) forgets the −β that differentiating d·log d brings (its derivative is log d + 1).
    - ``math.exp`` raises OverflowError past e^709.
    """
    raise NotImplementedError()


# --------------------------------------------------------------------------------------
# Ensembles of proxies
# --------------------------------------------------------------------------------------


@typechecked
def standardise_proxies(scores: Float[Tensor, "k batch"],
                        reference: Float[Tensor, "k ref"]) -> Float[Tensor, "k batch"]:
    """Put k proxies on one scale: z = (score − mean_ref) / std_ref, each proxy with its own statistics.

    Row j of ``scores`` is proxy j's scores of a batch; row j of ``reference`` is the same proxy's
    scores of a fixed reference set (e.g. the initial policy's samples). A Bradley–Terry reward
    model is defined only up to a shift (the loss sees differences) and in practice each proxy
    ends up on its own scale: one gives 0.3 ± 0.1, another −4 ± 3. Averaged raw, the widest proxy
    decides alone; its min is whichever has the lowest offset. So before combining them (Coste et
    al. 2024), shift and scale each by the mean and standard deviation of **its own scores on the
    reference set** — fixed numbers, the same for every batch, so a score means the same thing
    all along a run.

    The standard deviation is the **population** one (``unbiased=False``: divide by the number of
    reference scores), as the ensemble's variance is in :func:`ensemble_reward`. Returns a tensor
    of the shape and dtype of ``scores``, whatever the dtype of ``reference`` (float32 scores less
    float64 statistics promote to float64: cast back). However small a proxy's spread, its scores
    are divided by it as it is (a floor such as 1e-12 shrinks a proxy whose spread is 1e-13).

    Gradients flow into ``scores``: ∂z_jb/∂s_jb = 1/std_j, and nothing across samples or proxies,
    so standardising before :func:`ensemble_reward` keeps the gradients it promises. Whether they
    also flow into ``reference`` (which may itself be in a graph) is left open: its statistics are
    fixed numbers, and computing them detached (or in numpy) is as right as leaving them in it.

    ``ValueError`` when a proxy's reference scores are all equal (its spread is 0: nothing to
    divide by) — decided by ``max == min``, exactly, because a spread computed from equal values
    need not come out 0 in floating point (the mean of seven float32 0.1s is not 0.1, and
    √(mean((x − mean)²)) of them is 7.5e-9). A reference set of one score is such a case; so is
    an empty one.

    Traps:
    - Standardising with the *batch's* own mean and std makes every batch mean 0 — the reward
      no longer says whether the policy improved (and a batch of one is NaN).
    - Statistics over all proxies together (one mean for the whole tensor) leave the scales apart.
    - ``torch.std`` defaults to the sample std (``unbiased=True``).
    """
    raise NotImplementedError()


@typechecked
def ensemble_reward(scores: Float[Tensor, "k batch"], method: str, uwo_lambda: float = 0.5) -> Float[Tensor, "batch"]:
    """Combine k (standardised) proxy scores of each sample into one reward: mean, WCO or UWO.

    Column b holds the k proxies' scores of sample b, already on one scale
    (:func:`standardise_proxies`). Coste et al. (2024) compare:

        mean:  R_b = (1/k) Σ_j s_jb
        wco:   R_b = min_j s_jb                             worst-case optimisation
        uwo:   R_b = mean_j s_jb − λ · var_j s_jb            uncertainty-weighted optimisation

    where var is the population variance over the k members (``unbiased=False``: the spread of
    the ensemble itself, 0 for one member) and λ = ``uwo_lambda`` ≥ 0. With one member all three
    are that member's score.

    Why: the proxies agree where their training data was dense and disagree where the policy has
    wandered off it — exactly where a single proxy's errors are most exploitable. The min trusts
    the most pessimistic member; UWO subtracts a penalty that grows with the disagreement.

    Gradients flow into ``scores`` where the method uses them (the ensemble is differentiable in
    every member it reads): mean gives each member 1/k; wco gives each sample's gradient to its
    minimum member and 0 to the others — when several members tie for the minimum, the
    gradient goes to the tied members only, ≥ 0 each and summing to 1 (``amin`` splits it
    evenly, ``min(dim=0).values`` gives it all to one: both are allowed); uwo gives member j
    1/k − 2λ(s_jb − mean_b)/k. Returns a tensor of the dtype of ``scores``.

    ``ValueError`` for an unknown ``method``, no members (k = 0), or, for method "uwo", a λ that
    is negative or NaN.

    Traps:
    - ``max`` is not the worst case: the optimiser would then chase the most optimistic proxy.
    - ``torch.var`` defaults to the sample variance (÷ (k − 1)): NaN for one member.
    - The reduction runs over members (dim 0), not over the batch.
    """
    raise NotImplementedError()
