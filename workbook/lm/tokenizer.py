"""A character tokenizer with a fixed alphabet, and batch padding.

The vocabulary is a constant, not something learned from data, so a checkpoint
stays valid whatever corpus seed produced it. Ids 0, 1, 2 are the special
tokens PAD, BOS and EOS; PAD is deliberately *not* EOS, so "this row has ended"
(an EOS the model sampled and must be scored for) can never be confused with
"this slot is empty" (padding the loss and attention must ignore).
"""

from __future__ import annotations

from typing import Literal, Sequence

import torch
from jaxtyping import Int
from torch import Tensor

# Lowercase letters, space and simple punctuation: 38 symbols with the specials.
# Changing it changes every token id, so it is part of the checkpoint format.
ALPHABET = " abcdefghijklmnopqrstuvwxyz.,!?'-:;"
SPECIALS = ("<pad>", "<bos>", "<eos>")


class CharTokenizer:
    """Maps text to ids one character at a time; ids 0/1/2 are PAD/BOS/EOS."""

    def __init__(self, alphabet: str = ALPHABET):
        if len(set(alphabet)) != len(alphabet):
            raise ValueError("alphabet has repeated characters")
        self.alphabet = alphabet
        self.pad_id, self.bos_id, self.eos_id = 0, 1, 2
        self._stoi = {ch: i + len(SPECIALS) for i, ch in enumerate(alphabet)}
        self._itos = {i: ch for ch, i in self._stoi.items()}

    @property
    def vocab_size(self) -> int:
        return len(SPECIALS) + len(self.alphabet)

    def encode(self, text: str, *, add_bos: bool = True, add_eos: bool = False) -> list[int]:
        """Ids of `text`, optionally wrapped in BOS ... EOS. Unknown characters raise ValueError."""
        try:
            ids = [self._stoi[ch] for ch in text]
        except KeyError as e:
            bad = e.args[0]
            raise ValueError(
                f"character {bad!r} (at index {text.index(bad)} of {text[:40]!r}) is not in the "
                f"tokenizer alphabet {self.alphabet!r}; lowercase the text and drop other symbols"
            ) from None
        return ([self.bos_id] if add_bos else []) + ids + ([self.eos_id] if add_eos else [])

    def decode(self, ids: Sequence[int] | Tensor, *, skip_special: bool = True) -> str:
        """Text of `ids` (a list or 1-D tensor). Specials are dropped, or shown as <pad>/<bos>/<eos>."""
        if isinstance(ids, Tensor):
            if ids.dim() != 1:
                raise ValueError(f"decode takes one sequence (a 1-D tensor), got shape {tuple(ids.shape)}")
            ids = ids.tolist()
        out = []
        for i in ids:
            i = int(i)
            if i < len(SPECIALS):
                if i < 0:
                    raise ValueError(f"token id {i} is negative")
                if not skip_special:
                    out.append(SPECIALS[i])
            elif i in self._itos:
                out.append(self._itos[i])
            else:
                raise ValueError(f"token id {i} is out of range for vocab_size {self.vocab_size}")
        return "".join(out)

    def to_dict(self) -> dict:
        """Plain-dict form for checkpoints (loadable with torch.load(weights_only=True))."""
        return {"kind": "char", "alphabet": self.alphabet}

    @classmethod
    def from_dict(cls, d: dict) -> CharTokenizer:
        if d.get("kind") != "char":
            raise ValueError(f"not a CharTokenizer dict: {d!r}")
        return cls(d["alphabet"])

    def __repr__(self) -> str:
        return f"CharTokenizer(vocab_size={self.vocab_size})"


def pad_batch(
    seqs: Sequence[Sequence[int] | Tensor],
    *,
    side: Literal["left", "right"],
    pad_id: int,
) -> tuple[Int[Tensor, "batch seq"], Int[Tensor, "batch seq"]]:
    """Stack variable-length sequences into `(input_ids, attention_mask)`, both int64 [B, T].

    `side="left"` right-aligns the sequences (queries for generation: every row's
    next token goes in the same column); `side="right"` left-aligns them
    (training and scoring). The mask is 1 on real tokens and 0 on padding.
    """
    if side not in ("left", "right"):
        raise ValueError(f"side must be 'left' or 'right', got {side!r}")
    if len(seqs) == 0:
        raise ValueError("pad_batch needs at least one sequence")
    device = seqs[0].device if isinstance(seqs[0], Tensor) else torch.device("cpu")
    rows = []
    for i, s in enumerate(seqs):
        t = s.detach().to(device) if isinstance(s, Tensor) else torch.tensor(list(s), dtype=torch.long, device=device)
        if t.dim() != 1:
            raise ValueError(f"sequence {i} must be 1-D, got shape {tuple(t.shape)}")
        if t.dtype.is_floating_point or t.dtype == torch.bool:
            raise ValueError(f"sequence {i} must hold integer token ids, got dtype {t.dtype}")
        rows.append(t.long())
    T = max(len(r) for r in rows)
    ids = torch.full((len(rows), T), pad_id, dtype=torch.long, device=device)
    mask = torch.zeros((len(rows), T), dtype=torch.long, device=device)
    for i, r in enumerate(rows):
        n = len(r)
        if n == 0:
            continue
        if side == "left":
            ids[i, T - n :], mask[i, T - n :] = r, 1
        else:
            ids[i, :n], mask[i, :n] = r, 1
    return ids, mask
