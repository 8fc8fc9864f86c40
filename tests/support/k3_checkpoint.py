"""A small stand-in for the Kimi K3 checkpoint, for vLLM's own code: the parts of its config that
vLLM's config code and fast-path gate read, its image processor settings, and a tokenizer with
K3's XTML special tokens. Built locally (no hub access).

vLLM's config code loads the tokenizer once a reasoning parser is set, and builds K3's multimodal
processing info (tokenizer and image processor) unless `--language-model-only`; its `kimi_k3`
reasoning parser finds the think channel's markers (`<|open|>think<|sep|>`, three tokens each) by
their ids. The tokenizer is a word-level vocabulary of the channel names, the rest unknown.
"""

import json
from pathlib import Path
from typing import Any

# The parts of Kimi K3's config that vLLM's config code and gate read (MLA with 512 + 64 wide
# rows, a long context, the one-group sigmoid top-16 SiTU MoE), on a model small enough to build a
# config for.
K3_TEXT = {
    "model_type": "kimi_linear", "hidden_size": 256, "intermediate_size": 512,
    "num_attention_heads": 16, "num_key_value_heads": 16, "num_hidden_layers": 2,
    "vocab_size": 1024, "max_position_embeddings": 262144, "torch_dtype": "bfloat16",
    "kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128,
    "hidden_act": "situ", "activation_situ_beta": 4.0, "activation_situ_linear_beta": 25.0,
    "num_experts": 896, "num_experts_per_token": 16, "num_expert_group": 1, "topk_group": 1,
    "moe_router_activation_func": "sigmoid",
}  # fmt: skip
K3 = {
    "architectures": ["KimiK3ForConditionalGeneration"],
    "model_type": "kimi_k3",
    "text_config": K3_TEXT,
    "torch_dtype": "bfloat16",
}
# The vision side's image processor settings (vLLM's own processor class reads them).
K3_IMAGE_PROCESSOR = {
    "media_proc_cfg": {
        "merge_kernel_size": 2, "temporal_merge_kernel_size": 4, "patch_size": 14,
        "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
        "in_patch_limit": 16384, "patch_limit_on_one_side": 512, "fixed_output_tokens": None,
    }
}  # fmt: skip
SPECIAL_TOKENS = ("<|open|>", "<|close|>", "<|sep|>", "<|media_pad|>", "[UNK]")
CHANNEL_WORDS = ("think", "response", "tools", "call", "argument", "message")


def write_config(folder: Path, config: dict[str, Any]) -> str:
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    return str(folder)


def write_k3_checkpoint(folder: Path) -> str:
    """Create `folder` with K3's config, image processor settings and tokenizer; its path."""
    from tokenizers import Tokenizer, models, pre_tokenizers  # noqa: PLC0415 (vLLM's extras)
    from transformers import PreTrainedTokenizerFast  # noqa: PLC0415

    path = write_config(folder, K3)
    (folder / "preprocessor_config.json").write_text(json.dumps(K3_IMAGE_PROCESSOR))
    vocab = {token: i for i, token in enumerate(SPECIAL_TOKENS + CHANNEL_WORDS)}
    model = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    model.pre_tokenizer = pre_tokenizers.Whitespace()
    model.add_special_tokens(list(SPECIAL_TOKENS))
    fast = PreTrainedTokenizerFast(tokenizer_object=model, unk_token="[UNK]")
    fast.save_pretrained(folder)
    return path
