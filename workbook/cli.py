"""Command-line options from an arguments dataclass (CleanRL style: one docstring per field).

Each field becomes ``--field-name`` with its default, its type, and the one-line docstring
written under it as the help text; booleans become ``--flag/--no-flag``.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import textwrap
from typing import Any, TypeVar

T = TypeVar("T")


def field_docs(cls: type) -> dict[str, str]:
    """The docstrings written under a dataclass's fields, by field name."""
    body = ast.parse(textwrap.dedent(inspect.getsource(cls))).body[0].body
    return {stmt.target.id: " ".join(str(nxt.value.value).split())
            for stmt, nxt in zip(body, body[1:])
            if isinstance(stmt, ast.AnnAssign) and isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant)}


def add_dataclass_arguments(parser: argparse.ArgumentParser, cls: type) -> None:
    """One option per field of ``cls`` (a dataclass whose fields all have defaults)."""
    docs = field_docs(cls)
    for f in dataclasses.fields(cls):
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        flag = f"--{f.name.replace('_', '-')}"
        help_text = f"{docs.get(f.name, '')} (default: {default})"
        if isinstance(default, bool):
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=default, help=docs.get(f.name))
        else:
            parser.add_argument(flag, type=type(default), default=default, help=help_text)


def dataclass_from_args(cls: type[T], namespace: argparse.Namespace, **overrides: Any) -> T:
    """Build ``cls`` from the parsed options that name its fields."""
    values = {f.name: getattr(namespace, f.name) for f in dataclasses.fields(cls)}
    return cls(**(values | overrides))
