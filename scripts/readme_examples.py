"""Print the README's grade and pytest examples, from a learner's half-done checkout (run from the repository root).

    python scripts/readme_examples.py            # grade of the example, then pytest's summary of it

The example: Part 1 with compute_advantages and get_minibatch_indices done, calc_value_function_loss
summing where it should average (a known mistake), the rest not started; Part 4 with only
compute_continuous_objective written (so it waits on Part 1's clipped objective). Built in a
temporary copy of the repository: your exercises/ are not touched. The README's examples are
pasted from this output, so they stay real output of the current code.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from workbook.mirror import _functions, make_exercise_text  # noqa: E402


def graded_functions(part: str) -> set[str]:
    tree = ast.parse((ROOT / "tests" / f"test_{part}.py").read_text())
    points = next(ast.literal_eval(n.value) for n in tree.body
                  if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "POINTS")
    return {n for n in _functions(ast.parse((ROOT / "solutions" / f"{part}.py").read_text())) if n.split(".")[0] in points}


def build(root: Path) -> None:
    for name in ("workbook", "solutions", "exercises", "tests"):
        shutil.copytree(ROOT / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", root / "pyproject.toml")
    done = {"compute_advantages", "get_minibatch_indices", "calc_value_function_loss"}
    part1 = make_exercise_text((ROOT / "solutions/part1_ppo_core.py").read_text(),
                               {n for n in graded_functions("part1_ppo_core") if n.split(".")[0] not in done})
    right = "return vf_coef * (values - mb_returns).pow(2).mean()"
    assert right in part1, "the reference's value loss changed: update this example"
    (root / "exercises/part1_ppo_core.py").write_text(part1.replace(right, right.replace(".mean()", ".sum()")))
    part4 = {n for n in graded_functions("part4_continuous") if not n.startswith("compute_continuous_objective")}
    (root / "exercises/part4_continuous.py").write_text(
        make_exercise_text((ROOT / "solutions/part4_continuous.py").read_text(), part4))


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        build(root)
        env = dict(os.environ, PYTHONPATH=str(root), WORKBOOK_IMPL="exercises")
        for argv in (["-m", "workbook", "grade", "--part", "part1_ppo_core", "--part", "part4_continuous"],
                     ["-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_part1_ppo_core.py",
                      "tests/test_part4_continuous.py"]):
            print(f"$ python {' '.join(argv)}", flush=True)
            subprocess.run([sys.executable, *argv], cwd=root, env=env)
    return 0


if __name__ == "__main__":
    sys.exit(main())
