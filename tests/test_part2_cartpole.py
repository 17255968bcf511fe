"""Tests for Part 2 (exercises/part2_cartpole.py).

Run: ``pytest tests/test_part2_cartpole.py`` (your code) or add ``--impl=solutions``.
Each exercise is compared with the reference on the same seeded inputs (networks, environments,
minibatches), and two hand-made episodes check how the rollout ends an episode. Your Part 2
uses your Part 1: a test that reaches an unfinished Part 1 function says "needs ...".
When these pass, run the probe environments: ``pytest tests/test_cartpole_probes.py``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from workbook.cartpole import STEP_COUNTER_ID, finished_episodes, make_vector_env
from workbook.checking import WrongAnswer, check_exercise, describe_network, explain, known_mistake, matching_mistakes

PART = "part2_cartpole"
POINTS = {
    "get_actor_and_critic": 2,
    "PPOAgent": 4,
    "compute_ppo_objective": 2,
    "learning_phase": 3,
}
GAMMA = 0.99


def mistake(exercise: str, name: str) -> str:
    return known_mistake(PART, exercise, name)


def reference_networks(ref, seed: int = 0, num_obs: int = 4, num_actions: int = 2):
    """The reference's networks, seeded: inputs for the exercises that *use* networks."""
    torch.manual_seed(seed)
    return ref.get_actor_and_critic(num_obs, num_actions)


def flat_parameters(net: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in net.parameters()])


# --- get_actor_and_critic ------------------------------------------------------------------

@pytest.mark.exercise("get_actor_and_critic")
@pytest.mark.parametrize("num_obs,num_actions,hidden_size", [(4, 2, 64), (3, 5, 32), (5, 3, None)])
def test_networks_have_the_right_layers_and_initialisation(impl, ref, num_obs, num_actions, hidden_size):
    # hidden_size None: the argument left out (the default, 64).
    def run(fn):
        torch.manual_seed(0)
        actor, critic = fn(num_obs, num_actions) if hidden_size is None else fn(num_obs, num_actions, hidden_size)
        shared = {id(p) for p in actor.parameters()} & {id(p) for p in critic.parameters()}
        return {"actor": describe_network(actor), "critic": describe_network(critic),
                "actor and critic share parameters": bool(shared)}

    check_exercise(impl, ref, "get_actor_and_critic", run, rtol=1e-4, atol=1e-6,
                   call=f"get_actor_and_critic({num_obs}, {num_actions}"
                        + (") — the default hidden_size=64" if hidden_size is None else f", hidden_size={hidden_size})"))


@pytest.mark.exercise("get_actor_and_critic")
def test_initial_policy_is_almost_uniform(impl):
    torch.manual_seed(0)
    actor, critic = impl.get_actor_and_critic(4, 2)
    obs = torch.randn(64, 4, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        logits, values = actor(obs), critic(obs)
    call = "get_actor_and_critic(4, 2)"
    if logits.shape != (64, 2) or values.shape != (64, 1):
        raise WrongAnswer(explain(call, f"on 64 observations: actor output {tuple(logits.shape)} (expected (64, 2)), "
                                        f"critic output {tuple(values.shape)} (expected (64, 1))"))
    probs = logits.softmax(-1)
    if (probs - 0.5).abs().max() > 0.05:
        raise WrongAnswer(explain(call, f"the initial policy is far from uniform: probabilities up to {probs.max():.3f} "
                                        "(a tiny actor head makes every action equally likely at first)",
                                  [mistake("get_actor_and_critic", "actor_head_gain_sqrt2")]))


# --- PPOAgent.play_step --------------------------------------------------------------------

def record_rollout(impl, ref, agent_cls, *, env_id: str, num_envs: int, steps: int, actor=None, critic=None,
                   seed: int = 0, gamma: float = GAMMA, **env_kwargs) -> dict:
    """Run ``steps`` play_steps of ``agent_cls`` from a seeded start; return the memory and the agent's state."""
    if actor is None:
        actor, critic = reference_networks(ref, seed)
    envs = make_vector_env(env_id, num_envs, **env_kwargs)
    memory = impl.ReplayMemory()
    agent = agent_cls(envs, actor, critic, memory, gamma, seed=seed)
    torch.manual_seed(seed + 1)
    for _ in range(steps):
        agent.play_step()
    envs.close()
    return memory.stacked() | {"next_obs": agent.next_obs, "next_done": agent.next_done, "step": agent.step,
                               "_agent": agent}


def without_private(record: dict) -> dict:
    return {k: v for k, v in record.items() if not k.startswith("_")}


@pytest.mark.exercise("PPOAgent")
@pytest.mark.parametrize("num_envs,max_episode_steps", [(4, 500), (3, 12)])
def test_play_step_matches_reference_on_cartpole(impl, ref, num_envs, max_episode_steps):
    # With a 12-step time limit some episodes are truncated, others terminate before.
    def run(cls):
        return without_private(record_rollout(impl, ref, cls, env_id="CartPole-v1", num_envs=num_envs, steps=40,
                                              max_episode_steps=max_episode_steps))

    check_exercise(impl, ref, "PPOAgent", run,
                   call=f"PPOAgent(CartPole-v1 × {num_envs}, max_episode_steps={max_episode_steps}, seeded reference "
                        f"networks).play_step() × 40, then memory.stacked() and the agent's next_obs/next_done/step",
                   cache_key=f"cartpole rollout {num_envs} {max_episode_steps}")


@pytest.mark.exercise("PPOAgent")
def test_rollout_stores_no_autograd_graphs(impl, ref):
    record = record_rollout(impl, ref, impl.PPOAgent, env_id="CartPole-v1", num_envs=2, steps=3)
    carrying = [k for k in ("logprobs", "values", "rewards") if record[k].requires_grad]
    if carrying:
        raise WrongAnswer(explain("PPOAgent.play_step() × 3", f"stored {', '.join(carrying)} require grad: the rollout "
                                  "ran with autograd on", [mistake("PPOAgent", "no_inference_mode")]))


@pytest.mark.exercise("PPOAgent")
def test_play_step_returns_the_steps_infos(impl, ref):
    # PPOTrainer reads the finished episodes from what play_step returns: StepCounter with a
    # 3-step limit finishes an episode (return 1 + 2 + 3, length 3) every 4 steps.
    def run(cls):
        actor, critic = step_counter_networks()
        envs = make_vector_env(STEP_COUNTER_ID, 1, max_episode_steps=3)
        agent = cls(envs, actor, critic, impl.ReplayMemory(), GAMMA, seed=0)
        infos = [agent.play_step() for _ in range(8)]
        envs.close()
        if not all(isinstance(info, dict) for info in infos):
            return {"play_step returned": [type(info).__name__ for info in infos]}
        return {"finished episodes, from the returned infos": [finished_episodes(info) for info in infos]}

    check_exercise(impl, ref, "PPOAgent", run,
                   call="PPOAgent(StepCounter, max_episode_steps=3).play_step() × 8, each return value read by "
                        "finished_episodes")


def step_counter_networks():
    """Actor with zero weights (uniform policy; the env ignores actions) and V(k) = 10 + k."""
    actor, critic = nn.Linear(1, 2), nn.Linear(1, 1)
    with torch.no_grad():
        actor.weight.zero_(), actor.bias.zero_()
        critic.weight.fill_(1.0), critic.bias.fill_(10.0)
    return actor, critic


def step_counter_rollout(impl, ref, cls, gamma: float = GAMMA, **env_kwargs) -> dict:
    actor, critic = step_counter_networks()
    record = record_rollout(impl, ref, cls, env_id=STEP_COUNTER_ID, num_envs=1, steps=6, actor=actor, critic=critic,
                            gamma=gamma, **env_kwargs)
    # Discounted return of the first step, from the memory, with the reference GAE at λ = 1.
    advantages = ref.compute_advantages(critic(record["next_obs"]).detach().squeeze(-1), record["next_done"],
                                        record["rewards"].detach(), record["values"], record["dones"], gamma, 1.0)
    return {"obs": record["obs"].flatten(), "values": record["values"].flatten(), "rewards": record["rewards"].flatten(),
            "dones": record["dones"].flatten(), "return of the first step": (advantages + record["values"])[0, 0]}


def check_step_counter(impl, ref, expected: dict, call: str, **env_kwargs) -> None:
    from workbook.checking import compare

    def run(cls):
        return step_counter_rollout(impl, ref, cls, **env_kwargs)

    got = run(impl.PPOAgent)
    problem = compare(got, expected, rtol=1e-5, atol=1e-5)
    if problem:
        raise WrongAnswer(explain(call, problem, matching_mistakes(PART, "PPOAgent", run, got, rtol=1e-5, atol=1e-5)))


@pytest.mark.exercise("PPOAgent")
def test_terminated_episode_is_not_bootstrapped(impl, ref):
    # The episode terminates on its 3rd step (rewards 1, 2, 3); step 4 is the env's reset step
    # (observation 3 is the final one, reward 0, dones = True); then a new episode starts.
    # Nothing follows a termination, so the first step's return is 1 + 2γ + 3γ².
    expected = {
        "obs": torch.tensor([0.0, 1, 2, 3, 0, 1]),
        "values": torch.tensor([10.0, 11, 12, 13, 10, 11]),
        "rewards": torch.tensor([1.0, 2, 3, 0, 1, 2]),
        "dones": torch.tensor([False, False, False, True, False, False]),
        "return of the first step": torch.tensor(1 + 2 * GAMMA + 3 * GAMMA**2),
    }
    check_step_counter(impl, ref, expected, "PPOAgent(StepCounter(terminate_at=3), V(k) = 10 + k).play_step() × 6",
                       terminate_at=3)


@pytest.mark.exercise("PPOAgent")
def test_truncated_episode_bootstraps_from_the_final_observation(impl, ref):
    # Same rewards, but the episode is cut by a 3-step time limit: the task had a future, so
    # the truncated step's reward becomes 3 + γ·V(3) = 3 + 13γ, and the first step's return
    # is 1 + 2γ + γ²(3 + 13γ).
    expected = {
        "obs": torch.tensor([0.0, 1, 2, 3, 0, 1]),
        "values": torch.tensor([10.0, 11, 12, 13, 10, 11]),
        "rewards": torch.tensor([1.0, 2, 3 + 13 * GAMMA, 0, 1, 2]),
        "dones": torch.tensor([False, False, False, True, False, False]),
        "return of the first step": torch.tensor(1 + 2 * GAMMA + GAMMA**2 * (3 + 13 * GAMMA)),
    }
    check_step_counter(impl, ref, expected, "PPOAgent(StepCounter, max_episode_steps=3, V(k) = 10 + k).play_step() × 6",
                       max_episode_steps=3)


# --- compute_ppo_objective -----------------------------------------------------------------

def make_minibatch(module, seed: int, size: int = 32):
    g = torch.Generator().manual_seed(seed)
    values = torch.randn(size, generator=g)
    advantages = 0.5 + 2.0 * torch.randn(size, generator=g)
    return module.ReplayMinibatch(
        obs=torch.randn(size, 4, generator=g),
        actions=torch.randint(0, 2, (size,), generator=g),
        logprobs=np.log(0.5) + 0.3 * torch.randn(size, generator=g),  # some ratios beyond 1 ± ε
        values=values,
        advantages=advantages,
        returns=advantages + values,
    )


def gradient(net: nn.Module) -> torch.Tensor:
    return torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).flatten() for p in net.parameters()])


@pytest.mark.exercise("compute_ppo_objective")
@pytest.mark.parametrize("seed,ent_coef,clip_coef,vf_coef", [(0, 0.01, 0.2, 0.5), (1, 0.1, 0.2, 0.5), (2, 0.0, 0.1, 0.25),
                                                             (3, 0.05, 0.3, 1.0)])
def test_ppo_objective_and_its_gradients_match_reference(impl, ref, seed, ent_coef, clip_coef, vf_coef):
    def run(fn):
        actor, critic = reference_networks(ref, seed)
        args = impl.PPOArgs(ent_coef=ent_coef, clip_coef=clip_coef, vf_coef=vf_coef)
        minibatch = make_minibatch(impl, seed)
        before = {k: v.clone() for k, v in vars(minibatch).items()}
        objective = fn(actor, critic, minibatch, args)
        if objective.requires_grad:
            objective.backward()
        changed = sorted(k for k, v in before.items() if not torch.equal(getattr(minibatch, k), v))
        return {"objective": objective.detach(), "gradient w.r.t. the actor": gradient(actor),
                "gradient w.r.t. the critic": gradient(critic), "minibatch fields changed by the call": changed}

    check_exercise(impl, ref, "compute_ppo_objective", run,
                   call=f"compute_ppo_objective(actor, critic, minibatch of 32, PPOArgs(ent_coef={ent_coef}, "
                        f"clip_coef={clip_coef}, vf_coef={vf_coef})), then backward()")


# --- learning_phase ------------------------------------------------------------------------

@pytest.mark.exercise("learning_phase")
@pytest.mark.parametrize("seed,max_grad_norm", [(0, 0.1), (1, 0.3)])
def test_learning_phase_matches_reference(impl, ref, seed, max_grad_norm):
    def run(fn):
        actor, critic = reference_networks(ref, seed)
        optimizer, scheduler = ref.make_optimizer(actor, critic, total_phases=20, initial_lr=1e-2)
        minibatches = [make_minibatch(impl, 10 * seed + i, size=16) for i in range(4)]
        fn(actor, critic, minibatches, optimizer, scheduler, impl.PPOArgs(max_grad_norm=max_grad_norm))
        return {"actor parameters after": flat_parameters(actor), "critic parameters after": flat_parameters(critic),
                "learning rate after": optimizer.param_groups[0]["lr"], "scheduler steps": scheduler.n_step_calls}

    check_exercise(impl, ref, "learning_phase", run, rtol=1e-4, atol=1e-5,
                   call=f"learning_phase(actor, critic, 4 minibatches of 16, Adam(lr=1e-2), scheduler over 20 phases, "
                        f"PPOArgs(max_grad_norm={max_grad_norm}))", cache_key=f"learning phase {seed} {max_grad_norm}")


@pytest.mark.exercise("learning_phase")
def test_learning_phase_without_minibatches_still_steps_the_scheduler(impl, ref):
    # get_minibatches drops reset steps and minibatches of fewer than 2: a phase may have none.
    # The scheduler counts phases, so it still steps once; no parameter moves.
    def run(fn):
        actor, critic = reference_networks(ref, 4)
        optimizer, scheduler = ref.make_optimizer(actor, critic, total_phases=4, initial_lr=1e-2)
        fn(actor, critic, [], optimizer, scheduler, impl.PPOArgs())
        return {"actor parameters after": flat_parameters(actor), "critic parameters after": flat_parameters(critic),
                "learning rate after": optimizer.param_groups[0]["lr"], "scheduler steps": scheduler.n_step_calls}

    check_exercise(impl, ref, "learning_phase", run,
                   call="learning_phase(actor, critic, [] (no minibatches), Adam(lr=1e-2), scheduler over 4 phases, "
                        "PPOArgs())")


def critic_only_objective(actor, critic, minibatch, args):
    """A stand-in objective (Part 4 passes its own): −MSE of the critic, the actor gets no gradient."""
    return -(critic(minibatch.obs).squeeze(-1) - minibatch.returns).pow(2).mean()


@pytest.mark.exercise("learning_phase")
def test_learning_phase_maximises_the_objective_it_is_given(impl, ref):
    def run(fn):
        actor, critic = reference_networks(ref, 3)
        optimizer, scheduler = ref.make_optimizer(actor, critic, total_phases=5, initial_lr=1e-2)
        minibatches = [make_minibatch(impl, 30 + i, size=16) for i in range(3)]
        fn(actor, critic, minibatches, optimizer, scheduler, impl.PPOArgs(), objective=critic_only_objective)
        return {"actor parameters after": flat_parameters(actor), "critic parameters after": flat_parameters(critic)}

    check_exercise(impl, ref, "learning_phase", run, rtol=1e-4, atol=1e-5,
                   call="learning_phase(actor, critic, 3 minibatches of 16, Adam(lr=1e-2), scheduler, PPOArgs(), "
                        "objective=−(critic's MSE)): the objective passed in is the one to maximise")


# --- given code: PPOArgs, ReplayMemory, episode statistics (not graded) ---------------------

def test_ppo_args_derives_sizes(ref):
    args = ref.PPOArgs(num_envs=4, num_steps_per_rollout=128, total_timesteps=10_000, num_minibatches=4)
    assert (args.batch_size, args.minibatch_size, args.total_phases) == (512, 128, 19)


@pytest.mark.parametrize("kwargs,message", [
    (dict(num_envs=3, num_steps_per_rollout=5, num_minibatches=4), "not a multiple"),
    (dict(total_timesteps=100), "less than one rollout"),
    (dict(learning_rate=0.0), "learning_rate must be positive"),
    (dict(num_envs=0), "num_envs must be a positive integer"),
    (dict(gamma=1.5), "gamma"),
    (dict(ent_coef=-0.1), "ent_coef must be non-negative"),
])
def test_ppo_args_rejects_inconsistent_settings(ref, kwargs, message):
    with pytest.raises(ValueError, match=message):
        ref.PPOArgs(**kwargs)


def test_minibatches_skip_reset_steps_and_cover_the_rest(ref):
    memory = ref.ReplayMemory()
    g = torch.Generator().manual_seed(0)
    num_steps, num_envs = 8, 4
    dones = torch.rand(num_steps, num_envs, generator=g) < 0.2
    for t in range(num_steps):
        memory.add(torch.full((num_envs, 1), float(t)) + torch.arange(num_envs)[:, None] / 10,
                   torch.zeros(num_envs, dtype=torch.long), torch.zeros(num_envs), torch.zeros(num_envs),
                   torch.ones(num_envs), dones[t])
    args = ref.PPOArgs(num_envs=num_envs, num_steps_per_rollout=num_steps, total_timesteps=64, num_minibatches=2,
                       batches_per_learning_phase=3)
    minibatches = memory.get_minibatches(torch.zeros(num_envs), torch.zeros(num_envs, dtype=torch.bool), args,
                                         np.random.default_rng(0))
    keys = torch.cat([mb.obs.flatten() for mb in minibatches]).mul(10).round().long()
    valid = (torch.arange(num_steps)[:, None] * 10 + torch.arange(num_envs))[~dones]
    assert sorted(keys.tolist()) == sorted(valid.tolist() * 3), "each non-reset step once per epoch, reset steps never"


def test_replay_memory_rejects_a_step_of_another_shape(ref):
    memory = ref.ReplayMemory()
    row = (torch.zeros(2, 4), torch.zeros(2, dtype=torch.long), torch.zeros(2), torch.zeros(2), torch.zeros(2),
           torch.zeros(2, dtype=torch.bool))
    memory.add(*row)
    with pytest.raises(ValueError, match="obs has shape"):
        memory.add(torch.zeros(2, 1, 4), *row[1:])


def test_episode_statistics_ignore_the_reset_step():
    envs = make_vector_env(STEP_COUNTER_ID, 1, max_episode_steps=3)
    envs.reset(seed=0)
    episodes = []
    for _ in range(8):  # 3 steps, reset step, 3 steps, reset step
        infos = envs.step(np.array([0]))[-1]
        if "_episode" in infos:
            episodes.append((float(infos["episode"]["r"][0]), int(infos["episode"]["l"][0])))
    assert episodes == [(6.0, 3), (6.0, 3)]


@pytest.mark.exercise("PPOAgent")
def test_truncation_bootstrap_uses_the_agents_gamma(impl, ref):
    # As above with γ = 0.9: the truncated step's reward is 3 + 0.9 · 13.
    g = 0.9
    expected = {
        "obs": torch.tensor([0.0, 1, 2, 3, 0, 1]),
        "values": torch.tensor([10.0, 11, 12, 13, 10, 11]),
        "rewards": torch.tensor([1.0, 2, 3 + 13 * g, 0, 1, 2]),
        "dones": torch.tensor([False, False, False, True, False, False]),
        "return of the first step": torch.tensor(1 + 2 * g + g**2 * (3 + 13 * g)),
    }
    check_step_counter(impl, ref, expected, "PPOAgent(StepCounter, max_episode_steps=3, V(k) = 10 + k, gamma=0.9)"
                       ".play_step() × 6", max_episode_steps=3, gamma=g)


@pytest.mark.exercise("PPOAgent")
def test_terminated_and_truncated_on_the_same_step_is_not_bootstrapped(impl, ref):
    # terminate_at=3 and a 3-step time limit: gymnasium reports both on step 3. The episode
    # really ended (termination wins), so nothing is bootstrapped: as in the terminated case.
    expected = {
        "obs": torch.tensor([0.0, 1, 2, 3, 0, 1]),
        "values": torch.tensor([10.0, 11, 12, 13, 10, 11]),
        "rewards": torch.tensor([1.0, 2, 3, 0, 1, 2]),
        "dones": torch.tensor([False, False, False, True, False, False]),
        "return of the first step": torch.tensor(1 + 2 * GAMMA + 3 * GAMMA**2),
    }
    check_step_counter(impl, ref, expected, "PPOAgent(StepCounter(terminate_at=3), max_episode_steps=3, V(k) = 10 + k)"
                       ".play_step() × 6", terminate_at=3, max_episode_steps=3)


@pytest.mark.exercise("PPOAgent")
def test_truncation_bootstrap_stores_no_autograd_graph(impl, ref):
    actor, critic = step_counter_networks()
    record = record_rollout(impl, ref, impl.PPOAgent, env_id=STEP_COUNTER_ID, num_envs=1, steps=6, actor=actor,
                            critic=critic, max_episode_steps=3)
    carrying = [k for k in ("obs", "logprobs", "values", "rewards") if record[k].requires_grad]
    if carrying:
        raise WrongAnswer(explain("PPOAgent(StepCounter, max_episode_steps=3).play_step() × 6",
                                  f"stored {', '.join(carrying)} require grad after a truncation: the bootstrap "
                                  "value was computed with autograd on", [mistake("PPOAgent", "bootstrap_value_with_grad")]))
