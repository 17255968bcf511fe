"""GPU check: PPO iterations of Part 3's trainer on a GPT-2-small-sized Hugging Face model, on CUDA.

    python benchmarks/hf_gpu.py                 # 124M parameters (GPT2Config defaults), random weights, CUDA
    python benchmarks/hf_gpu.py --tiny          # 2 layers, d=64, on the CPU: checks the script itself

Nothing is downloaded: the tokenizer is trained here on the review corpus, the model is randomly
initialised (GPT2Config defaults: 12 layers, d=768, 50,257-token vocabulary, 124M parameters),
saved with ``save_pretrained`` to a temporary folder and loaded back through ``--model PATH``'s
code. One iteration = sample ``--batch-size`` responses of ``--max-new-tokens`` tokens with the
model's own KV-cached ``generate``, then one ``PPOTrainer.step`` (rollout and reference passes,
GAE, ``--ppo-epochs`` passes over minibatches). A random model almost never samples EOS, so every
response has the full length. The scores are random (the reward is not what is timed).

Prints one line per iteration, then, as its last line, a JSON object: device, parameters,
response tokens per iteration, the medians over the timed iterations (the first, warm-up
iteration is left out) of generation and PPO-step seconds and tokens per second, and the peak
GPU memory (``torch.cuda.max_memory_allocated``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach the hub

import torch  # noqa: E402

from workbook import distributed  # noqa: E402
from workbook.cli import add_impl_option, add_seeds_option, make_parser  # noqa: E402
from workbook.hf.model import quiet_hub  # noqa: E402
from workbook.hf.tiny import random_gpt2, train_review_tokenizer  # noqa: E402
from workbook.lm.corpus import review_prompts  # noqa: E402
from workbook.loop.backend import HuggingFace  # noqa: E402
from workbook.rlhf.data import load_part3, rollout  # noqa: E402
from workbook.runs import ConfigError, command  # noqa: E402


@command
def main(argv: list[str] | None = None) -> None:
    p = make_parser("python benchmarks/hf_gpu.py", __doc__.split("\n\n")[0])
    p.add_argument("--tiny", action="store_true", help="a 2-layer d=64 model on the CPU (checks the script, no GPU needed)")
    p.add_argument("--device", default=None, help="default: cuda (cpu with --tiny)")
    p.add_argument("--iterations", type=int, default=3, help="timed iterations, after one warm-up iteration")
    p.add_argument("--batch-size", type=int, default=None, help="responses per iteration (default 64; 8 with --tiny)")
    p.add_argument("--mini-batch-size", type=int, default=16)
    p.add_argument("--ppo-epochs", type=int, default=4)
    p.add_argument("--max-new-tokens", type=int, default=None, help="default 48; 16 with --tiny")
    add_impl_option(p, "solutions")
    add_seeds_option(p, [0], "seeds the model and the prompts (the first seed; one timing)")
    ns = p.parse_args(argv)
    device = torch.device(ns.device or ("cpu" if ns.tiny else "cuda"))
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--device", "CUDA is not available here; run with --tiny for the CPU check")
    batch_size = ns.batch_size or (8 if ns.tiny else 64)
    max_new_tokens = ns.max_new_tokens or (16 if ns.tiny else 48)
    if ns.tiny:
        torch.set_num_threads(1)
    quiet_hub()
    part3 = load_part3(ns.impl)

    # Build and save the model, then load it back through the path `--model PATH` takes.
    t0 = time.perf_counter()
    tokenizer = train_review_tokenizer()
    sizes = dict(n_layer=2, n_embd=64, n_head=2, n_positions=128) if ns.tiny else \
        dict(n_layer=12, n_embd=768, n_head=12, n_positions=1024, vocab_size=50_257)  # GPT2Config's defaults
    with tempfile.TemporaryDirectory() as folder:
        random_gpt2(tokenizer, seed=ns.seeds[0], **sizes).save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        backend = HuggingFace(folder)  # the loop's --model backend: checked, then loaded as `--model PATH` would be
        options = argparse.Namespace(model=folder, device=str(device))
        backend.check(options)
        lm, tok = backend.load(options, distributed.context())
    build_s = time.perf_counter() - t0
    n_params = sum(p.numel() for p in lm.parameters())
    print(f"{n_params / 1e6:.1f}M parameters on {device} (built, saved and loaded in {build_s:.1f}s)", flush=True)

    torch.manual_seed(ns.seeds[0])
    policy = part3.GPTWithValueHead(lm).to(device)
    reference = part3.create_reference_model(policy)
    config = part3.PPOConfig(learning_rate=1.41e-5, mini_batch_size=ns.mini_batch_size, ppo_epochs=ns.ppo_epochs, seed=ns.seeds[0])
    trainer = part3.PPOTrainer(config, policy, reference, tok.pad_id)
    gen = torch.Generator().manual_seed(ns.seeds[0])
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    rows = []
    for it in range(ns.iterations + 1):
        prompts = review_prompts(batch_size, seed=ns.seeds[0] * 1000 + it)
        sync()
        t0 = time.perf_counter()
        batch = rollout(policy.lm, tok, prompts, max_new_tokens=max_new_tokens, temperature=1.0, generator=gen)
        sync()
        t1 = time.perf_counter()
        scores = torch.randn(batch_size, generator=gen).to(device)
        stats = trainer.step(batch.queries, batch.responses, scores)
        sync()
        t2 = time.perf_counter()
        tokens = sum(len(r) for r in batch.responses)
        rows.append({"generate_s": t1 - t0, "step_s": t2 - t1, "tokens": tokens})
        print(f"iteration {it}{' (warm-up)' if it == 0 else ''}: {tokens} response tokens, generate {t1 - t0:.2f}s "
              f"({tokens / (t1 - t0):.0f} tok/s), PPO step {t2 - t1:.2f}s ({tokens / (t2 - t1):.0f} tok/s), "
              f"KL {stats['objective/kl']:.3f}, clipfrac {stats['ppo/policy/clipfrac']:.3f}", flush=True)

    timed = rows[1:] or rows
    med = {k: statistics.median(r[k] for r in timed) for k in ("generate_s", "step_s", "tokens")}
    result = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "parameters": n_params, "batch_size": batch_size, "max_new_tokens": max_new_tokens,
        "mini_batch_size": ns.mini_batch_size, "ppo_epochs": ns.ppo_epochs, "timed_iterations": len(timed),
        "response_tokens_per_iteration": med["tokens"],
        "generate_s": round(med["generate_s"], 4), "ppo_step_s": round(med["step_s"], 4),
        "generate_tokens_per_s": round(med["tokens"] / med["generate_s"], 1),
        "ppo_step_tokens_per_s": round(med["tokens"] / med["step_s"], 1),
        "iteration_tokens_per_s": round(med["tokens"] / (med["generate_s"] + med["step_s"]), 1),
        "peak_memory_gib": round(torch.cuda.max_memory_allocated(device) / 2**30, 3) if device.type == "cuda" else None,
        "torch": torch.__version__,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    sys.exit(main())
