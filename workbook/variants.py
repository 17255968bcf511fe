"""Other versions of the exercises, kept as code: known mistakes and correct alternatives.

Two registries share this machinery:

- ``workbook/mistakes/`` — plausible *wrong* versions. The suite must fail on each and name it.
- ``workbook/alternatives/`` — *correct* versions in another style than the reference (a loop
  where the reference vectorises, ``torch.where`` where it uses ``min``, ...). The suite must
  pass each: the tests compare behaviour, not how the reference happens to be written.

A part adds its variants by adding a module named like the part to either package
(``workbook/mistakes/part4_continuous.py``) that registers them with the package's decorator
(``mistake(...)`` or ``alternative(...)``). Nothing else needs to change: the pytest plugin
swaps each variant into a copy of the reference (``--impl=mistakes``, ``--impl=alternatives``,
or one of them: ``--impl=mistake:PART:EXERCISE:NAME``), and ``tests/test_mistakes_are_caught.py``
and ``tests/test_alternatives_pass.py`` prove the suite right about every one of them.
"""

from __future__ import annotations

import importlib
import json
import os
import pkgutil
import shutil
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ClassVar

SEPARATOR = ":"
ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Variant:
    part: str
    """Module name of the part, e.g. 'part1_ppo_core'."""
    exercise: str
    """Top-level name the variant replaces, e.g. 'compute_advantages'."""
    name: str
    """Short slug, e.g. 'gamma_instead_of_gamma_lambda'."""
    description: str
    """What this version does differently (for a mistake: phrased to follow 'looks like ...')."""
    impl: Any
    """The function or class swapped in for the reference's."""

    kind: ClassVar[str] = "variant"

    @property
    def id(self) -> str:
        return SEPARATOR.join((self.part, self.exercise, self.name))

    @property
    def choice(self) -> str:
        """The ``--impl`` value that runs the suite on this variant alone."""
        return SEPARATOR.join((self.kind, self.id))


class Registry:
    """Variants of one kind, registered by the modules of one package (loaded on first use)."""

    def __init__(self, package: str, path: list[str], cls: type[Variant]) -> None:
        self.package, self.path, self.cls = package, path, cls
        self._entries: dict[str, Variant] = {}
        self._loaded = False

    def decorator(self, part: str, exercise: str, name: str, description: str) -> Callable[[Any], Any]:
        def register(obj: Any) -> Any:
            entry = self.cls(part, exercise, name, description, obj)
            if entry.id in self._entries:
                raise ValueError(f"duplicate {self.cls.kind} id {entry.id}")
            self._entries[entry.id] = entry
            return obj

        return register

    def _load_all(self) -> None:
        if not self._loaded:
            for info in pkgutil.iter_modules(self.path):
                importlib.import_module(f"{self.package}.{info.name}")
            self._loaded = True

    def all(self) -> list:
        self._load_all()
        return sorted(self._entries.values(), key=lambda v: v.id)

    def for_exercise(self, part: str, exercise: str) -> list:
        return [v for v in self.all() if v.part == part and v.exercise == exercise]

    def get(self, variant_id: str):
        self._load_all()
        try:
            return self._entries[variant_id]
        except KeyError:
            raise KeyError(f"unknown {self.cls.kind} {variant_id!r}; known: {sorted(self._entries)}") from None


# --- the meta-run: the suite on every variant, sharded over processes --------------------------

def usable_cpus() -> int:
    """The CPUs this process may use (no affinity on macOS: all of them)."""
    return (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()) or 1


def start_suite_on_variants(kinds: str = "variants", jobs: int | None = None) -> "VariantRun":
    """Start ``pytest --impl=<kinds>`` in ``jobs`` parallel shards, in the background.

    Each exercise's tests run once per variant of that exercise, with the variant swapped into
    a copy of the reference. ``jobs`` defaults to ``$WORKBOOK_META_JOBS`` or the number of CPUs
    this process may use. :meth:`VariantRun.results` waits for the shards.
    """
    jobs = jobs or int(os.environ.get("WORKBOOK_META_JOBS", 0)) or usable_cpus()
    tmp = Path(tempfile.mkdtemp(prefix="workbook-variants-"))
    # Only the exercise tests can run on a variant (they live in tests/test_part*.py): collecting
    # nothing else saves every shard the imports of the other test modules.
    test_files = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").glob("test_part*.py"))
    run = VariantRun(tmp)
    for shard in range(jobs):
        report = tmp / f"shard{shard}.jsonl"
        cmd = [sys.executable, "-m", "pytest", *test_files, f"--impl={kinds}", f"--variant-shard={shard}/{jobs}",
               f"--workbook-report={report}", "--mistakes-stop-when-named", "-q", "-p", "no:cacheprovider",
               "--tb=native",  # hundreds of expected failures: pytest's own traceback format costs ~20 ms each
               # Nobody reads the shard's failures (the report has them): pytest's summary of 600 of them scans every
               # report for each (10 million comparisons), and its log capture attaches a handler to every logger
               # (dozens) around each of 80,000 test phases — together about 15 CPU seconds of a shard.
               "--no-summary", "-p", "no:logging",
               "-o", "console_output_style=classic", "-W", "ignore"]
        log = (tmp / f"shard{shard}.log").open("w")
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, text=True)
        # Reaped the moment it ends: results() comes at the end of the session, and a shard done long
        # before would stay a zombie until then. (Popen.wait is safe from two threads.)
        threading.Thread(target=proc.wait, name=f"reap-shard{shard}", daemon=True).start()
        run.shards.append((proc, report, log))
    return run


class VariantRun:
    """The shards of a meta-run started by :func:`start_suite_on_variants`."""

    def __init__(self, tmp: Path) -> None:
        self.tmp, self.shards = tmp, []

    def results(self, timeout: float = 1500) -> dict[str, list[dict]]:
        """Wait for every shard (killing one that takes longer than ``timeout``); results by variant choice string."""
        results: dict[str, list[dict]] = {}
        for proc, report, log in self.shards:
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            log.close()
            for line in report.read_text().splitlines() if report.exists() else []:
                rec = json.loads(line)
                if rec.get("variant"):
                    results.setdefault(rec["variant"], []).append(rec)
        if not results:
            logs = "\n".join((self.tmp / f"shard{i}.log").read_text()[-3000:] for i in range(len(self.shards)))
            raise RuntimeError(f"the variants run produced no results (logs in {self.tmp}):\n{logs}")
        shutil.rmtree(self.tmp, ignore_errors=True)
        return results

    def cancel(self) -> None:
        """Stop the shards (a session that never asked for the results)."""
        for proc, _, log in self.shards:
            proc.kill()
            proc.wait()
            log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


def run_suite_on_variants(kinds: str = "variants", jobs: int | None = None, timeout: float = 1500) -> dict[str, list[dict]]:
    """:func:`start_suite_on_variants`, then wait for its results."""
    return start_suite_on_variants(kinds, jobs).results(timeout)
