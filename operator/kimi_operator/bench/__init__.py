"""`kimi-operator bench`: a controlled A/B benchmark of decode paths.

Streams from an OpenAI-compatible endpoint and measures, per request, time to first token, decode
rate excluding prefill, inter-token latency per SSE chunk and per token, completion time and
errors; `bench compare` sets two runs side by side. Only the standard library is imported here so
that registering the subcommand costs nothing.
"""


class BenchError(Exception):
    """Bad input or an unreachable endpoint: reported as one line, exit 2."""
