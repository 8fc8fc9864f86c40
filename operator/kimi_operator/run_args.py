"""The arguments of `kimi-operator run`, apart from the rest of the CLI: the chart renders them
into the operator's Deployment, and the demo and the sandbox read them back from there to run the
operator as the chart would (kimi_operator.embedded.demo)."""

import argparse
import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kimi_operator.api.spec import TracingSpec
    from kimi_operator.builders import OperatorDefaults
    from kimi_operator.builders.nodes import NodePolicy


def add_run_arguments(run: argparse.ArgumentParser) -> None:
    """Every option of `kimi-operator run`, on `run`."""
    import os  # noqa: PLC0415

    from kimi_operator.builders import (  # noqa: PLC0415
        DEFAULT_SERVING_IMAGE,
        DEFAULT_SERVING_VLLM_VERSION,
    )
    from kimi_operator.builders.autoscaling import DEFAULT_PROMETHEUS_URL  # noqa: PLC0415
    from kimi_operator.builders.disaggregation import (  # noqa: PLC0415
        DEFAULT_ROUTING_SIDECAR_IMAGE,
    )
    from kimi_operator.builders.routing import DEFAULT_EPP_IMAGE  # noqa: PLC0415

    run.add_argument(
        "--namespace",
        action="append",
        metavar="NS",
        help="watch this namespace (repeatable); default: all namespaces",
    )
    run.add_argument(
        "--serving-image",
        default=os.environ.get("KIMI_OPERATOR_SERVING_IMAGE", DEFAULT_SERVING_IMAGE),
        help="image for deployments that leave spec.image empty "
        "(env KIMI_OPERATOR_SERVING_IMAGE; default %(default)s)",
    )
    run.add_argument(
        "--serving-image-vllm-version",
        default=os.environ.get(
            "KIMI_OPERATOR_SERVING_IMAGE_VLLM_VERSION", DEFAULT_SERVING_VLLM_VERSION
        ),
        metavar="VERSION",
        help="the vLLM version --serving-image carries; below 0.33.0, TP groups across nodes get "
        "--disable-custom-all-reduce (vllm issue 52778). A spec.image declares its own with the "
        "annotation kimi-operator.io/vllm-version (env KIMI_OPERATOR_SERVING_IMAGE_VLLM_VERSION; "
        "default %(default)s)",
    )
    run.add_argument(
        "--epp-image",
        default=os.environ.get("KIMI_OPERATOR_EPP_IMAGE", DEFAULT_EPP_IMAGE),
        metavar="IMAGE",
        help="endpoint picker image for spec.routing.mode InferencePool where "
        "spec.routing.endpointPicker.image is empty (env KIMI_OPERATOR_EPP_IMAGE; "
        "default %(default)s)",
    )
    run.add_argument(
        "--routing-sidecar-image",
        default=os.environ.get(
            "KIMI_OPERATOR_ROUTING_SIDECAR_IMAGE", DEFAULT_ROUTING_SIDECAR_IMAGE
        ),
        metavar="IMAGE",
        help="llm-d's routing sidecar on the decode groups' leaders of deployments with "
        "spec.prefill (env KIMI_OPERATOR_ROUTING_SIDECAR_IMAGE; default %(default)s)",
    )
    run.add_argument(
        "--prometheus-url",
        default=os.environ.get("KIMI_OPERATOR_PROMETHEUS_URL", DEFAULT_PROMETHEUS_URL),
        metavar="URL",
        help="Prometheus that the KEDA ScaledObjects of spec.autoscaling query, and the operator "
        "itself for spec.prefill.autoscaling; it must evaluate the chart's recording rules (env "
        "KIMI_OPERATOR_PROMETHEUS_URL; default %(default)s)",
    )
    run.add_argument(
        "--prometheus-bearer-token-file",
        default=os.environ.get("KIMI_OPERATOR_PROMETHEUS_BEARER_TOKEN_FILE", ""),
        metavar="PATH",
        help="send the token in this file (read at every query) as a bearer token on the "
        "operator's own Prometheus queries (env KIMI_OPERATOR_PROMETHEUS_BEARER_TOKEN_FILE; "
        "default: none)",
    )
    run.add_argument(
        "--prometheus-ca-file",
        default=os.environ.get("KIMI_OPERATOR_PROMETHEUS_CA_FILE", ""),
        metavar="PATH",
        help="check an HTTPS --prometheus-url's certificate against the CAs in this PEM file "
        "(env KIMI_OPERATOR_PROMETHEUS_CA_FILE; default: the system's CAs)",
    )
    run.add_argument(
        "--keda-authentication",
        type=keda_authentication,
        default=os.environ.get("KIMI_OPERATOR_KEDA_AUTHENTICATION", ""),  # checked as typed
        metavar="KIND/NAME",
        help="the KEDA TriggerAuthentication that gives the ScaledObjects' Prometheus triggers "
        "their bearer token: TriggerAuthentication/<name> (in each deployment's namespace) or "
        "ClusterTriggerAuthentication/<name> (env KIMI_OPERATOR_KEDA_AUTHENTICATION; default: "
        "none)",
    )
    run.add_argument(
        "--resync-interval",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="reconcile every deployment this often, repairing drift (default %(default)s)",
    )
    run.add_argument(
        "--workers", type=int, default=16, help="reconciles at once (default %(default)s)"
    )
    run.add_argument(
        "--kube-api-qps",
        type=float,
        default=500.0,
        metavar="QPS",
        help="client-side rate limit on API requests, as client-go's: the average a second once "
        "the burst is spent; Lease renewals are never held back (default %(default)s)",
    )
    run.add_argument(
        "--kube-api-burst",
        type=int,
        default=1000,
        metavar="N",
        help="client-side rate limit: requests sent at once before --kube-api-qps applies "
        "(default %(default)s)",
    )
    run.add_argument(
        "--api-timeout",
        type=float,
        default=15.0,
        metavar="SECONDS",
        help="retry an API request unanswered this long (default %(default)s)",
    )
    run.add_argument(
        "--discovery-interval",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="look again this often whether LeaderWorkerSet, ComputeDomain and PodMonitor are "
        "installed (default %(default)s)",
    )
    run.add_argument(
        "--health-address",
        default="0.0.0.0:8081",
        metavar="HOST:PORT",
        help="serve /healthz here; empty: off (default %(default)s)",
    )
    run.add_argument(
        "--metrics-address",
        default="0.0.0.0:8080",
        metavar="HOST:PORT",
        help="serve the kimi_operator_* Prometheus metrics here; empty: off (default %(default)s)",
    )
    run.add_argument(
        "--leader-elect",
        action="store_true",
        help="elect a leader on a Lease among the operator's replicas: only the leader "
        "reconciles, the others stand by (needed with more than one replica, and for a "
        "rolling update without two operators at once)",
    )
    run.add_argument(
        "--leader-elect-resource-name",
        default="kimi-operator",
        metavar="NAME",
        help="the Lease's name (default %(default)s)",
    )
    run.add_argument(
        "--leader-elect-resource-namespace",
        default="",
        metavar="NAMESPACE",
        help="the Lease's namespace (default: $POD_NAMESPACE, else the ServiceAccount's)",
    )
    for flag, default, what in (
        ("lease-duration", 15.0, "how long a standby waits on a Lease not renewed"),
        ("renew-deadline", 10.0, "how long the leader tries to renew before it stops"),
        ("retry-period", 2.0, "how often the leader renews and a standby tries"),
    ):
        run.add_argument(
            f"--leader-elect-{flag}",
            type=float,
            default=default,
            metavar="SECONDS",
            help=f"{what} (default %(default)s)",
        )
    run.add_argument(
        "--operator-traces-endpoint",
        type=traces_endpoint,
        default=os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        or signal_url(os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "")),
        metavar="URL",
        help="send the operator's own reconciles as spans over OTLP/HTTP to this URL, whole "
        "(e.g. http://otel-collector.observability:4318/v1/traces); empty: off (env "
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, else OTEL_EXPORTER_OTLP_ENDPOINT + /v1/traces; "
        "default: off)",
    )
    add_evacuation_arguments(run)
    add_tracing_arguments(run)
    run.add_argument("--verbose", action="store_true", help="debug logging")


def add_evacuation_arguments(run: argparse.ArgumentParser) -> None:
    """Which nodes TP groups leave, replaced first (docs/maintenance.md)."""
    from kimi_operator.builders import nodes  # noqa: PLC0415

    run.add_argument(
        "--no-evacuation",
        dest="evacuation",
        action="store_false",
        help="never move groups off unfit nodes: no Node is read, and the PodDisruptionBudget "
        "lets spec.rollout.maxUnavailable pods be evicted (a drain then restarts their groups)",
    )
    run.add_argument(
        "--no-evacuate-cordoned",
        dest="evacuate_cordoned",
        action="store_false",
        help="a cordoned node (spec.unschedulable) is no reason to move a group",
    )
    for flag, default, what in (
        ("evacuate-taints", nodes.DEFAULT_TAINTS, "NoSchedule or NoExecute taint keys"),
        ("evacuate-conditions", nodes.DEFAULT_CONDITIONS, "node condition types (status True)"),
        (
            "critical-conditions",
            nodes.DEFAULT_CRITICAL,
            "of --evacuate-conditions, those whose groups go without a replacement when none "
            "can be placed",
        ),
    ):
        run.add_argument(
            f"--{flag}",
            type=names_of("taint key" if "taint" in flag else "node condition type"),
            default=default,
            metavar="A,B",
            help=f"comma-separated {what} that make a node unfit; empty: none (default "
            f"{','.join(default)})",
        )


def add_tracing_arguments(run: argparse.ArgumentParser) -> None:
    """The tracing of deployments that leave spec.observability.tracing out (chart value tracing;
    docs/observability.md#traces): OTLP over gRPC, which every component can export."""
    from kimi_operator.api.spec import TracingSpec  # noqa: PLC0415

    fields = TracingSpec.model_fields
    run.add_argument(
        "--tracing-endpoint",
        default="",
        metavar="URL",
        help="the OTLP gRPC collector, an http:// URL (e.g. http://otel-collector:4317); empty: "
        "no traces (default: empty)",
    )
    run.add_argument(
        "--tracing-sampling-ratio",
        type=float,
        default=fields["sampling_ratio"].default,
        metavar="RATIO",
        help="share of requests traced where the caller sent no sampling decision, 0 to 1 "
        "(default %(default)s)",
    )
    run.add_argument(
        "--tracing-detailed-traces",
        action="store_true",
        help="vLLM's detailed model and worker traces (needs --tracing-endpoint)",
    )
    run.add_argument(
        "--tracing-ui-url",
        default="",
        metavar="TEMPLATE",
        help="the trace UI's page of a trace, {trace_id} where the id goes (e.g. "
        "https://jaeger.example/trace/{trace_id}): the deployments' status.traceUrl, which "
        "`kimi-operator bench --deployment` links the slowest turns with (needs "
        "--tracing-endpoint; default: none)",
    )


def tracing_default(args: argparse.Namespace) -> "TracingSpec | None":
    """The --tracing-* flags, checked as a deployment's spec.observability.tracing is (None
    without an endpoint); ValueError naming the flag and what it allows."""
    from pydantic import ValidationError  # noqa: PLC0415

    from kimi_operator.api.rules import TRACING_RULES, failed_rules  # noqa: PLC0415
    from kimi_operator.api.spec import TracingSpec  # noqa: PLC0415

    flags = {
        "endpoint": ("--tracing-endpoint", args.tracing_endpoint),
        "samplingRatio": ("--tracing-sampling-ratio", args.tracing_sampling_ratio),
        "detailedTraces": ("--tracing-detailed-traces", args.tracing_detailed_traces),
        "uiUrl": ("--tracing-ui-url", args.tracing_ui_url),
    }
    try:
        tracing = TracingSpec.model_validate({key: value for key, (_, value) in flags.items()})
    except ValidationError as error:
        first = error.errors()[0]
        flag, value = flags[str(first["loc"][0])]
        raise ValueError(f"{flag} {value!r}: {first['msg']}") from None
    spec = {"observability": {"tracing": tracing.model_dump()}}
    for violation in failed_rules(spec, TRACING_RULES):
        rule = violation.rule
        flag, _ = flags[rule.field]
        raise ValueError(f"{flag} {violation.got!r}: {rule.problem} (allowed: {rule.allowed})")
    return tracing if tracing.endpoint else None


def signal_url(base: str) -> str:
    """OTEL_EXPORTER_OTLP_ENDPOINT's traces URL, as OpenTelemetry's exporters make it: the base
    with `v1/traces` appended ("" stays "")."""
    return f"{base.rstrip('/')}/v1/traces" if base else ""


def traces_endpoint(value: str) -> str:
    """An http(s):// URL, or "" (off)."""
    from kimi_operator.api.spec import OTLP_URL_OR_EMPTY  # noqa: PLC0415

    if not re.fullmatch(OTLP_URL_OR_EMPTY, value):
        raise argparse.ArgumentTypeError(
            f"{value!r}: expected an http(s)://host[:port][/path] URL, e.g. "
            "http://otel-collector.observability:4318/v1/traces"
        )
    return value


def names_of(what: str) -> "Callable[[str], tuple[str, ...]]":
    """A flag's type: comma-separated taint keys or condition types, each checked."""
    from kimi_operator.builders.nodes import check_name  # noqa: PLC0415

    def parse(value: str) -> tuple[str, ...]:
        try:
            return tuple(check_name(v.strip(), what) for v in value.split(",")) if value else ()
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    return parse


KEDA_AUTHENTICATION_KINDS = ("TriggerAuthentication", "ClusterTriggerAuthentication")
_DNS_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")


def keda_authentication(value: str) -> str:
    """`Kind/name` of a KEDA trigger authentication, or "" for none."""
    kind, _, name = value.partition("/")
    if value and (kind not in KEDA_AUTHENTICATION_KINDS or not _DNS_NAME.fullmatch(name)):
        raise argparse.ArgumentTypeError(
            f"{value!r}: expected TriggerAuthentication/<name> or "
            "ClusterTriggerAuthentication/<name>, <name> a DNS subdomain name"
        )
    return value


def operator_defaults(args: argparse.Namespace) -> "OperatorDefaults":
    """What `kimi-operator run`'s arguments configure the operator with: the one reading of them,
    for `run` itself and for the demo and sandbox running the operator as the chart deployed it."""
    from kimi_operator.builders import OperatorDefaults  # noqa: PLC0415
    from kimi_operator.builders.nodes import UnfitNodes  # noqa: PLC0415

    return OperatorDefaults(
        serving_image=args.serving_image,
        serving_image_vllm_version=args.serving_image_vllm_version,
        prometheus_url=args.prometheus_url,
        prometheus_token_file=args.prometheus_bearer_token_file,
        prometheus_ca_file=args.prometheus_ca_file,
        keda_authentication=args.keda_authentication,
        epp_image=args.epp_image,
        routing_sidecar_image=args.routing_sidecar_image,
        tracing=tracing_default(args),
        nodes=UnfitNodes(node_policy(args)),
    )


def node_policy(args: argparse.Namespace) -> "NodePolicy":
    """The evacuation flags as a policy; ValueError for a critical condition that is not
    evacuated on."""
    from kimi_operator.builders.nodes import NodePolicy  # noqa: PLC0415

    extra = sorted(set(args.critical_conditions) - set(args.evacuate_conditions))
    if extra:
        raise ValueError(
            f"--critical-conditions {','.join(extra)}: not in --evacuate-conditions (a critical "
            "condition must make the node unfit first)"
        )
    return NodePolicy(
        enabled=args.evacuation,
        cordoned=args.evacuate_cordoned,
        taints=args.evacuate_taints,
        conditions=args.evacuate_conditions,
        critical=args.critical_conditions,
    )


def parse_run_arguments(argv: Sequence[str]) -> argparse.Namespace:
    """`argv` (a container's `args`, say) as `kimi-operator run` reads them."""
    parser = argparse.ArgumentParser(prog="kimi-operator run")
    add_run_arguments(parser)
    return parser.parse_args(list(argv))
