"""Support code for Part 8 (Atari): the preprocessed ALE environments, evaluation, training command.

The environments are ale-py's real Atari 2600 games (ROMs inside its wheel; nothing is
downloaded), preprocessed by :func:`workbook.atari.envs.make_atari_env`. The training command is
``python -m workbook atari`` (see :mod:`workbook.atari.train`).
"""

from workbook.atari.envs import (AtariUnavailable, FireReset, check_atari_env, make_atari_env, make_atari_vector_env,
                                 random_return, register_ale)

__all__ = ["AtariUnavailable", "FireReset", "check_atari_env", "make_atari_env", "make_atari_vector_env",
           "random_return", "register_ale"]
