"""Which of the learner's functions a run of the loop calls, from its options alone: checked before anything starts.

A run of ``reason`` with ``--impl exercises`` calls the learner's Parts 3, 5, 7, 9 and
10 — in this process, and in the sampler processes of ``--samplers N`` (Part 3's
``batched_forward_pass`` for a task's own rollout, Part 7's verifier, Part 9's tool). Before any
run folder or process exists, :func:`check_learner_code` looks at every function the run will call
(:func:`learner_calls`, and what the learner's own code among them calls:
:func:`workbook.runs.find_stubs`) and names a stub in one line, exit status 2 — as a stub
reached during the run is named (:func:`workbook.runs.stub_error`).

The lists below are what the given code and the reference solutions call for each setting
(tests/test_async_train.py traces a run of each and compares): a learner's function equal to the
reference is not read again, one that differs is followed to what it calls.
"""

from __future__ import annotations

from workbook.async_rl.sampler import CORRECTING, is_stale_sampling
from workbook.runs import check_no_stubs

FORWARD = ("batched_forward_pass", "logprobs_from_logits", "entropy_from_logits", "masked_mean", "model_token_masks")
"""Part 3's forward pass and what every trainer's step takes from it (the log-probs, the entropy, the masks)."""

PPO = FORWARD + ("GPTWithValueHead", "create_reference_model", "PPOTrainer", "compute_rewards", "compute_advantages",
                 "ppo_loss", "kl_penalty", "masked_var", "masked_whiten", "clip_by_value")
"""Part 3's PPO: the policy with its value head, the trainer and what its step calls."""


def learner_calls(args, task: str) -> dict[str, list[str]]:
    """Per module of the parts (``"part7_reasoning"``), the functions (or classes) a ``reason`` run with ``args`` calls.

    ``task``: its ``--task`` (addition, multiplication, calculator). (``rlhf`` still names a stub when the
    run reaches it.)
    """
    calls: dict[str, list[str]] = {}

    def add(stem: str, *names: str) -> None:
        calls.setdefault(stem, []).extend(n for n in names if n not in calls.get(stem, []))

    algo = args.algo
    add("part7_reasoning", "answer_reward", "pass_at_k")  # the verifier scores each sample; pass@k reads the evaluation
    if algo != "ppo":
        add("part7_reasoning", "groups_with_signal")  # the batch stat of groups with a reward spread
    if task == "calculator":  # the multi-turn rollout's tool (here and in a sampler), the model's tokens in the loss
        if getattr(args, "tool", True):
            add("part9_agents", "tool_reply", "parse_tool_call", "calculate")
        add("part3_rlhf", "batched_forward_pass", "logprobs_from_logits")  # a sampler's log-probs of its own rollout

    for stem, names in update_calls(algo, getattr(args, "adaptive_kl", False)).items():
        add(stem, *names)
    if algo in CORRECTING:
        add("part3_rlhf", *FORWARD)
        add("part5_beyond_ppo", "grpo_advantages")
        add("part7_reasoning", "completion_mask", {"dapo": "clip_higher_loss", "gspo": "gspo_loss", "cispo": "cispo_loss"}[algo])
        if args.overlong_cache:
            add("part7_reasoning", "overlong_penalty")
        if task == "calculator":
            add("part9_agents", "agent_loss_mask")
        if args.kl_coef > 0:
            add("part3_rlhf", "kl_penalty")
        if is_stale_sampling(args):
            if args.correction != "none":
                add("part10_async", "importance_weights")
            if args.off_policy_delta > 0:
                add("part10_async", "off_policy_sequence_mask")
        if args.kl_coef > 0 and args.kl_estimator == "k3_is":
            add("part10_async", "kl_loss_term")
    if args.samplers > 0 or args.lag > 0:  # who samples which batch
        add("part10_async", "may_sample" if args.free_running else "sampling_version")
    return calls


def update_calls(algo: str, adaptive_kl: bool = False) -> dict[str, list[str]]:
    """Per module of the parts, what the loop's policy, reference and update call for ``algo``: Part 3's PPO (with
    its adaptive KL controller when ``adaptive_kl``), Part 5's grpo, dr_grpo, rloo or dpo, or (a Part 7 algorithm)
    Part 5's policy and groups only — the rest of a Part 7 update is :func:`learner_calls`'."""
    if algo == "ppo":
        return {"part3_rlhf": [*PPO, "AdaptiveKLController" if adaptive_kl else "FixedKLController"]}
    calls = {"part3_rlhf": ["create_reference_model"], "part5_beyond_ppo": ["LanguageModelPolicy", "repeat_for_groups"]}
    if algo in ("grpo", "dr_grpo", "rloo"):
        calls["part3_rlhf"] += [*FORWARD, "kl_penalty"]
        calls["part5_beyond_ppo"] += ["GroupTrainer", "grpo_loss", "rloo_advantages" if algo == "rloo" else "grpo_advantages"]
    elif algo == "dpo":
        calls["part3_rlhf"] += FORWARD
        calls["part5_beyond_ppo"] += ["DPOTrainer", "dpo_loss"]
    return calls


def check_learner_code(args, task: str) -> None:
    """ConfigError naming the stubs a run with ``args`` would reach (:func:`learner_calls`); nothing for --impl solutions."""
    check_no_stubs(args.impl, learner_calls(args, task))
