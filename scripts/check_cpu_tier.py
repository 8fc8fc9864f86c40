"""The GPU-side check of the CPU KV tier (docs/kv-cache.md): a session evicted from GPU memory
comes back from the tier, counted by vLLM's own metrics.

vLLM's CPU build cannot run the tier (`CPU Offloading is currently only supported on CUDA-alike
and XPU GPUs`), so this runs against a server on GPUs: a KimiDeployment with
spec.kvCache.cpuOffload (with KUBECONFIG: `kubectl port-forward -n NS svc/NAME 8000`), or
`vllm serve ... --kv-offloading-size N --kv-offloading-backend native`:

    python scripts/check_cpu_tier.py --endpoint http://127.0.0.1:8000 [--model NAME]

1. the session's first turn: its prompt is cached in GPU memory and stored to the tier;
2. unrelated prompts, more tokens in all than the GPU cache holds (vllm:cache_config_info's
   kv_cache_size_tokens, or --evict-tokens), push it out of GPU memory;
3. the session's returning turn: its first turn's prompt and a few words more.

It passes when, over the returning turn alone, vLLM counted the first turn's whole blocks as
external (CPU-tier) prefix-cache hits, at least --min-share of them, and fewer as GPU hits. It
prints one JSON report; exit 0: passed, 1: failed, 2: the server could not be asked.
"""

import argparse
import json
import math
import random
import sys
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kimi_operator.bench.server_metrics import (
    OFFLOAD_HITS,
    OFFLOAD_QUERIES,
    PREFIX_HITS,
    Snapshot,
    parse,
)
from kimi_operator.builders.routing import PICKER_BLOCK_TOKENS

CACHE_INFO = "vllm:cache_config_info"


def _get(url: str, timeout_s: float) -> str:
    with urllib.request.urlopen(url, timeout=timeout_s) as answer:
        text: str = answer.read().decode()
        return text


def _complete(endpoint: str, model: str, prompt: str, timeout_s: float) -> int:
    """One streamed completion of one token; the prompt tokens the server counted (its usage)."""
    body = {
        "model": model,
        "prompt": prompt,
        "max_tokens": 1,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    request = urllib.request.Request(
        f"{endpoint}/v1/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    tokens = None
    with urllib.request.urlopen(request, timeout=timeout_s) as answer:
        for line in answer:
            data = line.decode().strip().removeprefix("data:").strip()
            if data and data != "[DONE]":
                usage = json.loads(data).get("usage")
                tokens = usage["prompt_tokens"] if usage else tokens
    if tokens is None:
        raise ValueError(f"{endpoint}: no usage in the answer")
    return int(tokens)


def _words(rng: random.Random, count: int) -> str:
    return " ".join(f"w{rng.randrange(10**9)}" for _ in range(count))


def _label(snapshot: Snapshot, name: str) -> int | None:
    value = snapshot.config.get(name, "")
    return int(value) if value.isdigit() else None


def check(
    endpoint: str,
    model: str,
    *,
    session_words: int,
    evict_tokens: int | None,
    filler_words: int,
    parallel: int,
    min_share: float,
    seed: int,
    timeout_s: float,
) -> dict[str, Any]:
    rng = random.Random(seed)
    metrics = f"{endpoint}/metrics"
    before = parse(_get(metrics, timeout_s))
    gpu_tokens = evict_tokens or _label(before, "kv_cache_size_tokens")
    if gpu_tokens is None:
        raise ValueError("the server reports no kv_cache_size_tokens: give --evict-tokens")
    block = _label(before, "block_size") or 16
    session = _words(rng, session_words)
    first_tokens = _complete(endpoint, model, session, timeout_s)
    fillers = math.ceil(1.25 * gpu_tokens / filler_words) + 1
    prompts = [_words(rng, filler_words) for _ in range(fillers)]
    with ThreadPoolExecutor(parallel) as pool:
        filled = sum(pool.map(lambda p: _complete(endpoint, model, p, timeout_s), prompts))
    evicted = parse(_get(metrics, timeout_s))
    returning_tokens = _complete(endpoint, model, f"{session} {_words(rng, 8)}", timeout_s)
    after = parse(_get(metrics, timeout_s))

    def change(name: str) -> float:
        return after.totals.get(name, 0.0) - evicted.totals.get(name, 0.0)

    expected = first_tokens // block * block
    tier_hits, gpu_hits = change(OFFLOAD_HITS), change(PREFIX_HITS)
    passed = expected > 0 and tier_hits >= min_share * expected and gpu_hits < tier_hits
    return {
        "passed": passed,
        "block_size": block,
        # Precise prefix scoring (docs/kv-cache.md): the picker hashes blocks of 16 tokens.
        "block_size_divides_into_picker_blocks": block % PICKER_BLOCK_TOKENS == 0,
        "gpu_cache_tokens": gpu_tokens,
        "first_turn_prompt_tokens": first_tokens,
        "filler_prompt_tokens": filled,
        "returning_turn_prompt_tokens": returning_tokens,
        "returning_turn_tier_hits": tier_hits,
        "returning_turn_tier_queries": change(OFFLOAD_QUERIES),
        "returning_turn_gpu_hits": gpu_hits,
        "expected_tier_hits": expected,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--endpoint", required=True, help="vLLM's base URL, without /v1")
    parser.add_argument("--model", default="moonshotai/Kimi-K3", help="the served model name")
    parser.add_argument("--session-words", type=int, default=4000)
    parser.add_argument("--evict-tokens", type=int, default=None, help="the GPU cache's tokens")
    parser.add_argument("--filler-words", type=int, default=4000)
    parser.add_argument("--parallel", type=int, default=8)
    parser.add_argument("--min-share", type=float, default=0.9)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout-s", type=float, default=600.0)
    args = parser.parse_args(argv)
    try:
        report = check(
            args.endpoint.rstrip("/"),
            args.model,
            session_words=args.session_words,
            evict_tokens=args.evict_tokens,
            filler_words=args.filler_words,
            parallel=args.parallel,
            min_share=args.min_share,
            seed=args.seed,
            timeout_s=args.timeout_s,
        )
    except (OSError, ValueError, KeyError) as error:
        print(json.dumps({"passed": False, "error": str(error)}))
        return 2
    print(json.dumps(report, indent=2))
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
