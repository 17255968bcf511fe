"""Part 11's support room: Goodhart's law measured on the review GPT (``python -m workbook goodhart``).

``measure.py``: the gold, base samples, gold-labelled pairs, proxies, best-of-n and the RL task;
``fits.py``: measured rows → (√KL, gold) points and Gao et al.'s fits; ``figure.py``: the figure;
``run.py``: the command (stages per seed, run folder, ``--resume``, Ctrl-C); ``report.py``: what a finished run says
(``results.json``'s rows, the table of fits, ``evaluate``).
"""

COMMAND = "goodhart"
"""The command's name: ``python -m workbook goodhart`` (and the ``command`` of its run folders' JSON)."""

GOLDS = ("vader", "vader-words")
"""The golds the measurement knows (``--gold``; ``measure.gold_scorer`` builds each): ``vader`` (Part 3's reward) and
``vader-words`` (VADER, where every word no reader knows counts as the worst review)."""
