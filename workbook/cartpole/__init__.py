"""Support code for Part 2 (the CartPole agent): environments, evaluation, training script.

Importing this package registers the probe environments and the step counter with
gymnasium (ids in :data:`workbook.cartpole.envs.PROBE_IDS` and ``STEP_COUNTER_ID``).
The training command is ``python -m workbook cartpole`` (see :mod:`workbook.cartpole.train`).
"""

from workbook.cartpole.envs import (PROBE_IDS, STEP_COUNTER_ID, finished_episodes, make_vector_env,
                                    register_envs)

__all__ = ["PROBE_IDS", "STEP_COUNTER_ID", "finished_episodes", "make_vector_env", "register_envs"]
