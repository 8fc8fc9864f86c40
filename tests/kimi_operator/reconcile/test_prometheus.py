"""The operator's own Prometheus queries (reconcile/prometheus.py) against a stand-in that asks
for a bearer token over HTTPS, as OpenShift's Thanos querier or an authenticating proxy does."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from kimi_operator.api.spec import KimiDeployment
from kimi_operator.builders import OperatorDefaults
from kimi_operator.reconcile.prometheus import prefill_load, query
from tests.support.admission import self_signed
from tests.support.specs import edited
from tests.support.stand_in_prometheus import StandInPrometheus

QUERY = "sum(up)"


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[tuple[StandInPrometheus, Path, Path]]:
    """(the stand-in, a file with the token it wants, its certificate as a CA file)."""
    cert, key = self_signed(tmp_path, "prometheus")
    stand_in = StandInPrometheus(token="first", tls=(cert, key))
    stand_in.value = 3.0
    token = tmp_path / "token"
    token.write_text("first\n")  # a trailing newline, as `kubectl create secret --from-file` keeps
    yield stand_in, token, cert
    stand_in.stop()


def test_the_token_and_the_ca_get_an_answer(secured: tuple[StandInPrometheus, Path, Path]) -> None:
    stand_in, token, cert = secured
    access = OperatorDefaults(
        prometheus_url=stand_in.url, prometheus_token_file=str(token), prometheus_ca_file=str(cert)
    )
    assert query(access, QUERY) == 3.0
    assert stand_in.queries == [QUERY]
    # A rotated token (a projected ServiceAccount token, a renewed Secret) is read afresh.
    stand_in.token = "second"
    token.write_text("second")
    assert query(access, QUERY) == 3.0


def test_without_the_token_the_refusal_names_what_was_sent(
    secured: tuple[StandInPrometheus, Path, Path],
) -> None:
    stand_in, token, cert = secured
    anonymous = OperatorDefaults(prometheus_url=stand_in.url, prometheus_ca_file=str(cert))
    with pytest.raises(ValueError, match=r"^HTTP 401: refused the credentials sent \(none\)$"):
        query(anonymous, QUERY)
    stale = OperatorDefaults(
        prometheus_url=stand_in.url, prometheus_token_file=str(token), prometheus_ca_file=str(cert)
    )
    stand_in.token = "rotated"
    with pytest.raises(ValueError, match=f"--prometheus-bearer-token-file {token}"):
        query(stale, QUERY)
    assert stand_in.queries == []


def test_an_unknown_ca_or_a_missing_token_file_is_no_answer(
    secured: tuple[StandInPrometheus, Path, Path], tmp_path: Path
) -> None:
    stand_in, token, _ = secured
    system_cas = OperatorDefaults(prometheus_url=stand_in.url, prometheus_token_file=str(token))
    with pytest.raises(ValueError, match="CERTIFICATE_VERIFY_FAILED"):
        query(system_cas, QUERY)
    missing = tmp_path / "no-such-token"
    gone = OperatorDefaults(prometheus_url=stand_in.url, prometheus_token_file=str(missing))
    with pytest.raises(
        ValueError, match=f"^--prometheus-bearer-token-file {missing}: No such file or directory$"
    ):
        query(gone, QUERY)


def test_a_refused_query_is_the_loads_error_not_an_exception(
    secured: tuple[StandInPrometheus, Path, Path],
) -> None:
    """What Degraded (PrefillMetricsUnavailable) then says, with the URL (prefill_scaling.py)."""
    stand_in, _, cert = secured
    kd = KimiDeployment.model_validate(
        edited(
            {
                "spec.routing": {"mode": "InferencePool"},
                "spec.prefill": {
                    "autoscaling": {"maxReplicas": 3, "target": {"waitingRequestsPerGroup": 4}}
                },
            }
        )
    )
    load = prefill_load(
        OperatorDefaults(prometheus_url=stand_in.url, prometheus_ca_file=str(cert)), kd
    )
    assert load is not None
    assert load.error == "HTTP 401: refused the credentials sent (none)"
