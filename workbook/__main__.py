"""Command line: ``python -m workbook COMMAND [options]`` (``--help`` on any command)."""

from __future__ import annotations

import importlib
import sys

from workbook.runs import INTERRUPTED

# command -> (module with main(argv) -> int, one-line help). Imported lazily: `grade`
# should not pay for importing gymnasium or the language model.
COMMANDS = {
    "grade": ("workbook.grading", "grade table: one row per exercise (--impl, --json)"),
    "cartpole": ("workbook.cartpole.train", "Part 2: train PPO on CartPole-v1 (--impl, wandb offline)"),
    "continuous": ("workbook.continuous.train", "Part 4: train a Gaussian-policy PPO agent on MuJoCo (--env)"),
    "atari": ("workbook.atari.train", "Part 8: train a Nature-CNN PPO agent on an Atari game (--env)"),
    "evaluate": ("workbook.evaluate", "evaluate (and --video) a saved agent: python -m workbook evaluate RUN_DIR"),
    "pretrain": ("workbook.lm.pretrain", "Part 3: pretrain the tiny review GPT (cached)"),
    "rlhf": ("workbook.loop.rlhf", "Part 3: RLHF 'write a positive review' end to end"),
    "reason": ("workbook.loop.reasoning", "Parts 7 and 9: RL with verifiable rewards on arithmetic (--algo dapo|grpo|...), and with a calculator tool (--task calculator)"),
    "goodhart": ("workbook.goodhart.run", "Part 11: Goodhart measured: proxies of a gold reward, best-of-n and RL against them"),
    "main": ("workbook.main_job", "the main job: grade the reference, train CartPole, run RLHF"),
}


def usage() -> str:
    lines = ["usage: python -m workbook COMMAND [options]   (python -m workbook COMMAND --help for its options)",
             "", "commands:"]
    return "\n".join(lines + [f"  {name:<10} {text}" for name, (_, text) in COMMANDS.items()])


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0
    if argv[0] not in COMMANDS:
        print(f"error: command: unknown command {argv[0]!r} (commands: {', '.join(COMMANDS)}; "
              "python -m workbook --help describes them)", file=sys.stderr)
        return 2
    try:  # Ctrl-C while the command's modules (torch, ...) still load: one line, as every command says it
        module = importlib.import_module(COMMANDS[argv[0]][0])
    except KeyboardInterrupt:
        print("interrupted (Ctrl-C) while starting: nothing was written", file=sys.stderr)
        return INTERRUPTED
    return module.main(argv[1:]) or 0


if __name__ == "__main__":
    sys.exit(main())
