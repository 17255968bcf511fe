"""Evaluation of an Atari policy: whole games, real scores, actions sampled from the policy.

Why sampled and not greedy: a deterministic Atari policy can lock into a loop that never
scores and never dies (a paddle parked where the ball never comes) and then plays until the
30-minute frame cap; the stochastic policy PPO trained is also the one its training returns
measure. Each game runs with the training wrappers (episodic life and FIRE after a lost life,
so the ball is served as in training), and its score is the game's own, unclipped, read from
the innermost ``RecordEpisodeStatistics``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import gymnasium as gym
import numpy as np
import torch
from torch import nn
from torch.distributions.categorical import Categorical

from workbook.atari.envs import MAX_FRAMES, FRAME_SKIP, game_name, make_atari_env, make_atari_vector_env, random_return

SOLVED_RETURN = {"Pong": 0.0}
"""Scores that count as learned: Pong at 0 (as many points won as lost); other games 5× a random policy's."""


def solved_return(env_id: str) -> float:
    game = game_name(env_id)
    if game in SOLVED_RETURN:
        return SOLVED_RETURN[game]
    random = random_return(env_id)
    return 5 * random if random is not None and random > 0 else float("inf")


@torch.inference_mode()
def evaluate_atari(network: nn.Module, env_id: str, num_episodes: int = 20, seed: int = 10_000, *,
                   episodic_life: Callable[[gym.Env], gym.Env] | None = None, frame_stack: int = 4) -> np.ndarray:
    """Scores of ``num_episodes`` whole games played side by side (one per env), actions sampled from ``network``."""
    envs = make_atari_vector_env(env_id, num_episodes, episodic_life=episodic_life, frame_stack=frame_stack)
    generator = torch.Generator().manual_seed(seed)
    try:
        obs, _ = envs.reset(seed=seed)
        scores = np.full(num_episodes, np.nan)
        for _ in range(MAX_FRAMES // FRAME_SKIP + 10):  # the ALE truncates every game by then
            logits = network(torch.as_tensor(obs, dtype=torch.float32))
            actions = torch.multinomial(Categorical(logits=logits).probs, 1, generator=generator).squeeze(-1)
            obs, _, _, _, infos = envs.step(actions.numpy())
            if "_episode" in infos:
                done = infos["_episode"] & np.isnan(scores)
                scores[done] = infos["episode"]["r"][done]
            if not np.isnan(scores).any():
                break
        return scores
    finally:
        envs.close()


@torch.inference_mode()
def record_atari_video(network: nn.Module, env_id: str, folder: Path, seed: int, *,
                       episodic_life: Callable[[gym.Env], gym.Env] | None = None, frame_stack: int = 4) -> Path | None:
    """One whole game as MP4 (every emulator frame, in colour) with gymnasium's RecordVideo; None without moviepy."""
    try:
        import moviepy  # noqa: F401  (RecordVideo writes the MP4 with it)
    except ImportError as error:
        print(f"--video needs moviepy ({error}): pip install -e '.[video]'; skipping the video")
        return None
    recorder = lambda env: gym.wrappers.RecordVideo(env, str(folder), name_prefix="game",  # noqa: E731
                                                    episode_trigger=lambda _: True, disable_logger=True)
    env = make_atari_env(env_id, episodic_life=episodic_life, frame_stack=frame_stack, render_mode="rgb_array",
                         wrap_raw=recorder)
    generator = torch.Generator().manual_seed(seed)
    try:
        obs, _ = env.reset(seed=seed)
        for _ in range(MAX_FRAMES // FRAME_SKIP + 10):
            probs = Categorical(logits=network(torch.as_tensor(obs[None], dtype=torch.float32))).probs
            obs, _, terminated, truncated, info = env.step(int(torch.multinomial(probs, 1, generator=generator)))
            if "episode" in info:  # the game (not just a life) is over
                break
            if terminated or truncated:
                obs, _ = env.reset()
    finally:
        env.close()
    videos = sorted(folder.glob("*.mp4"))
    return videos[0] if videos else None
