"""Known-wrong versions of the Part 2 exercises (see workbook/mistakes/__init__.py)."""

from __future__ import annotations

from functools import partial

import numpy as np
import torch
from torch import nn
from torch.distributions.categorical import Categorical

from solutions.part1_ppo_core import calc_clipped_surrogate_objective, calc_entropy_bonus, calc_value_function_loss
from solutions.part2_cartpole import PPOAgent as _ReferenceAgent
from solutions.part2_cartpole import layer_init
from workbook.mistakes import mistake

part2 = partial(mistake, "part2_cartpole")


# --- get_actor_and_critic ---------------------------------------------------------------

def _mlp(num_obs, num_out, hidden_size, head_std, *, activation=nn.Tanh, init=True):
    def linear(n_in, n_out, std=np.sqrt(2)):
        layer = nn.Linear(n_in, n_out)
        return layer_init(layer, std) if init else layer

    return nn.Sequential(linear(num_obs, hidden_size), activation(), linear(hidden_size, hidden_size), activation(),
                         linear(hidden_size, num_out, head_std))


@part2("get_actor_and_critic", "actor_head_gain_sqrt2",
       "the actor's head was initialised with gain √2 like the hidden layers, instead of 0.01")
def networks_actor_head_sqrt2(num_obs, num_actions, hidden_size=64):
    return _mlp(num_obs, num_actions, hidden_size, np.sqrt(2)), _mlp(num_obs, 1, hidden_size, 1.0)


@part2("get_actor_and_critic", "head_gains_swapped",
       "the two head gains were swapped (actor head 1, critic head 0.01)")
def networks_heads_swapped(num_obs, num_actions, hidden_size=64):
    return _mlp(num_obs, num_actions, hidden_size, 1.0), _mlp(num_obs, 1, hidden_size, 0.01)


@part2("get_actor_and_critic", "relu_instead_of_tanh", "ReLU was used where Tanh belongs")
def networks_relu(num_obs, num_actions, hidden_size=64):
    return (_mlp(num_obs, num_actions, hidden_size, 0.01, activation=nn.ReLU),
            _mlp(num_obs, 1, hidden_size, 1.0, activation=nn.ReLU))


@part2("get_actor_and_critic", "pytorch_default_init",
       "the layers kept PyTorch's default initialisation (layer_init was not applied)")
def networks_default_init(num_obs, num_actions, hidden_size=64):
    return (_mlp(num_obs, num_actions, hidden_size, 0.01, init=False), _mlp(num_obs, 1, hidden_size, 1.0, init=False))


@part2("get_actor_and_critic", "shared_hidden_layers",
       "the actor and the critic share their hidden layers (they should be two separate networks)")
def networks_shared_body(num_obs, num_actions, hidden_size=64):
    body = _mlp(num_obs, hidden_size, hidden_size, np.sqrt(2))[:4]
    return (nn.Sequential(*body, layer_init(nn.Linear(hidden_size, num_actions), 0.01)),
            nn.Sequential(*body, layer_init(nn.Linear(hidden_size, 1), 1.0)))


@part2("get_actor_and_critic", "softmax_on_actor_head",
       "the actor ends in a Softmax (it must output logits: Categorical(logits=...) normalises them itself)")
def networks_softmax_head(num_obs, num_actions, hidden_size=64):
    return (nn.Sequential(*_mlp(num_obs, num_actions, hidden_size, 0.01), nn.Softmax(dim=-1)),
            _mlp(num_obs, 1, hidden_size, 1.0))


@part2("get_actor_and_critic", "hidden_size_ignored", "the hidden layers were 64 wide whatever hidden_size was passed")
def networks_hidden_size_ignored(num_obs, num_actions, hidden_size=64):
    return _mlp(num_obs, num_actions, 64, 0.01), _mlp(num_obs, 1, 64, 1.0)


# --- PPOAgent.play_step --------------------------------------------------------------------

class _ConfigurableAgent(_ReferenceAgent):
    """The reference play_step with switches, one per mistake below."""

    store_next_obs = store_next_done = value_of_next_obs = no_inference = greedy = False
    bootstrap_truncated = True
    bootstrap_terminated = False
    bootstrap_ignores_termination = bootstrap_with_grad = False
    fixed_gamma = None
    bootstrap_from_obs = next_done_terminated_only = count_calls = float64_rewards = return_nothing = False

    def play_step(self):
        obs, dones = self.next_obs, self.next_done
        context = torch.enable_grad() if self.no_inference else torch.inference_mode()
        with context:
            logits = self.actor(obs)
            dist = Categorical(logits=logits)
            actions = logits.argmax(-1) if self.greedy else dist.sample()
            logprobs = dist.log_prob(actions)
            values = self.critic(obs).squeeze(-1)
        next_obs, rewards, terminated, truncated, infos = self.envs.step(actions.numpy())
        next_obs = torch.as_tensor(next_obs, dtype=torch.float32)
        rewards = torch.as_tensor(rewards, dtype=torch.float64 if self.float64_rewards else torch.float32)
        terminated = torch.as_tensor(terminated, dtype=torch.bool)
        truncated = torch.as_tensor(truncated, dtype=torch.bool)
        bootstrap = torch.zeros_like(terminated)
        if self.bootstrap_truncated:
            bootstrap |= truncated if self.bootstrap_ignores_termination else truncated & ~terminated
        if self.bootstrap_terminated:
            bootstrap |= terminated
        gamma = self.gamma if self.fixed_gamma is None else self.fixed_gamma
        if bootstrap.any():
            with torch.enable_grad() if self.bootstrap_with_grad else context:
                final_obs = obs if self.bootstrap_from_obs else next_obs
                rewards = rewards + bootstrap * gamma * self.critic(final_obs).squeeze(-1)
        if self.value_of_next_obs:
            with context:
                values = self.critic(next_obs).squeeze(-1)
        next_done = terminated if self.next_done_terminated_only else terminated | truncated
        self.memory.add(next_obs if self.store_next_obs else obs, actions, logprobs, values, rewards,
                        next_done if self.store_next_done else dones)
        self.next_obs, self.next_done = next_obs, next_done
        self.step += 1 if self.count_calls else self.envs.num_envs
        return None if self.return_nothing else infos


@part2("PPOAgent", "stores_next_obs",
       "the observation returned by the step (next_obs) was stored instead of the one the agent acted on")
class AgentStoresNextObs(_ConfigurableAgent):
    store_next_obs = True


@part2("PPOAgent", "stores_next_done",
       "the new done flag (next_done) was stored with the step, where the acted-on observation's flag belongs")
class AgentStoresNextDone(_ConfigurableAgent):
    store_next_done = True


@part2("PPOAgent", "values_of_next_obs",
       "the values were taken from the next observation instead of the one the agent acted on")
class AgentValuesOfNextObs(_ConfigurableAgent):
    value_of_next_obs = True


@part2("PPOAgent", "no_inference_mode",
       "the rollout ran with autograd on (no torch.inference_mode()), so stored values and log-probs carry graphs")
class AgentWithoutInferenceMode(_ConfigurableAgent):
    no_inference = True


@part2("PPOAgent", "greedy_actions", "the actions were the argmax of the logits instead of samples from the policy")
class AgentGreedy(_ConfigurableAgent):
    greedy = True


@part2("PPOAgent", "no_truncation_bootstrap",
       "a time-limit truncation was treated like a termination (no γ·V(final observation) added to the reward)")
class AgentNoTruncationBootstrap(_ConfigurableAgent):
    bootstrap_truncated = False


@part2("PPOAgent", "bootstraps_terminations",
       "terminated episodes were bootstrapped too (γ·V(final observation) added where the episode really ended)")
class AgentBootstrapsTerminations(_ConfigurableAgent):
    bootstrap_terminated = True


@part2("PPOAgent", "bootstraps_truncated_and_terminated",
       "an episode that was terminated and truncated on the same step was bootstrapped (termination wins: no future)")
class AgentBootstrapsBothEnds(_ConfigurableAgent):
    bootstrap_ignores_termination = True


@part2("PPOAgent", "bootstrap_value_with_grad",
       "the truncation bootstrap γ·V(final observation) was computed with autograd on, so the stored reward keeps a graph")
class AgentBootstrapWithGrad(_ConfigurableAgent):
    bootstrap_with_grad = True


@part2("PPOAgent", "gamma_hardcoded", "the truncation bootstrap used a hard-coded γ = 0.99 instead of self.gamma")
class AgentFixedGamma(_ConfigurableAgent):
    fixed_gamma = 0.99


@part2("PPOAgent", "bootstrap_from_acted_on_obs",
       "the truncation bootstrap used V of the observation acted on, where V(final observation) = V(next_obs) belongs")
class AgentBootstrapFromObs(_ConfigurableAgent):
    bootstrap_from_obs = True


@part2("PPOAgent", "next_done_ignores_truncation",
       "next_done was set to terminated only (a truncation ends the episode too: terminated | truncated)")
class AgentNextDoneTerminatedOnly(_ConfigurableAgent):
    next_done_terminated_only = True


@part2("PPOAgent", "step_counts_calls", "self.step grew by 1 per play_step instead of by num_envs (every env stepped)")
class AgentCountsCalls(_ConfigurableAgent):
    count_calls = True


@part2("PPOAgent", "rewards_not_float32",
       "the rewards were stored as the environment's float64 (convert them to float32)")
class AgentFloat64Rewards(_ConfigurableAgent):
    float64_rewards = True


@part2("PPOAgent", "infos_not_returned",
       "play_step returned nothing instead of the step's infos (the trainer reads finished episodes from them)")
class AgentReturnsNothing(_ConfigurableAgent):
    return_nothing = True


# --- compute_ppo_objective -------------------------------------------------------------------

def _objective(actor, critic, minibatch, args, *, value_sign=-1.0, entropy_sign=1.0, old_values=False,
               returns_as_advantages=False, clip_coef=None, vf_coef=None, ent_coef=None, detach_actor=False,
               detach_critic=False):
    logits = actor(minibatch.obs)
    dist = Categorical(logits=logits.detach() if detach_actor else logits)
    values = minibatch.values if old_values else critic(minibatch.obs).squeeze(-1)
    values = values.detach() if detach_critic else values
    advantages = minibatch.returns if returns_as_advantages else minibatch.advantages
    clip_coef = args.clip_coef if clip_coef is None else clip_coef
    vf_coef = args.vf_coef if vf_coef is None else vf_coef
    return (calc_clipped_surrogate_objective(dist, minibatch.actions, advantages, minibatch.logprobs, clip_coef)
            + value_sign * calc_value_function_loss(values, minibatch.returns, vf_coef)
            + entropy_sign * calc_entropy_bonus(dist, args.ent_coef if ent_coef is None else ent_coef))


@part2("compute_ppo_objective", "value_loss_added",
       "the value loss was added to the objective (it must be subtracted: we maximise)")
def objective_value_loss_added(actor, critic, minibatch, args):
    return _objective(actor, critic, minibatch, args, value_sign=1.0)


@part2("compute_ppo_objective", "entropy_subtracted", "the entropy bonus was subtracted instead of added")
def objective_entropy_subtracted(actor, critic, minibatch, args):
    return _objective(actor, critic, minibatch, args, entropy_sign=-1.0)


@part2("compute_ppo_objective", "old_values_in_value_loss",
       "the value loss used the rollout's values (minibatch.values) instead of the critic's fresh output")
def objective_old_values(actor, critic, minibatch, args):
    return _objective(actor, critic, minibatch, args, old_values=True)


@part2("compute_ppo_objective", "returns_as_advantages",
       "the returns were passed to the surrogate where the advantages belong")
def objective_returns_as_advantages(actor, critic, minibatch, args):
    return _objective(actor, critic, minibatch, args, returns_as_advantages=True)


@part2("compute_ppo_objective", "clip_coef_hardcoded", "a hard-coded clip coefficient 0.2 was used instead of args.clip_coef")
def objective_fixed_clip(actor, critic, minibatch, args):
    return _objective(actor, critic, minibatch, args, clip_coef=0.2)


@part2("compute_ppo_objective", "vf_coef_hardcoded", "a hard-coded value coefficient 0.5 was used instead of args.vf_coef")
def objective_fixed_vf(actor, critic, minibatch, args):
    return _objective(actor, critic, minibatch, args, vf_coef=0.5)


@part2("compute_ppo_objective", "ent_coef_hardcoded", "a hard-coded entropy coefficient 0.01 was used instead of args.ent_coef")
def objective_fixed_ent(actor, critic, minibatch, args):
    return _objective(actor, critic, minibatch, args, ent_coef=0.01)


@part2("compute_ppo_objective", "actor_output_detached",
       "the actor's logits were detached, so the surrogate and the entropy bonus send no gradient to the actor")
def objective_actor_detached(actor, critic, minibatch, args):
    return _objective(actor, critic, minibatch, args, detach_actor=True)


@part2("compute_ppo_objective", "critic_output_detached",
       "the critic's values were detached, so the value loss sends no gradient to the critic")
def objective_critic_detached(actor, critic, minibatch, args):
    return _objective(actor, critic, minibatch, args, detach_critic=True)


@part2("compute_ppo_objective", "advantages_normalised_in_the_minibatch",
       "the minibatch's advantages were normalised in place (the caller's minibatch changed; normalising is "
       "calc_clipped_surrogate_objective's job, on a copy)")
def objective_normalises_in_place(actor, critic, minibatch, args):
    advantages = minibatch.advantages
    advantages.sub_(advantages.mean()).div_(advantages.std() + 1e-8)
    return _objective(actor, critic, minibatch, args)


# --- learning_phase ---------------------------------------------------------------------------

def _learning_phase(actor, critic, minibatches, optimizer, scheduler, args, objective=None, *, zero_grad=True,
                    clip="before", clip_params="all", scheduler_per_minibatch=False, scheduler_step=True,
                    max_norm=None, sign=1.0, scheduler_first=False, scheduler_with_last=False):
    parameters = [*actor.parameters(), *critic.parameters()] if clip_params == "all" else list(actor.parameters())
    max_norm = args.max_grad_norm if max_norm is None else max_norm
    if scheduler_first:
        scheduler.step()
    for i, minibatch in enumerate(minibatches):
        if zero_grad:
            optimizer.zero_grad()
        # _objective is untyped: the minibatch may come from a module copy
        (sign * (objective or _objective)(actor, critic, minibatch, args)).backward()
        if clip == "before":
            nn.utils.clip_grad_norm_(parameters, max_norm)
        optimizer.step()
        if clip == "after":
            nn.utils.clip_grad_norm_(parameters, max_norm)
        if scheduler_per_minibatch or (scheduler_with_last and i == len(minibatches) - 1):
            scheduler.step()
    if scheduler_step and not (scheduler_per_minibatch or scheduler_first or scheduler_with_last):
        scheduler.step()


@part2("learning_phase", "no_zero_grad",
       "the gradients were never zeroed, so each step used the sum of all previous minibatches' gradients")
def learning_phase_no_zero_grad(actor, critic, minibatches, optimizer, scheduler, args, objective=None):
    _learning_phase(actor, critic, minibatches, optimizer, scheduler, args, objective, zero_grad=False)


@part2("learning_phase", "no_gradient_clipping", "the gradient norm was not clipped to max_grad_norm")
def learning_phase_no_clipping(actor, critic, minibatches, optimizer, scheduler, args, objective=None):
    _learning_phase(actor, critic, minibatches, optimizer, scheduler, args, objective, clip=None)


@part2("learning_phase", "clipped_after_optimizer_step",
       "the gradient norm was clipped after optimizer.step(), when it no longer changes the update")
def learning_phase_clip_after_step(actor, critic, minibatches, optimizer, scheduler, args, objective=None):
    _learning_phase(actor, critic, minibatches, optimizer, scheduler, args, objective, clip="after")


@part2("learning_phase", "clipped_actor_only",
       "only the actor's gradients were clipped (clip the global norm over actor and critic together)")
def learning_phase_clip_actor_only(actor, critic, minibatches, optimizer, scheduler, args, objective=None):
    _learning_phase(actor, critic, minibatches, optimizer, scheduler, args, objective, clip_params="actor")


@part2("learning_phase", "scheduler_stepped_per_minibatch",
       "the scheduler was stepped once per minibatch instead of once per learning phase")
def learning_phase_scheduler_per_minibatch(actor, critic, minibatches, optimizer, scheduler, args, objective=None):
    _learning_phase(actor, critic, minibatches, optimizer, scheduler, args, objective, scheduler_per_minibatch=True)


@part2("learning_phase", "scheduler_never_stepped", "the scheduler was never stepped (the learning rate never decays)")
def learning_phase_no_scheduler(actor, critic, minibatches, optimizer, scheduler, args, objective=None):
    _learning_phase(actor, critic, minibatches, optimizer, scheduler, args, objective, scheduler_step=False)


@part2("learning_phase", "ignores_objective_argument",
       "the objective passed in was ignored (compute_ppo_objective was called regardless), so Part 4's Gaussian "
       "objective never reaches the optimizer")
def learning_phase_ignores_objective(actor, critic, minibatches, optimizer, scheduler, args, objective=None):
    _learning_phase(actor, critic, minibatches, optimizer, scheduler, args)


@part2("learning_phase", "max_grad_norm_hardcoded", "the gradient norm was clipped to a hard-coded 0.5 instead of "
       "args.max_grad_norm")
def learning_phase_fixed_max_norm(actor, critic, minibatches, optimizer, scheduler, args, objective=None):
    _learning_phase(actor, critic, minibatches, optimizer, scheduler, args, objective, max_norm=0.5)


@part2("learning_phase", "minimised_the_objective",
       "backward() was called on −objective: the optimizer already maximises, so the step went downhill")
def learning_phase_minimises(actor, critic, minibatches, optimizer, scheduler, args, objective=None):
    _learning_phase(actor, critic, minibatches, optimizer, scheduler, args, objective, sign=-1.0)


@part2("learning_phase", "scheduler_stepped_before_the_minibatches",
       "the scheduler was stepped before the minibatches, so this phase already used the next phase's learning rate")
def learning_phase_scheduler_first(actor, critic, minibatches, optimizer, scheduler, args, objective=None):
    _learning_phase(actor, critic, minibatches, optimizer, scheduler, args, objective, scheduler_first=True)


@part2("learning_phase", "scheduler_stepped_inside_the_loop",
       "the scheduler was stepped inside the loop, at the last minibatch: a phase with no minibatches (every "
       "transition a reset step) never counted")
def learning_phase_scheduler_with_last(actor, critic, minibatches, optimizer, scheduler, args, objective=None):
    _learning_phase(actor, critic, minibatches, optimizer, scheduler, args, objective, scheduler_with_last=True)
