"""Known-wrong versions of the Part 9 exercises (see workbook/mistakes/__init__.py)."""

from __future__ import annotations

import re
from functools import partial

import torch

from solutions import part9_agents as _p9
from workbook.mistakes import mistake

part9 = partial(mistake, "part9_agents")

OPEN, CLOSE = _p9.CALL_OPEN, _p9.CALL_CLOSE


# --- parse_tool_call ----------------------------------------------------------------------

@part9("parse_tool_call", "first_opening_tag", "the first <calc> was taken instead of the last one before </calc>")
def parse_first_open(turn):
    if not turn.endswith(CLOSE):
        return None
    body = turn[:-len(CLOSE)]
    start = body.find(OPEN)
    return None if start < 0 else body[start + len(OPEN):]


@part9("parse_tool_call", "expression_stripped", "the expression was stripped of whitespace (it must come back untouched)")
def parse_stripped(turn):
    found = _p9.parse_tool_call(turn)
    return None if found is None else found.strip()


@part9("parse_tool_call", "raises_without_a_tag",
       "str.index was used, which raises ValueError when there is no opening tag (it must return None)")
def parse_index(turn):
    if not turn.endswith(CLOSE):
        return None
    body = turn[:-len(CLOSE)]
    return body[body.rindex(OPEN) + len(OPEN):]


@part9("parse_tool_call", "first_closing_tag",
       "the first </calc> after the opening tag closed the call, so a turn need not end with </calc>")
def parse_first_close(turn):
    start = turn.rfind(OPEN)
    if start < 0:
        return None
    end = turn.find(CLOSE, start)
    return None if end < 0 else turn[start + len(OPEN):end]


@part9("parse_tool_call", "regex_dot_misses_newlines",
       "a regex whose . does not match a line break (no re.DOTALL), and whose $ also matches before a final newline")
def parse_regex_no_dotall(turn):
    found = re.search(r"<calc>((?:(?!<calc>).)*)</calc>$", turn)
    return found.group(1) if found else None


@part9("parse_tool_call", "closing_tag_found_anywhere",
       "a turn that merely contains </calc> (not one that ends with it) was read as a call, up to its last </calc>")
def parse_contains(turn):
    end = turn.rfind(CLOSE)
    if end < 0:
        return None
    start = turn.rfind(OPEN, 0, end)
    return None if start < 0 else turn[start + len(OPEN):end]


# --- calculate ----------------------------------------------------------------------------

DIGITS = "0123456789"


class _Bad(Exception):
    pass


def _parser(*, digit=lambda ch: ch in DIGITS, max_depth=_p9.MAX_DEPTH, bound_along_the_way=True, max_value=_p9.MAX_VALUE,
            value_ok=lambda v, top: abs(v) <= top, count_digits=lambda text: len(text), right_assoc=False,
            precedence=True, depth_counts_all=False):
    """A recursive-descent calculator for the grammar with one knob per mistake (defaults: the reference's rules)."""
    def evaluate(s):
        opened = [0]

        def bounded(v):
            if bound_along_the_way and not value_ok(v, max_value):
                raise _Bad("too big")
            return v

        def expr(i, depth):
            if not precedence:  # every operator at one level, left to right
                value, i = factor(i, depth)
                while i < len(s) and s[i] in "+-*":
                    right, j = factor(i + 1, depth)
                    value = bounded(value + right if s[i] == "+" else value - right if s[i] == "-" else value * right)
                    i = j
                return value, i
            value, i = term(i, depth)
            if right_assoc:
                if i < len(s) and s[i] in "+-":
                    right, j = expr(i + 1, depth)
                    return bounded(value + right if s[i] == "+" else value - right), j
                return value, i
            while i < len(s) and s[i] in "+-":
                right, j = term(i + 1, depth)
                value, i = bounded(value + right if s[i] == "+" else value - right), j
            return value, i

        def term(i, depth):
            value, i = factor(i, depth)
            while i < len(s) and s[i] == "*":
                right, i = factor(i + 1, depth)
                value = bounded(value * right)
            return value, i

        def factor(i, depth):
            if i < len(s) and s[i] == "(":
                opened[0] += 1
                if (opened[0] if depth_counts_all else depth + 1) > max_depth:
                    raise _Bad("too deep")
                value, i = expr(i + 1, depth + 1)
                if i >= len(s) or s[i] != ")":
                    raise _Bad("syntax")
                return value, i + 1
            j = i
            while j < len(s) and digit(s[j]):
                j += 1
            if j == i:
                raise _Bad("syntax")
            if count_digits(s[i:j]) > _p9.MAX_DIGITS:
                raise _Bad("number too long")
            return bounded(int(s[i:j])), j

        value, end = expr(0, 0)
        if end != len(s):
            raise _Bad("syntax")
        if not value_ok(value, max_value):
            raise _Bad("too big")
        return str(value)

    return evaluate


def _calculator(*, allowed=lambda ch: ch in "0123456789+-*()", max_chars=_p9.MAX_CHARS, prefix="error: ", **knobs):
    evaluate = _parser(**knobs)

    def calculate(expression):
        if len(expression) > max_chars:
            return prefix + "too long"
        if not expression or not all(allowed(ch) for ch in expression):
            return prefix + "bad input"
        try:
            return evaluate(expression)
        except _Bad as e:
            return prefix + str(e)
    return calculate


@part9("calculate", "eval_based",
       "the expression was handed to eval() after a character check: eval runs whatever the policy writes")
def calc_eval(expression):
    if len(expression) > _p9.MAX_CHARS or not expression or any(ch not in "0123456789+-*()" for ch in expression):
        return "error: bad input"
    try:
        value = eval(expression, {"__builtins__": {}})  # noqa: S307 - the mistake under test
    except Exception:  # noqa: BLE001
        return "error: syntax"
    return str(value) if abs(value) <= _p9.MAX_VALUE else "error: too big"


@part9("calculate", "isdigit_accepts_unicode_digits",
       "str.isdigit (or \\d) decided what a digit is, so '٣' and '²' passed as digits")
def calc_isdigit(expression):
    return _calculator(allowed=lambda ch: ch.isdigit() or ch in "+-*()", digit=str.isdigit)(expression)


@part9("calculate", "no_bound_along_the_way",
       "only the final value was checked against MAX_VALUE, not the values along the way")
def calc_final_bound_only(expression):
    return _calculator(bound_along_the_way=False)(expression)


@part9("calculate", "minus_right_associative", "- was read right-associatively: 10-2-3 became 10-(2-3) = 11")
def calc_right_assoc(expression):
    return _calculator(right_assoc=True)(expression)


@part9("calculate", "no_precedence", "* did not bind tighter than + and -: everything was read left to right")
def calc_no_precedence(expression):
    return _calculator(precedence=False)(expression)


@part9("calculate", "depth_off_by_one", "MAX_DEPTH + 1 parentheses open at once were allowed (an off-by-one in the depth check)")
def calc_depth_plus_one(expression):
    return _calculator(max_depth=_p9.MAX_DEPTH + 1)(expression)


@part9("calculate", "depth_counts_every_parenthesis",
       "every '(' of the expression was counted toward MAX_DEPTH, not only the ones open at once")
def calc_depth_total(expression):
    return _calculator(depth_counts_all=True)(expression)


@part9("calculate", "length_checked_last",
       "the length was checked after parsing, so a million digits are read before they are refused")
def calc_length_last(expression):
    if not expression or any(ch not in "0123456789+-*()" for ch in expression):
        return "error: bad input"
    try:
        value = _parser()(expression)
    except _Bad as e:
        return f"error: {e}"
    return "error: too long" if len(expression) > _p9.MAX_CHARS else value


_ALLOWED_RUN = re.compile(r"[0-9+*()-]+")


@part9("calculate", "character_filter_before_length_check",
       "a character filter (a regex over the whole expression) ran before the length check: all 16 million characters "
       "of a hostile input were read before it was refused (C speed, but milliseconds, not microseconds)")
def calc_filter_first(expression):
    if not _ALLOWED_RUN.fullmatch(expression):  # C speed, but still a pass over the whole input
        return "error: bad character"
    return _p9.calculate(expression)


@part9("calculate", "raises_on_bad_input", "a bad expression raised an exception instead of returning an error string")
def calc_raises(expression):
    if len(expression) > _p9.MAX_CHARS:
        return "error: too long"
    if not expression or any(ch not in "0123456789+-*()" for ch in expression):
        raise ValueError(f"bad expression {expression!r}")
    try:
        return _parser()(expression)
    except _Bad as e:
        raise ValueError(str(e)) from None


@part9("calculate", "leading_zeros_rejected", "a number with a leading zero (007) was refused; the grammar allows it")
def calc_no_leading_zeros(expression):
    if re.search(r"(?<![0-9])0[0-9]", expression):
        return "error: leading zero"
    return _p9.calculate(expression)


@part9("calculate", "digits_counted_without_leading_zeros",
       "the digit bound was checked on the number's value (or without its leading zeros), so 0000000001 passed")
def calc_digits_by_value(expression):
    return _calculator(count_digits=lambda text: len(text.lstrip("0")))(expression)


@part9("calculate", "value_bound_inclusive", "abs(value) >= MAX_VALUE was refused: MAX_VALUE itself is allowed")
def calc_bound_inclusive(expression):
    return _calculator(value_ok=lambda v, top: abs(v) < top)(expression)


@part9("calculate", "length_bound_off_by_one", "an expression of exactly MAX_CHARS characters was refused")
def calc_chars_off_by_one(expression):
    return _calculator(max_chars=_p9.MAX_CHARS - 1)(expression)


@part9("calculate", "whitespace_skipped", "spaces were skipped (or the expression stripped); the grammar has none")
def calc_skips_spaces(expression):
    return _p9.calculate(re.sub(r"\s", "", expression)) if expression.strip() else _p9.calculate(expression)


@part9("calculate", "unary_minus_accepted", "a leading minus sign was read as a negative number; the grammar has no unary minus")
def calc_unary_minus(expression):
    if expression.startswith("-") and len(expression) <= _p9.MAX_CHARS:
        inner = _p9.calculate(expression[1:])
        return inner if inner.startswith("error: ") else str(-int(inner))
    return _p9.calculate(expression)


@part9("calculate", "error_prefix_without_space", 'errors started with "error:" and no space after it')
def calc_prefix(expression):
    return _calculator(prefix="error:")(expression)


@part9("calculate", "error_echoes_the_expression",
       "the error quoted the expression back: the policy's own text, tags and all, came back as the tool's reply")
def calc_echo(expression):
    out = _p9.calculate(expression)
    return f"error: cannot evaluate {expression!r}" if out.startswith("error: ") else out


_FIRST_CHECKS = ("error: too long", "error: empty", "error: bad character")


@part9("calculate", "parser_error_echoes_the_expression",
       "the parser's errors quoted the expression back (only the first checks' errors were in the tool's own words)")
def calc_parser_echo(expression):
    out = _p9.calculate(expression)
    return f"error: cannot parse {expression}" if out.startswith("error: ") and out not in _FIRST_CHECKS else out


@part9("calculate", "long_number_quoted", "the error for a number of too many digits quoted the number back")
def calc_number_echo(expression):
    out = _p9.calculate(expression)
    if out == "error: number too long":
        number = re.search(r"[0-9]{%d,}" % (_p9.MAX_DIGITS + 1), expression).group()
        return f"error: {number} has more than {_p9.MAX_DIGITS} digits"
    return out


@part9("calculate", "reason_quotes_a_number",
       "the parser's error named the number it stopped after ('unexpected symbol after the number 7352'): "
       "a piece of the expression, echoed back")
def calc_quotes_a_number(expression):
    out = _p9.calculate(expression)
    if out == "error: syntax":
        first = re.match(r"[()+*-]*([0-9]+)", expression)
        if first and len(first.group(1)) <= _p9.MAX_DIGITS:
            return f"error: unexpected symbol after the number {first.group(1)}"
    return out


@part9("calculate", "no_reason_given", "every fault was answered with the bare prefix 'error: ', no reason after it")
def calc_no_reason(expression):
    out = _p9.calculate(expression)
    return "error: " if out.startswith("error: ") else out


@part9("calculate", "too_long_quotes_the_start",
       "the error for a too-long expression quoted its first characters ('too long: 7352+...'): a piece of it, echoed back")
def calc_too_long_quotes(expression):
    out = _p9.calculate(expression)
    return f"error: too long: {expression[:5]}..." if out == "error: too long" else out


# --- tool_reply ---------------------------------------------------------------------------

def _reply(turn):
    expr = _p9.parse_tool_call(turn)
    return "<result>" + ("error: no call" if expr is None else _p9.calculate(expr)) + "</result>"


@part9("tool_reply", "budget_checked_with_greater_than",
       "the budget was checked with > instead of >=, so one call more than max_calls was answered")
def reply_gt(turn, calls_made, max_calls):
    return None if calls_made > max_calls else _reply(turn)


@part9("tool_reply", "budget_off_by_one", "calls_made + 1 >= max_calls ended the episode one call early")
def reply_early(turn, calls_made, max_calls):
    return None if calls_made + 1 >= max_calls else _reply(turn)


@part9("tool_reply", "reply_without_tags", "the calculator's answer was returned without the <result>...</result> tags")
def reply_bare(turn, calls_made, max_calls):
    if calls_made >= max_calls:
        return None
    expr = _p9.parse_tool_call(turn)
    return "error: no call" if expr is None else _p9.calculate(expr)


@part9("tool_reply", "no_call_ends_the_episode",
       "a turn without a well-formed call ended the episode (None) instead of getting an error to read")
def reply_none_for_bad_call(turn, calls_made, max_calls):
    if calls_made >= max_calls or _p9.parse_tool_call(turn) is None:
        return None
    return _reply(turn)


@part9("tool_reply", "budget_checked_after_parsing",
       "a turn without a call was answered before the budget was checked, so it got an error past the budget")
def reply_parse_first(turn, calls_made, max_calls):
    if _p9.parse_tool_call(turn) is None:
        return "<result>error: no call</result>"
    return None if calls_made >= max_calls else _reply(turn)


@part9("tool_reply", "zero_means_unlimited", "max_calls = 0 was read as 'no limit' instead of 'no calls'")
def reply_zero_unlimited(turn, calls_made, max_calls):
    return None if max_calls and calls_made >= max_calls else _reply(turn)


@part9("tool_reply", "expression_stripped_before_calculating",
       "the expression was stripped before the calculator saw it, so ' 1+1' got 2 instead of an error")
def reply_stripped(turn, calls_made, max_calls):
    if calls_made >= max_calls:
        return None
    expr = _p9.parse_tool_call(turn)
    return "<result>" + ("error: no call" if expr is None else _p9.calculate(expr.strip())) + "</result>"


@part9("tool_reply", "turn_stripped_before_parsing",
       "the turn was stripped before parse_tool_call, so '<calc>1+1</calc>\\n' (which does not end with </calc>) "
       "was answered as a call instead of 'error: no call'")
def reply_turn_stripped(turn, calls_made, max_calls):
    return None if calls_made >= max_calls else _reply(turn.strip())


# --- agent_loss_mask ----------------------------------------------------------------------

def _check(responses, by_model):
    if len(responses) != len(by_model) or any(len(r) != len(m) for r, m in zip(responses, by_model)):
        raise ValueError("by_model does not fit responses")


def _model_flags(by_model, width):
    flags = torch.zeros(len(by_model), width)
    for b, m in enumerate(by_model):
        flags[b, :len(m)] = m.float()
    return flags


@part9("agent_loss_mask", "tool_tokens_kept", "the tool's tokens were kept in the mask (Part 7's completion_mask alone)")
def mask_keeps_tool(responses, by_model, eos_id, mask_truncated=True):
    _check(responses, by_model)
    return _p9.completion_mask(responses, eos_id, mask_truncated)


@part9("agent_loss_mask", "flags_inverted", "the flags were read the other way round: 1 on the tool's tokens, 0 on the model's")
def mask_inverted(responses, by_model, eos_id, mask_truncated=True):
    _check(responses, by_model)
    return _p9.agent_loss_mask(responses, [~m for m in by_model], eos_id, mask_truncated)


@part9("agent_loss_mask", "truncation_ignored", "truncated episodes kept their model tokens although mask_truncated was set")
def mask_ignores_truncation(responses, by_model, eos_id, mask_truncated=True):
    return _p9.agent_loss_mask(responses, by_model, eos_id, False)


@part9("agent_loss_mask", "eos_masked_out", "the final EOS was left out of the mask: the model's choice to stop is its action too")
def mask_drops_eos(responses, by_model, eos_id, mask_truncated=True):
    mask, truncated = _p9.agent_loss_mask(responses, by_model, eos_id, mask_truncated)
    mask = mask.clone()
    for b, r in enumerate(responses):
        if len(r) and int(r[-1]) == eos_id:
            mask[b, len(r) - 1] = 0.0
    return mask, truncated


@part9("agent_loss_mask", "flag_ignored", "mask_truncated was ignored: truncated episodes were always masked out")
def mask_flag_ignored(responses, by_model, eos_id, mask_truncated=True):
    return _p9.agent_loss_mask(responses, by_model, eos_id, True)


@part9("agent_loss_mask", "last_token_by_model_decides_truncation",
       "an episode was called truncated only when the model wrote its last token, so one cut off in the tool's reply was kept")
def mask_tool_end_not_truncated(responses, by_model, eos_id, mask_truncated=True):
    _check(responses, by_model)
    truncated = torch.tensor([bool(len(r)) and bool(m[-1]) and int(r[-1]) != eos_id or not len(r)
                              for r, m in zip(responses, by_model)])
    width = max(len(r) for r in responses)
    mask = _model_flags(by_model, width)
    if mask_truncated:
        mask[truncated] = 0.0
    return mask, truncated


@part9("agent_loss_mask", "mask_from_token_ids", "real tokens were told from padding by their id (id 0), not by each episode's length")
def mask_by_ids(responses, by_model, eos_id, mask_truncated=True):
    mask, truncated = _p9.agent_loss_mask(responses, by_model, eos_id, mask_truncated)
    padded = torch.nn.utils.rnn.pad_sequence(list(responses), batch_first=True, padding_value=0)
    return mask * (padded != 0).float(), truncated


@part9("agent_loss_mask", "bool_mask", "the mask was returned as bool (or int), not float32")
def mask_bool(responses, by_model, eos_id, mask_truncated=True):
    mask, truncated = _p9.agent_loss_mask(responses, by_model, eos_id, mask_truncated)
    return mask.bool(), truncated


@part9("agent_loss_mask", "lengths_not_checked",
       "by_model was not checked against responses: flags that do not fit were padded or cut silently (a ValueError is due)")
def mask_unchecked(responses, by_model, eos_id, mask_truncated=True):
    return _flags_padded_or_cut(responses, by_model[:len(responses)], eos_id, mask_truncated)


def _flags_padded_or_cut(responses, by_model, eos_id, mask_truncated):
    """completion_mask's mask times each row's flags, padded with 0 or cut to the mask's width: no check."""
    mask, truncated = _p9.completion_mask(responses, eos_id, mask_truncated)
    flags = torch.zeros_like(mask)
    for b, m in enumerate(by_model):
        n = min(len(m), mask.shape[1])
        flags[b, :n] = m[:n].float()
    return mask * flags, truncated


@part9("agent_loss_mask", "lengths_checked_in_total",
       "by_model was checked against responses only in total (the sums of the lengths), so a row a flag too long "
       "beside a row a flag too short passed, its flags padded or cut silently")
def mask_total_checked(responses, by_model, eos_id, mask_truncated=True):
    if len(responses) != len(by_model) or sum(map(len, responses)) != sum(map(len, by_model)):
        raise ValueError("by_model does not fit responses")
    return _flags_padded_or_cut(responses, by_model, eos_id, mask_truncated)


@part9("agent_loss_mask", "last_id_read_from_zero_padding",
       "each episode's last id was read from the batch padded with 0 (at length − 1, clamped to 0), so with "
       "eos_id = 0 an empty episode's padding looked like its EOS: it came out finished, not truncated")
def mask_last_id_padded(responses, by_model, eos_id, mask_truncated=True):
    _check(responses, by_model)
    ids = torch.nn.utils.rnn.pad_sequence(list(responses), batch_first=True, padding_value=0)
    ids = torch.nn.functional.pad(ids, (0, 1), value=0)  # one column at least, even when every episode is empty
    lengths = torch.tensor([len(r) for r in responses])
    truncated = ids[torch.arange(len(responses)), (lengths - 1).clamp(min=0)] != eos_id
    return _mask_with(responses, by_model, eos_id, mask_truncated, truncated)


@part9("agent_loss_mask", "width_at_least_one",
       "the mask was given one column at least (max(1, longest)), so a batch of empty episodes came out [batch, 1], "
       "not [batch, 0]")
def mask_width_one(responses, by_model, eos_id, mask_truncated=True):
    mask, truncated = _p9.agent_loss_mask(responses, by_model, eos_id, mask_truncated)
    if mask.shape[1] == 0:
        mask = torch.zeros(mask.shape[0], 1)
    return mask, truncated


def _mask_with(responses, by_model, eos_id, mask_truncated, truncated, lengths=None):
    """The model's flags up to ``lengths`` (default: every token), rows of ``truncated`` zeroed with mask_truncated."""
    width = max(len(r) for r in responses)
    flags = _model_flags(by_model, width)
    for b, n in enumerate(lengths or []):
        flags[b, n:] = 0.0
    if mask_truncated:
        flags[truncated] = 0.0
    return flags, truncated


@part9("agent_loss_mask", "truncated_unless_eos_anywhere",
       "an episode was called finished when eos_id appeared anywhere in it, not only as its last token")
def mask_eos_anywhere(responses, by_model, eos_id, mask_truncated=True):
    _check(responses, by_model)
    truncated = torch.tensor([not bool((r == eos_id).any()) for r in responses])
    return _mask_with(responses, by_model, eos_id, mask_truncated, truncated)


@part9("agent_loss_mask", "mask_stops_at_the_first_eos",
       "the mask stopped at the first EOS id instead of covering the whole episode (len(responses[b]) tokens)")
def mask_first_eos(responses, by_model, eos_id, mask_truncated=True):
    _check(responses, by_model)
    truncated = torch.tensor([len(r) == 0 or int(r[-1]) != eos_id for r in responses])
    lengths = []
    for r in responses:
        hits = (r == eos_id).nonzero().flatten()
        lengths.append(int(hits[0]) + 1 if len(hits) else len(r))
    return _mask_with(responses, by_model, eos_id, mask_truncated, truncated, lengths)


@part9("agent_loss_mask", "final_eos_must_be_the_models",
       "an episode whose last id is eos_id was called truncated when the tool wrote it (the id decides, whoever wrote it)")
def mask_eos_by_model_only(responses, by_model, eos_id, mask_truncated=True):
    _check(responses, by_model)
    truncated = torch.tensor([not (len(r) and int(r[-1]) == eos_id and bool(m[-1])) for r, m in zip(responses, by_model)])
    return _mask_with(responses, by_model, eos_id, mask_truncated, truncated)
