"""Data-parallel training with ``torchrun``: the support code (Part 6 has the exercises).

    torchrun --standalone --nproc_per_node=2 -m workbook cartpole --impl solutions
    torchrun --standalone --nproc_per_node=2 -m workbook rlhf --impl solutions   # --algo grpo|rloo|dpo too
    torchrun --standalone --nproc_per_node=2 -m workbook continuous --impl solutions

``torchrun`` starts the command N times and tells each copy who it is through environment
variables (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, and where to meet: ``MASTER_ADDR`` /
``MASTER_PORT``). :func:`init` reads them and joins the process group; without them (plain
``python -m workbook …``) it initialises nothing and every helper here is a no-op, so the
single-process path is the code that always ran.

What changes with N ranks, and where:

- **Seeds.** Each rank seeds its environments / prompts / sampling with
  ``data_seed(seed, rank)`` (your Part 6); the weights start identical because rank 0's are
  broadcast to the others before the first step.
- **Gradients.** RLHF wraps its one model (policy with value head) in
  ``DistributedDataParallel`` (DDP), the engine people scale with: during ``backward()`` it
  all-reduces the gradients in buckets, overlapping the communication with the rest of
  backward, and divides by N. CartPole and Part 4 call Part 6's ``average_gradients`` —
  the same thing written by hand, one flat all-reduce — from a hook at the end of each
  backward (:func:`start_equal_and_average_gradients` says why not DDP there: an actor and a
  critic would cost two collectives per minibatch, and Part 4 calls ``actor.dist``, which
  DDP cannot see). So ``--impl exercises`` trains with your ``average_gradients``; its tests
  check it against DDP. Either way the all-reduce happens *before* gradient clipping and
  the step.
- **Batch statistics.** RLHF whitens its advantages over the global batch (Part 6's
  ``global_masked_whiten``), and the adaptive KL controller sees the global mean KL and the
  global number of samples. Logged stats are averaged over ranks. CartPole normalises
  advantages per minibatch inside Part 1's surrogate, on each rank's share (as CleanRL's
  multi-GPU script does); see part0_theory.md §11 for what that changes. Part 4's observation
  and reward-scale statistics are merged over the ranks after every rollout.
- **Outputs.** Only rank 0 prints, logs to wandb, and writes run directories, curves and
  checkpoints; the other ranks train and keep quiet.
- **Failures.** torchrun ends every rank when one dies and exits non-zero with its error; a
  rank that stays alive but stops communicating is ended by the process group's timeout
  (``WORKBOOK_DIST_TIMEOUT_S``, default 600 s) instead of hanging forever.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import datetime
import importlib
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Callable, Iterator

import torch
import torch.distributed as dist
from torch import Tensor, nn

DEFAULT_TIMEOUT_S = 600.0


def seconds_from_env(name: str, default: float) -> float:
    """A deadline set in the environment (``WORKBOOK_DIST_TIMEOUT_S``, ``WORKBOOK_SAMPLER_START_TIMEOUT_S``), or
    ``default``: a ConfigError (one line, exit status 2) unless it is a positive number of seconds."""
    value = os.environ.get(name)
    if value is None:
        return default
    try:
        seconds = float(value)
    except ValueError:
        seconds = float("nan")
    if not 0 < seconds < float("inf"):
        from workbook.runs import ConfigError

        raise ConfigError(name, f"expected a positive number of seconds, got {value!r}")
    return seconds


def world() -> tuple[int, int]:
    """``(rank, world_size)`` of this process; ``(0, 1)`` when torch.distributed is not initialised."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


@dataclass
class Context:
    """Who this process is in the job. The default is a single process (nothing initialised)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")
    """Where the statistics tensors of :meth:`mean` and friends live (CPU: gloo carries them)."""
    ops: ModuleType | None = None
    """The Part 6 module in use (``exercises`` or ``solutions``); None in a single process."""

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def data_seed(self, seed: int) -> int:
        """This rank's seed for data (environments, prompts, sampling); ``seed`` on rank 0."""
        return seed if self.ops is None else self.ops.data_seed(seed, self.rank)

    # --- collectives (no-ops in a single process) ------------------------------------------
    def mean(self, value: Any) -> Any:
        """The mean over ranks of a float, or of the float entries of a dict (same keys on every rank)."""
        if not self.enabled:
            return value
        if isinstance(value, dict):
            keys = sorted(k for k, v in value.items() if isinstance(v, float))
            t = torch.tensor([float(value[k]) for k in keys], dtype=torch.float64, device=self.device)
            dist.all_reduce(t)
            return value | dict(zip(keys, (t / self.world_size).tolist()))
        t = torch.tensor([float(value)], dtype=torch.float64, device=self.device)
        dist.all_reduce(t)
        return (t / self.world_size).item()

    def min(self, value: int) -> int:
        if not self.enabled:
            return value
        t = torch.tensor([value], dtype=torch.int64, device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MIN)
        return int(t.item())

    def gather(self, obj: Any) -> list[Any]:
        """Every rank's ``obj`` (picklable), in rank order, on every rank."""
        if not self.enabled:
            return [obj]
        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj)
        return out

    def decide(self, flag: bool) -> bool:
        """Rank 0's ``flag`` on every rank (e.g. "stop now"), so all ranks leave a loop together."""
        if not self.enabled:
            return bool(flag)
        t = torch.tensor([int(bool(flag))], device=self.device)
        dist.broadcast(t, src=0)
        return bool(t.item())

    @contextlib.contextmanager
    def main_first(self) -> Iterator[None]:
        """Rank 0 runs the block first (e.g. fills a cache), then the others."""
        if self.enabled and not self.is_main:
            dist.barrier()
        yield
        if self.enabled and self.is_main:
            dist.barrier()

    def wrap(self, module: nn.Module) -> nn.Module:
        """``DistributedDataParallel(module)`` with N ranks (broadcasts rank 0's weights), else ``module``."""
        if not self.enabled:
            return module
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(module)  # device_ids None: the module's own device (CPU or one GPU)


_context = Context()


def context() -> Context:
    """The context :func:`init` made (a single process if it was never called)."""
    return _context


def is_main() -> bool:
    return _context.is_main


class Unfinished(Exception):
    """A torchrun run needs Part 6, and the chosen implementation still has stubs there."""


def init(impl: str = "solutions", timeout_s: float | None = None) -> Context:
    """Join the process group torchrun describes, or stay a single process without it.

    Backend, chosen per tensor: gloo for CPU tensors always, and NCCL for CUDA tensors when
    CUDA is available (``"cpu:gloo,cuda:nccl"``; each rank on GPU ``LOCAL_RANK``). The CartPole
    and RLHF commands train on the CPU, so on a GPU machine they still talk over gloo; a model
    on the GPU gets NCCL. (NCCL alone would reject CPU tensors.)
    ``impl`` picks whose Part 6 (``exercises`` or ``solutions``) supplies the seeds, the
    global whitening and (CartPole, Part 4) the gradient averaging. Safe to call twice.
    """
    global _context
    if "WORLD_SIZE" not in os.environ:  # plain `python -m workbook ...`: nothing to join
        return _context
    if dist.is_initialized() and _context.ops is not None:
        return _context
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if not dist.is_initialized():
        timeout = timeout_s if timeout_s is not None else seconds_from_env("WORKBOOK_DIST_TIMEOUT_S", DEFAULT_TIMEOUT_S)
        if torch.cuda.is_available():
            torch.cuda.set_device(local_rank % torch.cuda.device_count())
        dist.init_process_group("cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo",
                                timeout=datetime.timedelta(seconds=timeout))
        atexit.register(shutdown)
    rank, world_size = dist.get_rank(), dist.get_world_size()
    device = torch.device("cpu")  # where the small statistics tensors live (gloo serves them)
    ops = importlib.import_module(f"{impl}.part6_data_parallel")
    try:
        ops.data_seed(1, rank)
        ops.global_masked_whiten(torch.ones(2), torch.ones(2))  # local only: no collective yet
        probe = nn.Parameter(torch.zeros(1))
        probe.grad = torch.ones(1)
        ops.average_gradients([probe])  # a collective, but every rank runs init together
    except NotImplementedError as error:
        raise Unfinished(f"torchrun runs use Part 6 from {impl}/part6_data_parallel.py, which still has stubs "
                         "(pytest tests/test_part6_data_parallel.py shows which); or pass --impl solutions") from error
    _context = Context(rank, world_size, local_rank, device, ops)
    return _context


def shutdown() -> None:
    """Leave the process group (registered with atexit by :func:`init`)."""
    global _context
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
    _context = Context()


# --- CartPole (Part 2) and continuous control (Part 4) ----------------------------------------------

def _local_args(args: Any, ctx: Context) -> Any:
    """This rank's PPOArgs: its data seed, and its share of ``total_timesteps`` (which counts all ranks)."""
    return dataclasses.replace(args, seed=ctx.data_seed(args.seed), total_timesteps=args.total_timesteps // ctx.world_size)


def _phase_report(trainer_class: type) -> type:
    """Part 2's PhaseReport, from the module that defines the trainer's Part 2 base class."""
    base = next(c for c in trainer_class.__mro__ if c.__name__ == "PPOTrainer")
    return sys.modules[base.__module__].PhaseReport


class _DataParallelLoop:
    """The phases loop of Part 2's ``PPOTrainer.train``, with every rank in step.

    Episodes are gathered to every rank (rank 0 logs them all), ``global_step`` counts all
    ranks, and rank 0's callback decides for everyone when to stop.
    """

    ctx: Context
    report_class: type

    def train(self, on_phase_end: Callable[[Any], bool | None] | None = None) -> None:
        ctx = self.ctx
        while self.phase < self.args.total_phases:
            episodes = [e for share in ctx.gather(self.rollout_phase()) for e in share]
            stats = self.learning_phase()
            self.phase += 1
            report = self.report_class(self.phase, self.agent.step * ctx.world_size, episodes, stats)
            stop = on_phase_end is not None and bool(on_phase_end(report))
            if ctx.decide(stop):
                break

    def equal_minibatch_count(self, minibatches: list) -> list:
        # Every optimizer step is a collective: all ranks must take the same number of them
        # (a minibatch left with < 2 transitions is skipped, which could differ by rank).
        return minibatches[:self.ctx.min(len(minibatches))]


def cartpole_trainer(module: ModuleType, args: Any) -> Any:
    """``module.PPOTrainer(args)``, data-parallel when there are several ranks.

    Per rank: ``num_envs`` environments seeded with ``data_seed``; ``total_timesteps`` counts
    the steps of all ranks together (as in CleanRL's multi-GPU script), so N ranks run
    ``1/N`` as many phases, each on an N× bigger global batch.
    """
    ctx = _context
    if not ctx.enabled:
        return module.PPOTrainer(args)

    class DataParallelPPOTrainer(_DataParallelLoop, module.PPOTrainer):
        def __init__(self) -> None:
            self.ctx, self.report_class = ctx, _phase_report(module.PPOTrainer)
            super().__init__(_local_args(args, ctx))
            start_equal_and_average_gradients([*self.actor.parameters(), *self.critic.parameters()], ctx)

        def learning_phase(self) -> dict[str, float]:
            minibatches = self.equal_minibatch_count(
                self.memory.get_minibatches(self.agent.next_value(), self.agent.next_done, self.args, self.rng))
            module.learning_phase(self.actor, self.critic, minibatches, self.optimizer, self.scheduler, self.args)
            stats = module.learning_stats(self.actor, self.critic, minibatches, self.args,
                                          self.optimizer.param_groups[0]["lr"])
            return ctx.mean(stats)

    return DataParallelPPOTrainer()


def own_running_stats(rms: Any, before: tuple[Tensor, Tensor, float]) -> tuple[float, Tensor, Tensor]:
    """``(n, mean, M2)`` of the samples a RunningMeanStd (``mean``, ``var``, ``count``) folded in since ``before``."""
    mean0, var0, n0 = before
    n = float(rms.count) - n0
    if n <= 0:
        return 0.0, torch.zeros_like(mean0), torch.zeros_like(var0)
    mean = (rms.mean * rms.count - mean0 * n0) / n
    m2 = rms.var * rms.count - var0 * n0 - (mean - mean0) ** 2 * n0 * n / rms.count
    return n, mean, m2


def merge_running_stats(rms: Any, before: tuple[Tensor, Tensor, float], ctx: Context) -> None:
    """Make a RunningMeanStd (``mean``, ``var``, ``count``) the statistics of every rank's samples.

    All ranks held ``before`` at the start of the phase and then folded in their own samples.
    Each rank's own part is recovered from the two states, the parts are gathered, and all of
    them are folded into ``before`` with the same parallel-update formula as Part 4's
    ``RunningMeanStd.update`` — so every rank ends with identical statistics.
    """
    mean0, var0, n0 = before
    total_n, total_mean, total_m2 = n0, mean0, var0 * n0
    for part_n, part_mean, part_m2 in ctx.gather(own_running_stats(rms, before)):
        if part_n <= 0:
            continue
        merged = total_n + part_n
        delta = part_mean - total_mean
        total_m2 = total_m2 + part_m2 + delta ** 2 * total_n * part_n / merged
        total_mean = total_mean + delta * part_n / merged
        total_n = merged
    rms.mean, rms.var, rms.count = total_mean, total_m2 / total_n, total_n


def start_equal_and_average_gradients(params: list[nn.Parameter], ctx: Context) -> None:
    """Give every rank rank 0's weights, then average the gradients over the ranks after every backward.

    Each parameter gets a hook that runs when backward has accumulated its gradient; the hook
    of the last one to finish calls Part 6's ``average_gradients`` on all of them: one flat
    all-reduce per backward, before the caller clips and steps. Why not DDP: it needs the
    forward calls to go through its wrapper (Part 4's objective calls ``actor.dist(obs)``),
    and it all-reduces each wrapped network separately — two collectives per minibatch for
    an actor and a critic where one will do. Each collective has a fixed latency (~1.5 ms over
    gloo on a 2-core machine, against a few ms of compute per CartPole minibatch); one
    all-reduce per parameter, our first version, made two ranks half as fast as one.
    Every parameter must take part in every backward, as all of Parts 2 and 4's do; a rank
    whose count never completed would skip the average, and the test of bit-identical weights
    across ranks would see it.
    """
    with torch.no_grad():
        for p in params:
            dist.broadcast(p, src=0)
    done = [0]

    def on_grad(_: Tensor) -> None:
        done[0] += 1
        if done[0] == len(params):
            done[0] = 0
            ctx.ops.average_gradients(params)

    for p in params:
        p.register_post_accumulate_grad_hook(on_grad)


def continuous_trainer(module: ModuleType, args: Any) -> Any:
    """Part 4's ``ContinuousPPOTrainer(args)``, data-parallel when there are several ranks.

    As :func:`cartpole_trainer`, with one addition: the running statistics of the observation
    normaliser and the reward scaler are merged over the ranks after every rollout, so every
    rank normalises the same way and the checkpoint holds statistics of all the data.
    """
    ctx = _context
    if not ctx.enabled:
        return module.ContinuousPPOTrainer(args)

    class DataParallelContinuousTrainer(_DataParallelLoop, module.ContinuousPPOTrainer):
        def __init__(self) -> None:
            self.ctx, self.report_class = ctx, _phase_report(module.ContinuousPPOTrainer)
            super().__init__(_local_args(args, ctx))
            start_equal_and_average_gradients([*self.actor.parameters(), *self.critic.parameters()], ctx)

        def running_stats(self) -> list[Any]:
            return [self.obs_normalizer.rms, self.reward_scaler.return_rms]

        def rollout_phase(self) -> list[tuple[float, int]]:
            before = [(rms.mean.clone(), rms.var.clone(), float(rms.count)) for rms in self.running_stats()]
            episodes = super().rollout_phase()
            for rms, state in zip(self.running_stats(), before):
                merge_running_stats(rms, state, ctx)
            return episodes

        def learning_phase(self) -> dict[str, float]:
            minibatches = self.equal_minibatch_count(
                self.memory.get_minibatches(self.agent.next_value(), self.agent.next_done, self.args, self.rng))
            module.learning_phase(self.actor, self.critic, minibatches, self.optimizer, self.scheduler, self.args,
                                  objective=module.compute_continuous_objective)
            stats = module.learning_stats(self.actor, self.critic, minibatches, self.args,
                                          self.optimizer.param_groups[0]["lr"], policy=self.actor.dist)
            return ctx.mean(stats | {"std": self.actor.log_std.exp().mean().item()})

    return DataParallelContinuousTrainer()


# --- RLHF (Part 3) -----------------------------------------------------------------------------

class GlobalKLController:
    """Wraps a KL controller so that ``update`` sees the KL and the sample count of *all* ranks.

    Every rank must keep the same β; with per-rank KLs each would adapt its own.
    """

    def __init__(self, inner: Any, ctx: Context) -> None:
        self.inner, self.ctx = inner, ctx

    @property
    def value(self) -> float:
        return self.inner.value

    def update(self, current: float, n_steps: int) -> None:
        # Equal batches per rank, so the mean of the ranks' means is the global mean.
        self.inner.update(self.ctx.mean(float(current)), n_steps * self.ctx.world_size)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def rlhf_trainer(trainer: Any, part3: ModuleType) -> Any:
    """Make a Part 3 ``PPOTrainer`` data-parallel in place (no-op in a single process).

    The policy (with its value head) goes into DDP at the first step; the KL controller becomes global; and
    during ``step`` Part 3's ``compute_advantages`` whitens with Part 6's
    ``global_masked_whiten`` (the name it looks up in its module is swapped for the call).
    """
    ctx = _context
    if not ctx.enabled:
        return trainer
    trainer.kl_ctl = GlobalKLController(trainer.kl_ctl, ctx)
    local_step = trainer.step

    def step(*args: Any, **kwargs: Any) -> dict[str, float]:
        if not isinstance(trainer.model, nn.parallel.DistributedDataParallel):
            # At the first step, not before: the caller may still move the model (``--device cuda``).
            trainer.model = ctx.wrap(trainer.model)
        original = part3.masked_whiten
        part3.masked_whiten = ctx.ops.global_masked_whiten
        try:
            return local_step(*args, **kwargs)
        finally:
            part3.masked_whiten = original

    trainer.step = step
    return trainer


def lm_trainer(trainer: Any) -> Any:
    """Make a Part 5 trainer (``GroupTrainer``, ``DPOTrainer``) data-parallel in place (no-op in a single process).

    Its ``model`` goes into DDP at the first step (rank 0's weights broadcast, gradients averaged
    during ``backward``, before clipping and the step). Nothing else is global: GRPO's and RLOO's
    baselines are per group and every group is sampled on one rank; DPO's loss is a mean over
    pairs, so the averaged gradient is the gradient of the global batch.
    """
    ctx = _context
    if not ctx.enabled:
        return trainer
    local_step = trainer.step

    def step(*args: Any, **kwargs: Any) -> dict[str, float]:
        if not isinstance(trainer.model, nn.parallel.DistributedDataParallel):
            trainer.model = ctx.wrap(trainer.model)  # at the first step: the caller may still move the model
        return local_step(*args, **kwargs)

    trainer.step = step
    return trainer


# --- launching (tests and benchmarks) ---------------------------------------------------------------

def torchrun(args: list[str], nproc: int = 2, *, timeout: float = 120, env: dict | None = None,
             cwd: str | None = None) -> subprocess.CompletedProcess:
    """Run ``torchrun --standalone --nproc_per_node=nproc ARGS…`` (e.g. ``["-m", "workbook", "cartpole"]``).

    After ``timeout`` seconds the job is stopped — SIGTERM to torchrun, which ends its ranks,
    then SIGKILL to its process group if it lingers — and ``subprocess.TimeoutExpired`` raised.
    """
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", *args]
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd,
                          env=dict(os.environ, OMP_NUM_THREADS="1", **(env or {})), start_new_session=True) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.terminate()  # SIGTERM: torchrun stops its workers (they run in sessions of their own)
            try:
                proc.communicate(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()
            raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


class Ranks:
    """``nproc`` processes of ``python ARGS…`` started at once, each with the environment ``torchrun --standalone``
    gives its ranks (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``,
    ``MASTER_PORT``), and no launcher: for tests that need two ranks rather than torchrun itself (Part 6's), the
    ranks start about a second and a half sooner — torchrun imports torch before it starts a rank — and the
    launcher's CPU is saved. Like torchrun, a rank that fails stops the others. :meth:`finish` waits.
    (:func:`torchrun` runs the real launcher: tests/test_data_parallel.py, the commands.)"""

    def __init__(self, args: list[str], nproc: int = 2, *, env: dict | None = None, cwd: str | None = None) -> None:
        import socket
        import tempfile

        with socket.socket() as s:  # a free port for rank 0's store (torchrun --standalone picks one the same way)
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.args, self.procs, self.logs = args, [], []
        for rank in range(nproc):
            log = tempfile.TemporaryFile("w+")  # files, not pipes: a rank writing a lot never blocks on its pipe
            rank_env = dict(os.environ, OMP_NUM_THREADS="1", **(env or {}), RANK=str(rank), LOCAL_RANK=str(rank),
                            WORLD_SIZE=str(nproc), LOCAL_WORLD_SIZE=str(nproc), MASTER_ADDR="127.0.0.1",
                            MASTER_PORT=str(port))
            self.procs.append(subprocess.Popen([sys.executable, *args], stdout=log, stderr=subprocess.STDOUT, text=True,
                                               env=rank_env, cwd=cwd, start_new_session=True))
            self.logs.append(log)

    def stop(self) -> None:
        """End every rank still running (SIGKILL)."""
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    def finish(self, timeout: float = 120) -> subprocess.CompletedProcess:
        """Wait for every rank: the job's status (the first failing rank's, else 0) and the ranks' output, each line
        prefixed with its rank, or ``subprocess.TimeoutExpired`` (every rank stopped)."""
        import time

        deadline, code = time.monotonic() + timeout, 0
        while None in [p.poll() for p in self.procs]:  # every rank polled (any() would stop at the first alive)
            code = next((p.returncode for p in self.procs if p.returncode not in (None, 0)), 0)
            if code:
                break  # as torchrun: one rank failed, the others are stopped (they may wait on it in a collective)
            if time.monotonic() > deadline:
                self.stop()
                raise subprocess.TimeoutExpired(self.args, timeout)
            time.sleep(0.02)
        code = code or next((p.returncode for p in self.procs if p.returncode != 0), 0)
        self.stop()
        output = []
        for rank, log in enumerate(self.logs):
            log.seek(0)
            output += [f"[rank {rank}] {line}" for line in log.read().splitlines(keepends=True)]
            log.close()
        return subprocess.CompletedProcess(self.args, code, "".join(output), "")
