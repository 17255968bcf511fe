"""Any Hugging Face causal LM behind the interface of the review GPT: the adapter the loop's HF backend uses.

    pip install -e ".[hf]"        # transformers + tokenizers (imported only on this path)
    python -m workbook rlhf --impl solutions --model gpt2 --prompts imdb --reward lvwerra/distilbert-imdb --device cuda
    python -m workbook rlhf --impl solutions --model PATH      # a save_pretrained folder, offline

- ``model.py``: :class:`CausalLM` / :class:`HFTokenizer`, the adapter that gives a Hugging Face
  model and tokenizer the interface of our review GPT, so the exercises run on it unchanged
  (``workbook/loop/backend.py`` loads it for ``--model``).
- ``tiny.py``: a tokenizer trained on our review corpus and a random GPT-2, built without a
  download (the tests and ``benchmarks/hf_gpu.py`` use them).

The prompts (IMDB, a file) and the classifier reward of the classic TRL task belong to the review
task (``workbook/rlhf/prompts.py``, ``workbook/rlhf/rewards.py``; its preset in
``workbook/loop/task.py``). This package imports nothing heavy: ``python -m workbook rlhf``
without ``--model`` never loads transformers.
"""
