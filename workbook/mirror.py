"""exercises/X.py must be solutions/X.py with the exercise bodies replaced by a stub.

A stub body is an optional docstring followed by ``raise NotImplementedError()``. This
module finds stubs, checks the mirror, and makes an exercise file's text from a solution
file's. Writing it is a maintainers' script (``scripts/make_stubs.py``), which first asks
:func:`written_exercises` whether the file holds a learner's work.
"""

from __future__ import annotations

import ast
import copy
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FunctionNode = (ast.FunctionDef, ast.AsyncFunctionDef)


def _is_docstring(node: ast.stmt) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)


def is_stub(fn: ast.FunctionDef) -> bool:
    body = fn.body[1:] if fn.body and _is_docstring(fn.body[0]) else fn.body
    if len(body) != 1 or not isinstance(body[0], ast.Raise) or body[0].exc is None:
        return False
    exc = body[0].exc
    target = exc.func if isinstance(exc, ast.Call) else exc
    return isinstance(target, ast.Name) and target.id == "NotImplementedError"


def _functions(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    """Top-level functions and methods of top-level classes, by dotted name."""
    out: dict[str, ast.FunctionDef] = {}
    for node in tree.body:
        if isinstance(node, FunctionNode):
            out[node.name] = node
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, FunctionNode):
                    out[f"{node.name}.{item.name}"] = item
    return out


def stubbed_functions(path: Path) -> set[str]:
    """Dotted names ('compute_advantages', 'PPOScheduler.step') whose body is a stub."""
    return {name for name, fn in _functions(ast.parse(path.read_text())).items() if is_stub(fn)}


def exercise_names(path: Path) -> set[str]:
    """Top-level names that hold at least one stub: the exercises a learner fills in."""
    return {name.split(".")[0] for name in stubbed_functions(path)}


def mirror_problems(exercise_path: Path, solution_path: Path) -> list[str]:
    """Why the exercise file is not the solution file with stubbed bodies ([] if it is)."""
    ex_tree, so_tree = ast.parse(exercise_path.read_text()), ast.parse(solution_path.read_text())
    ex_fns, so_fns = _functions(ex_tree), _functions(so_tree)
    problems = [f"{name} is only in {exercise_path.name if name in ex_fns else solution_path.name}"
                for name in sorted(set(ex_fns) ^ set(so_fns))]
    stubbed_tree = copy.deepcopy(so_tree)
    stubbed_fns = _functions(stubbed_tree)
    for name, fn in ex_fns.items():
        if name not in so_fns:
            continue
        if is_stub(fn):
            if is_stub(so_fns[name]):
                problems.append(f"{name} is a stub in {solution_path} too")
            stubbed_fns[name].body = copy.deepcopy(fn.body)
        if ast.unparse(fn.args) != ast.unparse(so_fns[name].args) or ast.dump(fn.returns or ast.Pass()) != ast.dump(
            so_fns[name].returns or ast.Pass()
        ):
            problems.append(f"{name}: signature differs between exercise and solution")
    if not problems and ast.dump(stubbed_tree) != ast.dump(ex_tree):
        for name in sorted(set(ex_fns) & set(so_fns)):
            if ast.dump(ex_fns[name]) != ast.dump(stubbed_fns[name]):
                problems.append(f"{name}: differs from the solution outside an exercise body (docstring, decorator or code)")
        problems = problems or [f"{exercise_path.name}: module-level code differs from {solution_path.name}"]
    return problems


def make_exercise_text(solution_text: str, names: set[str]) -> str:
    """The solution file with the bodies of ``names`` (dotted) replaced by a stub, text kept."""
    tree = ast.parse(solution_text)
    fns = _functions(tree)
    lines = solution_text.splitlines(keepends=True)
    missing = names - set(fns)
    if missing:
        raise KeyError(f"no such function(s) in the solution: {sorted(missing)}")
    # Replace from the bottom up so earlier line numbers stay valid.
    for name in sorted(names, key=lambda n: fns[n].lineno, reverse=True):
        fn = fns[name]
        first = fn.body[1] if _is_docstring(fn.body[0]) and len(fn.body) > 1 else fn.body[0]
        if first is fn.body[0] and _is_docstring(first):
            start = first.end_lineno  # docstring only: append after it
        else:
            start = first.lineno - 1
        indent = " " * first.col_offset
        lines[start : fn.body[-1].end_lineno] = [f"{indent}raise NotImplementedError()\n"]
    return "".join(lines)


def written_exercises(exercise_path: Path, names: set[str]) -> list[str]:
    """The functions among ``names`` (dotted) that ``exercise_path`` holds with a body that is not a stub.

    [] means the file equals its stubbed form for ``names``: replacing it loses nothing a learner
    wrote. A function missing from the file has nothing to lose either. A file that does not
    parse is someone's work in progress: every name counts as written.
    """
    if not exercise_path.exists():
        return []
    try:
        fns = _functions(ast.parse(exercise_path.read_text()))
    except SyntaxError:
        return sorted(names)
    return sorted(name for name in names if name in fns and not is_stub(fns[name]))
