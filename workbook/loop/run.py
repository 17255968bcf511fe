"""The language-model RL loop that every LM command drives (``rlhf``, ``reason``): :class:`Run` and :func:`train`.

The loop takes three things, each defined in one place with its own defaults: a **task**
(``workbook/loop/task.py``: prompts, reward, evaluation — the review task of ``rlhf``, the
arithmetic of ``reason``), a **model backend** (``backend.py``: a tiny GPT, or any Hugging Face
causal LM with ``--model``) and an **algorithm** (``algorithms.py``: ppo, grpo, rloo, dpo;
``rlvr.py``: dapo, dr_grpo, gspo, cispo). A command is a :class:`Run` subclass (its checks, its
run names, its curves' title, its default task) and a ``main``; this module knows no command.

One iteration (:meth:`Run.iteration`): the algorithm picks the prompts, the policy writes a
response to each (KV-cached sampling at ``--temperature``), the task scores them, and the
algorithm takes its step (PPO: forward passes of policy and frozen reference → per-token KL
rewards → GAE → PPO epochs → KL-controller update). :meth:`Run.finish` evaluates and writes the
run's outputs.

Writes, under ``<runs-dir>/<run name>/``: ``metrics.jsonl`` (every stat of every iteration),
``samples.jsonl`` (generations every ``--sample-every`` iterations), ``curves.png`` (the task's
and the algorithm's panels against the iteration), ``summary.json`` (before/after evaluation)
and the policy (``policy.pt``, loadable with ``workbook.lm.load_checkpoint``; with ``--model``,
a ``policy/`` folder that ``--model`` loads back). Several ``--seeds``: one run each, then the
command's ``<name>-seeds/`` folder (mean and min–max), in ``seeds.py`` with the rest of what a
command does around its runs. wandb logs the same stats and a table of samples, offline by default (``wandb sync``
uploads it later).

Owning the run (docs/own_your_runs.md): ``checkpoint.pt`` every ``--checkpoint-every``
iterations and at the end; Ctrl-C (or SIGTERM) finishes the iteration in progress, saves and
prints the ``--resume RUN_DIR`` line that continues it exactly (``options.resume_args``); a NaN or
inf stops the run after saving the last good iteration (exit 3); ``python -m workbook evaluate
RUN_DIR`` evaluates it again.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import asdict
from pathlib import Path

import torch

from workbook import distributed
from workbook.async_rl.processes import SamplerTraceback, SamplingStopped
from workbook.async_rl.sampler import LocalSampling, is_stale_sampling, sampling_line
from workbook.checkpoints import (CHECKPOINT, LAYOUT, Abandoned, AppendLog, StopSignals,
                                  first_non_finite, lm_algorithm_state, load_run, non_finite_weights,
                                  restore_lm_algorithm, rng_state, save, set_rng_state, stop_at_once, write_json)
from workbook.cli import require
from workbook.loop.algorithms import ALGORITHMS, make_algorithm
from workbook.loop.backend import make_backend
from workbook.loop.curves import save_curves
from workbook.loop.health import DeadRunWatch, tell
from workbook.loop.options import LoopArgs
from workbook.loop.task import Task, held_out_panel
from workbook.rlhf.data import own_rollout, rollout
from workbook.progress import Progress
from workbook.runs import ConfigError, check_new_run_dir, discard_new_run, new_run_dir, start_wandb


# --- one run ------------------------------------------------------------------------------------

class Run:
    """One run of the loop: built by ``__init__``, driven by :meth:`iteration`, closed by :meth:`finish`.

    A command subclasses it with its :meth:`validate`, :meth:`run_name`, :meth:`title` and
    :meth:`default_task` (``rlhf``: ``RlhfRun``; ``reason``: ``ReasonRun``).
    ``model``/``tok``: the LM to start from (default: the backend's, from ``--model``);
    ``task``: default the command's (:meth:`default_task`); ``backend`` and
    ``pretrain_args`` choose how the model is loaded (default: from ``--model``).
    Nothing is written before every setting is checked and the learner's classes are built.
    ``resume``: a checkpoint (``checkpoint.pt``) to continue, in its own folder.
    """

    def __init__(self, args: LoopArgs, *, model=None, tok=None, task: Task | None = None, backend=None, pretrain_args=None,
                 resume: dict | None = None):
        self.validate(args)
        self.args, self.name = args, self.run_name(args)
        # Under torchrun: rank-dependent prompts and sampling; only rank 0 prints and writes.
        # (With --samplers under torchrun the other ranks are samplers, not data-parallel learners.)
        self.dp = dp = distributed.init(args.impl) if not args.samplers else distributed.context()
        self.data_seed = dp.data_seed(args.seed)
        if dp.is_main and resume is None:
            check_new_run_dir(args.runs_dir, self.name, args.overwrite)
        if resume is not None:
            require(resume["world_size"] == dp.world_size, "--resume",
                    f"the checkpoint was written by {resume['world_size']} process(es); resume it with as many")
        torch.set_num_threads(args.threads)
        torch.manual_seed(args.seed)
        self.say = (lambda *a: None) if args.quiet or not dp.is_main else (lambda *a: print(*a, flush=True))
        if is_stale_sampling(args):  # Part 10: first, what the run does about stale batches
            self.say(sampling_line(args))

        # The model (cached), the task, then the algorithm's policy (PPO: with its value head) and frozen reference.
        self.backend = backend or make_backend(args, pretrain_args)
        t0 = time.perf_counter()
        if model is None:
            model, tok = self.backend.load(args, dp)
        self.pretrain_s = time.perf_counter() - t0
        self.tok = tok
        self.task = task if task is not None else self.default_task(args, tok)
        self.algo = make_algorithm(args, model, tok, self.task, data_seed=self.data_seed)
        self.device = torch.device(args.device)
        self.policy, self.reference = self.algo.policy.to(self.device), self.algo.reference.to(self.device)
        self.start = 0  # iterations done before this process started
        if resume is not None:  # the reference stays the model just loaded; the policy continues
            restore_lm_algorithm(self.algo, resume["algo"], learning_rate=args.learning_rate)
            self.start = resume["iteration"]

        # The evaluation before training, also before anything is written: a stub it reaches (or Ctrl-C) leaves no folder.
        self.eval_prompts = self.task.eval_prompts(args.eval_samples)
        if resume is None:
            self.say(self.evaluating_line("the model before training"))
            with stop_at_once():  # Ctrl-C stops the evaluation itself, not "after this iteration"
                self.before = self.evaluate()
        else:
            self.before = resume["before"]
            self.say(f"resuming {args.resume} at iteration {self.start} of {args.iterations}")
        self.say(("before (from the checkpoint): " if resume else "before: ") + headline(self.task, self.before))

        # Only now, with the settings checked and the learner's classes built, is anything written.
        if resume is not None:
            self.out_dir = Path(args.resume) if dp.is_main else None
        else:
            self.out_dir = new_run_dir(args.runs_dir, self.name, args.overwrite) if dp.is_main else None
        self.wandb = start_wandb(args.wandb if dp.is_main else "disabled", project="ppo-rlhf-workbook", run_name=self.name,
                                 run_dir=self.out_dir, config=self.config(), run_id=resume and resume.get("wandb_id"))
        self.wandb_id = self.wandb.id if self.wandb is not None else resume and resume.get("wandb_id")

        self.generator = torch.Generator().manual_seed(self.data_seed)
        self.history: list[dict] = list(resume["history"]) if resume else []
        self.train_s = resume["train_s"] if resume else 0.0
        kept = (lambda record: record.get("iteration", 0) <= self.start) if resume else None  # none counted twice
        self.metrics_file = AppendLog(self.out_dir / "metrics.jsonl", keep=kept) if dp.is_main else None
        self.samples_file = AppendLog(self.out_dir / "samples.jsonl", keep=kept) if dp.is_main else None
        if resume is not None:
            if dp.is_main:  # the other ranks' streams restart from (seed, iteration): only rank 0's were saved
                self.generator.set_state(resume["generator"])
                set_rng_state(resume["rng"])
            else:
                self.generator.manual_seed(self.data_seed * 1_000_003 + self.start)
        # The state after the last finished iteration, kept in memory for a NaN or a second Ctrl-C
        # (skipped for models over 50M parameters: then the last periodic checkpoint is the fallback).
        self.keep_good = dp.is_main and sum(p.numel() for p in self.policy.parameters()) <= 50_000_000
        self.health = DeadRunWatch(args)  # a dead run's symptoms; a resumed run's earlier ones are replayed, not re-printed
        for past in self.history:
            self.health.update(past)
        try:
            self.sampling = self.start_sampling(resume)
        except NotImplementedError as error:  # a stub met while starting (the samplers are closed): no empty folder left
            error.removed = self.discard()
            raise
        except SamplingStopped as stopped:  # a sampler exited (or hung) before it joined; the samplers are closed.
            # Nothing ran, so as for a stub: one line, exit status 2, no empty folder left.
            removed = self.discard()
            raise ConfigError("--samplers", stopped.line + (f"; nothing was trained, so the new run folder {removed} "
                                                             "was removed" if removed else "")) from None
        self.good = self.state("running") if self.keep_good else None

    def start_sampling(self, resume: dict | None):
        """Part 10: who samples (None: the policy itself, here, as always); a resumed run's versions and streams."""
        a = self.args
        if not is_stale_sampling(a):
            return None
        saved = resume.get("sampling") if resume else None
        if a.samplers == 0:
            return LocalSampling(a, self.policy.lm, self.tok, self.task, generator=self.generator, chunk=self.rollout_chunk,
                                 saved=saved)
        from workbook.async_rl.processes import RemoteSampling

        self.say(f"starting {a.samplers} sampler process{'es' if a.samplers > 1 else ''} "
                 f"({'free-running, at most ' + str(a.lag) + ' behind' if a.free_running else 'fixed lag ' + str(a.lag)})")
        return RemoteSampling(a, self.policy.lm, self.tok, self.task, prompts_of=self.algo.prompts, chunk=self.rollout_chunk,
                              data_seed=self.data_seed, start=self.start, saved=saved)

    def close_sampling(self) -> None:
        if getattr(self, "sampling", None) is not None:
            self.sampling.close()

    def write_error(self, error: BaseException) -> None:
        """The traceback of what stopped the run (a sampler's own, when it raised) in ``error.txt``."""
        import traceback

        if isinstance(error, SamplingStopped) and not isinstance(error.__cause__, SamplerTraceback):
            return  # a sampler killed or stopped: its one line says all there is
        if self.out_dir is not None:
            cause = error.__cause__
            text = (cause.args[0] if isinstance(cause, SamplerTraceback)
                    else "".join(traceback.format_exception(error)))
            (self.out_dir / "error.txt").write_text(text)

    def state(self, status: str) -> dict:
        """The checkpoint of the run as it is now (tensors copied)."""
        return {"layout": LAYOUT, "command": self.command, "impl": self.args.impl, "config": asdict(self.args),
                "iteration": len(self.history), "algo": lm_algorithm_state(self.algo),
                "generator": self.generator.get_state(), "rng": rng_state(), "history": list(self.history),
                "train_s": self.train_s, "before": self.before, "wandb_id": self.wandb_id, "status": status,
                "world_size": self.dp.world_size, "sampling": self.sampling.state() if self.sampling is not None else None}

    def save_checkpoint(self, state: dict) -> None:
        if self.dp.is_main and state is not None:
            save(state, self.out_dir / CHECKPOINT)

    command = ""
    """The command whose runs these are (checkpoints, summaries and the resume line name it)."""
    rollout_chunk = 64
    """Prompts sampled together (a subclass may take more: the reason command's short answers, 256 at once)."""

    # What each command says for itself, in its subclass: validate(args) raises ConfigError for the first
    # bad setting (nothing is loaded or written before), run_name(args) names the run's folder (args.run_name
    # when given), title() heads its curves, default_task(args, tok) is the task when train() is given none.
    validate = run_name = title = default_task = None

    def full_title(self) -> str:
        """The command's title, and with Part 10's options who sampled (the curves' title)."""
        a = self.args
        if not is_stale_sampling(a):
            return self.title()
        who = f"{a.samplers} sampler process{'es' if a.samplers > 1 else ''}" if a.samplers else "sampled in this process"
        lag = f"staleness ≤ {a.lag}, free-running" if a.free_running else f"lag {a.lag}"
        extra = [f"correction {a.correction} (C={a.is_cap:g})" if a.correction != "none" else "uncorrected"]
        if a.off_policy_delta:
            extra.append(f"off-policy mask δ={a.off_policy_delta:g}")
        if a.sampler_dtype != "float32":
            extra.append(f"sampler in {a.sampler_dtype}")
        return self.title() + f"\n{who}, {lag}, " + ", ".join(extra)

    def config(self) -> dict:
        """The settings of this run, with the values used: summary.json's and wandb's config."""
        return asdict(self.args)

    def held_out(self, after: dict | None) -> tuple | None:
        """(stat, name, before, after) for the curves, when the task names the batch stat its headline number matches."""
        pair = held_out_panel(self.task)  # e.g. ("env/accuracy", "pass@1")
        if pair is None:
            return None
        stat, key = pair
        return stat, key, self.before[key], after[key] if after is not None else None

    def evaluating_line(self, what: str) -> str:
        return f"evaluating {what} on {len(self.eval_prompts)} held-out prompts …"

    def discard(self) -> Path | None:
        """After a stub of the learner's stopped the run: close its files and wandb; remove a new run folder that
        holds no finished iteration. Returns the folder removed (None if kept or none)."""
        for file in (getattr(self, "metrics_file", None), getattr(self, "samples_file", None)):
            if file is not None:
                file.close()
        if getattr(self, "wandb", None) is not None:
            self.wandb.finish(exit_code=1)
        out_dir = getattr(self, "out_dir", None)
        if out_dir is not None and len(self.history) == self.start and discard_new_run(out_dir):
            return out_dir
        return None

    def evaluate(self) -> dict:
        a = self.args
        return self.task.evaluate(self.policy, self.reference, self.tok, self.eval_prompts, temperature=a.temperature,
                                  max_new_tokens=a.max_new_tokens, seed=a.seed + 777)

    def iteration(self, it: int) -> dict[str, float]:
        """Iteration ``it`` (from 0): sample, score, update, log. Returns its stats (averaged over ranks)."""
        a = self.args
        t_it = time.perf_counter()
        prompts = self.algo.prompts(it)
        if self.sampling is None:
            sample = own_rollout(self.task) or rollout  # a task may bring its own (Part 9: multi-turn, with a tool)
            batch = sample(self.policy.lm, self.tok, [p.text for p in prompts], max_new_tokens=a.max_new_tokens,
                           temperature=a.temperature, generator=self.generator, chunk=self.rollout_chunk)
            scores = self.task.score(prompts, batch).to(self.device)
        else:  # Part 10: a batch some version of the policy sampled (here, or in a sampler process)
            sampled = self.sampling.next(it, prompts)
            batch, scores = sampled.batch, sampled.scores.to(self.device)
        t_gen = time.perf_counter() - t_it
        stats = self.algo.step(batch, scores, it)
        if self.sampling is not None:
            self.sampling.publish(it + 1, self.policy.lm)
            stats.update({"async/staleness": float(it - sampled.version), "async/sampler_s": sampled.seconds,
                          "async/wait_s": t_gen})
        self.train_s += time.perf_counter() - t_it

        stats.update({"iteration": it + 1, "time/ppo_s": self.train_s, "time/generate_and_score_s": t_gen,
                      "env/reward_mean": scores.mean().item(), "env/reward_std": scores.std().item(),
                      **self.task.batch_stats(batch, scores),
                      "env/finished_frac": sum(batch.finished) / len(batch.finished)})
        stats = self.dp.mean(stats)  # batch means over all ranks (every rank has the same batch size)
        self.history.append(stats)
        for line in self.health.update(stats):  # one line per symptom of a dead run, once (workbook/loop/health.py)
            if self.dp.is_main:
                tell(line)
        if self.metrics_file is not None:
            self.metrics_file.write(stats)
        if self.wandb is not None:
            self.wandb.log(stats, step=it + 1)
        if (it + 1) % a.sample_every == 0 or it == 0:
            self.log_samples(it, prompts, batch, scores)
        return stats

    def log_samples(self, it: int, prompts, batch, scores) -> None:
        columns = ["iteration", "prompt", "response", "score"] + (["answer"] if prompts[0].answer is not None else [])
        rows = [[it + 1, p.text, c, s] + ([p.answer] if p.answer is not None else [])
                for p, c, s in zip(prompts[:8], batch.completions[:8], readable_floats(scores[:8]))]
        for row in rows:
            if self.samples_file is not None:
                self.samples_file.write(dict(zip(columns, row)))
        if self.wandb is not None:
            import wandb

            self.wandb.log({"samples": wandb.Table(columns=columns, data=rows)}, step=it + 1)

    def stopped(self, status: str, bad: tuple | None = None, line: str | None = None) -> dict:
        """After Ctrl-C, a NaN or a failure (``line`` says what happened): the checkpoint of the last good iteration,
        the curves and summary.json (rank 0)."""
        a = self.args
        self.close_sampling()
        for file in (self.metrics_file, self.samples_file):
            if file is not None:
                file.close()
        if not self.dp.is_main:
            return {"run_dir": None, "status": status, "iterations": len(self.history)}
        good = self.good
        if good is None and status == "interrupted":
            good = self.state(status)  # a big model: the iteration in progress finished, so the current state is good
        if good is not None:
            self.save_checkpoint(good | {"status": status})
            done = good["iteration"]
        else:  # a NaN in a big model: the last periodic checkpoint (if any) is the last good one
            done = (load_run(self.out_dir, "--resume", (self.command,))["iteration"]
                    if (self.out_dir / CHECKPOINT).exists() else self.start)
        spec = ALGORITHMS[a.algo]
        if self.history:
            save_curves(self.history, self.out_dir / "curves.png", self.full_title() + f"  [{status}]",
                        curve_panels(a, self.task), x_label=spec.x_label, kl_target=spec.kl_target(a),
                        reference_reward=self.before.get("reward"), warnings=self.health.summary())
        summary = {"run_dir": str(self.out_dir), "command": self.command, "status": status, "iterations": done,
                   "warnings": self.health.summary(),
                   "config": self.config(), "before": {k: v for k, v in self.before.items() if k not in ("texts", "scores")},
                   "ppo_wall_s": self.train_s, "algo": a.algo, "task": self.task.name, "seed": a.seed}
        write_json(summary, self.out_dir / "summary.json")
        if self.wandb is not None:
            self.wandb.summary.update({"status": status})
            self.wandb.finish(exit_code=1)
        resume = f"{'torchrun --standalone --nproc_per_node=' + str(self.dp.world_size) if self.dp.enabled else 'python'} " \
                 f"-m workbook {self.command} --resume {self.out_dir}"
        if status == "interrupted":
            print(f"{line + '; ' if line else ''}interrupted after iteration {done}; wrote {CHECKPOINT}, metrics.jsonl, "
                  f"samples.jsonl, curves.png; resume with: {resume}", flush=True)
        elif status == "failed":
            print(f"error: {line}; stopped and wrote the last good checkpoint (iteration {done}); resume with: {resume}",
                  file=sys.stderr, flush=True)
        else:
            stat, value, it = bad
            print(f"error: {stat}: {value} at iteration {it}; stopped and wrote the last good checkpoint (iteration {done}); "
                  f"resume from it with a lower learning rate: {resume} --learning-rate {a.learning_rate / 2:g}",
                  file=sys.stderr, flush=True)
        return summary

    def finish(self) -> dict:
        """Evaluate after training and write curves.png, the policy and summary.json (rank 0). Returns the summary."""
        a = self.args
        self.close_sampling()  # the samplers' cores are free for the evaluation
        for file in (self.metrics_file, self.samples_file):
            if file is not None:
                file.close()
        saved = None
        if self.dp.is_main:
            self.save_checkpoint(self.state("finished"))
            saved = self.backend.save(self.policy, self.tok, self.out_dir, a)  # before the evaluation: Ctrl-C there loses nothing
        self.say(self.evaluating_line("the trained policy"))
        try:
            with stop_at_once():
                after = self.evaluate()
        except Abandoned:
            return self.interrupted_evaluation(saved)
        self.say("after:  " + headline(self.task, after))
        if not self.dp.is_main:
            return {"run_dir": None, "iterations": len(self.history)}
        spec = ALGORITHMS[a.algo]
        save_curves(self.history, self.out_dir / "curves.png", self.full_title() + "\n" + before_after(self.task, self.before, after),
                    curve_panels(a, self.task), x_label=spec.x_label, kl_target=spec.kl_target(a),
                    reference_reward=self.before.get("reward"), held_out=self.held_out(after),
                    warnings=self.health.summary())
        summary = {
            "run_dir": str(self.out_dir), "policy": saved, "iterations": len(self.history),
            "pretrain_wall_s": self.pretrain_s, "ppo_wall_s": self.train_s,
            "before": {k: v for k, v in self.before.items() if k not in ("texts", "scores")},
            "after": {k: v for k, v in after.items() if k not in ("texts", "scores")},
            "samples_before": self.before["texts"][:8], "samples_after": after["texts"][:8],
            "scores_before": self.before["scores"][:8], "scores_after": after["scores"][:8], "algo": a.algo,
            "task": self.task.name, "seed": a.seed,
            **self.algo.summary(),
            "command": self.command, "status": "finished", "warnings": self.health.summary(), "config": self.config(),
        }
        write_json(summary, self.out_dir / "summary.json")
        if self.wandb is not None:
            self.wandb.summary.update({f"before/{k}": v for k, v in summary["before"].items()})
            self.wandb.summary.update({f"after/{k}": v for k, v in summary["after"].items()})
            self.wandb.finish()
        return summary

    def interrupted_evaluation(self, saved) -> dict:
        """Ctrl-C during the final evaluation: training is finished and saved; summary.json says the evaluation is missing."""
        if not self.dp.is_main:
            return {"run_dir": None, "status": "interrupted", "iterations": len(self.history)}
        a = self.args
        spec = ALGORITHMS[a.algo]
        save_curves(self.history, self.out_dir / "curves.png", self.full_title(), curve_panels(a, self.task),
                    x_label=spec.x_label, kl_target=spec.kl_target(a), reference_reward=self.before.get("reward"),
                    held_out=self.held_out(None))
        summary = {"run_dir": str(self.out_dir), "policy": saved, "command": self.command, "status": "interrupted",
                   "iterations": len(self.history), "config": self.config(), "algo": a.algo, "task": self.task.name,
                   "seed": a.seed, "ppo_wall_s": self.train_s, "after": None,
                   "before": {k: v for k, v in self.before.items() if k not in ("texts", "scores")}}
        write_json(summary, self.out_dir / "summary.json")
        if self.wandb is not None:
            self.wandb.summary.update({"status": "interrupted during the final evaluation"})
            self.wandb.finish(exit_code=1)
        print(f"interrupted during the final evaluation; training finished ({len(self.history)} iterations) and is saved "
              f"in {self.out_dir}/ ({CHECKPOINT}, {saved}, metrics.jsonl, curves.png); evaluate it with: "
              f"python -m workbook evaluate {self.out_dir}", flush=True)
        return summary


def before_after(task: Task, before: dict, after: dict) -> str:
    """The headline's first number before and after training, on the held-out prompts (the curves' title says it)."""
    key, title, fmt = task.headline[0]
    return f"held-out {title}: {format(before[key], fmt)} before → {format(after[key], fmt)} after training"


def headline(task: Task, result: dict) -> str:
    return "  ".join(f"{title} {result[key]:{fmt}}" for key, title, fmt in task.headline if key in result)


def curve_panels(args: LoopArgs, task: Task) -> tuple[tuple[str, str], ...]:
    """The task's panels, then the algorithm's, less those its settings make meaningless (a fixed β)."""
    spec = ALGORITHMS[args.algo]
    stale = STALE_PANELS if is_stale_sampling(args) else ()  # Part 10: how stale, how mismatched, how corrected
    return tuple(p for p in task.panels + spec.panels + stale if p[0] not in spec.hide(args))


STALE_PANELS = (("async/staleness", "staleness (updates behind)"),
                ("mismatch/logp_abs_diff", "|log π_sampler − log π_learner| per token"),
                ("is/capped_frac", "share of importance weights above the cap"),
                ("is/sequences_masked_frac", "share of sequences masked off-policy"))


MAY_BE_NAN = ("env/reward_std",)
"""Logged stats that are legitimately NaN (the std of a one-sample batch); any other NaN or inf stops the run."""


def train(args: LoopArgs, *, run_class: type[Run], model=None, tok=None, task: Task | None = None, backend=None,
          pretrain_args=None, progress: bool | None = None, resume: dict | None = None) -> dict:
    """Run the loop; returns the summary (before/after evaluation, wall times, paths; ``status``). See :class:`Run`
    (``run_class``: the command's subclass, e.g. ``rlhf``'s ``RlhfRun``; each command has its own ``train_*``).

    Ctrl-C (SIGINT) or SIGTERM: the iteration in progress finishes, then the checkpoint, metrics,
    samples and curves are written and ``status`` is ``interrupted`` (a second signal drops the
    iteration in progress). A NaN or inf in a stat or a weight: ``status`` is ``non-finite`` and
    the checkpoint is the last good iteration's.
    """
    if args.samplers and int(os.environ.get("RANK", "0")) > 0:  # torchrun: this rank is a sampler of rank 0's learner
        return serve_as_sampler(args, run_class, model=model, tok=tok, task=task, backend=backend, pretrain_args=pretrain_args)
    with StopSignals(message="stopping after this iteration (press Ctrl-C again to stop now)"
                     if os.environ.get("RANK", "0") == "0" else None) as stop:  # torchrun: rank 0 speaks
        run = run_class(args, model=model, tok=tok, task=task, backend=backend, pretrain_args=pretrain_args,
                       resume=resume)
        show = (args.progress and not args.quiet) if progress is None else progress
        bar = Progress(args.iterations, initial=run.start, counter="iteration", prefix=f"{run.command} {args.algo}",
                       unit="it", enabled=bool(show and run.dp.is_main))
        every = args.checkpoint_every or max(1, args.iterations // 10)
        status, bad, line = "finished", None, None
        try:
            for it in range(run.start, args.iterations):
                try:
                    stats = run.iteration(it)
                except SamplingStopped as stopped:  # Part 10: a sampler process was stopped, killed, or raised
                    status, line = stopped.status, stopped.line
                    run.write_error(stopped)
                    break
                except (Abandoned, NotImplementedError):
                    raise
                except Exception as error:
                    if run.sampling is None:
                        raise
                    # With sampler processes a learner that raises stops them, keeps its last good checkpoint
                    # and says so in one line; the traceback goes to error.txt.
                    status, line = "failed", f"the learner raised {type(error).__name__}: {error} at iteration {it + 1}"
                    run.write_error(error)
                    break
                found = first_non_finite(stats, allowed_nan=MAY_BE_NAN) or non_finite_weights(run.policy)
                if run.dp.decide(found is not None):  # the stats are averaged over ranks: every rank agrees
                    status, bad = "non-finite", (*(found or ("a stat on rank 0", float("nan"))), it + 1)
                    break
                if run.keep_good:
                    run.good = run.state("running")
                if (it + 1) % every == 0 and it + 1 < args.iterations:
                    run.save_checkpoint(run.good if run.good is not None else run.state("running"))
                bar.update(it + 1, reward=f"{stats['env/reward_mean']:+.3f}", KL=f"{stats['objective/kl']:.2f}")
                if run.dp.decide(stop.requested is not None):
                    status = "interrupted"
                    break
                if args.time_budget_s and run.dp.decide(run.train_s >= args.time_budget_s):
                    break
        except Abandoned:
            status = "interrupted"
        except NotImplementedError as error:  # a stub of the learner's: train_runs names it; an empty new folder goes
            bar.close()
            run.close_sampling()
            error.removed = run.discard()
            raise
        finally:
            if status == "finished" and sys.exc_info()[0] is not None:
                run.close_sampling()  # anything else escaping: no sampler process left behind
        bar.close()
        if status != "finished":
            return run.stopped(status, bad, line)
        return run.finish()


def serve_as_sampler(args: LoopArgs, run_class: type[Run], *, model=None, tok=None, task: Task | None = None, backend=None,
                     pretrain_args=None) -> dict:
    """A torchrun rank ≥ 1 of a ``--samplers N`` run: the learner's model, tokenizer and task, built here; then sample."""
    from workbook.async_rl.processes import serve_sampler

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    distributed._context = distributed.Context(rank, world)  # not the main rank: it prints and writes nothing
    if model is None:
        model, tok = (backend or make_backend(args, pretrain_args)).load(args, distributed.Context())
    if task is None:
        task = run_class.default_task(run_class.__new__(run_class), args, tok)
    torch.manual_seed(args.seed)
    serve_sampler(args, model, tok, task, chunk=run_class.rollout_chunk)
    return {"run_dir": None, "status": "finished", "iterations": 0}


def readable_floats(values: torch.Tensor) -> list[float]:
    """The values as a person reads them: a float32 0.1 is 0.1, not its float64 widening 0.10000000149011612.

    Each float32 (or half) value becomes the shortest decimal that reads back as the same float32
    (numpy's ``str``), so nothing is rounded away; float64 values are kept as they are."""
    if values.dtype == torch.float64:
        return values.tolist()
    return [float(str(v)) for v in values.detach().float().cpu().numpy().ravel()]
