"""API faults on a schedule during create, update, scale and delete: the cluster converges to
exactly the planned children and the status said what happened meanwhile."""

import pytest

from kimi_operator.embedded.faults import Fault
from kimi_operator.embedded.harness import EmbeddedApiServer
from kimi_operator.embedded.reliability import NAMESPACE, converge, deployment, run_faults
from kimi_operator.k8s.client import Client
from kimi_operator.k8s.resources import KIMI_DEPLOYMENT
from tests.integration.reliability.conftest import CLIENT_TIMEOUT_S

pytestmark = pytest.mark.usefixtures("operator")


def test_every_phase_converges_exactly_and_the_status_says_why(
    api: EmbeddedApiServer, client: Client
) -> None:
    report = run_faults(
        api, client, deployments=4, timeout_delay_s=CLIENT_TIMEOUT_S + 0.5, phase_timeout_s=60
    )
    assert set(report.injected) == {"conflict", "throttle", "server-error", "timeout", "watch-drop"}
    assert (report.duplicates, report.orphans) == (0, 0)
    assert report.converged == 4 * 6  # 4 deployments, 6 phases
    assert "ApiTimeout" in report.reasons["create"]


def test_throttling_waits_as_long_as_retry_after_says(
    api: EmbeddedApiServer, client: Client
) -> None:
    api.inject(Fault("POST", "/services", 429, retry_after=2))
    since = api.mark()
    client.create(KIMI_DEPLOYMENT, deployment("throttled"))
    converge(client, 30)
    posts = [w.time for w in api.writes(since) if w.path.endswith("/services")]
    assert len(posts) == 2  # refused once, then created
    assert posts[1] - posts[0] >= 2.0
    kd = client.get(KIMI_DEPLOYMENT, NAMESPACE, "throttled")
    assert kd is not None
    assert {c["type"]: c["status"] for c in kd["status"]["conditions"]}["Degraded"] == "False"
