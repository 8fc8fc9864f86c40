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

# Autoscaling defaults: a group's cold start (scheduling, loading a trillion-parameter checkpoint)
# takes tens of minutes, so a group is kept at least half an hour after the load dropped, and
# groups are added one at a time, at most every 10 minutes.
SCALE_DOWN_STABILIZATION_S: Final = 1800
SCALE_UP_PERIOD_S: Final = 600
# The key of spec.autoscaling.slo.calibration's ConfigMap that holds the document by default.
CALIBRATION_KEY: Final = "calibration.json"

# The start-up budget of a TP group (spec.serving.startupTimeoutMinutes): the leader's startup
# probe window. vLLM's engine-ready timeout is the budget less ENGINE_READY_MARGIN_S, the API
# server's own start before and after its wait for the engines, so that a slow engine ends with
# vLLM's message rather than a probe kill. The least budget keeps the timeout at or above vLLM's
# own default (600 s); the most is 8 hours.
DEFAULT_STARTUP_MINUTES: Final = 90
MIN_STARTUP_MINUTES: Final = 15
MAX_STARTUP_MINUTES: Final = 480
ENGINE_READY_MARGIN_S: Final = 300

# spec.kvCache.cpuOffload.perGPU: a whole number of GiB (vLLM's --kv-offloading-size is in GiB).
PER_GPU_OFFLOAD: Final = r"^[1-9][0-9]{0,3}Gi$"

# Where the kimi_kernels vLLM plugin serves the decode-rate metrics on every pod (and the
# PodMonitor scrapes).
METRICS_PORT: Final = 9090

# A KimiDeployment's name ends up in LeaderWorkerSet, Service and pod names (`<name>-g<i>-<n>-<m>`),
# which must be DNS-1035 labels of at most 63 characters.
MAX_NAME_LENGTH: Final = 40
NAME_PATTERN: Final = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"

# Bounds that keep the CEL cost of the list rules within the API server's budget (every string,
# list and map of the schema is bounded: tests/kimi_operator/api/test_crd_bounds.py).
MAX_ENGINE_ARGS: Final = 64
MAX_ENGINE_ARG_LENGTH: Final = 512
MAX_ENV: Final = 64
MAX_TOLERATIONS: Final = 32
MAX_NODE_SELECTOR: Final = 64
MAX_PULL_SECRETS: Final = 8
MAX_CACHE_FILE_PATTERNS: Final = 32

# Bounds on a whole document, checked before any validation (hostile or broken input: huge files,
# deep nesting, YAML alias bombs). The API server refuses request bodies over 3 MiB.
MAX_DOCUMENT_BYTES: Final = 3 * 1024 * 1024
MAX_DOCUMENTS_PER_FILE: Final = 100
# The spec nests at most 6 levels (spec.env[i].valueFrom.secretKeyRef.name); metadata.managedFields
# about twice the object's depth.
MAX_DEPTH: Final = 32
# Values (mapping entries, list items, scalars) counted with YAML aliases expanded: a spec with
# every list at its maxItems has about 2,000; alias bombs expand to billions.
MAX_VALUES: Final = 100_000

# Where the trace id goes in a trace UI's link (spec.observability.tracing.uiUrl, `bench
# --trace-url`), and what such a link looks like: an http(s) URL with the placeholder, no blank.
TRACE_ID_PLACEHOLDER: Final = "{trace_id}"
TRACE_UI_URL: Final = r"^https?://\S*\{trace_id\}\S*$"
