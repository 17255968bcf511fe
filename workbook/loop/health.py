"""A run that cannot learn says so: the signatures of a dead LM run, read from each iteration's stats.

The commonest question about RLHF and RLVR runs is a run that trains without error and learns
nothing: every completion cut off at the length limit (so every reward, and every advantage, is
the same), samples in a group identical, a policy that ran away from its reference. Each shows
in the stats the loop already logs. :class:`DeadRunWatch` reads them, one iteration at a time
(``metrics.jsonl``'s rows), and returns one line for a symptom once it has held for
:data:`PATIENCE` iterations in a row — once per run, not every iteration:

================  ==========================================  =====================================
symptom           reads                                       holds when (``PATIENCE`` iterations)
================  ==========================================  =====================================
kl                ``objective/kl`` / ``tokens/responses_len   > 1 nat per token
                  _mean``
entropy           ``objective/entropy``                       < 0.001 nats per token, or < 5 % of the
                                                              first iteration's
truncated         ``env/finished_frac``                       ≥ 90 % of completions never emitted EOS
clipped           ``*/policy/clipfrac`` (``rlvr/``: low +     ≥ 50 % of the ratios clipped
                  high)
no_signal         ``env/groups_with_signal`` (reason);        ≤ 5 % of groups with a reward spread;
                  ``{grpo,rloo}/advantages_abs_mean``;        every advantage 0; every sample the
                  ``env/reward_std`` (ppo)                    same reward
zero_loss         ``*/loss/policy`` (``dpo/loss``)            exactly 0
================  ==========================================  =====================================

A batch that is (nearly) all right (``env/accuracy`` ≥ 0.9, the reason command) has no spread,
little entropy and (under dynamic sampling) no loss because it is solved, not dead: ``no_signal``,
``entropy`` and ``zero_loss`` stay quiet then.
A symptom that follows from another one being reported and still holding is not reported as well:
the first line names the cause. A policy that ran away from its reference (``kl``) writes text
that never ends, clips every ratio and has no spread; identical samples (``entropy``) or cut-off
ones (``truncated``) have no spread; no spread (``no_signal``) means a zero loss. Completions all cut off
(``truncated``) also explain a collapsed entropy: a run cut to a few tokens measures the entropy on those
alone (with the reasoner, the first tokens copy the prompt, nearly certain), so the length limit is named first.

The thresholds sit far from healthy runs: the commands' default runs report nothing. ``reason``
(dapo, 60 iterations) peaked at 0.045 nats of KL per token, 0.8 % of completions cut off and clip
fractions of 0.6 %, its entropy falling from 0.017 to 0.0006 nats per token as its batches became
solved; ``rlhf`` (ppo, 150 iterations) at 0.45 nats per token, 1.6 % cut off, a clip fraction of
3.6 % and an entropy of 0.23–0.39; gspo's sequence clip binds on about 16 % (docs/reasoning.md).

DPO trains on fixed preference pairs, not on its samples: only ``entropy``, ``kl`` and
``zero_loss`` apply to it. The fixes name the commands' options (``--max-new-tokens``,
``--temperature``, ``--learning-rate``, ``--kl-coef``, ...) with the values the run used.
Nothing here touches the training: the watcher only reads the stats.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from typing import Any, Callable

PATIENCE = 3
"""Iterations in a row a symptom must hold before it is reported (one bad batch is noise)."""
TRUNCATED_SHARE = 0.9
"""Share of completions cut off at --max-new-tokens (no EOS) from which the run is blind to endings."""
ENTROPY_FLOOR = 1e-3
"""Nats per token under which sampling has collapsed to one choice per position (the samples are identical)."""
ENTROPY_DROP = 0.05
"""Share of the first iteration's entropy (the reference's) under which the policy has collapsed onto a few texts.
(Relative as well as absolute: the reasoner writes its scratchpad at about 0.015 nats per token from the start.)"""
KL_PER_TOKEN = 1.0
"""Nats per token of KL to the reference above which the policy has run away (a 1-nat token is e× likelier)."""
CLIPPED_SHARE = 0.5
"""Share of clipped ratios from which most of each update is clipped away."""
SIGNAL_SHARE = 0.05
"""Share of groups with a reward spread at or under which (nearly) no group teaches anything."""
SOLVED = 0.9
"""Batch pass@1 (``env/accuracy``) from which no spread and little entropy mean solved, not dead."""

CLIP_KEYS = ("ppo/policy/clipfrac", "grpo/policy/clipfrac", "rloo/policy/clipfrac")
LOSS_KEYS = ("ppo/loss/policy", "grpo/loss/policy", "rloo/loss/policy", "rlvr/loss/policy", "dpo/loss")


def _number(stats: dict, key: str) -> float | None:
    value = stats.get(key)
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def _solved(stats: dict) -> bool:
    accuracy = _number(stats, "env/accuracy")
    return accuracy is not None and accuracy >= SOLVED


def _now(args, field: str, fmt: str = "g", what: str = "") -> str:
    """``--field-name (now VALUE)``: an option as the command line spells it, and the value this run used."""
    return f"--{field.replace('_', '-')} ({what}now {format(getattr(args, field), fmt)})"


# --- the symptoms: each reads one iteration's stats → (holds, value), or None where it does not apply ---

def truncated(stats: dict, args, start: dict) -> tuple[bool, float] | None:
    finished = _number(stats, "env/finished_frac")
    if finished is None or args.algo == "dpo":
        return None
    return 1 - finished >= TRUNCATED_SHARE, 1 - finished


def entropy(stats: dict, args, start: dict) -> tuple[bool, float] | None:
    value, before = _number(stats, "objective/entropy"), _number(start, "objective/entropy")
    if value is None:
        return None
    low = value < ENTROPY_FLOOR or (before is not None and value < ENTROPY_DROP * before)
    return low and not _solved(stats), value


def kl(stats: dict, args, start: dict) -> tuple[bool, float] | None:
    value, length = _number(stats, "objective/kl"), _number(stats, "tokens/responses_len_mean")
    if value is None or length is None:
        return None
    per_token = value / max(length, 1.0)
    return per_token > KL_PER_TOKEN, per_token


def clipped(stats: dict, args, start: dict) -> tuple[bool, float] | None:
    low, high = _number(stats, "rlvr/policy/clipfrac_low"), _number(stats, "rlvr/policy/clipfrac_high")
    value = low + high if low is not None and high is not None else next(
        (v for v in (_number(stats, k) for k in CLIP_KEYS) if v is not None), None)
    return None if value is None else (value >= CLIPPED_SHARE, value)


def no_signal(stats: dict, args, start: dict) -> tuple[bool, float] | None:
    """The share of groups (PPO: of the batch) whose rewards differ, or whether any advantage is non-zero."""
    if args.algo == "dpo":
        return None
    if _solved(stats):
        return False, 1.0
    share = _number(stats, "env/groups_with_signal")
    if share is not None:
        return share <= SIGNAL_SHARE, share
    advantage = _number(stats, f"{args.algo}/advantages_abs_mean")
    if advantage is not None:  # the rlhf command's groups: an advantage is non-zero only where a group has a spread
        return advantage == 0.0, float(advantage > 0)
    spread = _number(stats, "env/reward_std")
    return None if spread is None else (spread == 0.0, float(spread > 0))


def zero_loss(stats: dict, args, start: dict) -> tuple[bool, float] | None:
    value = next((v for v in (_number(stats, k) for k in LOSS_KEYS) if v is not None), None)
    return None if value is None else (value == 0.0 and not _solved(stats), value)


# --- what each says ---------------------------------------------------------------------------------

def _truncated_line(value: float, args) -> str:
    masked = " and --mask-truncated keeps all of them out of the loss" if getattr(args, "mask_truncated", False) else ""
    return (f"{value:.0%} of completions hit the length limit without finishing (no EOS), so their rewards "
            f"never see an ending{masked}; raise {_now(args, 'max_new_tokens')}")


def _entropy_line(value: float, args) -> str:
    return (f"{value:.2g} nats per token: the policy samples (nearly) the same tokens every time, so its samples "
            f"no longer differ; raise {_now(args, 'temperature')} or lower {_now(args, 'learning_rate')}")


def _kl_line(value: float, args) -> str:
    leash = _now(args, "dpo_beta", what="β, ") if args.algo == "dpo" else _now(args, "kl_coef", what="β, ")
    return (f"{value:.2f} nats per token from the reference: the policy has run away from it; "
            f"lower {_now(args, 'learning_rate')} or raise {leash}")


def _clipped_line(value: float, args) -> str:
    return (f"{value:.0%} of the probability ratios clipped: each minibatch step moves the policy past the clip range, "
            f"so the later steps of an update have no gradient; lower {_now(args, 'learning_rate')} "
            f"or {_now(args, 'ppo_epochs', 'd')}, or widen {_now(args, 'cliprange')}")


def _no_signal_line(value: float, args) -> str:
    if args.algo == "ppo":
        what = "every sample got the same reward"
        fix = f"raise {_now(args, 'temperature')}"
    else:
        what = ("no group's rewards differ" if value == 0 else f"only {value:.0%} of the groups' rewards differ")
        fix = f"raise {_now(args, 'temperature')} or {_now(args, 'group_size', 'd')}"
    if hasattr(args, "format_reward"):  # the reason command: partial credit gives all-wrong groups a spread
        fix += f", or give well-formed wrong answers some credit with {_now(args, 'format_reward')}"
    return f"{what}, so every advantage is 0 and nothing is learned; {fix}"


def _zero_loss_line(value: float, args) -> str:
    return ("no sample carries a gradient (every advantage is 0, or every token is masked out of the loss); "
            "the rewards differ and the completions end, so check the loss and its mask "
            "(--impl exercises: your Parts 3, 5 and 7)")


@dataclass(frozen=True)
class Symptom:
    name: str
    title: str
    read: Callable[[dict, Any, dict], tuple[bool, float] | None]
    """(this iteration's stats, the run's options, the first iteration's stats) → (holds, its reading), or None."""
    line: Callable[[float, Any], str]
    explained_by: tuple[str, ...] = ()
    """Symptoms that cause this one: while one of them is reported and holds, this one is not reported."""


SYMPTOMS: tuple[Symptom, ...] = (
    Symptom("kl", "KL exploding", kl, _kl_line),
    # A policy far from its reference writes text that never ends, has no spread, clips everything:
    # the KL line names the cause (a learning rate too high) and the rest follow from it.
    Symptom("truncated", "completions cut off", truncated, _truncated_line, explained_by=("kl",)),
    # Completions cut off after a few tokens are measured on those tokens only: where they copy the
    # prompt (nearly certain), the entropy reads as collapsed; the length limit is the cause to name.
    Symptom("entropy", "entropy collapsed", entropy, _entropy_line, explained_by=("truncated",)),
    Symptom("clipped", "clip fraction saturated", clipped, _clipped_line, explained_by=("kl",)),
    Symptom("no_signal", "no reward spread", no_signal, _no_signal_line, explained_by=("kl", "entropy", "truncated")),
    Symptom("zero_loss", "policy loss exactly 0", zero_loss, _zero_loss_line,
            explained_by=("kl", "entropy", "truncated", "no_signal")),
)
"""In the order they are checked (a cause before its consequences)."""


class DeadRunWatch:
    """Feed it each iteration's stats (:meth:`update`); it returns the lines of newly reported symptoms.

    ``args``: the run's options (``algo`` and those the fixes name). ``warnings``: one dict per
    reported symptom — ``symptom``, ``first`` and ``last`` (the iterations it held, from the
    first of the streak that reported it to the last of that streak), ``iteration`` (when it was
    reported), ``value`` (its reading then) and ``line`` — for ``summary.json`` and the curves.
    """

    def __init__(self, args, patience: int = PATIENCE):
        if patience < 1:
            raise ValueError(f"patience must be at least 1, got {patience}")
        self.args, self.patience = args, patience
        self.streak: dict[str, int] = {s.name: 0 for s in SYMPTOMS}
        self.warnings: list[dict] = []
        self.reported: dict[str, dict] = {}
        self.seen = 0
        self.start: dict = {}

    def update(self, stats: dict) -> list[str]:
        """The lines (``warning: ...``) of symptoms reported at this iteration; usually none."""
        self.seen += 1
        self.start = self.start or stats
        it = int(stats.get("iteration", self.seen))
        lines = []
        for symptom in SYMPTOMS:
            reading = symptom.read(stats, self.args, self.start)
            held = reading is not None and reading[0]
            report = self.reported.get(symptom.name)
            if not held:
                self.streak[symptom.name] = 0
                if report is not None:
                    report["open"] = False
                continue
            self.streak[symptom.name] += 1
            if report is not None:
                if report["open"]:
                    report["last"] = it
                continue
            explained = any(c in self.reported and self.streak[c] > 0 for c in symptom.explained_by)
            if self.streak[symptom.name] >= self.patience and not explained:
                first = it - self.streak[symptom.name] + 1
                line = (f"warning: {symptom.title} (iterations {first}–{it}): "
                        f"{symptom.line(reading[1], self.args)}")
                self.reported[symptom.name] = {"symptom": symptom.name, "first": first, "last": it, "iteration": it,
                                               "value": reading[1], "line": line, "open": True}
                self.warnings.append(self.reported[symptom.name])
                lines.append(line)
        return lines

    def summary(self) -> list[dict]:
        """The reported symptoms, for ``summary.json`` (``warnings``) and the curves."""
        return [{k: v for k, v in w.items() if k != "open"} for w in self.warnings]


def tell(line: str) -> None:
    """Print ``line`` to stdout (the log), above a progress bar if one is drawn; even with ``quiet``."""
    from tqdm import tqdm

    tqdm.write(line, file=sys.stdout)
    sys.stdout.flush()
