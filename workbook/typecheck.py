"""Runtime shape and dtype checking for exercise signatures.

Every exercise is decorated with ``@typechecked``: jaxtyping reads the
``Float[Tensor, "buffer_size num_envs"]`` annotations and beartype enforces them on each
call, so a tensor of the wrong shape or dtype fails at the call with a message that names
the offending dimension, instead of broadcasting into a silently wrong number.
"""

import functools

from beartype import BeartypeConf, beartype
from jaxtyping import AbstractDtype, jaxtyped

# Accept an int where a float is annotated (gamma=1 is a fine discount factor).
_beartype = beartype(conf=BeartypeConf(is_pep484_tower=True))


def typechecked(fn):
    """Check jaxtyping shape/dtype annotations (arguments and return value) on every call.

    The checker is built at the first call, not when the module is imported: building it costs about 3 ms a
    function, and the test suite's meta-run imports a fresh copy of a part's module for each of some 600 known
    mistakes and correct alternatives, of whose functions a run calls few (about 20 CPU seconds of a run)."""
    checked = None

    @functools.wraps(fn)
    def checking(*args, **kwargs):
        __tracebackhide__ = True  # pytest shows the learner's frames, not this one
        nonlocal checked
        if checked is None:
            checked = jaxtyped(typechecker=_beartype)(fn)
        return checked(*args, **kwargs)

    return checking


class Mask(AbstractDtype):
    """A 0/1 mask in any of the dtypes masks come in: bool, integer (the int64 attention masks
    tokenizers return) or float. ``Mask[Tensor, "batch resp"]`` checks the shape like ``Float``."""

    dtypes = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64"]


def set_shape_checks(enabled: bool) -> bool:
    """Turn the runtime checks of every ``@typechecked`` function on or off; returns the previous setting.

    The training commands check the first learning phase and then turn the checks off: by
    then every shape has been seen once, and on a small network the checks cost about a
    tenth of a learning phase.
    """
    from jaxtyping import config

    before = not config.jaxtyping_disable
    config.update("jaxtyping_disable", not enabled)
    return before


def explain_type_error(error: BaseException) -> str:
    """A jaxtyping rejection in a few lines: the function, the parameter, expected vs actual, and why.

    Falls back to the first lines of jaxtyping's own message when it cannot be read.
    """
    import re

    text = str(error)
    function = re.search(r"checking the (?:parameters|return value) of ([\w.]+?)\.?$", text, re.M)
    param = re.search(r"typechecking parameter '(\w+)'", text)
    actual = re.search(r"^Actual value: (.*)$", text, re.M)
    expected = re.search(r"^Expected type: (?:<class ')?(.*?)(?:'>)?\.?$", text, re.M)
    if not (function and actual and expected):
        return "\n".join(text.strip().splitlines()[:6])
    name = function.group(1).rsplit(".", 1)[-1]
    what = f"parameter '{param.group(1)}'" if param else "the return value"
    reason = None
    cause = error.__cause__ or error.__context__
    while cause is not None and reason is None:  # beartype's violation says why, after ", as "
        found = re.search(r"violates type hint .*?, as (.*?)\.?$", str(cause), re.S)
        reason = " ".join(found.group(1).split()) if found else None
        cause = cause.__cause__ or cause.__context__
    got = actual.group(1).removesuffix("(torch)")
    lines = [f"{name}() rejected {what}: expected {expected.group(1)}, got {got}"]
    dim = re.search(r"dimension (\w+) is (\d+) which does not equal the existing value of (\d+)", text + (reason or ""))
    if reason and not dim:
        lines.append("  " + re.sub(r"(as )?expected by the type hint", "that the signature asks for", reason))
    if dim:
        axis, here, before = dim.groups()
        sources = _params_with_axis(text, axis, exclude=param.group(1) if param else None)
        origin = f" (set by {sources})" if sources else ""
        lines.append(f"  dimension {axis}: {here} here, but {before} in the earlier arguments{origin}")
    bound = re.search(r"axis annotation are as follows\.\n((?:\w+=.*\n?)+)", text)
    if bound:
        lines.append("  sizes bound so far: " + ", ".join(bound.group(1).split()))
    return "\n".join(lines)


def _params_with_axis(text: str, axis: str, exclude: str | None) -> str:
    """'next_value: f32[3]' for the earlier parameters whose annotation names ``axis``."""
    import re

    annotations = re.search(r"^Parameter annotations: \((.*)\) ->", text, re.M)
    called = dict(re.findall(r"^\s+'(\w+)': (.*?),?$", text, re.M))
    if not annotations:
        return ""
    found = []
    for pname, dims in re.findall(r"(\w+): \w+\[\w+, '([^']*)'\]", annotations.group(1)):
        if pname == exclude:
            break
        if axis in dims.split() and pname in called:
            found.append(f"{pname}: {called[pname].removesuffix('(torch)')}")
    return ", ".join(found)
