"""Greedy evaluation of a Gaussian policy: the mean action, on observations normalised with frozen statistics."""

from __future__ import annotations

from typing import Callable

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from workbook.cartpole.evaluate import evaluate_greedy

SOLVED_RETURN = {"InvertedPendulum-v5": 950.0, "Hopper-v5": 2000.0, "HalfCheetah-v5": 1500.0}
"""The greedy mean return each benchmark counts as solved (InvertedPendulum's maximum is 1000)."""
AT_MOST_1_PER_STEP = {"InvertedPendulum-v5"}
"""Tasks whose reward per step is at most 1, where an evaluation may give up early (see evaluate_greedy)."""


def greedy_policy(actor: nn.Module, obs_normalizer, clip_action: Callable, env_id: str) -> Callable:
    """Observation batch → actions: clip(μ(normalise(obs))), the statistics frozen (``update=False``)."""
    space = _action_space(env_id)
    low, high = space.low.astype(np.float32), space.high.astype(np.float32)

    def act(obs: torch.Tensor) -> np.ndarray:
        return clip_action(actor(obs_normalizer(obs, update=False)), low, high)

    return act


def _action_space(env_id: str) -> gym.spaces.Box:
    env = gym.make(env_id)
    try:
        return env.action_space
    finally:
        env.close()


def evaluate_continuous(actor: nn.Module, obs_normalizer, clip_action: Callable, env_id: str, num_episodes: int = 20,
                        seed: int = 10_000, give_up_below: float | None = None) -> np.ndarray:
    """Returns of ``num_episodes`` greedy episodes, side by side (see :func:`evaluate_greedy`).

    The normaliser is only read: evaluation never moves the statistics the agent was trained with.
    ``give_up_below`` is ignored unless the task's reward per step is at most 1 (:data:`AT_MOST_1_PER_STEP`).
    """
    if env_id not in AT_MOST_1_PER_STEP:
        give_up_below = None  # Hopper earns ~3 per step: an unfinished episode can still make up the gap
    return evaluate_greedy(actor, env_id, num_episodes, seed, give_up_below,
                           act=greedy_policy(actor, obs_normalizer, clip_action, env_id))
