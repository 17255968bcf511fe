"""The main job (``make main``): everything a new user should see work, in order."""

from __future__ import annotations

import sys

from workbook import grading


def main(argv: list[str] | None = None) -> int:
    print("== 1. Grade table for the reference solutions ==", flush=True)
    code = grading.main(["--impl", "solutions", "--strict"])
    if code:
        print("the reference solutions do not pass their own tests", file=sys.stderr)
        return code

    print("\n== 2. Train CartPole-v1 with the reference (3 seeds, wandb offline) ==", flush=True)
    from workbook.cartpole import train as cartpole

    code = cartpole.main(["--impl", "solutions", "--seeds", "1", "2", "3", "--no-progress"])
    if code:
        print("the reference did not solve CartPole for every seed", file=sys.stderr)
        return code

    print("\n== 3. RLHF: 'write a positive movie review' (pretrains once if no cached model; wandb offline) ==",
          flush=True)
    from workbook.rlhf import train as rlhf

    return rlhf.main(["--impl", "solutions"])
