"""spec.observability.tracing refused at apply (CEL and the schema) and by `validate` alike, each
refusal naming the field and what it allows; the chart's default checked by the same rules."""

from typing import Any

import pytest

from kimi_operator.api.crd import crd
from kimi_operator.api.validation import check_document
from kimi_operator.embedded.admission import CustomResource
from kimi_operator.run_args import operator_defaults, parse_run_arguments
from tests.support.corpus import COLLECTOR, HTTPS_COLLECTOR, JAEGER_UI, POOL
from tests.support.specs import edited

API_SERVER = CustomResource.of(crd(), "kimi-operator.io/v1alpha1")


def _tracing(**fields: Any) -> dict[str, Any]:
    return {"spec.observability.tracing": fields}


def _refusals(edits: dict[str, Any]) -> tuple[list[str], list[str]]:
    """What `validate` says, and what the API server says."""
    doc = edited(edits)
    return [str(p) for p in check_document(doc).problems], API_SERVER.refusals(doc)


@pytest.mark.parametrize(
    ("edits", "field", "words"),
    [
        (
            _tracing(detailedTraces=True),
            "spec.observability.tracing.detailedTraces",
            "allowed: false; or true with an endpoint",
        ),
        (
            _tracing(endpoint=HTTPS_COLLECTOR),
            "spec.observability.tracing.endpoint",
            "exports OTLP over gRPC in plain text only",
        ),
        (
            POOL | _tracing(endpoint=HTTPS_COLLECTOR, protocol="http/protobuf"),
            "spec.observability.tracing.protocol",
            "allowed: grpc; or http/protobuf with routing.mode Service",
        ),
        (
            _tracing(uiUrl=JAEGER_UI),
            "spec.observability.tracing.uiUrl",
            "without an endpoint none is exported",
        ),
        *(
            (
                _tracing(endpoint=COLLECTOR, uiUrl=url),
                "spec.observability.tracing.uiUrl",
                "needs an http(s) URL with {trace_id} where the trace id goes",
            )
            for url in (
                "https://jaeger.example/trace/",  # no placeholder
                "ftp://jaeger.example/trace/{trace_id}",
                "jaeger.example/trace/{trace_id}",
                "https://jaeger.example/trace/{trace_id} x",
            )
        ),
    ],
)
def test_a_rule_refusal_names_the_field_and_what_is_allowed(
    edits: dict[str, Any], field: str, words: str
) -> None:
    (problem,), (refusal,) = _refusals(edits)
    assert problem.startswith(f"{field}: ")
    assert words in problem
    assert field in refusal
    assert words in refusal


@pytest.mark.parametrize(
    ("edits", "field", "words"),
    [
        (_tracing(samplingRatio=1.5), "spec.observability.tracing.samplingRatio", "1"),
        (_tracing(samplingRatio=-0.5), "spec.observability.tracing.samplingRatio", "0"),
        (_tracing(endpoint="otel:4317"), "spec.observability.tracing.endpoint", "https?://"),
        (_tracing(protocol="http"), "spec.observability.tracing.protocol", "http/protobuf"),
    ],
)
def test_a_field_refusal_names_the_field_and_what_is_allowed(
    edits: dict[str, Any], field: str, words: str
) -> None:
    (problem,), refusals = _refusals(edits)
    assert problem.startswith(field)
    assert words in problem
    assert [r for r in refusals if field in r and words in r], refusals


def test_engine_args_and_env_that_would_trace_behind_the_spec_are_refused() -> None:
    (problem,), _ = _refusals({"spec.engineArgs": ["--otlp-traces-endpoint", COLLECTOR]})
    assert problem.startswith("spec.engineArgs: --collect-detailed-traces, --otlp-traces-endpoint")
    assert 'got ["--otlp-traces-endpoint"]' in problem
    assert "spec.observability.tracing" in problem
    env = [{"name": "OTEL_TRACES_SAMPLER", "value": "always_on"}]
    (problem,), _ = _refusals({"spec.env": env})
    assert problem.startswith("spec.env: OTEL_TRACES_SAMPLER is set by the operator")


def test_accepted_tracing() -> None:
    assert _refusals(_tracing(endpoint=COLLECTOR, samplingRatio=0, detailedTraces=True)) == ([], [])
    http = _tracing(endpoint=HTTPS_COLLECTOR, protocol="http/protobuf")
    assert _refusals(http) == ([], [])
    assert _refusals(POOL | _tracing(endpoint=COLLECTOR, samplingRatio=1)) == ([], [])
    assert _refusals(_tracing(endpoint=COLLECTOR, uiUrl=JAEGER_UI)) == ([], [])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--tracing-detailed-traces"], "--tracing-detailed-traces True: detailed traces"),
        (["--tracing-endpoint", "https://otel:4317"], "--tracing-endpoint 'https://otel:4317':"),
        (["--tracing-endpoint", "otel:4317"], "--tracing-endpoint 'otel:4317': String should"),
        (
            ["--tracing-ui-url", JAEGER_UI],
            f"--tracing-ui-url '{JAEGER_UI}': it links to the traces",
        ),
        (
            ["--tracing-endpoint", COLLECTOR, "--tracing-ui-url", "https://jaeger.example/"],
            "--tracing-ui-url 'https://jaeger.example/': a link to a trace needs",
        ),
        (
            ["--tracing-endpoint", COLLECTOR, "--tracing-sampling-ratio", "1.5"],
            "--tracing-sampling-ratio 1.5: Input should be less than or equal to 1",
        ),
    ],
)
def test_the_operators_default_is_refused_naming_its_flag(argv: list[str], message: str) -> None:
    with pytest.raises(ValueError, match="^" + message.replace("(", r"\(")) as raised:
        operator_defaults(parse_run_arguments(argv))
    assert str(raised.value).startswith(message)


def test_the_operators_default_is_off_without_an_endpoint() -> None:
    assert operator_defaults(parse_run_arguments([])).tracing is None
    assert operator_defaults(parse_run_arguments(["--tracing-sampling-ratio", "1"])).tracing is None
    configured = operator_defaults(parse_run_arguments(["--tracing-endpoint", COLLECTOR]))
    assert configured.tracing is not None
    assert (configured.tracing.endpoint, configured.tracing.protocol) == (COLLECTOR, "grpc")
