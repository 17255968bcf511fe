"""The language-model RL loop: one loop, three parts that plug into it.

    python -m workbook rlhf --impl solutions --algo grpo     # the review task, the tiny GPT, GRPO

- ``task.py``: **what** is learnt — prompts, reward, evaluation (the review task of Parts 3
  and 5; the interface a task with verifiable rewards, Part 7's reasoning task, plugs into).
- ``backend.py``: **which model** — the tiny review GPT (``workbook/lm``) or any Hugging Face
  causal LM through the adapter in ``workbook/hf`` (``--model``).
- ``algorithms.py``: **how** it learns — ppo (Part 3), grpo, rloo, dpo (Part 5): each with its
  defaults, its curves' panels and the object the loop drives.
- ``train.py``: the loop itself (:class:`~workbook.loop.train.Run`: set up, one function per
  iteration, one end-of-run writer) and the ``rlhf`` command; ``curves.py``: its figures.

Dependencies point one way: ``loop`` uses ``rlhf`` (the review task's ingredients: prompts,
rollout, scorers, reward model), ``hf`` (the adapter) and ``lm`` (the GPT); none of them
imports ``loop``.
"""
