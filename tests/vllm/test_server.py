"""The CPU server starts with every kimi_kernels plugin loaded, serves, and the plugins' figures
count every request and agree with vLLM's own (vLLM 0.32.0, CPU build)."""

import pytest
import yaml

from kimi_kernels.decode_metrics import names
from kimi_operator.bench.server_metrics import PREFIX_HITS, PREFIX_QUERIES
from kimi_operator.embedded.upstream import EPP_RELEASE, upstream_file
from tests.vllm.conftest import Served, timed_requests, version_of

AGREEMENT = 0.10


def test_serves_with_every_plugin_loaded(served: Served) -> None:
    assert served.model in served.get(f"{served.root}/v1/models")
    text = served.metrics_text()
    assert version_of(text) == "0.32.0"
    assert 'decode_backend="auto"' in text
    assert f"{names.ENGINE_GPUS}{{" in text
    assert f"{names.REQUEST_DECODE_TPS}_count" in text
    # The decode-path plugin: loaded, found no Kimi K3 module, said so once, and serves that.
    log = served.log_text()
    assert "decode path not instrumented: vLLM 0.32.0 has no vllm.models.kimi_k3" in log
    assert f"{names.DECODE_PATH_INSTRUMENTED} 0.0" in served.side_metrics()
    assert "Traceback" not in log


def test_decode_path_plugin_imports_nothing_heavy(served: Served) -> None:
    """What killed the server before: numba/llvmlite pulled into every process."""
    assert "'_lib_fn_wrapper' object has no attribute" not in served.log_text()


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_plugin_counts_every_request_and_agrees_with_vllm(served: Served, api: str) -> None:
    requests, tokens = 4, 48
    before = served.metrics()
    timed_requests(served, requests, tokens, api)
    after = served.metrics()

    def change(name: str) -> float:
        return after.totals[name] - before.totals.get(name, 0.0)

    assert change(f"{names.REQUEST_DECODE_TPS}_count") == requests
    assert change(f"{names.REQUEST_TTFT}_count") == requests
    assert change("vllm:request_decode_time_seconds_count") == requests
    assert change("vllm:generation_tokens_total") == requests * tokens
    ours = change(f"{names.REQUEST_DECODE_TPS}_sum") / requests
    # vLLM's own: tokens after the first over the decode time of all (equal-length requests: the
    # mean of our per-request rates when their decode times are equal, a little below it otherwise).
    theirs = (tokens - 1) * requests / change("vllm:request_decode_time_seconds_sum")
    assert ours == pytest.approx(theirs, rel=AGREEMENT)
    # The same interval from the same clock as vLLM's (CI once saw 9.6 vs 11.1 ms when it was
    # end-to-end latency less decode time): equal, not near.
    assert change("vllm:time_to_first_token_seconds_count") == requests
    ttft = change(f"{names.REQUEST_TTFT}_sum")
    assert ttft == pytest.approx(change("vllm:time_to_first_token_seconds_sum"), rel=1e-9)


def test_what_the_endpoint_picker_reads_is_served_and_the_prefix_cache_counts(
    served: Served,
) -> None:
    """The metrics llm-d's endpoint picker scrapes from each leader (spec.routing.mode
    InferencePool) under the names it reads, and prefix caching on by default: a long prompt
    sent again is found in the cache, the counters bench reads around a replay."""
    epp = yaml.safe_load(upstream_file(EPP_RELEASE).read_text())
    lines = served.metrics_text().splitlines()
    families = {line.split()[2] for line in lines if line.startswith("# TYPE")}
    assert set(epp["vllmMetrics"]) - families == set()
    info = next(line for line in lines if line.startswith("vllm:cache_config_info{"))
    assert [label for label in epp["cacheInfoLabels"] if f'{label}="' not in info] == []
    assert 'enable_prefix_caching="True"' in info
    prompt = " ".join(f"step {i} of the plan" for i in range(150))  # several blocks of tokens
    before = served.metrics()
    timed_requests(served, 2, 1, prompt=prompt)
    after = served.metrics()
    queries = after.totals[PREFIX_QUERIES] - before.totals.get(PREFIX_QUERIES, 0.0)
    hits = after.totals[PREFIX_HITS] - before.totals.get(PREFIX_HITS, 0.0)
    # The second request finds the first's whole blocks: about half of all tokens looked up.
    assert queries > 0
    assert 0.3 < hits / queries <= 0.5
