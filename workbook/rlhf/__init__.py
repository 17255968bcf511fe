"""Part 3's support code: the review task's ingredients — prompts, rollout, rewards, evaluation, the reward model.

    python -m workbook rlhf --impl solutions                  # PPO against VADER, wandb offline
    python -m workbook rlhf --impl solutions --kl-coef 0      # no KL leash: watch it reward-hack
    python -m workbook.rlhf.reward_model --impl solutions     # train the learned reward model (cached)
    python -m workbook rlhf --impl solutions --reward model   # PPO against the learned reward model

- ``data.py``: prompts in, (query ids, response ids, texts) out: the rollout of an iteration;
- ``prompts.py``: the prompt sources (the corpus' openers, IMDB, a file);
- ``rewards.py``: VADER, the learned reward model or a Hugging Face classifier as the reward;
- ``evaluate.py``: the before/after measurement; ``reward_model.py``: train the reward model.

The training loop that uses them is ``workbook/loop`` (the review task is assembled in
``workbook/loop/task.py``); nothing here imports it. The exercises themselves live in
``exercises/part3_rlhf.py``; everything here is given code that calls them (``--impl
exercises``, the default, runs your versions).
"""
