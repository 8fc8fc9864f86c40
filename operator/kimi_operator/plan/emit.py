"""`plan --target ... --emit-spec FILE`: the KimiDeployment that meets the target at the lowest
modelled cost per completed task.

Each configuration the plan can write as a KimiDeployment (8 or 16 GPUs a group) is modelled at
the fewest groups that meet the target (decode groups, when disaggregated); the cheapest per
completed task is written, fewer GPUs breaking a tie. A disaggregated one becomes `spec.prefill`
with routing mode InferencePool, which it needs (and without the CPU tier, which it refuses).
Its autoscaling keeps it there: at least those groups, at most twice as many, adding one while
the decode rate the slowest-served tenth of requests get falls below what the plan met the target
with (more load than the trace). Where the weights come from is not the plan's to know: a
KimiDeployment given with --config lends its metadata and sources, else the samples' PVC
`kimi-k3-weights`.
"""

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kimi_operator.bench.results import Results
from kimi_operator.plan import PlanError
from kimi_operator.plan.configs import MAX_GROUPS, Configuration
from kimi_operator.plan.report import Planned, decode_p10

API_VERSION = "kimi-operator.io/v1alpha1"
KIND = "KimiDeployment"
GROUP_GPUS = (8, 16)
DEFAULT_METADATA = {"name": "k3-planned", "namespace": "inference"}
DEFAULT_MODEL = {
    "name": "moonshotai/Kimi-K3",
    "source": {"pvc": {"claimName": "kimi-k3-weights", "subPath": "Kimi-K3"}},
}
DEFAULT_DRAFTS = {"pvc": {"claimName": "kimi-k3-weights", "subPath": "Kimi-K3-DSpark"}}


@dataclass(frozen=True)
class Choice:
    config: Configuration
    groups: int
    results: Results  # modelled at `groups`
    why: str


def _cost(results: Results) -> float:
    tasks = results.summary.tasks
    cost = tasks.cost_per_task_usd if tasks else None
    return math.inf if cost is None else cost


def choose(planned: list[Planned], at_groups: Callable[[Planned, int], Results]) -> Choice:
    """The cheapest configuration per completed task, each at its fewest groups for the target."""
    candidates: list[Choice] = []
    passed: list[str] = []
    for item in planned:
        config, groups = item.config, item.groups_for_target
        if config.gpus not in GROUP_GPUS:
            passed.append(f"{config.name} (not a KimiDeployment: {config.gpus} GPUs a group)")
            continue
        if groups is None:
            passed.append(f"{config.name} (misses the target with {MAX_GROUPS} groups)")
            continue
        candidates.append(Choice(config, groups, at_groups(item, groups), ""))
    if not candidates:
        raise PlanError(
            "--emit-spec: no configuration both meets the target and can be written as a "
            f"KimiDeployment: {', '.join(passed)}"
        )
    best = min(candidates, key=lambda c: (_cost(c.results), c.results.config.gpus))
    others = ", ".join(
        f"{c.config.name} ${_cost(c.results):.4f} with {c.groups}"
        for c in candidates
        if c is not best
    )
    split = best.config.disaggregated
    prefill = f" and {split.prefill_replicas} prefill group(s)" if split else ""
    why = (
        f"{best.config.name} with {best.groups} group(s){prefill} of {best.config.gpus} GPUs "
        "meets the "
        f"target at ${_cost(best.results):.4f} per completed task, the least"
        + (f" (against {others})" if others else "")
        + (f"; passed over: {', '.join(passed)}" if passed else "")
    )
    return Choice(best.config, best.groups, best.results, why)


def template(config_paths: list[str]) -> dict[str, Any]:
    """The first KimiDeployment among the --config files (its metadata and sources), or {}."""
    import yaml  # noqa: PLC0415

    for path in config_paths:
        for body in yaml.safe_load_all(Path(path).read_text(encoding="utf-8")):
            if isinstance(body, dict) and body.get("kind") == KIND:
                return body
    return {}


def manifest(choice: Choice, base: dict[str, Any]) -> dict[str, Any]:
    """The KimiDeployment of the choice, on `base`'s metadata and sources."""
    config = choice.config
    spec: dict[str, Any] = dict(base.get("spec") or {})
    spec["model"] = spec.get("model") or DEFAULT_MODEL
    spec["gpus"] = config.gpus
    spec["replicas"] = choice.groups
    spec["decode"] = (spec.get("decode") or {}) | {
        "backend": config.backend,
        "maxNumSeqs": config.max_num_seqs,
    }
    spec["kvCache"] = (spec.get("kvCache") or {}) | {"enablePrefixCaching": config.prefix_caching}
    spec.pop("prefill", None)
    split = config.disaggregated
    if split is not None:
        spec["kvCache"].pop("cpuOffload", None)  # vLLM would replace NIXL with its connector
        spec["routing"] = (spec.get("routing") or {}) | {"mode": "InferencePool"}
        spec["prefill"] = {"replicas": split.prefill_replicas, "decider": split.decider} | (
            {"uncachedTokens": split.uncached_tokens} if split.uncached_tokens else {}
        )
    if config.draft_tokens:
        drafts = (spec.get("speculative") or {}).get("draftSource") or DEFAULT_DRAFTS
        spec["speculative"] = {
            "method": "dspark",
            "draftSource": drafts,
            "numSpeculativeTokens": config.draft_tokens,
        }
    else:
        spec.pop("speculative", None)
    floor = decode_p10(choice.results)
    spec["autoscaling"] = {
        "minReplicas": choice.groups,
        "maxReplicas": min(2 * choice.groups, MAX_GROUPS),
        "target": {"decodeRateFloor": max(int(floor or 1), 1)},
    }
    metadata = {
        key: value
        for key, value in (base.get("metadata") or DEFAULT_METADATA).items()
        if key in {"name", "namespace", "labels", "annotations"}
    }
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata, "spec": spec}


def write_spec(path: Path, body: dict[str, Any], why: str) -> None:
    """Write it, validated as `kimi-operator validate` does: never a spec the API refuses."""
    import yaml  # noqa: PLC0415

    from kimi_operator.api.validation import check_document  # noqa: PLC0415

    report = check_document(body)
    if report.deployment is None:
        raise PlanError(f"--emit-spec: the API would refuse the spec: {report.problems[0]}")
    header = "# Written by kimi-operator plan: " + why + "\n"
    try:
        path.write_text(header + yaml.safe_dump(body, sort_keys=False), encoding="utf-8")
    except OSError as error:
        raise PlanError(f"--emit-spec {path}: cannot write: {error.strerror or error}") from None
