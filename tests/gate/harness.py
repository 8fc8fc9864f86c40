"""Run in a fresh process (tests/gate/test_vllm_gate.py starts it): each case's `vllm serve`
arguments and environment through vLLM 0.33.0's own code, on a simulated GB300 (SM 10.3).

stdin: a JSON list of {"args": [...], "env": {...}}; stdout (last line): a JSON list, one object
per case: "verdict", "pass" (vLLM's specialized_decode_config returned a DecodeConfig), "stock"
(it returned None: the deployment never enters the fast path) or "refused: <vLLM's message>" (it,
or vLLM's parser or config code before it, raised); and, for a config vLLM built, what its config
code made of the KV settings: "kv" (the KV connector it configured: name, role, extra config; the
hybrid KV cache manager off or not; the KV events config; the cache block size) and
"kv_transfer" (what KVTransferConfig says of a disaggregated role's NixlConnector, null without
one, with the conv state layout vLLM's envs read: NixlConnector needs DS for K3's KDA state).

The CUDA platform module cannot be imported without libcuda, so the platform is vLLM's CPU
platform with what a GB300's CUDA platform says where the config and the gate read it: device
capability 10.3 and static (CUDA) graphs supported; and CUDA's check_and_update_config
(vllm/platforms/cuda.py:326-364: worker class, chunked multimodal input, a WSL warning) instead of
the CPU one, which would turn CUDA graphs and compilation off. It must be installed before the
rest of vLLM is imported (modules bind `current_platform` at import), hence a process of its own.
"""

import json
import os
import sys
from typing import Any

os.environ["VLLM_TARGET_DEVICE"] = "cpu"
os.environ["HF_HUB_OFFLINE"] = "1"  # no download: the model paths are local config folders

import vllm.platforms
from vllm.platforms.cpu import CpuPlatform
from vllm.platforms.interface import DeviceCapability


class SimulatedGB300(CpuPlatform):  # type: ignore[misc]  # vLLM is not checked: Any
    @classmethod
    def get_device_capability(cls, device_id: int = 0) -> DeviceCapability:  # noqa: ARG003
        return DeviceCapability(10, 3)

    @classmethod
    def support_static_graph_mode(cls) -> bool:
        return True

    @classmethod
    def check_and_update_config(cls, vllm_config: Any) -> None:
        if vllm_config.parallel_config.worker_cls == "auto":
            vllm_config.parallel_config.worker_cls = "vllm.v1.worker.gpu_worker.Worker"


vllm.platforms._current_platform = SimulatedGB300()

from vllm.engine.arg_utils import AsyncEngineArgs  # noqa: E402
from vllm.entrypoints.common.cli_args import make_arg_parser  # noqa: E402
from vllm.models.kimi_k3.nvidia.specialized_decode.runtime import (  # noqa: E402
    specialized_decode_config,
)
from vllm.utils.argparse_utils import FlexibleArgumentParser  # noqa: E402

from vllm import envs  # noqa: E402

PARSER = make_arg_parser(FlexibleArgumentParser())


class ParserExit(Exception):
    pass


def _error(message: str) -> None:
    raise ParserExit(message)


PARSER.error = _error  # argparse would exit the process


def _kv_transfer(config: Any) -> dict[str, Any] | None:
    kv = config.kv_transfer_config
    if kv is None or kv.kv_connector != "NixlConnector":
        return None
    return {
        "kv_connector": kv.kv_connector,
        "kv_role": kv.kv_role,
        "is_kv_producer": kv.is_kv_producer,
        "is_kv_consumer": kv.is_kv_consumer,
        "kv_load_failure_policy": kv.kv_load_failure_policy,
        "conv_state_layout": envs.VLLM_SSM_CONV_STATE_LAYOUT,
        "side_channel_port": envs.VLLM_NIXL_SIDE_CHANNEL_PORT,
    }


def kv_settings(config: Any) -> dict[str, Any]:
    transfer, events = config.kv_transfer_config, config.kv_events_config
    return {
        "connector": None
        if transfer is None
        else {
            "name": transfer.kv_connector,
            "role": transfer.kv_role,
            "extra": transfer.kv_connector_extra_config,
        },
        "hybrid_manager_off": config.scheduler_config.disable_hybrid_kv_cache_manager,
        "events": None
        if events is None
        else {
            "enabled": events.enable_kv_cache_events,
            "publisher": events.publisher,
            "endpoint": events.endpoint,
            "topic": events.topic,
        },
        "block_size": config.cache_config.block_size,
        "prefix_caching": config.cache_config.enable_prefix_caching,
    }


def verdict(args: list[str], env: dict[str, str], base_env: dict[str, str]) -> dict[str, Any]:
    os.environ.clear()
    os.environ.update(base_env | env)
    try:
        namespace = PARSER.parse_args(args)
        namespace.model = (
            namespace.model_tag
        )  # what `vllm serve` does (entrypoints/cli/serve.py:56-57)
        config = AsyncEngineArgs.from_cli_args(namespace).create_engine_config()
        decode = specialized_decode_config(config)
    except (ParserExit, ValueError, TypeError, AssertionError) as error:
        message = " | ".join(str(error).splitlines()[:3])[:400]
        return {
            "verdict": f"refused: {type(error).__name__}: {message}",
            "kv": None,
            "kv_transfer": None,
        }
    return {
        "verdict": "stock" if decode is None else "pass",
        "kv": kv_settings(config),
        "kv_transfer": _kv_transfer(config),
    }


def main() -> None:
    cases = json.load(sys.stdin)
    base_env = dict(os.environ)
    verdicts = [verdict(c["args"], c["env"], base_env) for c in cases]
    print(json.dumps(verdicts))


if __name__ == "__main__":
    main()
