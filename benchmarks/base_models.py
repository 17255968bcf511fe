"""Benchmark: are the base models the same on every machine? Pretrain them under other CPU kernel sets.

    python benchmarks/base_models.py --tasks addition --seeds 0 1 --kernels default avx2 avx512
    python benchmarks/base_models.py --shipped --kernels default avx2 avx512   # the shipped models, evaluated
    python benchmarks/base_models.py --write-shipped --kernels default       # maintainers: rebuild the shipped files

Another machine rounds differently in its last bit (other vectorised kernels, another BLAS). torch
lets one machine emulate that: ``ATEN_CPU_CAPABILITY=default|avx2|avx512`` picks which of its
CPU kernels run (``native``: whatever this CPU supports best, the variable unset). Pretraining is
chaotic, so each kernel set can give another base model from the same code and seed. For each task,
pretraining seed and kernel set this script pretrains from scratch in a fresh process (nothing
cached) and measures what docs/base_models.md documents:

- ``review`` (Parts 3 and 5): the held-out next-character loss;
- ``addition`` and ``multiplication`` (Part 7): held-out pass@1 and pass@16 (256 addition / all
  189 multiplication problems × 16 samples at temperature 1) and the mistake profile of the
  samples — right, a forgotten carry (a slip RL can remove), or anything else;
- ``calculator`` (Part 9): held-out pass@1 and pass@16 with the tool and without it
  (``pass1_no_tool``: the model writes its own results), and the mistake profile of the
  episodes with the tool (right, an operand copied wrong, an answer from the head, a result
  copied wrong into the answer, anything else).

``--shipped`` evaluates the shipped models instead (no pretraining): the same weights everywhere,
so only the sampling's rounding differs. ``--write-shipped`` rebuilds the shipped files from seed 0
under the one kernel set given and rewrites ``workbook/lm/base_models/MANIFEST.json``.

The last line is one JSON object: ``{"runs": [{"task", "seed", "kernels", "pass1", "pass16", "right",
"slip", "other", "heldout_loss", "pretrain_s"}, ...]}``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from workbook.cli import add_seeds_option, make_parser, require, require_unique_seeds  # noqa: E402
from workbook.runs import command, cpu_name  # noqa: E402

TASKS = ("review", "addition", "multiplication", "calculator")


KERNELS = ("native", "default", "avx2", "avx512")


def measure(task: str, seed: int, shipped: bool, out: str | None) -> dict:
    """Pretrain (or load the shipped) base model of ``task`` in this process and measure it."""
    from workbook.lm.model import load_checkpoint, save_checkpoint
    from workbook.lm.pretrain import BASE_MODELS_DIR, PretrainArgs, evaluate, encode_reviews, pretrain, shipped_base_models
    from workbook.lm.corpus import generate_reviews
    from workbook.reason import REASONER_ARGS, make_problems, pretrain_reasoner, sample_completions
    from workbook.reason.task import corpus_texts, eval_pool_size, mistake_profile
    import solutions.part7_reasoning as impl

    torch.set_num_threads(1)
    if task == "calculator":
        return measure_agent(seed, shipped, out)
    args = PretrainArgs() if task == "review" else REASONER_ARGS[task]
    args = dataclasses.replace(args, seed=seed, threads=1)
    t0 = time.perf_counter()
    if shipped:
        model, tok, extra = load_checkpoint(BASE_MODELS_DIR / shipped_base_models()[task]["file"])
    elif task == "review":
        model, tok, extra = pretrain(args, progress=False)
        extra = {"args": {k: v for k, v in dataclasses.asdict(args).items() if k != "cache_dir"}, "stats": extra}
    else:
        model, tok, stats = pretrain_reasoner(task, args, progress=False)
        extra = {"task": task, "args": {k: v for k, v in dataclasses.asdict(args).items() if k != "cache_dir"},
                 "stats": stats}
    row = {"task": task, "seed": seed, "kernels": os.environ.get("ATEN_CPU_CAPABILITY", "native"),
           "pretrain_s": round(time.perf_counter() - t0, 1)}
    if out:
        save_checkpoint(out, model, tok, extra=extra)
    if task == "review":
        heldout = encode_reviews([r.text for r in generate_reviews(args.n_heldout, args.seed + 1_000_003)], tok)
        row["heldout_loss"] = round(evaluate(model, heldout, tok.pad_id), 4)
        return row
    heldout = encode_reviews(corpus_texts(task, args.n_heldout, args.seed + 1_000_003), tok)
    row["heldout_loss"] = round(evaluate(model, heldout, tok.pad_id), 4)
    problems = make_problems(task, "eval", min(256, eval_pool_size(task)), seed=0)
    prompts = [p.prompt for p in problems for _ in range(16)]
    texts, _, _ = sample_completions(model, tok, prompts, seed=0)
    right = (impl.answer_reward(texts, [p.answer for p in problems for _ in range(16)], format_reward=0.0) == 1.0)
    counts = right.view(len(problems), 16).sum(dim=1).tolist()
    row["pass1"] = round(sum(impl.pass_at_k(16, int(c), 1) for c in counts) / len(problems), 4)
    row["pass16"] = round(sum(impl.pass_at_k(16, int(c), 16) for c in counts) / len(problems), 4)
    row |= {k: round(v, 4) for k, v in mistake_profile(task, prompts, texts).items()}
    return row


def measure_agent(seed: int, shipped: bool, out: str | None) -> dict:
    """Part 9's base model: pretrain (or load the shipped one), then pass@1/16 with the tool and without it."""
    from workbook.agents.base import AGENT_ARGS, agent_pass_at_k, pretrain_agent
    from workbook.agents.task import corpus_texts, make_problems, mistake_profile
    from workbook.lm.model import load_checkpoint, save_checkpoint
    from workbook.lm.pretrain import BASE_MODELS_DIR, encode_reviews, evaluate, shipped_base_models
    import solutions.part7_reasoning as part7
    import solutions.part9_agents as part9

    args = dataclasses.replace(AGENT_ARGS, seed=seed, threads=1)
    t0 = time.perf_counter()
    if shipped:
        model, tok, extra = load_checkpoint(BASE_MODELS_DIR / shipped_base_models()["calculator"]["file"])
    else:
        model, tok, stats = pretrain_agent(args, progress=False)
        extra = {"task": "calculator", "args": {k: v for k, v in dataclasses.asdict(args).items() if k != "cache_dir"},
                 "stats": stats}
    row = {"task": "calculator", "seed": seed, "kernels": os.environ.get("ATEN_CPU_CAPABILITY", "native"),
           "pretrain_s": round(time.perf_counter() - t0, 1)}
    if out:
        save_checkpoint(out, model, tok, extra=extra)
    heldout = encode_reviews(corpus_texts(args.n_heldout, args.seed + 1_000_003), tok)
    row["heldout_loss"] = round(evaluate(model, heldout, tok.pad_id), 4)
    problems = make_problems("eval", 256)
    for tool, suffix in ((True, ""), (False, "_no_tool")):
        table = agent_pass_at_k(model, tok, problems, part9, part7, n=16, seed=0, tool=tool)
        row[f"pass1{suffix}"] = round(table["pass@k"][1], 4)
        row[f"pass16{suffix}"] = round(table["pass@k"][16], 4)
        if tool:
            prompts = [p.prompt for p in problems for _ in range(16)]
            row |= {k: round(v, 4) for k, v in mistake_profile(prompts, table["rollout"].completions).items()}
    return row


def run_worker(task: str, seed: int, kernels: str, shipped: bool, out: str | None) -> dict:
    """``measure`` in a fresh process with ``ATEN_CPU_CAPABILITY`` set (it is read once, when torch loads)."""
    env = dict(os.environ)
    env.pop("ATEN_CPU_CAPABILITY", None)
    if kernels != "native":
        env["ATEN_CPU_CAPABILITY"] = kernels
    cmd = [sys.executable, __file__, "--worker", json.dumps({"task": task, "seed": seed, "shipped": shipped, "out": out})]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{task} seed {seed} under {kernels}: {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def write_shipped(rows: list[dict], files: dict[str, Path]) -> None:
    """Copy the rebuilt models into workbook/lm/base_models/ and rewrite MANIFEST.json."""
    from workbook.lm.pretrain import BASE_MODELS_DIR, PretrainArgs, file_sha256, shipped_base_models
    from workbook.reason import REASONER_ARGS
    from workbook.reason.base import reasoner_cache_key

    manifest = shipped_base_models()
    BASE_MODELS_DIR.mkdir(exist_ok=True)
    for row in rows:
        task = row["task"]
        target = BASE_MODELS_DIR / f"{task}.pt"
        target.write_bytes(files[task].read_bytes())
        if task == "calculator":
            from workbook.agents.base import AGENT_ARGS, agent_cache_key

            key = agent_cache_key(AGENT_ARGS)
        else:
            key = PretrainArgs().cache_key() if task == "review" else reasoner_cache_key(task, REASONER_ARGS[task])
        manifest[task] = {"file": target.name, "sha256": file_sha256(target), "cache_key": key,
                          "built_with": {"torch": torch.__version__, "kernels": row["kernels"],
                                         "machine": cpu_name(), "seed": row["seed"]},
                          "measured": {k: v for k, v in row.items() if k not in ("task", "seed", "kernels")}}
    (BASE_MODELS_DIR / "MANIFEST.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")


@command
def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--worker"]:
        spec = json.loads(argv[1])
        print(json.dumps(measure(spec["task"], spec["seed"], spec["shipped"], spec["out"])), flush=True)
        return 0
    p = make_parser("benchmarks/base_models.py", __doc__.split("\n\n")[0])
    p.add_argument("--tasks", nargs="+", default=list(TASKS), choices=TASKS, metavar="TASK",
                   help="review, addition, multiplication, calculator (default: all four)")
    add_seeds_option(p, [0], "pretraining seeds (ignored with --shipped)")
    p.add_argument("--kernels", nargs="+", default=["native"], choices=KERNELS, metavar="K",
                   help="ATEN_CPU_CAPABILITY values: native (unset), default, avx2, avx512 (default: native)")
    p.add_argument("--shipped", action="store_true", help="evaluate the shipped models instead of pretraining")
    p.add_argument("--write-shipped", action="store_true",
                   help="maintainers: rebuild the shipped files (seed 0, one kernel set) and rewrite MANIFEST.json")
    p.add_argument("--jobs", type=int, default=2, help="processes at once, one torch thread each (default 2)")
    ns = p.parse_args(argv)
    require_unique_seeds(ns.seeds)
    require(ns.jobs >= 1, "--jobs", f"must be ≥ 1, got {ns.jobs}")
    require(not (ns.shipped and ns.write_shipped), "--write-shipped", "rebuilds the models: not with --shipped")
    require(not ns.write_shipped or (len(ns.kernels) == 1 and ns.seeds == [0]), "--write-shipped",
            "builds one model per task: give one --kernels value and seed 0")
    seeds = [0] if ns.shipped else ns.seeds
    jobs = [(t, s, k) for t in ns.tasks for s in seeds for k in ns.kernels]
    files = {}
    if ns.write_shipped:
        tmp = ROOT / "runs" / "base-models-build"
        tmp.mkdir(parents=True, exist_ok=True)
        files = {t: tmp / f"{t}.pt" for t in ns.tasks}
    print(f"{len(jobs)} runs, {ns.jobs} at a time; torch {torch.__version__} on {cpu_name()}",
          flush=True)
    with ThreadPoolExecutor(ns.jobs) as pool:
        futures = [pool.submit(run_worker, t, s, k, ns.shipped, str(files[t]) if files else None) for t, s, k in jobs]
        rows = []
        for f in futures:
            row = f.result()
            rows.append(row)
            shown = {k: v for k, v in row.items() if k not in ("task", "seed", "kernels")}
            print(f"{row['task']:<15} seed {row['seed']}  kernels {row['kernels']:<8} "
                  + "  ".join(f"{k} {v}" for k, v in shown.items()), flush=True)
    if ns.write_shipped:
        write_shipped(rows, files)
        print(f"wrote the shipped models and MANIFEST.json under workbook/lm/base_models/", flush=True)
    print(json.dumps({"runs": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
