"""The options every LM command shares (:class:`LoopArgs`) and how ``--resume`` merges a checkpoint's with the command line's.

``rlhf`` (``workbook/loop/rlhf.py``) adds the review task's options to :class:`LoopArgs`;
``reason`` (``reasoning.py``) adds its own and changes defaults. The loop (``run.py``) reads
only these fields, so neither command imports the other.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch

from workbook.async_rl.sampler import validate_sampling
from workbook.checkpoints import CHECKPOINT, load_run
from workbook.cli import require, require_at_least, require_choices, require_divides, require_in, require_positive
from workbook.loop.algorithms import given_options
from workbook.runs import ConfigError, check_can_create


@dataclass
class LoopArgs:
    """The options of every LM command, with the review task's defaults (``rlhf``'s); a command's subclass
    adds its own and changes defaults and help (``rlhf``: ``Args``; ``reason``: ``ReasonArgs``)."""

    impl: Literal["exercises", "solutions"] = "exercises"
    """Which part3_rlhf (and part5_beyond_ppo) to train with: exercises (yours) or solutions (the reference)."""
    algo: Literal["ppo", "grpo", "rloo", "dpo"] = "ppo"
    """ppo (Part 3), or Part 5's grpo, rloo or dpo (options for those at the end of this list)."""
    seed: int = 0
    """Seeds the prompts, the sampling and the minibatch order (on the command line: --seeds S [S ...], one run each)."""
    model: str = ""
    """A Hugging Face causal LM instead of the review GPT: a hub name (gpt2) or a save_pretrained folder (needs the hf extra)."""
    prompts: str = "reviews"
    """reviews (the corpus' openers), imdb (IMDB review openers; sets the TRL preset, see workbook/loop/task.py) or a file, one prompt a line (with --model)."""
    device: str = "cpu"
    """cpu or cuda (the review GPT is fastest on the CPU; a Hugging Face model wants cuda)."""
    iterations: int = 150
    """Iterations (one batch of samples each); a fixed count, so the same seed gives the same run.
    150 PPO iterations take about 50 s on one CPU thread; the reward levels off at about 0.6-0.65 from iteration ~80."""
    time_budget_s: float = 0.0
    """Optionally stop after this many seconds of training (generation + scoring + updates); 0 = no limit."""
    batch_size: int = 64
    """Reviews sampled per iteration."""
    mini_batch_size: int = 16
    """Reviews per gradient step."""
    ppo_epochs: int = 2
    """Passes over each batch."""
    learning_rate: float = 2.5e-4
    """Adam learning rate."""
    kl_coef: float = 0.05
    """Initial KL coefficient β; 0 turns the KL penalty (and its controller) off."""
    adaptive_kl: bool = True
    """Adapt β towards --kl-target (else keep it fixed)."""
    kl_target: float = 4.5
    """Target mean per-review KL (nats) of the adaptive controller."""
    kl_horizon: float = 2_000.0
    """Samples over which β may change by about ×e^0.2 (smaller: faster control)."""
    kl_penalty: Literal["kl", "abs", "mse", "full", "k3"] = "kl"
    """Per-token KL estimator in the rewards: kl, abs, mse, full or k3."""
    ent_coef: float = 0.03
    """Entropy bonus weight (keeps the word choice varied: without it the policy settles on one adjective)."""
    temperature: float = 1.0
    """Sampling temperature (the forward passes divide the logits by it too)."""
    max_new_tokens: int = 110
    """Longest response in characters (the corpus' reviews are at most 120 characters)."""
    vf_coef: float = 0.1
    """Value-loss weight."""
    cliprange: float = 0.2
    """Policy ratio clip ε."""
    cliprange_value: float = 0.2
    """Value clip ε_v."""
    gamma: float = 1.0
    """Discount over tokens."""
    lam: float = 0.95
    """GAE λ."""
    eval_samples: int = 128
    """Held-out prompts for the before/after evaluation."""
    sample_every: int = 5
    """Log a table of sample generations every this many iterations."""
    wandb: Literal["offline", "online", "disabled"] = "offline"
    """wandb mode: offline (default, no account needed), online, or disabled."""
    runs_dir: str = "runs"
    """Outputs go to <runs_dir>/<run name>/."""
    run_name: str = ""
    """Default: rlhf-<reward>-kl<kl_coef>-s<seed>-<time> (with several --seeds, <run name>-seed<S> each). An existing run of that name is refused unless --overwrite."""
    overwrite: bool = False
    """Replace an existing run folder of the same name (deleting the old run) instead of refusing."""
    checkpoint_every: int = 0
    """Write checkpoint.pt every this many iterations (0: every tenth of the run) and at the end."""
    resume: str = ""
    """A run folder to continue from its checkpoint.pt, exactly (weights, optimizer, β, random streams): the same settings, except --iterations (to train longer), --learning-rate, --time-budget-s and the output options; metrics and samples appended, the wandb run resumed."""
    threads: int = 1
    """torch threads (1 is fastest for this small model on a shared CPU)."""
    quiet: bool = False
    """Print only the before/after summary."""
    progress: bool = True
    """Show a progress bar over the iterations (--no-progress: none, e.g. in CI logs)."""
    # Part 5 (--algo grpo|rloo|dpo, and reason's). --kl-coef is their fixed β (in GRPO's loss, in RLOO's reward),
    # --ppo-epochs their passes over a batch; --batch-size counts samples (GRPO/RLOO) or pairs (DPO).
    group_size: int = 8
    """grpo/rloo: samples per prompt; --batch-size must be a multiple of it."""
    grpo_scale: Literal["group", "batch", "none"] = "group"
    """grpo: advantage scaling, group (the paper), batch (this rank's batch under torchrun) or none (Dr. GRPO)."""
    loss_normalisation: Literal["sequence", "token", "constant"] = "sequence"
    """grpo/rloo: sequence (1/|o| per response), token (DAPO) or constant (Dr. GRPO, divides by --max-new-tokens)."""
    # Part 10 (stale and mismatched rollouts; workbook/async_rl/). Without them the loop samples with the policy itself.
    samplers: int = 0
    """Sampler processes beside this learner process (torch.distributed, gloo): 0 samples here, synchronously; 1 or more run sampling and learning at once (asynchronous; --lag defaults to 1)."""
    lag: int = 0
    """Fixed lag K: batch i is sampled by the policy after max(0, i − K) updates (reproducible for a seed, also without --samplers: in this process, one version behind the other)."""
    free_running: bool = False
    """With --samplers: a sampler takes the newest weights it has received, and --lag K only bounds the staleness (faster to fresh weights, not reproducible)."""
    correction: Literal["none", "token_truncate", "token_mask", "sequence_truncate", "sequence_mask"] = "none"
    """How the learner corrects a batch sampled by another policy (Part 10's importance_weights; dapo, gspo, cispo): none, or TRL's four modes."""
    is_cap: float = 3.0
    """The importance weight's cap C of --correction (truncated to C, or masked above it)."""
    off_policy_delta: float = 0.0
    """DeepSeek-V3.2's off-policy sequence mask: leave out a sequence with negative advantage whose mean log π_sampler/π_learner exceeds this (0: off)."""
    kl_estimator: Literal["k3", "k3_is"] = "k3"
    """KL term in the loss (with --kl-coef > 0; dapo, gspo, cispo): k3, or k3 weighted by π/π_sampler (unbiased under stale sampling)."""
    sampler_dtype: Literal["float32", "bfloat16"] = "float32"
    """The sampler's copy of the policy: float32, or bfloat16 as an inference engine would (its log-probs then differ from the learner's)."""




RESUME_MAY_CHANGE = frozenset({"iterations", "learning_rate", "time_budget_s", "wandb", "progress", "quiet", "threads",
                               "checkpoint_every", "sample_every", "device", "resume", "debug"})
"""What a resumed run may change; every other option given with --resume must match the checkpoint."""


def check_loop_args(args: LoopArgs) -> None:
    """ConfigError for the first bad setting among the fields every LM command has; a command checks its own after.

    Ranges first, then what depends on another field (``--mini-batch-size`` divides
    ``--batch-size``), then Part 10's options and ``--device``. Nothing is loaded or written.
    """
    def option(name: str) -> str:
        return "--seeds" if name == "seed" else f"--{name.replace('_', '-')}"

    require_choices(args)
    for name in ("iterations", "batch_size", "mini_batch_size", "ppo_epochs", "max_new_tokens", "eval_samples",
                 "sample_every", "threads"):
        require_at_least(option(name), getattr(args, name), 1)
    for name in ("learning_rate", "temperature", "cliprange", "cliprange_value", "kl_target", "kl_horizon"):
        require_positive(option(name), getattr(args, name))
    for name in ("checkpoint_every", "kl_coef", "ent_coef", "vf_coef", "time_budget_s", "seed"):
        require_at_least(option(name), getattr(args, name), 0)
    require_in("--gamma", args.gamma, 0, 1, open_low=True)
    require_in("--lam", args.lam, 0, 1)
    require_divides("--mini-batch-size", args.mini_batch_size, "--batch-size", args.batch_size)
    validate_sampling(args)
    require(args.device == "cpu" or (args.device.split(":")[0] == "cuda" and torch.cuda.is_available()), "--device",
            f"{args.device!r}: expected cpu, or cuda (cuda:N) on a machine with a CUDA GPU")


def resume_args(args: LoopArgs, seeds: list[int], argv: list[str], *, command: str, args_class: type,
                check) -> tuple[LoopArgs, dict]:
    """(the resumed run's Args, its checkpoint): the checkpoint's settings, with only :data:`RESUME_MAY_CHANGE` changed.

    ``command``, ``args_class`` and ``check``: the command whose run it is, its options' class and its checks."""
    saved = load_run(args.resume, "--resume", (command,))
    given = given_options(argv) - {"set"}
    for i, token in enumerate(argv):  # --set FIELD=VALUE names a field too
        if token == "--set" and i + 1 < len(argv):
            given.add(argv[i + 1].split("=", 1)[0])
        elif token.startswith("--set="):
            given.add(token.removeprefix("--set=").split("=", 1)[0])
    for name in ("run_name", "runs_dir", "overwrite"):
        require(name not in given, f"--{name.replace('_', '-')}", "does not apply to --resume (the run continues in its own folder)")
    before = saved["config"]
    may = "a resumed run keeps its settings; only --iterations, --learning-rate, --time-budget-s and output options may change"
    require("seeds" not in given or seeds == [before["seed"]], "--seeds",
            f"{' '.join(map(str, seeds))} conflicts with the checkpoint's seed {before['seed']} ({may})")
    for name in sorted(given - RESUME_MAY_CHANGE - {"seeds"}):
        if name in before and getattr(args, name, before[name]) != before[name]:
            raise ConfigError(f"--{name.replace('_', '-')}", f"{getattr(args, name)} conflicts with the checkpoint's "
                                                            f"{before[name]} ({may})")
    fields = {f.name for f in dataclasses.fields(args_class)}
    run_dir = Path(args.resume)
    merged = ({k: v for k, v in before.items() if k in fields} | {k: getattr(args, k) for k in given & RESUME_MAY_CHANGE & fields}
              | {"resume": str(run_dir), "run_name": run_dir.name, "runs_dir": str(run_dir.parent), "overwrite": False})
    resumed = args_class(**merged)
    check(resumed)
    require(saved["iteration"] < resumed.iterations, "--resume",
            f"{run_dir} has done {saved['iteration']} of its {resumed.iterations} iterations: nothing left to train "
            f"(--iterations N trains it longer; python -m workbook evaluate {run_dir} evaluates it)")
    check_can_create(run_dir / CHECKPOINT, "--resume")
    return resumed, saved
