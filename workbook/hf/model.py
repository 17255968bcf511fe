"""Any Hugging Face causal LM behind the interface of our review GPT (``workbook.lm.model.GPT``).

Part 3's exercises were written against three things our GPT offers:

- ``lm(input_ids, attention_mask, return_hidden=True)`` → ``(logits, final hidden state)``
  (``GPTWithValueHead`` puts its value head on the hidden state; ``RewardModel`` reads it);
- ``lm.config.d_model`` / ``lm.config.block_size`` (width for the heads, context for the rollout);
- ``lm.generate(ids, mask, max_new_tokens=, eos_id=, pad_id=, temperature=, generator=)``
  → one response tensor per row, ending at its first EOS.

:class:`CausalLM` offers the same three on top of an ``AutoModelForCausalLM``, and
:class:`HFTokenizer` offers ``encode``/``decode``/``pad_id``/``eos_id`` on top of a Hugging Face
tokenizer, so ``GPTWithValueHead``, ``create_reference_model``, ``batched_forward_pass`` and
``PPOTrainer`` run on GPT-2 (or Llama, Qwen, ...) without a line changed. What it takes:

- **Positions from the mask.** A left-padded row's first real token must sit at position 0,
  as it would alone; we pass ``position_ids = cumsum(mask) − 1`` explicitly rather than trust
  each architecture's default (GPT-2's forward counts padding as positions).
- **PAD is not EOS.** GPT-2 ships without a pad token and the usual fix (``pad = eos``) makes a
  sampled EOS indistinguishable from padding. :func:`load_causal_lm` adds a ``<pad>`` token when
  the tokenizer has none (growing the embedding by one row), and the PAD logit is pushed to
  ``NEVER`` in every forward pass and suppressed in ``generate``: PAD is never content, and the
  distribution PPO scores is exactly the one the tokens were sampled from.
- **Sampling through the model's own ``generate``** (its KV cache, its architecture quirks),
  with every sampling knob set explicitly — top-k/top-p/repetition penalties off, whatever the
  checkpoint's ``generation_config`` says — and seeded from the caller's ``torch.Generator``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Sequence

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor, nn

from workbook.runs import ConfigError

# The PAD logit in every forward pass: exp(-1e4) is 0 in any float type, and unlike -inf it
# keeps entropy (p · logit) and the full KL finite; -1e4 / temperature stays finite too.
NEVER = -1e4


@dataclass(frozen=True)
class LMConfig:
    """What Part 3 reads from ``lm.config``."""

    d_model: int
    """Width of the final hidden state (the value head's input)."""
    block_size: int
    """Most tokens one row may hold (the model's position table)."""
    vocab_size: int
    """Width of the logits."""


class HFTokenizer:
    """A Hugging Face tokenizer with the small interface of ``workbook.lm.CharTokenizer``."""

    def __init__(self, tokenizer):
        if tokenizer.eos_token_id is None:
            raise ConfigError("--model", "the tokenizer has no EOS token; RLHF needs one to end a response")
        if tokenizer.pad_token_id is None or tokenizer.pad_token_id == tokenizer.eos_token_id:
            raise ConfigError("--model", "the tokenizer needs a PAD token distinct from EOS (load it with load_causal_lm)")
        self.hf = tokenizer
        self.pad_id, self.eos_id = tokenizer.pad_token_id, tokenizer.eos_token_id
        self.bos_id = tokenizer.bos_token_id

    @property
    def vocab_size(self) -> int:
        return len(self.hf)

    def encode(self, text: str, *, add_bos: bool = True, add_eos: bool = False) -> list[int]:
        """Ids of ``text``, optionally after BOS (when the tokenizer has one) and before EOS."""
        ids = self.hf(text, add_special_tokens=False)["input_ids"]
        bos = [self.bos_id] if add_bos and self.bos_id is not None else []
        return bos + list(ids) + ([self.eos_id] if add_eos else [])

    def decode(self, ids: Sequence[int] | Tensor, *, skip_special: bool = True) -> str:
        if isinstance(ids, Tensor):
            ids = ids.tolist()
        return self.hf.decode(list(ids), skip_special_tokens=skip_special)

    def __repr__(self) -> str:
        return f"HFTokenizer({type(self.hf).__name__}, vocab_size={self.vocab_size}, pad={self.pad_id}, eos={self.eos_id})"


class DecodeCache:
    """The Hugging Face model's past keys and values, and the attention mask of every token they hold."""

    def __init__(self):
        self.past = None
        self.mask: Tensor | None = None


class CausalLM(nn.Module):
    """An ``AutoModelForCausalLM`` (``self.hf``) that looks like our GPT to Part 3."""

    def __init__(self, hf_model: nn.Module, pad_id: int):
        super().__init__()
        self.hf = hf_model
        self.pad_id = int(pad_id)
        c = hf_model.config
        block = getattr(c, "n_positions", None) or getattr(c, "max_position_embeddings", None) or 2048
        self.config = LMConfig(d_model=c.hidden_size, block_size=int(block), vocab_size=c.vocab_size)
        if not 0 <= self.pad_id < self.config.vocab_size:
            raise ConfigError("--model", f"pad id {pad_id} is not a row of the model's embedding ({self.config.vocab_size})")

    def forward(
        self,
        input_ids: Int[Tensor, "batch seq"],
        attention_mask: Int[Tensor, "batch seq"] | Bool[Tensor, "batch seq"] | None = None,
        *,
        return_hidden: bool = False,
        kv_cache: "DecodeCache | None" = None,
    ) -> Float[Tensor, "batch seq vocab"] | tuple[Float[Tensor, "batch seq vocab"], Float[Tensor, "batch seq d_model"]]:
        """Next-token logits at every position (and the final hidden state if ``return_hidden``).

        Padding may sit on either side: positions count real tokens only. Outputs at padded
        positions are finite but meaningless. With ``kv_cache`` (:meth:`new_kv_cache`), only the
        new tokens are given and the model's own past keys and values are kept, as the GPT's
        ``kv_cache`` does (Part 9's multi-turn rollout feeds it one token a step).
        """
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        mask = attention_mask.long()
        if kv_cache is not None:
            full = mask if kv_cache.mask is None else torch.cat([kv_cache.mask, mask], dim=1)
            positions = (full.cumsum(dim=1) - 1).clamp(min=0)[:, -mask.shape[1]:]
            out = self.hf(input_ids=input_ids, attention_mask=full, position_ids=positions,
                          past_key_values=kv_cache.past, use_cache=True)
            kv_cache.past, kv_cache.mask = out.past_key_values, full
            return self._never_pad(out.logits)
        positions = (mask.cumsum(dim=1) - 1).clamp(min=0)
        out = self.hf(input_ids=input_ids, attention_mask=mask, position_ids=positions,
                      output_hidden_states=return_hidden, use_cache=False)
        logits = self._never_pad(out.logits)
        # hidden_states[-1] is the final (normed) hidden state, the one the LM head reads.
        return (logits, out.hidden_states[-1]) if return_hidden else logits

    @staticmethod
    def new_kv_cache() -> "DecodeCache":
        """An empty cache for incremental decoding with :meth:`forward`."""
        return DecodeCache()

    def _never_pad(self, logits: Tensor) -> Tensor:
        return logits.index_fill(-1, torch.tensor([self.pad_id], device=logits.device), NEVER)

    @torch.no_grad()
    def generate(
        self,
        input_ids: Int[Tensor, "batch seq"],
        attention_mask: Int[Tensor, "batch seq"] | Bool[Tensor, "batch seq"],
        *,
        max_new_tokens: int,
        eos_id: int,
        pad_id: int,
        temperature: float = 1.0,
        top_k: int | None = None,
        generator: torch.Generator | None = None,
        return_logits: bool = False,
    ) -> list[Int[Tensor, " response"]] | tuple[list[Int[Tensor, " response"]], list[Float[Tensor, "response vocab"]]]:
        """Sample a continuation of each LEFT-padded query with the model's own KV-cached ``generate``.

        Same contract as ``workbook.lm.model.GPT.generate``: each row stops after its first EOS
        (kept as its last token) or after ``max_new_tokens``; one 1-D tensor per row, no padding;
        ``temperature=0`` is greedy; all randomness comes from ``generator`` (a seed is drawn
        from it and ``generate`` runs under ``torch.random.fork_rng``, so the global RNG is
        untouched). With ``return_logits``, also each token's raw logits (PAD pushed to ``NEVER``).
        """
        from transformers import GenerationConfig

        if not attention_mask[:, -1].all():
            raise ValueError("queries must be LEFT-padded: the last column must be a real token in every row")
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        longest = int(attention_mask.sum(dim=1).max())
        if longest + max_new_tokens > self.config.block_size:
            raise ValueError(f"query of {longest} tokens + max_new_tokens={max_new_tokens} exceeds block_size={self.config.block_size}")
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        if pad_id == eos_id:
            raise ValueError(f"pad_id and eos_id are both {pad_id}: PAD must not be EOS")
        sample = temperature > 0
        config = GenerationConfig(
            max_new_tokens=max_new_tokens, do_sample=sample, temperature=temperature if sample else None,
            top_k=(top_k or 0) if sample else None, top_p=1.0 if sample else None,
            eos_token_id=eos_id, pad_token_id=pad_id, suppress_tokens=[pad_id], use_cache=True,
            output_logits=return_logits, return_dict_in_generate=True,
        )
        device = input_ids.device
        seed = int(torch.randint(2**62, (1,), generator=generator, device=generator.device if generator else "cpu"))
        was_training = self.training
        self.eval()
        try:
            with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
                torch.manual_seed(seed)
                out = self.hf.generate(input_ids=input_ids, attention_mask=attention_mask.long(), generation_config=config)
        finally:
            self.train(was_training)
        tokens = out.sequences[:, input_ids.shape[1]:]
        logits = self._never_pad(torch.stack(out.logits, dim=1).float()) if return_logits else None
        responses, resp_logits = [], []
        for b in range(tokens.shape[0]):
            eos = (tokens[b] == eos_id).nonzero()
            n = int(eos[0]) + 1 if len(eos) else tokens.shape[1]
            responses.append(tokens[b, :n].clone())
            if return_logits:
                resp_logits.append(logits[b, :n].clone())
        return (responses, resp_logits) if return_logits else responses

    def save_pretrained(self, path, tokenizer: HFTokenizer | None = None) -> None:
        """Write the model (and tokenizer) in Hugging Face format; ``--model PATH`` loads it back."""
        self.hf.save_pretrained(path)
        if tokenizer is not None:
            tokenizer.hf.save_pretrained(path)


def load_causal_lm(name_or_path: str, *, device: str | torch.device = "cpu", dtype: torch.dtype | None = None) -> tuple[CausalLM, HFTokenizer]:
    """(model in eval mode, tokenizer) from a hub name (``gpt2``) or a ``save_pretrained`` folder.

    If the tokenizer has no PAD token distinct from EOS, a ``<pad>`` token is added and the
    embedding grows by one row (it is never read: PAD is masked out and never sampled).
    Raises :class:`workbook.runs.ConfigError` (field ``--model``) with one line when nothing can be loaded —
    a missing folder, or a hub name while the hub cannot be reached.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    quiet_hub()
    try:
        tokenizer = AutoTokenizer.from_pretrained(name_or_path)
        model = AutoModelForCausalLM.from_pretrained(name_or_path, dtype=dtype)
    except (OSError, ValueError) as error:
        raise ConfigError("--model", _why_not_loaded(name_or_path, error, os.path.isdir(name_or_path))) from None
    if tokenizer.pad_token_id is None or tokenizer.pad_token_id == tokenizer.eos_token_id:
        tokenizer.add_special_tokens({"pad_token": "<pad>"})
    if len(tokenizer) > model.get_input_embeddings().num_embeddings:
        model.resize_token_embeddings(len(tokenizer))
    tok = HFTokenizer(tokenizer)
    model.config.pad_token_id = tok.pad_id
    return CausalLM(model, tok.pad_id).to(device).eval(), tok


def _why_not_loaded(name: str, error: BaseException, is_dir: bool) -> str:
    first = (str(error).strip().splitlines() or [type(error).__name__])[0]
    if is_dir:
        return f"cannot load {name!r} as a saved model: {first}"
    if name.startswith(("/", ".", "~")):
        return f"{name!r}: no such folder"
    offline = os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes", "on")
    if offline or any(w in str(error).lower() for w in ("connect", "offline", "resolve", "network")):
        return (f"{name!r} is not a local folder and the Hugging Face hub cannot be reached to download it "
                "(offline?); pass --model PATH to a save_pretrained folder instead")
    return f"cannot load {name!r}: {first}"


def quiet_hub() -> None:
    """Only errors from transformers and huggingface_hub: no retry chatter, no progress bars."""
    import huggingface_hub
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    huggingface_hub.utils.logging.set_verbosity_error()
    huggingface_hub.utils.disable_progress_bars()
