"""Stand-ins for the five ``stable_baselines3.common.atari_wrappers`` that CleanRL's ppo_atari.py imports.

stable-baselines3 pins gymnasium below the version this workbook uses, so ``run_ppo.py`` installs
this module under that name instead of installing SB3. Each class does what SB3's does (the
Atari preprocessing of Mnih et al. 2015 as SB3 2.x implements it), written here for gymnasium 1.x:

    NoopResetEnv(env, noop_max)   after a reset, 1..noop_max random no-ops (drawn from the env's np_random)
    MaxAndSkipEnv(env, skip)      repeat the action ``skip`` frames, sum the rewards, max over the last two frames
    EpisodicLifeEnv(env)          a lost life is terminated; reset after it takes one NOOP instead of a new game
    FireResetEnv(env)             after a reset, press FIRE (action 1) then action 2, as SB3 does
    ClipRewardEnv(env)            the sign of the reward
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np


class NoopResetEnv(gym.Wrapper):
    def __init__(self, env: gym.Env, noop_max: int = 30) -> None:
        super().__init__(env)
        self.noop_max = noop_max

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        for _ in range(int(self.unwrapped.np_random.integers(1, self.noop_max + 1))):
            obs, _, terminated, truncated, info = self.env.step(0)
            if terminated or truncated:
                obs, info = self.env.reset(**kwargs)
        return obs, info


class MaxAndSkipEnv(gym.Wrapper):
    def __init__(self, env: gym.Env, skip: int = 4) -> None:
        super().__init__(env)
        self.skip = skip
        self.frames = np.zeros((2, *env.observation_space.shape), dtype=env.observation_space.dtype)

    def step(self, action):
        total, terminated, truncated, info = 0.0, False, False, {}
        for i in range(self.skip):
            obs, reward, terminated, truncated, info = self.env.step(action)
            if i >= self.skip - 2:
                self.frames[i - (self.skip - 2)] = obs
            total += float(reward)
            if terminated or truncated:
                break
        return self.frames.max(axis=0), total, terminated, truncated, info


class EpisodicLifeEnv(gym.Wrapper):
    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.lives, self.was_real_done = 0, True

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.was_real_done = terminated or truncated
        lives = self.env.unwrapped.ale.lives()
        if 0 < lives < self.lives:
            terminated = True
        self.lives = lives
        return obs, reward, terminated, truncated, info

    def reset(self, **kwargs):
        if self.was_real_done:
            obs, info = self.env.reset(**kwargs)
        else:
            obs, _, terminated, truncated, info = self.env.step(0)
            if terminated or truncated:
                obs, info = self.env.reset(**kwargs)
        self.lives = self.env.unwrapped.ale.lives()
        return obs, info


class FireResetEnv(gym.Wrapper):
    def reset(self, **kwargs):
        self.env.reset(**kwargs)
        for action in (1, 2):
            obs, _, terminated, truncated, info = self.env.step(action)
            if terminated or truncated:
                self.env.reset(**kwargs)
        return obs, info


class ClipRewardEnv(gym.RewardWrapper):
    def reward(self, reward):
        return np.sign(float(reward))
