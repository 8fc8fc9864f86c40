"""`kimi-operator plan`: what a trace costs on a configuration, modelled before it exists.

A step model of vLLM's scheduler (continuous batching, chunked prefill, prefix caching,
speculative drafts and the fast path's batch rule) runs a trace on simulated time with step costs
calibrated from `bench --profile calibration` runs or from published figures. Pure: no HTTP, no
Kubernetes.
"""


class PlanError(Exception):
    """Bad input: reported as one line, exit 2."""
