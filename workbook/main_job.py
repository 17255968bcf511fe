"""The main job (``make main``): everything a new user should see work, in order."""

from __future__ import annotations

import sys

from workbook import grading
from workbook.cli import make_parser
from workbook.runs import INTERRUPTED, command


@command
def main(argv: list[str] | None = None) -> int:
    parser = make_parser("python -m workbook main",
                         "The main job: grade the reference solutions, train CartPole (3 seeds), then run RLHF "
                         "(pretraining the review GPT once if it is not cached). Takes about 3 minutes on a 2-core CPU; "
                         "writes runs/.")
    parser.add_argument("--no-progress", action="store_true",
                        help="no progress bars on a terminal, no progress lines elsewhere")
    options = parser.parse_args(argv)
    print("== 1. Grade table for the reference solutions ==", flush=True)
    code = grading.main(["--impl", "solutions", "--strict"])
    if code:
        if code != INTERRUPTED:  # after Ctrl-C the step has said so itself
            print("the reference solutions do not pass their own tests", file=sys.stderr)
        return code

    print("\n== 2. Train CartPole-v1 with the reference (3 seeds, wandb offline) ==", flush=True)
    from workbook.cartpole import train as cartpole

    # One progress bar per seed (on a terminal) instead of a line per learning phase.
    code = cartpole.main(["--impl", "solutions", "--seeds", "1", "2", "3"] + ["--no-progress"] * options.no_progress)
    if code:
        if code != INTERRUPTED:
            print("the reference did not solve CartPole for every seed", file=sys.stderr)
        return code

    print("\n== 3. RLHF: 'write a positive movie review' (pretrains once if no cached model; wandb offline) ==",
          flush=True)
    from workbook.loop import rlhf

    return rlhf.main(["--impl", "solutions"] + ["--no-progress"] * options.no_progress)
