"""Command-line options: strict parsing, options from an arguments dataclass, validation helpers.

- :func:`make_parser` is an ``argparse`` parser whose errors raise
  :class:`~workbook.runs.ConfigError` (so :func:`workbook.runs.command` prints them as one line,
  exit status 2) and that accepts ``--debug`` (show the traceback of an error).
- :func:`add_dataclass_arguments` turns each field of a dataclass (CleanRL style: one docstring
  per field) into ``--field-name`` with its default, its type and that docstring as help;
  booleans become ``--flag/--no-flag``, ``Literal[...]`` fields get their choices declared.
- :func:`parse_value` reads ``FIELD=VALUE`` overrides with the same strictness (an ``int``
  field rejects ``2.5``).
- :func:`require` and friends raise ``ConfigError`` for ranges and divisibility.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import math
import re
import textwrap
import types
import typing
from typing import Any, Callable, Literal, Sequence, TypeVar

from workbook.runs import IMPLS, ConfigError

T = TypeVar("T")


class StrictParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors raise ConfigError instead of printing usage and exiting."""

    def error(self, message: str):  # noqa: D102 (argparse's hook)
        found = re.match(r"argument ([^:]+): (.*)", message, re.S)
        if found:
            field, what = found.group(1).split("/")[0], found.group(2)
            raise ConfigError(field, what)
        found = re.match(r"unrecognized arguments: (\S+)", message)
        if found:
            option = found.group(1).split("=")[0]
            if option in SYNONYMS:  # a spelling another tool uses: name ours
                right = SYNONYMS[option]
                usage = VOCABULARY.get(right, "").partition(":")
                raise ConfigError(option, f"unknown option; use {right}" + (f" {usage[0]}" if usage[1] else ""))
            raise ConfigError(option, f"unknown option ({self.prog} --help lists the options)")
        found = re.match(r"the following arguments are required: (.*)", message)
        if found:
            raise ConfigError(found.group(1), "required")
        raise ConfigError(self.prog, message)


def make_parser(prog: str, description: str | None = None, **kwargs: Any) -> StrictParser:
    """The parser every command uses: one-line errors (with :func:`workbook.runs.command`) and ``--debug``."""
    parser = StrictParser(prog=prog, description=description, allow_abbrev=False, **kwargs)
    parser.add_argument("--debug", action="store_true", help="on an error, also show the traceback")
    return parser


# --- the shared vocabulary ---------------------------------------------------------------------

VOCABULARY = {
    "--seeds": "S [S ...]: a list of seed values (never a count), one run each",
    "--runs-dir": "DIR: the parent folder of the run folders",
    "--run-name": "NAME: the run folder's name",
    "--overwrite": "replace an existing run (or cached result) of that name",
    "--impl": "exercises|solutions: whose code runs",
    "--wandb": "offline|online|disabled",
    "--device": "cpu, cuda, ...",
    "--set": "FIELD=VALUE: override a field of the arguments dataclass (repeatable)",
    "--no-progress": "no progress bar",
}
"""The options every command and benchmark spells the same way (tests/test_options.py checks them)."""

SYNONYMS = {"--seed": "--seeds", "--num-seeds": "--seeds", "--n-seeds": "--seeds", "--run-dir": "--runs-dir",
            "--out-dir": "--runs-dir", "--output-dir": "--runs-dir", "--name": "--run-name", "--force": "--overwrite",
            "--progress": "--no-progress", "--quiet": "--no-progress", "--no-wandb": "--wandb disabled",
            "--override": "--set", "--cpu": "--device cpu", "--gpu": "--device cuda", "--implementation": "--impl"}
"""Spellings of a vocabulary option that no command or benchmark may use (→ the one to use)."""

MAX_SEED = 2**32 - 1  # numpy's legacy seeding (and some gymnasium envs) take seeds in [0, 2**32)


def seed_value(text: str) -> int:
    """One ``--seeds`` value: a whole number in [0, 2**32) (argparse turns the error into one line)."""
    try:
        seed = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a seed is a whole number, got {text!r}") from None
    if not 0 <= seed <= MAX_SEED:
        raise argparse.ArgumentTypeError(f"a seed is in [0, 2**32), got {seed}")
    return seed


def add_seeds_option(parser: argparse.ArgumentParser, default: list[int], what: str = "one run per seed") -> None:
    """``--seeds S [S ...]``: a list of seed values, each checked by :func:`seed_value`."""
    parser.add_argument("--seeds", type=seed_value, nargs="+", default=list(default), metavar="S",
                        help=f"{what} (default: {' '.join(map(str, default))})")


def add_impl_option(parser: argparse.ArgumentParser, default: str | None,
                    help: str = "whose code runs: exercises (yours) or solutions (the reference)") -> None:
    """``--impl exercises|solutions`` (:data:`~workbook.runs.IMPLS`); ``help`` gets the default appended unless it is None."""
    parser.add_argument("--impl", choices=IMPLS, default=default,
                        help=help if default is None else f"{help} (default: {default})")


def require_unique_seeds(seeds: list[int]) -> None:
    require(len(set(seeds)) == len(seeds), "--seeds", f"repeated seed in {seeds}")


# --- options from a dataclass ------------------------------------------------------------------

def field_docs(cls: type) -> dict[str, str]:
    """The docstrings written under a dataclass's fields, by field name (a subclass's own win over its bases')."""
    docs: dict[str, str] = {}
    for klass in reversed([k for k in cls.__mro__ if dataclasses.is_dataclass(k)]):
        body = ast.parse(textwrap.dedent(inspect.getsource(klass))).body[0].body
        docs.update({stmt.target.id: " ".join(str(nxt.value.value).split())
                     for stmt, nxt in zip(body, body[1:])
                     if isinstance(stmt, ast.AnnAssign) and isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant)})
    return docs


def field_types(cls: type) -> dict[str, Any]:
    """Each field's annotation, resolved (``Optional[X]`` / ``X | None`` becomes ``X``)."""
    hints = typing.get_type_hints(cls)
    out = {}
    for f in dataclasses.fields(cls):
        hint = hints.get(f.name, Any)
        if typing.get_origin(hint) in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(hint) if a is not type(None)]
            hint = args[0] if len(args) == 1 else hint
        out[f.name] = hint
    return out


def choices_of(hint: Any) -> tuple | None:
    """The allowed values of a ``Literal[...]`` annotation, else None."""
    return typing.get_args(hint) if typing.get_origin(hint) is Literal else None


def _default(f: dataclasses.Field) -> Any:
    return f.default if f.default is not dataclasses.MISSING else f.default_factory()


def add_dataclass_arguments(parser: argparse.ArgumentParser, cls: type, skip: tuple[str, ...] = (),
                            shown_default: Callable[[str, Any], str] | None = None,
                            order: Sequence[str] = ()) -> None:
    """One option per field of ``cls`` (a dataclass whose fields all have defaults), except the fields in ``skip``.

    ``shown_default(field, default)``: what ``--help`` says the default is, when the command's
    default differs from the field's (an algorithm's own value); the parsed default stays the field's.
    ``order``: every field's name, in the order ``--help`` lists them (default: the class's order).
    """
    docs, hints = field_docs(cls), field_types(cls)
    fields = dataclasses.fields(cls)
    for f in sorted(fields, key=lambda f: list(order).index(f.name)) if order else fields:
        if f.name in skip:
            continue
        default = _default(f)
        shown = shown_default(f.name, default) if shown_default else str(default)
        flag = f"--{f.name.replace('_', '-')}"
        choices = choices_of(hints[f.name])
        if isinstance(default, bool):
            text = docs.get(f.name) or ""
            if shown != str(default):
                text += f" (default: {shown})"
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=default, help=text or None)
        elif choices:
            parser.add_argument(flag, choices=choices, default=default,
                                help=f"{docs.get(f.name, '')} (default: {shown})")
        else:
            parser.add_argument(flag, type=type(default), default=default,
                                help=f"{docs.get(f.name, '')} (default: {shown})")


def dataclass_from_args(cls: type[T], namespace: argparse.Namespace, **overrides: Any) -> T:
    """Build ``cls`` from the parsed options that name its fields (a field without an option keeps its default)."""
    values = {f.name: getattr(namespace, f.name) for f in dataclasses.fields(cls) if hasattr(namespace, f.name)}
    return cls(**(values | overrides))


def parse_value(field: str, hint: Any, text: str) -> Any:
    """``text`` as a value of type ``hint``; ConfigError(field, ...) if it is not one (``2.5`` is no int)."""
    choices = choices_of(hint)
    if choices:
        if text not in choices:
            raise ConfigError(field, f"invalid choice {text!r} (choose from {', '.join(map(str, choices))})")
        return text
    try:
        if hint is bool:
            if text.lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError
            return text.lower() in ("true", "1", "yes")
        if hint is int:
            try:
                return int(text)
            except ValueError:
                number = float(text)  # accept 1e5, reject 2.5
                if not number.is_integer():
                    raise
                return int(number)
        if hint is float:
            value = float(text)
            if math.isnan(value):
                raise ValueError
            return value
    except ValueError:
        raise ConfigError(field, f"expected {getattr(hint, '__name__', hint)}, got {text!r}") from None
    return text


def parse_overrides(items: list[str], cls: type, option: str = "--set", skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """``["lr=1e-3", ...]`` as ``{"lr": 0.001}``, each checked against ``cls``'s fields and types.

    ``skip``: fields the command does not have (refused, and not listed as choices).
    """
    hints = {k: v for k, v in field_types(cls).items() if k not in skip}
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(option, f"expected FIELD=VALUE, got {item!r}")
        if key not in hints:
            raise ConfigError(option, f"this command has no field {key!r} (fields: {', '.join(hints)})")
        out[key] = parse_value(key, hints[key], value)
    return out


# --- validation --------------------------------------------------------------------------------

def require(ok: bool, field: str, message: str) -> None:
    """Raise ConfigError(field, message) unless ``ok``."""
    if not ok:
        raise ConfigError(field, message)


def require_choices(obj: Any) -> None:
    """Every ``Literal[...]`` field of the dataclass instance ``obj`` holds one of its choices."""
    for name, hint in field_types(type(obj)).items():
        choices = choices_of(hint)
        if choices and getattr(obj, name) not in choices:
            raise ConfigError(f"--{name.replace('_', '-')}",
                              f"invalid choice {getattr(obj, name)!r} (choose from {', '.join(map(str, choices))})")


def require_positive(field: str, value: float) -> None:
    require(value > 0, field, f"must be > 0, got {value!r}")


def require_at_least(field: str, value: float, low: float) -> None:
    require(value >= low, field, f"must be ≥ {low:g}, got {value!r}")


def require_in(field: str, value: float, low: float, high: float, *, open_low: bool = False) -> None:
    ok = (low < value if open_low else low <= value) and value <= high
    require(ok, field, f"must be in {'(' if open_low else '['}{low:g}, {high:g}], got {value!r}")


def require_divides(field: str, value: int, whole_name: str, whole: int) -> None:
    require(value > 0 and whole % value == 0, field, f"{value} does not divide {whole_name} = {whole}")
