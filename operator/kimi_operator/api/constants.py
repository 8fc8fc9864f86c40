"""Names and numbers of the KimiDeployment API and the facts from vLLM 0.33.0 it rests on."""

from typing import Final

GROUP: Final = "kimi-operator.io"
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{GROUP}/{VERSION}"
KIND: Final = "KimiDeployment"
PLURAL: Final = "kimideployments"
SINGULAR: Final = "kimideployment"
SHORT_NAME: Final = "kimi"

# vLLM's latency-specialized decode runs only at these tensor-parallel sizes.
SUPPORTED_GPU_COUNTS: Final = (8, 16)
# The fast path covers decode batches of at most this many tokens:
# (1 + numSpeculativeTokens) x running requests.
FAST_PATH_MAX_DECODE_TOKENS: Final = 64
# vLLM refuses more draft tokens than this with the specialized decode.
MAX_SPECULATIVE_TOKENS: Final = 7

# A KimiDeployment's name ends up in LeaderWorkerSet, Service and pod names (`<name>-g<i>-<n>-<m>`),
# which must be DNS-1035 labels of at most 63 characters.
MAX_NAME_LENGTH: Final = 40
NAME_PATTERN: Final = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"

# Bounds that keep the CEL cost of the list rules within the API server's budget.
MAX_ENGINE_ARGS: Final = 64
MAX_ENGINE_ARG_LENGTH: Final = 512
MAX_ENV: Final = 64
