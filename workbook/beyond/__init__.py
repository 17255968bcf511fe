"""Part 5's support code: GRPO, RLOO and DPO inside Part 3's training command.

    python -m workbook rlhf --algo grpo --impl solutions   # G samples per prompt, group baseline, k3 KL in the loss
    python -m workbook rlhf --algo rloo --impl solutions   # k samples per prompt, leave-one-out, KL in the reward
    python -m workbook rlhf --algo dpo --impl solutions    # the reward model's preference pairs, no sampling to train
    python benchmarks/beyond_ppo.py                        # all four side by side, and the reward–KL frontier

The training loop, evaluation, logging and outputs are Part 3's (``workbook/rlhf/train.py``);
``algorithms.py`` says what differs per algorithm: the policy, the prompts of an iteration and
the update. The exercises live in ``exercises/part5_beyond_ppo.py``.
"""
