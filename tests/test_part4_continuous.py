"""Tests for Part 4 (exercises/part4_continuous.py).

Run: ``pytest tests/test_part4_continuous.py`` (your code) or add ``--impl=solutions``.
Each exercise is compared with the reference on the same seeded inputs, under several
settings, and its edges are probed: a batch of one observation, per-dimension action
bounds, clip bounds that bind, statistics frozen at evaluation. The normaliser and scaler
tests give your code the reference's ``RunningMeanStd``, so one wrong piece fails one test.
Your Part 4 uses your Parts 1–2: a test that reaches an unfinished function there says "needs ...".
When these pass, run the probes: ``pytest tests/test_continuous_probes.py``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import workbook.continuous  # noqa: F401  (registers the echo environment)
from workbook.cartpole import make_vector_env
from workbook.checking import (WrongAnswer, check_exercise, compare, explain, known_mistake,
                               matching_mistakes)
from workbook.continuous import ECHO_ID
from workbook.promises import (assert_no_graph, check_each_setting, copy_linears_by_role,
                               describe_layers_in_call_order)

PART = "part4_continuous"
POINTS = {
    "GaussianActor": 3,
    "clip_action": 1,
    "RunningMeanStd": 2,
    "ObservationNormalizer": 1,
    "RewardScaler": 2,
    "ContinuousAgent": 4,
    "compute_continuous_objective": 2,
}
GAMMA = 0.99


def mistake(exercise: str, name: str) -> str:
    return known_mistake(PART, exercise, name)


def check_expected(impl, exercise: str, run, expected, call: str, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    """Compare ``run(impl.<exercise>)`` with values worked out in the test (not by the reference)."""
    got = run(getattr(impl, exercise))
    problem = compare(got, expected, rtol=rtol, atol=atol)
    if problem:
        raise WrongAnswer(explain(call, problem, matching_mistakes(PART, exercise, run, got, rtol=rtol, atol=atol)))


def set_log_std(actor: nn.Module, values: list[float]) -> None:
    with torch.no_grad():
        actor.log_std.copy_(torch.tensor(values).reshape(actor.log_std.shape))


def actor_like_reference(cls, ref, num_obs: int, action_dim: int, log_std: list[float], seed: int = 0,
                         head_scale: float = 1.0):
    """``cls``'s actor with the reference actor's (seeded) weights copied in, layer by layer in the order the
    forward pass applies them (not the order they were created), and log σ set. ``head_scale`` multiplies the
    head's weights (gain 0.01: means ~0.01, where tanh(μ) ≈ μ; ×100 puts them near ±1)."""
    torch.manual_seed(seed)
    source = ref.GaussianActor(num_obs, action_dim, 32)
    with torch.no_grad():
        [*_, head] = (m for m in source.modules() if isinstance(m, nn.Linear))
        head.weight *= head_scale
    actor = cls(num_obs, action_dim, 32)
    copy_linears_by_role(actor, source, torch.zeros(1, num_obs),
                         call=f"GaussianActor({num_obs}, {action_dim}, 32)(obs)")
    set_log_std(actor, log_std)
    return actor


# --- GaussianActor ---------------------------------------------------------------------------

def describe_actor(actor: nn.Module, num_obs: int, action_dim: int, hidden_size: int | str) -> dict:
    """Layers, log σ and parameter count of an actor, for comparison with the reference's."""
    log_std = getattr(actor, "log_std", None)
    # Linear layers only, in the order forward applies them (the order they were created in is
    # free): the activation may be an nn.Tanh module or F.tanh in forward (the outputs, checked
    # in test_gaussian_policy_matches_reference with the reference's weights, tell tanh from anything else).
    layers = describe_layers_in_call_order(actor, torch.zeros(1, num_obs),
                                           call=f"GaussianActor({num_obs}, {action_dim}, {hidden_size})(obs)")
    return {"linear layers, in the order applied": layers,
            "log_std": log_std.detach().flatten() if isinstance(log_std, nn.Parameter) else log_std,
            "number of parameters": sum(p.numel() for p in actor.parameters())}


@pytest.mark.exercise("GaussianActor")
@pytest.mark.parametrize("num_obs,action_dim,hidden_size,init_log_std", [(4, 1, 64, 0.0), (11, 3, 32, -0.5)])
def test_gaussian_actor_layers_and_initialisation(impl, ref, num_obs, action_dim, hidden_size, init_log_std):
    def run(cls):
        torch.manual_seed(0)
        return describe_actor(cls(num_obs, action_dim, hidden_size, init_log_std), num_obs, action_dim, hidden_size)

    check_exercise(impl, ref, "GaussianActor", run, rtol=1e-4, atol=1e-6,
                   call=f"GaussianActor({num_obs}, {action_dim}, hidden_size={hidden_size}, "
                        f"init_log_std={init_log_std})")


@pytest.mark.exercise("GaussianActor")
def test_gaussian_actor_defaults(impl, ref):
    def run(cls):
        torch.manual_seed(0)
        return describe_actor(cls(6, 2), 6, 2, "default")

    check_exercise(impl, ref, "GaussianActor", run, rtol=1e-4, atol=1e-6,
                   call="GaussianActor(6, 2) — the defaults: hidden_size=64, init_log_std=0.0 (σ = 1)")


@pytest.mark.exercise("GaussianActor")
@pytest.mark.parametrize("action_dim,log_std", [(2, [0.3, -0.7]), (1, [-1.2]), (3, [0.0, 2.5, -6.0])])
def test_gaussian_policy_matches_reference(impl, ref, action_dim, log_std):
    # Same weights as the reference (the head's ×100, so the means reach ±1, where tanh(μ) ≠ μ), log σ set away
    # from its initial 0 (where σ = σ² = 1) — to 2.5 and −6 too, outside the ±2/−5 bounds some codes clamp it to.
    def run(cls):
        actor = actor_like_reference(cls, ref, 5, action_dim, log_std, head_scale=100.0)
        g = torch.Generator().manual_seed(action_dim)
        obs, actions = torch.randn(16, 5, generator=g), 2 * torch.randn(16, action_dim, generator=g)
        obs.requires_grad_(True)  # d log π / d obs flows through the mean network only: a detach inside dist() cuts it
        dist = actor.dist(obs)
        log_prob, entropy = dist.log_prob(actions), dist.entropy()
        grad = torch.autograd.grad(log_prob.sum() + entropy.sum(), actor.log_std, retain_graph=True)[0]
        through_mean = torch.autograd.grad(log_prob.sum(), obs, allow_unused=True)[0]
        return {"actor(obs)": actor(obs).detach(), "dist.mean": dist.mean.detach(), "dist.stddev": dist.stddev.detach(),
                "dist.log_prob(actions)": log_prob.detach(), "dist.entropy()": entropy.detach(),
                "gradient of Σ(log_prob + entropy) w.r.t. log_std": grad.flatten(),
                "gradient of Σ log_prob w.r.t. obs (through the mean network)":
                    torch.zeros_like(obs) if through_mean is None else through_mean}

    check_exercise(impl, ref, "GaussianActor", run, rtol=1e-4, atol=1e-5,
                   call=f"GaussianActor(5, {action_dim}, 32) with the reference's weights (head ×100), log_std={log_std}: "
                        "actor(obs), actor.dist(obs) on 16 observations")


@pytest.mark.exercise("GaussianActor")
def test_standard_deviation_does_not_depend_on_the_observation(impl):
    torch.manual_seed(0)
    actor = impl.GaussianActor(3, 2, 16)
    obs = 3 * torch.randn(32, 3, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        std = actor.dist(obs).stddev
    if std.shape != (32, 2) or (std - std[0]).abs().max() > 1e-7:
        raise WrongAnswer(explain("GaussianActor(3, 2, 16).dist(obs).stddev on 32 observations",
                                  f"σ differs between observations (shape {tuple(std.shape)}, spread "
                                  f"{(std - std[0]).abs().max():.3g}); it must be one learned log σ per action "
                                  "dimension", [mistake("GaussianActor", "state_dependent_log_std")]))


@pytest.mark.exercise("GaussianActor")
def test_samples_have_the_policy_mean_and_spread(impl, ref):
    actor = actor_like_reference(impl.GaussianActor, ref, 2, 2, [-1.0, 0.5])
    obs = torch.tensor([[0.3, -0.4]]).expand(20_000, 2)
    torch.manual_seed(0)
    with torch.no_grad():
        samples = actor.dist(obs).sample()
        mean = actor(obs[:1])[0]
    got = {"sample mean": samples.mean(0), "sample std": samples.std(0)}
    expected = {"sample mean": mean, "sample std": torch.tensor([np.exp(-1.0), np.exp(0.5)], dtype=torch.float32)}
    problem = compare(got, expected, rtol=0.03, atol=0.03)
    if problem:
        raise WrongAnswer(explain("GaussianActor(2, 2, 32) with log_std=[-1, 0.5]: 20,000 samples of dist(obs)",
                                  problem, [mistake("GaussianActor", "variance_as_scale")]
                                  if (samples.std(0)[1] - np.exp(1.0)).abs() < 0.1 else []))


# --- clip_action --------------------------------------------------------------------------------

@pytest.mark.exercise("clip_action")
@pytest.mark.parametrize("low,high,scale", [
    ([-0.5, -2.0, 0.0], [0.5, 3.0, 1.0], 2.0),   # a different range in every dimension
    ([-3.0], [3.0], 2.0),                        # InvertedPendulum's
    ([-1.0, -1.0], [1.0, 1.0], 0.1),             # nothing to clip
])
def test_clip_action_sends_a_valid_action_and_keeps_the_sample(impl, ref, low, high, scale):
    def run(fn):
        actions = scale * torch.randn(8, len(low), generator=torch.Generator().manual_seed(0))
        sent = fn(actions, np.array(low, dtype=np.float32), np.array(high, dtype=np.float32))
        return {"sent to the environment": sent, "the sampled actions after the call": actions}

    check_exercise(impl, ref, "clip_action", run,
                   call=f"clip_action(actions=Tensor[8, {len(low)}] (std {scale}), low={low}, high={high})")


@pytest.mark.exercise("clip_action")
def test_clip_action_returns_a_new_array(impl):
    actions = torch.tensor([[2.0, -2.0]])
    sent = impl.clip_action(actions, np.array([-1.0, -1.0], dtype=np.float32), np.array([1.0, 1.0], dtype=np.float32))
    if not isinstance(sent, np.ndarray) or np.shares_memory(sent, actions.numpy()):
        raise WrongAnswer(explain("clip_action(Tensor[[2, -2]], low=-1, high=1)",
                                  "must return a new numpy array (not the tensor, not a view of its memory): "
                                  "the environment gets the clipped copy, the memory keeps the sample",
                                  [mistake("clip_action", "clipped_in_place")]))


# --- RunningMeanStd ----------------------------------------------------------------------------

EPSILON = 1e-4  # RunningMeanStd's pseudo-count of the prior (mean 0, variance 1)


def closed_form(samples: torch.Tensor) -> dict:
    """Mean and population variance of the prior's ε pseudo-samples together with ``samples``."""
    x = samples.double()
    n = x.shape[0]
    m, v = x.mean(0), x.var(0, unbiased=False)
    total = n + EPSILON
    return {"mean": m * n / total, "var": (EPSILON + n * v + m.pow(2) * EPSILON * n / total) / total, "count": total}


def rms_state(rms) -> dict:
    return {"mean": rms.mean, "var": rms.var, "count": float(rms.count)}


@pytest.mark.exercise("RunningMeanStd")
@pytest.mark.parametrize("shape,sizes", [((3,), [1, 5, 1, 64, 2]), ((), [7, 1, 1, 300]), ((2, 2), [1])])
def test_running_statistics_are_those_of_every_sample_seen(impl, shape, sizes):
    g = torch.Generator().manual_seed(len(sizes))
    batches = [5.0 + 3.0 * torch.randn(n, *shape, generator=g) for n in sizes]

    def run(cls):
        rms = cls(shape)
        for batch in batches:
            rms.update(batch.clone())
        return rms_state(rms)

    check_expected(impl, "RunningMeanStd", run, closed_form(torch.cat(batches)), rtol=1e-9, atol=1e-9,
                   call=f"RunningMeanStd({shape}).update(...) with batches of {sizes} samples (mean 5, std 3)")


@pytest.mark.exercise("RunningMeanStd")
def test_running_statistics_accept_float32_and_match_reference(impl, ref):
    def run(cls):
        rms = cls((4,))
        g = torch.Generator().manual_seed(1)
        states = []
        for n in (1, 1, 3, 16):
            rms.update(torch.randn(n, 4, generator=g) * torch.tensor([0.1, 1.0, 10.0, 100.0]))
            states.append(rms_state(rms))
        return states

    check_exercise(impl, ref, "RunningMeanStd", run, rtol=1e-9, atol=1e-9,
                   call="RunningMeanStd((4,)).update(...) with float32 batches of 1, 1, 3 and 16, after each")


# --- ObservationNormalizer -----------------------------------------------------------------------

def normaliser_with_reference_stats(cls, ref, shape, clip, epsilon=None):
    normaliser = cls(shape, clip=clip) if epsilon is None else cls(shape, clip=clip, epsilon=epsilon)
    normaliser.rms = ref.RunningMeanStd(shape)  # isolate this exercise from your RunningMeanStd
    return normaliser


@pytest.mark.exercise("ObservationNormalizer")
@pytest.mark.parametrize("clip,epsilon", [(10.0, None), (1.5, None), (10.0, 0.25)])  # None: the default ε = 1e-8
def test_observation_normaliser_matches_reference(impl, ref, clip, epsilon):
    g = torch.Generator().manual_seed(0)
    scale = torch.tensor([0.01, 1.0, 50.0])
    calls = [(torch.randn(1, 3, generator=g) * scale + 2, True),       # a batch of one observation
             (torch.randn(8, 3, generator=g) * scale + 2, True),
             (torch.tensor([[2.0, 2.0, 1e4]]), True),                   # a freak observation: clipped
             (torch.randn(5, 3, generator=g) * scale + 2, False),       # frozen
             (torch.randn(4, 3, generator=g) * scale + 2, True)]

    def run(cls):
        normaliser = normaliser_with_reference_stats(cls, ref, (3,), clip, epsilon)
        outputs, changed = [], []
        for obs, update in calls:
            given = obs.clone()
            outputs.append(normaliser(given, update=update))
            changed.append(not torch.equal(given, obs))  # the caller's tensor, changed by the call
        return {"outputs": outputs, "statistics after": rms_state(normaliser.rms),
                "observations changed in place": changed}

    check_exercise(impl, ref, "ObservationNormalizer", run, rtol=1e-5, atol=1e-5,
                   call=f"ObservationNormalizer((3,), clip={clip}{'' if epsilon is None else f', epsilon={epsilon}'}) called on batches of 1, 8, 1 (an outlier), 5 "
                        "(update=False) and 4 observations")


@pytest.mark.exercise("ObservationNormalizer")
def test_observation_normaliser_updates_by_default(impl, ref):
    g = torch.Generator().manual_seed(1)
    batches = [torch.randn(2, 3, generator=g) * 4 + 1, torch.randn(3, 3, generator=g) * 4 + 1]

    def run(cls):
        normaliser = normaliser_with_reference_stats(cls, ref, (3,), 10.0)
        outputs = [normaliser(obs.clone()) for obs in batches]
        return {"outputs": outputs, "statistics after": rms_state(normaliser.rms)}

    check_exercise(impl, ref, "ObservationNormalizer", run, rtol=1e-5, atol=1e-5,
                   call="ObservationNormalizer((3,))(obs) on batches of 2 and 3 observations — the default "
                        "update=True (training)")


@pytest.mark.exercise("ObservationNormalizer")
def test_frozen_statistics_do_not_move(impl, ref):
    normaliser = normaliser_with_reference_stats(impl.ObservationNormalizer, ref, (2,), 10.0)
    normaliser(torch.tensor([[1.0, -1.0], [3.0, 5.0]]))
    before = rms_state(normaliser.rms)
    first = normaliser(torch.tensor([[10.0, 10.0]]), update=False)
    again = normaliser(torch.tensor([[10.0, 10.0]]), update=False)
    if compare(rms_state(normaliser.rms), before) or compare(again, first):
        raise WrongAnswer(explain("ObservationNormalizer((2,))(obs, update=False), twice",
                                  "the statistics changed (or the same observation was normalised differently "
                                  "the second time): update=False must freeze them, as at evaluation",
                                  [mistake("ObservationNormalizer", "updates_when_frozen")]))


@pytest.mark.exercise("ObservationNormalizer")
def test_normalised_observations_keep_their_dtype_and_shape(impl, ref):
    normaliser = normaliser_with_reference_stats(impl.ObservationNormalizer, ref, (3,), 10.0)
    out = normaliser(torch.ones(2, 3))
    if not isinstance(out, torch.Tensor) or out.dtype != torch.float32 or out.shape != (2, 3):
        raise WrongAnswer(explain("ObservationNormalizer((3,))(torch.ones(2, 3))",
                                  f"expected a float32 tensor of shape (2, 3), got "
                                  f"{getattr(out, 'dtype', type(out))} {tuple(getattr(out, 'shape', ()))}"))


@pytest.mark.exercise("ObservationNormalizer")
@pytest.mark.parametrize("n", [100_000, 1_000])
def test_observation_normaliser_keeps_epsilon_inside_the_sqrt_when_a_feature_barely_moves(impl, ref, n):
    # Features 0.1 ± 1e-5 and 0.7 ± 3e-5 (not exact in binary) beside an ordinary one: after n observations their
    # variance is ~1e-9 (n = 100,000) or ~1e-7 (n = 1,000), near ε = 1e-8. sqrt(var + ε) and sqrt(var) + ε then
    # differ by far more than any tolerance; with the ordinary feature alone they would agree to 1e-8.
    g = torch.Generator().manual_seed(n)
    obs = torch.stack([0.1 + 1e-5 * torch.randn(n, generator=g), 0.7 + 3e-5 * torch.randn(n, generator=g),
                       torch.randn(n, generator=g)], dim=1)
    later = obs[:4] + torch.tensor([2e-5, -3e-5, 0.3])

    def run(cls):
        normaliser = normaliser_with_reference_stats(cls, ref, (3,), 10.0)
        first = normaliser(obs.clone())
        return {"the first 8 outputs": first[:8], "frozen, 4 more": normaliser(later.clone(), update=False)}

    check_exercise(impl, ref, "ObservationNormalizer", run, rtol=1e-3, atol=1e-3,
                   call=f"ObservationNormalizer((3,))(obs) on {n:_} observations whose features 0 and 1 barely move "
                        "(0.1 ± 1e-5, 0.7 ± 3e-5), then 4 more with update=False")


# --- RewardScaler --------------------------------------------------------------------------------

def reward_stream(seed: int, steps: int = 12, num_envs: int = 3, centre: float = 3.0):
    """Rewards around ``centre`` (3: like Hopper's) and reset steps where episodes of uneven length end."""
    g = torch.Generator().manual_seed(seed)
    rewards = centre + torch.randn(steps, num_envs, generator=g)
    reset = torch.zeros(steps, num_envs, dtype=torch.bool)
    reset[4, 0] = reset[9, 0] = reset[6, 1] = reset[7, 2] = True
    rewards[reset] = 0.0  # a reset step's reward is 0
    return rewards, reset


def scaler_with_reference_stats(cls, ref, num_envs, gamma, clip, epsilon=None):
    scaler = cls(num_envs, gamma, clip=clip) if epsilon is None else cls(num_envs, gamma, clip=clip, epsilon=epsilon)
    scaler.return_rms = ref.RunningMeanStd(())  # isolate this exercise from your RunningMeanStd
    return scaler


@pytest.mark.exercise("RewardScaler")
@pytest.mark.parametrize("gamma,clip,epsilon,centre", [(0.99, 10.0, None, 3.0), (0.5, 10.0, None, 3.0), (0.9, 0.8, None, 3.0),
                                                       (0.9, 0.8, None, -3.0),  # negative rewards: the clip at −0.8
                                                       (0.9, 10.0, 0.5, 3.0)])  # None: the default ε = 1e-8
def test_reward_scaler_matches_reference(impl, ref, gamma, clip, epsilon, centre):
    rewards, reset = reward_stream(0, centre=centre)

    def run(cls):
        scaler = scaler_with_reference_stats(cls, ref, 3, gamma, clip, epsilon)
        scaled, changed = [], []
        for r, d in zip(rewards, reset):
            given = r.clone()
            scaled.append(scaler(given, d.clone()))
            changed.append(not torch.equal(given, r))  # the caller's rewards, changed by the call
        return {"scaled rewards": torch.stack(scaled), "returns after": scaler.returns,
                "statistics of the returns": rms_state(scaler.return_rms), "rewards changed in place": changed}

    check_exercise(impl, ref, "RewardScaler", run, rtol=1e-5, atol=1e-5,
                   call=f"RewardScaler(3, gamma={gamma}, clip={clip}{'' if epsilon is None else f', epsilon={epsilon}'}) "
                        f"over 12 steps of rewards around {centre} with reset steps")


@pytest.mark.exercise("RewardScaler")
def test_discounted_return_restarts_after_a_reset_step(impl, ref):
    # One env, γ = 0.5: rewards 1, 2, then a reset step, then 4: G = 1, 2.5, (reset) 0, 4.
    rewards = torch.tensor([[1.0], [2.0], [0.0], [4.0]])
    reset = torch.tensor([[False], [False], [True], [False]])

    def run(cls):
        scaler = scaler_with_reference_stats(cls, ref, 1, 0.5, 1e6)
        returns = []
        for r, d in zip(rewards, reset):
            scaler(r.clone(), d.clone())
            returns.append(scaler.returns.clone())
        return {"G after each step": torch.cat(returns), "statistics of G": rms_state(scaler.return_rms)}

    expected = {"G after each step": torch.tensor([1.0, 2.5, 0.0, 4.0], dtype=torch.float64),
                "statistics of G": closed_form(torch.tensor([1.0, 2.5, 4.0]))}
    check_expected(impl, "RewardScaler", run, expected,
                   call="RewardScaler(1, gamma=0.5) on rewards 1, 2, (reset step), 4")


@pytest.mark.exercise("RewardScaler")
def test_reward_scaler_stays_finite_when_the_returns_never_vary(impl, ref):
    # 100,000 environments, every reward 0: Var[G] falls to 1e-4 / (1e-4 + 1e5) ≈ 1e-9, below ε = 1e-8.
    # sqrt(Var[G] + ε) keeps the division defined: the scaled rewards are 0, not NaN.
    n = 100_000

    def run(cls):
        scaler = scaler_with_reference_stats(cls, ref, n, GAMMA, 10.0)
        return {"scaled rewards": scaler(torch.zeros(n), torch.zeros(n, dtype=torch.bool)),
                "statistics of the returns": rms_state(scaler.return_rms)}

    check_exercise(impl, ref, "RewardScaler", run, rtol=1e-5, atol=1e-12,
                   call=f"RewardScaler({n}, gamma={GAMMA}) on one step of rewards that are all 0 (Var[G] ≈ 1e-9 < ε)")


@pytest.mark.exercise("RewardScaler")
@pytest.mark.parametrize("num_envs,steps", [(100_000, 2), (1_000, 3)])
def test_reward_scaler_keeps_epsilon_inside_the_sqrt_when_the_returns_barely_vary(impl, ref, num_envs, steps):
    # Rewards of 1e-5 · (0.1 … 1.1), not exact in binary: Var[G] ~1e-9 or ~1e-7, near ε = 1e-8. The scaled rewards
    # (~0.03-0.09, no clip binds) then show where ε went: sqrt(Var[G] + ε) and sqrt(Var[G]) + ε differ by 5-300 %.
    # (Rewards all 0 would hide it: 0 divided by anything is 0.)
    g = torch.Generator().manual_seed(num_envs)
    rewards = [1e-5 * (0.1 + torch.rand(num_envs, generator=g)) for _ in range(steps)]

    def run(cls):
        scaler = scaler_with_reference_stats(cls, ref, num_envs, GAMMA, 10.0)
        return {"scaled rewards (first 8 envs)": torch.stack(
            [scaler(r.clone(), torch.zeros(num_envs, dtype=torch.bool))[:8] for r in rewards])}

    check_exercise(impl, ref, "RewardScaler", run, rtol=1e-3, atol=1e-4,
                   call=f"RewardScaler({num_envs:_}, gamma={GAMMA}) over {steps} steps of rewards of 1e-5 · (0.1 … 1.1) "
                        "(Var[G] near ε)")


# --- ContinuousAgent.play_step -------------------------------------------------------------------

def record_rollout(impl, ref, agent_cls, *, num_envs: int, steps: int, seed: int = 0, reward_clip: float = 10.0,
                   value_shift: float = 0.0, gamma: float = GAMMA, **env_kwargs) -> dict:
    """``steps`` play_steps on the echo env with the reference networks, normaliser and scaler
    (``value_shift`` is added to the critic's output bias: V ≈ value_shift)."""
    torch.manual_seed(seed)
    actor = ref.GaussianActor(3, 2, 16)
    critic = ref.get_actor_and_critic(3, 1, 16)[1]
    if value_shift:
        with torch.no_grad():
            [*_, last] = (m for m in critic.modules() if isinstance(m, nn.Linear))
            last.bias += value_shift
    envs = make_vector_env(ECHO_ID, num_envs, **env_kwargs)
    normaliser, scaler = ref.ObservationNormalizer((3,)), ref.RewardScaler(num_envs, gamma, reward_clip)
    memory = impl.ReplayMemory()
    agent = agent_cls(envs, actor, critic, memory, gamma, normaliser, scaler, seed=seed)
    torch.manual_seed(seed + 1)
    received = []
    for _ in range(steps):
        agent.play_step()
        received.append(torch.as_tensor(np.stack(envs.unwrapped.get_attr("last_received")), dtype=torch.float32))
    envs.close()
    return memory.stacked() | {"next_obs": agent.next_obs, "next_done": agent.next_done, "step": agent.step,
                               "actions received by the envs": torch.stack(received),
                               "observation statistics": rms_state(normaliser.rms),
                               "discounted returns": scaler.returns, "statistics of the returns":
                               rms_state(scaler.return_rms)}


@pytest.mark.exercise("ContinuousAgent")
@pytest.mark.parametrize("num_envs,env_kwargs", [(2, dict(max_episode_steps=3)), (3, dict(terminate_at=4)),
                                                 (1, dict(terminate_at=5, max_episode_steps=3)),
                                                 (2, dict(terminate_at=3, max_episode_steps=3))],  # both on one step
                         ids=["truncated", "terminated", "truncated-first", "terminated-and-truncated"])
def test_play_step_matches_reference(impl, ref, num_envs, env_kwargs):
    def run(cls):
        return record_rollout(impl, ref, cls, num_envs=num_envs, steps=11, **env_kwargs)

    check_exercise(impl, ref, "ContinuousAgent", run,
                   call=f"ContinuousAgent(ContinuousEcho × {num_envs}, {env_kwargs}, reference networks, normaliser "
                        "and scaler).play_step() × 11, then memory.stacked() and the agent's state")


@pytest.mark.exercise("ContinuousAgent")
def test_a_reward_clip_binding_on_a_truncation_step_leaves_the_bootstrap_unclipped(impl, ref):
    # reward_clip = 0.05 binds on every step, truncation steps included; V ≈ 3, so γ·V lies far outside
    # ±0.05. The docstring: clip the scaled reward, then add γ·V — the stored reward on a truncation step is
    # ±0.05 + γ·V, not clipped back to ±0.05 (and γ·V is not scaled or clipped on its own either).
    # γ = 0.9 here (0.99 elsewhere): the bootstrap uses the agent's gamma, not a hard-coded 0.99.
    clip, shift, gamma = 0.05, 3.0, 0.9

    def run(cls):
        return record_rollout(impl, ref, cls, num_envs=2, steps=8, reward_clip=clip, value_shift=shift, gamma=gamma,
                              max_episode_steps=3)

    expected = run(ref.ContinuousAgent)
    dones, rewards = expected["dones"].bool(), expected["rewards"]
    truncation = dones.roll(-1, 0)
    truncation[-1] = False  # steps whose next observation is a reset: the truncated ones (steps 2 and 6)
    ordinary = ~truncation & ~dones  # neither truncated nor acting on a reset observation (reward 0 there)
    assert truncation.sum() == 4 and (rewards[truncation] > 2.0).all(), "test inputs: γ·V must be outside the clip"
    assert torch.allclose(rewards[ordinary].abs(), torch.tensor(clip)), "test inputs: the clip must bind"
    check_exercise(impl, ref, "ContinuousAgent", run,
                   call=f"ContinuousAgent(ContinuousEcho × 2, max_episode_steps=3, gamma={gamma}, RewardScaler(clip={clip}), critic "
                        f"with V ≈ {shift}).play_step() × 8, then memory.stacked() and the agent's state: "
                        "stored reward on a truncation step = clip(r / σ) + γ·V")


@pytest.mark.exercise("ContinuousAgent")
def test_the_memory_holds_no_autograd_graph(impl, ref):
    # The networks' parameters require grad: a rollout run with gradients on stores graphs.
    torch.manual_seed(0)
    envs = make_vector_env(ECHO_ID, 2, max_episode_steps=3)
    memory = impl.ReplayMemory()
    agent = impl.ContinuousAgent(envs, ref.GaussianActor(3, 2, 16), ref.get_actor_and_critic(3, 1, 16)[1], memory, GAMMA,
                                 ref.ObservationNormalizer((3,)), ref.RewardScaler(2, GAMMA), seed=0)
    for _ in range(4):  # past a truncation, so the bootstrap's V is in a stored reward too
        agent.play_step()
    envs.close()
    assert_no_graph(memory.stacked() | {"next_obs": agent.next_obs}, "ContinuousAgent(...).play_step() × 4",
                    what="memory", labels=[mistake("ContinuousAgent", "stores_autograd_graph")])


@pytest.mark.exercise("ContinuousAgent")
def test_the_env_gets_clipped_actions_and_the_memory_keeps_samples(impl, ref):
    record = record_rollout(impl, ref, impl.ContinuousAgent, num_envs=4, steps=6)
    actions, received = record["actions"], record["actions received by the envs"]
    low, high = torch.tensor([-0.5, 0.0]), torch.tensor([0.5, 2.0])
    call = "ContinuousAgent(ContinuousEcho × 4, σ = 1).play_step() × 6"
    if ((received < low - 1e-6) | (received > high + 1e-6)).any():
        raise WrongAnswer(explain(call, "an environment received an action outside its bounds "
                                        "[-0.5, 0.5] × [0, 2]: send clip_action(...) to envs.step",
                                  [mistake("ContinuousAgent", "sends_unclipped_actions")]))
    if not ((actions < low) | (actions > high)).any():
        raise WrongAnswer(explain(call, "every stored action lies inside the bounds although σ = 1 samples "
                                        "outside them half the time: store the unclipped sample",
                                  [mistake("ContinuousAgent", "stores_clipped_actions")]))
    problem = compare(received, actions.clamp(low, high))
    if problem:
        raise WrongAnswer(explain(call, "the envs did not receive the clipped stored actions: " + problem))


# --- compute_continuous_objective ----------------------------------------------------------------

def make_minibatch(module, ref, seed: int, action_dim: int, size: int = 32):
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(size, 5, generator=g)
    actions = torch.randn(size, action_dim, generator=g)
    values = torch.randn(size, generator=g)
    advantages = 0.5 + 2.0 * torch.randn(size, generator=g)
    with torch.no_grad():  # old log-probs near the current policy's, so some ratios leave 1 ± ε
        torch.manual_seed(seed)
        old = ref.GaussianActor(5, action_dim, 32).dist(obs).log_prob(actions)
    return module.ReplayMinibatch(obs=obs, actions=actions, logprobs=old + 0.3 * torch.randn(size, generator=g),
                                  values=values, advantages=advantages, returns=advantages + values)


def gradient(net: nn.Module) -> torch.Tensor:
    return torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).flatten() for p in net.parameters()])


@pytest.mark.exercise("compute_continuous_objective")
@pytest.mark.parametrize("seed,action_dim", [(0, 1), (1, 3), (2, 2)])
def test_continuous_objective_and_its_gradients_match_reference(impl, ref, seed, action_dim):
    # Every coefficient the docstring names is varied (check_each_setting first proves on the
    # reference that each one changes what this check sees): an objective that hard-codes one passes
    # no test.
    def run(fn, args):
        torch.manual_seed(seed)
        actor = ref.GaussianActor(5, action_dim, 32)
        set_log_std(actor, [-0.3] * action_dim)
        critic = ref.get_actor_and_critic(5, 1, 32)[1]
        objective = fn(actor, critic, make_minibatch(impl, ref, seed, action_dim), args)
        if objective.requires_grad:
            objective.backward()
        return {"objective": objective.detach(), "gradient w.r.t. the actor": gradient(actor),
                "gradient w.r.t. the critic": gradient(critic)}

    check_each_setting(impl, ref, "compute_continuous_objective", run, impl.ContinuousPPOArgs(ent_coef=0.05),
                       {"clip_coef": [0.1], "vf_coef": [1.3], "ent_coef": [0.0]}, rtol=1e-4, atol=1e-6,
                       call=f"compute_continuous_objective(GaussianActor(5, {action_dim}), critic, minibatch of 32, "
                            "ContinuousPPOArgs(...)), then backward()")


# --- given code (not graded) -------------------------------------------------------------------

def test_continuous_args_reject_bad_clip_bounds(ref):
    with pytest.raises(ValueError, match="obs_clip must be positive"):
        ref.ContinuousPPOArgs(obs_clip=0.0)


def test_trainer_rejects_a_discrete_action_space(ref):
    with pytest.raises(ValueError, match="needs a 1-D Box"):
        ref.ContinuousPPOTrainer(ref.ContinuousPPOArgs(env_id="CartPole-v1", num_steps_per_rollout=64,
                                                       total_timesteps=64, num_minibatches=2))


def test_checkpoint_restores_the_normaliser_statistics(ref):
    args = ref.ContinuousPPOArgs(env_id=ECHO_ID, num_envs=2, num_steps_per_rollout=8, total_timesteps=16,
                                 num_minibatches=2, batches_per_learning_phase=1)
    trainer = ref.ContinuousPPOTrainer(args)
    trainer.train()
    state = trainer.state_dict()
    restored = ref.ObservationNormalizer((3,))
    restored.load_state_dict(state["obs_normalizer"])
    obs = torch.tensor([[1.0, 0.2, 1.5]])
    assert torch.equal(restored(obs, update=False), trainer.obs_normalizer(obs, update=False))
    assert restored.rms.count == trainer.obs_normalizer.rms.count > 16
