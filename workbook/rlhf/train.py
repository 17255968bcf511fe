"""RLHF end to end: teach the pretrained review GPT to write positive reviews, with a KL leash.

    python -m workbook rlhf --impl solutions          # the reference code
    python -m workbook rlhf                           # your code from exercises/part3_rlhf.py (the default)
    python -m workbook rlhf --impl solutions --kl-coef 0   # no leash: reward hacking / mode collapse
    python -m workbook rlhf --impl solutions --reward model  # learned reward model instead of VADER

One iteration: sample a batch of prompts (review openers such as "the plot"), let the policy
write a review for each (KV-cached sampling at ``--temperature``), score the texts (VADER's
compound sentiment in [-1, 1], or the learned reward model), and hand (queries, responses,
scores) to ``PPOTrainer.step``: forward passes of policy and frozen reference → per-token KL
rewards → GAE → PPO epochs → KL-controller update. The pretrained model comes from the cache
(``python -m workbook pretrain``), pretrained now if missing.

Writes, under ``runs/<run name>/``: ``metrics.jsonl`` (every stat of every iteration),
``samples.jsonl`` (generations every ``--sample-every`` iterations), ``curves.png`` (reward,
KL, β, entropy and diversity against time), ``summary.json`` (before/after evaluation) and
``policy.pt`` (the trained LM, loadable with ``workbook.lm.load_checkpoint``). wandb logs the
same stats and a table of samples, offline by default (``wandb sync`` uploads it later).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from workbook.cli import add_dataclass_arguments, dataclass_from_args
from workbook.lm.model import save_checkpoint
from workbook.lm.pretrain import PretrainArgs, load_or_pretrain
from workbook.rlhf.data import eval_prompts, load_part3, prompt_batch, rollout
from workbook.rlhf.evaluate import evaluate
from workbook.rlhf.rewards import make_scorer


@dataclass
class Args:
    impl: str = "exercises"
    """Which part3_rlhf to train with: exercises (yours) or solutions (the reference)."""
    seed: int = 0
    """Seeds the prompts, the sampling and the minibatch order."""
    reward: str = "vader"
    """vader (the sentiment scorer itself) or model (the learned reward model, trained and cached if missing)."""
    iterations: int = 180
    """PPO iterations (one batch of samples each); a fixed count, so the same seed gives the same run."""
    time_budget_s: float = 0.0
    """Optionally stop after this many seconds of PPO (generation + scoring + updates); 0 = no limit."""
    batch_size: int = 64
    """Reviews sampled per iteration."""
    mini_batch_size: int = 16
    """Reviews per gradient step."""
    ppo_epochs: int = 2
    """Passes over each batch."""
    learning_rate: float = 2e-4
    """Adam learning rate."""
    kl_coef: float = 0.05
    """Initial KL coefficient β; 0 turns the KL penalty (and its controller) off."""
    adaptive_kl: bool = True
    """Adapt β towards --kl-target (else keep it fixed)."""
    kl_target: float = 4.0
    """Target mean per-review KL (nats) of the adaptive controller."""
    kl_horizon: float = 2_000.0
    """Samples over which β may change by about ×e^0.2 (smaller: faster control)."""
    kl_penalty: str = "kl"
    """Per-token KL estimator in the rewards: kl, abs, mse, full or k3."""
    ent_coef: float = 0.05
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
    wandb: str = "offline"
    """wandb mode: offline (default, no account needed), online, or disabled."""
    run_dir: str = "runs"
    """Outputs go to <run_dir>/<run name>/."""
    run_name: str = ""
    """Default: rlhf-<reward>-kl<kl_coef>-s<seed>-<time>."""
    threads: int = 1
    """torch threads (1 is fastest for this small model on a shared CPU)."""
    quiet: bool = False
    """Print only the before/after summary."""


def parse_args(argv: list[str] | None) -> Args:
    parser = argparse.ArgumentParser(prog="python -m workbook rlhf", description=__doc__.split("\n\n")[0])
    add_dataclass_arguments(parser, Args)
    return dataclass_from_args(Args, parser.parse_args(argv))


def ppo_config(part3, args: Args):
    return part3.PPOConfig(
        learning_rate=args.learning_rate, mini_batch_size=args.mini_batch_size, ppo_epochs=args.ppo_epochs,
        gamma=args.gamma, lam=args.lam, cliprange=args.cliprange, cliprange_value=args.cliprange_value,
        vf_coef=args.vf_coef, ent_coef=args.ent_coef, init_kl_coef=args.kl_coef,
        adap_kl_ctrl=args.adaptive_kl and args.kl_coef > 0, target=args.kl_target, horizon=args.kl_horizon,
        kl_penalty=args.kl_penalty, temperature=args.temperature, seed=args.seed,
    )


def save_curves(history: list[dict], path: Path, title: str) -> None:
    """Reward, KL, β, entropy and distinct-2 against PPO wall time, one panel each."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = [h["time/ppo_s"] for h in history]
    panels = [("env/reward_mean", "mean reward (score)"), ("objective/kl", "KL to reference (nats / review)"),
              ("objective/kl_coef", "β (KL coefficient)"), ("objective/entropy", "entropy (nats / token)"),
              ("env/distinct2", "distinct-2 of samples")]
    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.2))
    for ax, (key, label) in zip(axes, panels):
        ax.plot(t, [h.get(key, np.nan) for h in history])
        ax.set_title(label, fontsize=10)
        ax.set_xlabel("PPO wall time (s)")
        ax.grid(alpha=0.3)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def train(args: Args, *, model=None, tok=None, pretrain_args: PretrainArgs | None = None) -> dict:
    """Run RLHF; returns the summary (before/after evaluation, wall times, paths)."""
    from workbook.lm.metrics import distinct_n

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    part3 = load_part3(args.impl)
    say = (lambda *a: None) if args.quiet else (lambda *a: print(*a, flush=True))
    name = args.run_name or f"rlhf-{args.reward}-kl{args.kl_coef:g}-s{args.seed}-{time.strftime('%Y%m%d-%H%M%S')}"
    out_dir = Path(args.run_dir) / name
    out_dir.mkdir(parents=True, exist_ok=True)

    # The pretrained model (cached), the policy with its value head, the frozen reference.
    t0 = time.perf_counter()
    if model is None:
        model, tok = load_or_pretrain(pretrain_args or PretrainArgs(), progress=not args.quiet)
    pretrain_s = time.perf_counter() - t0
    policy = part3.GPTWithValueHead(model)
    reference = part3.create_reference_model(policy)
    scorer = make_scorer(args.reward, tok, impl=args.impl, quiet=args.quiet)
    trainer = part3.PPOTrainer(ppo_config(part3, args), policy, reference, tok.pad_id)

    run = None
    if args.wandb != "disabled":
        import wandb

        os.environ.setdefault("WANDB_SILENT", "true")
        run = wandb.init(project="ppo-rlhf-workbook", name=name, mode=args.wandb, dir=str(out_dir),
                         config=asdict(args), reinit=True)

    prompts_eval = eval_prompts(args.eval_samples)
    ev = dict(temperature=args.temperature, max_new_tokens=args.max_new_tokens, seed=args.seed + 777)
    before = evaluate(policy, reference, tok, scorer, prompts_eval, **ev)
    say(f"before: reward {before['reward']:+.3f}  KL {before['kl']:.2f}  distinct-2 {before['distinct2']:.3f}")

    gen = torch.Generator().manual_seed(args.seed)
    history: list[dict] = []
    ppo_s = 0.0
    metrics_file = (out_dir / "metrics.jsonl").open("w")
    samples_file = (out_dir / "samples.jsonl").open("w")
    for it in range(args.iterations):
        t_it = time.perf_counter()
        prompts = prompt_batch(args.batch_size, args.seed, it)
        batch = rollout(policy.lm, tok, prompts, max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                        generator=gen)
        scores = scorer(batch.texts)
        t_gen = time.perf_counter() - t_it
        stats = trainer.step(batch.queries, batch.responses, scores)
        ppo_s += time.perf_counter() - t_it

        generated = [tok.decode(r) for r in batch.responses]
        stats.update({
            "iteration": it + 1, "time/ppo_s": ppo_s, "time/generate_and_score_s": t_gen,
            "env/reward_mean": scores.mean().item(), "env/reward_std": scores.std().item(),
            "env/distinct1": distinct_n(generated, 1), "env/distinct2": distinct_n(generated, 2),
            "env/finished_frac": sum(batch.finished) / len(batch.finished),
        })
        history.append(stats)
        metrics_file.write(json.dumps(stats) + "\n")
        metrics_file.flush()
        if run is not None:
            run.log(stats, step=it + 1)
        if (it + 1) % args.sample_every == 0 or it == 0:
            rows = [[it + 1, p, t[len(p):], s] for p, t, s in zip(batch.prompts[:8], batch.texts[:8], scores[:8].tolist())]
            for row in rows:
                samples_file.write(json.dumps(dict(zip(("iteration", "prompt", "response", "score"), row))) + "\n")
            if run is not None:
                import wandb

                run.log({"samples": wandb.Table(columns=["iteration", "prompt", "response", "score"], data=rows)}, step=it + 1)
        say(f"iter {it + 1:3d}  {ppo_s:6.1f}s  reward {stats['env/reward_mean']:+.3f}  KL {stats['objective/kl']:6.2f}  "
            f"β {stats['objective/kl_coef']:.3f}  entropy {stats['objective/entropy']:.2f}  "
            f"distinct-2 {stats['env/distinct2']:.3f}  | {batch.texts[0]!r}")
        if args.time_budget_s and ppo_s >= args.time_budget_s:
            break
    metrics_file.close()
    samples_file.close()

    after = evaluate(policy, reference, tok, scorer, prompts_eval, **ev)
    say(f"after:  reward {after['reward']:+.3f}  KL {after['kl']:.2f}  distinct-2 {after['distinct2']:.3f}")
    save_curves(history, out_dir / "curves.png", f"{name}  (impl={args.impl}, reward={args.reward}, β₀={args.kl_coef:g})")
    save_checkpoint(out_dir / "policy.pt", policy.lm, tok, extra={"args": asdict(args)})
    summary = {
        "run_dir": str(out_dir), "iterations": len(history), "pretrain_wall_s": pretrain_s, "ppo_wall_s": ppo_s,
        "before": {k: v for k, v in before.items() if k not in ("texts", "scores")},
        "after": {k: v for k, v in after.items() if k not in ("texts", "scores")},
        "samples_before": before["texts"][:8], "samples_after": after["texts"][:8],
        "scores_before": before["scores"][:8], "scores_after": after["scores"][:8],
    }
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    if run is not None:
        run.summary.update({f"before/{k}": v for k, v in summary["before"].items()})
        run.summary.update({f"after/{k}": v for k, v in summary["after"].items()})
        run.finish()
    return summary


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        summary = train(args)
    except NotImplementedError:
        import traceback

        where = [getattr(frame.f_code, "co_qualname", frame.f_code.co_name)
                 for frame, _ in traceback.walk_tb(sys.exc_info()[2]) if "exercises" in frame.f_code.co_filename]
        print(f"--impl {args.impl}: {where[-1] if where else 'an exercise'} in exercises/part3_rlhf.py is still a stub; "
              "fill it in (pytest tests/test_part3_rlhf.py shows which are done) or use --impl solutions", file=sys.stderr)
        return 1
    print(f"\n{'':<12}{'reward':>8}{'KL':>8}{'distinct-2':>12}{'length':>8}")
    for when in ("before", "after"):
        s = summary[when]
        print(f"{when:<12}{s['reward']:>+8.3f}{s['kl']:>8.2f}{s['distinct2']:>12.3f}{s['length']:>8.1f}")
    print("\nsamples after training:")
    for text, score in zip(summary["samples_after"], summary["scores_after"]):
        print(f"  {score:+.2f}  {text}")
    print(f"\nwrote {summary['run_dir']}/ (curves.png, metrics.jsonl, samples.jsonl, summary.json, policy.pt)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
