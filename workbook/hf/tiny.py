"""Hugging Face models built here, with no download: a BPE tokenizer trained on our review corpus
and a randomly initialised GPT-2 of any size, saved with ``save_pretrained``.

The tests load them back through ``--model PATH`` exactly as a user's folder would be loaded;
``benchmarks/hf_gpu.py`` uses a GPT-2-small-sized one to time a PPO iteration on a GPU.
"""

from __future__ import annotations

from pathlib import Path

import torch

from workbook.lm.corpus import generate_reviews

EOS, PAD = "<|endoftext|>", "<pad>"


def train_review_tokenizer(vocab_size: int = 512, n_reviews: int = 2_000, seed: int = 0, pad: bool = True):
    """A byte-level BPE tokenizer (GPT-2's scheme) learned from generated reviews.

    ``<|endoftext|>`` is BOS and EOS, as in GPT-2; ``<pad>`` is a separate PAD (left out with
    ``pad=False``, as GPT-2 ships). Returns a ``transformers`` fast tokenizer.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOS, PAD] if pad else [EOS],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    bpe.train_from_iterator((r.text for r in generate_reviews(n_reviews, seed=seed)), trainer)
    return PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token=EOS, eos_token=EOS, pad_token=PAD if pad else None)


def random_gpt2(tokenizer, *, n_layer: int = 2, n_embd: int = 64, n_head: int = 2, n_positions: int = 128,
                vocab_size: int | None = None, seed: int = 0):
    """A ``GPT2LMHeadModel`` with random weights, its vocabulary sized for ``tokenizer`` unless ``vocab_size`` is given."""
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(vocab_size=vocab_size or len(tokenizer), n_positions=n_positions, n_embd=n_embd, n_layer=n_layer, n_head=n_head,
                        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                        pad_token_id=tokenizer.pad_token_id)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return GPT2LMHeadModel(config)


def save_tiny_gpt2(path: str | Path, **sizes) -> Path:
    """Train the tokenizer, build a random GPT-2 (``sizes`` as in :func:`random_gpt2`), save both to ``path``."""
    from workbook.hf.model import quiet_hub

    quiet_hub()
    tokenizer = train_review_tokenizer()
    model = random_gpt2(tokenizer, **sizes)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return Path(path)
