"""What every command shares: one-line errors, run folders that never overwrite, wandb that never blocks.

- :class:`ConfigError` is how a command says "this setting is wrong"; :func:`command` wraps a
  command's ``main(argv)`` so that it (and any argparse error) ends as exactly one line,
  ``error: <field>: <what is wrong>``, on stderr with exit status 2 — no traceback unless
  ``--debug`` is given.
- :func:`new_run_dir` makes ``<runs_dir>/<run_name>/`` and refuses a name that already exists
  unless ``overwrite`` (``--overwrite``) is set; call it only after every setting has been
  validated, so a run that fails validation leaves no folder behind.
- :func:`stub_error` is how every training command reports a stub of the learner's that the run
  reached: ``error: --impl: <function> in exercises/<file> (Part N) is still a stub; ...``, exit
  status 2 (as a bad option: the run cannot start with that ``--impl``). A fresh run folder that
  the stub stopped before anything was trained is removed first (:func:`discard_new_run`).
  :func:`check_no_stubs` says the same before a run starts, for every stub among the functions
  the run will call (:func:`find_stubs`: known by their code, the learner's own code followed).
- :func:`start_wandb` starts a wandb run the same way everywhere: ``disabled`` and ``offline``
  never touch the network; ``online`` without an API key or without a reachable server falls
  back to ``offline`` after at most ``WANDB_INIT_TIMEOUT`` seconds (default 15) and says so in
  one line.
"""

from __future__ import annotations

import functools
import importlib
import os
import shutil
import sys
import tempfile
import traceback
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

WANDB_MODES = ("offline", "online", "disabled")
IMPLS = ("exercises", "solutions")
"""Whose code runs (``--impl``): the learner's, or the reference."""
INTERRUPTED = 130
"""The exit status after SIGINT/SIGTERM (128 + SIGINT, what shells report for Ctrl-C): every command's."""
DEFAULT_WANDB_INIT_TIMEOUT_S = 15.0


class ConfigError(Exception):
    """A bad setting: ``field`` names it (an option such as ``--runs-dir``), ``message`` says what is wrong."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def command(main: Callable[[list[str] | None], int | None]) -> Callable[[list[str] | None], int]:
    """Decorate a command's ``main(argv)``: a :class:`ConfigError` becomes one line and exit status 2, a Ctrl-C the
    command does not handle itself one line and exit status 130 (:data:`INTERRUPTED`).

    ``--debug`` anywhere in argv also prints the traceback (the parser from
    :func:`workbook.cli.make_parser` accepts the flag, so it shows in ``--help``).
    """

    @functools.wraps(main)
    def wrapper(argv: list[str] | None = None) -> int:
        argv = list(sys.argv[1:] if argv is None else argv)
        try:
            return main(argv) or 0
        except ConfigError as error:
            if "--debug" in argv:
                traceback.print_exc()
            print(f"error: {error.field}: {error.message}", file=sys.stderr, flush=True)
            return 2
        except KeyboardInterrupt:  # Ctrl-C where the command has no handler of its own (the training loops have)
            if "--debug" in argv:
                traceback.print_exc()
            print("interrupted (Ctrl-C)", file=sys.stderr, flush=True)
            return INTERRUPTED

    return wrapper


def load_part(impl: str, part: str) -> ModuleType:
    """``exercises.<part>`` or ``solutions.<part>`` (``part`` as ``"part3_rlhf"``); ValueError for another ``impl``."""
    if impl not in IMPLS:
        raise ValueError(f"--impl must be 'exercises' or 'solutions', got {impl!r}")
    return importlib.import_module(f"{impl}.{part}")


# --- run folders -------------------------------------------------------------------------

def check_run_name(run_name: str) -> None:
    """A run name is one folder name: no path separators, not empty, not '.' or '..'."""
    if not run_name or run_name in (".", "..") or "/" in run_name or os.sep in run_name:
        raise ConfigError("--run-name", f"{run_name!r} is not a folder name (no '/', not empty)")


def check_new_run_dir(runs_dir: str | Path, run_name: str, overwrite: bool, *, option: str = "--runs-dir") -> Path:
    """The run folder a run would write, after checking it may (nothing is created).

    ``option`` names the command's option for ``runs_dir`` in error messages.
    """
    check_run_name(run_name)
    runs_dir = Path(runs_dir)
    path = runs_dir / run_name
    if path.exists() and not overwrite:
        raise ConfigError("--run-name", f"{path} already exists; pick another --run-name or pass --overwrite to replace it")
    check_can_create(path, option)
    return path


def check_can_create(path: str | Path, option: str) -> None:
    """``path`` (a file or folder to be written) can be created: its nearest existing ancestor is a writable folder."""
    path = Path(path)
    existing = next(p for p in path.absolute().parents if p.exists())
    if not existing.is_dir():
        raise ConfigError(option, f"cannot create {path}: {existing} is not a directory")
    try:  # a real probe: permission bits say nothing for root, read-only mounts or /proc
        tempfile.TemporaryDirectory(dir=existing).cleanup()
    except OSError as error:
        raise ConfigError(option, f"cannot create {path}: {existing} is not writable ({error.strerror})") from None


def new_run_dir(runs_dir: str | Path, run_name: str, overwrite: bool = False, *, option: str = "--runs-dir") -> Path:
    """Create ``<runs_dir>/<run_name>/`` for a new run and return it.

    Policy: refuse unless overwrite. An existing folder of that name is an error
    (``--run-name`` in use) unless ``overwrite`` is set, in which case the old run is deleted
    first, so its metrics never mix with the new ones. Call this only after all other settings
    were validated: a run that fails validation must leave no folder behind.
    """
    path = check_new_run_dir(runs_dir, run_name, overwrite, option=option)
    try:
        if path.exists():
            shutil.rmtree(path)
        path.mkdir(parents=True)
    except OSError as error:
        raise ConfigError(option, f"cannot create {path}: {error.strerror or error}") from error
    _CREATED.add(path.resolve())
    return path


_CREATED: set[Path] = set()
"""The run folders this process created (:func:`discard_new_run` removes only those)."""


def discard_new_run(path: str | Path) -> bool:
    """Remove ``path`` if this process created it with :func:`new_run_dir` (a run that trained nothing); True if removed.

    A folder the process did not create (a resumed run, an old run that ``--overwrite`` had not yet
    replaced) is never touched.
    """
    path = Path(path)
    if path.resolve() not in _CREATED or not path.is_dir():
        return False
    shutil.rmtree(path, ignore_errors=True)
    _CREATED.discard(path.resolve())
    return True


# --- the learner's stubs -----------------------------------------------------------------

def part_title(file: str) -> str:
    """``exercises/part8_atari.py`` → ``Part 8``."""
    stem = Path(file).stem
    number = stem.removeprefix("part").split("_")[0]
    return f"Part {number}" if number.isdigit() else stem


def stub_error(impl: str, fallback_file: str, removed: Path | None = None, *,
               found: list[tuple[str, str]] | None = None) -> ConfigError:
    """The one-line error for the stub the exception being handled came from (call it in an ``except NotImplementedError``).

    It names the function (the innermost ``exercises/`` frame of the traceback), its file and part,
    and the test file that shows which are done; ``fallback_file`` when no frame is in exercises/.
    ``removed``: the empty run folder that was removed (said so, so no printed path is left dangling).
    ``found``: the stubs a check before the run found, as (file, dotted name), instead of a traceback:
    the first part's are named with their file, then the later parts' stubs.
    """
    if found:
        file = found[0][0]
        names = [name for f, name in found if f == file]
        others = sorted({f for f, _ in found if f != file}, key=lambda f: int(t.split()[-1]) if (t := part_title(f))[-1].isdigit() else 0)
        later = [f"{part_title(f)} ({', '.join(n for g, n in found if g == f)})" for f in others]
    else:
        where = [(f"exercises/{Path(frame.f_code.co_filename).name}", getattr(frame.f_code, "co_qualname", frame.f_code.co_name))
                 for frame, _ in traceback.walk_tb(sys.exc_info()[2])
                 if f"{os.sep}exercises{os.sep}" in frame.f_code.co_filename]
        file, name = where[-1] if where else (fallback_file, "an exercise")
        names, later = [name], []
    them = "it" if len(names) == 1 else "them"
    message = (f"{impl}: {', '.join(names)} in {file} ({part_title(file)}) "
               f"{'is still a stub' if len(names) == 1 else 'are still stubs'}; fill {them} in "
               f"(pytest tests/test_{Path(file).stem}.py shows which are done) or use --impl solutions")
    if later:
        message += f"; the run also reaches stubs in {' and '.join(later)}"
    if removed is not None:
        message += f"; nothing was trained, so the new run folder {removed} was removed"
    return ConfigError("--impl", message)


def is_stub_code(function) -> bool:
    """Whether ``function`` (unwrapped from decorators) only raises ``NotImplementedError``: a stub as it ships."""
    import dis
    import inspect

    code = getattr(inspect.unwrap(function), "__code__", None)
    if code is None:
        return False
    ops = [(i.opname, i.argval) for i in dis.get_instructions(code)  # ``raise NotImplementedError("...")`` too
           if i.opname not in ("RESUME", "NOP", "PRECALL", "PUSH_NULL", "CACHE", "CALL", "CALL_FUNCTION", "LOAD_CONST")]
    return len(ops) == 2 and ops[0] == ("LOAD_GLOBAL", "NotImplementedError") and ops[1][0] == "RAISE_VARARGS"


def _same_code(a, b) -> bool:
    if a.co_code != b.co_code or a.co_names != b.co_names:
        return False
    inner_a = [c for c in a.co_consts if hasattr(c, "co_code")]
    inner_b = [c for c in b.co_consts if hasattr(c, "co_code")]
    return len(inner_a) == len(inner_b) and all(_same_code(x, y) for x, y in zip(inner_a, inner_b))


def _names_used(code) -> set[str]:
    return set(code.co_names).union(*(_names_used(c) for c in code.co_consts if hasattr(c, "co_code")))


def find_stubs(impl: str, calls: dict[str, list[str]]) -> list[tuple[str, str]]:
    """The stubs a run of ``impl`` would reach, as (``exercises/<file>``, dotted name), before anything runs.

    ``calls``: per module of the part (``"part7_reasoning"``), what the run's own (given) code calls
    there: functions, methods (``"PPOTrainer.step"``) or classes (every method of theirs). A stub
    among them is found by its code (it only raises ``NotImplementedError``, as it ships). The
    learner's own code is followed too: a function that is neither a stub nor the reference's
    code leads to what it names in its part or imports from another (``from .part3_rlhf import
    masked_mean``), and a method to the methods of its class that it names. The first part's
    first; [] for ``--impl solutions``.
    """
    import importlib
    import inspect

    if impl != "exercises":
        return []
    found: list[tuple[str, str]] = []
    seen: set[tuple[str, str]] = set()
    todo = [(stem, name) for stem in sorted(calls, key=lambda s: int(s[4:].split("_")[0])) for name in calls[stem]]
    while todo:
        stem, name = todo.pop(0)
        if (stem, name) in seen:
            continue
        seen.add((stem, name))
        module, reference = importlib.import_module(f"exercises.{stem}"), importlib.import_module(f"solutions.{stem}")
        owner, ref, cls = module, reference, None
        for part in name.split("."):
            cls = owner if inspect.isclass(owner) else None
            owner, ref = getattr(owner, part, None), getattr(ref, part, None)
        if inspect.isclass(owner):  # a class: each method defined in it
            todo[:0] = [(stem, f"{name}.{m}") for m, v in vars(owner).items() if inspect.isfunction(v)]
            continue
        if not callable(owner):
            continue
        if is_stub_code(owner):
            found.append((f"exercises/{stem}.py", name))
            continue
        code, ref_code = getattr(inspect.unwrap(owner), "__code__", None), getattr(inspect.unwrap(ref), "__code__", None)
        if code is None or (ref_code is not None and _same_code(code, ref_code)):
            continue  # the reference's own code: ``calls`` already lists what it calls
        scope = getattr(inspect.unwrap(owner), "__globals__", {})
        for used in sorted(_names_used(code)):
            if cls is not None and used in vars(cls):
                todo.append((stem, f"{name.rsplit('.', 1)[0]}.{used}"))
            target = scope.get(used)
            where = getattr(target, "__module__", "") or ""
            if where.startswith("exercises.part") and (inspect.isfunction(target) or inspect.isclass(target)):
                todo.append((where.split(".")[1], getattr(target, "__qualname__", used)))
    return found


def check_no_stubs(impl: str, calls: dict[str, list[str]]) -> None:
    """ConfigError naming the stubs (:func:`find_stubs`) a run of ``impl`` would reach: before anything is loaded or written."""
    found = find_stubs(impl, calls)
    if found:
        raise stub_error(impl, found[0][0], found=found)


def cpu_name() -> str:
    """The processor's model name (Linux), else what platform knows: the machine a figure's times come from."""
    import platform

    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


# --- wandb -------------------------------------------------------------------------------

def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"


def start_wandb(mode: str, *, project: str, run_name: str, run_dir: Path, config: dict[str, Any],
                run_id: str | None = None):
    """A wandb run logging into ``run_dir/wandb``, or None for ``disabled`` (or when wandb cannot start at all).

    ``online`` falls back to ``offline`` when there is no API key or the server does not answer
    within ``WANDB_INIT_TIMEOUT`` seconds (wandb's own ``init_timeout`` setting, default 15 here),
    printing one line; ``wandb sync`` uploads the offline run later. Training never depends on wandb.
    ``run_id``: continue that wandb run (``--resume``) instead of starting a new one.
    """
    if mode not in WANDB_MODES:
        raise ConfigError("--wandb", f"{mode!r} is not one of {', '.join(WANDB_MODES)}")
    if mode == "disabled":
        return None
    os.environ.setdefault("WANDB_SILENT", "true")
    try:
        import wandb
    except ImportError as error:
        print(f"wandb: cannot import it ({_first_line(error)}); continuing without wandb", file=sys.stderr, flush=True)
        return None
    timeout = float(os.environ.get("WANDB_INIT_TIMEOUT") or DEFAULT_WANDB_INIT_TIMEOUT_S)

    def init(which: str):
        resume = {"id": run_id, "resume": "allow"} if run_id else {}
        return wandb.init(project=project, name=run_name, dir=str(run_dir), mode=which, config=config,
                          reinit="finish_previous", settings=wandb.Settings(init_timeout=timeout), **resume)

    if mode == "online":
        try:
            return init("online")
        except Exception as error:  # no API key (UsageError), no network (CommError after init_timeout), ...
            print(f"wandb: online logging unavailable ({_first_line(error)}); logging offline instead "
                  f"(upload later with `wandb sync {run_dir}/wandb/offline-run-*`)", file=sys.stderr, flush=True)
    try:
        return init("offline")
    except Exception as error:
        print(f"wandb: could not start ({_first_line(error)}); continuing without wandb", file=sys.stderr, flush=True)
        return None


def wandb_sync_line(run_dir: str | Path) -> str | None:
    """Where the offline wandb run of ``run_dir`` is and how to upload it (None when there is none)."""
    offline = sorted(Path(run_dir).glob("wandb/offline-run-*"))
    if not offline:
        return None
    where = offline[-1] if len(offline) == 1 else Path(run_dir) / "wandb" / "offline-run-*"
    return f"wandb: the offline run is in {where}; upload it with: wandb sync {where}"
