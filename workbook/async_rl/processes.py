"""Sampler processes beside the learner (given code): ``--samplers N``, on torch.distributed (gloo).

    python -m workbook reason --impl solutions --samplers 1            # fixed lag 1: reproducible
    python -m workbook reason --impl solutions --samplers 1 --lag 2 --free-running

The command's process is the **learner**, rank 0; it starts N **samplers**, ranks 1..N (spawned
processes: each imports the workbook afresh and gets a copy of the model, the tokenizer and the
task). They talk only by messages over the process group's point-to-point sends, in order:

1. The learner sends every sampler the weights of version 0 (a flat float32 vector), then
   **orders**: "sample batch j" with its prompts. Batch j goes to sampler ``j mod N + 1``.
   It orders batch j as soon as the version that may sample it exists: fixed lag K, when
   ``sampling_version(j, K)`` (your Part 10) has been sent; ``--free-running``, while
   ``may_sample(j, newest version, K)``.
2. A sampler handles its messages in the order they were sent: weights → load them; order →
   sample the batch with the weights it holds, score it, compute its own log-probs, and send
   back (batch, scores, log-probs, the version that made them, its random stream's state).
   Because the learner sends version v before the orders it allows, the stream itself is the
   schedule: batch j is sampled by version max(0, j − K) whatever the timing — the run is
   reproducible. ``--free-running``: before each batch a sampler first takes every message
   that has already arrived (newer weights, if any): fresher, but timing decides which
   version samples what, so not reproducible.
3. The learner trains on batch it (from sampler ``it mod N + 1``), then sends the new weights
   (version it + 1) to every sampler, and the orders they allow. Sends never wait for the
   receiver (``isend``): sampling and learning overlap.
4. At the end, or on Ctrl-C, the learner sends "stop"; samplers exit; the learner waits for them.

Samplers are spawned (a fresh interpreter each); ``WORKBOOK_SAMPLER_START=forkserver`` forks them from a
server process instead, which starts them in milliseconds once it runs (tests/stress_async_faults.py
starts a hundred).

Faults: every receive has a deadline (``WORKBOOK_DIST_TIMEOUT_S``, default 600 s; a sampler's start has
``WORKBOOK_SAMPLER_START_TIMEOUT_S``, by default the same) and a peer
that dies closes the connection, so no one waits forever. A sampler killed, one that raises,
one stopped by a signal, or one that exits before it has joined the group (the learner watches
the processes while it waits for them) becomes one line on the learner (:class:`SamplingStopped`), which
saves its last good checkpoint; ``--resume`` sends the samplers their random streams and the
weight versions still to be used, so a fixed-lag run resumes exactly. Samplers ignore the
terminal's Ctrl-C until their batch is sent (the learner decides when everyone stops) and die
with the learner (``PR_SET_PDEATHSIG`` on Linux).
"""

from __future__ import annotations

import contextlib
import copy
import datetime
import importlib
import io
import pickle
import os
import signal
import queue
import sys
import tempfile
import threading
import time
import traceback
from collections import deque
from pathlib import Path
from types import ModuleType

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import Tensor, nn

from workbook.async_rl.sampler import Sampled, Sampler, flat_weights, load_part10
from workbook.distributed import DEFAULT_TIMEOUT_S, seconds_from_env

POLL_S = 0.002
"""How often a waiting receive looks for its message (and lets a signal handler run)."""


def timeout_s() -> float:
    return seconds_from_env("WORKBOOK_DIST_TIMEOUT_S", DEFAULT_TIMEOUT_S)


def start_timeout_s() -> float:
    """How long the learner waits for a spawned sampler to join: ``WORKBOOK_SAMPLER_START_TIMEOUT_S``, by default
    the receive's deadline. A start is a fresh interpreter importing torch and loading the model — seconds on a
    busy machine, minutes for a large model — so one who shortens the receive's deadline to hear of a hang sooner
    (a test, a debugging session) can keep this one long."""
    return seconds_from_env("WORKBOOK_SAMPLER_START_TIMEOUT_S", timeout_s())


class SamplingStopped(Exception):
    """Sampling cannot go on: ``status`` is "interrupted" (a sampler was stopped by a signal) or "failed"."""

    def __init__(self, status: str, line: str):
        super().__init__(line)
        self.status, self.line = status, line


class PeerGone(Exception):
    """The other side of a receive died or sent nothing before the deadline."""


class PeerSilent(PeerGone):
    """The other side sent nothing before the deadline: it may still be running (stopped, or stuck)."""


# --- messages: any picklable object, as a size then bytes -----------------------------------

def _pack(obj) -> Tensor:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return torch.frombuffer(bytearray(buffer.getvalue()), dtype=torch.uint8)


def _unpack(data: Tensor):
    return torch.load(io.BytesIO(data.numpy().tobytes()), weights_only=False)


class Outbox:
    """Sends that never wait for the receiver (``isend``); a thread waits on each to release its tensors in order."""

    def __init__(self):
        self.sent: queue.Queue = queue.Queue()
        threading.Thread(target=self._reap, daemon=True, name="outbox").start()

    def _reap(self) -> None:
        while True:
            work, _tensor = self.sent.get()
            try:
                work.wait()
            except RuntimeError:
                pass  # the receiver is gone; its Inbox (or the process's exit) says so
            self.sent.task_done()

    def send(self, obj, dst: int) -> None:
        """Send ``obj`` to ``dst``; if ``dst`` is gone, drop it: the receive from ``dst`` says what happened to it."""
        data = _pack(obj)
        size = torch.tensor([data.numel()], dtype=torch.int64)
        for tensor in (size, data):
            try:
                self.sent.put((dist.isend(tensor, dst), tensor))
            except RuntimeError:  # gloo knows the connection closed: the receiver was killed, or stopped by itself
                return

    def flush(self, seconds: float) -> None:
        """Wait (at most ``seconds``) until everything sent has been received."""
        deadline = time.monotonic() + seconds
        while self.sent.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(POLL_S)


class Inbox:
    """Messages from one peer, in order: a thread receives them (gloo's receives make progress only while
    waited on); :meth:`poll` takes one without waiting, :meth:`get` with a deadline."""

    def __init__(self, src: int):
        self.src = src
        self.arrived: queue.Queue = queue.Queue()
        self.thread = threading.Thread(target=self._receive, daemon=True, name=f"inbox-{src}")
        self.thread.start()

    def _receive(self) -> None:
        while True:
            try:
                size = torch.zeros(1, dtype=torch.int64)
                dist.irecv(size, src=self.src).wait()  # the process group's timeout bounds it
                data = torch.empty(int(size.item()), dtype=torch.uint8)
                dist.irecv(data, src=self.src).wait()
            except Exception as error:  # the peer died, the deadline passed, or the group is being torn down
                self.arrived.put(PeerGone((str(error).splitlines() or [type(error).__name__])[0][-200:]))
                return
            self.arrived.put(_unpack(data))

    def _take(self, message):
        if isinstance(message, PeerGone):
            self.arrived.put(message)  # every later receive says the same
            raise message
        return message

    def poll(self):
        """The next message if it has arrived, else None."""
        try:
            return self._take(self.arrived.get_nowait())
        except queue.Empty:
            return None

    def get(self, seconds: float, stop=lambda: False):
        """The next message; PeerGone after ``seconds`` without one; None as soon as ``stop()`` is true."""
        deadline = time.monotonic() + seconds
        while True:
            if stop():
                return None
            try:
                return self._take(self.arrived.get(timeout=min(0.05, max(0.0, deadline - time.monotonic()))))
            except queue.Empty:
                if time.monotonic() >= deadline:
                    raise PeerSilent(f"nothing received for {seconds:g} s") from None


class _ModulePickler(pickle.Pickler):
    """Pickles a module (a task's ``part7``, say) as the import that gives it back."""

    def reducer_override(self, obj):
        if isinstance(obj, ModuleType):
            return importlib.import_module, (obj.__name__,)
        return NotImplemented


def _freeze(obj) -> bytes:
    buffer = io.BytesIO()
    _ModulePickler(buffer).dump(obj)
    return buffer.getvalue()


def core_blocks(processes: int, threads: int) -> list[set[int]] | None:
    """Cores of their own for each process (the learner's first), ``threads`` each, when there are enough; else None.

    Why: left to the scheduler, the learner's and the samplers' threads hop between the same cores
    and evict each other's caches; on the 2-core machine that made both a half slower (a sampler's
    batch 0.67 s instead of 0.45 s). An inference engine and a trainer have GPUs of their own, too.
    """
    if not hasattr(os, "sched_getaffinity"):
        return None
    cores = sorted(os.sched_getaffinity(0))
    if processes * threads > len(cores):
        return None
    return [set(cores[i * threads:(i + 1) * threads]) for i in range(processes)]


def _store(port: int = 0) -> dist.TCPStore:
    """The rendezvous: the learner's (``port`` 0: a free one, the store's ``port``), or a sampler's connection to it."""
    return dist.TCPStore("127.0.0.1", port, is_master=not port, timeout=datetime.timedelta(seconds=timeout_s()),
                         wait_for_workers=False)


def _join(store: dist.Store, rank: int, world_size: int) -> None:
    world = getattr(dist.distributed_c10d, "_world", None)  # torch's registry of process groups
    count = getattr(world, "group_count", None)
    try:
        dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size,
                                timeout=datetime.timedelta(seconds=timeout_s()))
    except BaseException:
        # A failed join still counted a group, and the next run of this process (a notebook's, a test's) would
        # then wait for the keys of another group than its samplers', until the deadline: the count put back.
        if count is not None:
            world.group_count = count
        raise


# --- a sampler process -------------------------------------------------------------------------

def _on_stop_signals() -> list[str]:
    """SIGINT/SIGTERM only set a flag: the sampler finishes the batch in hand, then tells the learner.

    (A spawned sampler ignores Ctrl-C until then: :func:`_ignoring_ctrl_c`.)"""
    stop: list[str] = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda signum, frame: stop.append(signal.Signals(signum).name))
    return stop


@contextlib.contextmanager
def _ignoring_ctrl_c():
    """SIGINT ignored meanwhile, in the main thread (elsewhere the handler cannot be changed: nothing is)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def sampler_main(rank: int, world_size: int, port: int, setup: dict) -> None:
    """What a spawned sampler process runs (``setup``: the model, tokenizer, task and settings the learner gave it)."""
    stop = _on_stop_signals()
    try:  # die with the learner, even if it is killed (Linux)
        import ctypes

        ctypes.CDLL("libc.so.6").prctl(1, signal.SIGKILL)
    except (OSError, AttributeError):
        pass
    torch.set_num_threads(setup["threads"])
    if setup["cores"]:
        os.sched_setaffinity(0, setup["cores"])
    try:
        store = _store(port)
        store.set(f"joining/{rank}", "")  # what the learner waits for, watching that no sampler exits first
        _join(store, rank, world_size)  # first: from here on, whatever fails is told to the learner (not a silent exit)
    except Exception as error:  # the learner is gone, or never joined before the deadline: nothing to tell anyone
        print(f"sampler {rank}: could not join the learner ({type(error).__name__}); exiting", file=sys.stderr, flush=True)
        os._exit(1)
    _serve(rank, setup, stop)
    sys.stdout.flush()
    os._exit(0)  # no teardown: its receiving thread may still wait inside gloo, and the learner may already be gone


def serve_sampler(args, lm: nn.Module, tok, task, *, chunk: int) -> None:
    """A torchrun rank ≥ 1 of a ``--samplers N`` job: a sampler (the command built its model, tokenizer and task)."""
    stop = _on_stop_signals()
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=timeout_s()))  # where torchrun says
    setup = {"lm": lm, "tok": tok, "task": task, "impl": args.impl, "dtype": args.sampler_dtype,
             "max_new_tokens": args.max_new_tokens, "temperature": args.temperature, "chunk": chunk,
             "free_running": args.free_running}
    _serve(dist.get_rank(), setup, stop)
    sys.stdout.flush()
    os._exit(0)  # as a spawned sampler: its receiving thread may still wait on the learner, which is ending too


def _serve(rank: int, setup: dict, stop: list[str]) -> None:
    """A sampler's loop (module docstring, step 2): messages from the learner in order; batches back."""
    inbox, outbox, orders = Inbox(0), Outbox(), deque()
    try:
        if "frozen" in setup:  # a spawned sampler: a task whose class a fresh process cannot import fails here
            setup |= pickle.loads(Path(setup.pop("frozen")).read_bytes())
        start = inbox.get(timeout_s(), stop=lambda: bool(stop))
        if stop:  # Ctrl-C before the first batch: said as at any other time
            outbox.send({"kind": "stopping", "signal": stop[0]}, 0)
        if start is None or start["kind"] != "start" or stop:
            outbox.flush(5.0)
            return
        generator = torch.Generator()
        generator.set_state(start["generator"])
        sampler = Sampler(setup["lm"], setup["tok"], setup["task"], impl=setup["impl"], dtype=setup["dtype"],
                          max_new_tokens=setup["max_new_tokens"], temperature=setup["temperature"], chunk=setup["chunk"],
                          generator=generator)
        def take(message) -> bool:
            """Weights are loaded, an order queued; False for "stop"."""
            if message["kind"] == "stop":
                return False
            if message["kind"] == "weights":
                sampler.load(message["weights"], message["version"])
            else:
                orders.append(message)
            return True

        while True:
            message = None if orders else inbox.get(timeout_s(), stop=lambda: bool(stop))
            if stop:
                outbox.send({"kind": "stopping", "signal": stop[0]}, 0)
                break
            if message is not None and not take(message):
                break
            if setup["free_running"]:  # take every message already here first: the newest weights
                while orders and (message := inbox.poll()) is not None:
                    if not take(message):
                        break
                if message is not None and message["kind"] == "stop":
                    break
            if orders:
                order = orders.popleft()
                sampled = sampler.sample(order["prompts"], order["index"])
                outbox.send({"kind": "batch", "sampled": sampled, "generator": generator.get_state()}, 0)
    except PeerGone as error:  # the learner is gone: nothing to tell anyone
        print(f"sampler {rank}: the learner is gone ({error}); exiting", file=sys.stderr, flush=True)
    except Exception as error:  # the task's code, or the learner's Part 3/10, raised here: tell the learner
        try:
            outbox.send({"kind": "error", "line": f"{type(error).__name__}: {error}", "traceback": traceback.format_exc()}, 0)
        except RuntimeError:
            pass
    outbox.flush(5.0)


# --- the learner's side -----------------------------------------------------------------------

class RemoteSampling:
    """The learner's end of ``--samplers N``: starts the samplers, orders batches, sends weights, receives batches.

    ``prompts_of(j)``: batch j's prompts; ``start``: the first iteration (a resumed run's);
    ``saved``: a checkpoint's sampling state (versions still to be used, each sampler's random stream).
    """

    def __init__(self, args, lm: nn.Module, tok, task, *, prompts_of, chunk: int, data_seed: int, start: int,
                 saved: dict | None = None):
        self.part10, self.n, self.lag, self.free = load_part10(args.impl), args.samplers, args.lag, args.free_running
        self.iterations, self.prompts_of, self.start = args.iterations, prompts_of, start
        self.versions: dict[int, Tensor] = dict(saved["versions"]) if saved else {0: flat_weights(lm)}
        # Sampler r's stream: the data seed for the first (so one sampler draws what the synchronous run draws).
        self.streams = dict(saved["streams"]) if saved else {
            r: torch.Generator().manual_seed(data_seed + 1_000_003 * (r - 1)).get_state() for r in range(1, self.n + 1)}
        self.procs, self.ranks, self.inboxes, self.outbox, self.store = {}, range(1, self.n + 1), {}, None, None
        self.unanswering: set[int] = set()  # samplers that missed a deadline: close() kills them without waiting again
        self.closed = False
        try:
            self._start(args, lm, tok, task, chunk)
        except BaseException:  # whatever stops the start (a stub of Part 10, Ctrl-C): no process, thread or group left
            self.close()
            raise

    def _start(self, args, lm: nn.Module, tok, task, chunk: int) -> None:
        if "WORLD_SIZE" in os.environ:  # torchrun started every rank: ranks 1..N are samplers already
            dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=timeout_s()))
        else:  # start them here, one spawned process each
            # The learner holds the rendezvous, so that it waits for the samplers in slices and sees one exit before
            # it joins (a crash while it imports, SIGKILL): init_process_group's own wait would last its deadline.
            self.store, world = _store(), self.n + 1
            context = mp.get_context(os.environ.get("WORKBOOK_SAMPLER_START", "spawn"))
            # The model, tokenizer and task go through a file, not the spawn's arguments: those are written into a
            # pipe that the parent holds both ends of until the child has read them, so a payload over the pipe's
            # 64 KiB, with a child that dies while it starts (a crash while importing, SIGKILL), blocks start() forever.
            with tempfile.NamedTemporaryFile(prefix="workbook-sampler-", suffix=".pkl", delete=False) as f:
                f.write(_freeze({"lm": copy.deepcopy(lm).cpu().requires_grad_(False), "tok": tok, "task": task}))
            self.frozen = frozen = f.name
            self.cores_before = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
            blocks = core_blocks(self.n + 1, args.threads)
            for r in self.ranks:
                setup = {"frozen": frozen, "impl": args.impl, "dtype": args.sampler_dtype,
                         "max_new_tokens": args.max_new_tokens, "temperature": args.temperature, "chunk": chunk,
                         "threads": args.threads, "free_running": self.free, "cores": blocks[r] if blocks else None}
                self.procs[r] = context.Process(target=sampler_main, args=(r, world, self.store.port, setup), daemon=True,
                                                name=f"sampler-{r}")
                # Started with Ctrl-C ignored (the one disposition a new interpreter inherits): a Ctrl-C while it
                # imports is the learner's to act on, not a KeyboardInterrupt traceback from the sampler at random.
                # (Ignored here too for the milliseconds of the start: the learner's own handler is back at once.)
                with _ignoring_ctrl_c():
                    self.procs[r].start()
            self._wait_for_samplers()
            try:
                _join(self.store, 0, world)  # each sampler is joining too (a few ms)
            except Exception as error:  # the group's deadline passed: one said it was joining, then did not
                self._not_joined(error)
            if blocks:
                os.sched_setaffinity(0, blocks[0])
        self.outbox, self.inboxes = Outbox(), {r: Inbox(r) for r in self.ranks}
        for r in self.ranks:
            self.outbox.send({"kind": "start", "generator": self.streams[r]}, r)
        self.ordered = self.start  # the next batch to order
        newest = max(self.versions)
        for version in (sorted(self.versions) if not self.free else [newest]):
            self._send_weights(version)

    def _wait_for_samplers(self) -> None:
        """Until every sampler is about to join the group; :class:`SamplingStopped` as soon as one has exited, or
        once one has not come within the start's deadline (:func:`start_timeout_s`). (One that dies in the
        milliseconds between saying so and joining costs the group's deadline, the join itself being one call;
        :meth:`_not_joined` then names it.)"""
        keys, deadline = [f"joining/{r}" for r in self.ranks], time.monotonic() + start_timeout_s()
        while not self.store.check(keys):
            for r in self.ranks:
                exited = self.procs[r].exitcode is not None
                if exited or (time.monotonic() > deadline and not self.store.check([f"joining/{r}"])):
                    fate = self._fate(r, "not joined", grace_s=0.0 if exited else 0.1)  # close() kills one still there
                    if self.procs[r].exitcode is None:  # stopped, or stuck while it starts
                        raise SamplingStopped("failed", f"sampler {r} (pid {self.procs[r].pid}) did not join the learner "
                                                        f"within {start_timeout_s():g} s (WORKBOOK_SAMPLER_START_TIMEOUT_S)")
                    raise SamplingStopped("failed", f"sampler {r} {fate} before it joined the learner")
            time.sleep(0.05)  # a slice: Ctrl-C's handler runs between them

    def _not_joined(self, error: Exception) -> None:
        """The group's join failed after every sampler said it was joining: one died in the milliseconds between
        (killed, out of memory) or hangs. One line naming it, not the store's timeout as a traceback."""
        gone = [r for r in self.ranks if self.procs[r].exitcode is not None]
        if gone:
            r = gone[0]
            raise SamplingStopped("failed", f"sampler {r} {self._fate(r, '', 0.0)} before it joined the learner") from None
        self.unanswering.update(self.ranks)  # close() kills them without waiting again
        raise SamplingStopped("failed", f"the samplers did not join the learner within {timeout_s():g} s "
                                        f"(WORKBOOK_DIST_TIMEOUT_S; {type(error).__name__})") from None

    def _send_weights(self, version: int) -> None:
        """Weights of ``version`` to every sampler, then the orders they allow."""
        for r in self.ranks:
            self.outbox.send({"kind": "weights", "version": version, "weights": self.versions[version]}, r)
        while self.ordered < self.iterations and self._allowed(self.ordered, version):
            j = self.ordered
            self.outbox.send({"kind": "order", "index": j, "prompts": self.prompts_of(j)}, self.sampler_of(j))
            self.ordered += 1

    def _allowed(self, batch: int, version: int) -> bool:
        if self.free:
            return self.part10.may_sample(batch, version, self.lag)
        return self.part10.sampling_version(batch, self.lag) <= version

    def sampler_of(self, batch: int) -> int:
        return batch % self.n + 1

    def next(self, it: int, prompts=None) -> Sampled:
        """Batch ``it``, from its sampler (waits for it; :class:`SamplingStopped` if the sampler cannot send it)."""
        r = self.sampler_of(it)
        if self.ordered <= it:
            raise RuntimeError(f"batch {it} was never ordered: check sampling_version / may_sample")
        try:
            message = self.inboxes[r].get(timeout_s())
        except PeerGone as error:
            grace = 0.1 if isinstance(error, PeerSilent) else 1.0
            raise SamplingStopped("failed", f"sampler {r} {self._fate(r, str(error), grace)} before sending batch {it + 1}") from None
        if message["kind"] == "stopping":
            raise SamplingStopped("interrupted", f"sampler {r} stopped on {message['signal']}")
        if message["kind"] == "error":
            raise SamplingStopped("failed", f"sampler {r} raised {message['line']}") from SamplerTraceback(message["traceback"])
        sampled: Sampled = message["sampled"]
        self.streams[r] = message["generator"]
        return sampled

    def _fate(self, r: int, detail: str, grace_s: float = 1.0) -> str:
        """What became of sampler ``r``, whose receive failed: its exit status if it has one within ``grace_s``.

        A receive whose connection closed means the sampler is ending: its status comes within moments (1 s).
        One silent for the whole deadline has had its time: a short look (0.1 s), then "stopped answering" — the
        status of a stopped process would never come (in a run the deadline is minutes; in the fault tests,
        half a second, tried 20 times: the grace was most of their time)."""
        if r not in self.procs:  # a torchrun rank: torchrun reports how it ended
            return f"(rank {r}) is gone or stopped answering ({detail})"
        proc = self.procs[r]
        proc.join(timeout=grace_s)
        code = proc.exitcode
        if code is None:
            self.unanswering.add(r)
            return f"(pid {proc.pid}) stopped answering ({detail})"
        if code < 0:
            return f"(pid {proc.pid}) was killed by {signal.Signals(-code).name}"
        return f"(pid {proc.pid}) exited with status {code}"

    def publish(self, version: int, lm: nn.Module) -> None:
        """The learner has made update ``version``: send its weights (and the orders it allows)."""
        self.versions[version] = flat_weights(lm)
        oldest = max(0, version - self.lag) if not self.free else version
        for v in [v for v in self.versions if v < oldest]:
            del self.versions[v]
        self._send_weights(version)

    def state(self) -> dict:
        """What a resumed run needs: the weights still to be used and each sampler's random stream."""
        return {"versions": dict(self.versions), "streams": dict(self.streams)}

    def close(self) -> None:
        """Stop every sampler and wait for it (killing one that does not stop within 10 s); leave the group.

        The order matters: the samplers end first, so that every receiving thread of this process
        has seen its connection close and returned; only then is the process group destroyed. A
        group destroyed (or a process ending) while a thread still waits inside gloo's receive
        aborts the process in C++ ("terminate called without an active exception", exit 134), at
        random, depending on which thread the teardown meets first.
        """
        if self.closed:
            return
        self.closed = True
        for r in self.ranks:
            proc = self.procs.get(r)
            if proc is not None and proc.pid is not None and (r in self.unanswering or self.outbox is None):
                proc.kill()  # it had its deadline (a stopped one would not answer), or no message can reach it yet
            elif self.outbox is not None and (proc is None or proc.is_alive()):
                self.outbox.send({"kind": "stop"}, r)
        if not self.procs and self.outbox is not None:
            self.outbox.flush(5.0)
        deadline = time.monotonic() + 10.0
        for proc in self.procs.values():
            if proc.pid is None:  # never started
                continue
            proc.join(timeout=max(0.1, deadline - time.monotonic()))
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=5.0)
        for inbox in self.inboxes.values():  # their receives end once the samplers' connections are closed
            inbox.thread.join(timeout=10.0)
        if self.outbox is not None:
            self.outbox.flush(5.0)  # a send to a sampler that is gone fails at once
        if dist.is_initialized():
            try:
                dist.destroy_process_group()
            except Exception:  # a group whose peers died may not tear down cleanly; the processes are gone
                pass
        self.store = None  # the rendezvous's port is free again
        if getattr(self, "frozen", None):
            Path(self.frozen).unlink(missing_ok=True)
        if getattr(self, "cores_before", None):
            os.sched_setaffinity(0, self.cores_before)  # the evaluation after training may use every core again


class SamplerTraceback(Exception):
    """A sampler's traceback, attached to the learner's :class:`SamplingStopped` (written to error.txt)."""
