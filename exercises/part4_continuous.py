"""Part 4 — continuous control: a Gaussian-policy PPO agent for MuJoCo.

Part 2's agent picks one of n actions. A robot sets torques: a vector of real numbers, one
per joint. Everything in PPO's objective still works — GAE, the ratio, the clip, the value
loss — as long as the policy can give the log-probability of the action it sampled. So this
part writes only what is new and reuses Parts 1–2 for the rest:

    new here                                      reused
    GaussianActor        μ(s) from an MLP, one    Part 2's critic, ReplayMemory, learning_phase,
                         state-independent log σ   PPOTrainer.train; Part 1's GAE, surrogate,
    clip_action          send the env a valid      value loss, entropy bonus, optimizer and
                         action, store the sample  scheduler
    RunningMeanStd       the parallel-update formula
    ObservationNormalizer  (obs − μ)/σ, clipped to ±10
    RewardScaler         r / std(discounted return), clipped to ±10
    ContinuousAgent      the rollout step
    compute_continuous_objective

These are the nine continuous-action details of "The 37 Implementation Details of PPO"
(Huang et al. 2022): a Normal distribution, a state-independent log-std, independent action
components (log-probs summed), separate actor and critic, actions clipped to the valid range
but the unclipped sample stored, observation normalisation and clipping, reward scaling and
clipping. Theory: part0_theory.md, section 12. Tests: ``pytest tests/test_part4_continuous.py``;
then the probes (``pytest tests/test_continuous_probes.py``) and a real run:
``python -m workbook continuous --env InvertedPendulum-v5``.

Which gymnasium wrappers we do not use, and why. gymnasium ships ``NormalizeObservation``,
``NormalizeReward``, ``ClipAction``, ``TransformObservation`` and ``TransformReward``, which do
the jobs of ``ObservationNormalizer``, ``RewardScaler`` and ``clip_action`` correctly. You write
them here instead, because each hides a trap worth seeing once: the wrapper clips the action
*inside* the environment, so the agent stores the unclipped sample without ever noticing why
that matters; and wrapper statistics live inside an environment that is thrown away after
training, while ours are saved with the checkpoint and frozen at evaluation. The support code
uses no copy of them — never both. (The time limit, and the video recorder in the training
command, are gymnasium's own: nothing to learn from rewriting them. Episode returns come from
Part 2's ``EpisodeStatistics``, a trimmed ``RecordEpisodeStatistics`` for the NEXT_STEP reset
step; it sees the raw rewards, since the scaling happens in the agent, not in the env.)
"""

from __future__ import annotations

from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch
from jaxtyping import Bool, Float
from torch import Tensor, nn
from torch.distributions import Distribution, Independent, Normal

from workbook.cartpole import make_vector_env
from workbook.typecheck import typechecked

from .part1_ppo_core import calc_clipped_surrogate_objective, calc_entropy_bonus, calc_value_function_loss, make_optimizer
from .part2_cartpole import (PPOAgent, PPOArgs, PPOTrainer, ReplayMemory, ReplayMinibatch, get_actor_and_critic,
                             layer_init, learning_phase, learning_stats)


# --- arguments --------------------------------------------------------------------------

@dataclass
class ContinuousPPOArgs(PPOArgs):
    """Part 2's settings with CleanRL's continuous-control defaults, plus the normalisers' clip bounds."""

    env_id: str = "InvertedPendulum-v5"
    """A gymnasium id with a 1-D Box observation and a 1-D Box action space (MuJoCo: InvertedPendulum-v5,
    Hopper-v5, HalfCheetah-v5)."""
    num_envs: int = 1
    """Environments stepped in parallel."""
    num_steps_per_rollout: int = 2048
    """Steps taken in each environment per rollout phase."""
    total_timesteps: int = 1_000_000
    """Environment steps over the whole run (all environments together)."""
    learning_rate: float = 3e-4
    """Adam's learning rate at the start; it decays linearly to ``end_learning_rate``."""
    num_minibatches: int = 32
    """Minibatches each batch is cut into, per epoch."""
    batches_per_learning_phase: int = 10
    """Epochs: passes over the rollout's batch in one learning phase."""
    ent_coef: float = 0.0
    """c₂: no entropy bonus by default — the learned σ already controls exploration."""
    hidden_size: int = 64
    """Width of the two hidden layers of the actor and of the critic."""
    init_log_std: float = 0.0
    """The policy's log σ at the start (0: σ = 1 in every action dimension)."""
    obs_clip: float = 10.0
    """Normalised observations are clipped to ±obs_clip."""
    reward_clip: float = 10.0
    """Scaled rewards are clipped to ±reward_clip."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.hidden_size, int) or self.hidden_size <= 0:
            raise ValueError(f"hidden_size must be a positive integer, got {self.hidden_size!r}")
        for name in ("obs_clip", "reward_clip"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)!r}")


# --- the Gaussian actor ---------------------------------------------------------------------

class GaussianActor(nn.Module):
    """A diagonal Gaussian policy: π(a | s) = Π_i N(a_i; μ_i(s), σ_i²).

    The mean μ(s) comes from an MLP; log σ is a learned parameter that does *not* depend on
    the observation. ``actor(obs)`` returns the mean (the greedy action); ``actor.dist(obs)``
    the distribution to sample from and to score actions with.
    """

    def __init__(self, num_obs: int, action_dim: int, hidden_size: int = 64, init_log_std: float = 0.0) -> None:
        """Build the mean network and the log-std parameter.

            mean network: num_obs → hidden → tanh → hidden → tanh → action_dim
            self.log_std: nn.Parameter of shape (action_dim,) — or (1, action_dim), as in
                          CleanRL — filled with ``init_log_std``

        Initialise every ``nn.Linear`` with Part 2's :func:`layer_init`: gain √2 for the hidden
        layers and **0.01** for the head, so the first policy is centred on 0 for every
        observation, with the same spread σ = exp(init_log_std) everywhere.

        Why σ does not depend on s: early in training the advantages are noise; a
        state-dependent σ can shrink quickly in states the agent happens to see, killing
        exploration there. One global log σ per dimension moves slowly and uniformly
        (PPO's original MuJoCo setup; CleanRL's ``actor_logstd``).

        Traps:
        - Store log σ, not σ: exp(log σ) is always positive, so gradient steps cannot make
          σ negative.
        - One parameter per action dimension, not a network output.
        - Call ``super().__init__()`` first (PyTorch registers parameters through it).
        """
        raise NotImplementedError()

    def forward(self, obs: Float[Tensor, "batch num_obs"]) -> Float[Tensor, "batch action_dim"]:
        """μ(s): the mean action, which is also the greedy action used at evaluation."""
        raise NotImplementedError()

    def dist(self, obs: Float[Tensor, "batch num_obs"]) -> Distribution:
        """The policy at ``obs``: ``Independent(Normal(μ(s), σ), 1)``.

        σ = exp(log_std), broadcast to the mean's shape (batch, action_dim). ``Independent(…, 1)``
        treats the last dimension as one event: its ``log_prob(actions)`` and ``entropy()``
        have shape (batch,), the *sums* over action dimensions —

            log π(a | s) = Σ_i [ −(a_i − μ_i)² / (2σ_i²) − log σ_i − ½ log 2π ]
            H[π(· | s)]  = Σ_i [ log σ_i + ½ log(2πe) ]

        — because the components are independent, the joint density is the product of the
        per-dimension densities. That is exactly the "one number per sample" that Part 1's
        surrogate and entropy bonus expect.

        Traps:
        - ``Normal(μ, σ)`` alone has per-dimension ``log_prob`` of shape (batch, action_dim);
          with one action dimension, (batch, 1) against advantages of shape (batch,)
          broadcasts to a (batch, batch) matrix without any error.
        - ``Normal`` takes the standard deviation, not the variance.
        - Detach nothing: ``log_prob`` must carry gradient into the mean network *and* log σ
          (the policy loss trains both through this distribution).
        """
        raise NotImplementedError()


@typechecked
def clip_action(actions: Float[Tensor, "num_envs action_dim"], low: Float[np.ndarray, "action_dim"],
                high: Float[np.ndarray, "action_dim"]) -> Float[np.ndarray, "num_envs action_dim"]:
    """The actions to send to the environment: each component clipped to ``[low_i, high_i]``.

    A Gaussian has unbounded support, but MuJoCo's torques are limited (Hopper: ±1 per joint,
    InvertedPendulum: ±3). So the environment gets ``clip(a, low, high)`` — as a new numpy
    array — while the agent keeps (and stores in the replay memory) the *unclipped* sample:
    the log-probability in the memory is that of the sample, and the ratio π_new/π_old in the
    learning phase must score the same action. Score the clipped action instead and every
    clipped sample gets a density it was never drawn from; at the boundary many samples
    collapse onto one value whose log-prob is nowhere near the one recorded.

    Traps:
    - Leave ``actions`` untouched: clipping in place (``clamp_``, ``np.clip(..., out=)`` on
      ``actions.numpy()``, which shares memory) silently clips the stored sample too.
    - Bounds are per dimension: use the whole ``low`` and ``high`` arrays.
    - Clip; don't squash with tanh (a tanh policy needs a change-of-variables correction of
      the log-prob, a different algorithm).
    """
    raise NotImplementedError()


# --- normalisers ------------------------------------------------------------------------------

class RunningMeanStd:
    """Running mean and (population) variance of a stream of batches, in float64.

    Starts as if it had seen ``epsilon`` samples of mean 0 and variance 1, so the first
    normalisation never divides by zero (the convention of OpenAI baselines and gymnasium).
    """

    def __init__(self, shape: tuple[int, ...] = (), epsilon: float = 1e-4) -> None:
        self.mean = torch.zeros(shape, dtype=torch.float64)
        self.var = torch.ones(shape, dtype=torch.float64)
        self.count = float(epsilon)

    def update(self, batch: Float[Tensor, "batch *shape"]) -> None:
        """Fold a batch of samples (first dimension) into ``mean``, ``var`` and ``count``.

        The parallel-update formula (Chan, Golub & LeVeque 1979): with the batch's mean m_b,
        *population* variance v_b (divide by n_b) and size n_b,

            n      = n_a + n_b                       δ = m_b − m_a
            mean  ← m_a + δ · n_b / n
            M2     = v_a · n_a + v_b · n_b + δ² · n_a · n_b / n
            var   ← M2 / n
            count ← n

        The result is the mean and variance of all samples seen, whatever the batch sizes:
        M2 is the sum of squared deviations, and the δ² term accounts for the two groups
        having different means.

        Traps:
        - The population variance of the batch (``unbiased=False``); the default unbiased
          one is NaN for a batch of one observation — and a rollout step of one env is one.
        - Keep the cross term δ² n_a n_b / n: without it the variance shrinks whenever the
          mean moves.
        - Compute in float64 (``batch.double()``): over a million steps float32 statistics drift.
        """
        raise NotImplementedError()

    def state_dict(self) -> dict:
        return {"mean": self.mean.clone(), "var": self.var.clone(), "count": self.count}

    def load_state_dict(self, state: dict) -> None:
        self.mean, self.var, self.count = state["mean"].clone(), state["var"].clone(), float(state["count"])


class ObservationNormalizer:
    """Normalises observations with running statistics and clips them: one instance per run."""

    def __init__(self, shape: tuple[int, ...], clip: float = 10.0, epsilon: float = 1e-8) -> None:
        self.rms = RunningMeanStd(shape)
        self.clip = clip
        self.epsilon = epsilon

    def __call__(self, obs: Float[Tensor, "batch *obs_shape"], update: bool = True) -> Float[Tensor, "batch *obs_shape"]:
        """``clip((obs − mean) / sqrt(var + epsilon), −clip, clip)``, in ``obs``'s dtype.

        With ``update=True`` (training), first fold ``obs`` into ``self.rms``, then normalise
        with the updated statistics. With ``update=False`` (evaluation, or a saved agent)
        the statistics stay frozen: the network was trained on inputs scaled one way, and
        an evaluation that keeps updating them would feed it inputs scaled another.

        Why: MuJoCo observations mix positions (~0.1) and velocities (~10); unscaled, the
        tanh units saturate on the large ones and the small ones barely register. Clipping
        at ±10 standard deviations keeps one freak observation from producing a huge input.

        Traps:
        - Divide by the standard deviation, sqrt(var + ε), not by the variance.
        - Normalise first, then clip (clipping raw observations at ±10 is something else).
        - ``update=False`` must leave ``self.rms`` exactly as it was.
        - Return a new tensor and leave ``obs`` as it is (no ``obs -= mean``): it is the caller's.
        """
        raise NotImplementedError()

    def state_dict(self) -> dict:
        return {"rms": self.rms.state_dict(), "clip": self.clip, "epsilon": self.epsilon}

    def load_state_dict(self, state: dict) -> None:
        self.rms.load_state_dict(state["rms"])
        self.clip, self.epsilon = state["clip"], state["epsilon"]


class RewardScaler:
    """Scales rewards by the running standard deviation of the discounted return, then clips."""

    def __init__(self, num_envs: int, gamma: float, clip: float = 10.0, epsilon: float = 1e-8) -> None:
        self.gamma = gamma
        self.clip = clip
        self.epsilon = epsilon
        self.returns = torch.zeros(num_envs, dtype=torch.float64)
        """Each environment's discounted return so far in its current episode."""
        self.return_rms = RunningMeanStd(())

    def __call__(self, rewards: Float[Tensor, "num_envs"], reset_step: Bool[Tensor, "num_envs"]) -> Float[Tensor, "num_envs"]:
        """The scaled rewards ``clip(r / sqrt(Var[G] + epsilon), −clip, clip)`` (float32).

        ``reset_step`` marks environments whose step only reset them (Part 2's ``dones`` of
        the observation acted on: NEXT_STEP autoreset, reward 0, not a transition). Then:

            G ← 0                   where reset_step     (a new episode starts after it)
            G ← γ · G + r           elsewhere
            fold the G of the non-reset environments into ``self.return_rms`` (if any)
            return clip(r / sqrt(return_rms.var + ε), −clip, clip)

        Why the discounted return and not the reward: the critic regresses onto returns, whose
        scale is roughly r / (1 − γ) for a long episode; dividing rewards by the std of G
        puts the *returns* (and the value loss, and the advantages' raw scale) near 1 for
        every environment. Hopper's rewards are ~3 per step, its returns ~300.

        Traps:
        - Divide only; never subtract a mean from rewards: shifting every reward changes
          which behaviour is optimal (a constant bonus per step rewards living longer).
        - Reset G where an episode ended, or one episode's return runs on into the next.
        - Statistics of G, not of the rewards.
        - Return a new tensor and leave ``rewards`` as they are (no ``rewards /= std``): they are the caller's.
        """
        raise NotImplementedError()

    def state_dict(self) -> dict:
        return {"returns": self.returns.clone(), "return_rms": self.return_rms.state_dict(), "gamma": self.gamma,
                "clip": self.clip, "epsilon": self.epsilon}

    def load_state_dict(self, state: dict) -> None:
        self.returns = state["returns"].clone()
        self.return_rms.load_state_dict(state["return_rms"])
        self.gamma, self.clip, self.epsilon = state["gamma"], state["clip"], state["epsilon"]


# --- the rollout ------------------------------------------------------------------------------

class ContinuousAgent(PPOAgent):
    """Part 2's agent with a Gaussian policy, clipped actions, and normalised inputs and rewards.

    ``next_obs`` is always *normalised*: the reset observation is normalised here, and
    :meth:`play_step` normalises every new one before storing it in ``next_obs``.
    """

    def __init__(self, envs: gym.vector.VectorEnv, actor: GaussianActor, critic: nn.Module, memory: ReplayMemory,
                 gamma: float, obs_normalizer: ObservationNormalizer, reward_scaler: RewardScaler,
                 seed: int | None = None) -> None:
        super().__init__(envs, actor, critic, memory, gamma, seed=seed)
        self.obs_normalizer = obs_normalizer
        self.reward_scaler = reward_scaler
        space = envs.single_action_space
        self.action_low = space.low.astype(np.float32)
        self.action_high = space.high.astype(np.float32)
        self.next_obs = obs_normalizer(self.next_obs)

    def play_step(self) -> dict:
        """One step in every environment, stored in the memory; returns the step's infos.

        Part 2's ``play_step`` with four changes:
        1. Under ``torch.inference_mode()``: ``dist = self.actor.dist(obs)``, sample the
           actions with ``dist.sample()`` (the tests replay its random numbers), take their log-probs (shape (num_envs,)) and the critic's values.
        2. Step the environments with ``clip_action(actions, self.action_low, self.action_high)``;
           store the *unclipped* ``actions`` and their log-probs.
        3. The new observation: float32 tensor → ``self.obs_normalizer(…)`` (updating its
           statistics) — every observation the networks see is normalised.
        4. The rewards: float32 tensor → ``self.reward_scaler(rewards, dones)``, where ``dones``
           is the flag of the observation acted on (True on a reset step). The scaler clips:
           what it returns is the *environment's* reward, scaled and clipped to ±reward_clip.
        Then, as in Part 2: a truncated (not terminated) environment gets γ · V(normalised
        final observation) added to its scaled-and-clipped reward — after the clip, and never
        clipped itself, so on a truncation step the stored reward may lie outside ±reward_clip
        (clip(r / σ) + γ·V, even when the clip binds on that very step); ``self.memory.add(obs, actions,
        logprobs, values, rewards, dones)``; ``next_obs`` ← the normalised new observation,
        ``next_done`` ← terminated | truncated; ``self.step += num_envs``.

        Traps:
        - Store the sample, not the clipped action (see :func:`clip_action`).
        - Add the bootstrap after scaling and clipping: V is in the scaled units the critic
          learned; scaling it again, or clipping the sum, shrinks the future the truncation cut off.
        - Normalise with ``update=True`` here; only evaluation freezes the statistics.
        - The env's reward is float64; the memory expects float32.
        """
        raise NotImplementedError()


# --- the objective ------------------------------------------------------------------------------

def compute_continuous_objective(actor: GaussianActor, critic: nn.Module, minibatch: ReplayMinibatch,
                                 args: ContinuousPPOArgs) -> Float[Tensor, ""]:
    """Part 2's objective for a Gaussian policy, to be maximised:

        objective = L^CLIP − c₁ · L^VF + c₂ · S

    with ``dist = actor.dist(minibatch.obs)`` in place of the ``Categorical``, and Part 1's
    three functions unchanged: the surrogate scores ``minibatch.actions`` (the unclipped
    samples) against ``minibatch.logprobs``; the value loss regresses the critic's fresh
    output (squeezed to (minibatch_size,)) onto ``minibatch.returns``. Part 2's
    :func:`learning_phase` maximises it (``objective=compute_continuous_objective``).

    Traps:
    - Use ``actor.dist`` (log-probs summed over action dimensions), not a bare ``Normal``.
    - Subtract the value loss, add the entropy bonus (c₂ is 0 by default here, so a sign
      error in it hides until someone turns it on).
    - The critic's fresh output, not ``minibatch.values``.
    """
    raise NotImplementedError()


# --- putting it together (given) -------------------------------------------------------------

class ContinuousPPOTrainer(PPOTrainer):
    """Part 2's trainer (its ``rollout_phase`` and ``train``) with the pieces of this part.

    ``state_dict()`` is the checkpoint: both networks, both normalisers' statistics and the
    arguments — an agent is not reproducible without the observation statistics it was
    trained with.
    """

    def __init__(self, args: ContinuousPPOArgs, envs: gym.vector.VectorEnv | None = None) -> None:
        # Not super().__init__(): Part 2's builds a Categorical actor for a Discrete space.
        self.args = args
        torch.manual_seed(args.seed)
        self.rng = np.random.default_rng(args.seed)
        self.envs = envs if envs is not None else make_vector_env(args.env_id, args.num_envs)
        if self.envs.num_envs != args.num_envs:
            raise ValueError(f"envs has {self.envs.num_envs} environments, args.num_envs = {args.num_envs}")
        obs_space, action_space = self.envs.single_observation_space, self.envs.single_action_space
        if not isinstance(action_space, gym.spaces.Box) or len(action_space.shape) != 1:
            raise ValueError(f"{args.env_id} has action space {action_space}; Part 4 needs a 1-D Box "
                             "(for Discrete actions use Part 2's agent)")
        if len(obs_space.shape) != 1:
            raise ValueError(f"{args.env_id} has observations of shape {obs_space.shape}; Part 4 needs 1-D ones")
        num_obs, action_dim = obs_space.shape[0], action_space.shape[0]
        self.actor = GaussianActor(num_obs, action_dim, args.hidden_size, args.init_log_std)
        _, self.critic = get_actor_and_critic(num_obs, 1, args.hidden_size)  # Part 2's critic (its actor is unused)
        self.obs_normalizer = ObservationNormalizer(obs_space.shape, args.obs_clip)
        self.reward_scaler = RewardScaler(args.num_envs, args.gamma, args.reward_clip)
        self.optimizer, self.scheduler = make_optimizer(self.actor, self.critic, args.total_phases,
                                                        args.learning_rate, args.end_learning_rate)
        self.memory = ReplayMemory()
        self.agent = ContinuousAgent(self.envs, self.actor, self.critic, self.memory, args.gamma,
                                     self.obs_normalizer, self.reward_scaler, seed=args.seed)
        self.phase = 0

    def learning_phase(self) -> dict[str, float]:
        minibatches = self.memory.get_minibatches(self.agent.next_value(), self.agent.next_done, self.args, self.rng)
        learning_phase(self.actor, self.critic, minibatches, self.optimizer, self.scheduler, self.args,
                       objective=compute_continuous_objective)
        stats = learning_stats(self.actor, self.critic, minibatches, self.args, self.optimizer.param_groups[0]["lr"],
                               policy=self.actor.dist)
        return stats | {"std": self.actor.log_std.exp().mean().item()}

    def state_dict(self) -> dict:
        from dataclasses import asdict

        return {"actor": self.actor.state_dict(), "critic": self.critic.state_dict(),
                "obs_normalizer": self.obs_normalizer.state_dict(), "reward_scaler": self.reward_scaler.state_dict(),
                "args": asdict(self.args)}
