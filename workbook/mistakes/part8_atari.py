"""Known-wrong versions of the Part 8 exercises (see workbook/mistakes/__init__.py)."""

from __future__ import annotations

from functools import partial

import torch
from torch import nn
from torch.distributions.categorical import Categorical

from solutions.part1_ppo_core import calc_clipped_surrogate_objective, calc_entropy_bonus, calc_value_function_loss
from solutions.part2_cartpole import layer_init
from solutions.part8_atari import EpisodicLife as _ReferenceLife
from solutions.part8_atari import NatureCNN as _ReferenceCNN
from workbook.mistakes import mistake

part8 = partial(mistake, "part8_atari")


# --- NatureCNN ---------------------------------------------------------------------------------

class _ConfigurableCNN(_ReferenceCNN):
    """The reference network with switches, one per mistake below."""

    scale, actor_gain, critic_gain, last_relu, own_value_trunk = 1 / 255.0, 0.01, 1.0, True, False

    def __init__(self, num_actions, frame_stack=4):
        nn.Module.__init__(self)
        self.trunk = self._trunk(frame_stack)
        if self.own_value_trunk:
            self.value_trunk = self._trunk(frame_stack)
        self.actor_head = layer_init(nn.Linear(512, num_actions), std=self.actor_gain)
        self.critic_head = layer_init(nn.Linear(512, 1), std=self.critic_gain)

    def _trunk(self, frame_stack):
        layers = [layer_init(nn.Conv2d(frame_stack, 32, 8, stride=4)), nn.ReLU(),
                  layer_init(nn.Conv2d(32, 64, 4, stride=2)), nn.ReLU(),
                  layer_init(nn.Conv2d(64, 64, 3, stride=1)), nn.ReLU(),
                  nn.Flatten(), layer_init(nn.Linear(64 * 7 * 7, 512))]
        return nn.Sequential(*layers, *([nn.ReLU()] if self.last_relu else []))

    def features(self, obs):
        return self.trunk(obs * self.scale)

    def value(self, obs):
        trunk = self.value_trunk if self.own_value_trunk else self.trunk
        return self.critic_head(trunk(obs * self.scale))

    def logits_and_value(self, obs):
        return self.forward(obs), self.value(obs)


@part8("NatureCNN", "pixels_not_scaled", "the pixels went into the trunk unscaled (0–255 instead of obs / 255)")
class CNNNotScaled(_ConfigurableCNN):
    scale = 1.0


@part8("NatureCNN", "head_gains_swapped", "the head gains were swapped (actor head 1, critic head 0.01)")
class CNNGainsSwapped(_ConfigurableCNN):
    actor_gain, critic_gain = 1.0, 0.01


@part8("NatureCNN", "no_relu_after_512", "the 512-unit layer has no ReLU after it, so the heads read a linear layer")
class CNNNoLastRelu(_ConfigurableCNN):
    last_relu = False


@part8("NatureCNN", "separate_value_trunk",
       "the critic has its own trunk: the value loss never trains the features the policy reads")
class CNNSeparateTrunks(_ConfigurableCNN):
    own_value_trunk = True


@part8("NatureCNN", "value_detached_in_logits_and_value",
       "logits_and_value detached the features before the critic head, so in the learning phase (which calls it) "
       "the value loss never trains the trunk")
class CNNDetachedValuePath(_ConfigurableCNN):
    def logits_and_value(self, obs):
        features = self.features(obs)
        return self.actor_head(features), self.critic_head(features.detach())


@part8("NatureCNN", "policy_detached_in_logits_and_value",
       "logits_and_value detached the features before the actor head, so in the learning phase the policy loss "
       "never trains the trunk")
class CNNDetachedPolicyPath(_ConfigurableCNN):
    def logits_and_value(self, obs):
        features = self.features(obs)
        return self.actor_head(features.detach()), self.critic_head(features)


@part8("NatureCNN", "value_gradient_scaled_in_logits_and_value",
       "logits_and_value halved the value's gradient into the trunk (critic head on 0.5·f + 0.5·f.detach()): the "
       "same outputs, and the trunk still learns from both heads, but not with the gradients of the separate calls")
class CNNScaledValuePath(_ConfigurableCNN):
    def logits_and_value(self, obs):
        features = self.features(obs)
        return self.actor_head(features), self.critic_head(0.5 * features + 0.5 * features.detach())


@part8("NatureCNN", "scaled_to_minus_one_one", "the pixels were scaled to [−1, 1] (obs / 127.5 − 1) instead of [0, 1]")
class CNNSymmetricScale(_ConfigurableCNN):
    def features(self, obs):
        return self.trunk(obs / 127.5 - 1.0)

    def value(self, obs):
        return self.critic_head(self.features(obs))


@part8("NatureCNN", "parts_named_otherwise",
       "the trunk and heads were stored under other names (self.body, self.policy, self.value_fn) than the docstring's "
       "self.trunk, self.actor_head and self.critic_head")
class CNNOtherNames(nn.Module):
    def __init__(self, num_actions, frame_stack=4):
        super().__init__()
        reference = _ReferenceCNN(num_actions, frame_stack)
        self.body, self.policy, self.value_fn = reference.trunk, reference.actor_head, reference.critic_head

    def features(self, obs):
        return self.body(obs / 255.0)

    def forward(self, obs):
        return self.policy(self.features(obs))

    def value(self, obs):
        return self.value_fn(self.features(obs))

    def logits_and_value(self, obs):
        hidden = self.features(obs)
        return self.policy(hidden), self.value_fn(hidden)


# --- EpisodicLife --------------------------------------------------------------------------------

class _ConfigurableLife(_ReferenceLife):
    """The reference wrapper with switches, one per mistake below."""

    always_reset = no_terminal = stale_lives = truncation_continues = ignore_noop_end = as_truncation = False
    lives_only_on_loss = drop_options = new_info = False

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.game_over = bool(terminated or (truncated and not self.truncation_continues))
        lives = info["lives"]
        if lives < self.lives and not self.no_terminal:
            if self.as_truncation:
                truncated = True
            else:
                terminated = True
        if lives < self.lives or not self.lives_only_on_loss:
            self.lives = lives
        return obs, reward, terminated, truncated, ({"lives": lives} if self.new_info else info)

    def reset(self, *, seed=None, options=None):
        options = None if self.drop_options else options
        if self.game_over or self.always_reset:
            obs, info = self.env.reset(seed=seed, options=options)
        else:
            obs, _, terminated, truncated, info = self.env.step(0)
            if (terminated or truncated) and not self.ignore_noop_end:
                obs, info = self.env.reset(seed=seed, options=options)
        if not self.stale_lives:
            self.lives = info["lives"]
        self.game_over = False
        return obs, info


@part8("EpisodicLife", "resets_game_on_life_loss",
       "every reset restarts the game, also after a lost life (gymnasium's terminal_on_life_loss)")
class LifeAlwaysResets(_ConfigurableLife):
    always_reset = True


@part8("EpisodicLife", "no_terminal_on_life_loss", "a lost life was not reported as terminated")
class LifeNoTerminal(_ConfigurableLife):
    no_terminal = True


@part8("EpisodicLife", "life_loss_as_truncation", "a lost life was reported as truncated instead of terminated")
class LifeAsTruncation(_ConfigurableLife):
    as_truncation = True


@part8("EpisodicLife", "lives_not_updated_on_reset",
       "reset did not read the lives count (a new game's full lives are never seen)")
class LifeStaleLives(_ConfigurableLife):
    stale_lives = True


@part8("EpisodicLife", "truncation_not_game_over",
       "a truncated game was not taken as over, so the next reset plays on in a finished game")
class LifeTruncationContinues(_ConfigurableLife):
    truncation_continues = True


@part8("EpisodicLife", "noop_ending_ignored", "when the NOOP after a lost life ended the game, reset did not reset it")
class LifeNoopEndIgnored(_ConfigurableLife):
    ignore_noop_end = True


@part8("EpisodicLife", "lives_updated_only_on_loss",
       "self.lives was updated only when a life was lost, so a life gained in play was never seen and the next loss "
       "went unnoticed")
class LifeUpdatedOnlyOnLoss(_ConfigurableLife):
    lives_only_on_loss = True


@part8("EpisodicLife", "reset_options_dropped", "reset passed the seed to the game but not the options")
class LifeDropsOptions(_ConfigurableLife):
    drop_options = True


@part8("EpisodicLife", "info_replaced", "step returned a new info dict holding only the lives, dropping the game's other keys")
class LifeNewInfo(_ConfigurableLife):
    new_info = True


# --- compute_atari_objective ------------------------------------------------------------------------

def _objective(network, critic, minibatch, args, *, value_sign=-1.0, detach_value=False, detach_policy=False,
               old_values=False, two_passes=False):
    if two_passes:
        logits, values = network(minibatch.obs), critic(minibatch.obs)
    else:
        features = network.features(minibatch.obs)
        logits = network.actor_head(features.detach() if detach_policy else features)
        values = network.critic_head(features.detach() if detach_value else features)
    values = minibatch.values if old_values else values.squeeze(-1)
    dist = Categorical(logits=logits)
    return (calc_clipped_surrogate_objective(dist, minibatch.actions, minibatch.advantages, minibatch.logprobs,
                                             args.clip_coef)
            + value_sign * calc_value_function_loss(values, minibatch.returns, args.vf_coef)
            + calc_entropy_bonus(dist, args.ent_coef))


@part8("compute_atari_objective", "value_gradient_detached_from_trunk",
       "the value head read detached features, so the value loss never trains the shared trunk")
def objective_value_detached(network, critic, minibatch, args):
    return _objective(network, critic, minibatch, args, detach_value=True)


@part8("compute_atari_objective", "policy_gradient_detached_from_trunk",
       "the policy head read detached features, so only the value loss trains the shared trunk")
def objective_policy_detached(network, critic, minibatch, args):
    return _objective(network, critic, minibatch, args, detach_policy=True)


@part8("compute_atari_objective", "value_loss_added", "the value loss was added (it must be subtracted)")
def objective_value_loss_added(network, critic, minibatch, args):
    return _objective(network, critic, minibatch, args, value_sign=1.0)


@part8("compute_atari_objective", "old_values_in_value_loss",
       "the value loss used the rollout's values (minibatch.values) instead of the network's fresh output")
def objective_old_values(network, critic, minibatch, args):
    return _objective(network, critic, minibatch, args, old_values=True)


@part8("compute_atari_objective", "trunk_run_twice",
       "network(obs) and critic(obs) were called separately, running the convolutions twice per minibatch")
def objective_two_passes(network, critic, minibatch, args):
    return _objective(network, critic, minibatch, args, two_passes=True)


def _hard_coded(**fixed):
    def objective(network, critic, minibatch, args):
        from dataclasses import replace
        return _objective(network, critic, minibatch, replace(args, **fixed))
    return objective


objective_clip_hard_coded = part8("compute_atari_objective", "clip_coef_hard_coded",
                                  "clip_coef was ignored (always CleanRL's Atari 0.1)")(_hard_coded(clip_coef=0.1))
objective_vf_hard_coded = part8("compute_atari_objective", "vf_coef_hard_coded",
                                "vf_coef was ignored (always 0.5)")(_hard_coded(vf_coef=0.5))
objective_ent_hard_coded = part8("compute_atari_objective", "ent_coef_hard_coded",
                                 "ent_coef was ignored (always 0.01)")(_hard_coded(ent_coef=0.01))


@part8("compute_atari_objective", "network_internals_used",
       "network.features and the heads were called by hand: in the trainer the network comes wrapped (OnePass, "
       "OnDevice), which answers only network(obs), network.value(obs) and network.logits_and_value(obs)")
def objective_features_then_heads(network, critic, minibatch, args):
    hidden = network.features(minibatch.obs)
    dist = Categorical(logits=network.actor_head(hidden))
    values = network.critic_head(hidden).view(-1)
    return (calc_clipped_surrogate_objective(dist, minibatch.actions, minibatch.advantages, minibatch.logprobs,
                                             args.clip_coef)
            - calc_value_function_loss(values, minibatch.returns, args.vf_coef)
            + calc_entropy_bonus(dist, args.ent_coef))
