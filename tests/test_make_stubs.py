"""scripts/make_stubs.py (maintainers) never destroys a learner's work, and is not a learner's command."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from workbook.__main__ import COMMANDS
from workbook.mirror import make_exercise_text, stubbed_functions, written_exercises

ROOT = Path(__file__).resolve().parent.parent
SOLUTION = ROOT / "solutions" / "part4_continuous.py"
ONE_LINE_ERROR = re.compile(r"error: [^\n]+: [^\n]+\n")


def make_stubs(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "make_stubs.py"), *argv], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


def stubbed_copy(tmp_path: Path) -> tuple[Path, set[str]]:
    """exercises/part4_continuous.py as shipped (every exercise a stub), in tmp_path/exercises."""
    names = stubbed_functions(ROOT / "exercises" / SOLUTION.name) or {"GaussianActor.forward", "clip_action"}
    target = tmp_path / "exercises" / SOLUTION.name
    target.parent.mkdir()
    target.write_text(make_exercise_text(SOLUTION.read_text(), names))
    return target, names


def test_stubs_is_not_a_learner_command():
    assert "stubs" not in COMMANDS


def test_refuses_to_overwrite_written_work_and_writes_nothing(tmp_path):
    target, names = stubbed_copy(tmp_path)
    fill = sorted(names)[0]
    # A learner fills one exercise in (here: the reference body, as a finished exercise would look).
    learner = make_exercise_text(SOLUTION.read_text(), names - {fill})
    target.write_text(learner)
    assert written_exercises(target, names) == [fill]
    proc = make_stubs(str(SOLUTION), *sorted(names), "--exercises-dir", str(target.parent))
    assert proc.returncode == 2 and proc.stdout == ""
    assert ONE_LINE_ERROR.fullmatch(proc.stderr), proc.stderr
    assert fill in proc.stderr and "--force" in proc.stderr
    assert target.read_text() == learner
    assert [p.name for p in target.parent.iterdir()] == [target.name], "refusing must write nothing"


def test_force_overwrites_after_keeping_a_backup(tmp_path):
    target, names = stubbed_copy(tmp_path)
    learner = make_exercise_text(SOLUTION.read_text(), set()) + "\n# my notes\n"
    target.write_text(learner)
    backups = []
    for _ in range(2):  # a second --force in the same second must not overwrite the first backup
        proc = make_stubs(str(SOLUTION), *sorted(names), "--exercises-dir", str(target.parent), "--force")
        assert proc.returncode == 0, proc.stderr
        backups = sorted(target.parent.glob(f"{target.name}.*.bak"))
        target.write_text(learner)
    assert len(backups) == 2 and all(b.read_text() == learner for b in backups)


def test_stubbed_file_is_rewritten_without_force(tmp_path):
    target, names = stubbed_copy(tmp_path)
    target.write_text(target.read_text().replace('"""', '"""OLD DOCSTRING. ', 1))  # a stale stubbed file
    proc = make_stubs(str(SOLUTION), "--exercises-dir", str(target.parent))
    assert proc.returncode == 0, proc.stderr
    assert target.read_text() == make_exercise_text(SOLUTION.read_text(), names)
    assert not list(target.parent.glob("*.bak")), "nothing was at risk, so no backup"
    again = make_stubs(str(SOLUTION), "--exercises-dir", str(target.parent))
    assert again.returncode == 0 and "up to date" in again.stdout


def test_an_unparsable_file_counts_as_work(tmp_path):
    target, names = stubbed_copy(tmp_path)
    target.write_text("def half_written(:\n")
    assert written_exercises(target, names) == sorted(names)
    assert make_stubs(str(SOLUTION), *sorted(names), "--exercises-dir", str(target.parent)).returncode == 2


def test_bad_arguments_are_one_line(tmp_path):
    proc = make_stubs("no/such/file.py")
    assert proc.returncode == 2 and ONE_LINE_ERROR.fullmatch(proc.stderr) and "not a file" in proc.stderr
    proc = make_stubs(str(SOLUTION), "no_such_function", "--exercises-dir", str(tmp_path))
    assert proc.returncode == 2 and ONE_LINE_ERROR.fullmatch(proc.stderr) and "no_such_function" in proc.stderr
