"""Every rule is enforced twice, by pydantic and by the generated CRD, with one verdict.

The CRD's side is the embedded API server's admission (kimi_operator.embedded.admission: the
structural schema and the CEL rules, as kube-apiserver applies them), creating each document as
`kubectl apply` does (strict field validation)."""

import itertools
import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kimi_operator.api.constants import SUPPORTED_GPU_COUNTS
from kimi_operator.api.crd import crd
from kimi_operator.api.rules import RULES
from kimi_operator.api.validation import check_document
from kimi_operator.embedded.admission import CustomResource
from tests.support.corpus import CORPUS, DRAFT, HF, PARSER_ONLY, PVC, SLO, SLO_AUTOSCALING
from tests.support.fuzzing import examples
from tests.support.specs import edited

API_SERVER = CustomResource.of(crd(), "kimi-operator.io/v1alpha1")
# The refusals of the rules CEL cannot express (PARSER_ONLY and BACKWARDS below): the webhook's.
OPERATORS_ONLY = tuple(f"{rule.path}: {rule.problem} (" for rule in RULES if not rule.cel)


@pytest.mark.parametrize("args", [a for _, a in PARSER_ONLY], ids=[c[0] for c in PARSER_ONLY])
def test_parser_only_refusals_are_the_operators(args: list[str]) -> None:
    doc = edited({"spec.engineArgs": args})
    problems = [str(p) for p in check_document(doc).problems]
    assert len(problems) == 1, problems
    assert problems[0].startswith("spec.engineArgs: vLLM 0.33.0's serve parser would refuse")
    assert API_SERVER.refusals(doc) == []


@pytest.mark.parametrize(
    "schedule",
    ["0 4 * * 5-1", "0 4 * * fri-MON", "0 23-1 * * *", "0 4 1 dec-jan *", "*/5 20-10/2 * * *"],
)
def test_backwards_cron_ranges_are_the_operators(schedule: str) -> None:
    """A range the CronJob's parser refuses: the webhook names it; a regex cannot, so CEL lets
    it through."""
    calibration = {"configMapName": "k3-calibration", "schedule": schedule}
    doc = edited(
        {"spec.autoscaling": SLO_AUTOSCALING | {"slo": SLO | {"calibration": calibration}}}
    )
    problems = [str(p) for p in check_document(doc).problems]
    assert len(problems) == 1, problems
    assert problems[0].startswith(
        "spec.autoscaling.slo.calibration.schedule: a range runs backwards"
    ), problems
    assert API_SERVER.refusals(doc) == []
    forwards = {"configMapName": "k3-calibration", "schedule": "0 4 * * 1-5"}
    ok = edited({"spec.autoscaling": SLO_AUTOSCALING | {"slo": SLO | {"calibration": forwards}}})
    assert check_document(ok).problems == []


@pytest.mark.parametrize(
    ("edits", "valid"), [(e, v) for _, e, v in CORPUS], ids=[c[0] for c in CORPUS]
)
def test_pydantic_and_crd_agree_with_the_expected_verdict(
    edits: dict[str, Any], valid: bool
) -> None:
    doc = edited(edits)
    report = check_document(doc)
    crd_errors = API_SERVER.refusals(doc)
    assert (not report.problems) is valid, [str(p) for p in report.problems]
    assert (not crd_errors) is valid, crd_errors


def test_the_corpus_is_large_and_balanced() -> None:
    verdicts = [valid for _, _, valid in CORPUS]
    assert len(CORPUS) >= 60
    assert verdicts.count(True) >= 20
    assert verdicts.count(False) >= 40
    assert len({name for name, _, _ in CORPUS}) == len(CORPUS)


def test_defaults_are_the_same_on_both_sides() -> None:
    doc = edited({"spec.speculative": DRAFT})
    stored = API_SERVER.admit(doc, old=None, strict=True).obj["spec"]
    report = check_document(doc)
    assert report.deployment is not None
    assert report.deployment.spec.model_dump(exclude_none=True) == stored
    assert stored["decode"] == {
        "backend": "latency_specialized",
        "contextParallelSize": 1,
        "cudaGraphMode": "FULL_AND_PIECEWISE",
        "maxNumSeqs": 8,
    }
    assert stored["kvCache"]["dtype"] == "fp8_e4m3"
    assert stored["gpusPerNode"] == 4
    assert stored["computeDomain"] == "Auto"
    assert stored["speculative"]["numSpeculativeTokens"] == 7


def test_a_rule_failure_names_the_same_field_on_both_sides() -> None:
    doc = edited({"spec.decode.contextParallelSize": 8, "spec.engineArgs": ["-tp", "8"]})
    paths = {p.path for p in check_document(doc).problems}
    messages = API_SERVER.refusals(doc)
    assert paths == {"spec.decode.contextParallelSize", "spec.engineArgs"}
    assert sorted(m.split(":")[0] for m in messages) == sorted(paths)


# Generated specs: fields drawn from valid values and near misses, so both verdicts are common.
REQUIREMENTS = st.fixed_dictionaries(
    {
        "key": st.just("k"),
        "operator": st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]),
    },
    optional={"values": st.sampled_from([[], ["a"], ["1"], ["1", "2"], ["-3"]])},
)
SPECS = st.fixed_dictionaries(
    {"gpus": st.sampled_from([8, 16, 12, "16"])},
    optional={
        "gpusPerNode": st.sampled_from([4, 8, 2]),
        "replicas": st.integers(-1, 66),
        "autoscaling": st.fixed_dictionaries(
            {},
            optional={
                "target": st.dictionaries(
                    st.sampled_from(
                        ["decodeRateFloor", "waitingRequestsPerGroup", "kvCacheUsagePercent"]
                    ),
                    st.integers(0, 101),
                    max_size=3,
                ),
                "slo": st.dictionaries(
                    st.sampled_from(
                        [
                            "ttftSeconds",
                            "ttftPercentile",
                            "decodeTokensPerSecondPerUser",
                            "decodePercentile",
                            "taskCompletionSeconds",  # not a field: refused
                        ]
                    ),
                    st.sampled_from([0, 2, 40, 50, 75, 90, 0.5]),
                    max_size=3,
                ),
                "minReplicas": st.integers(-1, 3),
                "maxReplicas": st.integers(0, 65),
            },
        ),
        "rollout": st.fixed_dictionaries(
            {},
            optional={
                "maxUnavailable": st.integers(-1, 4),
                "maxSurge": st.integers(-1, 2),
                "progressDeadlineSeconds": st.sampled_from([0, 1, 3600, 86401]),
            },
        ),
        "imagePolicy": st.sampled_from(["FollowDefault", "Pinned", "Always"]),
        "decode": st.fixed_dictionaries(
            {},
            optional={
                "backend": st.sampled_from(["latency_specialized", "auto", "fast"]),
                "contextParallelSize": st.sampled_from([1, 2, 8, 16, 17]),
                "cudaGraphMode": st.sampled_from(
                    ["FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE", "NONE"]
                ),
                "maxNumSeqs": st.integers(0, 1100),
            },
        ),
        "kvCache": st.fixed_dictionaries(
            {},
            optional={
                "dtype": st.sampled_from(["auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2"]),
                "mambaCacheDtype": st.sampled_from(["auto", "bfloat16", "float32"]),
                "mambaSsmCacheDtype": st.sampled_from(["auto", "float32", "bfloat16"]),
                "gpuMemoryUtilizationPercent": st.one_of(st.integers(0, 101), st.just(0.9)),
                "enablePrefixCaching": st.sampled_from([True, False, "yes"]),
            },
        ),
        "speculative": st.fixed_dictionaries(
            {"draftSource": st.sampled_from([PVC, HF, PVC | HF, {}])},
            optional={
                "method": st.sampled_from(["dspark", "ngram"]),
                "numSpeculativeTokens": st.integers(0, 8),
            },
        ),
        "engineArgs": st.lists(
            st.sampled_from(
                [
                    "--trust-remote-code",
                    "--enable-lora",
                    "-tp",
                    "8",
                    "--enforce_eager",
                    "-O3",
                    "--model-impl=vllm",
                    "--tensor-parallel",
                    "--max-num-batched-tokens=8192",
                    "--headless",
                    "--kv-cache-dtype-skip-layers",
                    "-cc.mode=3",
                    "--enable-lor",
                ]
            ),
            max_size=4,
        ),
        "env": st.lists(
            st.fixed_dictionaries(
                {
                    "name": st.sampled_from(
                        ["A", "NCCL_CUMEM_ENABLE", "VLLM_KIMI_K3_AUX_ATTN_RES_STREAM", "9X"]
                    )
                },
                optional={
                    "value": st.sampled_from(["1", ""]),
                    "valueFrom": st.sampled_from(
                        [{"fieldRef": {"fieldPath": "metadata.name"}}, {}]
                    ),
                },
            ),
            max_size=3,
        ),
        "computeDomain": st.sampled_from(["Auto", "Required", "Disabled", "Off"]),
        "resources": st.fixed_dictionaries(
            {},
            optional={
                "cpu": st.sampled_from(["64", "500m", "1.5", "-1", "64 cores", 64]),
                "memory": st.sampled_from(["512Gi", "1T", "512GB"]),
                "guaranteed": st.sampled_from([True, False, "yes"]),
            },
        ),
        "podMetadata": st.fixed_dictionaries(
            {},
            optional={
                "labels": st.dictionaries(
                    st.sampled_from(
                        ["team", "a.io/b", "app.kubernetes.io/name", "kimi-operator.io/x", "b c"]
                    ),
                    st.sampled_from(["x", "", "not ok"]),
                    max_size=3,
                ),
                "annotations": st.dictionaries(
                    st.sampled_from(["a.io/b", "leaderworkerset.sigs.k8s.io/x", "-bad"]),
                    st.just("any text"),
                    max_size=2,
                ),
            },
        ),
        "scheduling": st.fixed_dictionaries(
            {},
            optional={
                "exclusiveClique": st.booleans(),
                "affinity": st.fixed_dictionaries(
                    {},
                    optional={
                        kind: st.fixed_dictionaries(
                            {
                                "requiredDuringSchedulingIgnoredDuringExecution": st.lists(
                                    st.fixed_dictionaries(
                                        {
                                            "labelSelector": st.fixed_dictionaries(
                                                {
                                                    "matchExpressions": st.lists(
                                                        REQUIREMENTS, max_size=2
                                                    )
                                                }
                                            ),
                                            "topologyKey": st.just("nvidia.com/gpu.clique"),
                                        }
                                    ),
                                    max_size=2,
                                )
                            }
                        )
                        for kind in ("podAffinity", "podAntiAffinity")
                    }
                    | {
                        "nodeAffinity": st.fixed_dictionaries(
                            {
                                "preferredDuringSchedulingIgnoredDuringExecution": st.lists(
                                    st.fixed_dictionaries(
                                        {
                                            "weight": st.integers(0, 101),
                                            "preference": st.fixed_dictionaries(
                                                {"matchFields": st.lists(REQUIREMENTS, max_size=2)}
                                            ),
                                        }
                                    ),
                                    max_size=2,
                                )
                            }
                        )
                    },
                ),
            },
        ),
        "unknownField": st.just(1),
    },
)


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=SPECS, source=st.sampled_from([PVC, HF, PVC | HF, {}]))
def test_pydantic_and_crd_never_disagree(spec: dict[str, Any], source: dict[str, Any]) -> None:
    doc = edited({"spec": {"model": {"name": "m", "source": source}, **spec}})
    problems = check_document(doc).problems
    pydantic_valid = all(p.message.startswith(OPERATORS_ONLY) for p in problems)
    crd_errors = API_SERVER.refusals(doc)
    assert pydantic_valid == (not crd_errors), crd_errors


def test_every_rule_is_broken_by_some_corpus_case() -> None:
    """No rule is dead: each one is the reason at least one corpus case is refused."""
    broken: set[str] = set()
    for _, edits, _ in CORPUS:
        for refusal in API_SERVER.refusals(edited(edits)):
            broken.add(re.sub(r'^\S+: Invalid value: "[a-z]+": ', "", refusal))
    assert {rule.message for rule in RULES if rule.cel} <= broken


def test_every_enum_combination_of_gpus_fills_whole_nodes() -> None:
    for gpus, per_node in itertools.product(SUPPORTED_GPU_COUNTS, (4, 8)):
        assert gpus % per_node == 0
