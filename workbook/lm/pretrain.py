"""Pretrain the character GPT on generated reviews (next-token prediction), with a cache.

Part 3 starts from a model that already writes fluent reviews of every
sentiment; RLHF then only has to *shift* what it says. This module trains that
model from scratch on the CPU in under a minute, and `load_or_pretrain`
keeps the result under a cache directory keyed by a hash of the settings, so
it is trained once per machine and configuration. The default model is not
trained here at all: it ships with the workbook (``base_models/``, checked
against its sha256), because the same recipe on another CPU gives another model.

    python -m workbook pretrain                    # the default model: it ships with the workbook (base_models/)
    python -m workbook pretrain --overwrite        # rebuild it here (into the cache, which is then read first)
    python -m workbook pretrain --seeds 0 1 2      # one model per seed (each cached)
    python -m workbook pretrain --steps 200 --out /tmp/lm.pt
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from jaxtyping import Int
from torch import Tensor

from workbook.cli import (add_dataclass_arguments, add_seeds_option, dataclass_from_args, make_parser, require, require_at_least,
                          require_positive, require_unique_seeds)
from workbook.lm.corpus import MAX_REVIEW_CHARS, generate_reviews, review_prompts
from workbook.lm.model import GPT, GPTConfig, load_checkpoint, sample_texts, save_checkpoint
from workbook.lm.tokenizer import CharTokenizer
from workbook.runs import check_can_create, command

# Bump when the corpus, tokenizer or training code changes what a given set of
# arguments produces, so stale cached checkpoints are not reused.
CACHE_VERSION = 3  # 3: the default model ships (base_models/); older caches were machine-made


def default_cache_dir() -> str:
    """$WORKBOOK_CACHE if set, else ~/.cache/ppo-rlhf-workbook."""
    return os.environ.get("WORKBOOK_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "ppo-rlhf-workbook")


@dataclass(frozen=True)
class PretrainArgs:
    seed: int = 0
    """Seeds the corpus, the initial weights and the batch order."""
    n_reviews: int = 60_000
    """Training reviews generated (about 61 characters each)."""
    n_heldout: int = 1_000
    """Held-out reviews (a different seed) for the final loss."""
    steps: int = 1500
    """Optimizer steps."""
    batch_size: int = 16
    """Reviews per step (small batches, more steps: the most learning per CPU second)."""
    lr: float = 5e-3
    """Peak learning rate (AdamW)."""
    min_lr_frac: float = 0.05
    """The cosine decay ends at lr * min_lr_frac."""
    warmup: int = 40
    """Steps of linear warm-up from 0 to lr."""
    weight_decay: float = 0.01
    """AdamW weight decay on matrices (not on biases, norms or embeddings)."""
    grad_clip: float = 1.0
    """Clip the global gradient norm to this (0 = off)."""
    block_size: int = 128
    """Context length; must hold BOS + the longest review + EOS."""
    n_layer: int = 3
    """Transformer blocks."""
    n_head: int = 4
    """Attention heads per block."""
    d_model: int = 96
    """Residual stream width. 3 blocks of width 96 (0.35M parameters) reach the same held-out loss
    as 4 of width 128 (0.8M) in these 1500 steps, at less than half the cost of every forward pass:
    pretraining takes under a minute and each RLHF iteration about half as long."""
    dropout: float = 0.0
    """Dropout while training (the corpus is big and training short: none needed)."""
    threads: int = 1
    """Torch threads for training (2: ~1.6x faster on an idle 2-core CPU, far slower on a busy one); not in the cache key."""
    log_every: int = 100
    """Print the training loss every this many steps (when progress is on)."""
    cache_dir: str = field(default_factory=default_cache_dir)
    """Where load_or_pretrain keeps checkpoints; not part of the cache key."""

    def model_config(self) -> GPTConfig:
        return GPTConfig(
            vocab_size=CharTokenizer().vocab_size, block_size=self.block_size, n_layer=self.n_layer,
            n_head=self.n_head, d_model=self.d_model, dropout=self.dropout,
        )

    def cache_key(self) -> str:
        """Hash of everything that changes the trained weights."""
        d = {k: v for k, v in asdict(self).items() if k not in _NOT_IN_KEY}
        d["cache_version"] = CACHE_VERSION
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]


_NOT_IN_KEY = ("threads", "log_every", "cache_dir")

# For tests: ~6k parameters, trains in about a second. Its cache_dir was read
# from the environment at import; use dataclasses.replace(TINY_ARGS, cache_dir=...).
TINY_ARGS = PretrainArgs(
    n_reviews=2_000, n_heldout=200, steps=60, batch_size=16, lr=1e-2, warmup=5,
    block_size=MAX_REVIEW_CHARS + 2, n_layer=1, n_head=2, d_model=16, threads=1, log_every=20,
)


def encode_reviews(texts: list[str], tokenizer: CharTokenizer) -> Int[Tensor, "n seq"]:
    """Each text as BOS + text + EOS, right-padded with PAD into one tensor.

    What ``pad_batch(..., side="right")`` returns, filled in one step: a boolean mask of the real
    slots, in row-major order, takes the concatenated ids (60k reviews: about half the time).
    """
    rows = [tokenizer.encode(t, add_bos=True, add_eos=True) for t in texts]
    lengths = torch.tensor([len(r) for r in rows])
    real = torch.arange(int(lengths.max())) < lengths[:, None]
    ids = torch.full(real.shape, tokenizer.pad_id, dtype=torch.long)
    ids[real] = torch.tensor([i for r in rows for i in r], dtype=torch.long)
    return ids


def lm_loss(model: GPT, batch: Int[Tensor, "batch seq"], pad_id: int) -> Tensor:
    """Mean next-token cross-entropy over real targets of right-padded `batch`.

    No attention mask is needed: with right padding, causal attention already
    keeps every real token from seeing the pads after it, and positions start
    at 0 in every row. Targets that are PAD are ignored, so the model learns to
    emit EOS but is never trained on padding.
    """
    batch = batch[:, : int((batch != pad_id).sum(dim=1).max())]  # drop all-pad columns
    inputs, targets = batch[:, :-1], batch[:, 1:]
    logits = model(inputs)
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=pad_id)


@torch.no_grad()
def evaluate(model: GPT, data: Int[Tensor, "n seq"], pad_id: int, batch_size: int = 256) -> float:
    """Loss per real target token over all of `data`."""
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    data = data[torch.argsort((data != pad_id).sum(dim=1))]  # similar lengths together: less padding
    for i in range(0, len(data), batch_size):
        batch = data[i : i + batch_size]
        n = int((batch[:, 1:] != pad_id).sum())
        total += lm_loss(model, batch, pad_id).item() * n
        count += n
    model.train(was_training)
    return total / max(count, 1)


def _lr_at(step: int, args: PretrainArgs) -> float:
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    frac = (step - args.warmup) / max(1, args.steps - args.warmup)
    return args.lr * (args.min_lr_frac + (1 - args.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * frac)))


def pretrain(
    args: PretrainArgs,
    *,
    progress: bool = True,
    corpus: tuple[list[str], list[str]] | None = None,
    tokenizer: CharTokenizer | None = None,
) -> tuple[GPT, CharTokenizer, dict]:
    """Train a fresh GPT on `args.n_reviews` generated reviews; returns (model in eval mode, tokenizer, stats).

    Another corpus: pass ``corpus=(train_texts, heldout_texts)`` (then ``n_reviews`` and
    ``n_heldout`` are not read) and the ``tokenizer`` whose alphabet covers it (the model's
    vocabulary is the tokenizer's); Part 7's arithmetic model is trained this way.

    `stats` holds plain data: params, wall_s, threads, final_loss (mean training
    loss of the last 20 steps), heldout_loss, and the curve as [step, loss]
    pairs. Deterministic for a given `args` and thread count; the global torch
    RNG and thread setting are restored afterwards.
    """
    tok = CharTokenizer() if tokenizer is None else tokenizer
    cfg = dataclasses.replace(args.model_config(), vocab_size=tok.vocab_size)
    longest = MAX_REVIEW_CHARS if corpus is None else max(len(t) for t in corpus[0] + corpus[1])
    if cfg.block_size < longest + 2:
        raise ValueError(f"block_size={cfg.block_size} cannot hold BOS + a {longest}-char text + EOS")
    if args.steps < 1 or args.batch_size < 1 or args.n_reviews < 1:
        raise ValueError("steps, batch_size and n_reviews must be positive")

    t0 = time.perf_counter()
    if corpus is None:
        corpus = ([r.text for r in generate_reviews(args.n_reviews, args.seed)],
                  [r.text for r in generate_reviews(args.n_heldout, args.seed + 1_000_003)])
    train_data, heldout = encode_reviews(corpus[0], tok), encode_reviews(corpus[1], tok)

    old_threads = torch.get_num_threads()
    torch.set_num_threads(args.threads)
    try:
        with torch.random.fork_rng(devices=[]):  # leave the caller's RNG alone
            torch.manual_seed(args.seed)
            model = GPT(cfg)
            model.train()
            decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and not n.startswith(("wte", "wpe"))]
            no_decay = [p for n, p in model.named_parameters() if not (p.dim() >= 2 and not n.startswith(("wte", "wpe")))]
            opt = torch.optim.AdamW(
                [{"params": decay, "weight_decay": args.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
                lr=args.lr, betas=(0.9, 0.98),
            )
            order = torch.Generator().manual_seed(args.seed)
            # Batches of similar length: reviews run 20-120 characters, so a
            # random batch would be about half padding. Sorting by length and
            # drawing each batch from a narrow window of the sorted list
            # roughly halves the cost of a step without changing what is learned.
            by_length = torch.argsort((train_data != tok.pad_id).sum(dim=1), stable=True)
            window = min(len(train_data), 8 * args.batch_size)
            curve = []
            for step in range(args.steps):
                for g in opt.param_groups:
                    g["lr"] = _lr_at(step, args)
                start = int(torch.randint(len(train_data) - window + 1, (1,), generator=order))
                idx = by_length[start + torch.randint(window, (args.batch_size,), generator=order)]
                loss = lm_loss(model, train_data[idx], tok.pad_id)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                if args.grad_clip > 0:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
                opt.step()
                curve.append([step, loss.item()])
                if progress and ((step + 1) % args.log_every == 0 or step == 0):
                    print(f"step {step + 1:5d}/{args.steps}  loss {loss.item():.4f}  "
                          f"lr {_lr_at(step, args):.2e}  {time.perf_counter() - t0:6.1f}s", flush=True)
            model.eval()
            heldout_loss = evaluate(model, heldout, tok.pad_id)
    finally:
        torch.set_num_threads(old_threads)
    last = [loss for _, loss in curve[-20:]]
    stats = {
        "params": model.num_params(),
        "wall_s": time.perf_counter() - t0,
        "threads": args.threads,
        "final_loss": sum(last) / len(last),
        "heldout_loss": heldout_loss,
        "curve": curve,
    }
    if progress:
        print(f"held-out loss {heldout_loss:.4f}  ({stats['params']:,} params, {stats['wall_s']:.1f}s)", flush=True)
    return model, tok, stats


def checkpoint_path(args: PretrainArgs) -> Path:
    """Where `load_or_pretrain` keeps the checkpoint for `args`."""
    return Path(args.cache_dir) / f"pretrained-{args.cache_key()}.pt"


def load_or_pretrain(args: PretrainArgs | None = None, *, progress: bool = True) -> tuple[GPT, CharTokenizer]:
    """The pretrained model for `args` (default: PretrainArgs()): from the cache if there, else trained now and cached."""
    args = PretrainArgs() if args is None else args

    def train() -> tuple[GPT, CharTokenizer, dict]:
        model, tok, stats = pretrain(args, progress=progress)
        return model, tok, {"args": _plain_args(args), "stats": stats}

    return cached_model(checkpoint_path(args), train, "the review model", progress=progress,
                        shipped=shipped_checkpoint("review", args.cache_key()))


BASE_MODELS_DIR = Path(__file__).resolve().parent / "base_models"
"""The base models that ship with the workbook (``MANIFEST.json`` there: file, sha256, cache key, how built)."""


def shipped_base_models() -> dict[str, dict]:
    """The manifest of the shipped base models: name -> {"file", "sha256", "cache_key", ...}."""
    manifest = BASE_MODELS_DIR / "MANIFEST.json"
    return json.loads(manifest.read_text()) if manifest.exists() else {}


def file_sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def shipped_checkpoint(name: str, cache_key: str) -> Path | None:
    """The shipped base model ``name`` if it was built from the recipe whose cache key is ``cache_key``, else None.

    Why ship weights at all: pretraining is chaotic. The same code and seed on another CPU (or under
    another ``ATEN_CPU_CAPABILITY``) rounds differently in its last bit, and 2,400 steps later that is
    another model with other mistakes (docs/base_models.md measures it). A shipped file is the same
    model everywhere; its checksum is verified on every load.
    """
    entry = shipped_base_models().get(name)
    if entry is None or entry["cache_key"] != cache_key:
        return None
    path = BASE_MODELS_DIR / entry["file"]
    if file_sha256(path) != entry["sha256"]:
        raise RuntimeError(f"the shipped base model {path} does not match its checksum in MANIFEST.json "
                           "(a damaged install?): reinstall the workbook, or rebuild it with python -m workbook pretrain")
    return path


def cached_model(path: Path, train, what: str, *, progress: bool = True,
                 shipped: Path | None = None) -> tuple[GPT, CharTokenizer]:
    """The checkpoint at ``path``; else the ``shipped`` one; else ``train() -> (model, tok, extra)`` run once and saved at ``path``.

    The cache comes first so that a model rebuilt on purpose (``python -m workbook pretrain
    --overwrite``) is the one used; delete it to go back to the shipped one.
    """
    if path.exists():
        try:
            model, tok, _ = load_checkpoint(path)
            return model, tok
        except Exception as e:  # a corrupt or foreign file: retrain rather than fail
            print(f"ignoring unreadable checkpoint {path}: {e}", file=sys.stderr)
    if shipped is not None:
        model, tok, _ = load_checkpoint(shipped)
        return model, tok
    if progress:
        print(f"pretraining {what} (once; cached at {path})", flush=True)
    model, tok, extra = train()
    save_checkpoint(path, model, tok, extra=extra)
    return model, tok


def _plain_args(args: PretrainArgs) -> dict:
    return {k: v for k, v in asdict(args).items() if k != "cache_dir"}


def validate(args: PretrainArgs) -> None:
    """Raise ConfigError for the first bad setting."""
    for name in ("n_reviews", "n_heldout", "steps", "batch_size", "n_layer", "n_head", "d_model", "threads", "log_every"):
        require_at_least(f"--{name.replace('_', '-')}", getattr(args, name), 1)
    for name in ("warmup", "weight_decay", "grad_clip", "dropout", "min_lr_frac"):
        require_at_least(f"--{name.replace('_', '-')}", getattr(args, name), 0)
    require_positive("--lr", args.lr)
    require(args.dropout < 1, "--dropout", f"must be < 1, got {args.dropout}")
    require(args.d_model % args.n_head == 0, "--n-head", f"{args.n_head} does not divide --d-model {args.d_model}")
    require(args.block_size >= MAX_REVIEW_CHARS + 2, "--block-size",
            f"must hold BOS + the longest review ({MAX_REVIEW_CHARS}) + EOS, got {args.block_size}")


@command
def main(argv: list[str] | None = None) -> int:
    parser = make_parser("python -m workbook pretrain", __doc__.split("\n\n")[0])
    add_dataclass_arguments(parser, PretrainArgs, skip=("seed",))
    add_seeds_option(parser, [PretrainArgs.seed], "one model per seed")
    parser.add_argument("--out", default=None,
                        help="train and save here (default: the cache, where load_or_pretrain finds it); one seed only")
    parser.add_argument("--overwrite", action="store_true", help="retrain even if the cache already holds this model")
    parser.add_argument("--samples", type=int, default=8, help="sample generations printed at the end")
    ns = parser.parse_args(argv)
    require_unique_seeds(ns.seeds)
    require(ns.out is None or len(ns.seeds) == 1, "--out", "names one file: give one seed")
    all_args = [dataclass_from_args(PretrainArgs, ns, seed=seed) for seed in ns.seeds]
    validate(all_args[0])
    require_at_least("--samples", ns.samples, 0)
    if ns.out:
        check_can_create(ns.out, "--out")
    for args in all_args:
        pretrain_one(args, ns)
    return 0


def pretrain_one(args: PretrainArgs, ns) -> None:
    """Train (or read from the cache) one model, print its losses and a few samples."""
    if len(ns.seeds) > 1:
        print(f"== seed {args.seed} ==", flush=True)
    cached = checkpoint_path(args)
    shipped = shipped_checkpoint("review", args.cache_key())
    if ns.out is None and not ns.overwrite and cached.exists():
        model, tok, extra = load_checkpoint(cached)
        stats = extra["stats"]
        print(f"using the cached model {cached} (--overwrite retrains)")
    elif ns.out is None and not ns.overwrite and shipped is not None:
        model, tok, extra = load_checkpoint(shipped)
        stats = extra["stats"]
        print(f"using the model that ships with the workbook, {shipped} (the same on every machine); --overwrite rebuilds "
              f"it here into {cached}, which is then used instead (pretraining is chaotic: docs/base_models.md)")
    else:
        model, tok, stats = pretrain(args, progress=True)
        out = Path(ns.out) if ns.out else cached
        save_checkpoint(out, model, tok, extra={"args": _plain_args(args), "stats": stats})
        print(f"saved {out}")
    print(f"final train loss {stats['final_loss']:.4f}  held-out {stats['heldout_loss']:.4f}  "
          f"wall {stats['wall_s']:.1f}s  params {stats['params']:,}  threads {stats['threads']}")
    if ns.samples:
        prompts = review_prompts(ns.samples, seed=args.seed + 7)
        for text in sample_texts(model, tok, prompts, max_new_tokens=args.block_size, temperature=1.0, seed=args.seed):
            print("  " + text)


if __name__ == "__main__":
    sys.exit(main())
