"""Part 8 — pixels: PPO on Atari with a Nature CNN.

Parts 2 and 4 saw a handful of numbers per step. Here the agent sees the screen: 210 × 160
colour frames at 60 a second, rewards in the game's own points, and five lives per game.
PPO itself does not change — GAE, the ratio, the clip, the value loss, the minibatch epochs
and the schedule are Parts 1–2's, unchanged — but two things do:

    new here                                  reused
    NatureCNN       one convolutional trunk,  Part 2's ReplayMemory, PPOAgent (the rollout),
                    two heads (policy, value)  learning_phase, learning_stats, PPOTrainer.train;
    EpisodicLife    a lost life ends the       Part 1's GAE, surrogate, value loss, entropy
                    training episode, not      bonus, optimizer and scheduler
                    the game
    compute_atari_objective  the PPO objective through one shared trunk

The Atari implementation details of "The 37 Implementation Details of PPO" (Huang et al.
2022), and where each one lives:

    1. NoopReset        up to 30 random no-ops at the start of a game  gymnasium's AtariPreprocessing
    2. MaxAndSkip       repeat each action 4 frames, max over the      AtariPreprocessing
                        last two (sprites flicker between frames)
    3. EpisodicLife     a lost life is a terminal state for GAE        EpisodicLife (you write it)
    4. FireReset        press FIRE after every reset                   workbook/atari/envs.py (FireReset)
    5. WarpFrame        grey, 84 × 84                                  AtariPreprocessing
    6. ClipReward       rewards → their sign, {−1, 0, +1}              gymnasium's TransformReward(np.sign)
    7. FrameStack       the last 4 frames, as 4 input channels         gymnasium's FrameStackObservation
    8. shared Nature CNN trunk, heads off one 512-unit layer           NatureCNN (you write it)
    9. inputs scaled to [0, 1] inside the network                      NatureCNN.features

Theory: part0_theory.md, section 14. Tests: ``pytest tests/test_part8_atari.py`` (they run on the
real ALE in seconds, without training); then a run: ``python -m workbook atari --env
BreakoutNoFrameskip-v4``. The preprocessing is gymnasium's own: rewriting a resize or a max-pool
teaches nothing, and a subtle difference from the standard pipeline makes scores incomparable
with every paper. You write the two pieces that carry an idea: the shared network, and the
bookkeeping that makes a lost life an ending without ending the game.
"""

from __future__ import annotations

from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch
from jaxtyping import Float
from torch import Tensor, nn
from torch.distributions.categorical import Categorical

from workbook.atari.envs import make_atari_vector_env

from .part1_ppo_core import calc_clipped_surrogate_objective, calc_entropy_bonus, calc_value_function_loss, make_optimizer
from .part2_cartpole import (PPOAgent, PPOArgs, PPOTrainer, ReplayMemory, ReplayMinibatch, layer_init, learning_phase,
                             learning_stats)


# --- arguments --------------------------------------------------------------------------

@dataclass
class AtariPPOArgs(PPOArgs):
    """Part 2's settings with CleanRL's ``ppo_atari.py`` defaults, plus the Atari switches."""

    env_id: str = "BreakoutNoFrameskip-v4"
    """An ALE game: BreakoutNoFrameskip-v4 (CleanRL's), ALE/Breakout-v5 or ALE/Pong-v5 (sticky actions)."""
    num_envs: int = 8
    """Games played in parallel."""
    num_steps_per_rollout: int = 128
    """Agent steps (4 frames each) taken in each game per rollout phase."""
    total_timesteps: int = 10_000_000
    """Agent steps over the whole run, all games together (CleanRL's 10M steps = 40M frames)."""
    learning_rate: float = 2.5e-4
    """Adam's learning rate at the start; it decays linearly to ``end_learning_rate``."""
    batches_per_learning_phase: int = 4
    """Epochs: passes over the rollout's batch in one learning phase."""
    clip_coef: float = 0.1
    """PPO's ε (CleanRL's Atari value: smaller than for CartPole, the network is much bigger)."""
    episodic_life: bool = True
    """A lost life ends the training episode (GAE does not bootstrap across it); the game goes on."""
    clip_rewards: bool = True
    """Train on the sign of each reward: one scale of advantages for every game."""
    frame_stack: int = 4
    """Frames stacked into one observation: one frame shows where the ball is, not where it goes."""
    device: str = "cpu"
    """Where the network runs: cpu, or cuda (the emulators, the rollout and the memory stay on the CPU)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.frame_stack, int) or self.frame_stack <= 0:
            raise ValueError(f"frame_stack must be a positive integer, got {self.frame_stack!r}")
        try:
            device = torch.device(self.device)
        except RuntimeError:
            raise ValueError(f"device must be cpu or cuda (or cuda:N), got {self.device!r}") from None
        if device.type == "cuda" and not torch.cuda.is_available():
            raise ValueError(f"device is {self.device!r} but this machine has no CUDA GPU (torch.cuda.is_available() "
                             "is False)")


# --- the network -------------------------------------------------------------------------------

class NatureCNN(nn.Module):
    """The actor-critic of Mnih et al. (2015)'s DQN, as PPO uses it on Atari: one shared trunk, two heads.

        trunk:       obs / 255 → conv 32 (8×8, stride 4) → ReLU → conv 64 (4×4, stride 2) → ReLU
                     → conv 64 (3×3, stride 1) → ReLU → flatten (64·7·7 = 3136) → linear 512 → ReLU
        actor head:  512 → num_actions   (logits)
        critic head: 512 → 1             (V(s))

    ``network(obs)`` gives the logits, ``network.value(obs)`` the values and
    ``network.logits_and_value(obs)`` both from *one* pass through the trunk.
    """

    def __init__(self, num_actions: int, frame_stack: int = 4) -> None:
        """Build ``self.trunk``, ``self.actor_head`` and ``self.critic_head``.

        Input: observations of shape (batch, frame_stack, 84, 84), the stacked frames as
        channels. Initialise every ``nn.Conv2d`` and ``nn.Linear`` with Part 2's
        :func:`layer_init` (orthogonal weights, zero biases; it works for convolutions too):
        gain √2 in the trunk, **0.01** for the actor head, **1** for the critic head — CleanRL's
        gains, for Part 2's reasons (ReLU layers keep their scale with √2; near-uniform first
        policy; a regression head of any scale).

        Why share the trunk: learning to see — where the paddle is, where the ball goes — is
        most of the work, and both heads need the same picture. One trunk learns it once,
        from both losses; two trunks would cost twice the compute and each would learn from
        one signal only.

        Traps:
        - ``super().__init__()`` first; the three parts must be attributes (registered submodules).
        - The flattened size is 64 × 7 × 7 = 3136 for 84 × 84 inputs: (84 − 8)/4 + 1 = 20,
          (20 − 4)/2 + 1 = 9, 9 − 3 + 1 = 7.
        - ``frame_stack`` is the number of input channels of the first convolution.
        - Swapping the head gains gives a confident random policy and a critic stuck near 0.
        """
        super().__init__()
        self.trunk = nn.Sequential(
            layer_init(nn.Conv2d(frame_stack, 32, 8, stride=4)),
            nn.ReLU(),
            layer_init(nn.Conv2d(32, 64, 4, stride=2)),
            nn.ReLU(),
            layer_init(nn.Conv2d(64, 64, 3, stride=1)),
            nn.ReLU(),
            nn.Flatten(),
            layer_init(nn.Linear(64 * 7 * 7, 512)),
            nn.ReLU(),
        )
        self.actor_head = layer_init(nn.Linear(512, num_actions), std=0.01)
        self.critic_head = layer_init(nn.Linear(512, 1), std=1.0)

    def features(self, obs: Float[Tensor, "batch frames 84 84"]) -> Float[Tensor, "batch 512"]:
        """The trunk's output for pixel observations (uint8 or float, values 0–255).

        Scale to [0, 1] inside the network: ``obs / 255.0`` (which also turns uint8 into
        float), here before the trunk or as the trunk's first step (the diagram above). Why inside: everything else — the emulator, the memory, the
        evaluation, the video — handles raw pixels, and every caller of the network gets the
        same scaling without a chance to forget it.

        Trap: unscaled pixels of 0–255 make the first layer's outputs ~100× too large; the
        ReLU trunk still runs, but the orthogonal init's careful scales are gone and the
        first updates are huge.
        """
        return self.trunk(obs / 255.0)

    def forward(self, obs: Float[Tensor, "batch frames 84 84"]) -> Float[Tensor, "batch num_actions"]:
        """The policy's logits (the actor head on the trunk's features)."""
        return self.actor_head(self.features(obs))

    def value(self, obs: Float[Tensor, "batch frames 84 84"]) -> Float[Tensor, "batch 1"]:
        """V(s), shape (batch, 1) like Part 2's critic (the critic head on the same features)."""
        return self.critic_head(self.features(obs))

    def logits_and_value(self, obs: Float[Tensor, "batch frames 84 84"]
                         ) -> tuple[Float[Tensor, "batch num_actions"], Float[Tensor, "batch 1"]]:
        """``(logits, values)`` from one pass through the trunk: the features once, then both heads.

        The learning phase calls this: the convolutions are nearly all of the compute, and
        running them twice (``network(obs)`` then ``network.value(obs)``) doubles its cost.
        Gradients as in the two separate calls: the logits train the trunk and the actor head,
        the values the trunk and the critic head (detach nothing: the objective needs both).
        """
        features = self.features(obs)
        return self.actor_head(features), self.critic_head(features)


class CriticView(nn.Module):
    """``critic(obs)`` = ``network.value(obs)``, with no parameters of its own (given).

    Parts 1–2 take an actor and a critic and collect ``[*actor.parameters(), *critic.parameters()]``
    — for the optimizer, the gradient clip and the data-parallel gradient averaging. With a
    shared trunk, a critic that *registered* the network would list every trunk parameter
    twice: Adam would step it twice per minibatch and the clip would count it twice. So the
    actor holds the network, and the critic is this view of it, which owns nothing.
    """

    def __init__(self, network: NatureCNN) -> None:
        super().__init__()
        object.__setattr__(self, "network", network)  # deliberately not a registered submodule

    def forward(self, obs: Tensor) -> Tensor:
        return self.network.value(obs)


class OnDevice(nn.Module):
    """The network on another device (a GPU), called with CPU tensors and returning CPU tensors (given).

    Parts 1–2 keep everything on the CPU: the emulators take and give numpy arrays, and the replay
    memory holds CPU tensors. Only the network moves: each call sends its input to ``device``
    and brings the outputs back, and autograd follows both copies, so the learning phase's
    backward reaches the parameters on the GPU. The convolutions are nearly all of the compute;
    what crosses the bus is a batch of pixels one way and a few numbers per sample the other.
    """

    def __init__(self, network: NatureCNN, device: str | torch.device) -> None:
        super().__init__()
        self.device = torch.device(device)
        self.network = network.to(self.device)

    def forward(self, obs: Tensor) -> Tensor:
        return self.network(obs.to(self.device)).cpu()

    def value(self, obs: Tensor) -> Tensor:
        return self.network.value(obs.to(self.device)).cpu()

    def logits_and_value(self, obs: Tensor) -> tuple[Tensor, Tensor]:
        logits, values = self.network.logits_and_value(obs.to(self.device))
        return logits.cpu(), values.cpu()


class OnePass(nn.Module):
    """The actor for Part 2's code: ``actor(obs)`` gives the logits, and without gradients it keeps the values (given).

    Part 2's rollout (``PPOAgent.play_step``) and ``learning_stats`` ask the actor and then the
    critic about the *same* observation tensor, with gradients off. With a shared trunk that would
    run the convolutions twice for one answer; so when gradients are off, ``actor(obs)`` runs
    ``logits_and_value`` once and keeps the values, and ``actor.value(obs)`` (the
    :class:`CriticView`) hands them over if asked about that very tensor, unchanged since. With
    gradients on (the learning phase), nothing is kept: ``compute_atari_objective`` calls
    ``logits_and_value`` itself.
    """

    def __init__(self, network: nn.Module) -> None:
        super().__init__()
        self.network = network
        self._kept: tuple[Tensor, int, Tensor] | None = None

    def forward(self, obs: Tensor) -> Tensor:
        if torch.is_grad_enabled():
            self._kept = None
            return self.network(obs)
        logits, values = self.network.logits_and_value(obs)
        self._kept = (obs, self._version(obs), values)
        return logits

    def value(self, obs: Tensor) -> Tensor:
        kept, self._kept = self._kept, None
        if kept is not None and not torch.is_grad_enabled() and kept[0] is obs and kept[1] == self._version(obs):
            return kept[2]
        return self.network.value(obs)

    @staticmethod
    def _version(obs: Tensor) -> int:
        """How often ``obs`` was changed in place (inference tensors keep no count: −1)."""
        return -1 if obs.is_inference() else obs._version

    def logits_and_value(self, obs: Tensor) -> tuple[Tensor, Tensor]:
        return self.network.logits_and_value(obs)


# --- episodic life -------------------------------------------------------------------------------

class EpisodicLife(gym.Wrapper):
    """A lost life ends the *training* episode; only a lost game resets the emulator.

    Breakout gives 5 lives. Losing one costs no reward at all, so without this wrapper the
    value of "the ball is about to pass the paddle" is just the discounted score of the lives
    left — barely lower than anywhere else. Treat the lost life as a terminal state and that
    state's value falls to 0: the critic now sees the danger, and the advantages punish the
    move that missed the ball. But a full reset on every lost life would replay the first
    bricks five times as often as the last ones, so the emulator keeps playing the same game.

    ``self.lives`` is the lives count last seen; ``self.game_over`` whether the game itself
    ended on the last step (True before the first reset, so the first reset is a real one).
    """

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.lives = 0
        self.game_over = True

    def step(self, action):
        """Step the game; report ``terminated = True`` also when a life was lost.

        1. Step the wrapped env. ``self.game_over`` ← terminated or truncated (the game's own ending).
        2. The lives count is ``info["lives"]``. If it is lower than ``self.lives``, a life was
           lost: set ``terminated = True`` (truncated, reward, observation and info unchanged).
        3. ``self.lives`` ← that count; return the five values.

        Traps:
        - A lost life is a *termination* (no future to bootstrap in this life), never a truncation.
        - Read the count from ``info`` every step, and update ``self.lives`` even when nothing
          was lost: the next comparison must be against the latest count.
        - The game's own truncation (its frame cap) is a game over too.
        """
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.game_over = bool(terminated or truncated)
        lives = info["lives"]
        if lives < self.lives:
            terminated = True
        self.lives = lives
        return obs, reward, terminated, truncated, info

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """Start a new training episode: a new game only if the last one is over.

        - After a game over (and before the first reset): ``self.env.reset(seed=seed,
          options=options)``.
        - After a lost life: no reset — take one step with action 0 (NOOP) to move on, and
          return its observation and info. If that step ends the game (terminated or
          truncated), reset the env after all (with the same ``seed`` and ``options``).
        Either way, ``self.lives`` ← the returned ``info["lives"]``, ``self.game_over`` ← False.

        (The vector env calls ``reset()`` on the step after every ``terminated``: with NEXT_STEP
        autoreset that step is the reset step Part 2's memory already leaves out.)

        Traps:
        - Resetting the emulator after a lost life restarts the game: every life would then
          be a first life, and the reported returns would be one life's.
        - Update ``self.lives`` here too: a new game has all its lives again, and a stale count
          would miss (or invent) the next loss.
        """
        if self.game_over:
            obs, info = self.env.reset(seed=seed, options=options)
        else:
            obs, _, terminated, truncated, info = self.env.step(0)
            if terminated or truncated:
                obs, info = self.env.reset(seed=seed, options=options)
        self.lives = info["lives"]
        self.game_over = False
        return obs, info


# --- the objective -------------------------------------------------------------------------------

def compute_atari_objective(network: NatureCNN, critic: nn.Module, minibatch: ReplayMinibatch, args: AtariPPOArgs
                            ) -> Float[Tensor, ""]:
    """The PPO objective through a shared trunk, to be maximised:

        objective = L^CLIP − c₁ · L^VF + c₂ · S

    Call ``network.logits_and_value(minibatch.obs)`` once — the trunk runs once, and both heads
    read its features — build a ``Categorical`` from the logits, and combine Part 1's three
    functions as in Part 2's ``compute_ppo_objective`` (the values squeezed to (minibatch_size,)).
    ``critic`` is the network's :class:`CriticView` (Part 2's ``learning_phase`` passes both);
    you need not call it. In the trainer ``network`` is the NatureCNN inside the given wrappers
    (:class:`OnePass`, and :class:`OnDevice` on a GPU), which answer ``network(obs)``,
    ``network.value(obs)`` and ``network.logits_and_value(obs)`` only: reaching past them for
    ``network.features`` or the heads fails there.

    Why ``vf_coef`` matters more here: with separate networks (Part 2) c₁ only sets the
    critic's step size. With a shared trunk, the trunk's gradient is the *sum* of the policy's
    gradient and c₁ × the value loss's, so c₁ decides whose picture of the screen the
    trunk learns: too large and the features serve the value regression (whose raw gradients
    dwarf the policy's), too small and the critic cannot bend the features it needs.

    Traps:
    - Let both gradients reach the trunk: detaching the features for one head leaves the
      trunk learning from the other alone.
    - Subtract the value loss, add the entropy bonus; use the fresh values, not ``minibatch.values``.
    - Run the trunk once (``logits_and_value``), not ``network(obs)`` and ``critic(obs)``.
    """
    logits, values = network.logits_and_value(minibatch.obs)
    dist = Categorical(logits=logits)
    return (calc_clipped_surrogate_objective(dist, minibatch.actions, minibatch.advantages, minibatch.logprobs,
                                             args.clip_coef)
            - calc_value_function_loss(values.squeeze(-1), minibatch.returns, args.vf_coef)
            + calc_entropy_bonus(dist, args.ent_coef))


# --- putting it together (given) -------------------------------------------------------------

class AtariPPOTrainer(PPOTrainer):
    """Part 2's trainer (its rollout phase and ``train``) with a NatureCNN, Atari games and this part's objective.

    The rollout is Part 2's ``PPOAgent`` unchanged: ``actor`` is the network (logits) in a
    :class:`OnePass` (and an :class:`OnDevice` when ``args.device`` is not the CPU), ``critic`` its
    :class:`CriticView`; observations are stored as float32 pixels (0–255), the network scales them.
    """

    def __init__(self, args: AtariPPOArgs, envs: gym.vector.VectorEnv | None = None) -> None:
        # Not super().__init__(): Part 2's builds two MLPs for a flat observation.
        self.args = args
        torch.manual_seed(args.seed)
        self.rng = np.random.default_rng(args.seed)
        self.envs = envs if envs is not None else make_atari_vector_env(
            args.env_id, args.num_envs, episodic_life=EpisodicLife if args.episodic_life else None,
            clip_rewards=args.clip_rewards, frame_stack=args.frame_stack)
        if self.envs.num_envs != args.num_envs:
            raise ValueError(f"envs has {self.envs.num_envs} environments, args.num_envs = {args.num_envs}")
        obs_shape, action_space = self.envs.single_observation_space.shape, self.envs.single_action_space
        if obs_shape != (args.frame_stack, 84, 84) or not isinstance(action_space, gym.spaces.Discrete):
            raise ValueError(f"{args.env_id} gives observations of shape {obs_shape} and actions {action_space}; "
                             f"Part 8 needs ({args.frame_stack}, 84, 84) stacked frames and Discrete actions")
        self.network = NatureCNN(int(action_space.n), args.frame_stack)
        on_cpu = torch.device(args.device).type == "cpu"
        self.actor = OnePass(self.network if on_cpu else OnDevice(self.network, args.device))
        self.critic = CriticView(self.actor)
        self.optimizer, self.scheduler = make_optimizer(self.actor, self.critic, args.total_phases,
                                                        args.learning_rate, args.end_learning_rate)
        self.memory = ReplayMemory()
        self.agent = PPOAgent(self.envs, self.actor, self.critic, self.memory, args.gamma, seed=args.seed)
        self.phase = 0

    def learning_phase(self) -> dict[str, float]:
        minibatches = self.memory.get_minibatches(self.agent.next_value(), self.agent.next_done, self.args, self.rng)
        learning_phase(self.actor, self.critic, minibatches, self.optimizer, self.scheduler, self.args,
                       objective=compute_atari_objective)
        return learning_stats(self.actor, self.critic, minibatches, self.args, self.optimizer.param_groups[0]["lr"])

    def state_dict(self) -> dict:
        from dataclasses import asdict

        return {"network": {k: v.cpu() for k, v in self.network.state_dict().items()}, "args": asdict(self.args)}
