"""Goodhart's law, measured: a gold reward, proxies trained on its labels, best-of-n and RL against a proxy.

    python -m workbook goodhart                         # your Parts 3 and 11 (exercises/), seed 0
    python -m workbook goodhart --impl solutions --seeds 0 1 2
    python -m workbook goodhart --resume runs/goodhart-...   # continue an interrupted run
    python -m workbook evaluate runs/goodhart-...            # its table and fits again, from its files

Per seed (``workbook/goodhart/measure.py`` says what each stage is): base samples scored by the gold
(``--gold``: VADER, where words no reader knows count as the worst review) → proxies (Part 3's RewardModel
and preference_loss) trained on gold-labelled pairs at each ``--proxy-pairs`` size, and ``--ensemble`` − 1
more of the smallest size → best-of-n against each proxy from a pool of ``--pool-size`` samples per prompt →
RL against each proxy (and the ensemble; ``--rl-algo``: Part 3's PPO, or Part 5's RLOO or GRPO), logging the gold
of every batch. Then Gao et al.'s forms are fitted
(Part 11's ``fit_gao``) and the figure drawn.

Writes, under ``<runs-dir>/<run name>/``: ``config.json``; ``seed<S>/`` (``bank.json``, ``proxies.pt``,
``bon.json`` and ``rl/<proxy>/``, each an ``rlhf`` run folder that ``evaluate`` reads, which scores its
policy with VADER, Part 3's reward); ``results.json`` (the benchmark's keys: gold, proxies, bon, rl, fits),
``goodhart.png`` and ``summary.json``. Ctrl-C keeps every stage finished, every proxy trained (``proxies.partial.pt``
until the stage ends) and an RL run's last iteration, with its checkpoint; ``--resume RUN_DIR`` continues from there.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

import torch

from workbook.checkpoints import CHECKPOINT, INTERRUPTED, load_run, save, write_json
from workbook.cli import (add_dataclass_arguments, add_seeds_option, dataclass_from_args, make_parser, require,
                          require_at_least, require_choices, require_divides, require_in, require_positive,
                          require_unique_seeds)
from workbook.goodhart import COMMAND, GOLDS
from workbook.goodhart.report import print_table, results
from workbook.runs import (ConfigError, check_can_create, check_new_run_dir, check_no_stubs, command, new_run_dir, start_wandb,
                           stub_error)


@dataclass
class GoodhartArgs:
    """The measurement's settings (defaults: the design measured in docs/goodhart.md)."""

    impl: Literal["exercises", "solutions"] = "exercises"
    """Whose Part 3 (RewardModel, preference_loss, PPO) and Part 11 (best-of-n, fits, ensembles) run: exercises or solutions."""
    gold: Literal[GOLDS] = "vader-words"
    """The gold: vader (Part 3's reward) or vader-words (VADER, where the share of words no reader knows counts as −1)."""
    proxy_pairs: str = "1000,3000,10000"
    """The proxies' training-set sizes in gold-labelled pairs, comma-separated, ascending (one proxy, one best-of-n curve and one RL run each)."""
    label_noise: float = 0.0
    """Bradley–Terry label noise: P(a ≻ b) = σ((gold_a − gold_b) / this); 0 = the gold's preference, always."""
    proxy_epochs: float = 1.0
    """Passes over a proxy's pairs (at least --proxy-min-steps steps: a proxy of few pairs sees them many times and overfits)."""
    proxy_min_steps: int = 60
    """Fewest optimizer steps of a proxy."""
    proxy_batch_size: int = 32
    """Pairs per proxy step."""
    proxy_lr: float = 1e-3
    """Adam learning rate of the proxies."""
    bank_samples: int = 2_000
    """Base samples the training pairs are drawn from (and the proxies standardised on)."""
    bank_near_misses: float = 0.0
    """Share of the bank's samples given a near-miss of their sentiment word ("excelent") before the gold labels them, the lesson the base model's writing holds too little of (0, the design: its writing as it is; docs/goodhart.md measures 0.25). The proxies are standardised on the bank as it is then."""
    heldout_pairs: int = 400
    """Held-out pairs (of other base samples) for each proxy's pair accuracy."""
    pool_prompts: int = 4
    """Prompts of best-of-n (its gold and proxy are the mean over them)."""
    pool_size: int = 1_024
    """Base samples per prompt in best-of-n's pool: N, the largest n."""
    max_new_tokens: int = 40
    """Longest completion in characters (pool, pairs and RL alike)."""
    ensemble: int = 3
    """Proxies of the smallest size in the ensemble RL run (the first is the single proxy; each other on its own pairs); 0 or 1: no ensemble run."""
    ensemble_method: Literal["wco", "uwo", "mean"] = "wco"
    """How the ensemble combines its standardised members: wco (min), uwo (mean − λ·variance) or mean."""
    uwo_lambda: float = 0.5
    """λ of uwo."""
    rl_algo: Literal["ppo", "rloo", "grpo"] = "ppo"
    """The RL optimiser: ppo (Part 3's, the design) or Part 5's critic-free rloo or grpo (no value function: each prompt is sampled --rl-group-size times and its samples are one another's baseline)."""
    rl_group_size: int = 4
    """rloo and grpo: samples per prompt (at least 2; divides --rl-batch-size)."""
    rl_iterations: int = 80
    """Iterations of each RL run."""
    rl_batch_size: int = 64
    """Samples per RL iteration."""
    rl_learning_rate: float = 2.5e-4
    """The RL optimiser's Adam learning rate (Part 3's PPO's)."""
    rl_kl_coef: float = 0.0
    """The KL penalty β (0: none, so that the gold's fall comes within the run — Gao et al. found a penalty moves a run along its frontier; here β = 0.1 lifted PPO's, docs/goodhart.md; PPO's and RLOO's in the reward, GRPO's in the loss)."""
    rl_ent_coef: float = 0.03
    """The entropy bonus (Part 3's PPO's)."""
    eval_samples: int = 32
    """Held-out prompts of each RL run's before/after evaluation."""
    threads: int = 1
    """torch threads."""
    wandb: Literal["offline", "online", "disabled"] = "offline"
    """wandb mode of the whole measurement (offline: no account needed)."""
    runs_dir: str = "runs"
    """Outputs go to <runs_dir>/<run name>/."""
    run_name: str = ""
    """Default: goodhart-<impl>-seeds<S...>-<time>."""
    overwrite: bool = False
    """Replace an existing run folder of that name."""
    resume: str = ""
    """A goodhart run folder to continue: its stages done are kept, an interrupted RL run continues from its checkpoint."""
    progress: bool = True
    """Progress lines (a bar on a terminal; --no-progress: none)."""

    def sizes(self) -> list[int]:
        return [int(x) for x in self.proxy_pairs.split(",")]


# --- options ------------------------------------------------------------------------------------

RESUME_MAY_CHANGE = {"resume", "wandb", "progress", "threads", "seeds"}


def parse_command(argv: list[str]) -> tuple[GoodhartArgs, list[int]]:
    parser = make_parser(f"python -m workbook {COMMAND}", __doc__.split("\n\n")[0])
    add_seeds_option(parser, [0], "one measurement per seed, e.g. --seeds 0 1 2")
    add_dataclass_arguments(parser, GoodhartArgs, skip=("progress",))
    parser.add_argument("--no-progress", dest="progress", action="store_false", help="no progress lines")
    ns = parser.parse_args(argv)
    return dataclass_from_args(GoodhartArgs, ns), list(ns.seeds)


def validate(a: GoodhartArgs, seeds: list[int]) -> None:
    """ConfigError for the first bad setting, before anything is loaded or written."""
    require_choices(a)
    require_unique_seeds(seeds)
    try:
        sizes = a.sizes()
    except ValueError:
        raise ConfigError("--proxy-pairs", f"expected whole numbers separated by commas, got {a.proxy_pairs!r}") from None
    require(len(sizes) >= 1 and all(s >= 2 for s in sizes), "--proxy-pairs", f"each size must be ≥ 2, got {a.proxy_pairs!r}")
    require(sizes == sorted(set(sizes)), "--proxy-pairs", f"sizes must be distinct and ascending, got {a.proxy_pairs!r}")
    require_at_least("--label-noise", a.label_noise, 0)
    require_positive("--proxy-epochs", a.proxy_epochs)
    for name in ("proxy_min_steps", "proxy_batch_size", "pool_prompts", "rl_iterations", "rl_batch_size",
                 "eval_samples", "threads"):
        require_at_least(f"--{name.replace('_', '-')}", getattr(a, name), 1)
    require_at_least("--bank-samples", a.bank_samples, 10)
    require_in("--bank-near-misses", a.bank_near_misses, 0, 1)
    require_at_least("--heldout-pairs", a.heldout_pairs, 1)
    require_at_least("--pool-size", a.pool_size, 2)
    require_in("--max-new-tokens", a.max_new_tokens, 1, 100)
    require_at_least("--ensemble", a.ensemble, 0)
    require_at_least("--uwo-lambda", a.uwo_lambda, 0)
    for name in ("proxy_lr", "rl_learning_rate"):
        require_positive(f"--{name.replace('_', '-')}", getattr(a, name))
    for name in ("rl_kl_coef", "rl_ent_coef"):
        require_at_least(f"--{name.replace('_', '-')}", getattr(a, name), 0)
    if a.rl_algo != "ppo":  # whole groups of two or more: a sample's baseline is the others of its prompt
        require_at_least("--rl-group-size", a.rl_group_size, 2)
        require_divides("--rl-group-size", a.rl_group_size, "--rl-batch-size", a.rl_batch_size)
    most = a.bank_samples * (a.bank_samples - 1) // 4  # distinct pairs, with room for gold ties
    need = sizes[-1] + (max(a.ensemble, 1) - 1) * sizes[0]
    require(need <= most, "--bank-samples", f"{a.bank_samples} samples give at most {most} distinct pairs; --proxy-pairs "
            f"{a.proxy_pairs} and --ensemble {a.ensemble} need {need} (at least "
            f"{math.ceil((1 + math.sqrt(1 + 16 * need)) / 2)} samples)")
    from workbook.loop.rlhf import validate as validate_rl

    validate_rl(rl_args(a, seeds[0], Path(a.runs_dir), "rl", False))  # the loop's own checks, before anything is written


def rl_args(a: GoodhartArgs, seed: int, runs: Path, name: str, progress: bool):
    """The ``rlhf`` loop's options of one RL run (--rl-algo on the review task; its reward is set by the task given to
    it), as ``python -m workbook rlhf --algo ALGO`` with these options given would take them."""
    from workbook.loop.algorithms import apply_algo_defaults
    from workbook.loop.rlhf import Args

    given = {"iterations", "batch_size", "mini_batch_size", "learning_rate", "kl_coef", "ent_coef", "group_size"}
    return apply_algo_defaults(Args(
        impl=a.impl, seed=seed, algo=a.rl_algo, group_size=a.rl_group_size, iterations=a.rl_iterations,
        batch_size=a.rl_batch_size, mini_batch_size=math.gcd(a.rl_batch_size, 16), learning_rate=a.rl_learning_rate,
        kl_coef=a.rl_kl_coef, ent_coef=a.rl_ent_coef, max_new_tokens=a.max_new_tokens, eval_samples=a.eval_samples,
        wandb="disabled", runs_dir=str(runs), run_name=name, threads=a.threads, quiet=True, progress=progress,
        sample_every=10), given)


def learner_calls(a: GoodhartArgs) -> dict[str, list[str]]:
    """Per module of the parts, the learner's functions a measurement with ``a`` calls (for
    :func:`workbook.runs.check_no_stubs`: every stub named before anything is written, not minutes into the run)."""
    from workbook.loop.calls import update_calls

    rl = rl_args(a, 0, Path(a.runs_dir), "rl", False)
    calls = {"part3_rlhf": ["RewardModel", "preference_loss"],
             "part11_goodhart": ["best_of_n_kl", "best_of_n_kl_discrete", "best_of_n_gold", "fit_gao", "gao_peak"]
                                + (["standardise_proxies", "ensemble_reward"] if a.ensemble >= 2 else [])}
    for stem, names in update_calls(rl.algo, rl.adaptive_kl and rl.kl_coef > 0).items():
        calls.setdefault(stem, []).extend(n for n in names if n not in calls.get(stem, []))
    return calls


def check_impl(a: GoodhartArgs, part3, part11, lm, tok) -> None:
    """Call every function of the learner's that the measurement uses once, on tiny inputs, before anything is
    written: an unfilled stub stops the command with one line and no run folder (not minutes into it)."""
    from workbook.rlhf.reward_model import encode_texts

    scores = torch.tensor([[0.5, 1.0, 0.0], [1.0, 0.0, 0.5]])
    part11.best_of_n_kl(2)
    part11.best_of_n_kl_discrete(torch.tensor([0.5, 0.5]), 2)
    part11.best_of_n_gold(scores[0], scores[1], 2)
    part11.gao_peak(*part11.fit_gao(torch.tensor([0.0, 1.0, 2.0]), torch.tensor([0.0, 1.0, 1.5]), "bon")[:2], "bon")
    part11.fit_gao(torch.tensor([0.0, 1.0, 2.0]), torch.tensor([0.0, 1.0, 1.5]), "rl")
    if a.ensemble >= 2:
        part11.ensemble_reward(part11.standardise_proxies(scores, scores), a.ensemble_method, uwo_lambda=a.uwo_lambda)
    with torch.no_grad():
        r = part3.RewardModel(lm)(*encode_texts(["a good film", "bad"], tok))
    part3.preference_loss(r[:1], r[1:])
    if a.rl_algo == "ppo":
        part3.GPTWithValueHead(lm)


def run_name(a: GoodhartArgs, seeds: list[int]) -> str:
    return a.run_name or f"goodhart-{a.impl}-seeds{'-'.join(map(str, seeds))}-{time.strftime('%Y%m%d-%H%M%S')}"


def resumed(a: GoodhartArgs, seeds: list[int], argv: list[str]) -> tuple[GoodhartArgs, list[int], Path]:
    """The run's saved settings (only --wandb, --no-progress and --threads may change), and its folder."""
    run_dir = Path(a.resume)
    if not (run_dir / "config.json").is_file():
        raise ConfigError("--resume", f"{run_dir} is not a goodhart run folder (it has no config.json)")
    saved = json.loads((run_dir / "config.json").read_text())
    given = {t.lstrip("-").split("=")[0].replace("-", "_").removeprefix("no_") for t in argv if t.startswith("--")}
    for name in sorted(given - RESUME_MAY_CHANGE - {"debug"}):
        raise ConfigError(f"--{name.replace('_', '-')}", "a resumed run keeps its settings (only --wandb, --threads and "
                                                         "--no-progress may change)")
    args = GoodhartArgs(**(saved["args"] | {k: getattr(a, k) for k in ("wandb", "progress", "threads")}
                           | {"resume": str(run_dir), "runs_dir": str(run_dir.parent), "run_name": run_dir.name}))
    check_can_create(run_dir / "results.json", "--resume")
    return args, saved["seeds"], run_dir


# --- one seed -----------------------------------------------------------------------------------

class Stages:
    """The stages of one seed, each written to ``seed<S>/`` when done and read back instead of redone."""

    def __init__(self, a: GoodhartArgs, seed: int, out: Path, lm, tok, say):
        from workbook.goodhart import measure as m

        self.a, self.seed, self.out, self.lm, self.tok, self.say, self.m = a, seed, out, lm, tok, say, m
        self.part3, self.part11 = m.load_part3(a.impl), m.load_part11(a.impl)
        self.gold = m.gold_scorer(a.gold)
        out.mkdir(parents=True, exist_ok=True)

    def bank(self) -> dict:
        """Base samples (training, ``--bank-near-misses`` of them given a near-miss, and held-out) and their gold scores."""
        path = self.out / "bank.json"
        if path.exists():
            return json.loads(path.read_text())
        a, m, s = self.a, self.m, self.seed
        prompts = m.bank_prompts(a.bank_samples, 2 * s)
        texts = m.sample_texts(self.lm, self.tok, prompts, max_new_tokens=a.max_new_tokens, seed=2 * s)
        from workbook.lm.reward import VaderScorer

        lexicon = VaderScorer().lexicon
        texts, changed = m.near_misses(texts, prompts, a.bank_near_misses, seed=s, sentiment=lexicon.__contains__)
        held = m.sample_texts(self.lm, self.tok, m.bank_prompts(2 * a.heldout_pairs, 2 * s + 1),
                              max_new_tokens=a.max_new_tokens, seed=2 * s + 1)  # as the base model writes
        bank = {"texts": texts, "gold": self.gold(texts).tolist(), "near_misses": changed,
                "heldout": held, "heldout_gold": self.gold(held).tolist()}
        write_json(bank, path)
        return bank

    def proxies(self, bank: dict) -> dict:
        """name -> {"pairs", "member", "heldout_accuracy", "state"}: one proxy per size, ensemble members of the smallest."""
        path = self.out / "proxies.pt"
        if path.exists():
            return torch.load(path, weights_only=False)
        a, m = self.a, self.m
        gold = torch.tensor(bank["gold"])
        nested = self.sized_pairs(bank)
        jobs = [(f"pairs{n}", n, 0, nested[:n]) for n in a.sizes()]
        taken = {frozenset(p) for p in nested}
        for k in range(1, a.ensemble):  # other data of the smallest size, disjoint from every other proxy's
            pairs = m.gold_pairs(gold, a.sizes()[0], seed=self.seed + 1_000 * k, label_noise=a.label_noise, exclude=taken)
            taken |= {frozenset(p) for p in pairs}
            jobs.append((f"pairs{a.sizes()[0]}-member{k}", a.sizes()[0], k, pairs))
        # The proxies trained so far, saved after each: Ctrl-C in this stage keeps them (each has its own seed, so the
        # ones trained after a resume are the same as without the stop).
        partial = self.out / "proxies.partial.pt"
        out = torch.load(partial, weights_only=False) if partial.exists() else {}
        for name, n, k, pairs in jobs:
            if name in out:
                continue
            out[name] = {"pairs": n, "member": k, **self.train(bank, bank["texts"], pairs, seed=1_000 * self.seed + 7 * k + n)}
            self.say(f"seed {self.seed}: proxy {name}: {out[name]['steps']} steps, held-out pair accuracy "
                     f"{out[name]['heldout_accuracy']:.3f} ({out[name]['wall_s']:.0f} s)")
            save(out, partial)
        save(out, path)
        partial.unlink()
        return out

    def sized_pairs(self, bank: dict) -> list:
        """The gold-labelled pairs of the sized proxies: the first n of them are the n-pair proxy's."""
        return self.m.gold_pairs(torch.tensor(bank["gold"]), self.a.sizes()[-1], seed=self.seed + 17,
                                 label_noise=self.a.label_noise)

    def train(self, bank: dict, texts: list[str], pairs: list, *, seed: int) -> dict:
        """One proxy on ``pairs`` of ``texts``, standardised on the bank's base samples: its steps, held-out and training
        pair accuracy, time and state (``Proxy.state``)."""
        a, m = self.a, self.m
        steps = max(a.proxy_min_steps, math.ceil(a.proxy_epochs * len(pairs) / a.proxy_batch_size))
        t0 = time.perf_counter()
        model, _ = m.train_proxy(self.part3, self.lm, self.tok, texts, pairs, steps=steps, batch_size=a.proxy_batch_size,
                                 lr=a.proxy_lr, seed=seed)
        proxy = m.Proxy(model, self.tok, 0.0, 1.0)
        base = proxy.raw(bank["texts"])
        proxy.mean, proxy.std = base.mean().item(), max(base.std().item(), 1e-6)
        heldout = m.gold_pairs(torch.tensor(bank["heldout_gold"]), a.heldout_pairs, seed=self.seed + 31)
        trained_on = base if texts is bank["texts"] else proxy.raw(texts)
        return {"steps": steps, "heldout_accuracy": m.pair_accuracy(proxy.raw(bank["heldout"]), heldout),
                "train_accuracy": m.pair_accuracy(trained_on, pairs), "wall_s": time.perf_counter() - t0,
                "state": proxy.state()}

    def proxy(self, proxies: dict, name: str):
        return self.m.Proxy.from_state(self.part3, proxies[name]["state"], self.tok)

    def best_of_n(self, proxies: dict) -> dict:
        """name -> best-of-n rows (n, kl, kl_discrete, proxy, gold) from one pool of base samples per prompt."""
        path = self.out / "bon.json"
        if path.exists():
            return json.loads(path.read_text())
        a, m = self.a, self.m
        prompts = m.pool_prompts(a.pool_prompts, self.seed)
        texts = [m.sample_texts(self.lm, self.tok, [p] * a.pool_size, max_new_tokens=a.max_new_tokens,
                                seed=10_000 * (self.seed + 1) + i) for i, p in enumerate(prompts)]
        gold = torch.stack([self.gold(t) for t in texts])
        out = {"prompts": prompts, "base_gold": gold.mean().item(),
               "distinct": sum(len(set(t)) for t in texts) / len(texts), "curves": {}}
        for name, info in proxies.items():
            if info["member"]:
                continue
            proxy = self.proxy(proxies, name)
            scores = torch.stack([proxy(t) for t in texts])
            out["curves"][name] = m.best_of_n_curve(self.part11, scores, gold)
        write_json(out, path)
        self.say(f"seed {self.seed}: best-of-n from {a.pool_prompts} pools of {a.pool_size} "
                 f"({out['distinct']:.0f} distinct texts each), n up to {a.pool_size}")
        return out

    def rl(self, proxies: dict, bank: dict, name: str, progress: bool) -> tuple[list[dict], str]:
        """One RL run (--rl-algo) against proxy ``name`` (or the ensemble): its metrics (every iteration) and status."""
        from workbook.loop import run as loop

        a, m = self.a, self.m
        runs = self.out / "rl"
        run_dir = runs / name
        summary = run_dir / "summary.json"
        if summary.exists() and json.loads(summary.read_text()).get("status") == "finished":
            return read_metrics(run_dir), "finished"
        if name == "ensemble":
            smallest = [n for n, info in proxies.items() if info["pairs"] == a.sizes()[0]]
            scorer = m.Ensemble(self.part11, [self.proxy(proxies, n) for n in smallest], bank["texts"],
                                a.ensemble_method, a.uwo_lambda)
        else:
            scorer = self.proxy(proxies, name)
        args = rl_args(a, self.seed, runs, name, progress)
        resume = None
        if (run_dir / CHECKPOINT).exists():
            resume = load_run(run_dir, "--resume", ("rlhf",))
            args = dataclasses.replace(args, resume=str(run_dir))
        elif run_dir.exists():  # stopped before its first iteration: nothing in it to keep
            args = dataclasses.replace(args, overwrite=True)
        task = m.ProxyTask(scorer, self.gold)
        t0 = time.perf_counter()
        # A copy: PPO trains the model it is given in place, and every run starts from the base model.
        result = loop.train(args, run_class=goodhart_rl_run(), model=copy.deepcopy(self.lm), tok=self.tok, task=task,
                            progress=progress, resume=resume)
        rows = read_metrics(run_dir)
        if rows:
            self.say(f"seed {self.seed}: RL against {name}: {len(rows)} iteration{'s' * (len(rows) != 1)}, KL {rows[-1]['objective/kl']:.1f}, "
                     f"proxy {rows[-1]['env/reward_mean']:+.2f}, gold {rows[-1]['env/gold_mean']:+.3f} "
                     f"({time.perf_counter() - t0:.0f} s)")
        return rows, result.get("status", "finished")


OPTION_NAMES = {"--learning-rate": "--rl-learning-rate", "--kl-coef": "--rl-kl-coef", "--max-new-tokens": "--max-new-tokens",
                "--ent-coef": "--rl-ent-coef"}
"""The rlhf loop's options that its warnings name, as this command spells them."""


class _Warnings:
    """The loop's dead-run watch, its lines in this command's words: over-optimisation is what is measured here."""

    def __init__(self, watch):
        self.watch = watch

    def update(self, stats: dict) -> list[str]:
        lines = []
        for line in self.watch.update(stats):
            for theirs, ours in OPTION_NAMES.items():
                line = line.replace(f"{theirs} ", f"{ours} ")
            lines.append(line + " — expected in this measurement, which runs without a KL leash to show the gold fall")
        return lines

    def summary(self) -> list[dict]:
        return self.watch.summary()


def goodhart_rl_run():
    """The rlhf loop's run class for the RL runs of this command (an ``rlhf`` run folder; warnings in goodhart's words)."""
    from workbook.loop.rlhf import RlhfRun

    class GoodhartRlRun(RlhfRun):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.health = _Warnings(self.health)

        def stopped(self, status, bad=None, line=None):
            # The loop's own line would say "python -m workbook rlhf --resume <this run>", which would continue it
            # against Part 3's reward, not the proxy: the goodhart command says how to continue instead.
            import contextlib
            import io

            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                return super().stopped(status, bad, line)

    return GoodhartRlRun


def read_metrics(run_dir: Path) -> list[dict]:
    path = run_dir / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


class Interrupted(Exception):
    """An RL run stopped by Ctrl-C: its checkpoint is written; the measurement stops here."""


def measure_seed(a: GoodhartArgs, seed: int, out: Path, lm, tok, say, progress: bool) -> dict:
    """Every stage of one seed (those already in ``out`` read back); the rows of the results."""
    st = Stages(a, seed, out, lm, tok, say)
    bank = st.bank()
    proxies = st.proxies(bank)
    bon = st.best_of_n(proxies)
    rl = {}
    names = [f"pairs{n}" for n in a.sizes()] + (["ensemble"] if a.ensemble >= 2 else [])
    for name in names:
        rows, status = st.rl(proxies, bank, name, progress)
        if status != "finished":
            raise Interrupted(status)
        rl[name] = rows
    return {"seed": seed, "base_gold": sum(bank["gold"]) / len(bank["gold"]), "bon_base_gold": bon["base_gold"],
            "proxies": {k: {kk: vv for kk, vv in v.items() if kk != "state"} for k, v in proxies.items()},
            "bon": bon["curves"], "rl": rl}


@command
def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    a, seeds = parse_command(argv)
    if a.resume:
        a, seeds, out = resumed(a, seeds, argv)
        validate(a, seeds)
    else:
        validate(a, seeds)
        out = check_new_run_dir(a.runs_dir, run_name(a, seeds), a.overwrite)
    from workbook.goodhart.measure import load_part11
    from workbook.lm.pretrain import load_or_pretrain
    from workbook.rlhf.data import load_part3

    torch.set_num_threads(a.threads)
    say = lambda *x: print(*x, flush=True)  # one line per stage (--no-progress turns off the RL runs' bars)
    try:  # the learner's classes exist before anything is written (a missing stub: one line, no folder)
        part3, part11 = load_part3(a.impl), load_part11(a.impl)
    except ImportError as error:
        raise ConfigError("--impl", f"cannot import {a.impl}'s Parts 3 and 11 ({error})") from None
    check_no_stubs(a.impl, learner_calls(a))
    lm, tok = load_or_pretrain(progress=a.progress)
    try:
        check_impl(a, part3, part11, lm, tok)
    except NotImplementedError:
        raise stub_error(a.impl, "exercises/part11_goodhart.py") from None
    if not a.resume:
        out = new_run_dir(a.runs_dir, out.name, a.overwrite)
        write_json({"command": COMMAND, "args": asdict(a), "seeds": seeds}, out / "config.json")
    write_json({"command": COMMAND, "status": "running", "seeds": seeds}, out / "summary.json")
    wandb = start_wandb(a.wandb, project="ppo-rlhf-workbook", run_name=out.name, run_dir=out, config=asdict(a))
    t0 = time.perf_counter()
    done = []
    try:
        for seed in seeds:
            say(f"== seed {seed} ==")
            done.append(measure_seed(a, seed, out / f"seed{seed}", lm, tok, say, a.progress))
    except (KeyboardInterrupt, Interrupted) as stop:
        write_json({"command": COMMAND, "status": "interrupted", "seeds": seeds}, out / "summary.json")
        what = "interrupted" if not isinstance(stop, Interrupted) or str(stop) == "interrupted" else \
            f"an RL run stopped ({stop}: a NaN or inf; its last good checkpoint is kept)"
        print(f"{what}; the stages finished are kept in {out}/; continue with: "
              f"python -m workbook {COMMAND} --resume {out}", flush=True)
        if wandb is not None:
            wandb.finish(exit_code=1)
        return INTERRUPTED
    except NotImplementedError:
        write_json({"command": COMMAND, "status": "stub", "seeds": seeds}, out / "summary.json")
        raise stub_error(a.impl, "exercises/part11_goodhart.py") from None
    return finish(a, seeds, out, done, time.perf_counter() - t0, wandb)


def finish(a: GoodhartArgs, seeds: list[int], out: Path, done: list[dict], wall_s: float, wandb) -> int:
    from workbook.goodhart.figure import draw

    res = results(a, done)
    write_json(res, out / "results.json")
    draw(res, out / "goodhart.png", a)
    write_json({"command": COMMAND, "status": "finished", "seeds": seeds, "wall_s": wall_s,
                "fits": [f for f in res["fits"] if f["seed"] == "mean"]}, out / "summary.json")
    print_table(res)
    if wandb is not None:
        import wandb as wb

        wandb.log({"goodhart": wb.Image(str(out / "goodhart.png"))})
        wandb.summary.update({f"{f['method']}/{f['proxy_pairs']}{'-' + f['ensemble'] if f.get('ensemble') else ''}/"
                              f"{k}": f[k] for f in res["fits"] if f["seed"] == "mean" and f["alpha"] is not None
                              for k in ("alpha", "beta", "r2", "d_peak")})
        wandb.finish()
    print(f"wrote {out}/: config.json, results.json, goodhart.png, summary.json, "
          f"{', '.join(f'seed{s}/' for s in seeds)}  ({wall_s:.0f} s)")
    print(f"next: python -m workbook evaluate {out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
