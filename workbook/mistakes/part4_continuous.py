"""Known-wrong versions of the Part 4 exercises (see workbook/mistakes/__init__.py)."""

from __future__ import annotations

from functools import partial

import numpy as np
import torch
from torch import nn
from torch.distributions import Independent, Normal

from solutions.part1_ppo_core import calc_clipped_surrogate_objective, calc_entropy_bonus, calc_value_function_loss
from solutions.part2_cartpole import layer_init
from solutions.part4_continuous import ContinuousAgent as _ReferenceAgent
from solutions.part4_continuous import GaussianActor as _ReferenceActor
from solutions.part4_continuous import ObservationNormalizer as _ReferenceNormalizer
from solutions.part4_continuous import RewardScaler as _ReferenceScaler
from solutions.part4_continuous import RunningMeanStd as _ReferenceRMS
from solutions.part4_continuous import clip_action as _reference_clip
from workbook.mistakes import mistake

part4 = partial(mistake, "part4_continuous")


# --- GaussianActor ---------------------------------------------------------------------------

class _ConfigurableActor(_ReferenceActor):
    """The reference actor with switches, one per mistake below."""

    head_gain, activation = 0.01, nn.Tanh
    scale_is_variance = per_dimension = mean_detached = tanh_mean = False
    log_std_bounds = None

    def __init__(self, num_obs, action_dim, hidden_size=64, init_log_std=0.0):
        nn.Module.__init__(self)
        self.mean = nn.Sequential(layer_init(nn.Linear(num_obs, hidden_size)), self.activation(),
                                  layer_init(nn.Linear(hidden_size, hidden_size)), self.activation(),
                                  layer_init(nn.Linear(hidden_size, action_dim), std=self.head_gain))
        self.log_std = nn.Parameter(torch.full((action_dim,), float(init_log_std)))

    def forward(self, obs):
        return torch.tanh(self.mean(obs)) if self.tanh_mean else self.mean(obs)

    def dist(self, obs):
        mean = self(obs).detach() if self.mean_detached else self(obs)
        log_std = self.log_std if self.log_std_bounds is None else self.log_std.clamp(*self.log_std_bounds)
        scale = (2 * log_std if self.scale_is_variance else log_std).exp().expand_as(mean)
        return Normal(mean, scale) if self.per_dimension else Independent(Normal(mean, scale), 1)


@part4("GaussianActor", "variance_as_scale", "Normal was given the variance σ² where the standard deviation σ belongs")
class ActorVarianceAsScale(_ConfigurableActor):
    scale_is_variance = True


@part4("GaussianActor", "mean_detached_in_dist",
       "dist() detached the mean, so log π (and the whole policy loss) never trains the mean network — only log σ")
class ActorMeanDetached(_ConfigurableActor):
    mean_detached = True


@part4("GaussianActor", "log_prob_not_summed",
       "a bare Normal was returned, so log_prob and entropy are per action dimension (wrap it in Independent(…, 1))")
class ActorNotIndependent(_ConfigurableActor):
    per_dimension = True


@part4("GaussianActor", "head_gain_sqrt2", "the mean's head was initialised with gain √2 instead of 0.01")
class ActorHeadGainSqrt2(_ConfigurableActor):
    head_gain = np.sqrt(2)


@part4("GaussianActor", "mean_squashed_with_tanh",
       "the mean was squashed with tanh (μ = tanh(head(h))): the head is linear, and with its 0.01 gain the two agree "
       "only while the means are small")
class ActorTanhMean(_ConfigurableActor):
    tanh_mean = True


@part4("GaussianActor", "log_std_clamped",
       "log σ was clamped to [−5, 2] before exp (as in SAC); σ = exp(log_std) for every value")
class ActorClampedLogStd(_ConfigurableActor):
    log_std_bounds = (-5.0, 2.0)


@part4("GaussianActor", "relu_instead_of_tanh", "ReLU was used where Tanh belongs")
class ActorRelu(_ConfigurableActor):
    activation = nn.ReLU


@part4("GaussianActor", "state_dependent_log_std",
       "log σ was computed by the network from the observation instead of being one learned parameter")
class ActorStateDependentStd(nn.Module):
    def __init__(self, num_obs, action_dim, hidden_size=64, init_log_std=0.0):
        super().__init__()
        self.action_dim, self.init_log_std = action_dim, init_log_std
        self.net = nn.Sequential(layer_init(nn.Linear(num_obs, hidden_size)), nn.Tanh(),
                                 layer_init(nn.Linear(hidden_size, hidden_size)), nn.Tanh(),
                                 layer_init(nn.Linear(hidden_size, 2 * action_dim), std=0.01))

    def forward(self, obs):
        return self.net(obs)[..., : self.action_dim]

    def dist(self, obs):
        out = self.net(obs)
        mean, log_std = out[..., : self.action_dim], out[..., self.action_dim:] + self.init_log_std
        return Independent(Normal(mean, log_std.exp()), 1)


# --- clip_action -------------------------------------------------------------------------------

@part4("clip_action", "clipped_in_place",
       "the sampled tensor was clipped in place, so the memory stores the clipped action too")
def clip_in_place(actions, low, high):
    return actions.clamp_(torch.as_tensor(low), torch.as_tensor(high)).numpy()


@part4("clip_action", "squashed_with_tanh", "the action was squashed with tanh into [low, high] instead of clipped")
def clip_tanh(actions, low, high):
    return low + (np.tanh(actions.numpy()) + 1) / 2 * (high - low)


@part4("clip_action", "first_bound_for_every_dimension",
       "the first dimension's bounds (low[0], high[0]) were used for every dimension")
def clip_first_bound(actions, low, high):
    return np.clip(actions.numpy(), low[0], high[0])


@part4("clip_action", "bounds_assumed_symmetric",
       "the actions were clipped to [−high, high], as if every low were −high")
def clip_symmetric(actions, low, high):
    return _reference_clip(actions, -high, high)


@part4("clip_action", "clipped_to_unit_range", "the actions were clipped to [−1, 1] instead of the env's bounds")
def clip_unit(actions, low, high):
    return _reference_clip(actions, -np.ones_like(low), np.ones_like(high))


# --- RunningMeanStd -----------------------------------------------------------------------------

class _ConfigurableRMS(_ReferenceRMS):
    unbiased = no_cross_term = equal_weights = count_replaced = False

    def update(self, batch):
        batch = batch.double()
        batch_mean, batch_var, n_b = batch.mean(0), batch.var(0, unbiased=self.unbiased), batch.shape[0]
        delta, total = batch_mean - self.mean, self.count + n_b
        m2 = self.var * self.count + batch_var * n_b
        if not self.no_cross_term:
            m2 = m2 + delta.pow(2) * self.count * n_b / total
        self.mean = (self.mean + batch_mean) / 2 if self.equal_weights else self.mean + delta * n_b / total
        self.var = m2 / total
        self.count = n_b if self.count_replaced else total


@part4("RunningMeanStd", "unbiased_batch_variance",
       "the batch variance was the unbiased one (divide by n − 1: NaN for a batch of one) instead of the population one")
class RMSUnbiased(_ConfigurableRMS):
    unbiased = True


@part4("RunningMeanStd", "missing_cross_term", "the δ² · n_a · n_b / n term of the parallel update was left out")
class RMSNoCrossTerm(_ConfigurableRMS):
    no_cross_term = True


@part4("RunningMeanStd", "average_of_means",
       "the new mean was the plain average of the old mean and the batch mean (weight them by their counts)")
class RMSEqualWeights(_ConfigurableRMS):
    equal_weights = True


@part4("RunningMeanStd", "count_not_accumulated", "the count was set to the batch size instead of adding it up")
class RMSCountReplaced(_ConfigurableRMS):
    count_replaced = True


# --- ObservationNormalizer ------------------------------------------------------------------------

class _ConfigurableNormalizer(_ReferenceNormalizer):
    ignore_update_flag = by_variance = no_clip = clip_raw = eps_outside_sqrt = update_after = upper_only = False
    in_place = False
    fixed_epsilon = None

    def __call__(self, obs, update=True):
        out = self._normalise(obs, update)
        if self.in_place:  # the caller's tensor overwritten with the result (obs -= mean; obs /= std; ...)
            obs.copy_(out)
            return obs
        return out

    def _normalise(self, obs, update):
        if (update or self.ignore_update_flag) and not self.update_after:
            self.rms.update(obs)
        eps = self.epsilon if self.fixed_epsilon is None else self.fixed_epsilon
        x = obs.double().clamp(-self.clip, self.clip) if self.clip_raw else obs.double()
        scale = self.rms.var + eps if self.by_variance else torch.sqrt(self.rms.var + eps)
        if self.eps_outside_sqrt:
            scale = torch.sqrt(self.rms.var) + eps
        out = (x - self.rms.mean) / scale
        if update and self.update_after:
            self.rms.update(obs)
        if self.upper_only:
            return out.clamp(max=self.clip).to(obs.dtype)
        return (out if self.no_clip or self.clip_raw else out.clamp(-self.clip, self.clip)).to(obs.dtype)


@part4("ObservationNormalizer", "updates_when_frozen",
       "the statistics were updated even with update=False (they must stay frozen at evaluation)")
class NormalizerIgnoresFlag(_ConfigurableNormalizer):
    ignore_update_flag = True


@part4("ObservationNormalizer", "divides_by_variance", "the observations were divided by the variance, not the std")
class NormalizerByVariance(_ConfigurableNormalizer):
    by_variance = True


@part4("ObservationNormalizer", "no_observation_clipping", "the normalised observations were not clipped to ±clip")
class NormalizerNoClip(_ConfigurableNormalizer):
    no_clip = True


@part4("ObservationNormalizer", "eps_outside_sqrt",
       "ε was added to the standard deviation, (obs − mean) / (sqrt(var) + ε), instead of inside the square root: "
       "for a feature that barely moves (var ~1e-9, below ε = 1e-8) it is scaled ~3× too much")
class NormalizerEpsOutsideSqrt(_ConfigurableNormalizer):
    eps_outside_sqrt = True


@part4("ObservationNormalizer", "epsilon_hard_coded",
       "ε was hard-coded to 1e-8 instead of the normaliser's epsilon")
class NormalizerFixedEpsilon(_ConfigurableNormalizer):
    fixed_epsilon = 1e-8


@part4("ObservationNormalizer", "normalised_before_updating",
       "the observations were normalised with the old statistics and only then folded into them (update first)")
class NormalizerUpdatesAfter(_ConfigurableNormalizer):
    update_after = True


@part4("ObservationNormalizer", "clipped_above_only",
       "the normalised observations were clipped at +clip only (clamp(max=clip)), not to ±clip")
class NormalizerClipsAboveOnly(_ConfigurableNormalizer):
    upper_only = True


@part4("ObservationNormalizer", "clipped_before_normalising",
       "the raw observations were clipped to ±clip before normalising, instead of the normalised ones")
class NormalizerClipsRaw(_ConfigurableNormalizer):
    clip_raw = True


@part4("ObservationNormalizer", "obs_normalised_in_place",
       "the observations were normalised in place (obs -= mean; obs /= std): the caller's tensor changed")
class NormalizerInPlace(_ConfigurableNormalizer):
    in_place = True


# --- RewardScaler ------------------------------------------------------------------------------

class _ConfigurableScaler(_ReferenceScaler):
    stats_of_rewards = never_reset = subtract_mean = no_clip = eps_outside_sqrt = upper_only = False
    in_place = False
    fixed_epsilon = None

    def __call__(self, rewards, reset_step):
        out = self._scale(rewards, reset_step)
        if self.in_place:  # the caller's rewards overwritten with the scaled ones (rewards /= std; ...)
            rewards.copy_(out)
            return rewards
        return out

    def _scale(self, rewards, reset_step):
        r = rewards.double()
        kept = ~reset_step
        self.returns = self.gamma * self.returns + r if self.never_reset else torch.where(
            reset_step, 0.0, self.gamma * self.returns + r)
        if kept.any():
            self.return_rms.update(r[kept] if self.stats_of_rewards else self.returns[kept])
        centred = r - self.return_rms.mean if self.subtract_mean else r
        eps = self.epsilon if self.fixed_epsilon is None else self.fixed_epsilon
        std = torch.sqrt(self.return_rms.var) + eps if self.eps_outside_sqrt else torch.sqrt(self.return_rms.var + eps)
        scaled = centred / std
        if self.upper_only:
            return scaled.clamp(max=self.clip).float()
        return (scaled if self.no_clip else scaled.clamp(-self.clip, self.clip)).float()


@part4("RewardScaler", "std_of_rewards",
       "the rewards were divided by the running std of the rewards instead of the discounted return")
class ScalerStdOfRewards(_ConfigurableScaler):
    stats_of_rewards = True


@part4("RewardScaler", "return_not_reset", "the discounted return was not reset to 0 where an episode ended")
class ScalerNeverResets(_ConfigurableScaler):
    never_reset = True


@part4("RewardScaler", "mean_subtracted",
       "the return's running mean was subtracted from the rewards (only divide: a shift changes the task)")
class ScalerSubtractsMean(_ConfigurableScaler):
    subtract_mean = True


@part4("RewardScaler", "eps_outside_sqrt",
       "ε was added to the standard deviation, r / (sqrt(Var[G]) + ε), instead of inside the square root: when the "
       "returns barely vary (Var[G] ~1e-9, below ε = 1e-8) the rewards are scaled ~3× too much")
class ScalerEpsOutsideSqrt(_ConfigurableScaler):
    eps_outside_sqrt = True


@part4("RewardScaler", "epsilon_hard_coded", "ε was hard-coded to 1e-8 instead of the scaler's epsilon")
class ScalerFixedEpsilon(_ConfigurableScaler):
    fixed_epsilon = 1e-8


@part4("RewardScaler", "clipped_above_only",
       "the scaled rewards were clipped at +clip only (clamp(max=clip)): negative rewards go unclipped")
class ScalerClipsAboveOnly(_ConfigurableScaler):
    upper_only = True


@part4("RewardScaler", "no_reward_clipping", "the scaled rewards were not clipped to ±clip")
class ScalerNoClip(_ConfigurableScaler):
    no_clip = True


@part4("RewardScaler", "rewards_scaled_in_place",
       "the rewards were scaled in place (rewards /= std): the caller's tensor changed")
class ScalerInPlace(_ConfigurableScaler):
    in_place = True


# --- ContinuousAgent.play_step -----------------------------------------------------------------

class _ConfigurableAgent(_ReferenceAgent):
    """The reference play_step with switches, one per mistake below."""

    store_clipped = logprob_of_clipped = send_unclipped = mean_action = freeze_normaliser = False
    bootstrap_before_scaling = scaler_gets_new_flags = bootstrap_terminated_too = with_grad = False
    clip_after_bootstrap = False
    fixed_gamma = None

    def play_step(self):
        obs, dones = self.next_obs, self.next_done
        with torch.enable_grad() if self.with_grad else torch.inference_mode():
            dist = self.actor.dist(obs)
            actions = dist.mean if self.mean_action else dist.sample()
            clipped = torch.as_tensor(_reference_clip(actions, self.action_low, self.action_high))
            logprobs = dist.log_prob(clipped if self.logprob_of_clipped else actions)
            values = self.critic(obs).squeeze(-1)
        sent = actions.numpy() if self.send_unclipped else clipped.numpy()
        next_obs, rewards, terminated, truncated, infos = self.envs.step(sent)
        next_obs = self.obs_normalizer(torch.as_tensor(next_obs, dtype=torch.float32),
                                       update=not self.freeze_normaliser)
        rewards = torch.as_tensor(rewards, dtype=torch.float32)
        terminated = torch.as_tensor(terminated, dtype=torch.bool)
        truncated = torch.as_tensor(truncated, dtype=torch.bool)
        cut_short = truncated if self.bootstrap_terminated_too else truncated & ~terminated
        with torch.inference_mode():
            gamma = self.gamma if self.fixed_gamma is None else self.fixed_gamma
            bootstrap = torch.where(cut_short, gamma * self.critic(next_obs).squeeze(-1), 0.0)
        flags = terminated | truncated if self.scaler_gets_new_flags else dones
        if self.bootstrap_before_scaling:
            rewards = self.reward_scaler(rewards + bootstrap, flags)
        else:
            rewards = self.reward_scaler(rewards, flags) + bootstrap
        if self.clip_after_bootstrap:
            rewards = rewards.clamp(-self.reward_scaler.clip, self.reward_scaler.clip)
        stored = clipped if (self.store_clipped or self.logprob_of_clipped) else actions
        self.memory.add(obs, stored, logprobs, values, rewards, dones)
        self.next_obs, self.next_done = next_obs, terminated | truncated
        self.step += self.envs.num_envs
        return infos


@part4("ContinuousAgent", "stores_clipped_actions",
       "the clipped action was stored in the memory, with the log-prob of the unclipped sample")
class AgentStoresClipped(_ConfigurableAgent):
    store_clipped = True


@part4("ContinuousAgent", "logprob_of_clipped_action",
       "the clipped action was stored and scored (its log-prob is not that of anything the policy sampled)")
class AgentScoresClipped(_ConfigurableAgent):
    logprob_of_clipped = True


@part4("ContinuousAgent", "sends_unclipped_actions", "the unclipped sample was sent to the environment")
class AgentSendsUnclipped(_ConfigurableAgent):
    send_unclipped = True


@part4("ContinuousAgent", "mean_actions", "the rollout acted with the mean action instead of sampling the policy")
class AgentMeanActions(_ConfigurableAgent):
    mean_action = True


@part4("ContinuousAgent", "normaliser_frozen_in_rollout",
       "the rollout normalised with update=False, so the observation statistics never learn")
class AgentFrozenNormaliser(_ConfigurableAgent):
    freeze_normaliser = True


@part4("ContinuousAgent", "bootstrap_before_scaling",
       "γ·V(final observation) was added before the reward scaler, which then scales and clips the critic's value")
class AgentBootstrapsBeforeScaling(_ConfigurableAgent):
    bootstrap_before_scaling = True


@part4("ContinuousAgent", "clips_the_bootstrapped_reward",
       "the scaled reward plus γ·V(final observation) was clipped to ±reward_clip, so the clip also cuts the "
       "bootstrap (clip the scaled reward, then add γ·V)")
class AgentClipsBootstrap(_ConfigurableAgent):
    clip_after_bootstrap = True


@part4("ContinuousAgent", "scaler_given_new_done_flags",
       "the reward scaler got the new done flags (terminated | truncated) instead of the acted-on observation's")
class AgentScalerNewFlags(_ConfigurableAgent):
    scaler_gets_new_flags = True


@part4("ContinuousAgent", "bootstraps_terminated_and_truncated",
       "an episode that was terminated and truncated on the same step was bootstrapped (termination wins: no future)")
class AgentBootstrapsTerminated(_ConfigurableAgent):
    bootstrap_terminated_too = True


@part4("ContinuousAgent", "gamma_hard_coded",
       "the truncation bootstrap used a hard-coded γ = 0.99 instead of the agent's gamma")
class AgentFixedGamma(_ConfigurableAgent):
    fixed_gamma = 0.99


@part4("ContinuousAgent", "stores_autograd_graph",
       "the policy and critic ran with gradients on, so the memory's log-probs and values carry autograd graphs "
       "(run them under torch.inference_mode() or no_grad)")
class AgentWithGrad(_ConfigurableAgent):
    with_grad = True


# --- compute_continuous_objective -----------------------------------------------------------------

def _objective(actor, critic, minibatch, args, *, value_sign=-1.0, entropy_sign=1.0, old_values=False,
               bare_normal=False, vf_coef=None):
    dist = Normal(actor(minibatch.obs), actor.log_std.exp()) if bare_normal else actor.dist(minibatch.obs)
    values = minibatch.values if old_values else critic(minibatch.obs).squeeze(-1)
    return (calc_clipped_surrogate_objective(dist, minibatch.actions, minibatch.advantages, minibatch.logprobs,
                                             args.clip_coef)
            + value_sign * calc_value_function_loss(values, minibatch.returns, vf_coef or args.vf_coef)
            + entropy_sign * calc_entropy_bonus(dist, args.ent_coef))


@part4("compute_continuous_objective", "value_loss_added", "the value loss was added (it must be subtracted)")
def objective_value_loss_added(actor, critic, minibatch, args):
    return _objective(actor, critic, minibatch, args, value_sign=1.0)


@part4("compute_continuous_objective", "entropy_subtracted", "the entropy bonus was subtracted instead of added")
def objective_entropy_subtracted(actor, critic, minibatch, args):
    return _objective(actor, critic, minibatch, args, entropy_sign=-1.0)


@part4("compute_continuous_objective", "old_values_in_value_loss",
       "the value loss used the rollout's values (minibatch.values) instead of the critic's fresh output")
def objective_old_values(actor, critic, minibatch, args):
    return _objective(actor, critic, minibatch, args, old_values=True)


@part4("compute_continuous_objective", "bare_normal_per_dimension",
       "a bare Normal(actor(obs), σ) was built instead of actor.dist(obs): per-dimension log-probs, which with one "
       "action dimension broadcast against the advantages into a square matrix")
def objective_bare_normal(actor, critic, minibatch, args):
    return _objective(actor, critic, minibatch, args, bare_normal=True)


@part4("compute_continuous_objective", "vf_coef_hard_coded",
       "the value loss was weighted by a hard-coded 0.5 instead of args.vf_coef")
def objective_vf_coef_hard_coded(actor, critic, minibatch, args):
    return _objective(actor, critic, minibatch, args, vf_coef=0.5)
