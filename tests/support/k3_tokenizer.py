"""A small tokenizer with Kimi K3's XTML special tokens, for vLLM's code that needs one: its
`kimi_k3` reasoning parser finds the think channel's markers (`<|open|>think<|sep|>`, three tokens
each) by their ids, and its config code loads the tokenizer when a reasoning parser is set. Built
locally (no hub access): a word-level vocabulary of the channel names, the rest unknown."""

from pathlib import Path

SPECIAL_TOKENS = ("<|open|>", "<|close|>", "<|sep|>", "<|media_pad|>", "[UNK]")
CHANNEL_WORDS = ("think", "response", "tools", "call", "argument", "message")


def write_k3_tokenizer(folder: Path) -> None:
    """Save the tokenizer's files (tokenizer.json, tokenizer_config.json) into `folder`."""
    from tokenizers import Tokenizer, models, pre_tokenizers  # noqa: PLC0415 (vLLM's extras)
    from transformers import PreTrainedTokenizerFast  # noqa: PLC0415

    vocab = {token: i for i, token in enumerate(SPECIAL_TOKENS + CHANNEL_WORDS)}
    model = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    model.pre_tokenizer = pre_tokenizers.Whitespace()
    model.add_special_tokens(list(SPECIAL_TOKENS))
    fast = PreTrainedTokenizerFast(tokenizer_object=model, unk_token="[UNK]")  # type: ignore[no-untyped-call]  # transformers 5 leaves it untyped
    fast.save_pretrained(folder)
