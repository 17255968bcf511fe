"""Part 10's support room: stale and mismatched rollouts, and the sampler processes that make them.

``sampler.py``: a sampler (the policy's LM in its own dtype, its random stream, the task) and
stale sampling in the learner's process (``--lag K``); ``processes.py``: sampler processes
beside the learner on torch.distributed (``--samplers N``). The corrections are the learner's
(``exercises/part10_async.py``), called by the trainer (``workbook/loop/rlvr.py``).
"""
