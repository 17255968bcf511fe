"""Every fault path of the sampler engine (workbook/async_rl/processes.py), many times in a row: each ends the same way.

    python tests/stress_async_faults.py --tries 20          # what tests/test_async_faults.py runs
    python tests/stress_async_faults.py --tries 5 --paths killed ctrl-c

One learner (this process) and one spawned sampler per try, a tiny model and the addition task.
Each try starts :class:`RemoteSampling`, makes its fault, and checks how it ended: the one line
the learner gets (:class:`SamplingStopped`'s, or the exception that stopped the start), then that
nothing is left — the sampler process reaped, no receiving thread alive, no process group (a
group destroyed, or a process ending, while a thread waits inside gloo is what aborted runs with
"terminate called without an active exception", exit status 134). The process then ends by
itself; its exit status and stderr are the caller's to check (0, nothing but the report).

The last line is one JSON object: per path, the endings seen (pattern → count) and seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from workbook.async_rl import processes  # noqa: E402
from workbook.async_rl.processes import RemoteSampling, SamplingStopped  # noqa: E402
from workbook.loop.verifiable import ReasoningTask  # noqa: E402

START_S = "60"
"""The process group's deadline (a sampler's start on a busy machine); a receive's is set per path."""


class ScoreRaises(ReasoningTask):
    """A verifier that raises on the sampler's first batch."""

    def score(self, prompts, rollout):
        raise RuntimeError("the verifier broke")


def tiny():
    from workbook.lm.model import GPT, GPTConfig
    from workbook.lm.tokenizer import CharTokenizer
    from workbook.reason.task import ALPHABET

    tok = CharTokenizer(ALPHABET)
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=tok.vocab_size, block_size=64, n_layer=1, n_head=1, d_model=8)), tok


def start(task_class=ReasoningTask) -> RemoteSampling:
    lm, tok = tiny()
    task = task_class("solutions", "addition", group_size=2)
    args = SimpleNamespace(impl="solutions", samplers=1, lag=1, free_running=False, iterations=4,
                           sampler_dtype="float32", max_new_tokens=4, temperature=1.0, threads=1)
    return RemoteSampling(args, lm, tok, task, prompts_of=lambda j: task.batch(2, 0, j), chunk=4, data_seed=0, start=0)


def until_stopped(sampling: RemoteSampling, lm=None) -> str:
    """Take batches (publishing the tiny policy's weights) until the engine says why it cannot go on."""
    lm = lm or tiny()[0]
    for it in range(sampling.iterations):
        sampling.next(it)
        sampling.publish(it + 1, lm)
    return "finished"


# --- the paths: each returns the line the learner got ---------------------------------------------

def start_fails() -> str:
    """A stub of Part 10 met while the learner starts its samplers (the issue's exit 134)."""
    import solutions.part10_async as part10

    original = part10.sampling_version
    part10.sampling_version = lambda batch, lag: (_ for _ in ()).throw(NotImplementedError())
    try:
        start()
    except NotImplementedError:
        return "NotImplementedError while starting"
    finally:
        part10.sampling_version = original
    return "started"


def sampler_raises() -> str:
    sampling = start(ScoreRaises)
    try:
        return until_stopped(sampling)
    except SamplingStopped as stopped:
        return stopped.line
    finally:
        sampling.close()


def killed() -> str:
    sampling = start()
    os.kill(sampling.procs[1].pid, signal.SIGKILL)
    try:
        return until_stopped(sampling)
    except SamplingStopped as stopped:
        return stopped.line
    finally:
        sampling.close()


def stops_answering() -> str:
    sampling = start()
    os.kill(sampling.procs[1].pid, signal.SIGSTOP)
    os.environ["WORKBOOK_DIST_TIMEOUT_S"] = "0.5"  # the receive's deadline (the group's was set at the start)
    try:
        return until_stopped(sampling)
    except SamplingStopped as stopped:
        return stopped.line
    finally:
        os.environ["WORKBOOK_DIST_TIMEOUT_S"] = START_S
        sampling.close()


def exits_before_joining(rank: int, world_size: int, port: int, setup: dict) -> None:
    """What a sampler that dies as it starts runs instead of ``sampler_main`` (a crash while it imports, say)."""
    os._exit(1)


def dies_before_joining() -> str:
    """The sampler exits before it joins the learner: the learner says so at once, not after the group's deadline."""
    real = processes.sampler_main
    processes.sampler_main = exits_before_joining  # what the learner starts each sampler with
    try:
        start().close()
    except SamplingStopped as stopped:
        return stopped.line
    finally:
        processes.sampler_main = real
    return "started"


def learner_raises() -> str:
    """The learner fails between batches (its update raised): the samplers are stopped mid-run."""
    sampling = start()
    try:
        sampling.next(0)
        raise ValueError("the update broke")
    except ValueError as error:
        return f"the learner raised {error}"
    finally:
        sampling.close()


def ctrl_c() -> str:
    """Ctrl-C reaches the sampler as soon as it is started (still importing): it stops after telling the learner."""
    sampling = start()
    os.kill(sampling.procs[1].pid, signal.SIGINT)
    try:
        return until_stopped(sampling)
    except SamplingStopped as stopped:
        return f"{stopped.status}: {stopped.line}"
    finally:
        sampling.close()


def ctrl_c_while_starting() -> str:
    """Ctrl-C reaches the sampler as it starts: before its handlers exist it ignores it, as the learner, which the
    terminal's Ctrl-C reaches too, decides when everyone stops (here only the sampler gets it, so the run finishes);
    a signal that comes after them stops it as any Ctrl-C does. Which one a try meets is timing."""
    import contextlib
    import multiprocessing

    real = processes._ignoring_ctrl_c

    @contextlib.contextmanager
    def then_ctrl_c():
        before = {p.pid for p in multiprocessing.active_children()}
        with real():
            yield
        for proc in multiprocessing.active_children():
            if proc.pid not in before:
                os.kill(proc.pid, signal.SIGINT)

    processes._ignoring_ctrl_c = then_ctrl_c
    try:
        sampling = start()
    finally:
        processes._ignoring_ctrl_c = real
    try:
        return until_stopped(sampling)
    except SamplingStopped as stopped:
        return f"{stopped.status}: {stopped.line}"
    finally:
        sampling.close()


PATHS = {"start-fails": start_fails, "sampler-raises": sampler_raises, "killed": killed,
         "stops-answering": stops_answering, "dies-before-joining": dies_before_joining,
         "learner-raises": learner_raises, "ctrl-c": ctrl_c, "ctrl-c-while-starting": ctrl_c_while_starting}


def leftovers(before: set[int]) -> list[str]:
    """What a closed engine must not leave: a process group, a receiving thread, a sampler process."""
    left = []
    if dist.is_initialized():
        left.append("a process group")
    alive = [t.name for t in threading.enumerate() if t.name.startswith("inbox-") and t.is_alive()]
    if alive:
        left.append(f"threads {alive}")
    import multiprocessing

    children = [p.pid for p in multiprocessing.active_children()]
    if children:
        left.append(f"processes {children}")
    return left


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tries", type=int, default=20)
    parser.add_argument("--paths", nargs="+", default=list(PATHS), choices=list(PATHS))
    parser.add_argument("--start", choices=("forkserver", "spawn"), default="forkserver",
                        help="how samplers start: forkserver (fast: the modules are loaded once) or spawn (as runs do)")
    ns = parser.parse_args()
    os.environ["WORKBOOK_DIST_TIMEOUT_S"] = START_S
    os.environ["WORKBOOK_SAMPLER_START"] = ns.start
    if ns.start == "forkserver":
        import multiprocessing

        multiprocessing.get_context("forkserver").set_forkserver_preload(
            ["workbook.async_rl.processes", "workbook.loop.verifiable", "solutions.part7_reasoning", "__main__"])
    torch.set_num_threads(1)
    report = {}
    for name in ns.paths:
        endings: dict[str, int] = {}
        t0 = time.perf_counter()
        for _ in range(ns.tries):
            line = PATHS[name]()
            line = re.sub(r"pid \d+", "pid N", line)
            left = leftovers(set())
            if left:
                line += f" [left behind: {', '.join(left)}]"
            endings[line] = endings.get(line, 0) + 1
        report[name] = {"endings": endings, "seconds": round(time.perf_counter() - t0, 1)}
        print(f"{name}: {endings} ({report[name]['seconds']} s)", file=sys.stderr, flush=True)
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
