"""The workbook in Jupyter: exercise cells that write into exercises/, check cells, training cells.

The notebooks in ``notebooks/`` are generated from the exercise files (scripts/make_notebooks.py);
``exercises/<part>.py`` stays the one graded file. A notebook's cells call this module:

    from workbook import notebook as wb
    wb.start("part1_ppo_core")          # chdir to the repository, register %%exercise, say what the file holds

    %%exercise compute_advantages       # the cell's def/class replaces the one in exercises/part1_ppo_core.py
    def compute_advantages(...): ...

    wb.check("compute_advantages")      # the exercise's pytest tests, the harness's own messages
    wb.train("cartpole", total_timesteps=50_000)   # python -m workbook cartpole --total-timesteps 50000

The write-back never loses work done elsewhere: a cell overwrites the file's version only when
that version is a stub or is what a notebook cell wrote last (remembered in notebooks/.synced.json);
otherwise the file was edited outside the notebook, nothing is written, and the cell says how to
take either version. See docs/notebooks.md.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import importlib
import io
import json
import os
import random
import shlex
import signal
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from workbook.grading import FAILING, NOT_STARTED, PASSING, TIMED_OUT, WAITING, aggregate, pytest_command, read_report
from workbook.mirror import FunctionNode, is_stub
from workbook.runs import INTERRUPTED

ROOT = Path(__file__).resolve().parent.parent
SYNCED = ROOT / "notebooks" / ".synced.json"
"""sha256 of the text each exercise cell last wrote, per part and exercise (not committed)."""
CHECK_FIRST_ENV = "WORKBOOK_CHECK_FIRST"
"""Set to N: a check runs only the first N tests of the exercise (the CI smoke run of every notebook)."""

_state = {"part": None}
last_exit_code: int | None = None
"""The exit status of the last :func:`train` (as the command line's: 0 solved, 1 not solved, 130 interrupted, ...)."""


# --- the exercise file: one top-level definition at a time ------------------------------------

def _span(node: ast.stmt) -> tuple[int, int]:
    """0-based [start, end) lines of a top-level definition, decorators included."""
    first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
    return first - 1, node.end_lineno


def definition_text(source: str, name: str) -> str | None:
    """The text of the top-level ``def``/``class`` called ``name`` in ``source`` (None if absent)."""
    lines = source.splitlines(keepends=True)
    for node in ast.parse(source).body:
        if isinstance(node, (*FunctionNode, ast.ClassDef)) and node.name == name:
            start, end = _span(node)
            return "".join(lines[start:end])
    return None


def replace_definition(source: str, name: str, text: str) -> str:
    """``source`` with the top-level definition ``name`` replaced by ``text`` (the rest kept byte for byte)."""
    lines = source.splitlines(keepends=True)
    for node in ast.parse(source).body:
        if isinstance(node, (*FunctionNode, ast.ClassDef)) and node.name == name:
            start, end = _span(node)
            return "".join(lines[:start]) + text.rstrip("\n") + "\n" + "".join(lines[end:])
    raise KeyError(name)


def functions_of(node: ast.stmt) -> dict[str, ast.FunctionDef]:
    """A top-level function as {name: node}, or a class's methods as {'Class.method': node}."""
    if isinstance(node, FunctionNode):
        return {node.name: node}
    return {f"{node.name}.{n.name}": n for n in getattr(node, "body", []) if isinstance(n, FunctionNode)}


def is_unwritten(text: str, part: str) -> bool:
    """Whether this definition is still the stub: some function is a stub and every other one is the reference's given code.

    (A method a learner wrote to equal the reference exactly counts as given: the one case where "the
    stub" could replace written work, and then only work identical to solutions/.)
    """
    reference = {}
    for node in ast.parse((ROOT / "solutions" / f"{part}.py").read_text()).body:
        reference |= functions_of(node)
    functions = functions_of(ast.parse(text).body[0])
    given = all(is_stub(f) or (name in reference and ast.dump(f) == ast.dump(reference[name]))
                for name, f in functions.items())
    return given and any(is_stub(f) for f in functions.values())


def cell_problem(cell: str, name: str) -> str | None:
    """Why ``cell`` cannot replace ``name`` in the exercise file (None when it can)."""
    try:
        tree = ast.parse(cell)
    except SyntaxError as error:
        return f"line {error.lineno}: {error.msg} (nothing was written)"
    defs = [n for n in tree.body if isinstance(n, (*FunctionNode, ast.ClassDef))]
    if len(tree.body) != 1 or len(defs) != 1 or defs[0].name != name:
        found = ", ".join(getattr(n, "name", type(n).__name__) for n in tree.body) or "nothing"
        return (f"this cell must hold exactly one definition, `{name}` (found: {found}); "
                "put helpers inside it (nothing was written)")
    return None


def _digest(text: str) -> str:
    return hashlib.sha256(text.strip().encode()).hexdigest()


def _synced() -> dict:
    try:
        return json.loads(SYNCED.read_text())
    except (OSError, ValueError):
        return {}


def _remember(part: str, name: str, text: str) -> None:
    record = _synced()
    record.setdefault(part, {})[name] = _digest(text)
    SYNCED.parent.mkdir(exist_ok=True)
    SYNCED.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")


def write_exercise(part: str, name: str, cell: str, *, overwrite: bool = False) -> tuple[str, str]:
    """Put the cell's definition of ``name`` into exercises/<part>.py when that loses nothing.

    Returns (what happened, message): ``written``, ``unchanged``, ``error``, ``file-newer`` (the file
    holds work done outside the notebook and the cell is still the stub: the file's version should
    be loaded into the cell) or ``conflict`` (both were edited; nothing written unless ``overwrite``,
    which first copies the file to exercises/<part>.py.<time>.bak).
    """
    path = ROOT / "exercises" / f"{part}.py"
    rel = path.relative_to(ROOT)
    problem = cell_problem(cell, name)
    if problem:
        return "error", f"error: {name}: {problem}"
    source = path.read_text()
    try:
        current = definition_text(source, name)
    except SyntaxError as error:
        return "error", f"error: {rel}: does not parse (line {error.lineno}: {error.msg}); fix it there first"
    if current is None:
        return "error", f"error: {name}: {rel} has no top-level `{name}`"
    if is_unwritten(cell, part) and is_unwritten(current, part):
        return "unchanged", f"{name} is a stub here and in {rel}: fill it in, run this cell, then the check below"
    if current.strip() == cell.strip():
        _remember(part, name, cell)
        return "unchanged", f"{rel} already holds this {name}"
    ours = _synced().get(part, {}).get(name) == _digest(current)
    if not (is_unwritten(current, part) or ours):
        if is_unwritten(cell, part) and not overwrite:
            return "file-newer", (f"{rel} holds a written {name} (edited outside this notebook) and this cell is "
                                  "the stub: nothing was written; the file's version is loaded into the cell")
        if not overwrite:
            return "conflict", (f"{rel} holds a different written {name} (edited outside this notebook): nothing was "
                                f"written. To keep this cell's version, run it with `%%exercise {name} --overwrite` "
                                f"(the file is backed up first); to take the file's, `%load_exercise {name}`.")
        backup = path.with_name(f"{path.name}.{time.strftime('%Y%m%d-%H%M%S')}.bak")
        n = 0
        while backup.exists():
            n += 1
            backup = path.with_name(f"{path.name}.{time.strftime('%Y%m%d-%H%M%S')}-{n}.bak")
        backup.write_text(source)
        note = f" (the previous file is in {backup.relative_to(ROOT)})"
    else:
        note = ""
    path.write_text(replace_definition(source, name, cell))
    _remember(part, name, cell)
    return "written", f"wrote {name} into {rel}{note}"


# --- checks: the exercise's pytest tests, in this process --------------------------------------

class _FirstTests:
    """pytest plugin: keep only the first ``n`` tests of each exercise (``WORKBOOK_CHECK_FIRST``)."""

    def __init__(self, n: int):
        self.n = n

    def pytest_collection_modifyitems(self, session, config, items):
        seen: dict[str, int] = {}
        keep = []
        for item in items:
            marker = item.get_closest_marker("exercise")
            key = marker.args[0] if marker else ""
            seen[key] = seen.get(key, 0) + 1
            if seen[key] <= self.n:
                keep.append(item)
        config.hook.pytest_deselected(items=[i for i in items if i not in keep])
        items[:] = keep


@contextlib.contextmanager
def _kernel_state_kept():
    """What a pytest run changes in this process, put back afterwards: threads, RNGs, signals, cwd."""
    import numpy as np
    import torch

    threads, cwd = torch.get_num_threads(), os.getcwd()
    rngs = random.getstate(), np.random.get_state(), torch.get_rng_state()
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGALRM, signal.SIGPROF)}
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        random.setstate(rngs[0]), np.random.set_state(rngs[1]), torch.set_rng_state(rngs[2])
        for s, h in handlers.items():
            if h is not None:
                signal.signal(s, h)
        os.chdir(cwd)


def _forget_graded_modules() -> None:
    """Drop the learner's modules, the test modules and the plugin, so pytest imports what is on disk now."""
    tests, exercises = ROOT / "tests", ROOT / "exercises"
    for key, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None) or ""
        if (key == "workbook.pytest_plugin" or key == "exercises" or key.startswith("exercises.") or key == "conftest"
                or (file and (Path(file).parent in (tests, exercises)))):
            del sys.modules[key]


def run_tests(part: str, exercise: str, *, impl: str = "exercises") -> tuple[list, str]:
    """Run the exercise's tests (pytest, in this process) → (grade rows, pytest's output)."""
    import pytest

    test_file = ROOT / "tests" / f"test_{part}.py"
    exercises = [n for n in _points(test_file)]
    selection = pytest_command(_row(part, exercise), exercises).split(" -k ", 1)[1].strip('"')
    first = int(os.environ.get(CHECK_FIRST_ENV) or 0)
    with tempfile.TemporaryDirectory() as tmp, _kernel_state_kept():
        report = Path(tmp) / "report.jsonl"
        args = [str(test_file), "-k", selection, f"--impl={impl}", f"--workbook-report={report}", "-q",
                "--no-header", "-p", "no:cacheprovider", "-o", "console_output_style=classic", f"--rootdir={ROOT}",
                "-c", str(ROOT / "pyproject.toml"), "--color=no", "--disable-warnings"]
        _forget_graded_modules()
        out = io.StringIO()
        os.chdir(ROOT)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            code = pytest.main(args, plugins=[_FirstTests(first)] if first > 0 else [])
        rows = [r for r in aggregate(read_report(report)) if r.exercise == exercise]
    if code == pytest.ExitCode.INTERRUPTED:
        raise KeyboardInterrupt
    return rows, out.getvalue()


def _points(test_file: Path) -> dict[str, int]:
    for node in ast.parse(test_file.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "POINTS" for t in node.targets):
            return ast.literal_eval(node.value)
    return {}


def _row(part: str, exercise: str):
    from workbook.grading import Row

    return Row(part, exercise, "", 0, 0, 0, 0)


def failures_section(output: str) -> str:
    """pytest's FAILURES section (the harness's messages), without the summaries that follow it."""
    lines, keep, out = output.splitlines(), False, []
    for line in lines:
        if line.startswith("=") and " FAILURES " in line:
            keep = True
            continue
        if keep and line.startswith("=") and line.rstrip("=").strip():
            break
        if keep:
            out.append(line)
    return "\n".join(out).strip()


def format_check(rows: list, output: str, part: str, exercise: str) -> str:
    """What a check cell prints: the status line, then (failing) the harness's messages as pytest shows them."""
    if not rows:
        tail = "\n".join(output.strip().splitlines()[-15:])
        return f"? {exercise}: no test of it ran; pytest said:\n{tail}"
    r = rows[0]
    quick = f" — quick check: the first {r.tests} test(s) only ({CHECK_FIRST_ENV})" if os.environ.get(CHECK_FIRST_ENV) else ""
    if r.status == PASSING:
        return f"✓ {exercise}: passing ({r.passed}/{r.tests} tests, {r.points}/{r.max_points} points){quick}"
    if r.status == NOT_STARTED:
        return f"· {exercise}: not started — {r.detail.removeprefix('not started: ')}"
    if r.status == WAITING:
        return f"… {exercise}: written, {r.detail} (its tests run once that is filled in)"
    head = f"✗ {exercise}: {r.status} ({r.tests - r.passed} of {r.tests} tests){quick}\n    {r.detail}"
    details = failures_section(output)
    command = pytest_command(r, list(_points(ROOT / "tests" / f"test_{part}.py")))
    return head + (f"\n\n{details}" if details else "") + f"\n\n(the same in a terminal: {command})"


def check(exercise: str, part: str | None = None, *, impl: str = "exercises") -> None:
    """Run ``exercise``'s tests on exercises/<part>.py and print what pytest and ``grade`` would say."""
    part = part or _state["part"]
    if part is None:
        raise ValueError("call wb.start(PART) first, or pass part=")
    started = time.perf_counter()
    rows, output = run_tests(part, exercise, impl=impl)
    print(format_check(rows, output, part, exercise))
    print(f"({time.perf_counter() - started:.1f} s)")


# --- training: the part's command, as a function ------------------------------------------------

def command_argv(options: dict) -> list[str]:
    """``{"total_timesteps": 50000, "full_budget": True, "set": ["a=1", "b=2"]}`` →
    ``["--total-timesteps", "50000", "--full-budget", "--set", "a=1", "--set", "b=2"]``."""
    argv = []
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            argv.append(flag)
        elif value is False:
            argv.append("--no-" + key.replace("_", "-"))
        elif key == "set":  # --set FIELD=VALUE, repeated
            for item in [value] if isinstance(value, str) else value:
                argv += [flag, str(item)]
        elif isinstance(value, (list, tuple)):  # --seeds 1 2 3
            argv += [flag, *map(str, value)]
        else:
            argv += [flag, str(value)]
    return argv


def train(command: str, *argv: str, **options) -> None:
    """Run ``python -m workbook COMMAND`` here: progress bars in the notebook, then the run's curves.

    Keyword options become command options (``total_timesteps=50_000`` → ``--total-timesteps 50000``);
    ``impl`` defaults to ``exercises``. The run folder is the command's (``runs/<name>/``). Interrupting
    the kernel is Ctrl-C: the update in progress finishes, the run is saved, and the line to resume
    it is printed (``wb.train(COMMAND, resume="runs/<name>")``). The exit status is in ``wb.last_exit_code``.
    """
    from workbook.__main__ import COMMANDS

    if command not in COMMANDS or command in ("grade", "main"):
        raise ValueError(f"unknown training command {command!r}")
    if "resume" not in options:  # a resumed run keeps the implementation it was started with
        options.setdefault("impl", "exercises")
    args = [*argv, *command_argv(options)]
    runs = Path(options.get("runs_dir", "runs"))
    before = _pngs(runs)
    print(f"$ python -m workbook {command} {shlex.join(args)}", flush=True)
    os.chdir(ROOT)
    module = importlib.import_module(COMMANDS[command][0])
    with _error_lines_wrapped():
        code = module.main(args) or 0
    shown = show_curves(runs, before)
    if code == INTERRUPTED:
        print(f'interrupted: continue it here with wb.train("{command}", resume="RUN_DIR") (the folder above)')
    if not shown and code not in (2, INTERRUPTED):
        print(f"(no curves found under {runs}/)")
    global last_exit_code
    last_exit_code = code  # not returned: a notebook would print it under the curves


ERROR_WIDTH = 88
"""Column at which a training cell's ``error: ...`` line is wrapped (a notebook wraps a long line anywhere, mid-word)."""


def wrap_error(line: str, width: int = ERROR_WIDTH) -> str:
    """An ``error: ...`` line wrapped at word boundaries, continuation lines indented (no word is ever split).

    The command line prints the error as one line; an output area of Jupyter breaks a long line at
    its right edge wherever that falls (``word-break: break-all``), so a path or an option name
    could be cut in two. Wrapped here first, every line fits an ordinary output area whole.
    """
    return textwrap.fill(line, width, subsequent_indent="    ", break_long_words=False, break_on_hyphens=False)


class _ErrorLines:
    """A text stream passing everything through, except that a line starting ``error: `` is written wrapped (:func:`wrap_error`).

    Text is held only while the line so far could still become an error line, so progress bars
    (``\\r`` updates) and other output go through at once.
    """

    PREFIX = "error: "

    def __init__(self, stream):
        self.stream, self.held, self.mid_line = stream, "", False

    def write(self, text: str) -> int:
        for piece in text.splitlines(keepends=True):
            if self.mid_line:
                self.stream.write(piece)
            else:
                line = self.held + piece
                ended = line.endswith(("\n", "\r"))
                if line.startswith(self.PREFIX) and ended:
                    self.stream.write(wrap_error(line.rstrip("\r\n")) + "\n")
                    self.held = ""
                elif line.startswith(self.PREFIX) or (self.PREFIX.startswith(line) and not ended):
                    self.held = line  # maybe an error line: wait for its end
                    continue
                else:
                    self.stream.write(line)
                    self.held = ""
            self.mid_line = not piece.endswith(("\n", "\r"))
        return len(text)

    def release(self) -> None:
        """Write what is held (an unfinished line) as it is."""
        if self.held:
            self.stream.write(self.held)
            self.held, self.mid_line = "", True
        self.stream.flush()

    def flush(self) -> None:
        self.stream.flush()

    def __getattr__(self, name):  # encoding, isatty, fileno, ...: the wrapped stream's
        return getattr(self.stream, name)


@contextlib.contextmanager
def _error_lines_wrapped():
    """sys.stdout and sys.stderr with their ``error: `` lines wrapped at word boundaries, for a training cell."""
    out, err = _ErrorLines(sys.stdout), _ErrorLines(sys.stderr)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            yield
    finally:
        out.release()
        err.release()


def see_part1(impl: str = "exercises") -> None:
    """Part 1's functions at work, drawn inline: what GAE's λ does to one episode, and the learning-rate schedule.

    One episode of 20 steps whose only reward, 1, comes at the end, and a critic that guesses 0.5
    everywhere: with λ = 0 each advantage is a one-step TD error (only the last step sees the reward),
    with λ = 1 every step gets the discounted return minus 0.5. Then ``make_optimizer``'s schedule over
    10 learning phases. Your code (``impl``), read from ``exercises/part1_ppo_core.py`` as it is now.
    """
    import torch

    _forget_graded_modules()
    module = importlib.import_module(f"{impl}.part1_ppo_core")
    steps = 20
    rewards = torch.zeros(steps, 1)
    rewards[-1] = 1.0
    values = torch.full((steps, 1), 0.5)
    terminated = torch.zeros(steps, 1, dtype=torch.bool)
    try:
        curves = {lam: module.compute_advantages(torch.zeros(1), torch.ones(1, dtype=torch.bool), rewards, values,
                                                 terminated, 0.99, lam)[:, 0].tolist() for lam in (0.0, 0.9, 1.0)}
        net = torch.nn.Linear(1, 1)
        optimizer, scheduler = module.make_optimizer(net, torch.nn.Linear(1, 1), 10, 2.5e-4, 0.0)
        lrs = [optimizer.param_groups[0]["lr"]]
        for _ in range(10):
            scheduler.step()
            lrs.append(optimizer.param_groups[0]["lr"])
    except NotImplementedError as e:
        where = e.__traceback__
        while where.tb_next is not None:
            where = where.tb_next
        print(f"· not started: {where.tb_frame.f_code.co_name} is still a stub; write it (and run its check) first")
        return
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11.5, 3.6))
    for lam, adv in curves.items():
        left.plot(range(steps), adv, marker=".", label=f"λ = {lam:g}")
    left.set(title="compute_advantages: one episode, reward 1 at the end", xlabel="step", ylabel="advantage")
    left.legend()
    right.plot(range(11), lrs, marker=".")
    right.set(title="make_optimizer's schedule: 2.5e-4 → 0 over 10 phases", xlabel="learning phases done",
              ylabel="learning rate")
    fig.tight_layout()
    plt.show()


def _pngs(runs: Path) -> dict[Path, float]:
    return {p: p.stat().st_mtime for p in runs.rglob("*.png")} if runs.is_dir() else {}


def show_curves(runs: Path, before: dict[Path, float]) -> list[Path]:
    """Display every figure under ``runs`` written since ``before`` (inline in Jupyter); their paths."""
    new = sorted(p for p, t in _pngs(runs).items() if before.get(p) != t and "wandb" not in p.parts)
    try:
        from IPython.display import Image, display
    except ImportError:
        return new
    for path in new:
        print(path)
        display(Image(filename=str(path)))
    return new


# --- Jupyter: start(), %%exercise, %load_exercise ----------------------------------------------

def status(part: str) -> str:
    """One line: which exercises exercises/<part>.py holds written, which are stubs."""
    from workbook.mirror import stubbed_functions

    path = ROOT / "exercises" / f"{part}.py"
    names = list(_points(ROOT / "tests" / f"test_{part}.py"))
    todo = {n.split(".")[0] for n in stubbed_functions(path)}
    done = [n for n in names if n not in todo]
    return (f"{path.relative_to(ROOT)}: {len(done)} of {len(names)} exercises written"
            + (f" ({', '.join(done)}): their cells load the file's version when run" if done else ""))


def start(part: str) -> None:
    """Set up a part's notebook: work from the repository root (as the CLI), register the magics, show the file's state."""
    import warnings

    if not (ROOT / "exercises" / f"{part}.py").exists():
        raise ValueError(f"no exercises/{part}.py")
    _state["part"] = part
    os.chdir(ROOT)
    warnings.filterwarnings("ignore", message=".*tqdm.autonotebook.*")
    try:
        from IPython import get_ipython
    except ImportError:
        get_ipython = None
    shell = get_ipython() if get_ipython else None
    if shell is not None:
        shell.register_magic_function(_exercise_magic, "cell", "exercise")
        shell.register_magic_function(_load_magic, "line", "load_exercise")
    print(status(part))


def _exercise_magic(line: str, cell: str) -> None:
    words = line.split()
    if not words:
        print("error: %%exercise: name the exercise, e.g. %%exercise compute_advantages")
        return
    name, overwrite = words[0], "--overwrite" in words[1:]
    part = _state["part"]
    what, message = write_exercise(part, name, cell, overwrite=overwrite)
    print(message)
    if what == "file-newer":
        _load_into_cell(part, name)
        return
    if what in ("written", "unchanged"):
        _bind(part, name)


def _load_magic(line: str) -> None:
    name = line.strip()
    _load_into_cell(_state["part"], name, replace=False)


def _load_into_cell(part: str, name: str, replace: bool = True) -> None:
    """Put the file's version of ``name`` into the current cell (Jupyter's set_next_input)."""
    from IPython import get_ipython

    text = definition_text((ROOT / "exercises" / f"{part}.py").read_text(), name)
    _remember(part, name, text)  # the notebook now holds it: running the cell again writes it back
    get_ipython().set_next_input(f"%%exercise {name}\n{text}", replace=replace)
    print("(if the cell did not change, copy it from the file; run the cell again to use it)")


def _bind(part: str, name: str) -> None:
    """Import the exercise file again and bind ``name`` in the notebook, to try it out by hand."""
    from IPython import get_ipython

    try:
        module = importlib.reload(importlib.import_module(f"exercises.{part}"))
    except Exception as error:  # a NameError at import, say: the check will show it too
        print(f"(exercises/{part}.py does not import: {type(error).__name__}: {error})")
        return
    get_ipython().user_ns[name] = getattr(module, name)
