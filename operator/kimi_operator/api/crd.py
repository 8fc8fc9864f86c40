"""Generate the KimiDeployment CRD from the pydantic models and the CEL rules.

pydantic's JSON Schema becomes a Kubernetes structural schema: `$ref`s inlined, `Optional` unwrapped
(the API server drops nulls before validating), `const` turned into `enum`, titles and the
`additionalProperties: false` that structural schemas forbid removed. Each rule of `rules.py`
becomes an `x-kubernetes-validations` entry on the object it is scoped to (but the few that CEL
cannot express, which only the operator and `validate` check).
"""

from functools import cache
from typing import Any

import yaml
from pydantic import BaseModel

from kimi_operator.api import constants as c
from kimi_operator.api.rules import RULES
from kimi_operator.api.spec import KimiDeploymentSpec, ObjectMeta
from kimi_operator.api.status import KimiDeploymentStatus

Schema = dict[str, Any]

_DROPPED_KEYS = ("title",)


def _structural(node: Any, defs: dict[str, Schema]) -> Any:
    if isinstance(node, list):
        return [_structural(item, defs) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = defs[node["$ref"].rsplit("/", 1)[-1]]
        extra = {k: v for k, v in node.items() if k != "$ref"}
        merged = {k: v for k, v in target.items() if k != "description"} | extra
        return _structural(merged, defs)
    if "anyOf" in node:
        options = [o for o in node["anyOf"] if o.get("type") != "null"]
        if len(options) != 1:
            raise ValueError(f"unions cannot be expressed in a structural schema: {node}")
        rest = {k: v for k, v in node.items() if k != "anyOf"}
        return _structural({**options[0], **rest}, defs)
    out: Schema = {}
    for key, value in node.items():
        if key in _DROPPED_KEYS or (key == "default" and value is None):
            continue
        if key == "additionalProperties" and value is False:
            continue
        if key == "const":
            out["enum"] = [value]
            continue
        if key == "properties":
            out[key] = {name: _structural(prop, defs) for name, prop in value.items()}
            continue
        out[key] = _structural(value, defs)
    return out


def structural_schema(model: type[BaseModel]) -> Schema:
    raw = model.model_json_schema(by_alias=True, mode="validation")
    defs = raw.pop("$defs", {})
    schema: Schema = _structural(raw, defs)
    schema.pop("description", None)
    return schema


def _node(schema: Schema, path: tuple[str, ...]) -> Schema:
    for key in path:
        schema = schema["properties"][key]
    return schema


def spec_schema() -> Schema:
    """The spec's schema with every CEL rule attached at its scope."""
    schema = structural_schema(KimiDeploymentSpec)
    for rule in RULES:
        if not rule.cel:
            continue  # checked by the operator and `validate` only (rules.py says why)
        entry: dict[str, str] = {"rule": rule.cel, "message": rule.message}
        if rule.field:
            entry["fieldPath"] = "." + rule.field
            entry["reason"] = "FieldValueInvalid"
        _node(schema, rule.scope).setdefault("x-kubernetes-validations", []).append(entry)
    return schema


@cache
def openapi_schema() -> Schema:
    name = ObjectMeta.model_fields["name"]
    name_schema = structural_schema(ObjectMeta)["properties"]["name"]
    name_schema["description"] = name.description
    return {
        "type": "object",
        "description": "A Kimi K3 deployment on vLLM's latency-specialized decode path.",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object", "properties": {"name": name_schema}},
            "spec": spec_schema(),
            "status": structural_schema(KimiDeploymentStatus),
        },
    }


def schema_at(loc: tuple[str | int, ...]) -> Schema | None:
    """The schema node for a pydantic error location (e.g. `("spec", "env", 0, "name")`)."""
    node: Schema | None = openapi_schema()
    for part in loc:
        if node is None:
            return None
        if isinstance(part, int):
            node = node.get("items")
        elif part in node.get("properties", {}):
            node = node["properties"][part]
        else:
            extra = node.get("additionalProperties")
            node = extra if isinstance(extra, dict) else None
    return node


def crd() -> dict[str, Any]:
    ready = '.status.conditions[?(@.type=="Ready")].status'
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{c.PLURAL}.{c.GROUP}"},
        "spec": {
            "group": c.GROUP,
            "names": {
                "kind": c.KIND,
                "listKind": f"{c.KIND}List",
                "plural": c.PLURAL,
                "singular": c.SINGULAR,
                "shortNames": [c.SHORT_NAME],
                "categories": ["all"],
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": c.VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {
                        "status": {},
                        # kubectl scale, HPA and KEDA: replicas are TP groups; the selector picks
                        # their leader pods (one per group).
                        "scale": {
                            "specReplicasPath": ".spec.replicas",
                            "statusReplicasPath": ".status.replicas",
                            "labelSelectorPath": ".status.selector",
                        },
                    },
                    "additionalPrinterColumns": [
                        {
                            "name": "GPUS",
                            "type": "integer",
                            "description": "GPUs in total (gpus x groups of both roles)",
                            "jsonPath": ".status.gpus",
                        },
                        {
                            "name": "DESIRED",
                            "type": "integer",
                            "description": "TP groups wanted",
                            "jsonPath": ".spec.replicas",
                        },
                        {
                            "name": "READY-GROUPS",
                            "type": "integer",
                            "description": "TP groups serving",
                            "jsonPath": ".status.readyReplicas",
                        },
                        {
                            "name": "STOPPED",
                            "type": "integer",
                            "description": "TP groups the restart budget stopped (both roles): "
                            "not Ready until resumed",
                            "jsonPath": ".status.stoppedGroups",
                        },
                        {
                            "name": "SLO-GROUPS",
                            "type": "integer",
                            "description": "TP groups the operator's SLO scaler wants "
                            "(spec.autoscaling.slo; DESIRED is then the count it started from)",
                            "jsonPath": ".status.sloAutoscaler.decode.desiredReplicas",
                            "priority": 1,
                        },
                        {
                            "name": "PREFILL",
                            "type": "integer",
                            "description": "Prefill TP groups wanted (spec.prefill; with its "
                            "autoscaling, the count it starts from)",
                            "jsonPath": ".spec.prefill.replicas",
                            "priority": 1,
                        },
                        {
                            "name": "PREFILL-DESIRED",
                            "type": "integer",
                            "description": "Prefill TP groups the operator's prefill autoscaler "
                            "wants (spec.prefill.autoscaling)",
                            "jsonPath": ".status.prefillAutoscaler.desiredReplicas",
                            "priority": 1,
                        },
                        {
                            "name": "PREFILL-SLO",
                            "type": "integer",
                            "description": "Prefill TP groups the operator's SLO scaler wants "
                            "(spec.prefill.autoscaling.slo)",
                            "jsonPath": ".status.sloAutoscaler.prefill.desiredReplicas",
                            "priority": 1,
                        },
                        {
                            "name": "PREFILL-READY",
                            "type": "integer",
                            "description": "Prefill TP groups serving",
                            "jsonPath": ".status.prefillReadyReplicas",
                            "priority": 1,
                        },
                        {"name": "BACKEND", "type": "string", "jsonPath": ".spec.decode.backend"},
                        {"name": "ROUTING", "type": "string", "jsonPath": ".spec.routing.mode"},
                        {"name": "READY", "type": "string", "jsonPath": ready},
                        {"name": "ENDPOINT", "type": "string", "jsonPath": ".status.endpoint"},
                        {"name": "AGE", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                        {
                            "name": "SLO-WHY",
                            "type": "string",
                            "description": "Why the SLO scaler wants that many decode groups",
                            "jsonPath": ".status.sloAutoscaler.decode.message",
                            "priority": 1,
                        },
                    ],
                    "schema": {"openAPIV3Schema": openapi_schema()},
                }
            ],
        },
    }


def crd_yaml() -> str:
    header = "# Generated by `kimi-operator crd` from the pydantic models; do not edit.\n"
    return header + yaml.safe_dump(crd(), sort_keys=False, width=100)
