"""What every command shares: one-line errors, run folders that never overwrite, wandb that never blocks.

- :class:`ConfigError` is how a command says "this setting is wrong"; :func:`command` wraps a
  command's ``main(argv)`` so that it (and any argparse error) ends as exactly one line,
  ``error: <field>: <what is wrong>``, on stderr with exit status 2 — no traceback unless
  ``--debug`` is given.
- :func:`new_run_dir` makes ``<runs_dir>/<run_name>/`` and refuses a name that already exists
  unless ``overwrite`` (``--overwrite``) is set; call it only after every setting has been
  validated, so a run that fails validation leaves no folder behind.
- :func:`start_wandb` starts a wandb run the same way everywhere: ``disabled`` and ``offline``
  never touch the network; ``online`` without an API key or without a reachable server falls
  back to ``offline`` after at most ``WANDB_INIT_TIMEOUT`` seconds (default 15) and says so in
  one line.
"""

from __future__ import annotations

import functools
import os
import shutil
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any, Callable

WANDB_MODES = ("offline", "online", "disabled")
DEFAULT_WANDB_INIT_TIMEOUT_S = 15.0


class ConfigError(Exception):
    """A bad setting: ``field`` names it (an option such as ``--runs-dir``), ``message`` says what is wrong."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def command(main: Callable[[list[str] | None], int | None]) -> Callable[[list[str] | None], int]:
    """Decorate a command's ``main(argv)``: a :class:`ConfigError` becomes one line and exit status 2.

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

    return wrapper


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
    return path


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
