"""Environments for Part 2: the vector-env factory, five probe environments, and a step counter.

Everything here is registered with gymnasium under the ``workbook/`` namespace when this
module is imported (``import workbook.cartpole`` does it), so ``gym.make("workbook/Probe3-v0")``
and :func:`make_vector_env` work for them like for any other id.

Autoreset: every vector env made here uses gymnasium's default ``NEXT_STEP`` mode. When a
sub-environment's episode ends at step t, step t returns the episode's *final* observation
(with ``terminated`` or ``truncated`` set), and step t + 1 ignores the action, returns the
reset observation with reward 0 and both flags False. That step is not a transition of any
episode; the agent must not learn from it (solutions/part2_cartpole.py explains how it does
that). We pick NEXT_STEP deliberately: gymnasium's fast vectorised CartPole supports only
this mode, and the final observation then arrives as the ordinary next observation, so
bootstrapping a time-limit truncation needs no ``infos["final_obs"]`` lookup.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode

PROBE_IDS = tuple(f"workbook/Probe{i}-v0" for i in range(1, 6))
STEP_COUNTER_ID = "workbook/StepCounter-v0"


def make_vector_env(env_id: str, num_envs: int, *, record_episode_statistics: bool = True, **env_kwargs: Any
                    ) -> gym.vector.VectorEnv:
    """``num_envs`` copies of ``env_id`` as one vector env in NEXT_STEP autoreset mode.

    CartPole-v1 uses gymnasium's vectorised implementation (one numpy step for all copies,
    roughly 100× faster than stepping copies one by one); every other id is wrapped in a
    ``SyncVectorEnv``. With ``record_episode_statistics`` the env reports each finished
    episode's return and length in ``infos["episode"]`` (mask ``infos["_episode"]``).
    """
    if num_envs <= 0:
        raise ValueError(f"num_envs must be positive, got {num_envs}")
    spec = gym.spec(env_id)
    mode = "vector_entry_point" if spec.vector_entry_point is not None else "sync"
    envs = gym.make_vec(env_id, num_envs=num_envs, vectorization_mode=mode, **env_kwargs)
    autoreset = envs.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)
    if autoreset != AutoresetMode.NEXT_STEP:  # the agent's bookkeeping assumes NEXT_STEP
        raise RuntimeError(f"{env_id} vectorises with autoreset mode {autoreset}; the workbook expects NEXT_STEP")
    if record_episode_statistics:
        envs = EpisodeStatistics(envs)
    return envs


class EpisodeStatistics(gym.vector.VectorWrapper):
    """Reports each finished episode's return and length in ``infos["episode"]`` (NEXT_STEP mode).

    The same keys as gymnasium's ``RecordEpisodeStatistics`` (``"r"``, ``"l"`` and the mask
    ``"_episode"``), without its timing and queues: it runs on every step of training, and
    this version costs a few microseconds. The reset step after an episode ends counts
    towards no episode.
    """

    def __init__(self, env: gym.vector.VectorEnv):
        super().__init__(env)
        self._returns = np.zeros(self.num_envs)
        self._lengths = np.zeros(self.num_envs, dtype=np.int64)
        self._resetting = np.zeros(self.num_envs, dtype=bool)

    def reset(self, *, seed=None, options=None):
        self._returns[:] = 0.0
        self._lengths[:] = 0
        self._resetting[:] = False
        return self.env.reset(seed=seed, options=options)

    def step(self, actions):
        obs, rewards, terminated, truncated, infos = self.env.step(actions)
        self._returns[self._resetting] = 0.0
        self._lengths[self._resetting] = 0
        self._returns += rewards  # the reset step's reward is 0
        self._lengths += ~self._resetting
        self._resetting = terminated | truncated
        if self._resetting.any():
            infos = dict(infos)
            infos["episode"] = {"r": np.where(self._resetting, self._returns, 0.0),
                                "l": np.where(self._resetting, self._lengths, 0)}
            infos["_episode"] = self._resetting.copy()
        return obs, rewards, terminated, truncated, infos


def finished_episodes(infos: dict) -> list[tuple[float, int]]:
    """(return, length) of each episode that ended in the step that produced ``infos``."""
    if "_episode" not in infos:
        return []
    done = infos["_episode"]
    return [(float(r), int(n)) for r, n in zip(infos["episode"]["r"][done], infos["episode"]["l"][done])]


# --- probe environments ----------------------------------------------------------------
# Each probe is tiny enough that the right value function and policy can be written down,
# so a failing probe points at one piece of the agent (idea: Andy Jones, "Debugging RL,
# without the agonizing pain"). Observations have shape (1,), actions are Discrete(2).

class _Probe(gym.Env):
    observation_space = spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32)
    action_space = spaces.Discrete(2)

    def _obs(self, x: float) -> np.ndarray:
        return np.array([x], dtype=np.float32)


class Probe1(_Probe):
    """One step, observation 0, reward +1. Right answer: V(0) = 1.

    Isolates the critic's regression: value loss, its sign in the objective, the optimizer."""

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self._obs(0.0), {}

    def step(self, action):
        return self._obs(0.0), 1.0, True, False, {}


class Probe2(_Probe):
    """One step, observation ±1 at random, reward = observation. Right answer: V(±1) = ±1.

    Isolates the critic's use of the observation (obs stored for the right step, batching)."""

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._x = float(self.np_random.choice([-1.0, 1.0]))
        return self._obs(self._x), {}

    def step(self, action):
        return self._obs(self._x), self._x, True, False, {}


class Probe3(_Probe):
    """Two steps: observation 0 (reward 0), then observation 1 (reward +1, episode ends).

    Right answer: V(1) = 1 and V(0) = γ. Isolates discounting and bootstrapping across steps:
    GAE, the episode flags, and which step's value is stored."""

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._t = 0
        return self._obs(0.0), {}

    def step(self, action):
        self._t += 1
        if self._t == 1:
            return self._obs(1.0), 0.0, False, False, {}
        return self._obs(1.0), 1.0, True, False, {}


class Probe4(_Probe):
    """One step, observation 0, reward +1 for action 1 and −1 for action 0.

    Right answer: π(1 | 0) → 1 and V(0) → 1. Isolates the actor: the surrogate's sign,
    log-probabilities of the actions taken, the advantages."""

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self._obs(0.0), {}

    def step(self, action):
        return self._obs(0.0), 1.0 if int(action) == 1 else -1.0, True, False, {}


class Probe5(_Probe):
    """One step, observation ±1 at random, reward +1 if the action "matches" it (action 1 for
    +1, action 0 for −1) and −1 otherwise.

    Right answer: π(1 | +1) → 1, π(1 | −1) → 0, V(±1) → 1. Isolates the actor's use of the
    observation together with the action (which action was stored with which observation)."""

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._x = float(self.np_random.choice([-1.0, 1.0]))
        return self._obs(self._x), {}

    def step(self, action):
        match = (int(action) == 1) == (self._x > 0)
        return self._obs(self._x), 1.0 if match else -1.0, True, False, {}


class StepCounter(gym.Env):
    """A hand-checkable episode: observation k = steps taken so far, reward k for the k-th step.

    ``terminate_at=n`` ends the episode by *termination* after n steps; wrap it with
    ``max_episode_steps=m`` (gym's TimeLimit) to end it by *truncation* after m steps. The
    action is ignored. With rewards 1, 2, 3, ... the discounted returns are easy to write
    down, so tests can check both ends of an episode by hand.
    """

    observation_space = spaces.Box(0.0, np.inf, shape=(1,), dtype=np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self, terminate_at: int | None = None):
        self.terminate_at = terminate_at
        self._k = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._k = 0
        return np.array([0.0], dtype=np.float32), {}

    def step(self, action):
        self._k += 1
        terminated = self.terminate_at is not None and self._k >= self.terminate_at
        return np.array([float(self._k)], dtype=np.float32), float(self._k), terminated, False, {}


def register_envs() -> None:
    """Register the probes and the step counter with gymnasium (idempotent)."""
    for i, cls in enumerate((Probe1, Probe2, Probe3, Probe4, Probe5), start=1):
        if PROBE_IDS[i - 1] not in gym.registry:
            gym.register(id=PROBE_IDS[i - 1], entry_point=cls, max_episode_steps=10)
    if STEP_COUNTER_ID not in gym.registry:
        gym.register(id=STEP_COUNTER_ID, entry_point=StepCounter)


register_envs()
