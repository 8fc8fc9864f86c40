"""vLLM plugins that export Kimi K3 decode-rate metrics from the serving image.

- `stat_logger.KimiStatLogger` (entry point group `vllm.stat_logger_plugins`): per-request decode
  throughput and time to first token, build info, GPUs per engine; served by vLLM's own `/metrics`.
- `decode_path.register` (entry point group `vllm.general_plugins`): counts model steps by decode
  path (specialized CuTe DSL decode or stock fallback, with the reason), served in text format on
  `$KIMI_METRICS_PORT` by the first GPU worker of every pod.
"""
