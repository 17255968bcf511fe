"""Environments for Part 4: three continuous probes with analytic answers, and an echo env for tests.

Registered with gymnasium under ``workbook/`` when this module is imported. Like Part 2's
probes (workbook/cartpole/envs.py), each is small enough that the right policy can be
written down, so a probe that fails points at one piece of the agent. Episodes are one
step long, so the right value is simply the expected reward, and the right policy mean
maximises the reward: every reward is −(a − target)², best at a = target, and the policy
should also grow *confident* (σ shrinks), since every unit of spread costs σ² reward.

Each env applies the action it receives as given and never clips it: clipping is the
agent's job (``clip_action``), and a test should see what an agent that forgot it sends.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium import spaces

PROBE_IDS = tuple(f"workbook/ContinuousProbe{i}-v0" for i in range(1, 4))
ECHO_ID = "workbook/ContinuousEcho-v0"

TARGET = np.array([0.5, -0.3])
"""The best action of probe 1."""
SLOPE = 0.5
"""The best action of probes 2 and 3 is SLOPE · x for the observation's sign x ∈ {−1, +1}."""
OFFSET, SCALE, REWARD_SCALE = 500.0, 100.0, 100.0
"""Probe 3's observation is OFFSET + SCALE · x and its reward is REWARD_SCALE times probe 2's."""


class _OneStep(gym.Env):
    """One-step episodes with a real-valued action; subclasses set the spaces, _observe and _reward."""

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._x = float(self.np_random.choice([-1.0, 1.0]))
        return self._observe(), {}

    def step(self, action):
        return self._observe(), float(self._reward(np.asarray(action, dtype=np.float64))), True, False, {}


class ContinuousProbe1(_OneStep):
    """Observation 0; two action dimensions; reward −Σ_i (a_i − target_i)², target (0.5, −0.3).

    Right answer: μ → (0.5, −0.3), log σ falls in both dimensions, V(0) → −Σσ² → 0. Isolates
    the Gaussian policy: log-probs summed over dimensions, the surrogate on real-valued
    actions, the log-std parameter receiving gradient (and the sign of everything)."""

    observation_space = spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32)
    action_space = spaces.Box(-2.0, 2.0, shape=(2,), dtype=np.float32)

    def _observe(self):
        return np.zeros(1, dtype=np.float32)

    def _reward(self, action):
        return -np.sum((action - TARGET) ** 2)


class ContinuousProbe2(_OneStep):
    """Observation x = ±1 at random; reward −(a − 0.5 x)².

    Right answer: μ(+1) → 0.5, μ(−1) → −0.5. Isolates the mean network's use of the
    observation and the pairing of each stored action with the observation it answered."""

    observation_space = spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32)
    action_space = spaces.Box(-2.0, 2.0, shape=(1,), dtype=np.float32)

    def _observe(self):
        return np.array([self._x], dtype=np.float32)

    def _reward(self, action):
        return -((action[0] - SLOPE * self._x) ** 2)


class ContinuousProbe3(ContinuousProbe2):
    """Probe 2 in badly scaled units: observation 500 ± 100, reward 100 × −(a − 0.5 x)².

    Right answer: the same μ(±1) = ±0.5 (at observations 600 and 400). Isolates the
    normalisers: unnormalised inputs of ~500 saturate every tanh unit, so the two
    observations look alike, and rewards of −100s make the value loss swamp the rest."""

    observation_space = spaces.Box(0.0, 1000.0, shape=(1,), dtype=np.float32)

    def _observe(self):
        return np.array([OFFSET + SCALE * self._x], dtype=np.float32)

    def _reward(self, action):
        return REWARD_SCALE * super()._reward(action)


class ContinuousEcho(gym.Env):
    """For tests of the rollout: observation (k, a_0, a_1) = (steps so far, the action received).

    The action space is asymmetric per dimension ([−0.5, 0.5] × [0, 2]) and the reward,
    k + a_0 − a_1², depends on the action *received*, so a test can tell whether the agent
    sent the clipped action and stored the sampled one (``last_received`` holds it too; zeros
    after a reset). ``terminate_at=n`` terminates after n steps; gymnasium's
    ``max_episode_steps`` truncates.
    """

    observation_space = spaces.Box(-np.inf, np.inf, shape=(3,), dtype=np.float32)
    action_space = spaces.Box(np.array([-0.5, 0.0], dtype=np.float32), np.array([0.5, 2.0], dtype=np.float32))

    def __init__(self, terminate_at: int | None = None):
        self.terminate_at = terminate_at
        self._k = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._k = 0
        self.last_received = np.zeros(2)
        return np.zeros(3, dtype=np.float32), {}

    def step(self, action):
        action = self.last_received = np.array(action, dtype=np.float64)
        self._k += 1
        terminated = self.terminate_at is not None and self._k >= self.terminate_at
        obs = np.array([self._k, action[0], action[1]], dtype=np.float32)
        return obs, float(self._k + action[0] - action[1] ** 2), terminated, False, {}


def register_envs() -> None:
    """Register the probes and the echo env with gymnasium (idempotent)."""
    for env_id, cls in zip(PROBE_IDS, (ContinuousProbe1, ContinuousProbe2, ContinuousProbe3)):
        if env_id not in gym.registry:
            gym.register(id=env_id, entry_point=cls, max_episode_steps=10)
    if ECHO_ID not in gym.registry:
        gym.register(id=ECHO_ID, entry_point=ContinuousEcho)


register_envs()
