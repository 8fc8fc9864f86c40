"""Node preflight: ``python -m kimi_kernels.preflight`` (the operator's init container).

Checks, before tens of minutes of weight loading, what vLLM's latency-specialized Kimi K3 decode
path needs from the node: an SM100/SM103-family GPU, a driver new enough for the image's CUDA,
the IMEX channel device when a ComputeDomain claim is expected, multicast memory, a working CuTe
DSL (compile and run a small kernel) and ``mla_decode`` agreeing with the reference.
``checks`` holds the decisions as pure functions; ``probe`` gathers the facts.
"""
