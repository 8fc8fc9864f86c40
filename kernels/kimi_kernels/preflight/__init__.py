"""Node preflight: ``python -m kimi_kernels.preflight`` (the operator's init container).

Checks, before tens of minutes of weight loading, what vLLM 0.33.0's latency-specialized Kimi K3
decode needs from the node and the image: an SM100/SM103-family GPU, a driver new enough for the
image's CUDA, the IMEX channel device when a ComputeDomain claim is expected, multicast memory,
every module and lazily imported backend of the fast path importable (``imports``), a working CuTe
DSL (compile and run a small kernel: ``kernels``) and one tiny FP8 decode through each MLA attention
core vLLM serves with, against the reference (``attention``). ``checks`` holds the decisions as
pure functions; ``probe`` gathers the facts. Our own ``kimi_kernels.mla_decode`` is no part of it:
vLLM does not run it.
"""
