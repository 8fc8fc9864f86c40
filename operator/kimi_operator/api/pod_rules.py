"""The rules of spec.podMetadata and spec.scheduling.affinity: keys the operator or
LeaderWorkerSet owns, and selector requirements whose values fit their operator."""

import re
from collections.abc import Mapping, Sequence

from kimi_operator.api.rule import Json, Rule

# Pod label and annotation keys the operator sets or that LeaderWorkerSet acts on: a user's would
# break the Service and PodMonitor selectors or change placement behind the spec's back.
OPERATOR_LABEL_KEYS = tuple(
    f"app.kubernetes.io/{k}" for k in ("name", "instance", "managed-by", "component")
)
RESERVED_PREFIXES = ("kimi-operator.io/", "leaderworkerset.sigs.k8s.io/")
POD_METADATA_RESERVED = {"labels": OPERATOR_LABEL_KEYS, "annotations": ()}
MAX_KEY_LENGTH = 317  # a qualified name: 253 for the prefix, 1 for the slash, 63 for the name


def _bad_keys(keys: Sequence[str], reserved: Sequence[str]) -> list[str]:
    return [
        k
        for k in keys
        if len(k) > MAX_KEY_LENGTH or k in reserved or k.startswith(RESERVED_PREFIXES)
    ]


def _metadata_key_rule(field: str, reserved: Sequence[str]) -> Rule:
    """Only size() and startsWith() on the keys: a map's keys have no maxLength, so the API server
    would estimate anything that reads a whole key (`matches`, `==`) at the size of a request and
    refuse the CRD for its CEL cost. An exact key is its size plus a prefix."""
    taken = [f"(size(k) == {len(r)} && k.startsWith('{r}'))" for r in reserved]
    taken += [f"k.startsWith('{prefix}')" for prefix in RESERVED_PREFIXES]
    return Rule(
        scope=("podMetadata",),
        reads=((field,),),
        field=field,
        cel=f"self.{field}.all(k, size(k) <= {MAX_KEY_LENGTH} && !({' || '.join(taken)}))",
        check=lambda m: not _bad_keys(list(m[field]), reserved),
        problem=f"keys must be at most {MAX_KEY_LENGTH} characters and not ones the operator or "
        "LeaderWorkerSet sets",
        allowed="any other key; not "
        + ", ".join([*reserved, *(f"{p}*" for p in RESERVED_PREFIXES)]),
        got=lambda m: _bad_keys(list(m[field]), reserved),
    )


def _requirement_ok(r: Mapping[str, Json]) -> bool:
    """Values as Kubernetes wants them for the operator: some, none, or one integer."""
    if r["operator"] in ("In", "NotIn"):
        return len(r["values"]) > 0
    if r["operator"] in ("Exists", "DoesNotExist"):
        return not r["values"]
    return len(r["values"]) == 1 and bool(re.fullmatch(r"-?[0-9]+", r["values"][0]))


CEL_REQUIREMENT_OK = (
    "(r.operator in ['In', 'NotIn'] ? size(r.values) > 0 : "
    "(r.operator in ['Exists', 'DoesNotExist'] ? size(r.values) == 0 : "
    "size(r.values) == 1 && r.values[0].matches('^-?[0-9]+$')))"
)
REQUIRED, PREFERRED = (
    "requiredDuringSchedulingIgnoredDuringExecution",
    "preferredDuringSchedulingIgnoredDuringExecution",
)


def _requirements(kind: str, affinity: Mapping[str, Json]) -> list[Mapping[str, Json]]:
    """Every selector requirement of one kind of affinity (defaulted, camelCase)."""
    if kind == "nodeAffinity":
        terms = [*affinity.get(REQUIRED, {}).get("nodeSelectorTerms", [])]
        terms += [p["preference"] for p in affinity[PREFERRED]]
        return [r for t in terms for r in (*t["matchExpressions"], *t["matchFields"])]
    selectors = [t["labelSelector"] for t in affinity[REQUIRED]]
    selectors += [w["podAffinityTerm"]["labelSelector"] for w in affinity[PREFERRED]]
    return [r for s in selectors for r in s["matchExpressions"]]


def _cel_requirements(kind: str) -> str:
    ok = f"all(r, {CEL_REQUIREMENT_OK})"
    if kind == "nodeAffinity":
        term = f"t.matchExpressions.{ok} && t.matchFields.{ok}"
        preferred = f"p.preference.matchExpressions.{ok} && p.preference.matchFields.{ok}"
        return (
            f"(!has(self.{REQUIRED}) || self.{REQUIRED}.nodeSelectorTerms.all(t, {term})) && "
            f"self.{PREFERRED}.all(p, {preferred})"
        )
    return (
        f"self.{REQUIRED}.all(t, t.labelSelector.matchExpressions.{ok}) && "
        f"self.{PREFERRED}.all(w, w.podAffinityTerm.labelSelector.matchExpressions.{ok})"
    )


def _affinity_rule(kind: str) -> Rule:
    return Rule(
        scope=("scheduling", "affinity", kind),
        reads=((),),
        field="",
        cel=_cel_requirements(kind),
        check=lambda a: all(_requirement_ok(r) for r in _requirements(kind, a)),
        problem="a selector requirement's values do not fit its operator",
        allowed="values with In and NotIn, none with Exists and DoesNotExist, one integer with "
        "Gt and Lt",
        got=lambda a: [r for r in _requirements(kind, a) if not _requirement_ok(r)],
    )


POD_RULES = (
    *(_metadata_key_rule(field, reserved) for field, reserved in POD_METADATA_RESERVED.items()),
    *(_affinity_rule(kind) for kind in ("nodeAffinity", "podAffinity", "podAntiAffinity")),
)
