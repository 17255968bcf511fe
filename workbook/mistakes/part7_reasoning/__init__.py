"""Known-wrong versions of the Part 7 exercises (see workbook/mistakes/__init__.py).

Two modules, as the exercise file groups them: ``rewards`` (the data side: answer_reward,
pass_at_k, groups_with_signal, overlong_penalty, completion_mask) and ``losses`` (clip-higher,
GSPO and CISPO, with Part 10's importance weights). Importing this package registers them all.
"""

from . import losses, rewards  # noqa: F401 (each module registers its mistakes)
