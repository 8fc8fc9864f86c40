"""The operator's own spans are off unless asked (kimi_operator/spans.py): what `kimi-operator run`
runs never imports OpenTelemetry then, and the flag that turns them on takes the standard
OTEL_EXPORTER_OTLP_* variables as its default. tests/integration/test_operator_spans.py has them
received from a running operator."""

import os
import subprocess
import sys

import pytest

from kimi_operator.run_args import parse_run_arguments

# In a fresh interpreter: the operator's modules and a reconcile's spans with tracing off.
OFF = """
import sys
from kimi_operator import cli, runner, spans
from kimi_operator.reconcile import attributes
from kimi_operator.run_args import parse_run_arguments

assert parse_run_arguments([]).operator_traces_endpoint == ""
assert runner.controller(runner.RunConfig(server="http://127.0.0.1:1")).tracing is None
with spans.root(None, "reconcile", {"kimi.deployment": "k3"}) as root:
    root.set_attribute("kimi.generation", 1)
    with spans.span("observe") as step:
        step.set_attributes({"kimi.observe.first": True})
    spans.current().set_attribute("kimi.reconcile.result", "reconciled")
print(sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry"))
"""


def test_off_nothing_imports_opentelemetry() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    result = subprocess.run(
        [sys.executable, "-c", OFF],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("variables", "wanted"),
    [
        ({}, ""),
        (
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318/"},
            "http://collector:4318/v1/traces",
        ),
        (
            {
                "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318",
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://traces:4318/otlp/v1/traces",
            },
            "http://traces:4318/otlp/v1/traces",
        ),
    ],
)
def test_the_standard_variables_are_the_flags_default(
    variables: dict[str, str], wanted: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    assert parse_run_arguments([]).operator_traces_endpoint == wanted
    flag = "http://otel-collector.observability:4318/v1/traces"
    assert (
        parse_run_arguments(["--operator-traces-endpoint", flag]).operator_traces_endpoint == flag
    )
    assert parse_run_arguments(["--operator-traces-endpoint", ""]).operator_traces_endpoint == ""


@pytest.mark.parametrize("value", ["collector:4318", "grpc://collector:4317", "http://a b"])
def test_a_malformed_endpoint_is_refused_naming_the_flag(
    value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        parse_run_arguments(["--operator-traces-endpoint", value])
    error = capsys.readouterr().err
    assert "argument --operator-traces-endpoint:" in error
    assert "expected an http(s)://host[:port][/path] URL" in error
