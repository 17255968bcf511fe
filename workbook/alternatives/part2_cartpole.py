"""Correct alternatives to the Part 2 exercises (see workbook/alternatives/__init__.py)."""

from __future__ import annotations

import itertools
from functools import partial

import numpy as np
import torch
from torch import nn
from torch.distributions.categorical import Categorical

from solutions.part1_ppo_core import calc_clipped_surrogate_objective, calc_entropy_bonus, calc_value_function_loss
from solutions.part2_cartpole import PPOAgent as _ReferenceAgent
from solutions.part2_cartpole import compute_ppo_objective as _reference_objective
from workbook.alternatives import alternative

part2 = partial(alternative, "part2_cartpole")


@part2("get_actor_and_critic", "critic_first_from_a_layer_list",
       "the critic is built before the actor, each from a list of (in, out, gain) with nn.init called directly")
def networks_from_specs(num_obs, num_actions, hidden_size=64):
    def mlp(out_size, head_gain):
        layers = []
        specs = [(num_obs, hidden_size, np.sqrt(2)), (hidden_size, hidden_size, np.sqrt(2)), (hidden_size, out_size, head_gain)]
        for i, (n_in, n_out, gain) in enumerate(specs):
            linear = nn.Linear(n_in, n_out)
            nn.init.orthogonal_(linear.weight, gain=gain)
            nn.init.zeros_(linear.bias)
            layers.append(linear)
            if i < len(specs) - 1:
                layers.append(nn.Tanh())
        return nn.Sequential(*layers)

    critic = mlp(1, 1.0)
    actor = mlp(num_actions, 0.01)
    return actor, critic


class AgentWithProbs(_ReferenceAgent):
    def play_step(self):
        acted_on, acted_done = self.next_obs, self.next_done
        with torch.inference_mode():
            values = self.critic(acted_on).view(-1)
            dist = Categorical(probs=torch.softmax(self.actor(acted_on), dim=-1))
            actions = dist.sample()
            logprobs = dist.log_prob(actions)
        obs, rewards, terminated, truncated, infos = self.envs.step(actions.cpu().numpy())
        next_obs = torch.tensor(obs, dtype=torch.float32)
        terminated, truncated = torch.tensor(terminated), torch.tensor(truncated)
        with torch.inference_mode():
            # Every env's final value, used only where the episode was cut by the time limit.
            bootstrap = self.gamma * self.critic(next_obs).view(-1)
            rewards = torch.tensor(rewards, dtype=torch.float32) + torch.where(truncated & ~terminated, bootstrap, 0.0)
        rewards = rewards.clone()  # out of inference mode, a plain tensor like the others
        self.memory.add(acted_on, actions.long(), logprobs, values, rewards, acted_done)
        self.step += self.envs.num_envs
        self.next_obs, self.next_done = next_obs, torch.logical_or(terminated, truncated)
        return infos


part2("PPOAgent", "probs_and_where",
      "Categorical(probs=softmax) instead of logits=, the critic evaluated before the actor, and the truncation "
      "bootstrap added with torch.where over every environment")(AgentWithProbs)


@part2("compute_ppo_objective", "critic_first_terms_reordered",
       "the critic's values first (.view(-1)), the terms summed in another order")
def objective_reordered(actor, critic, minibatch, args):
    new_values = critic(minibatch.obs).view(-1)
    value_loss = calc_value_function_loss(new_values, minibatch.returns, args.vf_coef)
    dist = Categorical(logits=actor(minibatch.obs))
    entropy = calc_entropy_bonus(dist, args.ent_coef)
    surrogate = calc_clipped_surrogate_objective(dist, minibatch.actions, minibatch.advantages, minibatch.logprobs,
                                                 args.clip_coef)
    return entropy - value_loss + surrogate


@part2("learning_phase", "zero_grad_after_step",
       "gradients zeroed once before the loop and again after each step; the clipped parameters chained lazily")
def learning_phase_zero_after(actor, critic, minibatches, optimizer, scheduler, args, objective=None):
    objective_fn = _reference_objective if objective is None else objective
    optimizer.zero_grad()
    for minibatch in minibatches:
        objective_fn(actor, critic, minibatch, args).backward()
        nn.utils.clip_grad_norm_(itertools.chain(actor.parameters(), critic.parameters()), max_norm=args.max_grad_norm)
        optimizer.step()
        optimizer.zero_grad()
    scheduler.step()


@part2("get_actor_and_critic", "named_layers_in_an_ordered_dict",
       "one helper builds both networks as nn.Sequential(OrderedDict(...)) with named layers")
def networks_named_layers(num_obs, num_actions, hidden_size=64):
    from collections import OrderedDict

    from solutions.part2_cartpole import layer_init

    def mlp(out_size, head_gain):
        return nn.Sequential(OrderedDict(
            fc1=layer_init(nn.Linear(num_obs, hidden_size)), act1=nn.Tanh(),
            fc2=layer_init(nn.Linear(hidden_size, hidden_size)), act2=nn.Tanh(),
            head=layer_init(nn.Linear(hidden_size, out_size), std=head_gain)))

    return mlp(num_actions, 0.01), mlp(1, 1.0)


class AgentMaskedBootstrap(_ReferenceAgent):
    def play_step(self):
        obs, dones = self.next_obs, self.next_done
        with torch.inference_mode():
            dist = Categorical(logits=self.actor(obs))
            actions = dist.sample()
            logprobs = dist.log_prob(actions)
            values = self.critic(obs)[:, 0]
        next_obs, rewards, terminated, truncated, infos = self.envs.step(actions.numpy())
        next_obs = torch.from_numpy(np.asarray(next_obs, dtype=np.float32))
        terminated = torch.from_numpy(np.asarray(terminated, dtype=bool))
        truncated = torch.from_numpy(np.asarray(truncated, dtype=bool))
        with torch.no_grad():  # the bootstrap of every env, masked to the truncated-only ones
            final_values = self.critic(next_obs)[:, 0]
        cut_short = (truncated & ~terminated).float()
        rewards = torch.from_numpy(np.asarray(rewards, dtype=np.float32)) + self.gamma * final_values * cut_short
        self.memory.add(obs, actions, logprobs, values, rewards, dones)
        self.next_obs, self.next_done = next_obs, terminated | truncated
        self.step += len(actions)
        return infos


part2("PPOAgent", "no_grad_masked_bootstrap",
      "the truncation bootstrap of every environment under torch.no_grad(), multiplied by a float mask; numpy "
      "conversions through torch.from_numpy; values read as column 0")(AgentMaskedBootstrap)


@part2("compute_ppo_objective", "negated_loss", "a loss −L^CLIP + c₁·L^VF − c₂·S built first, then negated")
def objective_negated_loss(actor, critic, minibatch, args):
    dist = Categorical(logits=actor(minibatch.obs))
    loss = (-calc_clipped_surrogate_objective(dist, minibatch.actions, minibatch.advantages, minibatch.logprobs,
                                              args.clip_coef)
            + calc_value_function_loss(critic(minibatch.obs)[:, 0], minibatch.returns, args.vf_coef)
            - calc_entropy_bonus(dist, args.ent_coef))
    return -loss


@part2("learning_phase", "optimizer_param_groups",
       "each network zeroed with set_to_none=False; the clipped parameters read from the optimizer's param groups")
def learning_phase_param_groups(actor, critic, minibatches, optimizer, scheduler, args, objective=None):
    parameters = [p for group in optimizer.param_groups for p in group["params"]]
    for minibatch in minibatches:
        actor.zero_grad(set_to_none=False)
        critic.zero_grad(set_to_none=False)
        (objective or _reference_objective)(actor, critic, minibatch, args).backward()
        nn.utils.clip_grad_norm_(parameters, max_norm=args.max_grad_norm)
        optimizer.step()
    scheduler.step()
