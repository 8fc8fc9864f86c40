"""spec.prefill's rules name the field the user wrote, as `kimi-operator validate` reports them."""

from kimi_operator.api.crd import crd
from kimi_operator.api.validation import check_document
from kimi_operator.embedded.admission import CustomResource
from tests.support.corpus import (
    AUTOSCALING,
    OFFLOAD,
    SLO,
    SLO_AUTOSCALING,
    prefill,
    prefill_args,
)
from tests.support.specs import edited

API_SERVER = CustomResource.of(crd(), "kimi-operator.io/v1alpha1")


def _problems(edits: dict[str, object]) -> list[str]:
    return [str(p) for p in check_document(edited(edits)).problems]


def test_mode_service_is_refused_naming_routing_mode() -> None:
    (problem,) = _problems({"spec.prefill": {"replicas": 2}})
    assert problem.startswith("spec.routing.mode: spec.prefill needs llm-d's endpoint picker")
    assert "allowed: InferencePool with spec.prefill" in problem


def test_a_role_mismatch_names_the_prefill_field_and_where_to_set_it() -> None:
    (problem,) = _problems(prefill_args("--block-size=32"))
    assert problem.startswith("spec.prefill.engineArgs: --attention-backend, --block-size")
    assert "set it in spec.engineArgs, which both roles get" in problem


def test_the_parser_check_runs_on_the_prefill_role_too() -> None:
    edits = prefill_args("--max-num-batched-tokens", "many")
    (problem,) = _problems(edits)
    assert problem.startswith("spec.prefill.engineArgs: vLLM 0.33.0's serve parser would refuse")
    assert API_SERVER.refusals(edited(edits)) == []  # CEL sees items one by one (docs/rules.md)


def test_the_threshold_belongs_to_its_decider() -> None:
    (problem,) = _problems(prefill(decider="UncachedTokens"))
    assert problem.startswith("spec.prefill.uncachedTokens: uncachedTokens is the threshold")
    assert _problems(prefill(decider="UncachedTokens", uncachedTokens=256)) == []


def test_the_cpu_tier_is_refused_beside_prefill_naming_both_fields() -> None:
    """vLLM would swap the NIXL connector for the tier's offloading connector (docs/rules.md)."""
    edits = prefill() | {"spec.kvCache.cpuOffload": OFFLOAD}
    (problem,) = _problems(edits)
    assert problem.startswith("spec.kvCache.cpuOffload: spec.prefill with spec.kvCache.cpuOffload")
    assert "MultiConnector" in problem
    (refusal,) = API_SERVER.refusals(edited(edits))
    assert "spec.prefill with spec.kvCache.cpuOffload" in refusal
    assert _problems(prefill()) == []
    assert _problems({"spec.kvCache.cpuOffload": OFFLOAD}) == []


def test_the_prefill_autoscaler_refusals_name_their_fields() -> None:
    scaling = {"maxReplicas": 3, "target": {"ttftSecondsP90": 1.5}}
    (problem,) = _problems(prefill(replicas=4, autoscaling=scaling))
    assert problem.startswith(
        "spec.prefill.replicas: the count the prefill autoscaler starts from is outside its "
        "bounds (got 4; allowed: autoscaling.minReplicas to autoscaling.maxReplicas)"
    )
    both = scaling | {"target": {"ttftSecondsP90": 1.5, "waitingRequestsPerGroup": 4}}
    (problem,) = _problems(prefill(autoscaling=both))
    assert problem.startswith("spec.prefill.autoscaling.target: exactly one target must be set")
    assert "allowed: waitingRequestsPerGroup, ttftSecondsP90" in problem
    (problem,) = _problems(prefill(autoscaling=scaling | {"minReplicas": 0}))
    assert problem.startswith("spec.prefill.autoscaling.minReplicas: no scale to zero")
    assert _problems(prefill(replicas=3, autoscaling=scaling)) == []


def test_the_slo_refusals_name_their_fields_and_what_is_allowed() -> None:
    (problem,) = _problems({"spec.autoscaling": AUTOSCALING | {"slo": SLO}})
    assert problem.startswith("spec.autoscaling: exactly one of target (a threshold")
    assert "allowed: target or slo" in problem
    (problem,) = _problems({"spec.autoscaling": SLO_AUTOSCALING | {"slo": {"ttftPercentile": 99}}})
    assert problem.startswith("spec.autoscaling.slo: at least one objective must be set")
    assert "allowed: ttftSeconds, decodeTokensPerSecondPerUser)" in problem
    (problem,) = _problems(prefill(autoscaling={"maxReplicas": 3, "slo": SLO}))
    assert problem.startswith(
        "spec.prefill.autoscaling.slo.decodeTokensPerSecondPerUser: prefill groups do not decode"
    )
    assert problem.endswith("(got 40.0; allowed: ttftSeconds)")
    (problem,) = _problems(
        {"spec.autoscaling": SLO_AUTOSCALING | {"slo": SLO | {"ttftPercentile": 75}}}
    )
    assert problem.startswith("spec.autoscaling.slo.ttftPercentile")
    assert problem.endswith("(got 75; allowed: 50, 90, 99)")
    assert _problems({"spec.autoscaling": SLO_AUTOSCALING}) == []
