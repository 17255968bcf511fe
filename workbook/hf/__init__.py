"""Part 3 (and Part 5) on real pretrained language models: any Hugging Face ``AutoModelForCausalLM``.

    pip install -e ".[hf]"        # transformers + tokenizers (imported only on this path)
    python -m workbook rlhf --impl solutions --model gpt2 --prompts imdb --reward lvwerra/distilbert-imdb --device cuda
    python -m workbook rlhf --impl solutions --model PATH      # a save_pretrained folder, offline

- ``model.py``: :class:`CausalLM` / :class:`HFTokenizer`, the adapter that gives a Hugging Face
  model and tokenizer the interface of our review GPT, so the exercises run on it unchanged.
- ``tasks.py``: IMDB or file prompts, and a sentiment classifier as the reward.
- ``tiny.py``: a tokenizer trained on our review corpus and a random GPT-2, built without a
  download (the tests and ``benchmarks/hf_gpu.py`` use them).

This file imports nothing heavy: ``python -m workbook rlhf`` without ``--model`` never loads
transformers.
"""

from __future__ import annotations

import dataclasses

# The classic TRL task (examples/notebooks/gpt2-sentiment): GPT-2 continues IMDB review openers,
# a DistilBERT sentiment classifier scores them. These replace our defaults, which are tuned
# for the 0.8M-parameter review GPT, unless the option is given on the command line.
IMDB_PRESET = {
    "learning_rate": 1.41e-5,
    "batch_size": 64,
    "mini_batch_size": 16,
    "ppo_epochs": 4,
    "kl_coef": 0.2,
    "kl_target": 6.0,
    "kl_horizon": 10_000.0,
    "ent_coef": 0.0,
    "max_new_tokens": 16,
    "iterations": 100,
    "eval_samples": 128,
}


def apply_preset(args, argv: list[str]):
    """``args`` with :data:`IMDB_PRESET` filled in when ``--prompts imdb``, except options ``argv`` sets."""
    if args.prompts != "imdb":
        return args
    given = {a[2:].split("=")[0].replace("-", "_") for a in argv if a.startswith("--")}
    return dataclasses.replace(args, **{k: v for k, v in IMDB_PRESET.items() if k not in given})


def prepare(args):
    """(model, tokenizer, prompt source, scorer) for ``python -m workbook rlhf``, loaded before a run writes anything.

    Without ``--model`` the model and tokenizer are None (the review GPT is loaded by ``train``)
    and only ``--prompts reviews`` makes sense. Raises :class:`workbook.runs.ConfigError`
    naming the option that could not be loaded.
    """
    from workbook.runs import ConfigError
    from workbook.rlhf.data import REVIEW_PROMPTS
    from workbook.rlhf.rewards import make_scorer

    model = tok = None
    if args.model:
        try:
            import transformers  # noqa: F401
        except ImportError:
            raise ConfigError("--model", "Hugging Face models need the hf extra: pip install -e '.[hf]'") from None
        from workbook.hf.model import load_causal_lm

        model, tok = load_causal_lm(args.model, device=args.device)
    if args.prompts == "reviews":
        prompts = REVIEW_PROMPTS
    elif model is None:
        raise ConfigError("--prompts", f"--prompts {args.prompts} needs --model (the review GPT only knows its own openers)")
    else:
        from workbook.hf.tasks import load_prompts

        prompts = load_prompts(args.prompts, tok)
    return model, tok, prompts, make_scorer(args.reward, tok, impl=args.impl, quiet=args.quiet, device=args.device)
