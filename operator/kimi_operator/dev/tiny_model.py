"""A tiny random-weight DeepseekV3 (MLA + MoE: Kimi K3's architecture family) and a byte-level BPE
tokenizer trained here, for vLLM's CPU build on a machine that cannot download weights.

Runs with the CPU vLLM venv's Python (torch, transformers, tokenizers), not the project's:
`python tiny_model.py OUT_DIR WORDS_FILE`. What vLLM 0.32.0's CPU MLA needs: `kv_lora_rank` 512,
`qk_rope_head_dim` 64, bf16; `topk_method: noaux_tc` with `scoring_func: sigmoid` (else loading
fails on `e_score_correction_bias`). The tokenizer learns every bench word both bare and after a
space, so the bench's N-word prompts are N tokens (one-word prompts included).
"""

import json
import random
import sys
from pathlib import Path

SPECIALS = ["<|bos|>", "<|eos|>", "<|user|>", "<|assistant|>", "<|system|>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
VOCAB_SIZE = 2048


def train_tokenizer(words: list[str], out: Path) -> int:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: PLC0415
    from transformers import PreTrainedTokenizerFast  # noqa: PLC0415

    rng = random.Random(0)
    corpus = [" ".join(rng.choices(words, k=24)) for _ in range(2000)] + words * 20
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(corpus, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, bos_token="<|bos|>", eos_token="<|eos|>"
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(out))
    return int(tokenizer.get_vocab_size())


def build_model(vocab_size: int, bos: int, eos: int, out: Path) -> int:
    import torch  # noqa: PLC0415
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM  # noqa: PLC0415

    torch.manual_seed(0)
    config = DeepseekV3Config(
        vocab_size=vocab_size,
        hidden_size=256,
        intermediate_size=512,
        moe_intermediate_size=128,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=4,
        n_shared_experts=1,
        n_routed_experts=8,
        num_experts_per_tok=2,
        n_group=1,
        topk_group=1,
        first_k_dense_replace=1,
        q_lora_rank=128,
        kv_lora_rank=512,
        qk_rope_head_dim=64,
        qk_nope_head_dim=64,
        v_head_dim=64,
        max_position_embeddings=4096,
        bos_token_id=bos,
        eos_token_id=eos,
        tie_word_embeddings=False,
    )
    config.topk_method = "noaux_tc"
    config.scoring_func = "sigmoid"
    model = DeepseekV3ForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(str(out))
    # vLLM reads these from config.json; transformers may not write what it does not model.
    saved = json.loads((out / "config.json").read_text())
    saved |= {"topk_method": "noaux_tc", "scoring_func": "sigmoid", "torch_dtype": "bfloat16"}
    (out / "config.json").write_text(json.dumps(saved, indent=2))
    return sum(p.numel() for p in model.parameters())


def main(out_dir: str, words_file: str) -> None:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    words = Path(words_file).read_text().split()
    vocab = train_tokenizer(words, out)
    ids = json.loads((out / "tokenizer.json").read_text())["added_tokens"]
    by_name = {token["content"]: token["id"] for token in ids}
    parameters = build_model(vocab, by_name["<|bos|>"], by_name["<|eos|>"], out)
    print(f"tiny DeepseekV3: {parameters / 1e6:.1f} M parameters, vocabulary {vocab}, in {out}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
