"""Known-wrong versions of the exercises: real learner mistakes, kept as code.

They serve twice. The tests run them on the same inputs as the learner's code, and when
the learner's output matches one, the failure message names it ("looks like γ was used
where γ·λ belongs"). And ``tests/test_mistakes_are_caught.py`` runs the whole suite with
each of them swapped into the reference solutions (``pytest --impl=mistakes``) and checks
that every one is caught *and* named — the proof that the tests can fail.

Each part has a module here named like the part (``part1_ppo_core.py``) that registers
its mistakes with :func:`mistake`.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass
from typing import Any, Callable

SEPARATOR = ":"


@dataclass(frozen=True)
class Mistake:
    part: str
    """Module name of the part, e.g. 'part1_ppo_core'."""
    exercise: str
    """Top-level name the wrong version replaces, e.g. 'compute_advantages'."""
    name: str
    """Short slug shown in failure messages, e.g. 'gamma_instead_of_gamma_lambda'."""
    description: str
    """What the learner did, phrased to follow 'looks like ...'."""
    impl: Any
    """The wrong function or class."""

    @property
    def id(self) -> str:
        return SEPARATOR.join((self.part, self.exercise, self.name))

    @property
    def label(self) -> str:
        """The text a failure message carries when it recognises this mistake."""
        return f"looks like {self.description} [known mistake: {self.name}]"


_REGISTRY: dict[str, Mistake] = {}


def mistake(part: str, exercise: str, name: str, description: str) -> Callable[[Any], Any]:
    """Register the decorated function/class as a known-wrong version of ``part.exercise``."""

    def register(obj: Any) -> Any:
        entry = Mistake(part, exercise, name, description, obj)
        if entry.id in _REGISTRY:
            raise ValueError(f"duplicate mistake id {entry.id}")
        _REGISTRY[entry.id] = entry
        return obj

    return register


def _load_all() -> None:
    for info in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{info.name}")


def all_mistakes() -> list[Mistake]:
    _load_all()
    return sorted(_REGISTRY.values(), key=lambda m: m.id)


def mistakes_for(part: str, exercise: str) -> list[Mistake]:
    return [m for m in all_mistakes() if m.part == part and m.exercise == exercise]


def get(mistake_id: str) -> Mistake:
    _load_all()
    try:
        return _REGISTRY[mistake_id]
    except KeyError:
        raise KeyError(f"unknown mistake {mistake_id!r}; known: {sorted(_REGISTRY)}") from None
