"""The operator's defaults against the CRD's: for every `default` the generated CRD declares under
`spec`, the operator's view of a document without that field (its model, and `apply_defaults` that
the raw-document rules run on) equals what the API-server stand-in stores. The stand-in defaults
from the CRD's schema alone (embedded/schema.py; .importlinter keeps it off `api`), so a
defaulting bug on the operator's side shows here as a disagreement instead of passing on both."""

from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from kimi_operator.api import defaulting
from kimi_operator.api.crd import crd
from kimi_operator.api.validation import check_document
from kimi_operator.embedded.admission import CustomResource
from tests.support.specs import DELETE, edited

STAND_IN = CustomResource.of(crd(), "kimi-operator.io/v1alpha1")
SPEC_SCHEMA: dict[str, Any] = STAND_IN.schema["properties"]["spec"]
Path = tuple[str, ...]

CALIBRATION = {"configMapName": "k3-calibration"}
# Parents that need more than `{}` to be valid: the document for a default below one has these.
CONTEXT: dict[Path, dict[str, Any]] = {
    ("spec", "model", "source", "huggingface"): {
        "spec.model.source": {"huggingface": {"repo": "moonshotai/Kimi-K3"}}
    },
    ("spec", "speculative"): {"spec.speculative": {"draftSource": {"pvc": {"claimName": "d"}}}},
    ("spec", "autoscaling"): {
        "spec.autoscaling": {"maxReplicas": 4, "target": {"waitingRequestsPerGroup": 8}}
    },
    ("spec", "autoscaling", "slo"): {
        "spec.autoscaling": {"maxReplicas": 4, "slo": {"ttftSeconds": 2}}
    },
    ("spec", "autoscaling", "slo", "calibration"): {
        "spec.autoscaling": {
            "maxReplicas": 4,
            "slo": {"ttftSeconds": 2, "calibration": CALIBRATION},
        }
    },
    ("spec", "prefill", "autoscaling", "slo", "calibration"): {
        "spec.routing.mode": "InferencePool",
        "spec.prefill": {
            "autoscaling": {"maxReplicas": 4, "slo": {"ttftSeconds": 2, "calibration": CALIBRATION}}
        },
    },
    ("spec", "speculative", "draftSource", "huggingface"): {
        "spec.speculative": {"draftSource": {"huggingface": {"repo": "moonshotai/draft"}}}
    },
    ("spec", "prefill"): {"spec.routing.mode": "InferencePool", "spec.prefill": {}},
    ("spec", "prefill", "autoscaling"): {
        "spec.routing.mode": "InferencePool",
        "spec.prefill": {"autoscaling": {"maxReplicas": 4, "target": {"ttftSecondsP90": 2}}},
    },
    ("spec", "prefill", "autoscaling", "slo"): {
        "spec.routing.mode": "InferencePool",
        "spec.prefill": {"autoscaling": {"maxReplicas": 4, "slo": {"ttftSeconds": 2}}},
    },
    ("spec", "routing", "gatewayRef"): {
        "spec.routing": {"mode": "InferencePool", "gatewayRef": {"name": "inference-gateway"}}
    },
}


def declared(schema: Mapping[str, Any], path: Path) -> Iterator[tuple[Path, Any]]:
    """Each property with a `default` reached through objects (list items have their own)."""
    for key, sub in schema.get("properties", {}).items():
        if "default" in sub:
            yield (*path, key), sub["default"]
        yield from declared(sub, (*path, key))


DECLARED = dict(declared(SPEC_SCHEMA, ("spec",)))


def without(path: Path) -> dict[str, Any]:
    """A valid document whose `path` is absent (its parents present, as `{}` where need be)."""
    prefixes = [prefix for prefix in CONTEXT if path[: len(prefix)] == prefix]
    doc = edited(CONTEXT[max(prefixes, key=len)] if prefixes else {})
    return edited({".".join(path): DELETE}, doc)


def at(obj: Any, path: Path) -> Any:
    for key in path:
        obj = obj[key]
    return obj


def stored(doc: Mapping[str, Any]) -> dict[str, Any]:
    return STAND_IN.admit(doc, old=None, strict=True).obj


def disagreements(path: Path) -> list[str]:
    """Where the operator's defaults for a document without `path` differ from the stand-in's."""
    doc = without(path)
    report = check_document(doc)
    assert report.deployment is not None, [str(p) for p in report.problems]
    model = report.deployment.model_dump(mode="json", by_alias=True, exclude_none=True)
    raw = {"spec": defaulting.apply_defaults(SPEC_SCHEMA, defaulting.drop_nulls(doc["spec"]))}
    want = at(stored(doc), path)
    views = {"model": at(model, path), "apply_defaults": at(raw, path)}
    return [f"{name}: {got!r} != {want!r}" for name, got in views.items() if got != want]


def test_the_crd_declares_defaults_at_every_depth() -> None:
    assert len(DECLARED) > 30
    assert ("spec", "decode", "maxNumSeqs") in DECLARED  # below an object that is itself defaulted
    assert ("spec", "model", "source", "huggingface", "revision") in DECLARED


@pytest.mark.parametrize("path", list(DECLARED), ids=".".join)
def test_the_stand_in_stores_the_declared_default(path: Path) -> None:
    value = at(stored(without(path)), path)
    want = DECLARED[path]
    if isinstance(want, dict):  # an object's own fields get their defaults too
        assert value | want == value
    else:
        assert value == want


@pytest.mark.parametrize("path", list(DECLARED), ids=".".join)
def test_the_operator_defaults_as_the_api_server_does(path: Path) -> None:
    assert disagreements(path) == []


def test_a_defaulting_bug_of_the_operator_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """`apply_defaults` broken to default the top level only: the comparison above reports it,
    since the stand-in (kept off `api` by .importlinter) still stores the CRD's defaults."""
    path = ("spec", "decode")
    before = stored(without(path))
    assert before["spec"]["decode"]["maxNumSeqs"] == DECLARED[(*path, "maxNumSeqs")]

    def top_level_only(schema: dict[str, Any], value: Any) -> Any:
        properties = schema.get("properties", {})
        absent = {
            k: p["default"] for k, p in properties.items() if "default" in p and k not in value
        }
        return value | absent

    monkeypatch.setattr(defaulting, "apply_defaults", top_level_only)
    assert disagreements(path) == [f"apply_defaults: {{}} != {before['spec']['decode']!r}"]
