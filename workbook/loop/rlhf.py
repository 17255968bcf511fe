"""RLHF end to end: teach the pretrained review GPT to write positive reviews, with a KL leash.

    python -m workbook rlhf --impl solutions          # the reference code
    python -m workbook rlhf                           # your code from exercises/part3_rlhf.py (the default)
    python -m workbook rlhf --impl solutions --kl-coef 0   # no leash: reward hacking / mode collapse
    python -m workbook rlhf --impl solutions --reward model  # learned reward model instead of VADER
    python -m workbook rlhf --impl solutions --algo grpo     # Part 5: grpo, rloo or dpo instead of PPO
    python -m workbook rlhf --impl solutions --seeds 0 1 2   # one run per seed, and their mean ± spread
    torchrun --standalone --nproc_per_node=2 -m workbook rlhf --impl solutions   # data-parallel (Part 6), any --algo

The loop (``workbook/loop/run.py``: one iteration, the seams task × backend × algorithm, what a
run writes, Ctrl-C, NaN and ``--resume``) on the review task (``task.py``: review openers of
``--prompts``, scored by ``--reward``), the review GPT or ``--model``, and ``--algo`` ppo, grpo,
rloo or dpo. This module holds the command: its options (:class:`Args`: the loop's and the
review task's), their checks, run names, ``main`` and its printed summary.

Writes, under ``<runs-dir>/<run name>/``: ``metrics.jsonl``, ``samples.jsonl``, ``curves.png``,
``summary.json`` and ``policy.pt`` (loadable with ``workbook.lm.load_checkpoint``; with
``--model``, a ``policy/`` folder that ``--model`` loads back). With several ``--seeds``, also
``<runs-dir>/<name>-seeds/`` (``curves.png``: mean and min–max over the seeds; ``summary.json``).
"""

from __future__ import annotations

import dataclasses
import sys
import time
from dataclasses import dataclass

import numpy as np

from workbook import distributed
from workbook.async_rl.sampler import sampling_defaults
from workbook.cli import add_dataclass_arguments, add_seeds_option, dataclass_from_args, make_parser, parse_overrides, require_positive
from workbook.loop import seeds as loop_seeds
from workbook.loop.algorithms import ALGORITHMS, algo_defaults_help, apply_algo_defaults, given_options
from workbook.loop.backend import make_backend
from workbook.loop.options import LoopArgs, check_loop_args
from workbook.loop.run import Run
from workbook.loop.run import train as train_loop
from workbook.loop.seeds import prepare_runs, print_written, train_runs
from workbook.loop.task import ReviewTask, Task, apply_preset, check_review_options, review_task
from workbook.runs import ConfigError, command


@dataclass
class Args(LoopArgs):
    """The loop's options (:class:`~workbook.loop.options.LoopArgs`) and the review task's."""

    reward: str = "vader"
    """vader (the sentiment scorer itself), model (the learned reward model, trained and cached if missing), or a Hugging Face sentiment classifier (owner/name on the hub, or a folder; needs the hf extra)."""
    eos_trick: bool = False
    """Score a response that never emitted EOS (cut off at --max-new-tokens) --missing-eos-score instead (TRL's missing_eos_penalty)."""
    missing_eos_score: float = -1.0
    """The fixed score of an unfinished response under --eos-trick."""
    dpo_beta: float = 0.1
    """dpo: β of the implicit reward β·log(π/π_ref)."""


def algo_args(algo: str, **overrides) -> Args:
    """``Args`` for ``algo`` with its defaults, then ``overrides``."""
    return Args(**({"algo": algo} | ALGORITHMS[algo].defaults | overrides))



# --- options ------------------------------------------------------------------------------------

def help_order() -> list[str]:
    """The fields in --help's order: the review task's options next to the loop's they go with, DPO's last."""
    names = [f.name for f in dataclasses.fields(LoopArgs)]
    for name, after in (("reward", "seed"), ("eos_trick", "device"), ("missing_eos_score", "eos_trick")):
        names.insert(names.index(after) + 1, name)
    return names + ["dpo_beta"]


def parse_command(argv: list[str] | None) -> tuple[Args, list[int]]:
    """(the options, the seeds): algorithm defaults and the ``--prompts imdb`` preset for every option not given."""
    parser = make_parser("python -m workbook rlhf", __doc__.split("\n\n")[0], epilog=algo_defaults_help())
    add_seeds_option(parser, [Args.seed], "one run per seed, e.g. --seeds 0 1 2")
    # quiet is for scripts (the benchmarks); the command line says --no-progress, as every command does.
    add_dataclass_arguments(parser, Args, skip=("seed", "quiet", "progress"), order=help_order())
    parser.add_argument("--no-progress", dest="progress", action="store_false",
                        help="no progress bar on a terminal, no progress line every 30 s elsewhere")
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                        help="set any option by its field name, e.g. --set kl_coef=0.1 (repeatable; same as --kl-coef 0.1)")
    argv = list(sys.argv[1:] if argv is None else argv)
    namespace = parser.parse_args(argv)
    seeds = list(namespace.seeds)
    overrides = parse_overrides(namespace.set, Args)
    if "seed" in overrides:
        raise ConfigError("--set", "seed is set with --seeds S [S ...]")
    args = dataclass_from_args(Args, namespace, seed=seeds[0], **overrides)
    given = given_options(argv) | set(overrides)
    return sampling_defaults(apply_preset(apply_algo_defaults(args, given), given), given), seeds


def parse_args(argv: list[str] | None) -> Args:
    """The options of ``argv`` for its first seed."""
    return parse_command(argv)[0]


def validate(args: Args) -> None:
    """Raise ConfigError for the first bad setting (before anything is loaded or written)."""
    check_loop_args(args)
    require_positive("--dpo-beta", args.dpo_beta)
    ALGORITHMS[args.algo].check(args)
    check_review_options(args)
    make_backend(args).check(args)


def name_stem(args: Args) -> str:
    """What a run's and a seeds folder's default names start with: the algorithm, the reward and β."""
    prefix = "rlhf" if args.algo == "ppo" else f"rlhf-{args.algo}"
    return f"{prefix}-{args.reward.replace('/', '_')}-kl{args.kl_coef:g}"


def run_name(args: Args, stamp: str | None = None) -> str:
    return args.run_name or f"{name_stem(args)}-s{args.seed}-{stamp or time.strftime('%Y%m%d-%H%M%S')}"




# --- the run ------------------------------------------------------------------------------------

def curves_title(args: Args, name: str) -> str:
    """The run, and the settings actually used (per algorithm: PPO's β₀ and target, DPO's β, GRPO's G and β, ...)."""
    return f"{name}  ({args.algo}, impl={args.impl}, reward={args.reward}, {ALGORITHMS[args.algo].title(args)})"


class RlhfRun(Run):
    """The loop's :class:`~workbook.loop.run.Run` on the review task, with this command's checks and names."""

    command = "rlhf"

    def validate(self, args: Args) -> None:
        validate(args)

    def run_name(self, args: Args) -> str:
        return run_name(args)

    def title(self) -> str:
        return curves_title(self.args, self.name)

    def default_task(self, args: Args, tok) -> Task:
        return review_task(args, tok)  # the review openers of --prompts, scored by --reward


def train(args: Args, *, model=None, tok=None, task: Task | None = None, backend=None, pretrain_args=None,
          progress: bool | None = None, resume: dict | None = None) -> dict:
    """One run of the rlhf command: the loop's :func:`~workbook.loop.run.train` with :class:`RlhfRun`.

    ``model``/``tok``: start from these instead of the backend's; ``task``: default the review
    task of ``--prompts``/``--reward``; ``backend``/``pretrain_args``: how the model is loaded;
    ``resume``: a checkpoint to continue. Returns the summary (``status``: finished, interrupted, non-finite)."""
    return train_loop(args, run_class=RlhfRun, model=model, tok=tok, task=task, backend=backend,
                      pretrain_args=pretrain_args, progress=progress, resume=resume)


# --- several seeds ------------------------------------------------------------------------------

def seed_runs(args: Args, seeds: list[int]) -> tuple[list[Args], str | None]:
    """One Args per seed (run names ``<name>-seed<S>`` when several), and the name of the seeds' folder (None for one)."""
    return loop_seeds.seed_runs(args, seeds, run_name, name_stem(args))



@command
def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args, seeds = parse_command(argv)
    runs, group, saved = prepare_runs(args, seeds, argv, command="rlhf", args_class=Args, check=validate,
                                      split_seeds=seed_runs)
    code, summaries, histories = train_runs(runs, saved, train, command="rlhf", stub_file=f"exercises/{ALGORITHMS[args.algo].part}.py")
    if code is not None:
        return code
    if not distributed.is_main():
        return 0
    task = ReviewTask  # the command's task: its headline and panels
    if len(summaries) == 1:
        print_summary(summaries[0], task)
    else:
        print_seeds(summaries, task)
    if group:
        out = loop_seeds.write_seed_summary(args, group, summaries, histories, task, curves_title(args, group))
        print(f"wrote {out}/ (curves.png: mean and min–max over seeds {', '.join(map(str, seeds))}; summary.json)")
    return 0



def print_seeds(summaries: list[dict], task) -> None:
    """One row per seed (before → after of each headline number), then the mean ± std over the seeds."""
    width = 18
    print(f"\n{'':<10}" + "".join(f"{title:>{width}}" for _, title, _ in task.headline))
    for s in summaries:
        print(f"{'seed ' + str(s['seed']):<10}" + "".join(
            f"{format(s['before'][k], fmt) + ' → ' + format(s['after'][k], fmt):>{width}}" for k, _, fmt in task.headline))
    cells = []
    for k, _, fmt in task.headline:
        after = np.array([s["after"][k] for s in summaries])
        cells.append(f"{format(after.mean(), fmt)} ± {after.std():.2g}")
    print(f"{'after':<10}" + "".join(f"{c:>{width}}" for c in cells) + "   (mean ± std over the seeds)")
    for s in summaries:
        print_written(s)


def print_summary(summary: dict, task) -> None:
    titles = [(key, title, fmt) for key, title, fmt in task.headline]
    print(f"\n{'':<12}" + "".join(f"{title:>{max(8, len(title) + 2)}}" for _, title, _ in titles))
    for when in ("before", "after"):
        s = summary[when]
        print(f"{when:<12}" + "".join(f"{format(s[key], fmt):>{max(8, len(title) + 2)}}" for key, title, fmt in titles))
    print("\nsamples after training:")
    for text, score in zip(summary["samples_after"], summary["scores_after"]):
        print(f"  {score:+.2f}  {text}")
    print()
    print_written(summary)




if __name__ == "__main__":
    sys.exit(main())
