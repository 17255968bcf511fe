"""Compare a learner's output with the reference and explain the difference.

Order of checks: type, then shape, dtype and device, then values (with
``torch.testing.assert_close`` and the stated tolerances). On a mismatch the message shows
the call, expected vs got, the max abs diff, the first mismatching index, and — when the
learner's output equals what a known-wrong version produces on the same inputs — that
mistake's name.
"""

from __future__ import annotations

import copy
import importlib
import inspect
import typing
from typing import Any, Callable

import numpy as np
import torch

from workbook import mistakes

DEFAULT_RTOL = 1e-5
DEFAULT_ATOL = 1e-5


class WrongAnswer(AssertionError):
    """A learner's output differs from the reference (the message explains how)."""


def part_of(module: Any) -> str:
    """'part1_ppo_core' for solutions.part1_ppo_core (or any copy of it)."""
    return getattr(module, "__workbook_part__", module.__name__.rsplit(".", 1)[-1])


def known_mistake(part: str, exercise: str, name: str) -> str:
    """The label of a registered mistake, for tests that detect it by a property, not a value."""
    return mistakes.get(mistakes.SEPARATOR.join((part, exercise, name))).label


# --- describing values ----------------------------------------------------------------

def summarize(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        dtype = str(value.dtype).removeprefix("torch.")
        device = "" if value.device.type == "cpu" else f" on {value.device}"
        return f"Tensor{list(value.shape)} {dtype}{device}"
    if isinstance(value, np.ndarray):
        return f"ndarray{list(value.shape)} {value.dtype}"
    if isinstance(value, np.random.Generator):
        return "np.random.Generator"
    if isinstance(value, torch.distributions.Categorical):
        return f"Categorical(logits: {summarize(value.logits)})"
    if isinstance(value, (list, tuple)) and len(value) > 4:
        return f"{type(value).__name__} of {len(value)}"
    if isinstance(value, torch.nn.Module):
        return type(value).__name__
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def describe_call(name: str, *args: Any, **kwargs: Any) -> str:
    parts = [summarize(a) for a in args] + [f"{k}={summarize(v)}" for k, v in kwargs.items()]
    return f"{name}({', '.join(parts)})"


def _short(value: Any) -> str:
    with np.printoptions(precision=4, threshold=24, edgeitems=3, linewidth=100):
        if isinstance(value, torch.Tensor):
            torch.set_printoptions(precision=4, threshold=24, edgeitems=3, linewidth=100)
            try:
                return repr(value.detach().cpu())
            finally:
                torch.set_printoptions(profile="default")
        return repr(value)


# --- comparing ------------------------------------------------------------------------

def compare(got: Any, expected: Any, *, rtol: float = DEFAULT_RTOL, atol: float = DEFAULT_ATOL, path: str = "output") -> str | None:
    """None if ``got`` matches ``expected``, else a description of the first difference."""
    if isinstance(expected, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            return f"{path}: expected a torch.Tensor, got {type(got).__name__} ({summarize(got)})"
        if got.shape != expected.shape:
            return f"{path}: shape {tuple(got.shape)}, expected {tuple(expected.shape)}"
        if got.dtype != expected.dtype:
            return f"{path}: dtype {got.dtype}, expected {expected.dtype}"
        if got.device != expected.device:
            return f"{path}: on device {got.device}, expected {expected.device}"
        return _compare_values(got.detach().cpu(), expected.detach().cpu(), rtol, atol, path)
    if isinstance(expected, np.ndarray):
        if not isinstance(got, np.ndarray):
            return f"{path}: expected a numpy array, got {type(got).__name__}"
        if got.shape != expected.shape:
            return f"{path}: shape {got.shape}, expected {expected.shape}"
        if got.dtype.kind != expected.dtype.kind:
            return f"{path}: dtype {got.dtype}, expected {expected.dtype}"
        return _compare_values(torch.from_numpy(np.asarray(got, dtype=np.float64)),
                               torch.from_numpy(np.asarray(expected, dtype=np.float64)), rtol, atol, path)
    if isinstance(expected, (tuple, list)):
        if not isinstance(got, (tuple, list)) or len(got) != len(expected):
            return f"{path}: expected a {type(expected).__name__} of {len(expected)}, got {summarize(got)}"
        for i, (g, e) in enumerate(zip(got, expected)):
            problem = compare(g, e, rtol=rtol, atol=atol, path=f"{path}[{i}]")
            if problem:
                return problem
        return None
    if isinstance(expected, dict):
        if not isinstance(got, dict):
            return f"{path}: expected a dict, got {type(got).__name__}"
        if set(got) != set(expected):
            missing, unexpected = sorted(set(expected) - set(got), key=str), sorted(set(got) - set(expected), key=str)
            return (f"{path}: the keys differ: missing {missing or 'none'}; unexpected {unexpected or 'none'} "
                    f"({len(set(got) & set(expected))} keys in common)")
        for key in expected:
            problem = compare(got[key], expected[key], rtol=rtol, atol=atol, path=f"{path}[{key!r}]")
            if problem:
                return problem
        return None
    if isinstance(expected, (float, int)) and not isinstance(expected, bool):
        if isinstance(got, torch.Tensor) and got.numel() == 1:
            got = got.item()
        if not isinstance(got, (float, int, np.floating, np.integer)):
            return f"{path}: expected a number, got {summarize(got)}"
        return _compare_values(torch.tensor(float(got), dtype=torch.float64),
                               torch.tensor(float(expected), dtype=torch.float64), rtol, atol, path)
    if got != expected:
        return f"{path}: expected {expected!r}, got {got!r}"
    return None


SHOWN_ELEMENTS = 24  # tensors with more elements are elided when printed


def _first_bad(got: torch.Tensor, expected: torch.Tensor, rtol: float, atol: float) -> tuple[int, ...]:
    bad = ~torch.isclose(got.double(), expected.double(), rtol=rtol, atol=atol, equal_nan=True)
    return tuple(int(i) for i in bad.nonzero()[0])


def _around(value: torch.Tensor, first: tuple[int, ...], width: int = 4) -> tuple[str, str]:
    """(``'[3, 12:20]'``, the values there): the stretch of the last dimension around index ``first``."""
    row = value[first[:-1]] if len(first) > 1 else value
    start, stop = max(0, first[-1] - width), min(row.shape[0], first[-1] + width + 1)
    where = ", ".join([*map(str, first[:-1]), f"{start}:{stop}"])
    return f"[{where}]", _short(row[start:stop])


def _compare_values(got: torch.Tensor, expected: torch.Tensor, rtol: float, atol: float, path: str) -> str | None:
    try:
        torch.testing.assert_close(got, expected, rtol=rtol, atol=atol, equal_nan=True, check_dtype=False)
        return None
    except AssertionError:
        pass
    lines = [f"{path}: values differ (rtol={rtol:g}, atol={atol:g})"]
    first = _first_bad(got, expected, rtol, atol) if got.dim() else ()
    if got.numel() > SHOWN_ELEMENTS:
        # The printout would elide the middle, and two elided tensors can look the same: show where they differ.
        where, shown = _around(expected, first)
        lines += [f"    expected{where}: {shown}", f"    got{where}:{' ' * (len('expected') - len('got'))} {_around(got, first)[1]}"]
    else:
        lines += [f"    expected: {_short(expected)}", f"    got:      {_short(got)}"]
    diff = (got.double() - expected.double()).abs().nan_to_num(nan=float("inf"))
    if got.dim() == 0:
        lines.append(f"    abs diff: {diff.item():.6g}")
    else:
        worst = np.unravel_index(int(diff.argmax()), tuple(got.shape))
        lines.append(f"    max abs diff: {diff.max().item():.6g} at index {tuple(int(i) for i in worst)}")
        lines.append(f"    first mismatch at index {first}: expected {expected[first].item():.6g}, got {got[first].item():.6g}")
    return "\n".join(lines)


def first_mismatch(got: Any, expected: Any, *, rtol: float = DEFAULT_RTOL, atol: float = DEFAULT_ATOL
                   ) -> tuple[tuple[int, ...], str, tuple[int, ...]] | None:
    """(index, path, shape) of the first differing element of the first differing tensor, as :func:`compare`
    walks them; None when the difference is not in the values of a tensor of the expected shape."""
    if isinstance(expected, torch.Tensor) and isinstance(got, torch.Tensor):
        if got.shape != expected.shape or got.dim() == 0 or compare(got, expected, rtol=rtol, atol=atol) is None:
            return None
        got, expected = got.detach().cpu(), expected.detach().cpu()
        if torch.isclose(got.double(), expected.double(), rtol=rtol, atol=atol, equal_nan=True).all():
            return None  # equal values of another dtype (a bool mask for a float one): no element differs
        return _first_bad(got, expected, rtol, atol), "", tuple(got.shape)
    if isinstance(expected, (tuple, list)) and isinstance(got, (tuple, list)) and len(got) == len(expected):
        pairs = [(f"[{i}]", g, e) for i, (g, e) in enumerate(zip(got, expected))]
    elif isinstance(expected, dict) and isinstance(got, dict) and set(got) == set(expected):
        pairs = [(f"[{k!r}]", got[k], expected[k]) for k in expected]
    else:
        return None
    for where, g, e in pairs:
        if compare(g, e, rtol=rtol, atol=atol) is not None:
            found = first_mismatch(g, e, rtol=rtol, atol=atol)
            return None if found is None else (found[0], where + found[1], found[2])
    return None


def assert_close(got: Any, expected: Any, *, rtol: float | None = None, atol: float | None = None,
                 msg: str | Callable[[str], str] | None = None, name: str = "output", **kwargs: Any) -> None:
    """``torch.testing.assert_close`` (same arguments, same verdict) whose failure shows expected vs got.

    torch's own message counts mismatched elements but shows no values; a test comparing with a
    worked example wants the learner to see both. ``msg`` receives that description (like
    torch's ``msg`` callable) and its result is raised as :class:`WrongAnswer`.
    """
    try:
        torch.testing.assert_close(got, expected, rtol=rtol, atol=atol, **kwargs)
    except AssertionError as error:
        tolerances = {"rtol": DEFAULT_RTOL if rtol is None else rtol, "atol": DEFAULT_ATOL if atol is None else atol}
        detail = compare(got, expected, path=name, **tolerances) or str(error)  # None: a NaN, which compare allows
        raise WrongAnswer(msg(detail) if callable(msg) else f"{msg}\n  {detail}" if msg else detail) from None


def describe_network(net: torch.nn.Module) -> list[dict]:
    """Layer by layer: type; for Linear layers the shape, the gain (mean singular value of the
    weight), whether all singular values are equal (orthogonal init), and the largest |bias|."""
    layers = []
    for module in net.modules():
        if list(module.children()):
            continue
        if isinstance(module, torch.nn.Linear):
            singular = torch.linalg.svdvals(module.weight.detach().double())
            layers.append({"layer": "Linear", "weight shape": tuple(module.weight.shape),
                           "gain": singular.mean().item(),
                           "orthogonal": bool((singular.max() - singular.min()) / singular.mean() < 1e-4),
                           "largest |bias|": module.bias.detach().abs().max().item()})
        else:
            layers.append({"layer": type(module).__name__})
    return layers


# --- the checks tests call ------------------------------------------------------------

_CACHE: dict[tuple[str, int], Any] = {}


def _run_cached(run: Callable[[Any], Any], obj: Any, cache_key: str | None) -> Any:
    """``run(obj)``, memoised under ``cache_key`` for the reference and known mistakes (deterministic
    code whose output on the same seeded inputs never changes): slow checks such as whole PPO
    steps then run each of them once per process, not once per test that needs them."""
    if cache_key is None:
        return run(obj)
    key = (cache_key, id(obj))
    if key not in _CACHE:
        try:
            _CACHE[key] = (True, run(obj))
        except Exception as e:  # noqa: BLE001 - remembered and re-raised
            _CACHE[key] = (False, e)
    ok, value = _CACHE[key]
    if not ok:
        raise value
    return value


_UNSET: Any = object()


def reference_output(part: str, exercise: str, run: Callable[[Any], Any], cache_key: str | None = None) -> Any:
    """``run`` on the reference solution of ``part.exercise`` (what a diagnosis compares mistakes with)."""
    reference = importlib.import_module(f"solutions.{part}")
    return _run_cached(run, getattr(reference, exercise), cache_key)


def matching_mistakes(part: str, exercise: str, run: Callable[[Any], Any], got: Any, *, rtol: float, atol: float,
                      suspects: list[str] | tuple[str, ...] | None = None, cache_key: str | None = None,
                      expected: Any = _UNSET) -> list[str]:
    """Labels of the known mistakes whose output on the same inputs equals ``got`` — and not the reference's.

    A mistake that gives the reference's answer on this call cannot be the cause of a wrong one
    here (pass@k's plug-in estimate is exact at k = 1), so it is never named, even when the
    learner's answer is within ``rtol``/``atol`` of both. ``expected`` is the reference's output
    on these inputs (computed with ``run`` on solutions/ when not given). ``suspects`` (mistake
    names) limits the search to the mistakes a check is about, for slow checks.
    """
    if expected is _UNSET:
        try:
            expected = reference_output(part, exercise, run, cache_key)
        except Exception:  # noqa: BLE001 - no reference answer: judge by the learner's output alone
            expected = _UNSET
    labels = []
    for m in mistakes.mistakes_for(part, exercise):
        if suspects is not None and m.name not in suspects:
            continue
        try:
            output = _run_cached(run, m.impl, cache_key)
            if compare(got, output, rtol=rtol, atol=atol) is not None:
                continue
            if expected is not _UNSET and compare(output, expected, rtol=rtol, atol=atol) is None:
                continue  # this mistake is right on this call: it cannot explain a wrong answer here
            labels.append(m.label)
        except Exception:  # a mistake that cannot even run on these inputs matches nothing
            continue
    return labels


def check_exercise(impl: Any, ref: Any, exercise: str, run: Callable[[Any], Any], *, call: str,
                   rtol: float = DEFAULT_RTOL, atol: float = DEFAULT_ATOL,
                   suspects: list[str] | tuple[str, ...] | None = None, cache_key: str | None = None,
                   context: Callable[[Any, Any], list[str]] | None = None) -> Any:
    """Run ``run(impl.<exercise>)`` and ``run(ref.<exercise>)`` and require equal results.

    ``run`` receives the function or class under test and returns what should be compared;
    it must build fresh inputs each time it is called (known mistakes are run through it too).
    Returns the learner's output. For slow checks, ``suspects`` limits the known mistakes tried
    for a name, and ``cache_key`` (unique to the check and its inputs) memoises the reference's
    and the known mistakes' outputs. ``context(got, expected)`` adds lines to a failure's
    message (see :func:`call_context`).
    """
    expected = _run_cached(run, getattr(ref, exercise), cache_key)
    got = run(getattr(impl, exercise))
    problem = compare(got, expected, rtol=rtol, atol=atol)
    if problem is not None:
        extra = context(got, expected) if context is not None else []
        labels = matching_mistakes(part_of(ref), exercise, run, got, rtol=rtol, atol=atol, suspects=suspects,
                                   cache_key=cache_key, expected=expected)
        raise WrongAnswer(explain(call, "\n  ".join([problem, *extra]), labels))
    return got


def explain(call: str, problem: str, labels: list[str] | tuple[str, ...] = ()) -> str:
    lines = [f"wrong answer from {call}", f"  {problem}"]
    lines += [f"  {label}" for label in labels]
    return "\n".join(lines)


# --- what a failing call's message adds: the inputs at the mismatch, the settings, empty mask rows ---

def named_arguments(fn: Any, args: tuple, kwargs: dict) -> dict[str, Any]:
    """The call's arguments by parameter name (``#0``, ``#1``... where the signature cannot be read)."""
    try:
        return dict(inspect.signature(fn).bind(*args, **kwargs).arguments)
    except (TypeError, ValueError):
        return {f"#{i}": a for i, a in enumerate(args)} | dict(kwargs)


def _other_settings(fn: Any, name: str, value: Any) -> list[Any]:
    """The values a setting could have taken instead: the other bool; a Literal's other values; the default."""
    if isinstance(value, bool):
        return [not value]
    if not isinstance(value, str):
        return []
    try:
        parameter = inspect.signature(fn).parameters[name]
    except (TypeError, ValueError, KeyError):
        return []
    options = [o for o in typing.get_args(parameter.annotation) if isinstance(o, str)]
    if isinstance(parameter.default, str):
        options.append(parameter.default)
    return [o for o in dict.fromkeys(options) if o != value]


def _join(items: list[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def call_context(impl_fn: Any, ref_fn: Any, args: tuple, kwargs: dict, got: Any, expected: Any, *,
                 rtol: float = DEFAULT_RTOL, atol: float = DEFAULT_ATOL,
                 post: Callable[[Any], Any] = lambda out: out) -> list[str]:
    """Lines that point at a mistake nobody catalogued: the inputs at the first mismatch
    (``lengths[16] = 16``), the settings by name, the mask rows that are empty, and which setting
    alone differs (re-running the call with each other value of a bool or string setting).
    ``post`` turns a raw output into what was compared."""
    named = named_arguments(ref_fn, args, kwargs)
    lines = []
    found = first_mismatch(got, expected, rtol=rtol, atol=atol)
    if found is not None:
        index, _, shape = found
        there = []
        for name, value in named.items():
            if isinstance(value, torch.Tensor) and 1 <= value.dim() <= len(shape) and tuple(value.shape) == shape[:value.dim()]:
                at = index[:value.dim()]
                shown = value.detach()[at]
                text = f"{shown.item():.6g}" if shown.dim() == 0 else _short(shown)
                there.append(f"{name}[{', '.join(map(str, at))}] = {text}")
        if there:
            lines.append(f"inputs at index {index}: {'; '.join(there)}")
    settings = {k: v for k, v in named.items() if isinstance(v, (bool, int, float, str)) and not k.startswith("#")}
    if settings:
        lines.append("settings: " + ", ".join(f"{k}={v!r}" for k, v in settings.items()))
    for name, value in named.items():
        if "mask" in name and isinstance(value, torch.Tensor) and value.dim() == 2:
            empty = [str(int(i)) for i in (value == 0).all(dim=1).nonzero().flatten()]
            if empty:
                lines.append(f"row{'s' if len(empty) > 1 else ''} {_join(empty)} of {name} {'are' if len(empty) > 1 else 'is'} "
                             "empty (no real token)")
    for name, value in settings.items():
        agree = []
        for other in _other_settings(ref_fn, name, value):
            changed = named | {name: other}
            try:
                same = compare(post(impl_fn(**{k: _clone(v) for k, v in changed.items()})),
                               post(ref_fn(**{k: _clone(v) for k, v in changed.items()})), rtol=rtol, atol=atol) is None
            except Exception:  # noqa: BLE001 - a setting that fails differently tells nothing here
                same = False
            if same:
                agree.append(f"{name}={other!r}")
        if agree:
            lines.append(f"with {_join(agree)} the output matches the reference: only {name}={value!r} differs")
    return lines


def _clone(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().clone().requires_grad_(value.requires_grad)
    if isinstance(value, np.random.Generator):
        return copy.deepcopy(value)
    if isinstance(value, (list, tuple, dict, np.ndarray)):
        return copy.deepcopy(value)
    return value


def check_call(impl: Any, ref: Any, exercise: str, *args: Any, rtol: float = DEFAULT_RTOL, atol: float = DEFAULT_ATOL,
               **kwargs: Any) -> Any:
    """Call the exercise with (copies of) these arguments and compare with the reference.

    Also fails if the learner's function modified one of its tensor inputs in place. A failure's
    message names the inputs at the first mismatch, the settings, and which setting alone differs
    (:func:`call_context`).
    """
    call = describe_call(exercise, *args, **kwargs)

    def run(fn: Callable) -> Any:
        return fn(*[_clone(a) for a in args], **{k: _clone(v) for k, v in kwargs.items()})

    def context(got: Any, expected: Any) -> list[str]:
        return call_context(getattr(impl, exercise), getattr(ref, exercise), args, kwargs, got, expected, rtol=rtol, atol=atol)

    got = check_exercise(impl, ref, exercise, run, call=call, rtol=rtol, atol=atol, context=context)
    check_inputs_untouched(impl, exercise, call, args, kwargs)
    return got


def check_inputs_untouched(impl: Any, exercise: str, call: str, args: tuple, kwargs: dict) -> None:
    """Fail if ``impl.<exercise>`` modifies one of its tensor inputs in place."""
    copies = [_clone(a) for a in args]
    kw_copies = {k: _clone(v) for k, v in kwargs.items()}
    getattr(impl, exercise)(*copies, **kw_copies)
    for i, (before, after) in enumerate(list(zip(args, copies)) + [(kwargs[k], kw_copies[k]) for k in kwargs]):
        if isinstance(before, torch.Tensor) and not torch.equal(before.detach(), after.detach()):
            raise WrongAnswer(f"{call} modified its input #{i} in place; treat inputs as read-only")
