"""Part 3's support code: the RLHF training command, rewards, evaluation and the reward model.

    python -m workbook rlhf --impl solutions                  # PPO against VADER, wandb offline
    python -m workbook rlhf --impl solutions --kl-coef 0      # no KL leash: watch it reward-hack
    python -m workbook.rlhf.reward_model --impl solutions     # train the learned reward model (cached)
    python -m workbook rlhf --impl solutions --reward model   # PPO against the learned reward model

The exercises themselves live in ``exercises/part3_rlhf.py``; everything here is given code
that calls them (``--impl exercises``, the default, runs your versions).
"""
