"""Continuous probes: train your whole Part 4 agent briefly on three tiny tasks with known answers.

Run: ``pytest tests/test_continuous_probes.py`` (your code) or add ``--impl=solutions``.
Not graded — tests/test_part4_continuous.py does that — but when InvertedPendulum will not
learn, these say where to look: each probe isolates one part of the agent (see
workbook/continuous/envs.py). Run them in order; the first failure is the one to fix. A few
seconds each. Every reward is −(a − target)², so the policy's mean must reach the target and
its σ must shrink (each unit of spread costs σ² reward).
"""

from __future__ import annotations

import pytest
import torch

from workbook.continuous import PROBE_IDS
from workbook.continuous.envs import OFFSET, SCALE, SLOPE, TARGET
from workbook.promises import earlier_part_in_traceback

PART = "part4_continuous"
TOLERANCE = 0.1
MAX_STD = 0.5  # σ starts at 1


IGNORED_OBJECTIVE = (
    "Part 2's learning_phase never called the objective it was given: Part 4's trainer passes "
    "objective=compute_continuous_objective, and learning_phase must maximise that one (None means Part 2's "
    "compute_ppo_objective, which treats the Gaussian policy as a Categorical).\nFix Part 2 first: "
    "pytest tests/test_part2_cartpole.py -k learning_phase")


def train_on_probe(impl, probe: int, observations: list[float], monkeypatch: pytest.MonkeyPatch | None = None):
    """Train for 16 short phases; return (μ at each observation, σ per action dimension).

    A failure that comes from an earlier part (Part 2's learning_phase ignoring the objective Part 4
    gives it, an error raised inside Part 1 or 2) is reported as that part's, not as this probe's.
    """
    args = impl.ContinuousPPOArgs(env_id=PROBE_IDS[probe - 1], num_envs=8, num_steps_per_rollout=16,
                                  total_timesteps=2048, learning_rate=1e-2, num_minibatches=4,
                                  batches_per_learning_phase=4, seed=1)
    calls = []
    if monkeypatch is not None:  # count the calls of the objective the trainer hands to learning_phase
        objective = impl.compute_continuous_objective
        monkeypatch.setattr(impl, "compute_continuous_objective", lambda *a, **k: calls.append(1) or objective(*a, **k))
    trainer = impl.ContinuousPPOTrainer(args)
    try:
        trainer.train()
    except Exception as error:  # noqa: BLE001 — re-raised unless an earlier part is to blame
        if monkeypatch is not None and not calls:
            raise AssertionError(f"{IGNORED_OBJECTIVE}\n(it failed with {type(error).__name__}: {error})") from None
        where = earlier_part_in_traceback(error, PART)
        if where:
            raise AssertionError(where) from None
        raise
    if monkeypatch is not None and not calls:
        raise AssertionError(IGNORED_OBJECTIVE)
    obs = torch.tensor(observations).reshape(-1, 1)
    with torch.no_grad():
        mean = trainer.actor(trainer.obs_normalizer(obs, update=False))
        std = trainer.actor.dist(trainer.obs_normalizer(obs, update=False)).stddev[0]
    return mean, std


def check(mean: torch.Tensor, expected: torch.Tensor, std: torch.Tensor, what: str, isolates: str) -> None:
    assert (mean - expected).abs().max() <= TOLERANCE, (
        f"{what}: the policy's mean is {mean.numpy().round(3).tolist()}, expected {expected.numpy().tolist()} "
        f"(tolerance {TOLERANCE}).\nThis probe isolates {isolates}")
    assert (std < MAX_STD).all(), (
        f"{what}: σ is still {std.numpy().round(3).tolist()} (started at 1, expected below {MAX_STD}): the "
        f"log-std parameter is not learning.\nThis probe isolates {isolates}")


def test_probe1_the_mean_moves_to_the_best_action(impl, monkeypatch):
    mean, std = train_on_probe(impl, 1, [0.0], monkeypatch)
    check(mean, torch.from_numpy(TARGET).float()[None], std,
          "reward −Σ(a − (0.5, −0.3))² in two action dimensions",
          "the Gaussian policy: log-probs summed over action dimensions (Independent), the log-std as a "
          "parameter the optimizer steps, the surrogate on real-valued actions, and the sign of everything.")


def test_probe2_the_mean_depends_on_the_observation(impl, monkeypatch):
    mean, std = train_on_probe(impl, 2, [-1.0, 1.0], monkeypatch)
    check(mean, torch.tensor([[-SLOPE], [SLOPE]]), std, "reward −(a − 0.5 x) ² for observation x = ±1",
          "the mean network's use of the observation, and the pairing of each stored action with the "
          "observation it answered (obs, not next_obs; one row per step in every minibatch).")


def test_probe3_badly_scaled_observations_and_rewards(impl, monkeypatch):
    mean, std = train_on_probe(impl, 3, [OFFSET - SCALE, OFFSET + SCALE], monkeypatch)
    check(mean, torch.tensor([[-SLOPE], [SLOPE]]), std,
          "probe 2 with observations 400/600 and rewards ×100",
          "the normalisers: observations normalised (and the statistics updated) during the rollout, so the "
          "tanh units see ±1 instead of ~500; rewards divided by the std of the discounted return.")
