"""Owning a run: checkpoints, resuming, stopping cleanly on Ctrl-C or a NaN, files that survive a crash.

What every training command shares (the environment commands use all of it; see
workbook/cartpole/train.py):

- :func:`save` writes a checkpoint atomically (a temporary file in the same folder, then a
  rename), so a crash or a second Ctrl-C while writing never leaves half a file where the
  last good checkpoint was; :func:`load` reads one back and turns every way it can be wrong
  (missing, truncated, written by another command, an older layout) into one
  :class:`~workbook.runs.ConfigError` line.
- :class:`StopSignals` turns SIGINT (Ctrl-C) and SIGTERM (a scheduler's stop) into a flag the
  training loop reads after each update: the update in progress finishes, then the loop
  writes its checkpoint, metrics and curves and exits with status 130. A second signal
  abandons the update at once (:class:`Abandoned`): the loop then saves the state of the last
  finished update, which it keeps in memory (:func:`snapshot`).
- :func:`first_non_finite` names the first NaN or inf in a dict of logged numbers, so a
  diverging run stops with one line naming the stat and the update instead of training on.
- :class:`AppendLog` is a JSON-lines file that is flushed after every record: what a run
  produced is on disk when it is interrupted or killed.
- :func:`rng_state` / :func:`set_rng_state` capture and restore every random generator a run
  draws from (torch, numpy's global one, Python's ``random``, and a trainer's own numpy
  ``Generator``), so a resumed run continues the same random streams.
- :func:`env_trainer_state` / :func:`restore_env_trainer` are the checkpoint of a Part 2 /
  Part 4 trainer (and any later environment part built the same way): weights, optimizer,
  learning-rate schedule position, normalisers and reward scaler, update count, steps, RNGs.
  The environments themselves are not saved: a resumed run starts fresh episodes.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import pickle
import random
import signal
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from workbook.runs import INTERRUPTED, ConfigError  # noqa: F401 — INTERRUPTED: the commands import it from here

LAYOUT = 1
"""The version of what a checkpoint holds; a checkpoint of another layout is refused (one line)."""
CHECKPOINT = "checkpoint.pt"
"""Where a run keeps the state it can be resumed from (next to ``agent.pt``, its final agent)."""
NON_FINITE = 3
"""The exit status when a NaN or inf stopped the run (2 is bad input, 1 "trained but not solved")."""


# --- files ---------------------------------------------------------------------------------------

def _temporary_next_to(path: Path) -> tuple[int, str]:
    """A new temporary file in ``path``'s folder, with the permissions an ordinary new file would get."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes it private (0600)
    return fd, tmp


def save(obj: Any, path: str | Path) -> Path:
    """``torch.save(obj, path)``, atomically: the old file stays whole until the new one is complete."""
    path = Path(path)
    fd, tmp = _temporary_next_to(path)
    try:
        with os.fdopen(fd, "wb") as file:
            torch.save(obj, file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_json(obj: Any, path: str | Path) -> Path:
    """Write ``obj`` as indented JSON, atomically (see :func:`save`)."""
    path = Path(path)
    fd, tmp = _temporary_next_to(path)
    try:
        with os.fdopen(fd, "w") as file:
            json.dump(obj, file, indent=2, default=str)
            file.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def load(path: str | Path, *, field: str = "RUN_DIR", commands: tuple[str, ...] | None = None) -> dict:
    """A checkpoint or agent file written by :func:`save`, checked; ConfigError(field, ...) if it is not one.

    ``commands``: the commands whose files the caller can use (e.g. ``("cartpole", "continuous")``);
    a file of another command is refused, naming the command that wrote it.
    """
    path = Path(path)
    if not path.is_file():
        raise ConfigError(field, f"{path} does not exist")
    try:
        state = torch.load(path, map_location="cpu", weights_only=False)
    except (EOFError, RuntimeError, pickle.UnpicklingError, zipfile.BadZipFile, OSError, ValueError) as error:
        raise ConfigError(field, f"{path} is truncated or not a checkpoint ({type(error).__name__}: "
                                 f"{(str(error).splitlines() or [''])[0][:120]})") from None
    if not isinstance(state, dict):
        raise ConfigError(field, f"{path} is not a workbook checkpoint (it holds a {type(state).__name__})")
    if "layout" not in state:
        raise ConfigError(field, f"{path} was written by an older version of the workbook (no layout number); "
                                 "it cannot be evaluated or resumed: train the run again")
    if state["layout"] != LAYOUT:
        raise ConfigError(field, f"{path} has layout {state['layout']!r}; this workbook reads layout {LAYOUT}")
    if commands is not None and state.get("command") not in commands:
        raise ConfigError(field, f"{path} was written by `python -m workbook {state.get('command')}`; "
                                 f"this reads runs of {' or '.join(commands)}")
    return state


def run_kind(run_dir: Path) -> str | None:
    """Which command wrote ``run_dir``, as far as its files tell (None if they do not)."""
    try:
        command = json.loads((run_dir / "summary.json").read_text()).get("command")
        if command:
            return str(command)
    except (OSError, ValueError, AttributeError):
        pass
    if (run_dir / "policy.pt").exists() or (run_dir / "samples.jsonl").exists():
        return "rlhf"
    return None


def load_run(run_dir: str | Path, field: str, commands: tuple[str, ...], files: tuple[str, ...] = (CHECKPOINT,)
             ) -> dict:
    """The first of ``files`` that ``run_dir`` holds, loaded with :func:`load`; one ConfigError line otherwise.

    Each way a folder can be wrong gets its own message: it does not exist, it is a run of
    another command, it has none of the files (a run of an older workbook, or not a run).
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ConfigError(field, f"{run_dir} is not a run folder (it does not exist)" if not run_dir.exists()
                          else f"{run_dir} is a file; give the run's folder")
    kind = run_kind(run_dir)
    if kind is not None and kind not in commands:
        raise ConfigError(field, f"{run_dir} is a run of `python -m workbook {kind}`; "
                                 f"this reads runs of {' or '.join(commands)}")
    for name in files:
        if (run_dir / name).exists():
            return load(run_dir / name, field=field, commands=commands)
    if kind is not None:
        raise ConfigError(field, f"{run_dir} is a run of `python -m workbook {kind}` written by an older version of the "
                                 f"workbook (it has no {' or '.join(files)}): it cannot be evaluated or resumed")
    found = ", ".join(sorted(p.name for p in run_dir.iterdir())[:6]) or "nothing"
    raise ConfigError(field, f"{run_dir} has no {' or '.join(files)} (it holds {found}): not a run of "
                             f"{' or '.join(commands)}, or one written by an older workbook")


class AppendLog:
    """A JSON-lines file, one record per line, flushed after every record (nothing waits in a buffer).

    ``keep(record) -> bool``: when given, the existing lines are first cut to those it keeps
    (a resumed run drops the lines written after its checkpoint, so none is counted twice).
    """

    def __init__(self, path: str | Path, keep: Any = None):
        self.path = Path(path)
        if keep is not None and self.path.exists():
            lines = [line for line in self.path.read_text().splitlines() if line.strip()]
            kept = []
            for line in lines:
                try:
                    if keep(json.loads(line)):
                        kept.append(line)
                except json.JSONDecodeError:  # a line cut short by a crash
                    pass
            self.path.write_text("".join(line + "\n" for line in kept))
        self.file = self.path.open("a")

    def write(self, record: dict) -> None:
        self.file.write(json.dumps(record) + "\n")
        self.file.flush()

    def close(self) -> None:
        self.file.close()

    def __enter__(self) -> "AppendLog":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


# --- stopping -------------------------------------------------------------------------------------

class Abandoned(Exception):
    """A second SIGINT/SIGTERM: the update in progress is abandoned."""


class StopSignals:
    """While active, SIGINT and SIGTERM ask the training loop to stop instead of killing it.

    The first signal sets :attr:`requested` (the signal's name) and prints one line; the loop
    reads it after each update. The second raises :class:`Abandoned` wherever the program is.
    Inside :func:`stop_at_once` (an evaluation: nothing to finish, no update to wait for) the first
    signal raises :class:`Abandoned` at once. Outside the main thread (where Python cannot install
    handlers) it does nothing.
    """

    current: "StopSignals | None" = None
    """The innermost active instance (what :func:`stop_at_once` switches)."""

    def __init__(self, message: str | None = "stopping after this update (press Ctrl-C again to stop now)"):
        self.message = message
        self.requested: str | None = None
        self.at_once = False
        self._previous: dict[int, Any] = {}
        self._outer: StopSignals | None = None

    def _handle(self, signum: int, frame: Any) -> None:
        if self.requested is not None or self.at_once:
            self.requested = self.requested or signal.Signals(signum).name
            raise Abandoned(signal.Signals(signum).name)
        self.requested = signal.Signals(signum).name
        if self.message:
            print(f"\n{self.requested}: {self.message}", file=sys.stderr, flush=True)

    def __enter__(self) -> "StopSignals":
        try:
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)
        except ValueError:  # not the main thread
            self._previous.clear()
        self._outer, StopSignals.current = StopSignals.current, self
        return self

    def __exit__(self, *exc: Any) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()
        StopSignals.current = self._outer


@contextlib.contextmanager
def stop_at_once():
    """While inside, the first SIGINT/SIGTERM raises :class:`Abandoned` at once (under an active :class:`StopSignals`).

    For an evaluation: it has no update to finish, so "stopping after this iteration" would only
    mean "after the whole evaluation, and then one more iteration".
    """
    stop = StopSignals.current
    if stop is None:
        yield
        return
    before, stop.at_once = stop.at_once, True
    try:
        yield
    finally:
        stop.at_once = before


class NonFinite(Exception):
    """A NaN or inf in a loss, a gradient norm, a weight or a logged stat."""

    def __init__(self, stat: str, value: float, update: int):
        super().__init__(f"{stat} = {value} at update {update}")
        self.stat, self.value, self.update = stat, value, update


def first_non_finite(values: dict[str, Any], allowed_nan: tuple[str, ...] = ()) -> tuple[str, float] | None:
    """``(name, value)`` of the first entry that is a non-finite number, else None.

    ``allowed_nan``: names that may legitimately be NaN (e.g. explained variance when every
    return of the batch is equal); an inf there still counts.
    """
    for name, value in values.items():
        if isinstance(value, torch.Tensor):
            if value.numel() != 1:
                continue
            value = value.item()
        if isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isfinite(value):
            if math.isnan(value) and name in allowed_nan:
                continue
            return name, float(value)
    return None


def non_finite_weights(*modules: torch.nn.Module) -> tuple[str, float] | None:
    """``("weights/<name>", value)`` for the first parameter holding a NaN or inf, else None."""
    for module in modules:
        for name, p in module.named_parameters():
            bad = ~torch.isfinite(p.detach())
            if bad.any():
                return f"weights/{name}", float(p.detach()[bad].flatten()[0])
    return None


# --- random generators -----------------------------------------------------------------------------

def rng_state(generator: np.random.Generator | None = None) -> dict:
    """Every random generator's state: torch (CPU, and CUDA when used), numpy's global, Python's, ``generator``."""
    state = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    if generator is not None:
        state["generator"] = generator.bit_generator.state
    return state


def set_rng_state(state: dict, generator: np.random.Generator | None = None) -> None:
    """Restore what :func:`rng_state` captured (``generator`` in place)."""
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    if generator is not None and "generator" in state:
        generator.bit_generator.state = state["generator"]


# --- environment trainers (Parts 2 and 4) -----------------------------------------------------------

def cloned(obj: Any) -> Any:
    """A copy of nested dicts, lists and tuples whose tensors are cloned (what ``state_dict()`` shares with the
    live model); 20× faster than ``copy.deepcopy`` on an optimizer's state, which matters once per update."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().clone()
    if isinstance(obj, dict):
        return {k: cloned(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(cloned(v) for v in obj) if not hasattr(obj, "_fields") else obj
    if isinstance(obj, np.ndarray):
        return obj.copy()
    return obj


def env_trainer_state(trainer: Any) -> dict:
    """Everything a Part 2 / Part 4 trainer needs to continue, except its environments (copied).

    Reads ``actor``, ``critic``, ``optimizer``, ``scheduler.n_step_calls``, ``phase``,
    ``agent.step``, ``rng`` and, where the trainer has them, ``obs_normalizer`` and
    ``reward_scaler`` (both with ``state_dict()``).
    """
    state = {"actor": trainer.actor.state_dict(), "critic": trainer.critic.state_dict(),
             "optimizer": trainer.optimizer.state_dict(),
             "scheduler_steps": int(trainer.scheduler.n_step_calls),
             "phase": int(trainer.phase), "agent_step": int(trainer.agent.step),
             "rng": rng_state(trainer.rng)}  # fresh objects already
    for name in ("obs_normalizer", "reward_scaler"):
        if getattr(trainer, name, None) is not None:
            state[name] = getattr(trainer, name).state_dict()
    return {k: v if k == "rng" else cloned(v) for k, v in state.items()}


def restore_env_trainer(trainer: Any, state: dict, episode_seed: int) -> None:
    """Load :func:`env_trainer_state` into a freshly built trainer and start new episodes.

    The learning-rate schedule continues where it was: the scheduler has taken ``phase`` steps
    and the optimizer's rate is the schedule's value there — the trainer's own scheduler
    (built with its ``args.learning_rate``) writes it, so a resume that lowers the rate (after
    a NaN) continues the same linear schedule from the lower start. The environments are reset
    with ``episode_seed``; the first observation is normalised with the restored statistics
    without being counted (they continue exactly as saved), and the reward scaler's running
    returns start at zero with the new episodes.
    """
    trainer.actor.load_state_dict(state["actor"])
    trainer.critic.load_state_dict(state["critic"])
    trainer.optimizer.load_state_dict(state["optimizer"])  # Adam's moments and step counts (and the old rate)
    trainer.phase = state["phase"]
    steps = state["scheduler_steps"]
    if steps == 0:
        for group in trainer.optimizer.param_groups:
            group["lr"] = trainer.args.learning_rate
    else:  # the schedule's own formula sets the rate after `steps` phases
        trainer.scheduler.n_step_calls = steps - 1
        trainer.scheduler.step()
    normalizer = getattr(trainer, "obs_normalizer", None)
    if normalizer is not None:
        normalizer.load_state_dict(state["obs_normalizer"])
    scaler = getattr(trainer, "reward_scaler", None)
    if scaler is not None:
        scaler.load_state_dict(state["reward_scaler"])
        scaler.returns = torch.zeros_like(scaler.returns)
    agent = trainer.agent
    obs, _ = agent.envs.reset(seed=episode_seed)
    obs = torch.as_tensor(obs, dtype=torch.float32)
    agent.next_obs = normalizer(obs, update=False) if normalizer is not None else obs
    agent.next_done = torch.zeros(agent.envs.num_envs, dtype=torch.bool)
    agent.step = state["agent_step"]
    set_rng_state(state["rng"], trainer.rng)


def episode_seed(seed: int, phase: int) -> int:
    """The environments' reset seed when a run resumes after ``phase`` updates (new episodes, reproducibly)."""
    return int(np.random.SeedSequence([seed, phase]).generate_state(1)[0])


# --- language-model algorithms (Parts 3 and 5) -----------------------------------------------------

def lm_algorithm_state(algo: Any) -> dict:
    """What a loop algorithm (``workbook/loop/algorithms.py``) needs to continue exactly (copied).

    Duck-typed: the policy's weights (``algo.policy``, never a DDP wrapper), its trainer's
    optimizer, every ``torch.Generator`` the algorithm or its trainer keeps (minibatch order,
    DPO's pair order), and the KL controller's β where there is one.
    """
    trainer = algo.trainer
    state = {"policy": cloned(algo.policy.state_dict()), "optimizer": cloned(trainer.optimizer.state_dict()),
             "generators": {f"{owner}.{name}": value.get_state()
                            for owner, obj in (("algo", algo), ("trainer", trainer))
                            for name, value in vars(obj).items() if isinstance(value, torch.Generator)}}
    if getattr(trainer, "kl_ctl", None) is not None:
        state["kl_coef"] = float(trainer.kl_ctl.value)
    return state


def restore_lm_algorithm(algo: Any, state: dict, learning_rate: float | None = None) -> None:
    """Load :func:`lm_algorithm_state` into a freshly built algorithm; ``learning_rate`` replaces the saved one."""
    trainer = algo.trainer
    algo.policy.load_state_dict(state["policy"])
    trainer.optimizer.load_state_dict(state["optimizer"])
    if learning_rate is not None:
        for group in trainer.optimizer.param_groups:
            group["lr"] = learning_rate
    for key, value in state["generators"].items():
        owner, name = key.split(".", 1)
        getattr(algo if owner == "algo" else trainer, name).set_state(value)
    if "kl_coef" in state:
        controller = getattr(trainer.kl_ctl, "inner", trainer.kl_ctl)  # under torchrun, a GlobalKLController wraps it
        controller.value = state["kl_coef"]
