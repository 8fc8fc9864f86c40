"""`kimi-operator run` killed (SIGKILL) at random points of its reconciles and restarted: the
cluster converges with no duplicate or leaked child. The benchmark does 50 and more."""

import os
import random

from kimi_operator.embedded.harness import EmbeddedApiServer
from kimi_operator.embedded.processes import OperatorProcess
from kimi_operator.embedded.reliability import run_restarts
from kimi_operator.k8s.client import Client

SEED = int(os.environ.get("KIMI_RELIABILITY_SEED", random.randrange(1 << 30)))


def test_killed_mid_reconcile_and_restarted(
    api: EmbeddedApiServer, client: Client, operator_process: OperatorProcess
) -> None:
    report = run_restarts(api, client, operator_process, kills=6, seed=SEED, converge_every=3)
    assert report.restarts == 6, f"seed {SEED}"
    assert (report.duplicates, report.orphans) == (0, 0), f"seed {SEED}"
    assert report.converged > 0
