"""Atari environments for Part 8: the real Arcade Learning Environment, preprocessed as in Huang et al.

ale-py (≥ 0.12) ships every ROM inside its wheel, so nothing is downloaded: :func:`register_ale`
registers its ids with gymnasium, and a missing package or ROM is one :class:`AtariUnavailable`
line. :func:`make_atari_env` builds one environment, innermost first:

    gym.make(env_id, frameskip=1, max_num_frames_per_episode=108_000)     the raw ALE, 60 frames a second
    RecordEpisodeStatistics      the game's real score and length in frames (before any clipping or life split)
    AtariPreprocessing           noop reset (up to 30 random no-ops), frame skip 4 with a max over the
                                 last two frames, grey, 84 × 84           (gymnasium's own wrapper)
    episodic_life (optional)     losing a life ends the *training* episode (Part 8's EpisodicLife)
    FireReset                    press FIRE after every reset, in games that need it (Breakout)
    TransformReward(np.sign)     reward clipping to {−1, 0, +1}            (gymnasium's own wrapper)
    FrameStackObservation(4)     the last 4 frames, stacked first: observations (4, 84, 84) uint8

and :func:`make_atari_vector_env` puts ``num_envs`` of them in a ``SyncVectorEnv`` with NEXT_STEP
autoreset, the mode Part 2's memory is written for. Episode returns come from the innermost
``RecordEpisodeStatistics``: a whole game, in the game's own points.
"""

from __future__ import annotations

from typing import Any, Callable

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

FRAME_SKIP = 4
"""Emulator frames per agent step (the frame skip of Huang et al. and of every Atari benchmark)."""
MAX_FRAMES = 108_000
"""Frames before an episode is truncated: 30 minutes of play (Machado et al. 2018's cap)."""
FIRE = 1
"""The ALE's action index of FIRE (in every game's minimal action set that has it)."""

RANDOM_RETURN = {"Breakout": 1.7, "Pong": -20.7, "SpaceInvaders": 148.0, "Seaquest": 68.4, "BeamRider": 363.9,
                 "Qbert": 163.9, "Enduro": 0.0}
"""A uniformly random policy's mean score per game (Mnih et al. 2015, Extended Data Table 2)."""


class AtariUnavailable(Exception):
    """ale-py (or its ROM for the game) is not there: one line saying so; nothing is downloaded."""


def register_ale() -> None:
    """Register ale-py's environments with gymnasium (idempotent); AtariUnavailable without ale-py."""
    try:
        import ale_py
    except ImportError as error:
        raise AtariUnavailable(f"the Atari environments need ale-py ({error}): pip install 'ale-py>=0.12,<0.13'") from None
    gym.register_envs(ale_py)


def game_name(env_id: str) -> str:
    """'BreakoutNoFrameskip-v4' and 'ALE/Breakout-v5' → 'Breakout'."""
    return env_id.split("/")[-1].split("-")[0].removesuffix("NoFrameskip").removesuffix("Deterministic")


def random_return(env_id: str) -> float | None:
    return RANDOM_RETURN.get(game_name(env_id))


class FireReset(gym.Wrapper):
    """Press FIRE once after every reset (Huang et al.'s ``FireResetEnv``).

    Breakout serves the ball only after FIRE: without it a fresh agent can spend thousands of
    steps waiting for a ball that never comes, and learn nothing from them. The no-op reset
    inside (``AtariPreprocessing``) and the episodic-life reset both end here, so every
    episode — every life, with episodic life — starts in play. Wrap only games whose action
    set has FIRE (:func:`needs_fire`).
    """

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        obs, info = self.env.reset(seed=seed, options=options)
        obs, _, terminated, truncated, info = self.env.step(FIRE)
        if terminated or truncated:  # the press ended the game (never in practice): start a fresh one
            obs, info = self.env.reset(options=options)
        return obs, info


def needs_fire(env: gym.Env) -> bool:
    return "FIRE" in env.unwrapped.get_action_meanings()


def make_atari_env(env_id: str, *, episodic_life: Callable[[gym.Env], gym.Env] | None = None,
                   clip_rewards: bool = True, frame_stack: int = 4, noop_max: int = 30,
                   render_mode: str | None = None, wrap_raw: Callable[[gym.Env], gym.Env] | None = None) -> gym.Env:
    """One preprocessed Atari environment (see the module docstring for the wrappers, in order).

    ``episodic_life`` wraps the preprocessed env (Part 8's ``EpisodicLife``; None leaves lives
    alone); ``wrap_raw`` wraps the raw ALE env first (the video recorder, so it films every frame).
    """
    register_ale()
    spec = gym.spec(env_id)  # gymnasium's error for an unknown id
    kwargs: dict[str, Any] = {"max_num_frames_per_episode": MAX_FRAMES}
    if spec.kwargs.get("frameskip", 1) != 1:  # ALE/…-v5 skips 4 frames itself; AtariPreprocessing must do it
        kwargs["frameskip"] = 1
    env = gym.make(env_id, render_mode=render_mode, **kwargs)
    if wrap_raw is not None:
        env = wrap_raw(env)
    env = gym.wrappers.RecordEpisodeStatistics(env)
    env = gym.wrappers.AtariPreprocessing(env, noop_max=noop_max, frame_skip=FRAME_SKIP, screen_size=84,
                                          terminal_on_life_loss=False, grayscale_obs=True, scale_obs=False)
    if episodic_life is not None:
        env = episodic_life(env)
    if needs_fire(env):
        env = FireReset(env)
    if clip_rewards:
        env = gym.wrappers.TransformReward(env, lambda r: float(np.sign(r)))
    return gym.wrappers.FrameStackObservation(env, frame_stack)


def make_atari_vector_env(env_id: str, num_envs: int, **kwargs: Any) -> gym.vector.SyncVectorEnv:
    """``num_envs`` of :func:`make_atari_env` in one ``SyncVectorEnv`` with NEXT_STEP autoreset.

    ``infos["episode"]`` (mask ``infos["_episode"]``) reports each finished *game*: Part 2's
    ``finished_episodes`` reads it as for CartPole.
    """
    if num_envs <= 0:
        raise ValueError(f"num_envs must be positive, got {num_envs}")
    return gym.vector.SyncVectorEnv([lambda: make_atari_env(env_id, **kwargs) for _ in range(num_envs)],
                                    autoreset_mode=AutoresetMode.NEXT_STEP)


def check_atari_env(env_id: str) -> str | None:
    """None if ``env_id`` is an Atari game this part can play, else one line saying why not."""
    try:
        register_ale()
    except AtariUnavailable as error:
        return str(error)
    try:
        spec = gym.spec(env_id)
    except gym.error.Error as error:
        return f"{env_id!r} is not a gymnasium environment ({str(error).splitlines()[0]})"
    if "ale_py" not in str(spec.entry_point):
        return f"{env_id} is not an Atari game (try BreakoutNoFrameskip-v4 or ALE/Pong-v5)"
    try:  # the ROM ships in ale-py's wheel; a broken install is reported, never downloaded
        gym.make(env_id).close()
    except Exception as error:  # noqa: BLE001 - whatever the ALE says, in one line
        return f"cannot start {env_id} ({type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''})"
    return None
