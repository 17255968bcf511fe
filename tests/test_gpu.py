"""GPU checks: the same code gives the same numbers on CUDA as on the CPU.

Skipped without a CUDA device (CI has none); run on a GPU machine with
``pytest tests/test_gpu.py --impl=solutions``. Tolerances allow for different kernels.
"""

from __future__ import annotations

import pytest
import torch

from solutions import part1_ppo_core as part1
from solutions import part3_rlhf as part3
from workbook.lm.model import GPT, GPTConfig

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.fixture(autouse=True)
def exact_matmuls():
    previous = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False  # TF32 would differ from the CPU in the 3rd digit
    yield
    torch.backends.cuda.matmul.allow_tf32 = previous


def tiny_model(seed: int = 0) -> part3.GPTWithValueHead:
    torch.manual_seed(seed)
    model = part3.GPTWithValueHead(GPT(GPTConfig(vocab_size=20, block_size=32, n_layer=2, n_head=2, d_model=32, dropout=0.0)))
    with torch.no_grad():  # the value head starts at zero; give it something to compare
        for p in model.parameters():
            p.add_(0.01 * torch.randn_like(p))
    return model.eval()


def test_gae_on_cuda_matches_cpu():
    g = torch.Generator().manual_seed(0)
    args = dict(next_value=torch.randn(8, generator=g), next_terminated=torch.rand(8, generator=g) < 0.1,
                rewards=torch.randn(64, 8, generator=g), values=torch.randn(64, 8, generator=g),
                terminated=torch.rand(64, 8, generator=g) < 0.1)
    cpu = part1.compute_advantages(**args, gamma=0.99, gae_lambda=0.95)
    gpu = part1.compute_advantages(**{k: v.cuda() for k, v in args.items()}, gamma=0.99, gae_lambda=0.95)
    assert gpu.device.type == "cuda"
    torch.testing.assert_close(gpu.cpu(), cpu, rtol=1e-5, atol=1e-5)


def test_batched_forward_pass_on_cuda_matches_cpu():
    g = torch.Generator().manual_seed(1)
    queries = [torch.randint(3, 20, (n,), generator=g) for n in (3, 5, 2)]
    responses = [torch.randint(3, 20, (n,), generator=g) for n in (4, 1, 6)]
    model = tiny_model()
    cpu = part3.batched_forward_pass(model, queries, responses, temperature=0.7, pad_id=0)
    gpu = part3.batched_forward_pass(model.cuda(), [q.cuda() for q in queries], [r.cuda() for r in responses],
                                     temperature=0.7, pad_id=0)
    for name, a, b in zip(("logprobs", "logits", "values", "masks"), cpu, gpu):
        if a is None:
            assert b is None
            continue
        assert b.device.type == "cuda", f"{name} came back on {b.device}"
        torch.testing.assert_close(b.cpu(), a, rtol=1e-4, atol=1e-5, msg=lambda m: f"{name}: {m}")


def test_kv_cached_generation_on_cuda_is_seeded_and_stays_on_device():
    model = tiny_model().lm.cuda()
    ids = torch.tensor([[0, 0, 5, 6], [7, 8, 9, 10]], device="cuda")
    mask = (ids != 0).long()

    def sample(seed):
        gen = torch.Generator(device="cuda").manual_seed(seed)
        return model.generate(ids, mask, max_new_tokens=12, eos_id=2, pad_id=0, temperature=1.0, generator=gen)

    first, again = sample(3), sample(3)
    assert all(r.device.type == "cuda" for r in first)
    assert all(torch.equal(a, b) for a, b in zip(first, again)), "same seed, different samples on CUDA"


def test_ppo_step_runs_on_cuda():
    model = tiny_model().cuda()
    reference = part3.create_reference_model(model)
    trainer = part3.PPOTrainer(part3.PPOConfig(mini_batch_size=2, ppo_epochs=1), model, reference, pad_id=0)
    g = torch.Generator().manual_seed(2)
    queries = [torch.randint(3, 20, (3,), generator=g).cuda() for _ in range(4)]
    responses = [torch.randint(3, 20, (n,), generator=g).cuda() for n in (2, 5, 3, 4)]
    stats = trainer.step(queries, responses, torch.tensor([1.0, -1.0, 0.5, 0.0], device="cuda"))
    assert all(torch.isfinite(torch.tensor(float(v))) for v in stats.values() if isinstance(v, (int, float)))
    assert all(not p.requires_grad for p in reference.parameters())


@pytest.mark.parametrize("algo", ["grpo", "rloo", "dpo"])
def test_part5_steps_on_cuda_match_cpu(algo):
    from solutions import part5_beyond_ppo as part5

    g = torch.Generator().manual_seed(4)
    queries = [torch.randint(3, 20, (3,), generator=g) for _ in range(4)]
    responses = [torch.randint(3, 20, (n,), generator=g) for n in (2, 5, 3, 4)]
    other = [torch.randint(3, 20, (n,), generator=g) for n in (3, 1, 4, 2)]
    scores = torch.tensor([1.0, -1.0, 0.5, 0.0])

    def one_step(device: str):
        policy = part5.LanguageModelPolicy(tiny_model().lm).to(device)
        reference = part3.create_reference_model(policy)
        q, r, o = ([t.to(device) for t in ts] for ts in (queries, responses, other))
        if algo == "dpo":
            stats = part5.DPOTrainer(part5.DPOConfig(beta=0.5), policy, reference, pad_id=0).step(q, r, o)
        else:
            config = part5.GroupConfig(algo=algo, group_size=2, mini_batch_size=2, beta=0.1, normalisation="token")
            stats = part5.GroupTrainer(config, policy, reference, pad_id=0).step(q, r, scores.to(device))
        assert all(p.device.type == device for p in policy.parameters())
        return stats, [p.detach().cpu() for p in policy.parameters()]

    (cpu_stats, cpu_params), (gpu_stats, gpu_params) = one_step("cpu"), one_step("cuda")
    assert cpu_stats.keys() == gpu_stats.keys()
    for key in cpu_stats:
        assert abs(cpu_stats[key] - gpu_stats[key]) <= 1e-4 + 1e-4 * abs(cpu_stats[key]), f"{algo} stat {key} differs on CUDA"
    for a, b in zip(cpu_params, gpu_params):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5)
