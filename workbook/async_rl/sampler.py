"""Part 10's sampling side (given code): a sampler, and stale sampling in the learner's own process.

A :class:`Sampler` is what an inference engine is at scale, in miniature: its own copy of the
policy's language model (in ``--sampler-dtype``: bfloat16 as vLLM or SGLang would run it),
its own random stream, the task's rollout and verifier. For each batch it returns the
responses, their scores, **its own log-probabilities** of the tokens it sampled (computed
with the learner's Part 3 ``batched_forward_pass`` on its copy) and the **version** of the
weights it sampled with (version v = the policy after v updates).

Who runs it:

- :class:`LocalSampling` (``--lag K`` without ``--samplers``): in the learner's process, one
  batch after the other; batch i is sampled by version ``sampling_version(i, K)`` (your
  Part 10), so the run is the same, bit for bit, as the one with a sampler process and the
  same ``--lag`` — only slower. With ``--lag 0`` in float32 it is today's synchronous run.
- :class:`~workbook.async_rl.processes.RemoteSampling` (``--samplers N``): N sampler
  processes beside the learner; see ``processes.py``.

The learner's side is the trainer's (``workbook/loop/rlvr.py``): it receives the batch with the
sampler's log-probs and corrects the update with your ``importance_weights`` (``--correction``).
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from types import ModuleType

import torch
from torch import Tensor, nn
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from workbook.rlhf.data import Rollout, load_part3, own_rollout, rollout
from workbook.runs import load_part

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def load_part10(impl: str) -> ModuleType:
    """``exercises.part10_async`` or ``solutions.part10_async``."""
    return load_part(impl, "part10_async")


def flat_weights(lm: nn.Module) -> Tensor:
    """Every parameter of ``lm`` in one float32 CPU vector (a copy): what the learner sends to a sampler."""
    return parameters_to_vector([p.detach() for p in lm.parameters()]).float().cpu().clone()


def is_stale_sampling(args) -> bool:
    """Whether a run samples with something else than the policy itself (Part 10's options)."""
    return args.samplers > 0 or args.lag > 0 or args.sampler_dtype != "float32"


class _Scorer(nn.Module):
    """``model(ids, mask) → (logits, values)`` as Part 3's ``batched_forward_pass`` expects, from a bare LM (float32 out)."""

    def __init__(self, lm: nn.Module):
        super().__init__()
        self.lm = lm

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        logits = self.lm(input_ids, attention_mask).float()
        return logits, logits.new_zeros(logits.shape[:2])


@dataclass
class Sampled:
    """One batch as a sampler made it."""

    index: int
    """Which batch (= the iteration that trains on it)."""
    version: int
    """The policy version that sampled it (updates made before its weights were sent)."""
    batch: Rollout
    """The responses; ``batch.sampler_logprobs`` holds the sampler's log-probs ``[batch, resp]``."""
    scores: Tensor
    seconds: float
    """Sampling and scoring time in the sampler."""


class Sampler:
    """A copy of the policy's LM in ``dtype`` that samples and scores one batch at a time."""

    def __init__(self, lm: nn.Module, tok, task, *, impl: str, dtype: str, max_new_tokens: int, temperature: float,
                 chunk: int, generator: torch.Generator, device: str = "cpu"):
        self.lm = copy.deepcopy(lm).to(device=device, dtype=DTYPES[dtype]).eval()
        for p in self.lm.parameters():
            p.requires_grad_(False)
        self.tok, self.task, self.part3 = tok, task, load_part3(impl)
        self.max_new_tokens, self.temperature, self.chunk, self.generator = max_new_tokens, temperature, chunk, generator
        self.version: int | None = None

    def load(self, weights: Tensor, version: int) -> None:
        """Take the learner's weights (a :func:`flat_weights` vector) as version ``version``."""
        first = next(self.lm.parameters())
        vector_to_parameters(weights.to(device=first.device, dtype=first.dtype), self.lm.parameters())
        self.version = version

    @torch.no_grad()
    def sample(self, prompts: list, index: int) -> Sampled:
        """Batch ``index`` of ``prompts`` (the loop's ``Prompt`` objects: ``.text``, ``.answer``), sampled and scored."""
        t0 = time.perf_counter()
        texts = [p.text for p in prompts]
        own = own_rollout(self.task)  # a task may bring its own (Part 9: multi-turn, with a tool)
        if own is None:  # the sampler's own log-probs of what it sampled, kept while sampling, as an engine returns them
            batch = rollout(self.lm, self.tok, texts, max_new_tokens=self.max_new_tokens, temperature=self.temperature,
                            generator=self.generator, chunk=self.chunk, sampler_logprobs=True)
        else:  # its own rollout: the same log-probs from one forward pass of the sampler's copy over the episodes
            batch = own(self.lm, self.tok, texts, max_new_tokens=self.max_new_tokens, temperature=self.temperature,
                        generator=self.generator, chunk=self.chunk)
            logprobs, _, _, _ = self.part3.batched_forward_pass(_Scorer(self.lm), batch.queries, batch.responses,
                                                                temperature=self.temperature, pad_id=self.tok.pad_id)
            batch.sampler_logprobs = logprobs.float().cpu()
        scores = self.task.score(prompts, batch)
        return Sampled(index, self.version, batch, scores.detach().cpu(), time.perf_counter() - t0)


class LocalSampling:
    """Stale sampling in the learner's process: batch i by version ``sampling_version(i, lag)``, one after the other.

    ``versions``: the weights of the versions still to be used (a checkpoint's, when resuming).
    """

    def __init__(self, args, lm: nn.Module, tok, task, *, generator: torch.Generator, chunk: int,
                 saved: dict | None = None):
        self.part10, self.lag = load_part10(args.impl), args.lag
        self.sampler = Sampler(lm, tok, task, impl=args.impl, dtype=args.sampler_dtype, max_new_tokens=args.max_new_tokens,
                               temperature=args.temperature, chunk=chunk, generator=generator, device=args.device)
        self.versions: dict[int, Tensor] = dict(saved["versions"]) if saved else {0: flat_weights(lm)}

    def next(self, it: int, prompts: list) -> Sampled:
        version = self.part10.sampling_version(it, self.lag)
        if version not in self.versions:
            raise RuntimeError(f"sampling_version({it}, {self.lag}) = {version}: no such policy version here "
                               f"(have {sorted(self.versions)}); it must be max(0, batch - lag)")
        if self.sampler.version != version:
            self.sampler.load(self.versions[version], version)
        return self.sampler.sample(prompts, it)

    def publish(self, version: int, lm: nn.Module) -> None:
        """The learner has made update ``version``: keep its weights, forget those no later batch is sampled with."""
        self.versions[version] = flat_weights(lm)
        oldest = max(0, version - self.lag)  # batch `version` (the next) and later ones need this version or newer
        for v in [v for v in self.versions if v < oldest]:
            del self.versions[v]

    def state(self) -> dict:
        return {"versions": dict(self.versions)}

    def close(self) -> None:
        pass


CORRECTING = ("dapo", "gspo", "cispo")
"""The algorithms whose trainer corrects stale rollouts (Part 7's, through ``RLVRTrainer``)."""


def validate_sampling(args) -> None:
    """ConfigError for the first bad Part 10 setting (before anything is loaded or written)."""
    import os

    from workbook.cli import require, require_at_least
    from workbook.distributed import seconds_from_env

    require_at_least("--samplers", args.samplers, 0)
    require_at_least("--lag", args.lag, 0)
    require(0 < args.is_cap < float("inf"), "--is-cap", f"must be a positive finite number, got {args.is_cap!r}")
    require_at_least("--off-policy-delta", args.off_policy_delta, 0)
    require(not args.free_running or args.samplers > 0, "--free-running",
            "needs --samplers N (in one process every batch is sampled at its fixed lag)")
    require(args.samplers == 0 or os.environ.get("WORLD_SIZE", str(args.samplers + 1)) == str(args.samplers + 1),
            "--samplers", f"under torchrun ranks 1…N are the samplers: start {args.samplers + 1} processes "
                          f"(--nproc_per_node), or run with python and the command starts them")
    require(args.samplers == 0 or args.algo != "dpo", "--samplers", "dpo trains on fixed preference pairs: nothing to sample")
    require(args.lag == 0 or args.algo != "dpo", "--lag", "dpo trains on fixed preference pairs: nothing to sample")
    for name in ("WORKBOOK_DIST_TIMEOUT_S", "WORKBOOK_SAMPLER_START_TIMEOUT_S"):  # read later, once the folder exists
        seconds_from_env(name, 1.0)
    for name, off in (("correction", "none"), ("kl_estimator", "k3")):
        require(getattr(args, name) == off or args.algo in CORRECTING, f"--{name.replace('_', '-')}",
                f"only {', '.join(CORRECTING)} take it (their trainer calls your Part 10); --algo {args.algo} trains on "
                f"stale batches as they are")
    require(args.off_policy_delta == 0 or args.algo in CORRECTING, "--off-policy-delta",
            f"only {', '.join(CORRECTING)} take it (their trainer calls your Part 10)")


DEFAULT_CORRECTION = "sequence_mask"
"""The correction of a stale run unless ``--correction`` says otherwise: Part 10's ``importance_weights`` default,
TRL's GRPOTrainer's (``vllm_importance_sampling_mode``, with the cap C = 3 of ``--is-cap``)."""


def sampling_defaults(args, given: set[str]):
    """Part 10's defaults that depend on other options (those in ``given`` are kept as given):

    - ``--samplers N`` without ``--lag``: lag 1 (with lag 0 the learner and its samplers would take turns);
    - a stale run (``--samplers N`` or ``--lag K > 0``) of dapo, gspo or cispo corrects its batches with
      :data:`DEFAULT_CORRECTION`, as TRL's GRPOTrainer does (``--correction none`` trains on them as they
      are). A synchronous run keeps ``none``: there every weight would be 1.
    """
    import dataclasses

    if args.samplers > 0 and "lag" not in given:
        args = dataclasses.replace(args, lag=1)
    if (args.samplers > 0 or args.lag > 0) and "correction" not in given and args.algo in CORRECTING:
        args = dataclasses.replace(args, correction=DEFAULT_CORRECTION)
    return args


def sampling_line(args) -> str:
    """What a stale run does about its stale batches, in one line (the run's first): correction, mask, KL estimator."""
    if args.algo not in CORRECTING:
        return (f"stale batches are trained on as they are: --algo {args.algo} does not call Part 10's corrections "
                f"(only {', '.join(CORRECTING)} do)")
    correction = (f"corrected by importance_weights ({args.correction}, cap {args.is_cap:g})" if args.correction != "none"
                  else "not corrected (--correction none)")
    mask = (f"off-policy sequence mask on (δ = {args.off_policy_delta:g})" if args.off_policy_delta > 0
            else "off-policy sequence mask off (--off-policy-delta δ turns it on)")
    kl = ("no KL term in the loss (--kl-coef 0)" if args.kl_coef == 0
          else f"KL term {args.kl_estimator}" + (" (kl_loss_term)" if args.kl_estimator == "k3_is" else
                                                 " (--kl-estimator k3_is: importance-weighted)"))
    return f"Part 10: stale batches {correction}; {mask}; {kl}"
