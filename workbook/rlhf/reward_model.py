"""Train the learned reward model: a GPT trunk + scalar head, Bradley–Terry loss on preference pairs.

    python -m workbook.rlhf.reward_model --impl solutions # reference code, cached
    python -m workbook.rlhf.reward_model                  # your RewardModel and preference_loss (default)

The pairs come from the corpus generator (``preference_pairs``): the same opener continued
positively (chosen) and negatively or neutrally (rejected) — labels true by construction,
standing in for a human who prefers positive reviews. The trunk starts from the pretrained
review GPT, so the model already "reads"; training teaches the head (and adjusts the trunk)
to score. Prints held-out pair accuracy (how often r(chosen) > r(rejected) on pairs never
seen in training) and caches the model next to the pretrained checkpoint.
"""

from __future__ import annotations

import copy
import hashlib
import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

import torch
from torch import Tensor

from workbook.cli import add_dataclass_arguments, dataclass_from_args, make_parser, require_choices
from workbook.lm.corpus import preference_pairs
from workbook.lm.model import GPT, GPTConfig
from workbook.lm.pretrain import PretrainArgs, load_or_pretrain
from workbook.lm.tokenizer import CharTokenizer, pad_batch
from workbook.rlhf.data import load_part3
from workbook.runs import command


@dataclass(frozen=True)
class RewardModelArgs:
    impl: Literal["exercises", "solutions"] = "exercises"
    """Whose RewardModel and preference_loss to train with: exercises or solutions."""
    seed: int = 0
    """Seeds the pairs, the head and the batch order."""
    n_pairs: int = 4_000
    """Training preference pairs."""
    n_heldout: int = 500
    """Held-out pairs for the accuracy (a different seed)."""
    steps: int = 250
    """Optimizer steps."""
    batch_size: int = 32
    """Pairs per step."""
    lr: float = 3e-4
    """Adam learning rate."""
    threads: int = 1
    """torch threads; not part of the cache key."""

    def cache_key(self, pretrain: PretrainArgs) -> str:
        d = {k: v for k, v in asdict(self).items() if k != "threads"}
        d["pretrained"] = pretrain.cache_key()
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]


def encode_texts(texts: list[str], tok: CharTokenizer) -> tuple[Tensor, Tensor]:
    """BOS + text + EOS, right-padded: the reward is read at the EOS, which has seen everything."""
    return pad_batch([tok.encode(t, add_bos=True, add_eos=True) for t in texts], side="right", pad_id=tok.pad_id)


@torch.no_grad()
def score_texts(model, tok: CharTokenizer, texts: list[str], chunk: int = 128) -> Tensor:
    model.eval()
    out = [model(*encode_texts(texts[i:i + chunk], tok)) for i in range(0, len(texts), chunk)]
    return torch.cat(out)


def pair_accuracy(model, tok: CharTokenizer, pairs: list[tuple[str, str, str]]) -> float:
    chosen = score_texts(model, tok, [p + c for p, c, _ in pairs])
    rejected = score_texts(model, tok, [p + r for p, _, r in pairs])
    return (chosen > rejected).float().mean().item()


def train_reward_model(args: RewardModelArgs, lm: GPT, tok: CharTokenizer, *, progress: bool = True):
    """Returns (reward model in eval mode, stats) — the trunk is a copy of ``lm``."""
    part3 = load_part3(args.impl)
    old_threads = torch.get_num_threads()
    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(args.seed)
            model = part3.RewardModel(copy.deepcopy(lm))
            train_pairs = preference_pairs(args.n_pairs, seed=args.seed)
            heldout = preference_pairs(args.n_heldout, seed=args.seed + 999_983)
            accuracy_before = pair_accuracy(model, tok, heldout)
            opt = torch.optim.Adam(model.parameters(), lr=args.lr)
            order = torch.Generator().manual_seed(args.seed)
            losses = []
            model.train()
            for step in range(args.steps):
                idx = torch.randint(len(train_pairs), (args.batch_size,), generator=order).tolist()
                batch = [train_pairs[i] for i in idx]
                r_chosen = model(*encode_texts([p + c for p, c, _ in batch], tok))
                r_rejected = model(*encode_texts([p + r for p, _, r in batch], tok))
                loss = part3.preference_loss(r_chosen, r_rejected)
                opt.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                losses.append(loss.item())
                if progress and ((step + 1) % 50 == 0 or step == 0):
                    print(f"step {step + 1:4d}/{args.steps}  BT loss {loss.item():.4f}  {time.perf_counter() - t0:5.1f}s", flush=True)
            model.eval()
            accuracy = pair_accuracy(model, tok, heldout)
            # Standardise the scale once, on held-out texts, so a reward of ±1 means what it
            # means for VADER and the KL coefficient carries over between the two rewards.
            all_scores = score_texts(model, tok, [p + c for p, c, _ in heldout] + [p + r for p, _, r in heldout])
    finally:
        torch.set_num_threads(old_threads)
    stats = {"heldout_accuracy": accuracy, "heldout_accuracy_before": accuracy_before,
             "final_loss": sum(losses[-20:]) / len(losses[-20:]), "wall_s": time.perf_counter() - t0,
             "score_mean": all_scores.mean().item(), "score_std": all_scores.std().item()}
    return model, stats


def _path(args: RewardModelArgs, pretrain: PretrainArgs) -> Path:
    return Path(pretrain.cache_dir) / f"reward-model-{args.cache_key(pretrain)}.pt"


def save_reward_model(path: Path, model, stats: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    blob = {"config": asdict(model.lm.config), "state_dict": {k: v.detach().cpu() for k, v in model.state_dict().items()},
            "stats": stats}
    tmp = path.with_suffix(f".tmp{id(blob)}")
    torch.save(blob, tmp)
    tmp.replace(path)


def load_or_train_reward_model(args: RewardModelArgs = RewardModelArgs(), pretrain: PretrainArgs | None = None, *,
                               progress: bool = True):
    """(reward model, tokenizer, stats): from the cache, else trained now on the pretrained trunk."""
    pretrain = pretrain or PretrainArgs()
    path = _path(args, pretrain)
    part3 = load_part3(args.impl)
    tok = CharTokenizer()
    if path.exists():
        blob = torch.load(path, weights_only=True)
        model = part3.RewardModel(GPT(GPTConfig(**blob["config"])))
        model.load_state_dict(blob["state_dict"])
        return model.eval(), tok, blob["stats"]
    lm, tok = load_or_pretrain(pretrain, progress=progress)
    if progress:
        print(f"training the reward model (once; cached at {path})", flush=True)
    model, stats = train_reward_model(args, lm, tok, progress=progress)
    save_reward_model(path, model, stats)
    return model, tok, stats


class RewardModelScorer:
    """Callable like VaderScorer: texts -> standardised learned rewards (float32 tensor)."""

    def __init__(self, model, tok: CharTokenizer, stats: dict):
        self.model, self.tok = model, tok
        self.mean, self.std = stats["score_mean"], max(stats["score_std"], 1e-6)

    def __call__(self, texts: list[str]) -> Tensor:
        return (score_texts(self.model, self.tok, list(texts)) - self.mean) / self.std


@command
def main(argv: list[str] | None = None) -> int:
    parser = make_parser("python -m workbook.rlhf.reward_model", __doc__.split("\n\n")[0])
    add_dataclass_arguments(parser, RewardModelArgs)
    parser.add_argument("--force", action="store_true", help="retrain even if a cached model exists")
    ns = parser.parse_args(argv)
    force = ns.force
    args = dataclass_from_args(RewardModelArgs, ns)
    require_choices(args)
    pretrain = PretrainArgs()
    path = _path(args, pretrain)
    if force or not path.exists():
        lm, tok = load_or_pretrain(pretrain)
        model, stats = train_reward_model(args, lm, tok)
        save_reward_model(path, model, stats)
    else:
        model, tok, stats = load_or_train_reward_model(args, pretrain)
    print(f"held-out pair accuracy {stats['heldout_accuracy']:.3f} (untrained head: {stats['heldout_accuracy_before']:.3f}), "
          f"final BT loss {stats['final_loss']:.4f}, {stats['wall_s']:.0f}s; cached at {path}")
    scorer = RewardModelScorer(model, tok, stats)
    for prompt, chosen, rejected in preference_pairs(3, seed=args.seed + 4242):
        for text in (prompt + chosen, prompt + rejected):
            print(f"  {scorer([text]).item():+.2f}  {text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
