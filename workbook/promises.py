"""Test helpers that keep a docstring's promises tested by construction (issue 21).

Four kinds of gaps came back part after part when tests were written one by one; each helper
here closes one of them for every test that uses it:

- :func:`check_each_setting` — a setting never varied: runs the check once per value of every
  config field the docstring names, and first proves on the reference that the check can see
  the field at all (a field the check cannot see is a bug in the test, reported as such);
- :func:`assert_no_graph` — a side effect unchecked: returned stats or stored memory that still
  hold an autograd graph when the inputs require grad;
- :func:`linears_in_call_order` / :func:`copy_linears_by_role` — a test stricter than its
  docstring: networks compared by the role of each layer (the order the forward pass applies
  them), never by the order the constructor happened to register them;
- :func:`documented_keys` — stats dicts hold the documented keys and may hold more.

The full list of the kinds of miss (seven so far, among them "a promise checked only on inputs an
earlier check rejects", which no helper closes: each stage gets its own single-fault cases) is
in docs/test-promises.md.

A helper that cannot do its job because of what the learner's code did raises
:class:`~workbook.checking.WrongAnswer` saying what that code did, never a raw exception.
"""

from __future__ import annotations

import dataclasses
import re
import traceback
from typing import Any, Callable, Iterable

import torch
from torch import nn

from workbook.checking import (DEFAULT_ATOL, DEFAULT_RTOL, WrongAnswer, _clone, call_context, check_exercise,
                               check_inputs_untouched, compare, describe_call, describe_network, explain)

# --- settings: every field the docstring names, at two values at least ------------------------


def check_each_setting(impl: Any, ref: Any, exercise: str, run: Callable[[Any, Any], Any], args: Any,
                       settings: dict[str, list[Any]], *, call: str, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    """Compare ``run(impl.<exercise>, args)`` with the reference's at every value of every setting.

    ``args`` is a dataclass instance (the config the exercise reads); ``settings`` maps each
    field the docstring names to the other values to try (the field's value in ``args`` is the
    first). Before grading, the reference's output must change when the field changes: if it
    does not, the check cannot tell a learner who ignores the field from one who reads it, and
    that is a defect of the test (an AssertionError naming the field, not a WrongAnswer).
    """
    base = None
    for field, values in settings.items():
        for value in [getattr(args, field), *values]:
            varied = dataclasses.replace(args, **{field: value})
            expected = run(getattr(ref, exercise), varied)
            if value == getattr(args, field):
                base = expected
            else:
                assert compare(expected, base, rtol=rtol, atol=atol) is not None, (
                    f"test defect: {exercise}'s output does not change when {field} goes from "
                    f"{getattr(args, field)!r} to {value!r}, so this check cannot see {field}")
            check_exercise(impl, ref, exercise, lambda fn, a=varied: run(fn, a), rtol=rtol, atol=atol,
                           call=f"{call} with {field}={value!r}")


# --- side effects: no autograd graph in what is returned or stored -----------------------------------


def graph_leaks(value: Any, path: str = "output") -> list[str]:
    """Paths of the tensors inside ``value`` that require grad or carry a ``grad_fn``."""
    if isinstance(value, torch.Tensor):
        return [path] if (value.requires_grad or value.grad_fn is not None) else []
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in graph_leaks(v, f"{path}[{k!r}]")]
    if isinstance(value, (list, tuple)):
        return [p for i, v in enumerate(value) for p in graph_leaks(v, f"{path}[{i}]")]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [p for f in dataclasses.fields(value) for p in graph_leaks(getattr(value, f.name), f"{path}.{f.name}")]
    return []


def assert_no_graph(value: Any, call: str, what: str = "output", labels: Iterable[str] = ()) -> None:
    """Fail (as a wrong answer) if a tensor in ``value`` still holds an autograd graph."""
    leaks = graph_leaks(value, what)
    if leaks:
        shown = ", ".join(leaks[:4]) + (f" and {len(leaks) - 4} more" if len(leaks) > 4 else "")
        raise WrongAnswer(explain(call, f"{shown} still require grad (or carry a grad_fn): detach stats and stored "
                                        "tensors, or every one keeps the whole graph of the step alive", list(labels)))


# --- networks: layers by role, not by registration order --------------------------------------------


def linears_in_call_order(net: nn.Module, *inputs: Any, call: str) -> list[nn.Linear]:
    """The ``nn.Linear`` modules of ``net`` in the order ``net(*inputs)`` applies them (each once)."""
    return layers_in_call_order(net, *inputs, call=call)


def layers_in_call_order(net: nn.Module, *inputs: Any, call: str, kind: type[nn.Module] = nn.Linear,
                         method: str = "__call__") -> list[nn.Module]:
    """The ``kind`` modules of ``net`` in the order ``getattr(net, method)(*inputs)`` applies them (each once)."""
    order: list[nn.Module] = []
    hooks = [m.register_forward_hook(lambda m, i, o: order.append(m) if m not in order else None)
             for m in net.modules() if isinstance(m, kind)]
    try:
        with torch.no_grad():
            getattr(net, method)(*inputs)
    finally:
        for h in hooks:
            h.remove()
    if not order:
        raise WrongAnswer(explain(call, f"the forward pass applied no nn.{kind.__name__} layer"))
    return order


def describe_layers_in_call_order(net: nn.Module, *inputs: Any, call: str) -> list[dict]:
    """:func:`~workbook.checking.describe_network` of each Linear layer, in the order they are applied."""
    return [describe_network(layer)[0] for layer in linears_in_call_order(net, *inputs, call=call)]


def copy_linears_by_role(dst: nn.Module, src: nn.Module, *inputs: Any, call: str) -> None:
    """Copy ``src``'s Linear weights into ``dst``'s, layer k into the k-th layer ``dst`` applies."""
    mine, theirs = linears_in_call_order(dst, *inputs, call=call), linears_in_call_order(src, *inputs, call=call)
    shapes = [tuple(layer.weight.shape) for layer in mine]
    expected = [tuple(layer.weight.shape) for layer in theirs]
    if shapes != expected:
        raise WrongAnswer(explain(call, f"the forward pass applies Linear layers with weight shapes {shapes} (in the "
                                        f"order applied); the docstring's network applies {expected}"))
    with torch.no_grad():
        for a, b in zip(mine, theirs):
            if (a.bias is None) != (b.bias is None):
                raise WrongAnswer(explain(call, f"a Linear layer of shape {tuple(a.weight.shape)} "
                                                f"{'has no' if a.bias is None else 'has a'} bias; the docstring's has "
                                                f"{'one' if b.bias is not None else 'none'}"))
            a.weight.copy_(b.weight)
            if a.bias is not None:
                a.bias.copy_(b.bias)


# --- stats dicts: the documented keys, and any others ------------------------------------------------


def documented_keys(value: Any, keys: Iterable[str]) -> Any:
    """``value`` with every dict in it cut down to ``keys`` (those present): extra keys are allowed.

    A missing documented key stays missing, so the comparison with the reference reports it.
    """
    keys = tuple(keys)
    if isinstance(value, dict):
        return {k: value[k] for k in keys if k in value}
    if isinstance(value, tuple):
        return tuple(documented_keys(v, keys) for v in value)
    if isinstance(value, list):
        return [documented_keys(v, keys) for v in value]
    return value


def check_call_documented_keys(impl: Any, ref: Any, exercise: str, *args: Any, keys: Iterable[str],
                               rtol: float = DEFAULT_RTOL, atol: float = DEFAULT_ATOL, **kwargs: Any) -> Any:
    """:func:`~workbook.checking.check_call` for a function returning stats dicts: only the documented
    ``keys`` are compared (each must be there; more are allowed). Also fails on inputs modified in place."""
    keys = tuple(keys)
    call = describe_call(exercise, *args, **kwargs)

    def run(fn: Callable) -> Any:
        return documented_keys(fn(*[_clone(a) for a in args], **{k: _clone(v) for k, v in kwargs.items()}), keys)

    def context(got: Any, expected: Any) -> list[str]:
        return call_context(getattr(impl, exercise), getattr(ref, exercise), args, kwargs, got, expected, rtol=rtol,
                            atol=atol, post=lambda out: documented_keys(out, keys))

    got = check_exercise(impl, ref, exercise, run, call=call, rtol=rtol, atol=atol, context=context)
    check_inputs_untouched(impl, exercise, call, args, kwargs)
    return got


# --- failures that come from an earlier part ------------------------------------------------------

_PART_FILE = re.compile(r"[\\/]exercises[\\/](part(\d+)_\w+)\.py$")


def earlier_part_in_traceback(error: BaseException, part: str) -> str | None:
    """Where ``error`` was raised inside another part of exercises/ (the deepest such frame), as a
    sentence naming that part and function; None if it did not pass through another part's file."""
    found = None
    for frame in traceback.extract_tb(error.__traceback__):
        match = _PART_FILE.search(frame.filename)
        if match and match.group(1) != part:
            found = (match.group(1), match.group(2), frame.name, frame.lineno)
    if found is None:
        return None
    module, number, function, line = found
    return (f"the error was raised inside Part {number}'s {function} (exercises/{module}.py, line {line}): "
            f"{type(error).__name__}: {error}\nRun Part {number}'s tests first (pytest tests/test_{module}.py); if they "
            f"pass, look at the arguments {part.split('_')[0].replace('part', 'Part ')} gives {function}")
