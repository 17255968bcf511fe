"""Part 9 — agents: a language model that calls a tool over several turns, trained by RL.

Part 7 ended on a measured lesson: RL with a verifiable reward *sharpens* what the base model
can already do, but cannot add a skill it lacks (multiplication: pass@1 barely moved, pass@16
fell). What is done next is to give the model a **tool** and let it act over **several turns**:
it writes a call, the environment runs it and appends the result, the model reads it and goes
on, and only the final answer is checked. Here the tool is a calculator and the task a product
of three numbers (``workbook/agents``): ``37*8*6:`` →

    <calc>37*8</calc><result>296</result><calc>296*6</calc><result>1776</result><answer>1776</answer>

The model wrote ``<calc>37*8</calc>``, the environment wrote ``<result>296</result>`` — and that
difference is the whole of what is new. The pieces:

- **parsing the call** out of whatever text the policy wrote (never an exception);
- **a safe tool**: the policy's text is untrusted input. A calculator that calls ``eval`` runs
  ``__import__('os').system(...)``; one without bounds spends minutes on ``9**9**9``. Here: a
  tiny parser for a documented grammar, bounded in length, digits, nesting and value;
- **the environment's turn**: the turn budget, what a bad call gets back;
- **the loss mask of a multi-turn episode**: 1 on the tokens the model wrote, 0 on the tool's
  (and on episodes cut off by the budget, as Part 7's ``completion_mask``). The tool's tokens
  stay in the *context* — the model's later tokens are scored given them — but they are not the
  model's actions, so no gradient asks the model to have written them.

Given code, not an exercise: the multi-turn rollout (``workbook/agents/rollout.py``). It
samples token by token with the KV cache kept; when a turn ends with ``</calc>`` it calls *your*
:func:`tool_reply` and feeds the reply's tokens through the same cache (one forward step each,
no prefix recomputed), marking them as the tool's. What it must get right are your functions;
the rest is cache plumbing that teaches little. Read it once: it is about 150 lines.

Exercises (tests: ``pytest tests/test_part9_agents.py``):
  1. parse_tool_call   the expression of the call a turn ends with, or None; never raises
  2. calculate         the safe calculator: a parser for the grammar, bounded; errors as strings
  3. tool_reply        the environment's turn: the turn budget, the result or error it appends
  4. agent_loss_mask   1 on the model's tokens, 0 on the tool's, truncated episodes masked out

Your Part 9 calls your Part 7 (``completion_mask``) and, through the loop, your Parts 3, 5 and
7: every algorithm takes its loss, its KL and its statistics over the mask of exercise 4.

Theory: part0_theory.md, section 15.
"""

from __future__ import annotations

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from workbook.typecheck import typechecked

from .part7_reasoning import completion_mask

CALL_OPEN, CALL_CLOSE = "<calc>", "</calc>"
RESULT_OPEN, RESULT_CLOSE = "<result>", "</result>"

MAX_CHARS = 32
"""The longest expression the calculator reads (checked first: nothing else runs on a longer one)."""
MAX_DIGITS = 9
"""The most digits in one number."""
MAX_DEPTH = 4
"""The most parentheses open at once."""
MAX_VALUE = 10**12
"""The largest absolute value the calculator produces, also along the way."""

# --------------------------------------------------------------------------------------
# Parsing the call
# --------------------------------------------------------------------------------------


def parse_tool_call(turn: str) -> str | None:
    """The expression of the tool call that ``turn`` ends with, or None.

    ``turn`` is what the model wrote since the environment last spoke; the rollout calls this
    when it ends with ``</calc>``. The call's expression is the text between the **last**
    ``<calc>`` before that final ``</calc>`` and the ``</calc>``:

        "<calc>37*8</calc>"             → "37*8"
        "let me see <calc>37*8</calc>"  → "37*8"    (text before the call is the model's business)
        "<calc>1+<calc>2*3</calc>"      → "2*3"     (the last opening tag)
        "<calc></calc>"                 → ""        (an empty call: calculate() says what is wrong)
        "37*8</calc>", "<calc>37*8"     → None      (no opening tag; not ending with the closing tag)

    It is not the tool's job to judge the expression: return whatever is between the tags,
    untouched (no stripping); :func:`calculate` decides.

    Traps:
    - This runs on whatever a policy writes: it must never raise, whatever the string.
    - The *last* ``<calc>``: with the first, ``"<calc>1+<calc>2*3</calc>"`` would give
      ``"1+<calc>2*3"``.
    - Only a turn that *ends* with ``</calc>`` holds a call; a ``</calc>`` in the middle of a
      turn belongs to nothing (the rollout would have stopped there).
    """
    if not turn.endswith(CALL_CLOSE):
        return None
    body = turn[:-len(CALL_CLOSE)]
    start = body.rfind(CALL_OPEN)
    if start < 0:
        return None
    return body[start + len(CALL_OPEN):]


# --------------------------------------------------------------------------------------
# The safe calculator
# --------------------------------------------------------------------------------------


def calculate(expression: str) -> str:
    """Evaluate ``expression`` in the grammar below and return the value as text, or an error string.

        expression := term (("+" | "-") term)*
        term       := factor ("*" factor)*
        factor     := number | "(" expression ")"
        number     := 1 to MAX_DIGITS of the ASCII digits 0-9

    Nothing else: no spaces, no unary minus, no ``/`` or ``**``, no other characters. ``*``
    binds tighter than ``+`` and ``-``; both levels are left-associative (``10-2-3`` is 5).
    Leading zeros are allowed (``007`` is 7). The value is an integer, written in decimal with a
    ``-`` when negative (``3-5`` → ``"-2"``), ``"0"`` for zero.

    Every other input returns a string that starts with ``"error: "`` followed by a short reason
    in the tool's own words (which reason is yours to choose; the tests read only the prefix, that
    a reason follows it, and that the reason does not echo the expression back, whichever check
    below finds the fault — see :func:`tool_reply`). An echo is any piece of the expression of six
    characters or more, or three or more of its digits in a row (a number it holds, or part of
    one); a shorter piece is no echo, so a reason may name a limit such as 9 or 32.
    Errors, each checked so that no input costs more than microseconds:

    - longer than :data:`MAX_CHARS` characters (checked before anything else);
    - empty, a character outside ``0123456789+-*()``, or anything the grammar does not derive;
    - a number of more than :data:`MAX_DIGITS` digits;
    - more than :data:`MAX_DEPTH` parentheses open at once;
    - a value (the result or any intermediate one) with ``abs(value) > MAX_VALUE``.

    Why so strict: this runs on text a policy writes — an untrusted program. ``eval`` executes
    ``__import__('os').system('rm -rf ~')``; Python's ``**`` with no bound spends minutes and
    gigabytes on ``9**9**9``; recursion without a depth limit dies on 10,000 parentheses;
    ``int`` refuses a 5,000-digit string with an exception; ``str.isdigit`` accepts ``"٣"``.
    A policy under RL *will* find whatever the tool lets it do.

    Traps:
    - Never ``eval``/``exec`` (or ``ast.literal_eval``, which also evaluates ``2+3``): a parser.
    - Never raise: every failure is an error *string* that the model gets to read.
    - ``str.isdigit``/``\\d`` accept non-ASCII digits (``"²"``, ``"٣"``): compare with ``"0123456789"``.
    - The bound on the value applies along the way, not just at the end (``999999999*999999999-1``
      would be computed in full before a final check — cheap here, but not for an unbounded tool).
    """
    if len(expression) > MAX_CHARS:
        return "error: too long"
    if not expression:
        return "error: empty"
    if any(ch not in "0123456789+-*()" for ch in expression):
        return "error: bad character"
    s = expression

    # A recursive-descent parser, one function per rule of the grammar; each takes the position
    # to read from and returns (value, the position after what it read). A failure raises
    # ValueError with the reason, caught once below.
    def bounded(value: int) -> int:
        if abs(value) > MAX_VALUE:
            raise ValueError("too big")
        return value

    def expr(i: int, depth: int) -> tuple[int, int]:
        value, i = term(i, depth)
        while i < len(s) and s[i] in "+-":
            right, j = term(i + 1, depth)
            value, i = bounded(value + right if s[i] == "+" else value - right), j
        return value, i

    def term(i: int, depth: int) -> tuple[int, int]:
        value, i = factor(i, depth)
        while i < len(s) and s[i] == "*":
            right, i = factor(i + 1, depth)
            value = bounded(value * right)
        return value, i

    def factor(i: int, depth: int) -> tuple[int, int]:
        if i < len(s) and s[i] == "(":
            if depth == MAX_DEPTH:
                raise ValueError("too deep")
            value, i = expr(i + 1, depth + 1)
            if i >= len(s) or s[i] != ")":
                raise ValueError("syntax")
            return value, i + 1
        j = i
        while j < len(s) and s[j] in "0123456789":
            j += 1
        if j == i:
            raise ValueError("syntax")
        if j - i > MAX_DIGITS:
            raise ValueError("number too long")
        return bounded(int(s[i:j])), j

    try:
        value, end = expr(0, 0)
    except ValueError as error:
        return f"error: {error}"
    return str(value) if end == len(s) else "error: syntax"


# --------------------------------------------------------------------------------------
# The environment's turn
# --------------------------------------------------------------------------------------


def tool_reply(turn: str, calls_made: int, max_calls: int) -> str | None:
    """What the environment appends after a turn that ended with ``</calc>``, or None to end the episode.

    ``calls_made`` counts the calls of earlier turns in this episode; ``max_calls`` is the turn
    budget. Then:

    - ``calls_made >= max_calls``: the budget is spent; return None. The episode ends there,
      cut off (no answer, so reward 0: a policy must not be able to call forever);
    - else ``"<result>" + calculate(expr) + "</result>"`` with ``expr = parse_tool_call(turn)``;
      a turn with no well-formed call (``parse_tool_call`` is None) gets
      ``"<result>error: no call</result>"`` — a bad call is answered, and counts as a call.

    Why answer an error instead of ending the episode: the model reads it and may fix its call
    (a real agent's tools fail too); and the error text, like every result, is the *tool's*
    writing — never the model's input echoed back. An echo would let the policy write tokens
    into the "tool's" part of the context (``<calc><answer>1776</answer></calc>`` echoed inside a
    result) that a careless verifier then reads as the model's answer.

    Traps:
    - The budget is checked *before* the call is run: with ``max_calls=2`` the third call gets
      None, the first and second their results.
    - ``max_calls = 0`` is allowed (a tool that refuses every call: the first call ends the episode).
    """
    if calls_made >= max_calls:
        return None
    expr = parse_tool_call(turn)
    value = "error: no call" if expr is None else calculate(expr)
    return f"{RESULT_OPEN}{value}{RESULT_CLOSE}"


# --------------------------------------------------------------------------------------
# The loss mask
# --------------------------------------------------------------------------------------


@typechecked
def agent_loss_mask(
    responses: list[Int[Tensor, "_resp"]],
    by_model: list[Bool[Tensor, "_resp"]],
    eos_id: int,
    mask_truncated: bool = True,
) -> tuple[Float[Tensor, "batch resp"], Bool[Tensor, "batch"]]:
    """The loss mask of multi-turn episodes, and which of them were truncated.

    ``responses[b]`` is everything after episode b's prompt — the model's tokens and the tool's,
    interleaved, in order — and ``by_model[b]`` (same length, bool) is True where the model
    wrote the token. Returns ``(mask, truncated)`` as Part 7's :func:`completion_mask` does
    (float32 ``[batch, resp]``, right-padded to the longest episode — ``resp`` is 0 when every
    episode is empty; bool ``[batch]``), except that the tool's tokens are 0 in the mask:

        mask[b, t] = 1.0  if t < len(responses[b]) and by_model[b][t]
                           (and, with ``mask_truncated``, episode b finished with EOS)
                     0.0  otherwise

    ``truncated[b]``: episode b does not end with ``eos_id`` (cut off by the token or the turn
    budget; an empty episode never ended) — its last id decides, whoever wrote it, and an EOS
    earlier in the episode ends nothing. ``eos_id`` may be any id, 0 included (some tokenizers'
    EOS is 0). Use your ``completion_mask`` for the lengths and the truncation; then keep the
    model's tokens only.

    Why: a token the tool wrote is not an action. Training on it asks the model to *have
    written* ``<result>1776</result>`` — a policy-gradient step on the calculator's output, with
    the episode's advantage, which teaches the model to predict (or hallucinate) results instead
    of asking for them. Every framework masks them: TRL's ``tool_mask``, verifiers'
    ``completion_mask``, OpenRLHF's ``action_mask``; forgetting it is a recurring bug report.

    Traps:
    - ``by_model`` is a list of 1-D tensors of different lengths: pad it, don't stack it.
    - The tool's last token can end a truncated episode; the EOS the model writes is the model's
      (1 in the mask): its choice to stop is trained like any other.
    - Read each episode's last id from the episode itself, not from a batch padded with 0: with
      ``eos_id = 0`` the padding of an empty episode would look like its EOS.
    - ``ValueError`` if a ``by_model[b]`` is not as long as ``responses[b]`` (each row: equal totals
      are not enough) or the lists differ in length.
    """
    if len(responses) != len(by_model):
        raise ValueError(f"{len(responses)} responses but {len(by_model)} by_model flags")
    for b, (r, m) in enumerate(zip(responses, by_model)):
        if len(r) != len(m):
            raise ValueError(f"by_model[{b}] has {len(m)} flags for a response of {len(r)} tokens")
    mask, truncated = completion_mask(responses, eos_id, mask_truncated)
    model = torch.zeros(mask.shape, dtype=mask.dtype)
    for b, m in enumerate(by_model):
        model[b, :len(m)] = m.to(mask.dtype).cpu()
    return mask * model.to(mask.device), truncated
