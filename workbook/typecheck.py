"""Runtime shape and dtype checking for exercise signatures.

Every exercise is decorated with ``@typechecked``: jaxtyping reads the
``Float[Tensor, "buffer_size num_envs"]`` annotations and beartype enforces them on each
call, so a tensor of the wrong shape or dtype fails at the call with a message that names
the offending dimension, instead of broadcasting into a silently wrong number.
"""

from beartype import BeartypeConf, beartype
from jaxtyping import jaxtyped

# Accept an int where a float is annotated (gamma=1 is a fine discount factor).
_beartype = beartype(conf=BeartypeConf(is_pep484_tower=True))


def typechecked(fn):
    """Check jaxtyping shape/dtype annotations (arguments and return value) on every call."""
    return jaxtyped(typechecker=_beartype)(fn)
