"""Correct alternatives to the Part 9 exercises (see workbook/alternatives/__init__.py).

Each is written from the exercise's docstring alone, in a style the reference does not use.
"""

from __future__ import annotations

import re
from functools import partial

import torch
from torch.nn.utils.rnn import pad_sequence

from workbook.alternatives import alternative

part9 = partial(alternative, "part9_agents")

MAX_CHARS, MAX_DIGITS, MAX_DEPTH, MAX_VALUE = 32, 9, 4, 10**12


# --- parse_tool_call ----------------------------------------------------------------------

@part9("parse_tool_call", "rpartition", "str.removesuffix and str.rpartition instead of find and slicing")
def parse_rpartition(turn):
    body = turn.removesuffix("</calc>")
    if body == turn:
        return None
    before, tag, expression = body.rpartition("<calc>")
    return expression if tag else None


_CALL = re.compile(r"<calc>((?:(?!<calc>).)*)</calc>\Z", flags=re.DOTALL)


@part9("parse_tool_call", "anchored_regex",
       "one regex: <calc>, then text holding no <calc> (DOTALL, so line breaks too), then </calc> at the very end (\\Z)")
def parse_regex(turn):
    found = _CALL.search(turn)
    return found.group(1) if found else None


# --- calculate ----------------------------------------------------------------------------

_TOKEN = re.compile(r"[0-9]+|[-+*()]", flags=re.ASCII)


@part9("calculate", "regex_tokens_then_shunting_yard",
       "a regex tokenizer, a state machine that checks the token sequence against the grammar (and the depth), "
       "then Dijkstra's shunting-yard with the bound on every operation")
def calc_shunting_yard(expression):
    if len(expression) > MAX_CHARS:
        return "error: too long"
    tokens = _TOKEN.findall(expression)
    if not tokens or "".join(tokens) != expression:  # something the tokenizer skipped: not in the grammar
        return "error: not an expression"
    # Validate: after an operand comes an operator or ")"; after an operator or "(", an operand or "(".
    want_operand, depth = True, 0
    for tok in tokens:
        if want_operand:
            if tok == "(":
                depth += 1
                if depth > MAX_DEPTH:
                    return "error: nested too deeply"
            elif tok[0].isascii() and tok[0] in "0123456789":
                if len(tok) > MAX_DIGITS:
                    return "error: number too long"
                want_operand = False
            else:
                return "error: operand expected"
        elif tok == ")":
            depth -= 1
            if depth < 0:
                return "error: unbalanced"
        elif tok in "+-*":
            want_operand = True
        else:
            return "error: operator expected"
    if want_operand or depth:
        return "error: incomplete"
    # Evaluate: all of + - * are left-associative, * binds tighter.
    rank = {"+": 1, "-": 1, "*": 2}
    values, ops = [], []

    def apply():
        op, right, left = ops.pop(), values.pop(), values.pop()
        value = left + right if op == "+" else left - right if op == "-" else left * right
        if abs(value) > MAX_VALUE:
            raise OverflowError
        values.append(value)

    try:
        for tok in tokens:
            if tok == "(":
                ops.append(tok)
            elif tok == ")":
                while ops[-1] != "(":
                    apply()
                ops.pop()
            elif tok in rank:
                while ops and ops[-1] != "(" and rank[ops[-1]] >= rank[tok]:
                    apply()
                ops.append(tok)
            else:
                values.append(int(tok))
        while ops:
            apply()
    except OverflowError:
        return "error: value too large"
    return str(values[0])


@part9("calculate", "precedence_climbing_with_an_index",
       "precedence climbing over a character index held in a small class, errors as a custom exception")
def calc_precedence_climbing(expression):
    class Fail(Exception):
        pass

    class Reader:
        def __init__(self, text):
            self.text, self.at, self.depth = text, 0, 0

        def peek(self):
            return self.text[self.at] if self.at < len(self.text) else ""

        def operand(self):
            ch = self.peek()
            if ch == "(":
                self.depth += 1
                if self.depth > MAX_DEPTH:
                    raise Fail("too deep")
                self.at += 1
                value = self.climb(1)
                if self.peek() != ")":
                    raise Fail("missing )")
                self.at += 1
                self.depth -= 1
                return value
            start = self.at
            while self.peek() != "" and self.peek() in "0123456789":
                self.at += 1
            if self.at == start or self.at - start > MAX_DIGITS:
                raise Fail("bad number")
            return int(self.text[start:self.at])

        def climb(self, lowest):
            left = self.operand()
            while self.peek() != "" and self.peek() in "+-*":
                op = self.peek()
                level = 2 if op == "*" else 1
                if level < lowest:
                    break
                self.at += 1
                right = self.climb(level + 1)  # left-associative: the right side takes only tighter operators
                left = left * right if op == "*" else left + right if op == "+" else left - right
                if not -MAX_VALUE <= left <= MAX_VALUE:
                    raise Fail("overflow")
            return left

    if len(expression) > MAX_CHARS:
        return "error: too long"
    if expression == "" or not set(expression) <= set("0123456789+-*()"):
        return "error: unexpected character"
    reader = Reader(expression)
    try:
        value = reader.climb(1)
        if reader.at != len(expression):
            raise Fail("trailing text")
    except Fail as e:
        return f"error: {e}"
    return str(value)


@part9("calculate", "python_syntax_tree_walked",
       "ast.parse (a syntax tree, never evaluated) after checking characters, digits and depth on the text; "
       "a walk that accepts only integers and + - * nodes")
def calc_ast_walk(expression):
    import ast

    if len(expression) > MAX_CHARS:
        return "error: too long"
    if not expression or any(ch not in "0123456789+-*()" for ch in expression):
        return "error: bad character"
    if any(len(run) > MAX_DIGITS for run in re.findall(r"[0-9]+", expression)):
        return "error: number too long"
    depth = deepest = 0
    for ch in expression:  # on a string the grammar derives, the most parentheses open at once
        depth += (ch == "(") - (ch == ")")
        deepest = max(deepest, depth)
    if deepest > MAX_DEPTH:
        return "error: too deep"
    # Python refuses 007 (the grammar allows it): write every number without its leading zeros first.
    text = re.sub(r"[0-9]+", lambda m: str(int(m.group())), expression)
    try:
        tree = ast.parse(text, mode="eval").body
    except SyntaxError:
        return "error: syntax"
    ops = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b}

    def walk(node):
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in ops:
            value = ops[type(node.op)](walk(node.left), walk(node.right))
            if abs(value) > MAX_VALUE:
                raise ArithmeticError("too big")
            return value
        raise ValueError("not in the grammar")  # a call, a tuple, a unary minus, ** ...

    try:
        return str(walk(tree))
    except (ArithmeticError, ValueError) as e:
        return f"error: {e}"


# --- tool_reply ---------------------------------------------------------------------------

@part9("tool_reply", "calls_left_and_fstring",
       "the budget as the number of calls left, and an f-string with the error chosen by a conditional expression")
def reply_calls_left(turn, calls_made, max_calls):
    from solutions.part9_agents import calculate, parse_tool_call

    calls_left = max_calls - calls_made
    if calls_left <= 0:
        return None
    expression = parse_tool_call(turn)
    return f"<result>{'error: no call' if expression is None else calculate(expression)}</result>"


# --- agent_loss_mask ----------------------------------------------------------------------

@part9("agent_loss_mask", "pad_sequence_vectorised",
       "truncation from the last tokens, then pad_sequence on the flags and one broadcast product; no Part 7 call")
def mask_pad_sequence(responses, by_model, eos_id, mask_truncated=True):
    if len(responses) != len(by_model) or any(r.shape[0] != m.shape[0] for r, m in zip(responses, by_model)):
        raise ValueError("every response needs one by_model flag per token")
    if not responses:
        raise ValueError("no responses")
    ended = torch.tensor([r.numel() > 0 and int(r[-1]) == eos_id for r in responses], dtype=torch.bool)
    truncated = ~ended
    flags = pad_sequence([m.to(torch.float32).cpu() for m in by_model], batch_first=True, padding_value=0.0)
    width = max(r.numel() for r in responses)
    if flags.shape[1] < width:  # every episode empty: pad_sequence gives width 0 already
        flags = torch.zeros(len(responses), width)
    keep = (ended | (not mask_truncated)).to(torch.float32)[:, None]
    device = responses[0].device
    return (flags * keep).to(device), truncated.to(device)
