"""Known-wrong versions of Part 3's models: the value head, the reference copy, the batched forward
pass, the reward model and its loss."""

from __future__ import annotations

import copy
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from solutions import part3_rlhf as _ref
from workbook.lm.tokenizer import pad_batch
from workbook.mistakes import mistake

part3 = partial(mistake, "part3_rlhf")


# --- GPTWithValueHead -----------------------------------------------------------------

@part3("GPTWithValueHead", "value_head_not_zero_initialised", "the value head kept nn.Linear's random initialisation instead of zeros")
class ValueHeadRandomInit(_ref.GPTWithValueHead):
    def __init__(self, lm):
        nn.Module.__init__(self)
        self.lm = lm
        self.value_head = nn.Linear(lm.config.d_model, 1)


@part3("GPTWithValueHead", "hidden_state_detached", "the hidden state was detached before the value head, so the value loss cannot train the trunk")
class ValueHeadDetached(_ref.GPTWithValueHead):
    def forward(self, input_ids, attention_mask=None):
        logits, hidden = self.lm(input_ids, attention_mask, return_hidden=True)
        return logits, self.value_head(hidden.detach()).squeeze(-1)


@part3("GPTWithValueHead", "value_head_on_logits", "the value head reads the logits (vocab wide) instead of the hidden state")
class ValueHeadOnLogits(_ref.GPTWithValueHead):
    def __init__(self, lm):
        nn.Module.__init__(self)
        self.lm = lm
        self.value_head = nn.Linear(lm.config.vocab_size, 1)
        nn.init.zeros_(self.value_head.weight)
        nn.init.zeros_(self.value_head.bias)

    def forward(self, input_ids, attention_mask=None):
        logits = self.lm(input_ids, attention_mask)
        return logits, self.value_head(logits).squeeze(-1)


@part3("GPTWithValueHead", "value_head_without_bias",
       "the value head was built with bias=False (a zero-initialised bias is still a parameter the critic needs)")
class ValueHeadNoBias(_ref.GPTWithValueHead):
    def __init__(self, lm):
        nn.Module.__init__(self)
        self.lm = lm
        self.value_head = nn.Linear(lm.config.d_model, 1, bias=False)
        nn.init.zeros_(self.value_head.weight)


@part3("GPTWithValueHead", "values_not_squeezed", "the values keep the head's trailing dimension of size 1 ([batch, seq, 1])")
class ValueHeadUnsqueezed(_ref.GPTWithValueHead):
    def forward(self, input_ids, attention_mask=None):
        logits, hidden = self.lm(input_ids, attention_mask, return_hidden=True)
        return logits, self.value_head(hidden)


# --- create_reference_model -----------------------------------------------------------

@part3("create_reference_model", "returns_the_policy_itself", "the policy itself was returned, so the reference moves with every update")
def reference_is_policy(model):
    return model


@part3("create_reference_model", "shallow_copy_shares_parameters", "a shallow copy (copy.copy) was made: it shares the policy's parameters")
def reference_shallow(model):
    reference = copy.copy(model)
    return reference.eval()


@part3("create_reference_model", "left_trainable", "the copy's parameters still require grad")
def reference_trainable(model):
    return copy.deepcopy(model).eval()


@part3("create_reference_model", "left_in_train_mode", "the copy was left in train mode (dropout makes its log-probs random)")
def reference_train_mode(model):
    reference = copy.deepcopy(model)
    for p in reference.parameters():
        p.requires_grad_(False)
    return reference


@part3("create_reference_model", "put_the_policy_in_eval_mode",
       "the policy was put in eval mode to copy it (copy.deepcopy(model.eval())): the copy is right, but the policy "
       "now trains without its dropout")
def reference_policy_eval(model):
    reference = copy.deepcopy(model.eval())
    for p in reference.parameters():
        p.requires_grad_(False)
    return reference


@part3("create_reference_model", "froze_the_policy", "requires_grad was turned off on the policy before copying, freezing the policy too")
def reference_froze_policy(model):
    for p in model.parameters():
        p.requires_grad_(False)
    return copy.deepcopy(model).eval()


# --- batched_forward_pass -------------------------------------------------------------

def _forward_pass(model, queries, responses, temperature, pad_id, return_logits, *, lp_shift=-1, v_shift=-1,
                  use_temperature=True, zero_padding=True, left_pad_queries=False, mask_from_ids=False):
    device = queries[0].device
    if left_pad_queries:
        q_ids, _ = pad_batch(queries, side="left", pad_id=pad_id)
        r_ids, _ = pad_batch(responses, side="right", pad_id=pad_id)
        input_ids = torch.cat([q_ids, r_ids], dim=1)
        logits, values = model(input_ids)
        query_lens = torch.full((len(queries),), q_ids.shape[1])
    else:
        input_ids, mask = pad_batch([torch.cat([q, r]) for q, r in zip(queries, responses)], side="right", pad_id=pad_id)
        logits, values = model(input_ids, mask)
        query_lens = torch.tensor([len(q) for q in queries])
    if use_temperature:
        logits = logits / temperature
    resp_lens = torch.tensor([len(r) for r in responses])
    R = int(resp_lens.max())
    offsets = torch.arange(R)
    masks = (offsets[None] < resp_lens[:, None]).to(logits.dtype)
    if mask_from_ids:
        masks = (pad_batch(responses, side="right", pad_id=pad_id)[0] != pad_id).to(logits.dtype)
    T = input_ids.shape[1]
    lp_index = (query_lens[:, None] + lp_shift + offsets[None]).clamp(max=T - 1)
    v_index = (query_lens[:, None] + v_shift + offsets[None]).clamp(max=T - 1)
    resp_logits = torch.gather(logits, 1, lp_index[..., None].expand(-1, -1, logits.shape[-1]))
    labels, _ = pad_batch(responses, side="right", pad_id=pad_id)
    logprobs = _ref.logprobs_from_logits(resp_logits, labels.to(device))
    resp_values = torch.gather(values, 1, v_index)
    if zero_padding:
        logprobs, resp_values, resp_logits = logprobs * masks, resp_values * masks, resp_logits * masks[..., None]
    return logprobs, (resp_logits if return_logits else None), resp_values, masks


@part3("batched_forward_pass", "off_by_one", "the log-prob of token i was read from position i instead of i − 1 (the output at i predicts token i + 1)")
def forward_off_by_one(model, queries, responses, *, temperature=1.0, pad_id=0, return_logits=False):
    return _forward_pass(model, queries, responses, temperature, pad_id, return_logits, lp_shift=0, v_shift=0)


@part3("batched_forward_pass", "temperature_ignored", "the logits were not divided by the sampling temperature")
def forward_no_temperature(model, queries, responses, *, temperature=1.0, pad_id=0, return_logits=False):
    return _forward_pass(model, queries, responses, temperature, pad_id, return_logits, use_temperature=False)


@part3("batched_forward_pass", "value_at_token_position", "the value of token t was read at the token's own position instead of the state before it")
def forward_value_shifted(model, queries, responses, *, temperature=1.0, pad_id=0, return_logits=False):
    return _forward_pass(model, queries, responses, temperature, pad_id, return_logits, v_shift=0)


@part3("batched_forward_pass", "padding_not_zeroed", "the outputs at padding positions were not zeroed")
def forward_padding_kept(model, queries, responses, *, temperature=1.0, pad_id=0, return_logits=False):
    return _forward_pass(model, queries, responses, temperature, pad_id, return_logits, zero_padding=False)


@part3("batched_forward_pass", "left_padded_queries_without_mask",
       "queries were left-padded and run without an attention mask, so padding shifts positions and is attended to")
def forward_left_padded(model, queries, responses, *, temperature=1.0, pad_id=0, return_logits=False):
    return _forward_pass(model, queries, responses, temperature, pad_id, return_logits, left_pad_queries=True)


@part3("batched_forward_pass", "wrapped_in_no_grad",
       "the forward pass ran under torch.no_grad(), so the PPO update gets log-probs and values without gradients")
def forward_no_grad(model, queries, responses, *, temperature=1.0, pad_id=0, return_logits=False):
    with torch.no_grad():
        return _forward_pass(model, queries, responses, temperature, pad_id, return_logits)


# --- preference_loss ------------------------------------------------------------------

@part3("preference_loss", "log_of_sigmoid", "−log(sigmoid(x)) was used instead of −logsigmoid(x): it overflows to inf for large gaps")
def pref_log_sigmoid(r_chosen, r_rejected, margin=None):
    diff = r_chosen - r_rejected - (0 if margin is None else margin)
    return -torch.log(torch.sigmoid(diff)).mean()


@part3("preference_loss", "chosen_rejected_swapped", "rejected minus chosen was used (the model learns to prefer the rejected texts)")
def pref_swapped(r_chosen, r_rejected, margin=None):
    diff = r_rejected - r_chosen - (0 if margin is None else margin)
    return -F.logsigmoid(diff).mean()


@part3("preference_loss", "margin_added", "the margin was added instead of subtracted")
def pref_margin_added(r_chosen, r_rejected, margin=None):
    diff = r_chosen - r_rejected + (0 if margin is None else margin)
    return -F.logsigmoid(diff).mean()


@part3("preference_loss", "sum_instead_of_mean", "the loss was summed over pairs instead of averaged")
def pref_sum(r_chosen, r_rejected, margin=None):
    diff = r_chosen - r_rejected - (0 if margin is None else margin)
    return -F.logsigmoid(diff).sum()


# --- RewardModel ----------------------------------------------------------------------

class _RewardReadout(_ref.RewardModel):
    def _pool(self, hidden, attention_mask):
        raise NotImplementedError

    def forward(self, input_ids, attention_mask):
        _, hidden = self.lm(input_ids, attention_mask, return_hidden=True)
        return self.head(self._pool(hidden, attention_mask)).squeeze(-1)


@part3("RewardModel", "last_column", "the reward was read at the last column, which is padding for every row but the longest")
class RewardLastColumn(_RewardReadout):
    def _pool(self, hidden, attention_mask):
        return hidden[:, -1]


@part3("RewardModel", "first_token", "the reward was read at the first token, which has seen nothing of the text")
class RewardFirstToken(_RewardReadout):
    def _pool(self, hidden, attention_mask):
        return hidden[:, 0]


@part3("RewardModel", "mean_pooled", "the hidden states of all positions were averaged (padding and half-written prefixes included)")
class RewardMeanPooled(_RewardReadout):
    def _pool(self, hidden, attention_mask):
        return hidden.mean(dim=1)


@part3("RewardModel", "mask_sum_minus_one", "attention_mask.sum(1) − 1 was used as the last index, which is wrong for left-padded rows")
class RewardSumIndex(_RewardReadout):
    def _pool(self, hidden, attention_mask):
        return hidden[torch.arange(hidden.shape[0]), attention_mask.sum(1) - 1]


@part3("RewardModel", "no_error_on_an_empty_row",
       "a row whose attention_mask is all 0 was accepted (its reward read at some position of pure padding) "
       "instead of raising ValueError")
class RewardEmptyRowAccepted(_RewardReadout):
    def _pool(self, hidden, attention_mask):
        positions = torch.arange(hidden.shape[1]).expand(hidden.shape[0], -1)
        last = torch.where(attention_mask.bool(), positions, torch.zeros_like(positions)).max(dim=1).values
        return hidden[torch.arange(hidden.shape[0]), last]


@part3("RewardModel", "trunk_detached",
       "the trunk ran under torch.no_grad() (or its hidden state was detached): the reward is right, but "
       "preference training can only move the head")
class RewardTrunkDetached(_ref.RewardModel):
    def forward(self, input_ids, attention_mask):
        with torch.no_grad():
            _, hidden = self.lm(input_ids, attention_mask, return_hidden=True)
        positions = torch.arange(input_ids.shape[1]).expand_as(input_ids)
        last = torch.where(attention_mask.bool(), positions, torch.full_like(positions, -1)).max(dim=1).values
        if (last < 0).any():
            raise ValueError("every row needs at least one real token")
        return self.head(hidden[torch.arange(input_ids.shape[0]), last]).squeeze(-1)
