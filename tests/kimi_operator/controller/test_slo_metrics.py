"""The SLO scaler's gauges (controller/metrics.py): one series per deployment and role with an
slo, from the status the controller wrote, gone with the slo or the deployment."""

from prometheus_client import generate_latest

from kimi_operator.controller.metrics import Metrics

DECODE = {
    "desiredReplicas": 3,
    "load": {"requestRate": 2.5, "promptTokens": 20000, "outputTokens": 400, "prefixHitRate": 0.8},
    "forecast": {"at": "t", "level": 2.5, "trend": 0.0, "horizonSeconds": 600, "requestRate": 4.0},
    "correction": {"slower": 1.2, "ttftError": 0.25},  # no decode error yet
    "needed": {"replicas": 3, "ttftSeconds": 1.4, "decodeTokensPerSecond": 55.0},
}


def text(metrics: Metrics) -> str:
    return generate_latest(metrics.registry).decode()


def test_each_role_with_an_slo_has_its_gauges_until_it_goes() -> None:
    metrics = Metrics()
    status = {"sloAutoscaler": {"decode": DECODE, "prefill": {"desiredReplicas": 1}}}
    metrics.set_slo("uid-1", "inference", "k3", status)
    shown = text(metrics)
    where = 'deployment="k3",namespace="inference"'
    for line in (
        f'kimi_operator_slo_desired_groups{{{where},role="decode"}} 3.0',
        f'kimi_operator_slo_desired_groups{{{where},role="prefill"}} 1.0',
        f'kimi_operator_slo_forecast_requests_per_second{{{where},role="decode"}} 4.0',
        f'kimi_operator_slo_load_requests_per_second{{{where},role="decode"}} 2.5',
        f'kimi_operator_slo_predicted_ttft_seconds{{{where},role="decode"}} 1.4',
        f'kimi_operator_slo_predicted_decode_tokens_per_second{{{where},role="decode"}} 55.0',
        f'kimi_operator_slo_model_ttft_error{{{where},role="decode"}} 0.25',
    ):
        assert line in shown, line
    assert "kimi_operator_slo_model_decode_error{" not in shown  # not measured yet
    metrics.set_slo("uid-1", "inference", "k3", {})  # the slo removed from the spec
    assert "kimi_operator_slo_desired_groups{" not in text(metrics)
    metrics.set_slo("uid-1", "inference", "k3", status)
    metrics.forget("uid-1")  # the deployment deleted
    assert "kimi_operator_slo_desired_groups{" not in text(metrics)
