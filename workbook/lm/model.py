"""A small decoder-only transformer (GPT) that handles padding properly.

One file, no indirection: config, attention, MLP, block, the model, KV-cached
sampling and checkpoints. Two things matter for RLHF and are easy to get wrong:

* Padding. Batches in PPO mix left-padded queries with right-padded responses.
  Position ids are therefore computed from the attention mask (the n-th real
  token of a row gets position n-1 however many pads precede it), and padded
  keys are masked out. A real token's output is the same whatever the padding
  and whatever else is in the batch (tests/test_lm_model.py checks this).
* PAD is not EOS. A sampled EOS is a real token the policy is scored for; a pad
  is an empty slot. See `workbook.lm.tokenizer`.
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
from jaxtyping import Bool, Float, Int
from torch import Tensor

from workbook.lm.tokenizer import CharTokenizer, pad_batch


@dataclass(frozen=True)
class GPTConfig:
    vocab_size: int = 38
    """Number of token ids, specials included (CharTokenizer().vocab_size)."""
    block_size: int = 128
    """Most tokens one row may hold (real tokens, not counting padding); sets the position table."""
    n_layer: int = 4
    """Number of transformer blocks."""
    n_head: int = 4
    """Attention heads per block; must divide d_model."""
    d_model: int = 128
    """Width of the residual stream (and of the hidden state returned by forward)."""
    dropout: float = 0.0
    """Dropout on attention weights and residual branches while training."""

    def __post_init__(self):
        if self.d_model % self.n_head:
            raise ValueError(f"n_head={self.n_head} must divide d_model={self.d_model}")
        if min(self.vocab_size, self.block_size, self.n_layer, self.n_head, self.d_model) < 1:
            raise ValueError(f"all sizes must be positive: {self}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")


class KVCache:
    """Keys and values of every token seen so far, per layer, for incremental decoding.

    Start with `KVCache()` and pass it to `GPT.forward(..., kv_cache=cache)`
    repeatedly, each time with only the *new* tokens and their mask; the model
    appends to it. `mask` is the attention mask of all cached tokens.

    The buffers are allocated once (`capacity` tokens, doubled if a forward pass
    needs more) and filled in place: appending a token costs one write per
    layer, not a copy of everything cached so far. `keep(rows)` drops the other
    rows (generation stops computing finished reviews this way).
    """

    def __init__(self, capacity: int = 0):
        self.capacity = capacity
        self.length = 0
        self.keys: list[Tensor] = []
        """Per layer, [batch, head, capacity, d_head]; the first `len(self)` slots are filled."""
        self.values: list[Tensor] = []
        self._mask: Tensor | None = None  # [batch, capacity] bool
        self.n_real: Tensor | None = None
        """Real (unpadded) tokens cached so far, per row: the next real token's position."""

    def __len__(self) -> int:
        return self.length

    @property
    def mask(self) -> Bool[Tensor, "batch past"] | None:
        return None if self._mask is None else self._mask[:, : self.length]

    def append_mask(self, mask: Bool[Tensor, "batch seq"]) -> Bool[Tensor, "batch all"]:
        """Reserve room for `mask.shape[1]` more tokens and record their mask; returns the mask of all tokens."""
        B, T = mask.shape
        end = self.length + T
        if self._mask is None:
            self.capacity = max(self.capacity, end)
            self._mask = mask.new_zeros(B, self.capacity)
            self.n_real = torch.zeros(B, dtype=torch.long, device=mask.device)
        elif end > self.capacity:
            self.capacity = max(end, 2 * self.capacity)
            self._mask = _grow(self._mask, 1, self.capacity)
            self.keys = [_grow(k, 2, self.capacity) for k in self.keys]
            self.values = [_grow(v, 2, self.capacity) for v in self.values]
        self._mask[:, self.length : end] = mask
        return self._mask[:, :end]

    def write(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Store the new keys/values of `layer` after the cached ones; return all of them (views)."""
        B, H, T, D = k.shape
        if layer == len(self.keys):
            self.keys.append(k.new_zeros(B, H, self.capacity, D))
            self.values.append(v.new_zeros(B, H, self.capacity, D))
        end = self.length + T
        self.keys[layer][:, :, self.length : end] = k
        self.values[layer][:, :, self.length : end] = v
        return self.keys[layer][:, :, :end], self.values[layer][:, :, :end]

    def keep(self, rows: Int[Tensor, " kept"]) -> None:
        """Keep only these rows (by index), in this order."""
        self.keys = [k[rows] for k in self.keys]
        self.values = [v[rows] for v in self.values]
        if self._mask is not None:
            self._mask, self.n_real = self._mask[rows], self.n_real[rows]


def _grow(x: Tensor, dim: int, size: int) -> Tensor:
    shape = list(x.shape)
    shape[dim] = size
    out = x.new_zeros(shape)
    out.narrow(dim, 0, x.shape[dim]).copy_(x)
    return out


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.n_head, self.dropout = cfg.n_head, cfg.dropout
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.resid_drop = nn.Dropout(cfg.dropout)

    def forward(
        self,
        x: Float[Tensor, "batch seq d_model"],
        allowed: Bool[Tensor, "batch 1 seq keys"] | None,
        cache: KVCache | None,
        layer: int,
    ) -> Float[Tensor, "batch seq d_model"]:
        B, T, C = x.shape
        # (view + permute rather than einops here: this runs once per layer per generated token)
        q, k, v = self.qkv(x).view(B, T, 3, self.n_head, C // self.n_head).permute(2, 0, 3, 1, 4)
        if cache is not None:
            k, v = cache.write(layer, k, v)
        drop = self.dropout if self.training else 0.0
        if allowed is None:  # no padding, no cache: the fused causal kernel
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=drop, is_causal=True)
        elif T == 1:  # one new token per row (sampling): a plain softmax over the cached keys is fastest
            scores = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(q.shape[-1]))
            y = scores.masked_fill(~allowed, float("-inf")).softmax(dim=-1) @ v
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, dropout_p=drop)
        y = y.transpose(1, 2).reshape(B, T, C)
        return self.resid_drop(self.proj(y))


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.fc = nn.Linear(cfg.d_model, 4 * cfg.d_model)
        self.proj = nn.Linear(4 * cfg.d_model, cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x: Float[Tensor, "batch seq d_model"]) -> Float[Tensor, "batch seq d_model"]:
        return self.drop(self.proj(F.gelu(self.fc(x))))


class Block(nn.Module):
    """Pre-LayerNorm block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.ln1, self.attn = nn.LayerNorm(cfg.d_model), CausalSelfAttention(cfg)
        self.ln2, self.mlp = nn.LayerNorm(cfg.d_model), MLP(cfg)

    def forward(self, x, allowed, cache, layer):
        x = x + self.attn(self.ln1(x), allowed, cache, layer)
        return x + self.mlp(self.ln2(x))


ROWS_PER_LENGTH_GROUP = 8
"""Right-padded batches with more rows than this run in groups of rows of similar length."""


def _check_ids_and_mask(input_ids: Tensor, attention_mask: Tensor | None, vocab_size: int) -> Tensor | None:
    """Raise one clear error for malformed input; return the mask as bool (or None)."""
    if not isinstance(input_ids, Tensor) or input_ids.dim() != 2:
        shape = tuple(input_ids.shape) if isinstance(input_ids, Tensor) else type(input_ids).__name__
        raise ValueError(f"input_ids must be a 2-D [batch, seq] tensor, got {shape}")
    if input_ids.dtype.is_floating_point or input_ids.dtype.is_complex or input_ids.dtype == torch.bool:
        raise ValueError(f"input_ids must hold integer token ids, got dtype {input_ids.dtype}")
    if input_ids.numel() and (input_ids.min() < 0 or input_ids.max() >= vocab_size):
        raise ValueError(
            f"token ids must be in [0, {vocab_size}), got min {input_ids.min().item()} max {input_ids.max().item()}"
        )
    if attention_mask is None:
        return None
    if not isinstance(attention_mask, Tensor) or attention_mask.shape != input_ids.shape:
        shape = tuple(attention_mask.shape) if isinstance(attention_mask, Tensor) else type(attention_mask).__name__
        raise ValueError(f"attention_mask must have the shape of input_ids {tuple(input_ids.shape)}, got {shape}")
    if attention_mask.dtype != torch.bool:
        if attention_mask.dtype.is_floating_point or attention_mask.dtype.is_complex:
            raise ValueError(f"attention_mask must be bool or integer 0/1, got dtype {attention_mask.dtype}")
        if not ((attention_mask == 0) | (attention_mask == 1)).all():
            raise ValueError("attention_mask must contain only 0 and 1")
        attention_mask = attention_mask.bool()
    return attention_mask


class GPT(nn.Module):
    """Decoder-only transformer: token + learned position embeddings, pre-LN blocks, tied output."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.d_model)
        self.wpe = nn.Embedding(config.block_size, config.d_model)
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.d_model)
        # The output layer reuses wte (tied embeddings): fewer parameters, and
        # a rarely-seen character still gets a sensible output row.
        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            if name.endswith("proj.weight"):  # GPT-2: keep the residual stream's variance flat with depth
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def num_params(self) -> int:
        """Number of parameters (the tied embedding counted once)."""
        return sum(p.numel() for p in self.parameters())

    def forward(
        self,
        input_ids: Int[Tensor, "batch seq"],
        attention_mask: Int[Tensor, "batch seq"] | Bool[Tensor, "batch seq"] | None = None,
        *,
        return_hidden: bool = False,
        kv_cache: KVCache | None = None,
    ) -> Float[Tensor, "batch seq vocab"] | tuple[Float[Tensor, "batch seq vocab"], Float[Tensor, "batch seq d_model"]]:
        """Next-token logits for every position (and the final hidden state if `return_hidden`).

        `attention_mask` (1 = real token, 0 = padding; None = all real) may pad
        on either side or both. Outputs at padded positions are finite but
        meaningless: ignore them. With `kv_cache`, `input_ids` holds only the
        new tokens; the cache supplies (and receives) the earlier keys/values.
        """
        mask = _check_ids_and_mask(input_ids, attention_mask, self.config.vocab_size)
        B, T = input_ids.shape
        dev = input_ids.device
        if kv_cache is not None and len(kv_cache) and kv_cache.mask.shape[0] != B:
            raise ValueError(f"kv_cache holds batch size {kv_cache.mask.shape[0]}, input_ids has {B}")
        past = len(kv_cache) if kv_cache is not None else 0
        if mask is not None and kv_cache is None and B > ROWS_PER_LENGTH_GROUP and T <= self.config.block_size:
            lengths = mask.sum(dim=1)
            if bool((mask == (torch.arange(T, device=dev) < lengths[:, None])).all()):  # right padding only
                return self._forward_by_length(input_ids, lengths, return_hidden)

        if mask is None and kv_cache is None:
            if T > self.config.block_size:
                raise ValueError(f"sequence length {T} exceeds block_size {self.config.block_size}")
            pos = torch.arange(T, device=dev).expand(B, T)
            allowed = None
        else:
            if mask is None:
                mask = torch.ones(B, T, dtype=torch.bool, device=dev)
            # Position = number of real tokens before this one, so left padding does not shift it.
            pos = mask.long().cumsum(dim=1) - 1
            if kv_cache is not None:
                full = kv_cache.append_mask(mask)
                pos = pos + kv_cache.n_real[:, None]
                kv_cache.n_real = kv_cache.n_real + mask.sum(dim=1)
            else:
                full = mask
            pos = pos.clamp(min=0)
            if pos.numel() and pos.max() >= self.config.block_size:
                raise ValueError(
                    f"a row holds more than block_size={self.config.block_size} real tokens"
                )
            q_idx = torch.arange(past, past + T, device=dev)
            k_idx = torch.arange(past + T, device=dev)
            causal = k_idx[None, :] <= q_idx[:, None]  # [T, S]
            # Real, earlier keys only, but always the query itself: a padded query
            # (or a row that is all padding) then attends to itself rather than
            # to nothing, which would be a softmax over -inf and give NaN.
            allowed = (causal & full[:, None, :]) | (k_idx[None, :] == q_idx[:, None])
            allowed = allowed[:, None]  # broadcast over heads: [B, 1, T, S]

        x = self.drop(self.wte(input_ids) + self.wpe(pos))
        for i, block in enumerate(self.blocks):
            x = block(x, allowed, kv_cache, i)
        if kv_cache is not None:
            kv_cache.length = past + T
        hidden = self.ln_f(x)
        logits = F.linear(hidden, self.wte.weight)
        return (logits, hidden) if return_hidden else logits

    def _forward_by_length(self, input_ids: Tensor, lengths: Tensor, return_hidden: bool):
        """`forward` for a right-padded batch, computed in groups of rows of similar length.

        PPO scores batches of responses of very different lengths, right-padded to the longest:
        often more than half of such a batch is padding. Sorted by length, each group of rows
        runs only as wide as its longest row, with the fused causal kernel (causality alone keeps
        real tokens from seeing the padding after them, and positions count from 0). Outputs at
        real tokens are those of the padded batch; at padding they are finite and meaningless.
        """
        B, T = input_ids.shape
        order = torch.argsort(lengths, stable=True)
        groups = []
        for rows in order.split(ROWS_PER_LENGTH_GROUP):
            width = max(int(lengths[rows].max()), 1)
            x = self.drop(self.wte(input_ids[rows, :width]) + self.wpe(torch.arange(width, device=input_ids.device)))
            for i, block in enumerate(self.blocks):
                x = block(x, None, None, i)
            groups.append(F.pad(x, (0, 0, 0, T - width)))
        hidden = self.ln_f(torch.cat(groups)[torch.argsort(order)])
        logits = F.linear(hidden, self.wte.weight)
        return (logits, hidden) if return_hidden else logits

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
        """Sample a continuation of each LEFT-padded query, with a KV cache.

        Each row stops after its first EOS (which is kept as the last token of
        its response) or after `max_new_tokens`. Returns one 1-D LongTensor per
        row, of its own length, with no padding. `temperature=0` is greedy;
        `top_k` keeps only the k likeliest tokens. Sampling draws from
        `generator` only, so a seeded generator gives the same samples every time.
        With `return_logits`, also returns for each row the raw logits (before
        temperature and top-k) that each response token was sampled from.
        Runs in eval mode (no dropout) and restores the previous mode.
        """
        mask = _check_ids_and_mask(input_ids, attention_mask, self.config.vocab_size)
        if mask is None:
            raise ValueError("generate needs an attention_mask (queries are left-padded)")
        if not mask[:, -1].all():
            raise ValueError("queries must be LEFT-padded: the last column must be a real token in every row")
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        longest = int(mask.sum(dim=1).max())
        if longest + max_new_tokens > self.config.block_size:
            raise ValueError(
                f"query of {longest} tokens + max_new_tokens={max_new_tokens} exceeds block_size={self.config.block_size}"
            )
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        if top_k is not None and top_k < 1:
            raise ValueError(f"top_k must be >= 1 or None, got {top_k}")
        for name, i in (("eos_id", eos_id), ("pad_id", pad_id)):
            if not 0 <= i < self.config.vocab_size:
                raise ValueError(f"{name}={i} is not a token id (vocab_size {self.config.vocab_size})")

        was_training = self.training
        self.eval()
        try:
            B = input_ids.shape[0]
            cache = KVCache(capacity=input_ids.shape[1] + max_new_tokens)
            logits = self(input_ids, mask, kv_cache=cache)[:, -1]
            # Rows still in the batch (original indices); finished rows are dropped from it
            # whenever they make up a quarter of it, so the long tail of a batch runs small.
            rows = torch.arange(B, device=input_ids.device)
            running = torch.ones(B, dtype=torch.bool, device=input_ids.device)
            tokens = torch.full((B, max_new_tokens), pad_id, dtype=torch.long, device=input_ids.device)
            all_logits = logits.new_zeros(B, max_new_tokens, logits.shape[-1]) if return_logits else None
            steps = 0
            for step in range(max_new_tokens):
                nxt = _sample(logits, temperature, top_k, generator)
                nxt = torch.where(running, nxt, torch.full_like(nxt, pad_id))
                tokens[rows, step] = nxt
                if return_logits:
                    all_logits[rows, step] = logits
                steps = step + 1
                was_running = running
                running = running & (nxt != eos_id)
                n_running = int(running.sum())
                if n_running == 0 or step == max_new_tokens - 1:
                    break
                if n_running <= 3 * len(rows) // 4:
                    live = running.nonzero().squeeze(1)
                    rows, running, was_running, nxt = rows[live], running[live], was_running[live], nxt[live]
                    cache.keep(live)
                # Tokens of finished rows are padding: masked out, position not advanced.
                logits = self(nxt[:, None], was_running[:, None], kv_cache=cache)[:, -1]
        finally:
            self.train(was_training)

        toks = tokens[:, :steps]  # [B, steps]
        responses, resp_logits = [], []
        for b in range(B):
            eos = (toks[b] == eos_id).nonzero()
            n = int(eos[0]) + 1 if len(eos) else toks.shape[1]
            responses.append(toks[b, :n].clone())
            if return_logits:
                resp_logits.append(all_logits[b, :n].clone())
        return (responses, resp_logits) if return_logits else responses


def _sample(
    logits: Float[Tensor, "batch vocab"], temperature: float, top_k: int | None, generator: torch.Generator | None
) -> Int[Tensor, " batch"]:
    if temperature == 0:
        return logits.argmax(dim=-1)
    logits = logits / temperature
    if top_k is not None and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = F.softmax(logits, dim=-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def sample_texts(
    model: GPT,
    tokenizer: CharTokenizer,
    prompts: list[str],
    *,
    max_new_tokens: int = 100,
    temperature: float = 1.0,
    top_k: int | None = None,
    seed: int = 0,
) -> list[str]:
    """Complete each prompt; returns prompt + continuation as text (specials dropped).

    A convenience around `GPT.generate` for looking at a model. `max_new_tokens`
    is lowered, if need be, so the longest prompt still fits the context.
    """
    device = next(model.parameters()).device
    queries = [tokenizer.encode(p, add_bos=True) for p in prompts]
    ids, mask = pad_batch(queries, side="left", pad_id=tokenizer.pad_id)
    room = model.config.block_size - max(len(q) for q in queries)
    if room < 1:
        raise ValueError(f"a prompt fills the whole context of {model.config.block_size} tokens")
    gen = torch.Generator(device=device).manual_seed(seed)
    responses = model.generate(
        ids.to(device), mask.to(device), max_new_tokens=min(max_new_tokens, room), temperature=temperature,
        top_k=top_k, generator=gen, eos_id=tokenizer.eos_id, pad_id=tokenizer.pad_id,
    )
    return [p + tokenizer.decode(r) for p, r in zip(prompts, responses)]


# ----------------------------------------------------------------- checkpoints
_PLAIN = (str, int, float, bool, type(None), Tensor)


def _check_plain(obj, where: str = "extra") -> None:
    """torch.load(weights_only=True) only restores plain containers, scalars and tensors."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            if not isinstance(k, (str, int)):
                raise TypeError(f"{where} has a key of type {type(k).__name__}; use str keys")
            _check_plain(v, f"{where}[{k!r}]")
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            _check_plain(v, f"{where}[{i}]")
    elif not isinstance(obj, _PLAIN):
        raise TypeError(f"{where} is a {type(obj).__name__}; checkpoints hold only dicts, lists, scalars, str, tensors")


def save_checkpoint(path: str | os.PathLike, model: GPT, tokenizer: CharTokenizer, extra: dict | None = None) -> None:
    """Write config, weights, tokenizer and `extra` (plain data only) to `path`, atomically."""
    extra = {} if extra is None else extra
    _check_plain(extra)
    blob = {
        "format": "workbook-lm/1",
        "config": asdict(model.config),
        "state_dict": {k: v.detach().cpu() for k, v in model.state_dict().items()},
        "tokenizer": tokenizer.to_dict(),
        "extra": extra,
    }
    path = os.fspath(path)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    torch.save(blob, tmp)
    os.replace(tmp, path)  # a reader never sees half a file


def load_checkpoint(path: str | os.PathLike, map_location: str | torch.device = "cpu") -> tuple[GPT, CharTokenizer, dict]:
    """Inverse of `save_checkpoint`: (model in eval mode, tokenizer, extra)."""
    blob = torch.load(path, map_location=map_location, weights_only=True)
    if not isinstance(blob, dict) or blob.get("format") != "workbook-lm/1":
        raise ValueError(f"{path} is not a workbook-lm checkpoint")
    model = GPT(GPTConfig(**blob["config"]))
    model.load_state_dict(blob["state_dict"])
    model.to(map_location).eval()
    return model, CharTokenizer.from_dict(blob["tokenizer"]), blob["extra"]
