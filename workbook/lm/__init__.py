"""The language-model substrate of Part 3: corpus, tokenizer, GPT, pretraining, reward."""
