"""Probe environments: train your whole Part 2 agent briefly on five tiny tasks with known answers.

Run: ``pytest tests/test_cartpole_probes.py`` (your code) or add ``--impl=solutions``.
Not graded — the exercise tests do that — but when CartPole will not learn, these say where
to look: each probe isolates one part of the agent (see workbook/cartpole/envs.py). Run them
in order; the first failure is the one to fix. About a second each.
"""

from __future__ import annotations

import torch

from workbook.cartpole import PROBE_IDS
from workbook.promises import earlier_part_in_traceback

PART = "part2_cartpole"
GAMMA = 0.99
TOLERANCE = 0.1


def train_on_probe(impl, probe: int):
    """Train the agent for 32 short phases; return (V, π(action 1)) at observations −1, 0, +1."""
    args = impl.PPOArgs(env_id=PROBE_IDS[probe - 1], num_envs=8, num_steps_per_rollout=16, total_timesteps=4096,
                        learning_rate=3e-3, ent_coef=0.0, gamma=GAMMA, seed=1)
    trainer = impl.PPOTrainer(args)
    try:
        trainer.train()
    except Exception as error:  # noqa: BLE001 — an error raised inside Part 1 is reported as Part 1's
        where = earlier_part_in_traceback(error, PART)
        if where:
            raise AssertionError(where) from None
        raise
    obs = torch.tensor([[-1.0], [0.0], [1.0]])
    with torch.no_grad():
        values = trainer.critic(obs).squeeze(-1)
        p_action_1 = trainer.actor(obs).softmax(-1)[:, 1]
    return dict(zip((-1, 0, 1), values.tolist())), dict(zip((-1, 0, 1), p_action_1.tolist()))


def check(got: dict, expected: dict, what: str, isolates: str, tolerance: float = TOLERANCE) -> None:
    wrong = {x: round(got[x], 3) for x in expected if abs(got[x] - expected[x]) > tolerance}
    assert not wrong, (f"{what}: expected {expected}, got {wrong} (tolerance {tolerance}).\n"
                       f"This probe isolates {isolates}")


def test_probe1_constant_reward(impl):
    values, _ = train_on_probe(impl, 1)
    check(values, {0: 1.0}, "V(s) with a constant reward of +1",
          "the critic's regression: the value loss, its sign in the objective (subtract it), returns = "
          "advantages + values, and that the optimizer steps the critic's parameters.")


def test_probe2_reward_equals_observation(impl):
    values, _ = train_on_probe(impl, 2)
    check(values, {-1: -1.0, 1: 1.0}, "V(s) when the reward equals the observation",
          "the critic's use of the observation: the observation stored for each step (obs, not next_obs) and "
          "the flattening of (step, env) into one batch.")


def test_probe3_delayed_reward_is_discounted(impl):
    values, _ = train_on_probe(impl, 3)
    check(values, {0: GAMMA, 1: 1.0}, "V(s) one step before (γ) and at the rewarding step (1)",
          "discounting and bootstrapping across steps: GAE, and which step's done flag is stored (done, not "
          "next_done), and that each step is stored with the observation it acted on.", tolerance=0.05)


def test_probe4_reward_depends_on_action(impl):
    values, p_action_1 = train_on_probe(impl, 4)
    check(p_action_1, {0: 1.0}, "π(action 1) when action 1 pays +1 and action 0 pays −1",
          "the actor: the clipped surrogate's sign and ratio, the stored log-probabilities of the actions "
          "taken, sampling (not argmax), and the advantages.")
    check(values, {0: 1.0}, "V(s) once the policy is good", "the critic learning alongside the actor.", tolerance=0.2)


def test_probe5_reward_depends_on_action_and_observation(impl):
    _, p_action_1 = train_on_probe(impl, 5)
    check(p_action_1, {-1: 0.0, 1: 1.0}, "π(action 1) when the right action depends on the observation",
          "the pairing of actions with observations: that actions, log-probabilities and observations of one "
          "step stay together in the memory and in every minibatch.")
