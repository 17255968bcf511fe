"""Part 2 — a PPO agent that solves CartPole.

Part 1 gave us the pieces of the objective; here they become an agent. Read this file top to
bottom: it is the whole algorithm in the order it runs.

    for phase in range(total_phases):
        rollout phase:  num_steps_per_rollout × PPOAgent.play_step()   (no gradients)
        learning phase: advantages (GAE) → minibatches for a few epochs →
                        for each: compute_ppo_objective, backward, clip, step;
                        then one scheduler step

Exercises (tests: ``pytest tests/test_part2_cartpole.py``):
  1. get_actor_and_critic      the two networks and their initialisation
  2. PPOAgent.play_step        one step of the rollout in every environment
  3. compute_ppo_objective     the PPO objective on one minibatch
  4. learning_phase            minibatch epochs, gradient clipping, the schedule

Your Part 2 calls *your* Part 1 (``from .part1_ppo_core import ...``). When everything
passes, debug on the probe environments (``pytest tests/test_cartpole_probes.py``) and
train for real: ``python -m workbook cartpole --impl exercises``.

gymnasium ≥ 1.0 and episode ends. Our vector envs auto-reset in NEXT_STEP mode (see
workbook/cartpole/envs.py): when an episode ends at step t, the next step t + 1 only resets
that sub-environment — its observation is the final one, its action is ignored, its reward is
0. We record that step like any other but flag it with ``dones[t + 1] = True``, which means

  * step t does not bootstrap from the next observation (GAE reads ``dones[t + 1]``), and
  * step t + 1 is not a transition: :meth:`ReplayMemory.get_minibatches` leaves it out.

Termination and truncation end an episode differently. *Termination* (the pole fell) has no
future: nothing to bootstrap. *Truncation* (the 500-step time limit) is an artefact of the
environment, not of the task: the future return was cut off, so we put it back by adding
γ·V(final observation) to the reward of the truncated step, and then treat it as an ending.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import gymnasium as gym
import numpy as np
import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor, nn, optim
from torch.distributions import Distribution
from torch.distributions.categorical import Categorical

from workbook.cartpole import finished_episodes, make_vector_env
from workbook.typecheck import typechecked

from .part1_ppo_core import (PPOScheduler, calc_clipped_surrogate_objective, calc_entropy_bonus,
                             calc_value_function_loss, compute_advantages, get_minibatch_indices, make_optimizer)


# --- arguments --------------------------------------------------------------------------

@dataclass
class PPOArgs:
    """Every setting of a training run; derived sizes are computed and checked on creation."""

    seed: int = 1
    """Seeds the network weights, the action sampling, the environments and the minibatches."""
    env_id: str = "CartPole-v1"
    """A gymnasium id with a Box observation (1-D) and a Discrete action space."""
    num_envs: int = 32
    """Environments stepped in parallel. One batched network call serves all of them, so 32 envs
    collect 32 steps for about the price of one: many envs and short rollouts are the cheapest
    samples on a CPU (CleanRL uses 4 × 128)."""
    num_steps_per_rollout: int = 32
    """Steps taken in each environment per rollout phase."""
    total_timesteps: int = 100_000
    """Environment steps over the whole run (all environments together)."""
    learning_rate: float = 1e-2
    """Adam's learning rate at the start; it decays linearly to ``end_learning_rate``. High for PPO
    (CleanRL: 2.5e-4): with a clipped objective, gradient clipping and a linear decay, CartPole's
    small networks take it and learn in fewer samples."""
    end_learning_rate: float = 0.0
    """Learning rate after the last learning phase."""
    gamma: float = 0.99
    """Discount factor γ."""
    gae_lambda: float = 0.95
    """GAE's λ: 0 is the one-step TD error, 1 the full discounted return."""
    num_minibatches: int = 4
    """Minibatches each batch is cut into, per epoch."""
    batches_per_learning_phase: int = 3
    """Epochs: passes over the rollout's batch in one learning phase (CleanRL: 4; with this high
    learning rate 3 solve CartPole in fewer steps and less time: 10 seeds, median 31k steps, 0.7 s)."""
    clip_coef: float = 0.2
    """PPO's ε: how far the probability ratio may move before its gradient is cut."""
    ent_coef: float = 0.01
    """c₂, weight of the entropy bonus."""
    vf_coef: float = 0.5
    """c₁, weight of the value loss."""
    max_grad_norm: float = 0.5
    """Global gradient norm is clipped to this before each optimizer step."""

    def __post_init__(self) -> None:
        for name in ("num_envs", "num_steps_per_rollout", "total_timesteps", "num_minibatches",
                     "batches_per_learning_phase"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) <= 0:
                raise ValueError(f"{name} must be a positive integer, got {getattr(self, name)!r}")
        for name in ("learning_rate", "clip_coef", "max_grad_norm"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)!r}")
        for name in ("end_learning_rate", "ent_coef", "vf_coef"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name} must be non-negative, got {getattr(self, name)!r}")
        if not (0.0 < self.gamma <= 1.0 and 0.0 <= self.gae_lambda <= 1.0):
            raise ValueError(f"need 0 < gamma <= 1 and 0 <= gae_lambda <= 1, got {self.gamma} and {self.gae_lambda}")
        self.batch_size = self.num_envs * self.num_steps_per_rollout
        """Steps collected per rollout phase (all environments)."""
        if self.batch_size % self.num_minibatches:
            raise ValueError(f"batch_size = num_envs × num_steps_per_rollout = {self.batch_size} is not a multiple "
                             f"of num_minibatches = {self.num_minibatches}")
        self.minibatch_size = self.batch_size // self.num_minibatches
        """Steps per minibatch (before reset steps are dropped)."""
        if self.total_timesteps < self.batch_size:
            raise ValueError(f"total_timesteps = {self.total_timesteps} is less than one rollout "
                             f"(batch_size = {self.batch_size})")
        self.total_phases = self.total_timesteps // self.batch_size
        """Rollout + learning phases in the run: the scheduler decays over exactly this many."""


# --- the networks ---------------------------------------------------------------------

def layer_init(layer: nn.Linear, std: float = np.sqrt(2), bias_const: float = 0.0) -> nn.Linear:
    """Orthogonal weights scaled by ``std`` and constant biases, in place; returns the layer."""
    nn.init.orthogonal_(layer.weight, std)
    nn.init.constant_(layer.bias, bias_const)
    return layer


def get_actor_and_critic(num_obs: int, num_actions: int, hidden_size: int = 64) -> tuple[nn.Sequential, nn.Sequential]:
    """Two separate MLPs for a classic-control task: ``(actor, critic)``.

        actor:  num_obs → hidden → tanh → hidden → tanh → num_actions    (logits)
        critic: num_obs → hidden → tanh → hidden → tanh → 1              (V(s))

    Initialise every ``nn.Linear`` with :func:`layer_init` (orthogonal weights, zero biases):
    gain √2 for the hidden layers, **0.01** for the actor's head and **1** for the critic's.

    Why these numbers: √2 keeps the activations' scale through tanh layers; a tiny actor head
    makes the initial logits almost equal, so the first policy is close to uniform and every
    action gets tried; the critic's head has gain 1 because its output is a regression target
    of any scale. Two networks (no shared body) keep the value loss from pulling the
    policy's features around — for CartPole that is simpler and at least as good.

    Traps:
    - Build the layers as ``nn.Sequential`` of ``nn.Linear`` and ``nn.Tanh`` (not ReLU).
    - Heads: the actor needs ``num_actions`` outputs (logits, no softmax — ``Categorical``
      takes logits), the critic exactly 1.
    - Swapping the two head gains gives a confident random policy and a critic stuck near 0.
    """
    raise NotImplementedError()


# --- the replay memory (given) ----------------------------------------------------------

@dataclass
class ReplayMinibatch:
    """One minibatch of transitions, flat over (step, env); everything is a rollout-time constant."""

    obs: Float[Tensor, "minibatch_size *obs_shape"]
    actions: Int[Tensor, "minibatch_size"] | Float[Tensor, "minibatch_size action_dim"]
    """Discrete action indices (Part 2) or real-valued action vectors (Part 4)."""
    logprobs: Float[Tensor, "minibatch_size"]
    """log π_old(a_t | s_t), recorded when the action was sampled."""
    values: Float[Tensor, "minibatch_size"]
    """V_old(s_t), recorded during the rollout."""
    advantages: Float[Tensor, "minibatch_size"]
    returns: Float[Tensor, "minibatch_size"]
    """The critic's targets: advantages + values."""


@typechecked
def _check_first_row(
    obs: Float[Tensor, "num_envs *obs_shape"],
    actions: Int[Tensor, "num_envs"] | Float[Tensor, "num_envs action_dim"],
    logprobs: Float[Tensor, "num_envs"],
    values: Float[Tensor, "num_envs"],
    rewards: Float[Tensor, "num_envs"],
    dones: Bool[Tensor, "num_envs"],
) -> None:
    """Shapes and dtypes of one step (checked once per rollout: jaxtyping costs ~0.1 ms a call)."""


class ReplayMemory:
    """The rollout phase's transitions, one entry of shape (num_envs, ...) per step.

    Row t holds what the agent saw and did at step t: the observation it acted on, the
    action, its log-probability and value, the reward it got, and ``dones[t]`` — True when
    observation t is the *final* observation of an episode that ended at step t − 1 (so step
    t is the environment's reset step, see the module docstring).
    """

    FIELDS = ("obs", "actions", "logprobs", "values", "rewards", "dones")

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.obs: list[Tensor] = []
        self.actions: list[Tensor] = []
        self.logprobs: list[Tensor] = []
        self.values: list[Tensor] = []
        self.rewards: list[Tensor] = []
        self.dones: list[Tensor] = []

    def add(self, obs: Tensor, actions: Tensor, logprobs: Tensor, values: Tensor, rewards: Tensor, dones: Tensor) -> None:
        """Append one step of every environment (shapes and dtypes are checked against the first step)."""
        row = (obs, actions, logprobs, values, rewards, dones)
        if not self.obs:
            _check_first_row(*row)
        else:
            for name, x, first in zip(self.FIELDS, row, (self.obs[0], self.actions[0], self.logprobs[0], self.values[0],
                                                         self.rewards[0], self.dones[0])):
                if x.shape != first.shape or x.dtype != first.dtype:
                    raise ValueError(f"ReplayMemory.add: {name} has shape {tuple(x.shape)} and dtype {x.dtype}, "
                                     f"but the first step's has {tuple(first.shape)} and {first.dtype}")
        for store, x in zip((self.obs, self.actions, self.logprobs, self.values, self.rewards, self.dones), row):
            store.append(x)

    def stacked(self) -> dict[str, Tensor]:
        """Every field as one tensor of shape (num_steps, num_envs, ...)."""
        if not self.obs:
            raise RuntimeError("the replay memory is empty: run a rollout phase first")
        return {name: torch.stack(getattr(self, name)) for name in self.FIELDS}

    def advantages(self, next_value: Tensor, next_done: Tensor, gamma: float, gae_lambda: float) -> Tensor:
        """GAE for the stored rollout, shape (num_steps, num_envs), with Part 1's compute_advantages."""
        data = self.stacked()
        return compute_advantages(next_value, next_done, data["rewards"], data["values"], data["dones"],
                                  gamma, gae_lambda)

    def get_minibatches(self, next_value: Float[Tensor, "num_envs"], next_done: Bool[Tensor, "num_envs"],
                        args: PPOArgs, rng: np.random.Generator) -> list[ReplayMinibatch]:
        """Advantages and returns, then ``batches_per_learning_phase`` shuffled passes of minibatches.

        Reset steps (``dones[t]``) are dropped from every minibatch: their observation is an
        episode's final one and their "reward" is an artefact of the autoreset.
        """
        data = self.stacked()
        advantages = self.advantages(next_value, next_done, args.gamma, args.gae_lambda)
        returns = advantages + data["values"]
        flat = {k: v.flatten(0, 1) for k, v in data.items()} | {"advantages": advantages.flatten(),
                                                                 "returns": returns.flatten()}
        keep = ~flat["dones"].numpy()
        batch_size = flat["rewards"].shape[0]
        minibatch_size = batch_size // args.num_minibatches
        minibatches = []
        for _ in range(args.batches_per_learning_phase):
            for indices in get_minibatch_indices(rng, batch_size, minibatch_size):
                indices = torch.from_numpy(indices[keep[indices]])
                if len(indices) < 2:  # advantage normalisation needs two samples
                    continue
                minibatches.append(ReplayMinibatch(**{k: flat[k][indices] for k in
                                                      ("obs", "actions", "logprobs", "values", "advantages", "returns")}))
        return minibatches


# --- the rollout --------------------------------------------------------------------------

class PPOAgent:
    """Steps a vector of environments with the current policy and fills the replay memory."""

    def __init__(self, envs: gym.vector.VectorEnv, actor: nn.Module, critic: nn.Module, memory: ReplayMemory,
                 gamma: float, seed: int | None = None) -> None:
        self.envs = envs
        self.actor = actor
        self.critic = critic
        self.memory = memory
        self.gamma = gamma
        obs, _ = envs.reset(seed=seed)
        self.next_obs: Tensor = torch.as_tensor(obs, dtype=torch.float32)
        """The observation each environment shows now (the agent acts on it next)."""
        self.next_done: Tensor = torch.zeros(envs.num_envs, dtype=torch.bool)
        """True where ``next_obs`` is the final observation of an episode that just ended."""
        self.step = 0
        """Environment steps taken so far (all environments together)."""

    def play_step(self) -> dict:
        """Take one step in every environment and store it in the memory; return the step's infos.

        1. Under ``torch.inference_mode()``, evaluate the actor (logits) and the critic
           (values, squeezed to shape (num_envs,)) on ``self.next_obs``; sample the actions
           from ``Categorical(logits=...)`` and take their log-probabilities.
        2. Step the environments with the actions as a numpy array.
        3. Truncated but not terminated environments: add ``γ · V(final observation)`` to
           their reward, with ``γ = self.gamma`` — the final observation is the ``next_obs`` the
           step returned (NEXT_STEP autoreset), and the value must be computed under inference
           mode too (a stored reward must carry no autograd graph). An environment that is
           terminated *and* truncated on the same step is terminated: no bootstrap.
        4. ``self.memory.add(obs, actions, logprobs, values, rewards, dones)`` for the step
           just taken: the observation the agent *acted on* and its own done flag
           (``self.next_done`` before this step), float32 rewards, int64 actions.
        5. Move on: ``self.next_obs`` ← the new observation (float32 tensor),
           ``self.next_done`` ← terminated | truncated (bool tensor), and
           ``self.step += num_envs``.

        Why inference mode: the rollout only records numbers. With autograd on, every stored
        value and log-prob would keep its graph alive until the memory is cleared (slow, and
        memory hungry), and the learning phase must not backpropagate into rollout numbers.

        Traps:
        - Store ``obs``, not ``next_obs``; and ``dones`` (the flag of ``obs``), not the new one.
        - Values of the observation acted on, not of the next one.
        - Sample, don't take the argmax: PPO learns from its own stochastic policy.
        - Termination gets no bootstrap; only truncation does.
        """
        raise NotImplementedError()

    def next_value(self) -> Tensor:
        """V(next_obs) for every environment: the bootstrap after the rollout's last step."""
        with torch.inference_mode():
            return self.critic(self.next_obs).squeeze(-1)


# --- the learning phase ---------------------------------------------------------------------

# Not @typechecked: beartype would insist on *this module's* ReplayMinibatch and PPOArgs classes,
# and the tests run copies of this module side by side. Part 1's functions check the shapes.
def compute_ppo_objective(actor: nn.Module, critic: nn.Module, minibatch: ReplayMinibatch, args: PPOArgs
                          ) -> Float[Tensor, ""]:
    """The PPO objective on one minibatch, to be maximised:

        objective = L^CLIP − c₁ · L^VF + c₂ · S

    Evaluate the *current* actor and critic on ``minibatch.obs`` (with gradients), build a
    ``Categorical`` from the logits, and combine Part 1's three functions with the
    coefficients in ``args`` (``clip_coef``, ``vf_coef``, ``ent_coef``). The surrogate
    compares the new log-probabilities with ``minibatch.logprobs``; the value loss regresses
    the new values onto ``minibatch.returns``.

    Traps:
    - The value loss is *subtracted* (it is a loss inside an objective we maximise); the
      entropy bonus is added.
    - Squeeze the critic's output to shape (minibatch_size,): a (minibatch_size, 1) tensor
      minus a (minibatch_size,) one broadcasts to a square matrix.
    - Use the networks' fresh outputs, not ``minibatch.values`` (those are constants; the
      critic would never learn).
    - Leave the minibatch as it is: normalising its advantages in place changes the caller's
      data (Part 1's surrogate normalises its own copy).
    """
    raise NotImplementedError()


def learning_phase(actor: nn.Module, critic: nn.Module, minibatches: list[ReplayMinibatch], optimizer: optim.Optimizer,
                   scheduler: PPOScheduler, args: PPOArgs, objective: Callable | None = None) -> None:
    """One learning phase: an optimizer step per minibatch, then one scheduler step.

    ``objective(actor, critic, minibatch, args)`` is the function to maximise; ``None`` means
    :func:`compute_ppo_objective` (Part 4 passes its own, for a Gaussian policy). For each
    minibatch, in order:
        zero the gradients → objective(actor, critic, minibatch, args) → backward →
        clip the global gradient norm of *all* parameters (actor and critic) to
        ``args.max_grad_norm`` with ``nn.utils.clip_grad_norm_`` → optimizer step.
    After the last minibatch, ``scheduler.step()`` once: the scheduler counts learning
    phases (``args.total_phases`` of them), not minibatches — so it steps once even when
    ``minibatches`` is empty (``get_minibatches`` drops minibatches of reset steps).

    Why clip: one minibatch with a few huge advantages can produce a gradient far larger
    than usual, and one such step can wreck a good policy; clipping the norm bounds the step
    without changing its direction. (The optimizer maximises, so call ``backward()`` on the
    objective itself.)

    Traps:
    - Forgetting ``zero_grad`` sums the gradients of all previous minibatches.
    - Clipping after ``optimizer.step()`` clips nothing that matters.
    - Stepping the scheduler per minibatch decays the learning rate num_minibatches ×
      epochs times too fast (our scheduler raises when it runs past its end).
    """
    raise NotImplementedError()


# --- putting it together (given) -------------------------------------------------------------

@dataclass
class PhaseReport:
    """What one rollout + learning phase produced, for logging."""

    phase: int
    global_step: int
    episodes: list[tuple[float, int]]
    """(return, length) of the episodes that finished during the rollout."""
    stats: dict[str, float]
    """Losses and diagnostics of the learning phase (see :func:`learning_stats`)."""


@torch.no_grad()
def learning_stats(actor: nn.Module, critic: nn.Module, minibatches: list[ReplayMinibatch], args: PPOArgs,
                   lr: float, policy: Callable[[Tensor], Distribution] | None = None) -> dict[str, float]:
    """Diagnostics after a learning phase, on one epoch's minibatches (every kept transition once).

    approx_kl (the unbiased estimator E[(r − 1) − log r]) and clip_fraction tell how far the
    phase moved the policy; explained_variance = 1 − Var(R − V)/Var(R) of the rollout-time
    values says how useful the critic was (1 perfect, 0 no better than a constant).
    ``policy(obs)`` gives the action distribution (default: ``Categorical`` of the actor's logits).
    """
    epoch = minibatches[: args.num_minibatches]
    obs, actions, old_logprobs, old_values, advantages, returns = (
        torch.cat([getattr(mb, k) for mb in epoch]) for k in ("obs", "actions", "logprobs", "values", "advantages", "returns"))
    dist = policy(obs) if policy is not None else Categorical(logits=actor(obs))
    log_ratio = dist.log_prob(actions) - old_logprobs
    ratio = log_ratio.exp()
    norm_adv = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
    policy_objective = torch.minimum(ratio * norm_adv, ratio.clamp(1 - args.clip_coef, 1 + args.clip_coef) * norm_adv)
    var_returns = returns.var()
    return {
        "policy_objective": policy_objective.mean().item(),
        "value_loss": (critic(obs).squeeze(-1) - returns).pow(2).mean().item(),
        "entropy": dist.entropy().mean().item(),
        "approx_kl": ((ratio - 1) - log_ratio).mean().item(),
        "clip_fraction": ((ratio - 1).abs() > args.clip_coef).float().mean().item(),
        "explained_variance": float("nan") if var_returns == 0 else (1 - (returns - old_values).var() / var_returns).item(),
        "learning_rate": lr,
    }


class PPOTrainer:
    """Builds everything from a :class:`PPOArgs` and runs the phases.

    ``train(on_phase_end)`` calls ``on_phase_end(report)`` after every phase; returning True
    from it stops training early (the benchmark stops once the agent is solved).
    """

    def __init__(self, args: PPOArgs, envs: gym.vector.VectorEnv | None = None) -> None:
        self.args = args
        torch.manual_seed(args.seed)
        self.rng = np.random.default_rng(args.seed)
        self.envs = envs if envs is not None else make_vector_env(args.env_id, args.num_envs)
        if self.envs.num_envs != args.num_envs:
            raise ValueError(f"envs has {self.envs.num_envs} environments, args.num_envs = {args.num_envs}")
        num_obs = int(np.prod(self.envs.single_observation_space.shape))
        num_actions = int(self.envs.single_action_space.n)
        self.actor, self.critic = get_actor_and_critic(num_obs, num_actions)
        self.optimizer, self.scheduler = make_optimizer(self.actor, self.critic, args.total_phases,
                                                        args.learning_rate, args.end_learning_rate)
        self.memory = ReplayMemory()
        self.agent = PPOAgent(self.envs, self.actor, self.critic, self.memory, args.gamma, seed=args.seed)
        self.phase = 0

    def rollout_phase(self) -> list[tuple[float, int]]:
        """Fill the memory with ``num_steps_per_rollout`` steps; return the episodes that finished."""
        self.memory.reset()
        episodes = []
        for _ in range(self.args.num_steps_per_rollout):
            episodes += finished_episodes(self.agent.play_step())
        return episodes

    def learning_phase(self) -> dict[str, float]:
        """Learn from the memory; return :func:`learning_stats`."""
        minibatches = self.memory.get_minibatches(self.agent.next_value(), self.agent.next_done, self.args, self.rng)
        learning_phase(self.actor, self.critic, minibatches, self.optimizer, self.scheduler, self.args)
        return learning_stats(self.actor, self.critic, minibatches, self.args, self.optimizer.param_groups[0]["lr"])

    def train(self, on_phase_end: Callable[[PhaseReport], bool | None] | None = None) -> None:
        while self.phase < self.args.total_phases:
            episodes = self.rollout_phase()
            stats = self.learning_phase()
            self.phase += 1
            if on_phase_end is not None and on_phase_end(PhaseReport(self.phase, self.agent.step, episodes, stats)):
                break
