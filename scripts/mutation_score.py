"""Mutation score of the exercise tests, per part, measured with cosmic-ray (a maintainers' tool).

    pip install -e ".[mutation]"                         # cosmic-ray, once
    nice -n 15 .venv/bin/python scripts/mutation_score.py --part 1
    .venv/bin/python scripts/mutation_score.py --part 1 --report-only   # re-read the last run

Why a copy, and why ``exercises/``: the tests compare the implementation under test (``impl``)
with the reference (``ref``, the oracle). Mutating ``solutions/`` in place would mutate the
oracle too, and a test comparing the two could never fail. So each part gets a scratch copy of
the repository under ``.mutation/<part>/`` in which ``exercises/`` holds copies of the reference
solutions; cosmic-ray mutates ``exercises/<part>.py`` there, one mutant at a time, and runs that
part's exercise tests with ``--impl=exercises`` against the untouched ``solutions/``.

A mutant is *killed* when a test fails (or the tests time out), *survives* when all pass.
Survivors that no correct test could tell apart from the reference (a removed ``@typechecked``,
a changed default hyper-parameter the tests always pass explicitly, ...) are listed in
``tests/equivalent_mutants.txt``, one line each with the reason.
Score = killed / (mutants − equivalent). Prints a table, the survivors, and a JSON last line.

Only the exercises' code is mutated (the functions and methods that exercises/ stubs out, with
their decorators and signatures): the given code (trainers, configs, helpers) is tested elsewhere.

Operators: a mutmut-like subset of cosmic-ray's (one natural swap per arithmetic operator,
boundary swaps of comparisons, ``and``/``or``, ``not``, ``True``/``False``, numbers ±1,
``break``/``continue``, loops that never run, removed decorators, caught exception types);
cosmic-ray's every-operator-into-every-other swaps would multiply the run time by ~5 for
mutants a test rarely needs to tell apart (``a + b`` into ``a >> b``).
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EQUIVALENTS = ROOT / "tests" / "equivalent_mutants.txt"
PARTS = {1: "part1_ppo_core", 2: "part2_cartpole", 3: "part3_rlhf", 4: "part4_continuous",
         5: "part5_beyond_ppo", 6: "part6_data_parallel", 7: "part7_reasoning", 8: "part8_atari",
         9: "part9_agents", 10: "part10_async", 11: "part11_goodhart"}

# Operators kept (regexes on cosmic-ray's operator names); everything else is filtered out.
KEPT_OPERATORS = [
    r"core/ReplaceBinaryOperator_(Add_Sub|Sub_Add|Mul_Div|Div_Mul|FloorDiv_Div|Mod_FloorDiv|Pow_Mul|MatMult_Mul)",
    r"core/ReplaceComparisonOperator_(Lt_LtE|LtE_Lt|Gt_GtE|GtE_Gt|Eq_NotEq|NotEq_Eq|Is_IsNot|IsNot_Is|In_NotIn|NotIn_In)",
    r"core/ReplaceUnaryOperator_(USub_UAdd|Delete_Not|Delete_USub)",
    r"core/(AddNot|ReplaceTrueWithFalse|ReplaceFalseWithTrue|ReplaceAndWithOr|ReplaceOrWithAnd)",
    r"core/(ReplaceBreakWithContinue|ReplaceContinueWithBreak|NumberReplacer|ZeroIterationForLoop)",
    r"core/(RemoveDecorator|ExceptionReplacer)",
]


def fail(field: str, what: str) -> None:
    print(f"error: {field}: {what}", file=sys.stderr)
    raise SystemExit(2)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2 (the workbook's convention)
        field, _, what = message.partition(": ")
        fail(field.removeprefix("argument ").split("/")[0] if what else "arguments", what or message)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = _Parser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--part", type=int, nargs="+", default=sorted(PARTS), metavar="N", help="parts to measure (default: all)")
    p.add_argument("--timeout", type=float, default=None,
                   help="seconds one mutant's test run may take (default: 4x the unmutated run, at least 60)")
    p.add_argument("--work-dir", default=str(ROOT / ".mutation"), help="where the scratch copies go (default .mutation/)")
    p.add_argument("--resume", action="store_true", help="continue an interrupted run of these parts instead of restarting")
    p.add_argument("--rerun-survivors", action="store_true",
                   help="after sharpening tests: run the last run's survivors again with the current tests (the "
                        "reference's code must be unchanged since that run; docstrings may differ)")
    p.add_argument("--report-only", action="store_true", help="only print the results of the last run of these parts")
    p.add_argument("--no-progress", action="store_true", help="no progress lines while the mutants run")
    args = p.parse_args(argv)
    bad = [n for n in args.part if n not in PARTS]
    if bad:
        fail("--part", f"{bad[0]} is not a part; choose from {', '.join(map(str, PARTS))}")
    if args.resume + args.rerun_survivors + args.report_only > 1:
        fail("--resume/--rerun-survivors/--report-only", "choose one")
    if args.timeout is not None and args.timeout <= 0:
        fail("--timeout", f"must be positive, got {args.timeout}")
    return args


# --- equivalent mutants -----------------------------------------------------------------

@dataclass(frozen=True)
class Equivalent:
    part: str       # a part's module name, or a glob
    operator: str   # a cosmic-ray operator name, or a glob
    code: str       # the (stripped) source line the mutant changes, or a glob
    reason: str

    def matches(self, part: str, operator: str, code: str) -> bool:
        def match(text: str, pattern: str) -> bool:  # the literal text, or a glob (code holds [ ] literally)
            return text == pattern or fnmatch.fnmatchcase(text, pattern)
        return match(part, self.part) and match(operator, self.operator) and match(code, self.code)


def load_equivalents(path: Path = EQUIVALENTS) -> list[Equivalent]:
    """``part | operator | code | reason`` per line; ``#`` starts a comment; globs allowed in the first three."""
    out = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        fields = [f.strip() for f in line.split(" | ")]
        if len(fields) != 4 or not fields[3]:
            fail(str(path.relative_to(ROOT)), f"line {n}: want 'part | operator | code | reason', got {line!r}")
        out.append(Equivalent(*fields))
    return out


# --- one part ---------------------------------------------------------------------------

def test_files(part: str) -> list[str]:
    """The part's exercise test modules: those declaring ``PART = "<part>"``."""
    return sorted(f"tests/{p.name}" for p in (ROOT / "tests").glob("test_*.py") if f'PART = "{part}"' in p.read_text())


def make_scratch(part: str, work: Path, keep_exercises: bool = False) -> None:
    """A copy of the repository in which exercises/ is the reference solutions.

    ``keep_exercises``: refresh everything but exercises/ (whose file positions the session's
    mutants point into).
    """
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("workbook", "solutions", "tests", "pyproject.toml") if keep_exercises else (".",):
        if (work / name).is_dir():
            shutil.rmtree(work / name)
        elif (work / name).exists():
            (work / name).unlink()
    work.mkdir(parents=True, exist_ok=True)
    for name in ("workbook", "solutions"):
        shutil.copytree(ROOT / name, work / name, ignore=ignore)
    (work / "tests").mkdir()
    for f in ["tests/conftest.py", *test_files(part)]:
        shutil.copy(ROOT / f, work / f)
    shutil.copy(ROOT / "pyproject.toml", work / "pyproject.toml")
    if not keep_exercises:
        shutil.copytree(ROOT / "solutions", work / "exercises", ignore=ignore)
        shutil.copy(ROOT / "solutions" / f"{part}.py", work / "original.py")  # cosmic-ray mutates exercises/ in place


def code_without_docstrings(path: Path) -> str:
    import ast

    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and isinstance(
                getattr(body[0], "value", None), ast.Constant) and isinstance(body[0].value.value, str):
            node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree)


def reopen_survivors(part: str, work: Path) -> int:
    """Forget the survivors' results (so ``cosmic-ray exec`` runs them again); how many."""
    import sqlite3

    if code_without_docstrings(work / "original.py") != code_without_docstrings(ROOT / "solutions" / f"{part}.py"):
        fail("--rerun-survivors", f"solutions/{part}.py's code changed since the last run; run it again in full")
    make_scratch(part, work, keep_exercises=True)
    with sqlite3.connect(work / "session.sqlite") as db:
        n = db.execute("DELETE FROM work_results WHERE lower(test_outcome) = 'survived'").rowcount
    return n


def exercise_lines(part: str, source: Path | None = None) -> dict[int, str]:
    """Lines of solutions/<part>.py inside an exercise (a function or method that exercises/ stubs out),
    decorators and signature included. Given code (trainers, dataclasses, helpers) is not the exercise
    tests' to grade: its mutants are left out of the score."""
    import ast

    sys.path.insert(0, str(ROOT))
    from workbook.mirror import is_stub

    def functions(path: Path) -> dict[str, ast.FunctionDef]:
        out = {}

        def walk(node, prefix):
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    name = f"{prefix}{child.name}"
                    if not isinstance(child, ast.ClassDef):
                        out[name] = child
                    walk(child, name + ".")
        walk(ast.parse(path.read_text()), "")
        return out

    stubbed = {name for name, fn in functions(ROOT / "exercises" / f"{part}.py").items() if is_stub(fn)}
    lines = {}
    for name, fn in functions(source or ROOT / "solutions" / f"{part}.py").items():
        if name in stubbed:
            first = min([fn.lineno, *(d.lineno for d in fn.decorator_list)])
            # The exercise's name (its tests' marker): the class for a method (PPOAgent.play_step → PPOAgent).
            lines.update(dict.fromkeys(range(first, fn.end_lineno + 1), name.split(".")[0]))
    return lines


def skip_given_code(part: str, work: Path) -> None:
    """Mark the mutants outside the exercises as skipped (before they run)."""
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import WorkerOutcome, WorkResult

    inside = exercise_lines(part, work / "original.py")
    with use_db(str(work / "session.sqlite"), WorkDB.Mode.open) as db:
        for item in db.pending_work_items:
            if item.mutations[0].start_pos[0] not in inside:
                db.set_result(item.job_id, WorkResult(worker_outcome=WorkerOutcome.SKIPPED, output="given code"))


def pytest_command(part: str, exercise: str | None = None) -> list[str]:
    select = ["-k", exercise] if exercise else []
    return [sys.executable, "-m", "pytest", "--impl=exercises", "-x", "-q", "-p", "no:cacheprovider", *select,
            *test_files(part)]


def run_one(part: str) -> int:
    """cosmic-ray's test command: the tests of the exercise the current mutant changed (``-k NAME``).

    Run in the scratch copy while a mutant is applied: the changed line is found by comparing
    exercises/<part>.py with original.py. Judging a mutant by its own exercise's tests is what
    the score means (each exercise's tests against its code), and it makes a run several times faster.
    """
    import difflib

    work = Path.cwd()
    before, after = (work / "original.py").read_text().splitlines(), (work / "exercises" / f"{part}.py").read_text().splitlines()
    changed = [i + 1 for tag, i1, i2, _, _ in difflib.SequenceMatcher(None, before, after).get_opcodes() if tag != "equal"
               for i in range(i1, max(i2, i1 + 1))]
    owners = exercise_lines(part, work / "original.py")
    names = {owners[line] for line in changed if line in owners}
    exercise = names.pop() if len(names) == 1 else None
    return subprocess.run(pytest_command(part, exercise), cwd=work).returncode


def run_part(part: str, work: Path, timeout: float | None, resume: bool, progress: bool,
             rerun_survivors: bool = False) -> None:
    session = work / "session.sqlite"
    if rerun_survivors:
        if not session.exists():
            fail("--rerun-survivors", f"no run of {part} in {work}")
        print(f"{part}: running {reopen_survivors(part, work)} survivors again", file=sys.stderr)
    elif not (resume and session.exists()):
        make_scratch(part, work)
        start = time.monotonic()
        base = subprocess.run(pytest_command(part), cwd=work, capture_output=True, text=True)
        took = time.monotonic() - start
        if base.returncode != 0:
            print(base.stdout[-3000:], base.stderr[-3000:], sep="\n", file=sys.stderr)
            fail("baseline", f"the {part} tests fail on the unmutated reference; fix that first")
        timeout = timeout or max(60.0, 4 * took)
        exclude = "^(?!(" + "|".join(KEPT_OPERATORS) + ")$)"
        one = f"{sys.executable} {Path(__file__).resolve()} --run-one {part}"
        config = (f'[cosmic-ray]\nmodule-path = "exercises/{part}.py"\ntimeout = {timeout}\nexcluded-modules = []\n'
                  f"test-command = {json.dumps(one)}\n\n"
                  f'[cosmic-ray.distributor]\nname = "local"\n\n'
                  f"[cosmic-ray.filters.operators-filter]\nexclude-operators = [{json.dumps(exclude)}]\n")
        (work / "cosmic-ray.toml").write_text(config)
        bindir = Path(sys.executable).parent
        subprocess.run([bindir / "cosmic-ray", "init", "cosmic-ray.toml", "session.sqlite"], cwd=work, check=True)
        subprocess.run([bindir / "cr-filter-operators", "session.sqlite", "cosmic-ray.toml"], cwd=work, check=True)
        skip_given_code(part, work)
        print(f"{part}: baseline {took:.0f} s, mutant timeout {timeout:.0f} s", file=sys.stderr)
    proc = subprocess.Popen([Path(sys.executable).parent / "cosmic-ray", "exec", "cosmic-ray.toml", "session.sqlite"], cwd=work)
    try:
        while proc.poll() is None:
            time.sleep(30)
            if progress:
                done, total = _progress(session)
                print(f"{part}: {done}/{total} mutants run", file=sys.stderr, flush=True)
    except KeyboardInterrupt:  # the session keeps what is done: --resume continues it
        proc.wait()
        print(f"{part}: interrupted; `--part {part[4]} --resume` continues", file=sys.stderr)
        raise


def _progress(session: Path) -> tuple[int, int]:
    import sqlite3

    with sqlite3.connect(session) as db:
        total = db.execute("SELECT count(*) FROM work_items").fetchone()[0]
        results = db.execute("SELECT count(*) FROM work_results").fetchone()[0]
        skipped = db.execute("SELECT count(*) FROM work_results WHERE lower(worker_outcome) = 'skipped'").fetchone()[0]
    return results - skipped, total - skipped


@dataclass
class Mutant:
    line: int
    operator: str
    code: str
    mutated: str
    outcome: str  # killed | timeout | survived | equivalent | pending
    reason: str = ""


def read_part(part: str, work: Path, equivalents: list[Equivalent]) -> list[Mutant]:
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import TestOutcome, WorkerOutcome

    source = (work / "original.py").read_text().splitlines()
    inside = exercise_lines(part, work / "original.py")
    mutants = []
    with use_db(str(work / "session.sqlite"), WorkDB.Mode.open) as db:
        results = dict(db.results)
        for item in db.work_items:
            result = results.get(item.job_id)
            if result is not None and result.worker_outcome == WorkerOutcome.SKIPPED:
                continue  # an operator outside KEPT_OPERATORS
            spec = item.mutations[0]
            line = spec.start_pos[0]
            if line not in inside:
                continue  # given code
            code = source[line - 1].strip()
            mutated = next((d[1:].strip() for d in (result.diff or "").splitlines()
                            if d.startswith("+") and not d.startswith("+++")), "") if result else ""
            if result is None:
                outcome = "pending"
            elif result.test_outcome == TestOutcome.KILLED and result.output == "timeout":
                outcome = "timeout"
            elif result.test_outcome in (TestOutcome.KILLED, TestOutcome.INCOMPETENT):
                outcome = "killed"
            else:
                outcome = "survived"
            m = Mutant(line, spec.operator_name, code, mutated, outcome)
            if outcome == "survived":
                eq = next((e for e in equivalents if e.matches(part, m.operator, code)), None)
                if eq:
                    m.outcome, m.reason = "equivalent", eq.reason
            mutants.append(m)
    return sorted(mutants, key=lambda m: (m.line, m.operator))


def summary(mutants: list[Mutant]) -> dict:
    count = {k: sum(m.outcome == k for m in mutants) for k in ("killed", "timeout", "survived", "equivalent", "pending")}
    killed = count["killed"] + count["timeout"]
    judged = killed + count["survived"]
    return {"mutants": len(mutants), "killed": killed, "timed_out": count["timeout"], "equivalent": count["equivalent"],
            "survived": count["survived"], "pending": count["pending"],
            "score": round(100 * killed / judged, 1) if judged else None}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--run-one"]:  # cosmic-ray's test command (see run_one)
        return run_one(argv[1])
    args = parse_args(argv)
    try:
        import cosmic_ray  # noqa: F401
    except ImportError:
        fail("cosmic-ray", 'not installed; pip install -e ".[mutation]"')
    equivalents = load_equivalents()
    work_root = Path(args.work_dir).resolve()
    table = {}
    for n in args.part:
        part = PARTS[n]
        work = work_root / part
        if args.report_only:
            if not (work / "session.sqlite").exists():
                fail("--report-only", f"no run of {part} in {work}")
        else:
            run_part(part, work, args.timeout, args.resume, not args.no_progress, args.rerun_survivors)
        mutants = read_part(part, work, equivalents)
        table[part] = summary(mutants)
        for m in mutants:
            if m.outcome in ("survived", "pending"):
                print(f"{m.outcome.upper():9} {part}:{m.line}  {m.operator}\n          {m.code}\n       -> {m.mutated}")
    print(f"\n{'part':22} {'mutants':>8} {'killed':>7} {'equiv.':>7} {'survived':>9} {'score':>7}")
    for part, s in table.items():
        score = "—" if s["score"] is None else f"{s['score']:.1f}%"
        pending = f"  ({s['pending']} not run)" if s["pending"] else ""
        print(f"{part:22} {s['mutants']:8} {s['killed']:7} {s['equivalent']:7} {s['survived']:9} {score:>7}{pending}")
    print(json.dumps({"tool": "cosmic-ray", "parts": table}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
