"""Maintainers: write exercises/X.py from solutions/X.py with the named functions stubbed.

    python scripts/make_stubs.py solutions/part4_continuous.py            # the stubs exercises/X.py has now
    python scripts/make_stubs.py solutions/part4_continuous.py GaussianActor.forward ...
    python scripts/make_stubs.py solutions/part4_continuous.py --force    # even over a learner's work

A learner's work is never lost: when exercises/X.py holds a written (non-stub) body for any of
the functions to stub, the script refuses in one line (exit status 2) unless ``--force`` is
given, and with ``--force`` it first copies the file to ``exercises/X.py.<time>.bak``.
tests/test_structure.py checks that the exercise files are exactly what this script writes.
"""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from workbook.cli import make_parser  # noqa: E402
from workbook.mirror import make_exercise_text, stubbed_functions, written_exercises  # noqa: E402
from workbook.runs import ConfigError, command  # noqa: E402


@command
def main(argv: list[str] | None = None) -> int:
    parser = make_parser("scripts/make_stubs.py", "Write exercises/X.py from solutions/X.py, stubbing the named functions.")
    parser.add_argument("solution", type=Path, help="e.g. solutions/part1_ppo_core.py")
    parser.add_argument("names", nargs="*", help="dotted names to stub (default: the stubs already in exercises/X.py)")
    parser.add_argument("--force", action="store_true",
                        help="overwrite even when exercises/X.py holds written (non-stub) functions; a backup is kept")
    parser.add_argument("--exercises-dir", type=Path, default=ROOT / "exercises", help="where X.py is written (default: %(default)s)")
    args = parser.parse_args(argv)
    if not args.solution.is_file():
        raise ConfigError("solution", f"{args.solution} is not a file (expected e.g. solutions/part1_ppo_core.py)")
    target = args.exercises_dir / args.solution.name
    names = set(args.names) or (stubbed_functions(target) if target.exists() else set())
    if not names:
        raise ConfigError("names", f"{target} has no stubs to keep; name the functions to stub")
    try:
        text = make_exercise_text(args.solution.read_text(), names)
    except KeyError as error:
        raise ConfigError("names", error.args[0]) from None
    written = written_exercises(target, names)
    backup = None
    if written and not args.force:
        raise ConfigError(str(target), f"holds written work ({', '.join(written)}); nothing was changed "
                                       "(--force overwrites it after keeping a backup)")
    if target.exists() and target.read_text() == text:
        print(f"{target} is already up to date")
        return 0
    if written:
        stamp, n = time.strftime('%Y%m%d-%H%M%S'), 0
        backup = target.with_name(f"{target.name}.{stamp}.bak")
        while backup.exists():  # never overwrite an earlier backup
            n += 1
            backup = target.with_name(f"{target.name}.{stamp}-{n}.bak")
        shutil.copy2(target, backup)
    target.write_text(text)
    print(f"wrote {target} with {len(names)} stubs: {', '.join(sorted(names))}"
          + (f" (your previous file is in {backup})" if backup else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
