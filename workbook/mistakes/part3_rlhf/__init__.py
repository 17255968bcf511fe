"""Known-wrong versions of the Part 3 exercises (see workbook/mistakes/__init__.py).

Part 3 has nineteen exercises and about a hundred known mistakes: one module per group of
exercises, in the order of the exercise file — ``tensors`` (log-probs to the KL penalty),
``rewards`` (rewards, the KL controller, advantages, the PPO loss), ``models`` (value head,
reference copy, batched forward pass, reward model) and ``trainer`` (``PPOTrainer.step``).
Importing this package registers them all.
"""

from . import models, rewards, tensors, trainer  # noqa: F401 (each module registers its mistakes)
