"""The two-process side of the data-parallel tests; run under torchrun by the tests themselves.

    torchrun --standalone --nproc_per_node=2 -m workbook.distributed_check exercises OUT CHOICE...
    torchrun --standalone --nproc_per_node=2 -m workbook.distributed_check job OUT

``exercises``: every Part 6 implementation named (``solutions``, ``exercises``,
``mistake:…``) runs on the same per-rank inputs, plus DistributedDataParallel as the oracle
of ``average_gradients``; each rank saves its outputs to ``OUT/rank<r>.pt`` (one launch
serves the whole test module, known mistakes included). ``job``: the training commands
run data-parallel (each rank in its own working directory ``OUT/rank<r>``) and the checks of
tests/test_data_parallel.py are computed; then rank 1 raises on purpose while rank 0 waits in a
collective, and the job must end with rank 1's error (one launch serves every check).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

from workbook import distributed

PART = "part6_data_parallel"
TIMEOUT_S = 60.0  # the checks take seconds; a rank stuck in a collective fails within a minute


# --- inputs, the same function on both sides (the tests rebuild them for their own checks) ----

class _Net(nn.Module):
    def __init__(self, body: nn.Module, unused_first: bool = False) -> None:
        super().__init__()
        if unused_first:  # registered first, so parameters() yields it before those with a gradient
            self.unused = nn.Linear(2, 2)
        self.body = body
        if not unused_first:
            self.unused = nn.Linear(2, 2)  # never in the loss: its .grad stays None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


GRADIENT_CASES = ("mlp", "conv", "mlp-unused-first")
"""The networks of the average_gradients checks; each holds a parameter without a gradient, the last one
*before* those with one (its slice of the flat vector must not shift theirs)."""


def gradient_case(case: int, rank: int) -> tuple[nn.Module, torch.Tensor]:
    """A small network (identical weights on every rank) and this rank's data."""
    torch.manual_seed(case)
    if case == 1:
        net = _Net(nn.Sequential(nn.Conv1d(2, 3, 3), nn.Tanh(), nn.Flatten(), nn.Linear(3 * 4, 1)))
    else:
        net = _Net(nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)), unused_first=case == 2)
    g = torch.Generator().manual_seed(100 * case + rank)
    x = torch.randn((5, 2, 6) if case == 1 else (6, 3), generator=g) * (1 + 2 * rank)
    return net, x


def gradient_loss(net: nn.Module, x: torch.Tensor) -> torch.Tensor:
    out = net(x)
    return (out ** 2).mean() + out.mean()


WHITEN_CASES = [(True, (3, 5), (4, 6)), (False, (3, 5), (4, 6)), (True, (2, 4), (2, 4))]
"""(shift_mean, shape on rank 0, shape on rank 1): unequal token counts on purpose."""


def whiten_case(case: int, rank: int) -> tuple[torch.Tensor, torch.Tensor, bool]:
    shift_mean, *shapes = WHITEN_CASES[case]
    shape = shapes[rank]
    g = torch.Generator().manual_seed(10 * case + rank)
    values = torch.randn(shape, generator=g) * (1.0 + rank) + 3.0 * rank
    mask = (torch.rand(shape, generator=g) < (0.4 + 0.4 * rank)).float()
    mask[0, 0] = 1.0
    return values, mask, shift_mean


def too_few_case(rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """One masked-in element on rank 0, none on rank 1: fewer than 2 over all ranks together."""
    values, mask = torch.randn(2, 3, generator=torch.Generator().manual_seed(rank)), torch.zeros(2, 3)
    if rank == 0:
        mask[0, 1] = 1.0
    return values, mask


def pair_case(rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """One masked-in element on each rank: exactly the 2 the unbiased variance needs."""
    values = torch.tensor([[1.0 + 2.0 * rank, -4.0], [0.5, 9.0]])
    return values, torch.tensor([[1.0, 0.0], [0.0, 0.0]])


def tied_case(rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Every masked-in element on both ranks equal (global variance 0); padding holds other values."""
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]]) if rank == 0 else torch.tensor([[1.0, 0.0], [1.0, 1.0]])
    values = torch.where(mask.bool(), torch.full_like(mask, 2.5), torch.full_like(mask, 2.5 + 1e-3 * (rank + 1)))
    return values, mask


def near_tied_case(rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Masked-in values 0.1 ± 1e-5 on both ranks (3 and 4 of them): a global variance of ~1e-10, far below the
    1e-8, and values not exact in binary. rsqrt(var + 1e-8) scales the deviations to ~0.1; a 1e-8 added to the
    std instead (or no eps) blows them up to ~1."""
    g = torch.Generator().manual_seed(70 + rank)
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]]) if rank == 0 else torch.tensor([[1.0, 0.0], [1.0, 1.0], [1.0, 0.0]])
    values = 0.1 + 1e-5 * torch.randn(mask.shape, generator=g) + 3.0 * (1 - mask)  # padding far off
    return values, mask


# --- mode "exercises" -----------------------------------------------------------------------------

def _exercise_outputs(fns: Callable[[str], Any]) -> dict:
    out = {}
    rank = distributed.context().rank
    for case in range(len(GRADIENT_CASES)):
        def run_grad(case=case):
            net, x = gradient_case(case, rank)
            gradient_loss(net, x).backward()
            fns("average_gradients")(net.parameters())
            return [None if p.grad is None else p.grad.clone() for p in net.parameters()]
        out[("average_gradients", case)] = run_grad
    for case in range(len(WHITEN_CASES)):
        def run_whiten(case=case):
            values, mask, shift_mean = whiten_case(case, rank)
            return fns("global_masked_whiten")(values, mask, shift_mean)
        out[("global_masked_whiten", case)] = run_whiten
    out[("global_masked_whiten", "too_few")] = lambda: fns("global_masked_whiten")(*too_few_case(rank))
    out[("global_masked_whiten", "tied")] = lambda: fns("global_masked_whiten")(*tied_case(rank))
    out[("global_masked_whiten", "pair")] = lambda: fns("global_masked_whiten")(*pair_case(rank))
    out[("global_masked_whiten", "near_tied")] = lambda: fns("global_masked_whiten")(*near_tied_case(rank))
    return out


def run_exercises(out_dir: Path, choices: list[str]) -> None:
    from workbook.pytest_plugin import load_impl

    ctx = distributed.context()
    results: dict = {}
    # The oracle of average_gradients: what DistributedDataParallel leaves in .grad.
    for case in range(len(GRADIENT_CASES)):
        net, x = gradient_case(case, ctx.rank)
        ddp = torch.nn.parallel.DistributedDataParallel(net, find_unused_parameters=True)
        gradient_loss(ddp, x).backward()
        results[("ddp", "average_gradients", case)] = ("ok", [None if p.grad is None else p.grad.clone()
                                                              for p in net.parameters()])
    path = out_dir / f"rank{ctx.rank}.pt"
    for choice in choices:
        module = load_impl(choice, PART)
        for (exercise, case), run in _exercise_outputs(lambda name: getattr(module, name)).items():
            try:
                results[(choice, exercise, case)] = ("ok", run())
            except Exception as error:  # noqa: BLE001 — reported to the test, which decides
                results[(choice, exercise, case)] = ("error", type(error).__name__, traceback.format_exc())
        torch.save(results, path)  # after every implementation: a later hang keeps these
    torch.save(results, path)


# --- mode "job" -------------------------------------------------------------------------------------

def flat_params(module: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in module.parameters()])


def check_cartpole(ctx: distributed.Context) -> dict:
    """K updates of the data-parallel CartPole trainer: bit-identical weights, different data."""
    from solutions import part2_cartpole as part2

    args = part2.PPOArgs(seed=3, num_envs=4, num_steps_per_rollout=32, total_timesteps=3 * 2 * 128)
    trainer = distributed.cartpole_trainer(part2, args)
    first_obs = trainer.agent.next_obs.clone()
    reports = []
    trainer.train(lambda report: reports.append(report.global_step) and False)
    params = ctx.gather(torch.cat([flat_params(trainer.actor), flat_params(trainer.critic)]))
    obs = ctx.gather(first_obs)
    return {"phases": trainer.phase, "global_steps": reports,
            "params_identical": all(torch.equal(params[0], p) for p in params[1:]),
            "first_obs_differ": not torch.equal(obs[0], obs[1]),
            "params_moved": not torch.equal(params[0], _initial_cartpole_params(part2, args))}


def _initial_cartpole_params(part2, args) -> torch.Tensor:
    torch.manual_seed(args.seed)
    actor, critic = part2.get_actor_and_critic(4, 2)
    return torch.cat([flat_params(actor), flat_params(critic)])


def check_continuous(ctx: distributed.Context) -> dict:
    """K updates of the data-parallel Part 4 trainer: identical weights and normaliser statistics."""
    from solutions import part4_continuous as part4
    from workbook.continuous import PROBE_IDS

    args = part4.ContinuousPPOArgs(env_id=PROBE_IDS[2], num_envs=4, num_steps_per_rollout=16, total_timesteps=3 * 2 * 64,
                                   learning_rate=1e-2, num_minibatches=4, batches_per_learning_phase=2, seed=2)
    trainer = distributed.continuous_trainer(part4, args)
    counts = [trainer.obs_normalizer.rms.count]
    trainer.train(lambda report: counts.append(trainer.obs_normalizer.rms.count) and False)
    params = ctx.gather(torch.cat([flat_params(trainer.actor), flat_params(trainer.critic)]))
    stats = ctx.gather([torch.cat([rms.mean.reshape(-1), rms.var.reshape(-1), torch.tensor([float(rms.count)])])
                        for rms in (trainer.obs_normalizer.rms, trainer.reward_scaler.return_rms)])
    return {"phases": trainer.phase, "params_identical": all(torch.equal(params[0], p) for p in params[1:]),
            "stats_identical": all(torch.equal(a, b) for other in stats[1:] for a, b in zip(stats[0], other)),
            "obs_counts": [c - counts[0] for c in counts[1:]]}


def rlhf_batch(rank: int, batch: int = 4, resp_len: int = 5, vocab: int = 12):
    """Per-rank queries (different lengths), responses (all ``resp_len`` long) and scores."""
    g = torch.Generator().manual_seed(50 + rank)
    queries = [torch.randint(3, vocab, (int(torch.randint(2, 5, (1,), generator=g)),), generator=g) for _ in range(batch)]
    responses = [torch.randint(3, vocab, (resp_len,), generator=g) for _ in range(batch)]
    scores = torch.randn(batch, generator=g) + rank
    return queries, responses, scores


def check_rlhf_step(ctx: distributed.Context) -> dict:
    """One data-parallel PPO step equals one single-process step on the union of the batches."""
    from solutions import part3_rlhf as part3
    from workbook.lm.model import GPT, GPTConfig

    torch.manual_seed(0)
    lm = GPT(GPTConfig(vocab_size=12, block_size=16, n_layer=1, n_head=2, d_model=8))
    policy = part3.GPTWithValueHead(lm)
    torch.nn.init.normal_(policy.value_head.weight, std=0.1)  # non-zero values: whitening and clipping matter
    start = copy.deepcopy(policy)
    config = part3.PPOConfig(learning_rate=0.5, mini_batch_size=4, ppo_epochs=1, init_kl_coef=0.3, target=0.01,
                             horizon=10.0, ent_coef=0.01, max_grad_norm=1.0)

    def make(model, cfg):
        trainer = part3.PPOTrainer(cfg, model, part3.create_reference_model(start), pad_id=0)
        # Plain SGD: Adam's first step is ~lr·sign(g) whatever the gradient's scale, so it would
        # hide a sum-instead-of-mean; SGD's step is proportional to the gradient.
        trainer.optimizer = torch.optim.SGD(model.parameters(), lr=cfg.learning_rate)
        return trainer

    with torch.no_grad():  # the reference must differ from the policy for a non-zero KL
        for p in policy.lm.parameters():
            p.add_(0.05 * torch.randn_like(p))
    moved = copy.deepcopy(policy)
    trainer = distributed.rlhf_trainer(make(policy, config), part3)
    queries, responses, scores = rlhf_batch(ctx.rank)
    stats = trainer.step(queries, responses, scores)
    params = ctx.gather(flat_params(policy))
    union = ctx.gather((queries, responses, scores))
    result = {"params_identical": all(torch.equal(params[0], p) for p in params[1:]),
              "kl_coef": trainer.kl_ctl.value, "stats_kl": stats["objective/kl"]}
    if ctx.is_main:
        single = make(moved, dataclasses.replace(config, mini_batch_size=4 * ctx.world_size))
        single.step([q for qs, _, _ in union for q in qs], [r for _, rs, _ in union for r in rs],
                    torch.cat([s for _, _, s in union]))
        result["max_abs_diff_vs_single"] = (params[0] - flat_params(moved)).abs().max().item()
        result["step_size"] = (params[0] - flat_params(copy.deepcopy(start))).abs().max().item()
        result["kl_coef_single"] = single.kl_ctl.value
    return result


def run_commands(out_dir: Path) -> dict:
    """The training commands, tiny, in this rank's own working directory."""
    from workbook.cartpole import train as cartpole
    from workbook.lm.model import GPT, GPTConfig
    from workbook.lm.tokenizer import CharTokenizer
    from workbook.loop import reasoning, rlhf

    code = cartpole.main(["--impl", "solutions", "--total-timesteps", "512", "--set", "num_envs=4",
                          "--set", "num_steps_per_rollout=32", "--wandb", "disabled", "--runs-dir", "runs",
                          "--run-name", "cartpole", "--eval-episodes", "2", "--no-progress"])
    tok = CharTokenizer()
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=tok.vocab_size, block_size=64, n_layer=1, n_head=2, d_model=16))
    args = rlhf.Args(impl="solutions", iterations=2, batch_size=4, mini_batch_size=2, ppo_epochs=1, eval_samples=4,
                     max_new_tokens=12, sample_every=1, wandb="disabled", runs_dir="runs", run_name="rlhf")
    summary = rlhf.train(args, model=model, tok=tok)
    result = {"cartpole_exit": code, "rlhf_iterations": summary.get("iterations")}
    ctx = distributed.context()
    # Part 9's calculator task: the environment's turns (tool calls and results) cross the ranks' batches too.
    result["calculator_exit"] = reasoning.main(
        ["--task", "calculator", "--impl", "solutions", "--iterations", "2", "--eval-samples", "4", "--eval-k", "2",
         "--batch-size", "16", "--group-size", "8", "--mini-batch-size", "8", "--sample-every", "1", "--runs-dir", "runs",
         "--run-name", "calculator", "--no-progress", "--wandb", "disabled"])
    for algo in ("grpo", "dpo"):  # Part 5 runs data-parallel too: same weights, each rank its own prompts / pairs
        torch.manual_seed(0)
        lm = GPT(GPTConfig(vocab_size=tok.vocab_size, block_size=160, n_layer=1, n_head=2, d_model=16))  # DPO: whole reviews
        start = flat_params(lm).clone()
        algo_args = rlhf.algo_args(algo, impl="solutions", iterations=2, batch_size=4, mini_batch_size=2, group_size=2,
                                   ppo_epochs=1, eval_samples=4, max_new_tokens=12, wandb="disabled", runs_dir="runs",
                                   run_name=algo, learning_rate=1e-2, sample_every=1)
        done = rlhf.train(algo_args, model=lm, tok=tok, progress=False)
        params = ctx.gather(flat_params(lm))
        samples = ctx.gather((Path("runs") / algo / "samples.jsonl").read_text() if ctx.is_main else None)
        result[algo] = {"iterations": done.get("iterations"), "params_identical": all(torch.equal(params[0], q) for q in params[1:]),
                        "params_moved": not torch.equal(params[0], start), "rank0_wrote_samples": bool(samples[0])}
    return result


def run_job(out_dir: Path) -> None:
    ctx = distributed.context()
    own = out_dir / f"rank{ctx.rank}"
    own.mkdir(parents=True, exist_ok=True)
    os.chdir(own)  # whatever this rank writes lands here
    result = {"rank": ctx.rank, "world_size": ctx.world_size, "backend": torch.distributed.get_backend()}
    result["cartpole"] = check_cartpole(ctx)
    result["rlhf_step"] = check_rlhf_step(ctx)
    result["continuous"] = check_continuous(ctx)
    result["commands"] = run_commands(out_dir)
    (out_dir / f"result{ctx.rank}.json").write_text(json.dumps(result))
    torch.distributed.barrier()  # both results are written
    # Last, a rank that fails: rank 0 waits in a collective for a rank that is gone.
    if ctx.rank == 1:
        (out_dir / "failed_at").write_text(str(time.time()))
        raise RuntimeError("rank 1 fails on purpose")
    ctx.mean(1.0)
    (out_dir / "rank0-finished").write_text("rank 0 should never get here")


def main(argv: list[str]) -> int:
    mode, out_dir, *choices = argv
    out_dir = Path(out_dir).resolve()
    torch.set_num_threads(1)
    ctx = distributed.init("solutions", timeout_s=TIMEOUT_S)
    if mode == "exercises":
        run_exercises(out_dir, choices)
    elif mode == "job":
        run_job(out_dir)
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
