"""Parts 7, 9 and 10 end to end, the reason command: RL with verifiable rewards on arithmetic (Part 7), with a
calculator tool over several turns (Part 9: --task calculator), with sampler processes and stale batches (Part 10:
--samplers N, --lag K).

    python -m workbook reason --impl solutions                       # DAPO on three-digit addition
    python -m workbook reason --impl solutions --algo gspo --task multiplication
    python -m workbook reason                                        # your exercises/part7_reasoning.py (the default)
    python -m workbook reason --impl solutions --seeds 0 1 2         # one run per seed, and their spread
    python -m workbook reason --task calculator                      # Part 9: a*b*c with a calculator tool
    python -m workbook reason --samplers 1                           # Part 10: a sampler process beside the learner
    torchrun --standalone --nproc_per_node=2 -m workbook reason --impl solutions   # data-parallel (Part 6)
    python -m workbook reason --impl solutions --model Qwen/Qwen2.5-0.5B-Instruct --prompts gsm8k.tsv \\
        --device cuda                                                # a real model on a GPU (HF_PRESET)

The same loop as ``rlhf`` (``workbook/loop/run.py``: the algorithm picks the prompts, the
policy samples, the task scores, the algorithm steps) on another task: :class:`ReasoningTask`.
Its prompts are arithmetic problems from ``workbook/reason`` (``--task``), its reward is the
learner's ``answer_reward`` (a program checks the answer: no reward model), and its evaluation
samples ``--eval-k`` completions for each of ``--eval-samples`` held-out problems and reports
pass@1 and pass@k (the learner's unbiased ``pass_at_k``), the well-formed share and the length.
The base model is Part 3's GPT pretrained on the task's worked solutions (cached), or any
Hugging Face causal LM with ``--model`` (then ``--prompts FILE``: one ``question<TAB>answer`` a
line; the last ``--eval-samples`` lines are held out; :data:`HF_PRESET` replaces the defaults).

``--algo``: grpo and rloo (Part 5's trainers), dr_grpo (Part 5's with Dr. GRPO's settings),
dapo, gspo, cispo (Part 7's losses, ``workbook/loop/rlvr.py``) or ppo (Part 3, with a critic).
Each has its defaults (:data:`REASON_DEFAULTS`, tuned with ``benchmarks/reasoning.py``); an
option on the command line always wins.

Writes, under ``<runs-dir>/<run name>/``: ``metrics.jsonl``, ``samples.jsonl`` (every
``--sample-every`` iterations: problem, completion, the expected answer, the answer the
completion gave, whether it was right, its reward), ``curves.png`` (batch pass@1 with the
held-out pass@1 before and after training, share of groups with a signal, then the algorithm's:
entropy, length, clip fractions low/high, ...), ``summary.json`` (before/after; only this
command's settings) and the policy. wandb logs the same, offline by default. Progress: a bar on
a terminal, elsewhere a line every 30 s (workbook/progress.py); ``evaluating …`` says when
the held-out samples are drawn (Ctrl-C there stops the evaluation at once; after training the
run is saved first). The exit status: 0, 2 for a bad option or a stub of yours the run reached
(one line naming it), 130 after Ctrl-C, 3 after a NaN.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from torch import Tensor

from workbook import distributed
from workbook.async_rl.sampler import DEFAULT_CORRECTION, sampling_defaults
from workbook.cli import (add_dataclass_arguments, add_seeds_option, dataclass_from_args, make_parser, parse_overrides, require,
                          require_at_least, require_divides, require_in, require_positive)
from workbook.loop import rlvr
from workbook.loop import seeds as loop_seeds
from workbook.loop.algorithms import ALGORITHMS, given_options
from workbook.loop.backend import TinyGPT, make_backend, save_policy
from workbook.loop.calls import check_learner_code
from workbook.loop.options import LoopArgs, check_loop_args
from workbook.loop.run import Run, readable_floats, train
from workbook.loop.seeds import prepare_runs, print_written, train_runs
from workbook.loop.task import Prompt
from workbook.loop.verifiable import INSTRUCTION, CalculatorTask, ReasoningTask, VerifiableTask, extract_answer  # noqa: F401 (the tasks of this command)
from workbook.rlhf.data import Rollout
from workbook.runs import ConfigError, command

REASON_ALGOS = ("grpo", "dapo", "dr_grpo", "gspo", "cispo", "rloo", "ppo")
DEFAULT_ALGO = "dapo"

REASON_DEFAULTS: dict[str, dict[str, Any]] = {
    # GRPO as published (Shao et al. 2024): std-scaled advantages, 1/|o| per response, β = 0.04 (k3 in the loss).
    "grpo": {"kl_coef": 0.04, "loss_normalisation": "sequence"},
    # DAPO (Yu et al. 2025): clip-higher, dynamic sampling, token-level loss, soft overlong penalty and
    # truncated completions masked out, β = 0.
    "dapo": {"eps_high": 0.28, "dynamic_sampling": True, "overlong_cache": 16, "mask_truncated": True},
    # Dr. GRPO (Liu et al. 2025): no std division, a constant normaliser (max_new_tokens), β = 0.
    "dr_grpo": {"grpo_scale": "none", "loss_normalisation": "constant"},
    # GSPO (Zheng et al. 2025): the clip range of a length-normalised sequence ratio is tiny.
    "gspo": {"cliprange": 3e-4, "eps_high": 4e-4},
    # CISPO (MiniMax 2025): no lower bound on the weight, an upper one only.
    "cispo": {"cliprange": 1.0, "eps_high": 0.28},
    # RLOO (Part 5): leave-one-out baseline, β in the reward (0 here): the common defaults.
    "rloo": {},
    # PPO (Part 3): one sample per problem, a value head; no KL penalty.
    "ppo": {"adaptive_kl": False},
}

# With --model, these replace the defaults tuned for the tiny reasoner (unless given on the command
# line): settings in the range TRL's GRPOTrainer and Open-R1 use for a 0.5-1.5B model. The preset
#     python -m workbook reason --impl solutions --model Qwen/Qwen2.5-0.5B-Instruct --prompts gsm8k.tsv --device cuda
# (a GPU, the hf extra; gsm8k.tsv as in the README) is *claimed* to lift held-out pass@1 within
# its 200 iterations; it has not been measured here.
HF_PRESET = {
    "batch_size": 64, "group_size": 8, "mini_batch_size": 16, "learning_rate": 1e-6, "max_new_tokens": 256,
    "iterations": 200, "eval_samples": 100, "eval_k": 8, "sample_every": 5,
}


@dataclass
class ReasonArgs(LoopArgs):
    impl: Literal["exercises", "solutions"] = "exercises"
    """Whose code trains: exercises (yours) or solutions. Parts 3, 5 and 7; with --task calculator also Part 9; with --samplers or --lag also Part 10. Every function the run will call is checked first: a stub is named before anything starts."""
    algo: Literal["grpo", "dapo", "dr_grpo", "gspo", "cispo", "rloo", "ppo"] = DEFAULT_ALGO
    """The algorithm (each has its defaults; see --help's end)."""
    model: str = ""
    """A Hugging Face causal LM instead of the tiny reasoner: a hub name or a save_pretrained folder (needs the hf extra; with --prompts)."""
    device: str = "cpu"
    """cpu or cuda (the tiny reasoner is fastest on the CPU; a Hugging Face model wants cuda)."""
    # Every algorithm: 16 problems × 16 samples per iteration in eight minibatches of 32 (the later
    # ones are off-policy, so the clips have something to do), no KL, no entropy bonus. Tuned for
    # dapo on the addition task (held-out pass@1 after training, 256 problems × 16 samples; a base
    # model pretrained 2000 steps, pass@1 0.52; one torch thread, a 2-core machine running one other job):
    #   minibatch 64: lr 1e-4 0.93 after 76 s, 2e-4 0.92 after 58 s, 3e-4 0.87 after 76 s (it rose, then fell)
    #   60 s each: minibatch 32, lr 1e-4 0.94, 1.5e-4 0.93, 2e-4 0.94; minibatch 16, 1e-4 0.93, 2e-4 0.87;
    #   two passes over each batch (minibatch 64, 2e-4) 0.91
    # (that base model's own mistakes capped these at ~0.94; the base model of today, pretrained
    # longer, reaches 0.99 with minibatch 32 and lr 2e-4, 0.98 with 1e-4). lr 1e-3 peaks, then
    # collapses; 3e-5 is far slower.
    iterations: int = 60
    """Iterations (one batch of samples each; dapo: about 0.8 s each on one core); a fixed count, so the same seed gives the same run."""
    batch_size: int = 256
    """Completions sampled per iteration (--batch-size / --group-size problems, --group-size times each)."""
    group_size: int = 16
    """Samples per problem (G) of the group algorithms; --batch-size must be a multiple of it."""
    mini_batch_size: int = 32
    """Completions per gradient step."""
    ppo_epochs: int = 1
    """Passes over each batch."""
    learning_rate: float = 2e-4
    """Adam learning rate."""
    kl_coef: float = 0.0
    """β: the KL-to-reference weight (GRPO: k3 in the loss; RLOO: in the reward; PPO: its initial β). 0: no KL, as in DAPO."""
    ent_coef: float = 0.0
    """Entropy bonus weight."""
    loss_normalisation: Literal["sequence", "token", "constant"] = "token"
    """sequence (1/|o| per completion), token (DAPO) or constant (Dr. GRPO, divides by --max-new-tokens)."""
    task: Literal["addition", "multiplication", "calculator"] = "addition"
    """addition (slips the base model can be taught out of), multiplication (the base model's competence is the limit) or calculator (Part 9: a*b*c with a calculator tool, over several turns)."""
    prompts: str = ""
    """With --model: a file of problems, one 'question<TAB>answer' a line (the last --eval-samples lines held out)."""
    format_reward: float = 0.1
    """Reward of a well-formed answer that is wrong (the verifier's; a right one gets 1, anything else 0)."""
    eval_samples: int = 256
    """Held-out problems for the before/after evaluation (by default all of a task's if it has fewer: multiplication)."""
    eval_k: int = 16
    """Completions sampled per held-out problem: pass@1 and pass@k for k = this."""
    kl_target: float = 4.5
    """Target mean per-completion KL (nats) of PPO's adaptive β controller (--algo ppo with --adaptive-kl)."""
    eps_high: float = 0.2
    """Upper clip ε_high (--cliprange is the lower one, ε_low) of dapo, gspo and cispo."""
    dynamic_sampling: bool = False
    """Train only on groups whose rewards differ (DAPO)."""
    overlong_cache: int = 0
    """DAPO's soft overlong penalty over the last this many tokens before --max-new-tokens (0: off; dapo's default 16 becomes --max-new-tokens / 4 where that is less)."""
    mask_truncated: bool = False
    """Keep completions cut off at --max-new-tokens out of the loss (DAPO)."""
    max_new_tokens: int = 64
    """Longest completion in tokens (the longest worked solution is 46 characters + EOS)."""
    sample_every: int = 10
    """Log sample completions every this many iterations."""
    run_name: str = ""
    """Default: reason-<task>-<algo>-s<seed>-<time> (several --seeds: <run name>-seed<S> each); an existing run is refused unless --overwrite."""
    tool: bool = True
    """--task calculator: the environment runs the calculator; --no-tool: nothing answers a call, the model writes its own results."""
    max_calls: int = 4
    """--task calculator: the turn budget, tool calls per episode (a call past it ends the episode, unanswered)."""
    mask_tool_tokens: bool = True
    """--task calculator: keep the tool's tokens out of the loss, the KL and the stats; --no-mask-tool-tokens trains on them as if the model had written them (the ablation of docs/agents.md)."""


HIDDEN = ("seed",)
"""Fields that are no option nor --set field (seed is --seeds)."""


# Per task, the defaults that differ (after the algorithm's, before the command line's): an episode
# of the calculator task holds the tool's tokens too (the longest right one is 97 tokens + EOS). Its
# budget: 36 iterations, 70-85 s on one core. In 40 iterations dapo at lr 2e-4 ended at held-out
# pass@1 0.934-0.957 (seeds 0-2, 77-94 s), at 3e-4 at 0.969-0.971 (seeds 0-1, 86-93 s); 50 iterations
# at 2e-4 got 0.969 (seed 0) in 99 s (benchmarks/agents.py; docs/agents.md).
TASK_DEFAULTS: dict[str, dict[str, Any]] = {"calculator": {"max_new_tokens": 112, "iterations": 36, "learning_rate": 3e-4}}


def reason_args(algo: str = DEFAULT_ALGO, **overrides) -> ReasonArgs:
    """``ReasonArgs`` for ``algo`` with its defaults (and the task's, :data:`TASK_DEFAULTS`), then ``overrides``."""
    task = TASK_DEFAULTS.get(overrides.get("task", "addition"), {})
    return ReasonArgs(**({"algo": algo} | REASON_DEFAULTS[algo] | task | overrides))


def pool_size(task: str) -> int:
    """How many held-out problems ``task`` has."""
    if task == "calculator":
        from workbook.agents.task import eval_pool_size

        return eval_pool_size()
    from workbook.reason.task import eval_pool_size

    return eval_pool_size(task)


# --- the task -----------------------------------------------------------------------------------

def read_problem_file(path: str) -> list[tuple[str, str]]:
    """(question, answer) per line of a ``question<TAB>answer`` file; ConfigError naming the first bad line."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError("--prompts", f"cannot read {path!r}: {error}") from None
    out = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        question, tab, answer = line.rpartition("\t")
        answer = answer.strip().replace(",", "")
        if not tab or not question.strip() or not answer.isascii() or not answer.isdigit():
            raise ConfigError("--prompts", f"{path}:{number}: expected 'question<TAB>answer' with a whole number answer")
        out.append((question.strip(), answer))
    return out


class Reasoner(TinyGPT):
    """Part 3's GPT pretrained on the task's worked solutions (``workbook/reason``), cached."""

    name = "reasoner GPT"

    def __init__(self, task: str):
        self.task = task

    def load(self, args, dp):
        from workbook.reason import load_or_pretrain_reasoner

        with dp.main_first():  # rank 0 fills the cache, the others then read it
            if self.task == "calculator":
                from workbook.agents.base import load_or_pretrain_agent

                return load_or_pretrain_agent(progress=not args.quiet and dp.is_main)
            return load_or_pretrain_reasoner(self.task, progress=not args.quiet and dp.is_main)

    save = staticmethod(save_policy)


def make_task(args: ReasonArgs) -> VerifiableTask:
    group = 1 if args.algo == "ppo" else args.group_size
    if args.task == "calculator":
        return CalculatorTask(args.impl, group_size=group, format_reward=args.format_reward, eval_k=args.eval_k,
                              tool=args.tool, max_calls=args.max_calls, mask_tool_tokens=args.mask_tool_tokens)
    problems = read_problem_file(args.prompts) if args.prompts else None
    return ReasoningTask(args.impl, args.task, group_size=group, format_reward=args.format_reward, eval_k=args.eval_k,
                         problems=problems, heldout=args.eval_samples)


# --- options ------------------------------------------------------------------------------------

def algo_help() -> str:
    lines = [f"--algo {a}: " + ", ".join(f"--{k.replace('_', '-')} {v}" for k, v in d.items()) for a, d in REASON_DEFAULTS.items() if d]
    return ("Each algorithm changes some defaults: " + "; ".join(lines) + ". With --model, also: "
            + ", ".join(f"--{k.replace('_', '-')} {v}" for k, v in HF_PRESET.items()) + ". An option given on the command line always wins.")


def shown_default(name: str, default: Any) -> str:
    """``--help``'s default of a field: the value the default algorithm (dapo) uses, where it sets its own; each
    task's own (:data:`TASK_DEFAULTS`); Part 10's that follow from other options."""
    shown = str(default)
    if name in REASON_DEFAULTS[DEFAULT_ALGO]:
        value = REASON_DEFAULTS[DEFAULT_ALGO][name]
        extra = " (or --max-new-tokens / 4 where that is less)" if name == "overlong_cache" else ""
        shown = f"{value}{extra} with --algo {DEFAULT_ALGO}, the default; {default} for the algorithms that do not set it"
    tasks = [f"{d[name]} with --task {task}" for task, d in TASK_DEFAULTS.items() if name in d]
    if tasks:
        shown = f"{shown} with --task addition or multiplication; " + "; ".join(tasks)
    if name == "lag":
        shown += "; 1 with --samplers N"
    if name == "correction":
        shown += (f"; {DEFAULT_CORRECTION} with --samplers N or --lag K > 0 (dapo, gspo, cispo: TRL's default; "
                  "--correction none trains on stale batches as they are)")
    return shown


def parse_command(argv: list[str] | None) -> tuple[ReasonArgs, list[int]]:
    """(the options, the seeds): the algorithm's defaults for every option not given, then ``--set``."""
    parser = make_parser("python -m workbook reason", __doc__.split("\n\n")[0], epilog=algo_help())
    add_seeds_option(parser, [0], "one run per seed, e.g. --seeds 0 1 2")
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                        help="set any option by its field name, e.g. --set eps_high=0.3 (repeatable; after the defaults)")
    # quiet is for scripts (the benchmark); the command line says --no-progress, as every command does.
    add_dataclass_arguments(parser, ReasonArgs, skip=HIDDEN + ("quiet", "progress"), shown_default=shown_default)
    parser.add_argument("--no-progress", dest="progress", action="store_false",
                        help="no progress bar on a terminal, no progress line every 30 s elsewhere")
    argv = list(sys.argv[1:] if argv is None else argv)
    namespace = parser.parse_args(argv)
    seeds = list(namespace.seeds)
    args = dataclass_from_args(ReasonArgs, namespace, seed=seeds[0])
    given = given_options(argv)
    defaults = {k: v for k, v in REASON_DEFAULTS[args.algo].items() if k not in given}
    if any(item.partition("=")[0] == "seed" for item in namespace.set):
        raise ConfigError("--set", "seed is set with --seeds S [S ...]")
    overrides = parse_overrides(namespace.set, ReasonArgs, skip=HIDDEN)
    task = overrides.get("task", args.task)
    defaults |= {k: v for k, v in TASK_DEFAULTS.get(task, {}).items() if k not in given}
    if args.model:
        defaults |= {k: v for k, v in HF_PRESET.items() if k not in given}
    args = dataclasses.replace(args, **(defaults | overrides))
    if "eval_samples" not in given | set(overrides) and not args.prompts:
        args = dataclasses.replace(args, eval_samples=min(args.eval_samples, pool_size(args.task)))
    if "overlong_cache" not in given | set(overrides) and args.overlong_cache > args.max_new_tokens // 4:
        args = dataclasses.replace(args, overlong_cache=args.max_new_tokens // 4)  # a short limit, a shorter ramp
    return sampling_defaults(args, given | set(overrides)), seeds


def validate(args: ReasonArgs) -> None:
    """Raise ConfigError for the first bad setting (before anything is loaded or written)."""
    check_loop_args(args)
    require_at_least("--eval-k", args.eval_k, 1)
    require_positive("--eps-high", args.eps_high)
    require(args.cliprange <= 1, "--cliprange", f"ε_low must be ≤ 1 (the ratio's floor 1 − ε_low ≥ 0), got {args.cliprange!r}")
    require(0 <= args.format_reward < 1, "--format-reward",
            f"must be in [0, 1) (a wrong answer never pays as much as a right one), got {args.format_reward!r}")
    require_in("--overlong-cache", args.overlong_cache, 0, args.max_new_tokens)
    if args.algo != "ppo":  # whole groups of at least two samples (a baseline needs another sample)
        require_at_least("--group-size", args.group_size, 2)
        require_divides("--group-size", args.group_size, "--batch-size", args.batch_size)
    require_at_least("--max-calls", args.max_calls, 0)
    if args.task != "calculator":  # the tool's options mean nothing to a task without a tool
        for flag, default in (("--no-tool", args.tool), ("--no-mask-tool-tokens", args.mask_tool_tokens)):
            require(default, flag, f"only --task calculator has a tool (got --task {args.task})")
        require(args.max_calls == 4, "--max-calls", f"only --task calculator has a tool (got --task {args.task})")
    elif args.prompts:
        raise ConfigError("--prompts", "the calculator task makes its own problems (a*b*c); --prompts is for addition-style files")
    if args.prompts:
        require(bool(args.model), "--prompts", "a problem file needs --model (the tiny reasoner only knows its arithmetic)")
        require(Path(args.prompts).is_file(), "--prompts", f"{args.prompts!r} is not a file")
        n = len(read_problem_file(args.prompts))
        require(n > args.eval_samples, "--prompts",
                f"{args.prompts} has {n} problems; --eval-samples {args.eval_samples} are held out and some must be left to train on")
    else:
        pool = pool_size(args.task)
        require(args.eval_samples <= pool, "--eval-samples", f"the {args.task} task has {pool} held-out problems, got {args.eval_samples}")
    make_backend(args).check(args)


def name_stem(args: ReasonArgs) -> str:
    """What a run's and a seeds folder's default names start with: the task and the algorithm."""
    return f"reason-{'file' if args.prompts else args.task}-{args.algo}"


def run_name(args: ReasonArgs, stamp: str | None = None) -> str:
    return args.run_name or f"{name_stem(args)}-s{args.seed}-{stamp or time.strftime('%Y%m%d-%H%M%S')}"


# --- the run ------------------------------------------------------------------------------------

class ReasonRun(Run):
    """The loop's :class:`~workbook.loop.run.Run` with this command's checks, names, title and sample rows."""

    command = "reason"
    rollout_chunk = 256  # a whole batch of short answers in one KV-cached generate: ~3× faster than 4 × 64

    def evaluating_line(self, what: str) -> str:
        return (f"evaluating {what}: {len(self.eval_prompts)} held-out problems × {self.args.eval_k} samples "
                f"({len(self.eval_prompts) * self.args.eval_k:,} completions) …")

    def validate(self, args: ReasonArgs) -> None:
        validate(args)

    def run_name(self, args: ReasonArgs) -> str:
        return run_name(args)

    def default_task(self, args: ReasonArgs, tok) -> VerifiableTask:
        return make_task(args)

    def title(self) -> str:
        a = self.args
        return f"{self.name}  ({a.algo}, impl={a.impl}, task={self.task.name}, {ALGORITHMS[a.algo].title(a)})"

    def log_samples(self, it: int, prompts: list[Prompt], batch: Rollout, scores: Tensor) -> None:
        """Each logged sample with its check: the expected answer, the one given, right or not, the reward."""
        columns = ["iteration", "prompt", "completion", "answer", "given", "correct", "reward", "finished"]
        rows = [[it + 1, p.text, c, p.answer, extract_answer(c), s == 1.0, s, f]
                for p, c, s, f in zip(prompts[:8], batch.completions[:8], readable_floats(scores[:8]), batch.finished[:8])]
        episodes = getattr(batch, "episodes", None)
        if episodes is not None:  # Part 9: the episode turn by turn, who wrote what
            columns.append("turns")
            for row, episode in zip(rows, episodes):
                row.append([{who: text} for who, text in episode])
        if self.samples_file is not None:  # rank 0 writes (under torchrun the other ranks have no files)
            for row in rows:
                self.samples_file.write(dict(zip(columns, row)))
        if self.wandb is not None:
            import wandb

            data = [row[:-1] + [json.dumps(row[-1])] for row in rows] if episodes is not None else rows  # a cell holds text
            self.wandb.log({"samples": wandb.Table(columns=columns, data=data)}, step=it + 1)


def train_reason(args: ReasonArgs, *, model=None, tok=None, progress: bool | None = None, resume: dict | None = None) -> dict:
    """One run of the reason command (``model``/``tok``: start from these instead of the backend's; ``resume``: a checkpoint)."""
    backend = None if args.model else Reasoner(args.task)
    return train(args, model=model, tok=tok, task=make_task(args), backend=backend, progress=progress, resume=resume,
                 run_class=ReasonRun)


def seed_runs(args: ReasonArgs, seeds: list[int]) -> tuple[list[ReasonArgs], str | None]:
    """One ReasonArgs per seed (run names ``<name>-seed<S>`` when several), and the seeds' folder (None for one)."""
    return loop_seeds.seed_runs(args, seeds, run_name, name_stem(args))


def write_seed_summary(args: ReasonArgs, group: str, summaries: list[dict], histories: dict[int, list[dict]]) -> Path:
    task = make_task(args)
    return loop_seeds.write_seed_summary(args, group, summaries, histories, task,
                                     f"{group}  ({args.algo}, impl={args.impl}, task={task.name})")


def print_summary(summary: dict, headline) -> None:
    width = 14
    print(f"\n{'':<8}" + "".join(f"{title:>{width}}" for _, title, _ in headline) + f"{'train s':>{width}}")
    for when in ("before", "after"):
        s = summary[when]
        wall = "" if when == "before" else f"{summary['ppo_wall_s']:.1f}"
        print(f"{when:<8}" + "".join(f"{format(s[k], fmt):>{width}}" for k, _, fmt in headline) + f"{wall:>{width}}")
    print("\nsamples after training (reward, text):")
    for text, score in zip(summary["samples_after"], summary["scores_after"]):
        print(f"  {score:.2f}  {text}")
    print()
    print_written(summary)


@command
def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args, seeds = parse_command(argv)
    runs, group, saved = prepare_runs(args, seeds, argv, command="reason", args_class=ReasonArgs, check=validate,
                                      split_seeds=seed_runs)
    check_learner_code(runs[0], runs[0].task)  # every stub the run would reach, named before anything starts
    code, summaries, histories = train_runs(runs, saved, train_reason, command="reason",
                                            stub_file="exercises/part7_reasoning.py")
    if code is not None:
        return code
    if not distributed.is_main():
        return 0
    headline = make_task(runs[0]).headline  # the resumed run's settings (its --eval-k), not the command line's
    for summary in summaries:
        print_summary(summary, headline)
    if group:
        out = write_seed_summary(args, group, summaries, histories)
        print(f"wrote {out}/ (curves.png: mean and min–max over seeds {', '.join(map(str, seeds))}; summary.json)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
