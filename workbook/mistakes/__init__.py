"""Known-wrong versions of the exercises: real learner mistakes, kept as code.

They serve twice. The tests run them on the same inputs as the learner's code, and when
the learner's output matches one, the failure message names it ("looks like γ was used
where γ·λ belongs"). And ``tests/test_mistakes_are_caught.py`` runs the whole suite with
each of them swapped into the reference solutions (``pytest --impl=mistakes``) and checks
that every one is caught *and* named — the proof that the tests can fail.

Each part has a module here named like the part (``part1_ppo_core.py``) that registers
its mistakes with :func:`mistake`; adding a module is all a new part needs. A part whose
mistakes outgrow one readable file is a package of that name instead, one module per group of
exercises (``part3_rlhf/``, ``part7_reasoning/``), whose ``__init__`` imports them all. The mirror
image, correct versions the tests must accept, lives in ``workbook/alternatives/``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from workbook.variants import SEPARATOR, Registry, Variant

__all__ = ["SEPARATOR", "Mistake", "mistake", "all_mistakes", "mistakes_for", "get"]


@dataclass(frozen=True)
class Mistake(Variant):
    kind = "mistake"

    @property
    def label(self) -> str:
        """The text a failure message carries when it recognises this mistake."""
        return f"looks like {self.description} [known mistake: {self.name}]"


REGISTRY = Registry(__name__, __path__, Mistake)


def mistake(part: str, exercise: str, name: str, description: str) -> Callable[[Any], Any]:
    """Register the decorated function/class as a known-wrong version of ``part.exercise``.

    ``description`` says what the learner did, phrased to follow "looks like ...".
    """
    return REGISTRY.decorator(part, exercise, name, description)


def all_mistakes() -> list[Mistake]:
    return REGISTRY.all()


def mistakes_for(part: str, exercise: str) -> list[Mistake]:
    return REGISTRY.for_exercise(part, exercise)


def get(mistake_id: str) -> Mistake:
    return REGISTRY.get(mistake_id)
