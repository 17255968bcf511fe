"""Greedy evaluation: how well does the policy do when it always takes its most likely action?"""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch
from torch import Tensor, nn

from workbook.cartpole.envs import make_vector_env

SOLVED_RETURN = 475.0
"""CartPole-v1 counts as solved at an average return of 475 (out of a maximum 500)."""


@torch.inference_mode()
def evaluate_greedy(actor: nn.Module, env_id: str = "CartPole-v1", num_episodes: int = 20, seed: int = 10_000,
                    give_up_below: float | None = None, act: Callable[[Tensor], np.ndarray] | None = None,
                    lengths: list | None = None) -> np.ndarray:
    """Returns of ``num_episodes`` episodes (one per parallel env) with argmax actions.

    ``lengths``: a list to receive each episode's length (``python -m workbook evaluate`` prints them).

    ``act(observations)`` picks the actions instead, when given (Part 4: the clipped mean
    action of the normalised observation).

    All episodes run side by side in one vector env, so evaluating costs at most one batched
    forward pass per time step. With ``give_up_below``, stop as soon as the mean return can no
    longer reach it (the unfinished episodes are reported with their return so far): the
    benchmark checks often and most checks early in training fail fast. The bound assumes a
    reward of at most 1 per step (CartPole, InvertedPendulum); never pass it for other tasks.
    """
    envs = make_vector_env(env_id, num_episodes, record_episode_statistics=False)
    try:
        obs, _ = envs.reset(seed=seed)
        returns = np.zeros(num_episodes)
        episode_lengths = np.zeros(num_episodes, dtype=np.int64)
        running = np.ones(num_episodes, dtype=bool)
        max_steps = envs.spec.max_episode_steps if envs.spec and envs.spec.max_episode_steps else 10_000
        steps = 0
        while running.any():
            obs = torch.as_tensor(obs, dtype=torch.float32)
            actions = act(obs) if act is not None else actor(obs).argmax(-1).numpy()
            obs, rewards, terminated, truncated, _ = envs.step(actions)
            returns += rewards * running
            episode_lengths += running
            running &= ~(terminated | truncated)
            steps += 1
            if give_up_below is not None and (returns + running * (max_steps - steps)).mean() < give_up_below:
                break
        if lengths is not None:
            lengths.extend(episode_lengths.tolist())
        return returns
    finally:
        envs.close()
