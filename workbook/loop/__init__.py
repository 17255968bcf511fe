"""The language-model RL loop: one loop, three parts that plug into it.

    python -m workbook rlhf --impl solutions --algo grpo     # the review task, the tiny GPT, GRPO

- ``task.py``: **what** is learnt — prompts, reward, evaluation (the review task of Parts 3
  and 5; the interface a task with verifiable rewards, Part 7's reasoning task, plugs into).
- ``backend.py``: **which model** — the tiny review GPT (``workbook/lm``) or any Hugging Face
  causal LM through the adapter in ``workbook/hf`` (``--model``).
- ``algorithms.py``: **how** it learns — ppo (Part 3), grpo, rloo, dpo (Part 5): each with its
  defaults, its curves' panels and the object the loop drives.
- ``run.py``: the loop itself (:class:`~workbook.loop.run.Run`: set up, one function per
  iteration, one end-of-run writer; several seeds, ``--resume``), on the options every LM
  command shares (``options.py``); ``curves.py`` and ``health.py``: its figures and its watch
  for a dead run.
- One module per command, each its command only: ``rlhf.py`` (the review task; Parts 3, 5)
  and ``reasoning.py`` (``reason``: verifiable rewards, Part 7, with ``rlvr.py``'s losses).

Dependencies point one way: ``loop`` uses ``rlhf`` (the review task's ingredients: prompts,
rollout, scorers, reward model), ``hf`` (the adapter) and ``lm`` (the GPT); none of them
imports ``loop``.
"""
