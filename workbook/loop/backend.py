"""The model the loop trains: the tiny review GPT (default) or any Hugging Face causal LM (``--model``).

A backend does three things, each in one place:

- ``check(args)``: the options that name the model are loadable in principle — checked before
  anything is loaded or written (``--model runs`` is a folder without a saved model; a path
  that does not exist; transformers missing), one line each;
- ``load(args, dp) -> (model, tok)``: the language model and its tokenizer, with the interface
  of ``workbook.lm.model.GPT`` / ``CharTokenizer`` (a Hugging Face model through the adapter
  ``workbook.hf.model.CausalLM``, so Parts 3 and 5 run on it unchanged);
- ``save(policy, tok, out_dir, args) -> name``: the trained policy, in a form ``load`` reads
  back (``policy.pt`` for the GPT, a ``save_pretrained`` folder ``policy/`` for ``--model``).

The tiny GPT comes from the pretraining cache (``python -m workbook pretrain``), pretrained now
if missing; under torchrun rank 0 fills the cache and the others read it. Its construction draws
from the run's seeded RNG (as it always has: the numbers of a seed depend on it); loading a
Hugging Face model does not.
"""

from __future__ import annotations

import re
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from workbook.runs import ConfigError

HUB_ID = re.compile(r"[\w.-]+(/[\w.-]+)?")


def save_policy(policy, tok, out_dir: Path, args) -> str:
    """Write the trained policy's LM under ``out_dir``; returns the name written."""
    if hasattr(policy.lm, "save_pretrained"):  # a Hugging Face model: its own format, loadable with --model
        policy.lm.save_pretrained(out_dir / "policy", tok)
        return "policy"
    from workbook.lm.model import save_checkpoint

    save_checkpoint(out_dir / "policy.pt", policy.lm, tok, extra={"args": asdict(args)})
    return "policy.pt"


class TinyGPT:
    """The review GPT of Part 3 (``workbook/lm``), pretrained once and cached."""

    name = "review GPT"

    def __init__(self, pretrain_args=None):
        self.pretrain_args = pretrain_args

    def check(self, args) -> None:
        pass

    def load(self, args, dp) -> tuple[Any, Any]:
        from workbook.lm.pretrain import PretrainArgs, load_or_pretrain

        with dp.main_first():  # rank 0 fills the cache, the others then read it
            return load_or_pretrain(self.pretrain_args or PretrainArgs(), progress=not args.quiet and dp.is_main)

    save = staticmethod(save_policy)


class HuggingFace:
    """Any ``AutoModelForCausalLM``: a hub name (``gpt2``) or a ``save_pretrained`` folder (needs the hf extra)."""

    def __init__(self, spec: str):
        self.spec = self.name = spec

    def check(self, args) -> None:
        check_model(self.spec)

    def load(self, args, dp) -> tuple[Any, Any]:
        from workbook.hf.model import load_causal_lm

        cuda = [torch.device(args.device)] if args.device.startswith("cuda") else []
        with dp.main_first(), torch.random.fork_rng(devices=cuda):  # a download once; no draw from the run's RNG
            return load_causal_lm(self.spec, device=args.device)

    save = staticmethod(save_policy)


def check_model(spec: str) -> None:
    """``--model`` names a save_pretrained folder or a hub id, and transformers is installed (nothing loaded)."""
    path = Path(spec).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ConfigError("--model", f"{spec!r} is a folder but holds no saved model (a save_pretrained folder has "
                                         "a config.json; a run trained with --model keeps its model in <run>/policy)")
    elif path.exists():
        raise ConfigError("--model", f"{spec!r} is a file; --model takes a save_pretrained folder or a hub name such as gpt2")
    elif spec.startswith(("/", ".", "~")) or not HUB_ID.fullmatch(spec):
        raise ConfigError("--model", f"{spec!r}: no such folder (and not a hub name such as gpt2 or owner/name)")
    try:
        import transformers  # noqa: F401
    except ImportError:
        raise ConfigError("--model", "Hugging Face models need the hf extra: pip install -e '.[hf]'") from None


def make_backend(args, pretrain_args=None):
    """The backend ``--model`` names: the review GPT without it, else a Hugging Face model."""
    return HuggingFace(args.model) if args.model else TinyGPT(pretrain_args)

