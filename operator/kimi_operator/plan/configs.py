"""Configurations to plan: KimiDeployment-shaped descriptions, or KimiDeployment files.

A `--config` file is YAML: either KimiDeployments (checked by the API's own validator: one the
API server would refuse is refused here with its message) or descriptions:

    configurations:
      - name: tp8x2-latency
        gpus: 8                          # one group's GPUs (TP size; GB300: 8 or 16)
        backend: latency_specialized     # latency_specialized | auto
        draftTokens: 7                   # DSpark drafts, 0..7 (0: no speculation)
        acceptance: 6                    # mean drafts accepted (default: the calibration's)
        maxNumSeqs: 8
        replicas: 2                      # serving groups
        routing: prefix                  # prefix | round-robin
        disaggregated:                   # spec.prefill: prefill groups + `replicas` decode groups
          prefillReplicas: 1
          decider: Always                # Always | UncachedTokens (with uncachedTokens: N)
          kvTransferS: 0.02              # a fixed hand-over time (default: modelled from bytes)
"""

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel

from kimi_operator.plan import PlanError

if TYPE_CHECKING:
    from kimi_operator.api.spec import KimiDeployment

MAX_GROUPS = 64


class _Model(BaseModel):
    model_config = ConfigDict(
        extra="forbid", strict=True, alias_generator=to_camel, validate_by_name=True, frozen=True
    )


class Disaggregated(_Model):
    prefill_replicas: Annotated[int, Field(ge=1, le=MAX_GROUPS)]
    decider: Literal["Always", "UncachedTokens"] = "Always"
    uncached_tokens: Annotated[int, Field(ge=1, le=1_048_576)] | None = None
    kv_transfer_s: Annotated[float, Field(ge=0, allow_inf_nan=False)] | None = None

    @model_validator(mode="after")
    def _threshold_fits_decider(self) -> "Disaggregated":
        if (self.decider == "UncachedTokens") != (self.uncached_tokens is not None):
            raise ValueError(
                "uncachedTokens is the threshold of decider UncachedTokens, and only of it"
            )
        return self


class Configuration(_Model):
    name: Annotated[str, Field(min_length=1, max_length=63, pattern=r"^[A-Za-z0-9._-]+$")]
    gpus: Annotated[int, Field(ge=1, le=72)]  # one group's GPUs (GB300: 8 or 16)
    backend: Literal["latency_specialized", "auto"] = "latency_specialized"
    draft_tokens: Annotated[int, Field(ge=0, le=7)] = 0
    acceptance: Annotated[float, Field(ge=0, le=7, allow_inf_nan=False)] | None = None
    max_num_seqs: Annotated[int, Field(ge=1, le=1024)] = 8
    max_num_batched_tokens: Annotated[int, Field(ge=8, le=1_048_576)] = 8192
    replicas: Annotated[int, Field(ge=1, le=MAX_GROUPS)] = 1
    routing: Literal["prefix", "round-robin"] = "prefix"
    prefix_caching: bool = True
    calibration: str | None = None  # a --calibration run's name; default: the built-in match
    disaggregated: Disaggregated | None = None


class _Descriptions(_Model):
    configurations: Annotated[list[Configuration], Field(min_length=1)]


def _first_problem(error: ValidationError) -> str:
    problem = error.errors(include_url=False)[0]
    where = ".".join(str(part) for part in problem["loc"])
    return f"{where}: {problem['msg']}" if where else problem["msg"]


def _from_deployment(body: Any, label: str) -> Configuration:
    from kimi_operator.api.validation import UnreadableDocument, check_document  # noqa: PLC0415

    try:
        report = check_document(body)
    except UnreadableDocument as error:
        raise PlanError(f"{label}: {error}") from None
    if report.deployment is None:
        raise PlanError(f"{label}: the API would refuse it: {report.problems[0]}")
    return deployment_configuration(report.deployment)


def deployment_configuration(deployment: "KimiDeployment") -> Configuration:
    """What the model needs of a valid KimiDeployment (plan's --config, the SLO autoscaler)."""
    spec = deployment.spec
    drafts = spec.speculative.num_speculative_tokens if spec.speculative else 0
    prefill = spec.prefill
    return Configuration(
        name=deployment.metadata.name,
        gpus=spec.gpus,
        backend=spec.decode.backend,
        draft_tokens=drafts,
        max_num_seqs=spec.decode.max_num_seqs,
        replicas=max(spec.replicas, 1),
        prefix_caching=spec.kv_cache.enable_prefix_caching,
        disaggregated=Disaggregated(
            prefill_replicas=prefill.replicas,
            decider=prefill.decider,
            uncached_tokens=prefill.uncached_tokens,
        )
        if prefill is not None
        else None,
    )


def what_ifs(draft_tokens: int) -> list[Configuration]:
    """GB300 shapes to set beside a calibrated deployment when no --config is given: TP16 and
    TP8 groups, each decode backend, drafting as the calibrated deployment does; and, on 16 GPUs,
    two aggregated TP8 groups beside one TP8 prefill group feeding one TP8 decode group."""
    shapes = [
        Configuration(
            name=f"gb300-tp{gpus}-{backend.split('_')[0]}",
            gpus=gpus,
            backend=backend,
            draft_tokens=draft_tokens,
        )
        for gpus in (16, 8)
        for backend in ("latency_specialized", "auto")
    ]
    split = Configuration(
        name="gb300-tp8-p1d1",
        gpus=8,
        draft_tokens=draft_tokens,
        disaggregated=Disaggregated(prefill_replicas=1),
    )
    return [*shapes, aggregated(split, "gb300-tp8x2-latency"), split]


def aggregated(config: Configuration, name: str | None = None) -> Configuration:
    """A disaggregated configuration's aggregated twin: its groups of both roles serving both."""
    split = config.disaggregated
    if split is None:
        return config
    return config.model_copy(
        update={
            "name": name or f"{config.name}-aggregated"[:63],
            "replicas": config.replicas + split.prefill_replicas,
            "disaggregated": None,
        }
    )


def load_configurations(path: str) -> list[Configuration]:
    import yaml  # noqa: PLC0415

    try:
        text = Path(path).read_text(encoding="utf-8")
        bodies = [b for b in yaml.safe_load_all(text) if b is not None]
    except (OSError, UnicodeDecodeError) as error:
        raise PlanError(
            f"{path}: cannot read: {getattr(error, 'strerror', None) or error}"
        ) from None
    except yaml.YAMLError as error:
        raise PlanError(f"{path}: not valid YAML: {str(error).splitlines()[0]}") from None
    if not bodies:
        raise PlanError(f"{path}: no configurations in it")
    configurations: list[Configuration] = []
    for number, body in enumerate(bodies, start=1):
        label = path if len(bodies) == 1 else f"{path}[{number}]"
        if isinstance(body, dict) and "kind" in body:
            configurations.append(_from_deployment(body, label))
            continue
        try:
            configurations += _Descriptions.model_validate(body).configurations
        except ValidationError as error:
            raise PlanError(f"{label}: {_first_problem(error)}") from None
    names = [c.name for c in configurations]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise PlanError(f"{path}: configuration names must differ: {', '.join(repeated)} repeats")
    return configurations
