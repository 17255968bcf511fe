"""Correct versions of the exercises in another style than the reference: the tests must pass them.

A docstring usually allows more than one right answer — a loop or a vectorised GAE,
``torch.where`` or ``torch.minimum``, ``Categorical(logits=)`` or ``probs=``, boolean
indexing or multiplying by the mask, any order of independent steps. A test that only
accepts the reference's way of writing it rejects a learner's correct work.
``tests/test_alternatives_pass.py`` runs every test of an exercise with each of its
alternatives swapped into a copy of the reference (``pytest --impl=alternatives``) and
requires them all to pass — the mirror image of ``tests/test_mistakes_are_caught.py``.

Each part has a module here named like the part (``part1_ppo_core.py``) that registers its
alternatives with :func:`alternative`; adding a module is all a new part needs. Write each
one from the exercise's docstring alone, and say in ``description`` how it differs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from workbook.variants import SEPARATOR, Registry, Variant

__all__ = ["SEPARATOR", "Alternative", "alternative", "all_alternatives", "alternatives_for", "get"]


@dataclass(frozen=True)
class Alternative(Variant):
    kind = "alternative"


REGISTRY = Registry(__name__, __path__, Alternative)


def alternative(part: str, exercise: str, name: str, description: str) -> Callable[[Any], Any]:
    """Register the decorated function/class as a correct alternative to ``part.exercise``."""
    return REGISTRY.decorator(part, exercise, name, description)


def all_alternatives() -> list[Alternative]:
    return REGISTRY.all()


def alternatives_for(part: str, exercise: str) -> list[Alternative]:
    return REGISTRY.for_exercise(part, exercise)


def get(alternative_id: str) -> Alternative:
    return REGISTRY.get(alternative_id)
