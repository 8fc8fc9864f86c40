"""The group set's model check (#56; docs/architecture.md, "The group set"): the state machine of
tests/support/group_model.py over random interleavings of rack drains, restarts, edits, scaling
and failures against the operator's own decision code. `make test` runs fifteen interleavings,
the same each time; `KIMI_MODEL_CHECK=long` (make test-model) a thousand, or
`KIMI_MODEL_CHECK_EXAMPLES` of them, random each run: hypothesis prints the steps of a failure
and the seed that replays it."""

import os

from hypothesis import HealthCheck, settings

from tests.support.group_model import Fleet

LONG = os.environ.get("KIMI_MODEL_CHECK") == "long"
EXAMPLES = int(os.environ.get("KIMI_MODEL_CHECK_EXAMPLES") or (1000 if LONG else 15))


Fleet.TestCase.settings = settings(
    max_examples=EXAMPLES,
    stateful_step_count=25 if LONG else 10,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=not LONG,
)
test_the_group_set_under_interleaved_events = Fleet.TestCase
