"""Command line: ``python -m workbook COMMAND [options]`` (``--help`` on any command)."""

from __future__ import annotations

import importlib
import sys

# command -> (module with main(argv) -> int, one-line help). Imported lazily: `grade`
# should not pay for importing gymnasium or the language model.
COMMANDS = {
    "grade": ("workbook.grading", "grade table: one row per exercise (--impl, --json)"),
    "stubs": ("workbook.mirror", "write exercises/X.py from solutions/X.py (maintainers)"),
    "cartpole": ("workbook.cartpole.train", "Part 2: train PPO on CartPole-v1 (--impl, wandb offline)"),
    "pretrain": ("workbook.lm.pretrain", "Part 3: pretrain the tiny review GPT (cached)"),
    "rlhf": ("workbook.rlhf.train", "Part 3: RLHF 'write a positive review' end to end"),
    "main": ("workbook.main_job", "the main job: grade the reference, train CartPole, run RLHF"),
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        print("usage: python -m workbook COMMAND [options]\n\ncommands:")
        for name, (_, text) in COMMANDS.items():
            print(f"  {name:<10} {text}")
        return 0 if not argv or argv[0] in ("-h", "--help") else 2
    module = importlib.import_module(COMMANDS[argv[0]][0])
    return module.main(argv[1:]) or 0


if __name__ == "__main__":
    sys.exit(main())
