"""Support code for Part 4 (continuous control): probe environments, evaluation, training command.

Importing this package registers the continuous probes and the echo environment with
gymnasium (ids in :data:`workbook.continuous.envs.PROBE_IDS` and ``ECHO_ID``). The training
command is ``python -m workbook continuous`` (see :mod:`workbook.continuous.train`).
"""

import warnings

from workbook.continuous.envs import ECHO_ID, PROBE_IDS, register_envs


def _mujoco_warning(message: str) -> None:
    """MuJoCo's warnings as Python warnings, without the MUJOCO_LOG.TXT it writes by default."""
    if "'settotalmass' is deprecated" in message:  # in gymnasium's own InvertedPendulum/HalfCheetah XML
        return
    warnings.warn(f"MuJoCo: {message}", RuntimeWarning, stacklevel=2)


try:
    import mujoco

    mujoco.set_mju_user_warning(_mujoco_warning)
except ImportError:  # the probes need no MuJoCo
    pass

__all__ = ["ECHO_ID", "PROBE_IDS", "register_envs"]
