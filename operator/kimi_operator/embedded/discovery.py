"""Discovery as kube-apiserver serves it: `/version`, the legacy documents (`/api`, `/apis`,
`/api/v1`, `/apis/<group>[/<version>]`) and the aggregated ones (`Accept:
application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList`, what kubectl and helm ask
for first), from the resources the server declares.

Subresources are listed as subresources (`kimideployments/status`, never with the parent's short
names, so `kubectl get kimi` is not ambiguous); short names and categories come from the CRDs, and
for built-in kinds from the table below (kube-apiserver's own).
"""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import kmock

# The release this server answers as: the chart requires kubeVersion >=1.32, the docs 1.34.
MAJOR, MINOR = "1", "36"
GIT_VERSION = f"v{MAJOR}.{MINOR}.0"
AGGREGATED = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
SUBRESOURCE_VERBS = ("get", "patch", "update")
# Subresources answering with a kind of another group-version: (group, version, kind, verbs).
# `kubectl drain` looks for pods/eviction's group and version here before it posts an Eviction.
FOREIGN_SUBRESOURCES: Mapping[str, tuple[str, str, str, tuple[str, ...]]] = {
    "scale": ("autoscaling", "v1", "Scale", SUBRESOURCE_VERBS),
    "eviction": ("policy", "v1", "Eviction", ("create",)),
}
# kube-apiserver's short names and categories of the built-in kinds served here.
BUILT_IN_NAMES: Mapping[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "namespaces": (("ns",), ()),
    "services": (("svc",), ("all",)),
    "serviceaccounts": (("sa",), ()),
    "secrets": ((), ()),
    "configmaps": (("cm",), ()),
    "events": (("ev",), ()),
    "pods": (("po",), ("all",)),
    "nodes": (("no",), ()),
    "persistentvolumeclaims": (("pvc",), ()),
    "deployments": (("deploy",), ("all",)),
    "jobs": ((), ("all",)),
    "cronjobs": (("cj",), ("all",)),
    "horizontalpodautoscalers": (("hpa",), ("all",)),
    "poddisruptionbudgets": (("pdb",), ()),
    "customresourcedefinitions": (("crd", "crds"), ("api-extensions",)),
}


@dataclass(frozen=True)
class Served:
    """One resource as discovery describes it."""

    group: str
    version: str
    plural: str
    kind: str
    singular: str
    namespaced: bool
    short_names: tuple[str, ...]
    categories: tuple[str, ...]
    subresources: tuple[str, ...]

    @property
    def group_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


def served(resources: Iterable[tuple[Any, Any]]) -> list[Served]:
    """The declared resources ((key, kmock.ResourceInfo) as `ApiServer.resources` holds them),
    sorted."""
    found = []
    for key, info in resources:
        resource = kmock.resource(key)
        plural = str(resource.plural)
        kind = info.kind or plural.capitalize()
        short, categories = BUILT_IN_NAMES.get(plural, ((), ()))
        found.append(
            Served(
                group=resource.group or "",
                version=str(resource.version),
                plural=plural,
                kind=kind,
                singular=info.singular or kind.lower(),
                namespaced=bool(info.namespaced),
                short_names=tuple(sorted(info.shortnames)) or short,
                categories=tuple(sorted(info.categories)) or categories,
                subresources=tuple(sorted(info.subresources)),
            )
        )
    return sorted(found, key=lambda s: (s.group, s.version, s.plural))


def version_info() -> dict[str, str]:
    return {
        "major": MAJOR,
        "minor": MINOR,
        "gitVersion": GIT_VERSION,
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "go1.24.0",
        "compiler": "gc",
        "platform": "linux/amd64",
    }


def _versions(resources: Iterable[Served]) -> dict[str, list[str]]:
    """{group: its versions, the preferred (first declared) first}, core group left out."""
    groups: dict[str, list[str]] = {}
    for resource in resources:
        if resource.group and resource.version not in groups.setdefault(resource.group, []):
            groups[resource.group].append(resource.version)
    return groups


def _group(name: str, versions: list[str]) -> dict[str, Any]:
    listed = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"name": name, "versions": listed, "preferredVersion": listed[0]}


def api_versions() -> dict[str, Any]:
    """`/api`."""
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": ""}],
    }


def group_list(resources: list[Served]) -> dict[str, Any]:
    """`/apis`."""
    groups = [_group(name, versions) for name, versions in _versions(resources).items()]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def group(resources: list[Served], name: str) -> dict[str, Any] | None:
    """`/apis/<name>`; None when no resource of that group is served."""
    versions = _versions(resources).get(name)
    if not versions:
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group(name, versions)}


def _subresource_kind(resource: Served, subresource: str) -> tuple[str, str, str, tuple[str, ...]]:
    """(group, version, kind, verbs) of a subresource."""
    foreign = FOREIGN_SUBRESOURCES.get(subresource)
    if foreign is not None:
        return foreign
    return resource.group, resource.version, resource.kind, SUBRESOURCE_VERBS


def resource_list(resources: list[Served], group_version: str) -> dict[str, Any] | None:
    """`/api/v1` or `/apis/<group>/<version>`; None when nothing is served there."""
    entries: list[dict[str, Any]] = []
    for resource in resources:
        if resource.group_version != group_version:
            continue
        entries.append(
            {
                "name": resource.plural,
                "singularName": resource.singular,
                "namespaced": resource.namespaced,
                "kind": resource.kind,
                "verbs": list(VERBS),
                **({"shortNames": list(resource.short_names)} if resource.short_names else {}),
                **({"categories": list(resource.categories)} if resource.categories else {}),
            }
        )
        for subresource in resource.subresources:
            sub_group, sub_version, sub_kind, verbs = _subresource_kind(resource, subresource)
            entries.append(
                {
                    "name": f"{resource.plural}/{subresource}",
                    "singularName": "",
                    "namespaced": resource.namespaced,
                    "kind": sub_kind,
                    **(
                        {"group": sub_group, "version": sub_version}
                        if subresource in FOREIGN_SUBRESOURCES
                        else {}
                    ),
                    "verbs": list(verbs),
                }
            )
    if not entries:
        return None
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": entries,
    }


def _discovered(resource: Served) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "resource": resource.plural,
        "responseKind": {
            "group": resource.group,
            "version": resource.version,
            "kind": resource.kind,
        },
        "scope": "Namespaced" if resource.namespaced else "Cluster",
        "singularResource": resource.singular,
        "verbs": list(VERBS),
    }
    if resource.short_names:
        entry["shortNames"] = list(resource.short_names)
    if resource.categories:
        entry["categories"] = list(resource.categories)
    subresources = []
    for subresource in resource.subresources:
        sub_group, sub_version, sub_kind, verbs = _subresource_kind(resource, subresource)
        subresources.append(
            {
                "subresource": subresource,
                "responseKind": {"group": sub_group, "version": sub_version, "kind": sub_kind},
                "verbs": list(verbs),
            }
        )
    if subresources:
        entry["subresources"] = subresources
    return entry


def aggregated(resources: list[Served], *, legacy: bool) -> dict[str, Any]:
    """The APIGroupDiscoveryList of `/api` (`legacy`: the core group) or of `/apis`."""
    by_group: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for resource in resources:
        if (resource.group == "") != legacy:
            continue
        versions = by_group.setdefault(resource.group, {})
        versions.setdefault(resource.version, []).append(_discovered(resource))
    items = [
        {
            "metadata": {"name": name, "creationTimestamp": None},
            "versions": [
                {"version": version, "resources": entries, "freshness": "Current"}
                for version, entries in versions.items()
            ],
        }
        for name, versions in by_group.items()
    ]
    return {
        "kind": "APIGroupDiscoveryList",
        "apiVersion": "apidiscovery.k8s.io/v2",
        "metadata": {},
        "items": items,
    }


def wants_aggregated(accept: str) -> bool:
    """Whether the Accept header's first choice is the aggregated v2 document (clients list it
    before plain JSON, their fallback)."""
    first = accept.split(",", 1)[0].replace(" ", "")
    parameters = set(first.split(";")[1:])
    return {"g=apidiscovery.k8s.io", "v=v2", "as=APIGroupDiscoveryList"} <= parameters


def custom_resource_info(crd: Mapping[str, Any], version: Mapping[str, Any]) -> kmock.ResourceInfo:
    """How a CRD's version is declared to kmock (and so discovered)."""
    spec, names = crd["spec"], crd["spec"]["names"]
    return kmock.ResourceInfo(
        kind=names["kind"],
        singular=names.get("singular"),
        namespaced=spec.get("scope", "Namespaced") == "Namespaced",
        shortnames=set(names.get("shortNames", [])),
        categories=set(names.get("categories", [])),
        subresources=set(version.get("subresources", {})),
        verbs={"get", "list", "watch", "create", "update", "patch", "delete"},
    )


def has_status(resources: kmock.ResourcesArray, resource: kmock.resource) -> bool:
    """Whether a declared resource has the status subresource."""
    for known in resources:
        if resource == known:
            return "status" in resources[known].subresources
    return False


def kind_of(resources: kmock.ResourcesArray, resource: kmock.resource) -> tuple[str, str]:
    """(apiVersion, kind) of a declared resource; kmock's 404 when it is not declared."""
    for known, info in resources.items():
        if resource == kmock.resource(known):
            group, version = resource.group or "", str(resource.version)
            return (f"{group}/{version}" if group else version), str(getattr(info, "kind", ""))
    raise kmock.KubernetesResourceNotFoundError()


class Plurals:
    """The plural served for a kind in an apiVersion (asked for every owner reference of every
    write: indexed once per set of declared resources)."""

    def __init__(self) -> None:
        # (the declared resources, {(apiVersion, kind): plural})
        self._index: tuple[tuple[Any, ...], dict[tuple[str, Any], str | None]] | None = None

    def plural_of(self, resources: kmock.ResourcesArray, api_version: str, kind: str) -> str | None:
        served = tuple(resources)
        if self._index is None or self._index[0] != served:
            index: dict[tuple[str, Any], str | None] = {}
            for key, info in resources.items():
                known = kmock.resource(key)
                version = str(known.version)
                group_version = f"{known.group}/{version}" if known.group else version
                index.setdefault((group_version, getattr(info, "kind", None)), known.plural)
            self._index = (served, index)
        return self._index[1].get((api_version, kind))
