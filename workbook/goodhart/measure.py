"""The measurement of Part 11: a gold reward, proxies trained on its labels, best-of-n and RL against a proxy.

Gao, Schulman & Hilton's synthetic setup, on the review GPT of Part 3:

- **gold** (:func:`gold_scorer`): by default :class:`WordsGold`, VADER (Part 3's reward,
  ``workbook/lm/reward.py``) read by a reader who knows the reviews' words — a word nobody knows counts
  as the worst review instead of as neutral; or VADER itself (``--gold vader``). It scores every sample
  in microseconds, it is a fixed function the proxies never change, and it is what the proxies are
  taught to imitate — the stand-in for "what people want".
- **base samples** (:func:`sample_texts`): completions of the review openers by the pretrained
  review GPT, each scored by the gold (optionally a share of them first given a near-miss of their
  sentiment word, :func:`near_misses`: the lesson the base model's own writing holds too little of).
- **proxies** (:func:`train_proxy`): Part 3's ``RewardModel`` and ``preference_loss`` (the
  ``--impl``'s, the learner's own code) trained on pairs of base samples labelled by the gold
  (:func:`gold_pairs`: the sample the gold scores higher is "chosen"; optionally Bradley–Terry
  label noise). A proxy's scores are standardised on the base samples (mean 0, std 1), so a proxy
  score of +2 means "two standard deviations above what the base model writes".
- **best-of-n** (:func:`best_of_n_curve`): a pool of N samples for each of a few prompts, scored
  by gold and proxy; Part 11's ``best_of_n_gold`` gives E[gold of the proxy's pick among n] without
  bias, ``best_of_n_kl`` the KL of best-of-n from the base policy.
- **RL** (:class:`ProxyTask`): the review task of ``python -m workbook rlhf`` with the proxy (or an
  ensemble of proxies, Part 11's ``ensemble_reward`` of ``standardise_proxies``) as its reward; every
  iteration also logs the gold of the same samples (``env/gold_mean``), never seen by the learner.

Everything here is a function of its arguments and a seed; ``workbook/goodhart/run.py`` strings
the stages together and writes them to a run folder.
"""

from __future__ import annotations

import copy
import math
import random
import re
import time
from types import ModuleType
from typing import Any, Callable, Sequence

import torch
from jaxtyping import Float
from torch import Tensor

from workbook.goodhart import GOLDS
from workbook.lm.corpus import review_prompts
from workbook.lm.model import GPT, GPTConfig
from workbook.lm.tokenizer import CharTokenizer
from workbook.loop.task import ReviewTask
from workbook.rlhf.data import Rollout, load_part3, rollout
from workbook.rlhf.reward_model import encode_texts, score_texts
from workbook.runs import load_part

Pair = tuple[int, int]  # (chosen, rejected): indices into a list of samples


def load_part11(impl: str) -> ModuleType:
    """``exercises.part11_goodhart`` or ``solutions.part11_goodhart`` (the learner's by default)."""
    return load_part(impl, "part11_goodhart")


_WORD = re.compile(r"[a-z']+")


class WordsGold:
    """VADER, read by a reader who knows the reviews' words: gold = (1 − f)·VADER(text) − f.

    f is the share of the text's words (prompt included) that are neither words of the review corpus
    (``workbook/lm/corpus.py``'s 221) nor words of VADER's lexicon: the part of the review a reader cannot
    read counts as −1, the rest as VADER scores it. A completion cut off by the length limit ends in a part
    of a word, so the last word counts as known when it begins a known one — of every text, as the gold is not
    told where a text was cut: "the actor is excellin." passes too (a loophole the RL runs' logged samples use
    about 2 % of the time: docs/goodhart.md; kept, so that every measurement is of one gold). Why a fair gold: VADER scores a
    word it does not know as 0 (neutral), so "the film is perfectie." — a near-miss a proxy learns to like —
    costs VADER nothing; no person would call it a better review than "the film is good.".
    """

    def __init__(self):
        from workbook.lm.corpus import generate_reviews
        from workbook.lm.reward import VaderScorer

        self.vader = VaderScorer()
        words = {w for r in generate_reviews(4_000, seed=0) for w in _WORD.findall(r.text)}
        words |= {w for w in self.vader.lexicon if _WORD.fullmatch(w)}
        self.words = frozenset(words)
        self.starts = frozenset(w[:i] for w in words for i in range(1, len(w) + 1))

    def unknown_share(self, text: str) -> float:
        """f: the share of ``text``'s words no reader knows (0 for a text without words)."""
        words = _WORD.findall(text.lower())
        if not words:
            return 0.0
        unknown = sum(w not in self.words for w in words[:-1]) + (words[-1] not in self.starts)
        return unknown / len(words)

    def __call__(self, texts: Sequence[str]) -> Float[Tensor, " n"]:
        f = torch.tensor([self.unknown_share(t) for t in texts], dtype=torch.float32)
        return (1 - f) * self.vader(texts) - f


def gold_scorer(name: str) -> Callable[[Sequence[str]], Tensor]:
    """The gold reward: ``vader``, VADER's compound score in [-1, 1] (Part 3's reward); ``vader-words``,
    :class:`WordsGold` (also in [-1, 1])."""
    from workbook.lm.reward import VaderScorer

    if name == "vader":
        return VaderScorer()
    if name == "vader-words":
        return WordsGold()
    raise ValueError(f"unknown gold {name!r}; known: {', '.join(GOLDS)}")


# --- base samples -------------------------------------------------------------------------------

@torch.no_grad()
def sample_texts(lm: GPT, tok: CharTokenizer, prompts: list[str], *, max_new_tokens: int, seed: int,
                 chunk: int = 512) -> list[str]:
    """prompt + one completion of each prompt by ``lm`` at temperature 1 (what RL and best-of-n start from)."""
    gen = torch.Generator().manual_seed(seed)
    return rollout(lm, tok, prompts, max_new_tokens=max_new_tokens, temperature=1.0, generator=gen, chunk=chunk).texts


def bank_prompts(n: int, seed: int) -> list[str]:
    """The openers of the base samples the proxies learn from (the RL run's openers are drawn the same way)."""
    return review_prompts(n, seed=7_919 * (seed + 1))


def pool_prompts(n: int, seed: int) -> list[str]:
    """``n`` distinct openers for best-of-n's pools (distinct: each pool is its own prompt)."""
    seen: list[str] = []
    for text in review_prompts(200, seed=104_729 * (seed + 1)):
        if text not in seen:
            seen.append(text)
        if len(seen) == n:
            return seen
    raise ValueError(f"fewer than {n} distinct review openers")


_LETTERS = "abcdefghijklmnopqrstuvwxyz"


def misspell(word: str, rng: random.Random) -> str:
    """``word`` with one edit (two, one time in three): a letter doubled, dropped, changed or added (a two-letter
    word is not shortened: it gets a letter added) — the kind of near-miss a policy writes once a proxy pays for it."""
    for _ in range(rng.choice([1, 1, 2])):
        i = rng.randrange(len(word))
        kind = rng.choice(["double", "drop", "change", "add"])
        if kind == "double":
            word = word[:i] + word[i] + word[i:]
        elif kind == "drop" and len(word) > 2:
            word = word[:i] + word[i + 1:]
        elif kind == "change":
            word = word[:i] + rng.choice(_LETTERS) + word[i + 1:]
        else:  # "add", or "drop" on two letters
            word = word[:i] + rng.choice(_LETTERS) + word[i:]
    return word


def near_misses(texts: list[str], prompts: list[str], share: float, *, seed: int,
                sentiment: Callable[[str], bool]) -> tuple[list[str], list[int]]:
    """``texts`` with ``share`` of them (the nearest whole number, drawn by ``seed``) given a near-miss of a word of
    their completion: a sentiment word (``sentiment(word)``: VADER scores it) where the completion has one, else any
    word of three letters or more, misspelled by :func:`misspell`. Returns (the texts, the indices changed: an edit
    that gives the word back unchanged is not one).

    Why: the base model misspells too rarely for any number of pairs of its writing to teach a proxy what a
    misspelled "excellent" is worth, so every proxy, whatever its data, paid for the near-misses a policy finds
    (docs/goodhart.md: 10× and 100× the pairs, a bank of 20,000 samples, a hotter bank). Labelled by the gold like
    every other sample, these teach it — more thoroughly the more pairs a proxy sees.
    """
    rng = random.Random(9_000 + seed)
    texts = list(texts)
    changed = []
    for j in rng.sample(range(len(texts)), round(len(texts) * share)):  # round: 100 × 0.29 is 28.999…
        text, prompt = texts[j], prompts[j]
        start = len(prompt) if text.startswith(prompt) else 0
        words = [(m.start(), m.group()) for m in re.finditer(r"[a-z]+", text[start:]) if len(m.group()) >= 3]
        if not words:
            continue
        at, word = rng.choice([w for w in words if sentiment(w[1])] or words)
        wrong = misspell(word, rng)
        if wrong != word:
            at += start
            texts[j] = text[:at] + wrong + text[at + len(word):]
            changed.append(j)
    return texts, sorted(changed)


# --- labels -------------------------------------------------------------------------------------

def gold_pairs(gold: Float[Tensor, "samples"], n_pairs: int, *, seed: int, label_noise: float = 0.0,
               exclude: set[frozenset] | None = None) -> list[Pair]:
    """``n_pairs`` distinct pairs of samples with different gold scores, each ordered (chosen, rejected).

    The gold labels the pair: the sample it scores higher is chosen. ``label_noise`` > 0 draws the
    label from Bradley–Terry instead, P(i ≻ j) = σ((gold_i − gold_j) / label_noise), as a noisy
    human would. Pairs the gold ties are skipped (no preference to learn). The first k pairs of a
    seed are the same for every ``n_pairs`` ≥ k, so a larger proxy's data contains a smaller one's.
    ``exclude``: pairs (as frozensets) not to draw again (another proxy's, or the held-out set).
    """
    rng = random.Random(seed)
    n = len(gold)
    values = gold.tolist()
    taken: set[frozenset] = set(exclude or ())
    pairs: list[Pair] = []
    tries = 0
    while len(pairs) < n_pairs:
        tries += 1
        if tries > 50 * n_pairs + 1000:
            raise ValueError(f"cannot draw {n_pairs} distinct pairs with different gold scores from {n} samples")
        i, j = rng.randrange(n), rng.randrange(n)
        key = frozenset((i, j))
        if i == j or values[i] == values[j] or key in taken:
            continue
        taken.add(key)
        if label_noise > 0:
            p_i = 1.0 / (1.0 + math.exp(-(values[i] - values[j]) / label_noise))
            first = rng.random() < p_i
        else:
            first = values[i] > values[j]
        pairs.append((i, j) if first else (j, i))
    return pairs


# --- proxies ------------------------------------------------------------------------------------

def train_proxy(part3: ModuleType, lm: GPT, tok: CharTokenizer, texts: list[str], pairs: list[Pair], *, steps: int,
                batch_size: int, lr: float, seed: int) -> tuple[torch.nn.Module, list[float]]:
    """Part 3's ``RewardModel`` on a copy of ``lm``, trained with ``preference_loss`` on ``pairs`` of ``texts``.

    ``steps`` minibatches of ``batch_size`` pairs drawn with replacement (a proxy with few pairs sees
    each many times: it overfits, as a small reward model does). Returns (the model in eval mode, losses).
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = part3.RewardModel(copy.deepcopy(lm))
        opt = torch.optim.Adam(model.parameters(), lr=lr)
        order = torch.Generator().manual_seed(seed)
        losses = []
        model.train()
        for _ in range(steps):
            idx = torch.randint(len(pairs), (min(batch_size, len(pairs)),), generator=order).tolist()
            chosen = model(*encode_texts([texts[pairs[i][0]] for i in idx], tok))
            rejected = model(*encode_texts([texts[pairs[i][1]] for i in idx], tok))
            loss = part3.preference_loss(chosen, rejected)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            losses.append(loss.item())
    return model.eval(), losses


def pair_accuracy(scores: Float[Tensor, "samples"], pairs: list[Pair]) -> float:
    """How often the proxy scores the chosen sample of a pair above the rejected one (ties count half)."""
    chosen = scores[[c for c, _ in pairs]]
    rejected = scores[[r for _, r in pairs]]
    return ((chosen > rejected).float() + 0.5 * (chosen == rejected).float()).mean().item()


class Proxy:
    """A trained proxy as a scorer: texts -> its score standardised by its mean and std on the base samples."""

    def __init__(self, model: torch.nn.Module, tok: CharTokenizer, mean: float, std: float):
        self.model, self.tok, self.mean, self.std = model, tok, mean, std

    def raw(self, texts: Sequence[str]) -> Tensor:
        return score_texts(self.model, self.tok, list(texts), chunk=256)

    def __call__(self, texts: Sequence[str]) -> Tensor:
        return (self.raw(texts) - self.mean) / self.std

    def state(self) -> dict:
        return {"config": vars(self.model.lm.config).copy(),
                "state_dict": {k: v.detach().clone() for k, v in self.model.state_dict().items()},
                "mean": self.mean, "std": self.std}

    @classmethod
    def from_state(cls, part3: ModuleType, state: dict, tok: CharTokenizer) -> "Proxy":
        model = part3.RewardModel(GPT(GPTConfig(**state["config"])))
        model.load_state_dict(state["state_dict"])
        return cls(model.eval(), tok, state["mean"], state["std"])


class Ensemble:
    """k proxies as one scorer: each standardised on the base samples (Part 11's ``standardise_proxies``), then
    combined by Part 11's ``ensemble_reward`` (mean, wco = min, uwo = mean − λ·variance)."""

    def __init__(self, part11: ModuleType, members: list[Proxy], reference_texts: list[str], method: str,
                 uwo_lambda: float):
        self.part11, self.members, self.method, self.uwo_lambda = part11, members, method, uwo_lambda
        self.reference = torch.stack([m.raw(reference_texts) for m in members])

    def members_scores(self, texts: Sequence[str]) -> Tensor:
        raw = torch.stack([m.raw(texts) for m in self.members])
        return self.part11.standardise_proxies(raw, self.reference)

    def __call__(self, texts: Sequence[str]) -> Tensor:
        return self.part11.ensemble_reward(self.members_scores(texts), self.method, uwo_lambda=self.uwo_lambda).detach()


# --- best-of-n ----------------------------------------------------------------------------------

def n_values(pool_size: int) -> list[int]:
    """1, 2, 4, ... up to the pool size (the pool size itself last)."""
    ns = [1 << k for k in range(int(math.log2(pool_size)) + 1)]
    return ns if ns[-1] == pool_size else ns + [pool_size]


def empirical_kl_bound(part11: ModuleType, proxy: Tensor, n: int) -> float:
    """Best-of-n's exact KL when the base policy is the pool's empirical distribution (repeats share a score).

    Identical texts get identical proxy scores, so the pool is a discrete distribution over its
    distinct texts, ordered by the proxy: Part 11's ``best_of_n_kl_discrete`` gives the KL of
    best-of-n over it, which stays below the analytic log n − (n−1)/n when texts repeat.
    """
    values, counts = torch.unique(proxy.double(), return_counts=True)  # sorted ascending
    return part11.best_of_n_kl_discrete((counts.double() / counts.sum()).to(torch.float64), n)


def best_of_n_curve(part11: ModuleType, proxy: Float[Tensor, "prompts N"], gold: Float[Tensor, "prompts N"]) -> list[dict]:
    """For n = 1, 2, 4, ... N: the analytic KL, and the proxy's and the gold's expected score of best-of-n
    (each the mean over prompts of Part 11's unbiased ``best_of_n_gold``)."""
    rows = []
    for n in n_values(proxy.shape[1]):
        rows.append({
            "n": n, "kl": part11.best_of_n_kl(n),
            "kl_discrete": float(sum(empirical_kl_bound(part11, p, n) for p in proxy) / len(proxy)),
            "proxy": float(sum(part11.best_of_n_gold(p, p, n) for p in proxy) / len(proxy)),
            "gold": float(sum(part11.best_of_n_gold(p, g, n) for p, g in zip(proxy, gold)) / len(proxy)),
        })
    return rows


# --- RL -----------------------------------------------------------------------------------------

class ProxyTask(ReviewTask):
    """The review task with a proxy (or an ensemble) as its reward, and the gold of every batch logged beside it."""

    name = "review"
    panels = (("env/reward_mean", "proxy (the reward optimised)"), ("env/gold_mean", "gold (never optimised)"),
              ("env/distinct2", "distinct-2 of the batch"))

    def __init__(self, scorer, gold):
        super().__init__(scorer=scorer)
        self.gold = gold

    def batch_stats(self, batch: Rollout, scores: Tensor) -> dict[str, float]:
        return super().batch_stats(batch, scores) | {"env/gold_mean": self.gold(batch.texts).mean().item()}

    def evaluate(self, policy, reference, tok, prompts, *, temperature, max_new_tokens, seed) -> dict:
        result = super().evaluate(policy, reference, tok, prompts, temperature=temperature,
                                  max_new_tokens=max_new_tokens, seed=seed)
        result["gold"] = self.gold(result["texts"]).mean().item()
        return result


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


__all__ = ["load_part11", "load_part3", "GOLDS", "WordsGold", "gold_scorer", "sample_texts", "bank_prompts",
           "pool_prompts", "gold_pairs", "train_proxy", "pair_accuracy", "Proxy", "Ensemble", "n_values", "best_of_n_curve", "ProxyTask", "timed"]
