"""A real vLLM 0.33.0 configuration on the CPU: a tiny local model config (no download), tensor
parallel size 8, `decode_backend: latency_specialized`."""

import json
from pathlib import Path
from typing import Any

import pytest

MODEL_NAME = "moonshotai/Kimi-K3"
TENSOR_PARALLEL = 8
TINY_MODEL = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_attention_heads": 16,
    "num_hidden_layers": 2,
    "num_key_value_heads": 16,
    "vocab_size": 256,
    "max_position_embeddings": 512,
    "torch_dtype": "bfloat16",
}


def tiny_vllm_config(directory: Path) -> Any:
    from vllm.config import ModelConfig, ParallelConfig, VllmConfig  # noqa: PLC0415 (slow import)

    model = directory / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text(json.dumps(TINY_MODEL))
    return VllmConfig(
        model_config=ModelConfig(
            model=str(model), served_model_name=MODEL_NAME, skip_tokenizer_init=True
        ),
        parallel_config=ParallelConfig(tensor_parallel_size=TENSOR_PARALLEL),
        additional_config={"decode_backend": "latency_specialized"},
    )


@pytest.fixture(scope="session")
def vllm_config(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return tiny_vllm_config(tmp_path_factory.mktemp("vllm"))
