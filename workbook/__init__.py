"""Support package of the PPO & RLHF workbook.

Everything that is not an exercise lives here: the shape checker the exercises are
decorated with, the grading harness (pytest plugin, comparison helpers, known mistakes,
grade table) and, for the later parts, environments, the tiny language model and the
training entry points. Run ``python -m workbook --help`` for the commands.
"""

__all__ = ["typechecked"]

from workbook.typecheck import typechecked
