"""Checks on part0_theory.md: it covers its sixteen topics, every cross-reference resolves, every
image exists, and its worked examples agree with the reference solutions.

These tests check the document and the reference solutions only (never your exercises), so they
pass whatever ``--impl`` is. If one fails after you changed a reference solution or renamed a
test, update the document (and ``scripts/make_figures.py`` for the figures).
"""

from __future__ import annotations

import ast
import importlib
import math
import re
from functools import cache
from pathlib import Path

import torch
from torch.distributions.categorical import Categorical

from workbook import mistakes

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "part0_theory.md"
FIGURE_SCRIPT = ROOT / "scripts" / "make_figures.py"
MAX_FIGURE_BYTES = 150 * 1024

# Section number -> phrases the section must contain (case-insensitive): the ten topics.
TOPICS = {
    1: ["state", "action", "policy", "trajectory", "reward", "language model"],
    2: ["log-derivative", "policy-gradient theorem", "REINFORCE", "variance"],
    3: ["rewards-to-go", "baseline", "unbiased", "Q^\\pi", "V^\\pi", "advantage"],
    4: ["GAE", "k-step", "recursion", "termination", "truncation", "bias"],
    5: ["importance sampling", "probability ratio", "epochs"],
    6: ["clip", "gradient is zero", "approximate KL", "clip fraction"],
    7: ["value loss", "value clipping", "entropy bonus", "full objective", "advantage normalisation",
        "annealing", "gradient-norm clipping", "orthogonal"],
    8: ["reward model", "Bradley–Terry", "value head", "per-token reward", "k3", "adaptive",
        "reward hacking", "mode collapse", "whiten"],
    9: ["common mistakes"],
    10: ["sampled baseline", "leave-one-out", "unbiased", "standard deviation", "k3", "length normalisation",
         "closed form", "implicit reward", "Bradley–Terry", "Z(x)"],
    12: ["Independent", "log_prob", "does not depend on the state", "clip",
         "store", "parallel formula", "frozen", "discounted return", "Divide only"],
    13: ["verifiable", "critic", "Dr. GRPO", "standard deviation", "clip-higher", "dynamic sampling", "token-level",
         "overlong", "GSPO", "CISPO", "pass@k", "Yue et al."],
    14: ["NoopReset", "MaxAndSkip", "EpisodicLife", "FireReset", "84 × 84", "ClipReward", "FrameStack",
         "shared", "obs / 255", "c_1", "terminal_on_life_loss"],
    15: ["state", "whole context", "turn budget", "token budget", "truncated", "only the model's", "context",
         "bias", "hallucinated", "KL", "entropy", "broadcast", "critic", "zero reward", "per-turn",
         "reward hacking", "echo", "eval", "9**9**9", "non-ASCII", "KV cache", "retokenisation",
         "tool_mask", "MultiTurnEnv", "response_mask", "action_mask", "docs/agents.md"],
    11: ["torchrun", "rank", "all-reduce", "divided by $N$", "equal shares", "seed", "broadcast", "whiten",
         "global batch", "timeout"],
    16: ["stale", "mismatch", "max_staleness", "bfloat16", "top-p", "importance sampling", "target",
         "behaviour", "per-token", "product", "variance", "truncated IS", "masked IS", "bias",
         "trust region", "DeepSeek-V3.2", "negative", "k1 in the reward", "k3 in the loss",
         "importance-weighted k3", "other direction", "max(S, L)", "speed-up", "lag", "fixed-lag",
         "free-running", "reproducible", "docs/async_rl.md"],
    17: ["gold", "proxy", "regressional", "extremal", "causal", "adversarial", "alpha", "beta", "log n − (n−1)/n",
         "upper bound", "ties", "unbiased", "poor ruler", "WCO", "UWO", "standardised", "KL leash", "early stopping",
         "held-out gold", "refreshing the reward model", "section 8", "docs/goodhart.md"],
}

EXERCISE_REF = re.compile(r"`((?:exercises|solutions)/part\d+_\w+\.py)::([\w.]+)`")
TEST_REF = re.compile(r"`(tests/test_\w+\.py)::(\w+)`")
MISTAKE_REF = re.compile(r"`(part\d+_\w+:\w+:\w+)`")
IMAGE_REF = re.compile(r"!\[[^\]]*\]\(([^)\s]+)\)")
ANCHOR_REF = re.compile(r"\]\(#([^)]+)\)")
SECTION = re.compile(r"^## (\d+)\. (.+)$", re.MULTILINE)


@cache
def doc() -> str:
    return DOC.read_text(encoding="utf-8")


def sections() -> dict[int, str]:
    text = doc()
    heads = list(SECTION.finditer(text))
    out = {}
    for head, nxt in zip(heads, heads[1:] + [None]):
        out[int(head.group(1))] = text[head.start(): nxt.start() if nxt else len(re.split(r"^## Further", text, flags=re.M)[0])]
    return out


@cache
def top_level_names(path: Path) -> dict[str, set[str]]:
    """Top-level names of a Python file -> the method names if it is a class, else an empty set."""
    names: dict[str, set[str]] = {}
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names[node.name] = set()
        elif isinstance(node, ast.ClassDef):
            names[node.name] = {n.name for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                if isinstance(target, ast.Name):
                    names[target.id] = set()
    return names


def number(cell: str) -> float:
    return float(cell.strip().replace("−", "-"))


def decimals(cell: str) -> int:
    cell = cell.strip()
    return len(cell.split(".")[1]) if "." in cell else 0


def assert_printed(cell: str, value: float, what: str) -> None:
    """The printed number must be ``value`` rounded to the precision it is printed with."""
    tolerance = 0.5 * 10 ** -decimals(cell) + 1e-6
    assert abs(number(cell) - value) <= tolerance, (
        f"part0_theory.md prints {cell.strip()} for {what}, but the reference solution gives {value:.6f}")


def table_after(marker: str) -> list[list[str]]:
    """Rows (as lists of cells) of the markdown table right after ``<!-- worked-example: marker -->``."""
    text = doc()
    tag = f"<!-- worked-example: {marker} -->"
    assert tag in text, f"part0_theory.md lost its worked example marker {tag}"
    rows = []
    for line in text.split(tag, 1)[1].lstrip("\n").splitlines():
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not all(set(c) <= set("-: ") for c in cells):  # skip the separator row
            rows.append(cells)
    assert len(rows) >= 2, f"no table found after {tag}"
    return rows


# --- structure --------------------------------------------------------------------------

def test_all_topics_are_present():
    found = sections()
    assert sorted(found) == sorted(TOPICS), f"expected sections {sorted(TOPICS)} (headings '## N. ...'), found {sorted(found)}"
    for n, phrases in TOPICS.items():
        missing = [p for p in phrases if p.lower() not in found[n].lower()]
        assert not missing, f"section {n} no longer mentions {missing}"


def test_every_section_names_its_exercises_and_tests():
    for n, body in sections().items():
        assert EXERCISE_REF.search(body), f"section {n} names no exercise as `exercises/partN_x.py::name`"
        assert TEST_REF.search(body), f"section {n} names no test as `tests/test_partN_x.py::test_name`"


def test_referenced_exercises_exist():
    refs = EXERCISE_REF.findall(doc())
    assert refs
    for file, name in refs:
        path = ROOT / file
        assert path.exists(), f"part0_theory.md names `{file}::{name}` but {file} does not exist"
        top, _, method = name.partition(".")
        names = top_level_names(path)
        assert top in names, f"part0_theory.md names `{file}::{name}` but {file} has no top-level {top!r}"
        assert not method or method in names[top], f"part0_theory.md names `{file}::{name}` but {top} has no method {method!r}"
        # The reference answer has the same name.
        other = ROOT / "solutions" / Path(file).name
        assert top in top_level_names(other), f"{other.relative_to(ROOT)} has no {top!r}"


def test_referenced_tests_exist():
    refs = TEST_REF.findall(doc())
    assert refs
    for file, name in refs:
        path = ROOT / file
        assert path.exists(), f"part0_theory.md names `{file}::{name}` but {file} does not exist"
        assert name.startswith("test_") and name in top_level_names(path), (
            f"part0_theory.md names `{file}::{name}`, which is not a test function in {file}")


def test_referenced_mistakes_exist():
    known = {m.id for m in mistakes.all_mistakes()}
    refs = MISTAKE_REF.findall(doc())
    assert refs
    unknown = sorted(set(refs) - known)
    assert not unknown, f"part0_theory.md names mistakes that are not registered in workbook/mistakes: {unknown}"


def test_common_mistakes_are_one_line_each_with_a_known_wrong_version():
    bullets = [line for line in sections()[9].splitlines() if line.startswith("- ")]
    assert len(bullets) >= 10
    for line in bullets:
        assert len(MISTAKE_REF.findall(line)) == 1, f"section 9: each line names exactly one known mistake: {line!r}"
    ids = [MISTAKE_REF.search(line).group(1) for line in bullets]
    assert len(ids) == len(set(ids)), "section 9 lists a mistake twice"


def test_images_exist_are_small_and_generated_by_the_script():
    links = IMAGE_REF.findall(doc())
    assert len(links) >= 2
    script = FIGURE_SCRIPT.read_text(encoding="utf-8")
    for link in links:
        path = ROOT / link
        assert path.is_file(), f"part0_theory.md shows {link}, which does not exist (run scripts/make_figures.py)"
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", f"{link} is not a PNG"
        assert path.stat().st_size < MAX_FIGURE_BYTES, f"{link} is {path.stat().st_size} bytes; keep figures < 150 KB"
        assert f'"{path.name}"' in script, f"{link} is not drawn by scripts/make_figures.py"
    committed = {p.relative_to(ROOT).as_posix() for p in (ROOT / "docs" / "figures").glob("*.png")}
    assert not committed - set(links), f"figures nobody links to: {sorted(committed - set(links))}"


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_internal_links_resolve():
    anchors = {slug(h) for h in re.findall(r"^#+ (.+)$", doc(), flags=re.MULTILINE)}
    for anchor in ANCHOR_REF.findall(doc()):
        assert anchor in anchors, f"link to #{anchor}, but no heading has that anchor"


def test_math_avoids_constructs_github_misrenders():
    in_fence = False
    for i, line in enumerate(doc().splitlines(), 1):
        if line.startswith("```"):
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        code_free = re.sub(r"`[^`]*`", "", line)
        assert code_free.count("$") % 2 == 0, f"line {i}: unbalanced $ in {line!r}"
        assert "\\begin{align" not in code_free, f"line {i}: use a ```math block for aligned equations"
        for math in re.findall(r"\$([^$]+)\$", code_free):
            # Markdown runs first and eats a backslash before ASCII punctuation (\, \{ \\ ...).
            eaten = re.findall(r"\\[!-/:-@\[-`{-~]", math)
            assert not eaten, f"line {i}: {eaten} inside $...$ is mangled by GitHub; use \\lbrace, \\ , or a ```math block"
            if line.startswith("|"):
                assert "|" not in math, f"line {i}: a bare | inside math in a table breaks the table; use \\lvert/\\rvert or \\mid"


# --- worked example (a): GAE --------------------------------------------------------------

GAE_ROWS = ("reward", "value", "TD error", "advantage", "return", "whitened")


def gae_table() -> dict[str, list[str]]:
    rows = table_after("gae")
    header, body = rows[0], rows[1:]
    table = {}
    for label, row in zip(GAE_ROWS, body):
        assert row[0].startswith(label), f"GAE table: expected a row starting with {label!r}, got {row[0]!r}"
        assert len(row) == len(header), f"GAE table: row {label!r} has {len(row) - 1} numbers, header has {len(header) - 1}"
        table[label] = row[1:]
    assert len(body) == len(GAE_ROWS)
    assert [int(c) for c in header[1:]] == list(range(len(header) - 1))
    return table


def test_worked_example_gae_matches_reference():
    part1 = importlib.import_module("solutions.part1_ppo_core")
    part3 = importlib.import_module("solutions.part3_rlhf")
    table = gae_table()
    assert len(table["reward"]) == 9, "the GAE example is a 9-token response"
    rewards = torch.tensor([number(c) for c in table["reward"]])[:, None]
    values = torch.tensor([number(c) for c in table["value"]])[:, None]
    kwargs = dict(next_value=torch.zeros(1), next_terminated=torch.tensor([False]), rewards=rewards,
                  values=values, terminated=torch.zeros(9, 1, dtype=torch.bool), gamma=1.0)
    deltas = part1.compute_advantages(**kwargs, gae_lambda=0.0)[:, 0]
    advantages = part1.compute_advantages(**kwargs, gae_lambda=0.95)[:, 0]
    returns = advantages + values[:, 0]
    # Part 3's TRL-style GAE on the same response: same returns, then whitened advantages.
    _, whitened, returns3 = part3.compute_advantages(values.T, rewards.T, torch.ones(1, 9), 1.0, 0.95)
    torch.testing.assert_close(returns3[0], returns, rtol=1e-5, atol=1e-5,
                               msg="Part 1's and Part 3's GAE disagree on the worked example's returns")
    for label, computed in (("TD error", deltas), ("advantage", advantages), ("return", returns),
                            ("whitened", whitened[0])):
        for t, (cell, value) in enumerate(zip(table[label], computed.tolist())):
            assert_printed(cell, value, f"the {label} at t={t} (γ=1, λ=0.95)")
    assert "0.75 at $t = 0$" in doc() and abs(rewards.sum().item() - 0.75) < 1e-6


def test_gae_figure_uses_the_documents_example():
    script = ast.parse(FIGURE_SCRIPT.read_text(encoding="utf-8"))
    constants = {t.id: ast.literal_eval(node.value) for node in script.body if isinstance(node, ast.Assign)
                 for t in node.targets if isinstance(t, ast.Name) and t.id in ("GAE_REWARDS", "GAE_VALUES")}
    table = gae_table()
    assert constants["GAE_REWARDS"] == [number(c) for c in table["reward"]]
    assert constants["GAE_VALUES"] == [number(c) for c in table["value"]]


# --- worked example (b): the clipped surrogate's six cases ---------------------------------

EPS = 0.2
CASE_COLUMNS = ("row", "case", "A", "r", "rA", "clipA", "term", "grad")


def clipped_objective(part1, advantages: torch.Tensor, ratios: torch.Tensor, old_requires_grad: bool = False):
    """The reference objective on a minibatch whose ratios are exactly ``ratios`` (two-action policies)."""
    dist = Categorical(logits=torch.zeros(len(ratios), 2))
    actions = torch.zeros(len(ratios), dtype=torch.long)
    old_logprobs = (dist.log_prob(actions) - torch.log(ratios)).detach().requires_grad_(old_requires_grad)
    return part1.calc_clipped_surrogate_objective(dist, actions, advantages, old_logprobs, EPS), old_logprobs


def test_worked_example_clipped_surrogate_matches_reference():
    part1 = importlib.import_module("solutions.part1_ppo_core")
    rows = table_after("clipped-surrogate")
    header, body = rows[0], rows[1:]
    assert len(header) == len(CASE_COLUMNS) and "0.8, 1.2" in header[5], "the clipped-surrogate table's columns changed"
    table = [dict(zip(CASE_COLUMNS, row)) for row in body]
    advantages = torch.tensor([number(r["A"]) for r in table])
    ratios = torch.tensor([number(r["r"]) for r in table])
    n = len(table)

    # The example relies on the advantages being already normalised (mean 0, unbiased std 1).
    assert abs(advantages.mean().item()) < 1e-7 and abs(advantages.std().item() - 1) < 1e-7

    objective, old_logprobs = clipped_objective(part1, advantages, ratios, old_requires_grad=True)
    objective.backward()
    # d objective / d old_logprob_i = -(1/n) * d term_i / d r_i * r_i
    grads = -n * old_logprobs.grad / ratios

    for i, row in enumerate(table):
        A, r = advantages[i].item(), ratios[i].item()
        # The row's label says which case it is.
        case = row["case"]
        if "inside" in case:
            assert 1 - EPS <= r <= 1 + EPS, f"row {i + 1} is labelled inside but r = {r}"
        if "r < 1-" in case.replace(" ", ""):
            assert r < 1 - EPS, f"row {i + 1}: label {case!r} but r = {r}"
        if "r > 1+" in case.replace(" ", ""):
            assert r > 1 + EPS, f"row {i + 1}: label {case!r} but r = {r}"
        if "\\hat A > 0" in case:
            assert A > 0
        if "\\hat A < 0" in case:
            assert A < 0
        assert_printed(row["rA"], r * A, f"r·Â in row {i + 1}")
        assert_printed(row["clipA"], min(max(r, 1 - EPS), 1 + EPS) * A, f"clip(r)·Â in row {i + 1}")
        # Row i's term, read off the reference: reset its ratio to 1 (term = Â_i there) and
        # measure how the mean moves. Only row i's term changes: normalisation uses advantages only.
        reset = ratios.clone()
        reset[i] = 1.0
        without, _ = clipped_objective(part1, advantages, reset)
        term = advantages[i].item() + n * (objective.item() - without.item())
        assert_printed(row["term"], term, f"the term of row {i + 1}")
        assert_printed(row["grad"], grads[i].item(), f"∂term/∂r in row {i + 1}")

    match = re.search(r"objective = mean of the term column = (\S+)", doc())
    assert match, "the clipped-surrogate example lost its 'objective = mean of the term column = ...' line"
    assert_printed(match.group(1), objective.item(), "the minibatch objective")

    # Part 3's TRL-style loss on the same tokens: the negated objective, and the binding-clip fraction.
    part3 = importlib.import_module("solutions.part3_rlhf")
    old = torch.zeros(1, n)
    zeros, mask = torch.zeros(1, n), torch.ones(1, n)
    pg_loss, _, stats = part3.ppo_loss(old, zeros, old + torch.log(ratios)[None], zeros, mask, advantages[None],
                                       zeros, EPS, EPS, 0.1)
    for name, value in (("pg_loss", pg_loss), ("policy/clipfrac", stats["policy/clipfrac"])):
        match = re.search(re.escape(name) + r" = (\S+?),?\s", doc())
        assert match, f"the clipped-surrogate example lost its '{name} = ...' statement"
        assert_printed(match.group(1), value.item(), f"Part 3's {name} on the example")
    assert abs(pg_loss.item() + objective.item()) < 1e-6

    outside = int(((ratios - 1).abs() > EPS).sum())
    match = re.search(r"\((\d+) of (\d+) above\)", doc())
    assert match and (int(match.group(1)), int(match.group(2))) == (outside, n), "the clip fraction quoted for the example is wrong"


# --- worked example (c): KL estimators ------------------------------------------------------

def test_worked_example_kl_estimators_match_reference():
    part3 = importlib.import_module("solutions.part3_rlhf")
    rows = table_after("kl")
    header, body = rows[0], rows[1:]
    kinds = [re.search(r"`(\w+)`", cell).group(1) for cell in header[3:]]
    assert kinds == ["kl", "abs", "mse", "k3"], f"KL table columns changed: {kinds}"
    tokens, expectation = body[:-1], body[-1]
    assert expectation[0].startswith("expectation")
    policy = torch.tensor([number(row[1]) for row in tokens], dtype=torch.float64)
    reference = torch.tensor([number(row[2]) for row in tokens], dtype=torch.float64)
    assert abs(policy.sum().item() - 1) < 1e-9 and abs(reference.sum().item() - 1) < 1e-9
    logp, ref_logp = policy.log(), reference.log()
    for column, kind in enumerate(kinds, start=3):
        per_token = part3.kl_penalty(logp, ref_logp, kind)
        for row, value in zip(tokens, per_token.tolist()):
            assert_printed(row[column], value, f"kind={kind!r} for token {row[0]}")
        assert_printed(expectation[column], (policy * per_token).sum().item(), f"the expectation of kind={kind!r}")
    exact = part3.kl_penalty(logp[None], ref_logp[None], "full").item()
    match = re.search(r"full KL = (\S+?)\.?\s", doc())
    assert match, "the KL example lost its 'full KL = ...' sentence"
    assert_printed(match.group(1), exact, "the full KL")


# --- worked examples (d) and (e): GRPO/RLOO advantages, the DPO loss ---------------------------

def numbers(cell: str) -> list[str]:
    return [c.strip() for c in cell.split(",")]


def test_worked_example_group_advantages_match_reference():
    part5 = importlib.import_module("solutions.part5_beyond_ppo")
    rows = table_after("grpo")
    header, body = rows[0], rows[1:]
    assert [re.search(r"`scale=\"(\w+)\"`", c).group(1) for c in header[2:5]] == ["group", "batch", "none"]
    assert header[5] == "RLOO"
    rewards = torch.tensor([number(c) for row in body for c in numbers(row[1])], dtype=torch.float64)
    k = len(numbers(body[0][1]))
    zeros = torch.zeros(len(rewards), 1, dtype=torch.float64)
    columns = {2: part5.grpo_advantages(rewards, k, "group"), 3: part5.grpo_advantages(rewards, k, "batch"),
               4: part5.grpo_advantages(rewards, k, "none"),
               5: part5.rloo_advantages(rewards, zeros, zeros, torch.ones_like(zeros), k, 0.0)[0]}
    for column, expected in columns.items():
        for g, row in enumerate(body):
            cells = numbers(row[column])
            assert len(cells) == k, f"GRPO table, group {row[0]}: {len(cells)} numbers in {header[column]!r}"
            for i, cell in enumerate(cells):
                assert_printed(cell, expected[g * k + i].item(), f"{header[column]} of sample {i + 1} in group {row[0]}")


def test_worked_example_dpo_matches_reference():
    part5 = importlib.import_module("solutions.part5_beyond_ppo")
    rows = table_after("dpo")
    chosen, rejected = rows[1], rows[2]
    assert chosen[0] == "chosen" and rejected[0] == "rejected"
    beta = number(re.search(r"With β = (\S+) the margin", doc()).group(1))
    one = torch.ones(1, 1)
    args = [torch.tensor([[number(row[i])]]) for row, i in ((chosen, 1), (rejected, 1), (chosen, 2), (rejected, 2))]
    loss, stats = part5.dpo_loss(*args, one, one, beta)
    assert_printed(chosen[3], stats["rewards/chosen"].item(), "the implicit reward of the chosen response")
    assert_printed(rejected[3], stats["rewards/rejected"].item(), "the implicit reward of the rejected response")
    margin = re.search(r"the margin is (\S+) and", doc()).group(1)
    assert_printed(margin, stats["rewards/margins"].item(), "the DPO margin")
    assert_printed(re.search(r"DPO loss = (\S+?) ", doc()).group(1), loss.item(), "the DPO loss")


def test_worked_example_gaussian_matches_reference():
    import numpy as np

    part4 = importlib.import_module("solutions.part4_continuous")
    rows = {row[0]: row[1:] for row in table_after("gaussian")[1:]}
    actor = part4.GaussianActor(1, 2, 4)
    with torch.no_grad():  # a head of zeros: μ is its bias, whatever the observation
        actor.mean[-1].weight.zero_()
        actor.mean[-1].bias.copy_(torch.tensor([0.5, -0.3]))
        actor.log_std.copy_(torch.tensor([-0.5, 0.2]))
    sample = torch.tensor([[1.4, -1.0]], requires_grad=False)
    dist = actor.dist(torch.zeros(1, 1))
    sent = torch.as_tensor(part4.clip_action(sample, -np.ones(2, dtype=np.float32), np.ones(2, dtype=np.float32)))
    log_prob = dist.log_prob(sample)
    grad_mu, grad_log_std = torch.autograd.grad(log_prob.sum(), [dist.mean, actor.log_std])
    expected = {
        "$\\sigma = e^{\\log \\sigma}$": dist.stddev[0],
        "$z = (a - \\mu)/\\sigma$": ((sample - dist.mean) / dist.stddev)[0],
        "$\\log \\mathcal N(a_i; \\mu_i, \\sigma_i)$": torch.cat([dist.base_dist.log_prob(sample)[0], log_prob]),
        "entropy": torch.cat([dist.base_dist.entropy()[0], dist.entropy()]),
        "$\\partial \\log \\pi / \\partial \\mu_i$": grad_mu[0],
        "$\\partial \\log \\pi / \\partial \\log \\sigma_i$": grad_log_std,
        "action sent, $\\mathrm{clip}(a)$": sent[0],
        "$\\log \\mathcal N(\\mathrm{clip}(a)_i; \\mu_i, \\sigma_i)$":
            torch.cat([dist.base_dist.log_prob(sent)[0], dist.log_prob(sent)]),
    }
    assert set(rows) == set(expected), f"Gaussian table rows: {sorted(rows)}"
    for label, values in expected.items():
        cells = [c for c in rows[label] if c]
        assert len(cells) == len(values), f"Gaussian table, row {label!r}: {len(cells)} numbers, expected {len(values)}"
        for cell, value in zip(cells, values.tolist()):
            assert_printed(cell, value, f"{label} in the Gaussian example")
    ratio = re.search(r"= (\S+) before a single gradient step", doc()).group(1)
    assert_printed(ratio, (dist.log_prob(sent) - log_prob).exp().item(), "the ratio of a stored clipped action")


# --- worked examples (f) and (g): Part 7's clips and pass@k --------------------------------

def test_worked_example_rlvr_clip_gradients_match_reference():
    part7 = importlib.import_module("solutions.part7_reasoning")
    rows = table_after("rlvr-clips")
    header, body = rows[0], rows[1:]
    assert header == ["A", "ratio", "PPO", "clip-higher", "CISPO"], f"the clips table's columns changed: {header}"
    losses = {2: lambda lp, old, a, m: part7.clip_higher_loss(lp, old, a, m, 0.2, 0.2, "token"),
              3: lambda lp, old, a, m: part7.clip_higher_loss(lp, old, a, m, 0.2, 0.28, "token"),
              4: lambda lp, old, a, m: part7.cispo_loss(lp, old, a, m, 1.0, 0.28, "token")}
    for row in body:
        advantage, ratio = number(row[0]), number(row[1])
        for column, loss_fn in losses.items():
            # One token with log-prob −1 and the stated ratio: the objective's gradient is −d loss / d log π.
            logprob = torch.tensor([[-1.0]], dtype=torch.float64, requires_grad=True)
            old = logprob.detach() - torch.log(torch.tensor(ratio, dtype=torch.float64))
            loss, _ = loss_fn(logprob, old, torch.tensor([advantage], dtype=torch.float64), torch.ones(1, 1))
            loss.backward()
            assert_printed(row[column], -logprob.grad.item(), f"{header[column]}'s gradient at A={row[0]}, ratio={row[1]}")


def test_worked_example_pass_at_k_matches_reference():
    part7 = importlib.import_module("solutions.part7_reasoning")
    rows = table_after("pass-at-k")
    header, body = rows[0], rows[1:]
    assert header == ["c of 16", "pass@1", "pass@4", "pass@16", "plug-in pass@4"], f"pass@k table columns changed: {header}"
    for row in body:
        c = int(row[0])
        for column, k in ((1, 1), (2, 4), (3, 16)):
            assert_printed(row[column], part7.pass_at_k(16, c, k), f"pass@{k} with c={c} of 16")
        assert_printed(row[4], 1 - (1 - c / 16) ** 4, f"the plug-in pass@4 with c={c}")
    assert [int(row[0]) for row in body] == [0, 1, 2, 4, 8, 16]


# --- worked example (h): the loss mask of a multi-turn episode, and GAE across a tool's reply -----

def test_worked_example_agent_mask_matches_reference():
    part9 = importlib.import_module("solutions.part9_agents")
    from workbook.reason.base import reasoner_tokenizer

    rows = {row[0]: row[1:] for row in table_after("agent-mask")}
    spans, writers, counts, masks = rows["span"], rows["written by"], rows["tokens"], rows["mask"]
    tok = reasoner_tokenizer()
    ids: list[int] = []
    by_model: list[bool] = []
    for span, writer, count, bit in zip(spans, writers, counts, masks):
        span_ids = [tok.eos_id] if span == "EOS" else tok.encode(span.strip("`"), add_bos=False)
        assert len(span_ids) == int(count), f"the agent-mask table says {span} is {count} tokens, the tokenizer gives {len(span_ids)}"
        assert writer in ("model", "tool") and int(bit) == (writer == "model")
        ids += span_ids
        by_model += [writer == "model"] * len(span_ids)
    assert ids[-1] == tok.eos_id
    mask, truncated = part9.agent_loss_mask([torch.tensor(ids)], [torch.tensor(by_model)], tok.eos_id)
    assert not truncated[0]
    assert mask[0].tolist() == [float(b) for b in by_model]
    match = re.search(r"That gives (\d+) tokens in the response and (\d+) in the loss", doc())
    assert match and (int(match.group(1)), int(match.group(2))) == (len(ids), int(mask.sum()))
    # Cut off just before the EOS: truncated, and with mask_truncated nothing of it is in the loss.
    cut, truncated = part9.agent_loss_mask([torch.tensor(ids[:-1])], [torch.tensor(by_model[:-1])], tok.eos_id)
    assert truncated[0] and cut.sum() == 0
    assert f"all {len(ids) - 1} of its tokens" in doc()


def test_gae_across_a_tools_reply_is_the_formula_in_the_text():
    """Part 3's GAE skips a gap of g tool tokens: A_t = r_t + γ V_u − V_t + γλ A_u, as if the reply were not there."""
    part3 = importlib.import_module("solutions.part3_rlhf")
    g, gamma, lam = 4, 0.9, 0.8
    mask = torch.tensor([[1.0] + [0.0] * g + [1.0, 1.0]])
    values = torch.tensor([[0.3] + [0.7] * g + [0.5, 0.6]])
    rewards = torch.tensor([[0.1] + [0.0] * g + [0.0, 1.0]])
    _, _, returns = part3.compute_advantages(values, rewards, mask, gamma, lam)
    raw = returns - values * mask  # the advantages before whitening, at the model's positions
    u = g + 1
    expected = 0.1 + gamma * 0.5 - 0.3 + gamma * lam * raw[0, u].item()
    assert abs(raw[0, 0].item() - expected) < 1e-5
    through = 0.1 - 0.3 + (gamma * lam) ** g * (gamma * 0.5 + gamma * lam * raw[0, u].item())
    assert abs(raw[0, 0].item() - through) > 0.1  # the formula the text warns about is another number
    assert returns[0, 1:u].abs().max() == 0  # the critic is not trained inside the reply
    assert "0.95^{20} \\approx 0.36" in doc() and abs(0.95 ** 20 - 0.36) < 0.005


# --- worked examples (i), (j) and (k): Part 10's correction weights, KL gradients, overlap ---------
# Written out here, not imported from solutions/part10_async.py: these check the document's
# arithmetic, and tests/test_part10_async.py checks the reference against the same definitions.

def test_worked_example_importance_weights_are_the_formulas_in_the_text():
    rows = {row[0]: row[1:] for row in table_after("is-weights")[1:]}
    log_ratio = torch.tensor([number(c) for c in rows["$\\ell_t$"][:-1]], dtype=torch.float64)
    cap = 3.0
    assert "$C = 3$" in sections()[16]
    weights = log_ratio.exp()
    sequence = log_ratio.sum()
    expected = {
        "$w_t = e^{\\ell_t}$": weights,
        "`token_truncate`": weights.clamp(max=cap),
        "`token_mask`": torch.where(weights <= cap, weights, torch.zeros_like(weights)),
        "`sequence_truncate`": torch.full_like(weights, min(sequence.exp().item(), cap)),
        "`sequence_mask`": torch.full_like(weights, sequence.exp().item() if sequence <= torch.log(torch.tensor(cap)) else 0.0),
    }
    assert set(rows) == set(expected) | {"$\\ell_t$"}, f"the importance-weight table's rows changed: {sorted(rows)}"
    for label, values in expected.items():
        cells = rows[label][:len(values)]
        for t, (cell, value) in enumerate(zip(cells, values.tolist())):
            assert_printed(cell, value, f"{label} at token {t + 1} (C = 3)")
    assert_printed(rows["$\\ell_t$"][-1].split("=")[-1], sequence.item(), "the sum of the log-ratios")
    assert_printed(rows["$w_t = e^{\\ell_t}$"][-1].split("=")[-1], sequence.exp().item(), "the sequence's weight")
    # The text's reading of it: one token over the cap, the others below 1.5, the sequence over the cap.
    assert (weights > cap).sum() == 1 and weights[weights <= cap].max() < 1.5 and sequence.exp() > cap
    assert "no other token's ratio is above 1.5" in doc()
    # The off-policy mask's statistic on the same response: mean of log sampler − log learner.
    match = re.search(r"the mean is −1\.55 / 6 = (\S+?):", doc())
    assert match, "the off-policy mask's example lost its 'the mean is −1.55 / 6 = …:' sentence"
    assert_printed(match.group(1), (-log_ratio).mean().item(), "the mean log-ratio of the off-policy mask")


def test_sequence_weight_variance_grows_as_the_text_says():
    """Independent token weights with mean 1 and second moment 1 + χ²: Var(∏ w_t) = (1 + χ²)^T − 1."""
    # The identity itself, exactly, on a two-valued token weight (q = (0.5, 0.5), p = (0.55, 0.45)).
    q = torch.tensor([0.5, 0.5], dtype=torch.float64)
    w = torch.tensor([0.55, 0.45], dtype=torch.float64) / q
    chi2 = (q * w ** 2).sum().item() - 1
    products, probs = torch.ones(1, dtype=torch.float64), torch.ones(1, dtype=torch.float64)
    for _ in range(6):  # all 2^6 sequences of 6 tokens
        products = (products[:, None] * w[None]).flatten()
        probs = (probs[:, None] * q[None]).flatten()
    assert abs((probs * products).sum().item() - 1) < 1e-12
    assert abs((probs * products ** 2).sum().item() - 1 - ((1 + chi2) ** 6 - 1)) < 1e-12
    text = sections()[16]
    assert "$\\chi^2 = 0.01$" in text
    for length, printed in ((10, "0.105"), (200, "6.32")):
        assert f"a {length}-token" in text and printed in text
        assert_printed(printed, 1.01 ** length - 1, f"the variance of a {length}-token sequence weight")
    assert "1000-token one about 21,000" in text and round(1.01 ** 1000 - 1, -3) == 21_000
    assert torch.tensor(1000.0, dtype=torch.float64).exp().isinf()  # "inf even in float64"


KL_TERMS = ("k1 in the loss", "k1 in the reward", "k3 in the loss", "k3_is in the loss")


def kl_table_gradients() -> dict[tuple[str, str], torch.Tensor]:
    """The expected gradients the table prints, recomputed in float64 from the logits it prints."""
    rows = {row[0]: row[1:] for row in table_after("kl-policies")[1:]}
    logits = {name: torch.tensor([number(c) for c in rows[f"logits of {label}"]], dtype=torch.float64)
              for name, label in (("pi", "$\\pi_\\theta$"), ("ref", "$\\pi_{ref}$"), ("q", "the sampler $q$"))}
    for name, label in (("pi", "$\\pi_\\theta$"), ("ref", "$\\pi_{ref}$"), ("q", "$q$")):
        for a, (cell, p) in enumerate(zip(rows[label], logits[name].softmax(0).tolist())):
            assert_printed(cell, p, f"{label}(a = {a + 1})")
    ref_logp, q_logp = logits["ref"].log_softmax(0), logits["q"].log_softmax(0)
    probs = {"$\\pi_\\theta$": logits["pi"].softmax(0), "$q$": logits["q"].softmax(0)}

    def grad(objective) -> torch.Tensor:
        theta = logits["pi"].clone().requires_grad_(True)
        (g,) = torch.autograd.grad(objective(theta.log_softmax(0)), theta)
        return g

    def k3(logp):
        return (ref_logp - logp).exp() - 1 - (ref_logp - logp)

    # A per-token term f(a) in the loss, tokens drawn from `sampler`: E[∇f] = Σ_a sampler(a) ∇f(a).
    terms = {
        "k1 in the loss": lambda logp: logp - ref_logp,
        "k3 in the loss": k3,
        "k3_is in the loss": lambda logp: (logp - q_logp).exp() * k3(logp),
    }
    out = {(name, sampler): grad(lambda logp, f=f, s=s: (s * f(logp)).sum())
           for name, f in terms.items() for sampler, s in probs.items()}
    # k1 in the reward: the policy gradient of the penalty, E_π[k1 ∇log π] with k1 a number (no grad).
    pi = probs["$\\pi_\\theta$"]
    out[("k1 in the reward", "$\\pi_\\theta$")] = grad(lambda logp: (pi * (logp - ref_logp).detach() * logp).sum())
    out[("forward", "")] = grad(lambda logp: (logp.exp() * (logp - ref_logp)).sum())
    out[("reverse", "")] = grad(lambda logp: (ref_logp.exp() * (ref_logp - logp)).sum())
    return out


def test_worked_example_kl_gradients_are_exact_where_the_text_says():
    grads = kl_table_gradients()
    forward, reverse = grads[("forward", "")], grads[("reverse", "")]
    pi, q = "$\\pi_\\theta$", "$q$"
    # The claims of the text, to float64 rounding.
    torch.testing.assert_close(grads[("k1 in the loss", pi)], torch.zeros(5, dtype=torch.float64), rtol=0, atol=1e-15)
    torch.testing.assert_close(grads[("k1 in the reward", pi)], forward, rtol=0, atol=1e-15)
    torch.testing.assert_close(grads[("k3 in the loss", pi)], reverse, rtol=0, atol=1e-15)
    torch.testing.assert_close(grads[("k3_is in the loss", q)], forward, rtol=0, atol=1e-15)
    assert (grads[("k3 in the loss", q)] - forward).abs().max() > 1e-3  # "neither"
    assert (grads[("k3 in the loss", q)] - reverse).abs().max() > 1e-3
    assert (forward - reverse).abs().max() > 1e-2  # the two directions are told apart at 4 decimals

    rows = table_after("kl-gradients")[1:]
    seen = set()
    for row in rows:
        label, sampler, cells, verdict = row[0], row[1], row[2:7], row[7]
        if "exact" in label:
            key = ("forward", "") if "(\\pi_\\theta \\Vert \\pi_{ref})" in label else ("reverse", "")
        else:
            key = (label, sampler)
        assert key in grads, f"the KL-gradient table has a row nobody computes: {label!r} sampled from {sampler!r}"
        seen.add(key)
        for a, (cell, value) in enumerate(zip(cells, grads[key].tolist())):
            assert_printed(cell, value, f"∂/∂θ_{a + 1} of {label} (sampled from {sampler})")
        meaning = {"the target": forward, "the other direction": reverse, "zero": torch.zeros(5, dtype=torch.float64)}
        if verdict in meaning:
            torch.testing.assert_close(grads[key], meaning[verdict], rtol=0, atol=1e-12,
                                       msg=f"the KL-gradient table says {label!r} from {sampler} is {verdict!r}")
        else:
            assert verdict == "neither" and all((grads[key] - m).abs().max() > 1e-3 for m in meaning.values())
    assert len(seen) == len(rows) == 7

    # The values: all three estimators average to the KL the text prints.
    rows = {row[0]: row[1:] for row in table_after("kl-policies")[1:]}
    theta, ref, qq = (torch.tensor([number(c) for c in rows[f"logits of {x}"]], dtype=torch.float64)
                      for x in ("$\\pi_\\theta$", "$\\pi_{ref}$", "the sampler $q$"))
    logp, ref_logp, q_logp = theta.log_softmax(0), ref.log_softmax(0), qq.log_softmax(0)
    kl = (logp.exp() * (logp - ref_logp)).sum().item()
    k3 = (ref_logp - logp).exp() - 1 - (ref_logp - logp)
    for value in ((logp.exp() * (logp - ref_logp)).sum(), (logp.exp() * k3).sum(),
                  (q_logp.exp() * (logp - q_logp).exp() * k3).sum()):
        assert abs(value.item() - kl) < 1e-12
    match = re.search(r"the exact KL = (\S+?)\.\s", doc())
    assert match, "section 16 lost its 'the exact KL = …' sentence"
    assert_printed(match.group(1), kl, "the KL of the five-action example")


def test_worked_example_overlap_arithmetic():
    rows = table_after("overlap")
    assert len(rows[0]) == 6, f"the overlap table's columns changed: {rows[0]}"
    for row in rows[1:]:
        S, L, tau = (number(c) for c in row[:3])
        assert_printed(row[3], S + L, f"S + L for S={S}, L={L}")
        assert_printed(row[4], max(S, L) + tau, f"max(S, L) + τ for S={S}, L={L}, τ={tau}")
        assert_printed(row[5], (S + L) / (max(S, L) + tau), f"the speed-up for S={S}, L={L}, τ={tau}")
        assert (S + L) / max(S, L) <= 2 + 1e-12
    assert any(number(r[0]) == number(r[1]) and number(r[2]) == 0 and number(r[5]) == 2 for r in rows[1:])
    # 0.6× the wall time is a speed-up of 1/0.6; with τ = 0 that needs min(S, L) ≥ 2/3 max(S, L).
    text = sections()[16]
    assert "1/0.6 ≈ 1.67" in text and abs(1 / 0.6 - 1.67) < 0.005
    assert "at least 2/3 of the longer" in text
    for shorter in (0.6, 2 / 3 - 1e-9, 2 / 3, 0.8):
        assert ((1 + shorter) / 1 >= 1 / 0.6 - 1e-12) == (shorter >= 2 / 3 - 1e-12)


def test_fixed_lag_and_samplers_as_the_text_says():
    """Batch i sampled by version max(0, i − k); with steady S and L lag 1 gives the whole overlap, N samplers need lag N."""
    text = sections()[16]
    assert "$\\max(0, i - k)$" in text and "The first $k + 1$ batches all come from version 0" in text
    for k in (0, 1, 3):
        versions = [max(0, i - k) for i in range(10)]
        assert versions.count(0) == k + 1

    def period(S: float, L: float, n: int, k: int, batches: int = 60) -> float:
        """Steady-state seconds per batch: n samplers (S each per batch), one learner (L), fixed lag k."""
        ready = [0.0]  # ready[v]: when version v exists
        free = [0.0] * n  # when each sampler is next free
        learner = 0.0
        for i in range(batches):
            j = i % n
            start = max(free[j], ready[max(0, i - k)])  # the sampler waits for version max(0, i - k)
            free[j] = start + S
            learner = max(learner, free[j]) + L  # the learner waits for batch i, then makes version i + 1
            ready.append(learner)
        return (ready[-1] - ready[batches // 2]) / (batches - batches // 2)

    for S, L in ((1.0, 1.0), (1.5, 0.5), (0.8, 1.2)):
        assert abs(period(S, L, 1, 0) - (S + L)) < 1e-9  # lag 0: taking turns
        assert abs(period(S, L, 1, 1) - max(S, L)) < 1e-9  # lag 1: the whole overlap
        assert abs(period(S, L, 1, 4) - max(S, L)) < 1e-9  # more lag buys nothing at steady times
    for n in (2, 3):
        assert abs(period(1.0 * n, 1.0, n, n) - 1.0) < 1e-9  # max(S/N, L) with lag N ...
        assert period(1.0 * n, 1.0, n, n - 1) > 1.0 + 1e-6  # ... and not with less
    assert "the lag becomes about $N$" in text and "lag 1 is enough" in text


# --- worked example (§17): best-of-n's KL, analytic and exact over a few equally likely outcomes ----

def test_worked_example_best_of_n_kl_matches_reference():
    part11 = importlib.import_module("solutions.part11_goodhart")
    rows = table_after("best-of-n-kl")
    header, body = rows[0], rows[1:]
    assert header == ["n", "log n − (n−1)/n", "√ of it", "exact, 4 equally likely outcomes"], header
    for row in body:
        n = int(row[0])
        analytic = part11.best_of_n_kl(n)
        assert_printed(row[1], analytic, f"log n − (n−1)/n at n={n}")
        assert_printed(row[2], math.sqrt(analytic), f"its square root at n={n}")
        exact = part11.best_of_n_kl_discrete(torch.full((4,), 0.25), n)
        assert_printed(row[3], exact, f"the exact KL of best-of-{n} over 4 equally likely outcomes")
        assert exact <= analytic + 1e-12 and exact <= math.log(4) + 1e-12, "the text: a bound, capped at log 4"
    assert [int(r[0]) for r in body] == [1, 2, 4, 16, 64, 1024]
    assert "$\\log 4 = 1.386$" in sections()[17]
