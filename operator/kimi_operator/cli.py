"""`kimi-operator`: validate | render | crd | run | admission (and the subcommands other modules
register).

Imports stay inside the subcommands so that `validate` loads only pydantic and PyYAML: no
Kubernetes client, no HTTP stack.
"""

import argparse
import functools
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

EXIT_OK, EXIT_INVALID, EXIT_UNREADABLE, EXIT_LEADERSHIP_LOST = 0, 1, 2, 3


class InputError(Exception):
    """Input that cannot be read as KimiDeployment YAML; reported as one line, exit 2."""


@dataclass(frozen=True)
class Document:
    label: str  # FILE, or FILE[n] when the file holds several documents
    body: Any


def _read_text(name: str, label: str, stdin: TextIO) -> str:
    """The whole input, refused unread past MAX_DOCUMENT_BYTES (a huge file costs no memory)."""
    from kimi_operator.api.constants import MAX_DOCUMENT_BYTES  # noqa: PLC0415

    try:
        if name == "-":
            buffer = getattr(stdin, "buffer", None)
            raw: bytes | str = (buffer or stdin).read(MAX_DOCUMENT_BYTES + 1)
        else:
            with open(name, "rb") as handle:
                raw = handle.read(MAX_DOCUMENT_BYTES + 1)
        size = len(raw.encode() if isinstance(raw, str) else raw)
        if size > MAX_DOCUMENT_BYTES:
            raise InputError(
                f"{label}: larger than {MAX_DOCUMENT_BYTES} bytes (the API server's request limit "
                "is 3 MiB; a KimiDeployment is a few KiB)"
            )
        return raw if isinstance(raw, str) else raw.decode("utf-8")
    except (OSError, UnicodeDecodeError) as error:
        reason = getattr(error, "strerror", None) or str(error)
        raise InputError(f"{label}: cannot read: {reason}") from None


def read_documents(name: str, stdin: TextIO) -> list[Document]:
    import yaml  # noqa: PLC0415

    from kimi_operator.api.constants import MAX_DOCUMENTS_PER_FILE  # noqa: PLC0415

    label = "<stdin>" if name == "-" else name
    text = _read_text(name, label, stdin)
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    bodies: list[Any] = []
    try:
        for body in yaml.load_all(text, Loader=loader):
            if body is None:
                continue
            if len(bodies) == MAX_DOCUMENTS_PER_FILE:
                raise InputError(f"{label}: more than {MAX_DOCUMENTS_PER_FILE} YAML documents")
            bodies.append(body)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise InputError(f"{label}: not valid YAML{where}: {problem}") from None
    except RecursionError:  # PyYAML's pure-Python composer (libyaml stops at 1000 levels itself)
        raise InputError(f"{label}: not valid YAML: nested too deeply") from None
    if not bodies:
        raise InputError(f"{label}: no YAML documents")
    if len(bodies) == 1:
        return [Document(label, bodies[0])]
    return [Document(f"{label}[{i}]", body) for i, body in enumerate(bodies, start=1)]


def _other_object(body: Any) -> str | None:
    """`apiVersion "v1", kind "Namespace", name "x"` for an object of another API group (kept in
    the same file as many users do), else None: it is skipped, not refused."""
    import json  # noqa: PLC0415

    from kimi_operator.api.constants import GROUP  # noqa: PLC0415

    if not isinstance(body, dict):
        return None
    api_version, kind, meta = body.get("apiVersion"), body.get("kind"), body.get("metadata")
    if not (isinstance(api_version, str) and isinstance(kind, str) and kind):
        return None
    if api_version.split("/")[0] == GROUP:
        return None  # ours, misspelled: an error
    name = meta.get("name") if isinstance(meta, dict) else None
    fields = [("apiVersion", api_version), ("kind", kind), ("name", name)]
    return ", ".join(f"{k} {json.dumps(v)[:80]}" for k, v in fields if isinstance(v, str))


def _checked(
    names: Sequence[str], out: TextIO, err: TextIO, notes: TextIO
) -> Iterator[tuple[Document, Any]]:
    """Yield (document, report) for every readable KimiDeployment; unreadable ones go to `err`,
    other Kubernetes objects are skipped with a line to `notes`."""
    from kimi_operator.api.validation import UnreadableDocument, check_document  # noqa: PLC0415

    for name in names:
        try:
            documents = read_documents(name, sys.stdin)
        except InputError as error:
            print(f"error: {error}", file=err)
            yield Document(name, None), None
            continue
        checked = 0
        for document in documents:
            other = _other_object(document.body)
            if other is not None:
                print(f"{document.label}: skipped ({other}): not a KimiDeployment", file=notes)
                continue
            checked += 1
            try:
                yield document, check_document(document.body)
            except UnreadableDocument as error:
                print(f"error: {document.label}: {error}", file=err)
                yield document, None
        if not checked:
            label = "<stdin>" if name == "-" else name
            print(f"error: {label}: no KimiDeployment in it", file=err)
            yield Document(name, None), None
    out.flush()


def _unmeetable(report: Any) -> list[Any]:
    """A valid deployment's objectives that no count of groups meets (the admission webhook's
    refusal); the planner is loaded only for a deployment with an slo."""
    kd = report.deployment
    if kd is None or not kd.spec.slo_scaled:
        return []
    from kimi_operator.slo_roles import refusals  # noqa: PLC0415

    return refusals(kd)


def cmd_validate(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    status = EXIT_OK
    for document, report in _checked(args.files, out, err, notes=out):
        if report is None:
            status = EXIT_UNREADABLE
            continue
        problems = [*report.problems, *_unmeetable(report)]
        for problem in problems:
            print(f"{document.label}: {problem}", file=out)
        for warning in report.warnings:
            print(f"{document.label}: warning: {warning}", file=out)
        if problems:
            status = max(status, EXIT_INVALID)
        else:
            print(f"{document.label}: valid", file=out)
    return status


def cmd_render(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    import yaml  # noqa: PLC0415

    from kimi_operator.builders import (  # noqa: PLC0415
        OperatorDefaults,
        build_caches,
        build_children,
        preview_weights,
    )

    defaults = OperatorDefaults(serving_image=args.image) if args.image else OperatorDefaults()
    status, children = EXIT_OK, []
    for document, report in _checked([args.file], out, err, notes=err):
        if report is None:
            status = EXIT_UNREADABLE
        elif report.deployment is None:
            for problem in report.problems:
                print(f"{document.label}: {problem}", file=err)
            status = max(status, EXIT_INVALID)
        else:
            for warning in report.warnings:
                print(f"{document.label}: warning: {warning}", file=err)
            kd = report.deployment
            # A Hugging Face source: the resolve Job it starts with, then its weights cache and
            # the groups as they will be once resolved (the revision shown as if the commit).
            weights = preview_weights(kd)
            children += [c for c in build_children(kd, defaults, weights={}) if c["kind"] == "Job"]
            children += build_caches(kd, defaults, weights) + build_children(
                kd, defaults, weights=weights
            )
    if status != EXIT_OK:
        return status
    out.write(yaml.safe_dump_all(children, sort_keys=False, width=100))
    return EXIT_OK


def cmd_crd(_: argparse.Namespace, out: TextIO, __: TextIO) -> int:
    from kimi_operator.api.crd import crd_yaml  # noqa: PLC0415

    out.write(crd_yaml())
    return EXIT_OK


def cmd_run(args: argparse.Namespace, _: TextIO, err: TextIO) -> int:
    import logging  # noqa: PLC0415

    from kimi_operator.controller.leader import LeaseConfig  # noqa: PLC0415
    from kimi_operator.run_args import operator_defaults  # noqa: PLC0415
    from kimi_operator.runner import LeadershipLost, RunConfig, run_operator  # noqa: PLC0415

    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=err,
    )
    try:
        lease = (
            LeaseConfig(
                namespace=args.leader_elect_resource_namespace or own_namespace(),
                name=args.leader_elect_resource_name,
                lease_duration_s=args.leader_elect_lease_duration,
                renew_deadline_s=args.leader_elect_renew_deadline,
                retry_period_s=args.leader_elect_retry_period,
            )
            if args.leader_elect
            else None
        )
    except ValueError as error:  # the three durations out of order
        print(f"error: --leader-elect-*: {error}", file=err)
        return EXIT_INVALID
    try:
        defaults = operator_defaults(args)
    except ValueError as error:
        print(f"error: {error}", file=err)
        return EXIT_INVALID
    if args.kube_api_qps <= 0 or args.kube_api_burst < 1:
        print(
            "error: --kube-api-qps must be > 0 and --kube-api-burst >= 1, got "
            f"{args.kube_api_qps} and {args.kube_api_burst}",
            file=err,
        )
        return EXIT_INVALID
    config = RunConfig(
        namespaces=tuple(args.namespace or ()),
        defaults=defaults,
        resync_interval_s=args.resync_interval,
        workers=args.workers,
        kube_api_qps=args.kube_api_qps,
        kube_api_burst=args.kube_api_burst,
        api_timeout_s=args.api_timeout,
        discovery_ttl_s=args.discovery_interval,
        health=args.health_address or None,
        metrics=args.metrics_address or None,
        leader_election=lease,
        traces_endpoint=args.operator_traces_endpoint,
    )
    try:
        run_operator(config)
    except LeadershipLost as lost:
        print(f"error: {lost}", file=err)
        return EXIT_LEADERSHIP_LOST
    return EXIT_OK


SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def own_namespace() -> str:
    """The namespace the operator's pod runs in: POD_NAMESPACE, the ServiceAccount's, or
    `default` (outside a cluster)."""
    import os  # noqa: PLC0415
    from pathlib import Path  # noqa: PLC0415

    if os.environ.get("POD_NAMESPACE"):
        return os.environ["POD_NAMESPACE"]
    try:
        return Path(SERVICE_ACCOUNT_NAMESPACE).read_text().strip() or "default"
    except OSError:
        return "default"


# What a wheel install lacks for the demo: the package kimi_operator.embedded (left out of the
# wheel) and the demo extra's modules (pyproject.toml), with the weights downloader its Jobs run.
DEMO_PACKAGE = "kimi_operator.embedded"
DEMO_EXTRA = ("kmock", "celpy", "jsonpatch", "huggingface_hub", "kimi_kernels")


def _demo_extra_missing(error: ModuleNotFoundError) -> bool:
    """Whether `error` says the demo is not installed (the package, or a module of the extra),
    rather than a bug in what it imports."""
    name = error.name or ""
    return name == DEMO_PACKAGE or name.split(".")[0] in DEMO_EXTRA


def cmd_demo(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    import logging  # noqa: PLC0415
    import signal  # noqa: PLC0415
    import threading  # noqa: PLC0415
    from pathlib import Path  # noqa: PLC0415

    try:
        from kimi_operator.embedded.demo import DemoError, run_demo  # noqa: PLC0415
        from kimi_operator.embedded.sandbox import serve  # noqa: PLC0415
    except ModuleNotFoundError as error:
        if not _demo_extra_missing(error):
            raise  # an import bug, shown as itself
        print(
            "error: the demo runs from a clone of the repository with the demo extra "
            f"(`make demo`, or pip install -e '.[demo]'): {error}",
            file=err,
        )
        return EXIT_UNREADABLE
    logging.basicConfig(level=logging.ERROR, stream=err)
    if args.serve:
        stop = threading.Event()
        for stopping in (signal.SIGINT, signal.SIGTERM):
            signal.signal(stopping, lambda *_: stop.set())
        serve(Path(args.kubeconfig), out, stop)
        return EXIT_OK
    try:
        run_demo(Path(args.samples), out)
    except DemoError as error:
        print(f"error: {error}", file=err)
        return EXIT_INVALID
    return EXIT_OK


def cmd_admission(args: argparse.Namespace, _: TextIO, err: TextIO) -> int:
    import logging  # noqa: PLC0415
    import os  # noqa: PLC0415

    from kimi_operator.admission.server import ServeConfig, run  # noqa: PLC0415

    if not args.insecure and not (args.cert_file and args.key_file):
        print(
            "error: --cert-file and --key-file: both needed to serve HTTPS "
            "(or --insecure: plain HTTP on 127.0.0.1, for local tries)",
            file=err,
        )
        return EXIT_INVALID
    for flag, path in (("--cert-file", args.cert_file), ("--key-file", args.key_file)):
        if not args.insecure and not os.path.isfile(path):
            print(f"error: {flag}: {path}: no such file (allowed: a PEM file)", file=err)
            return EXIT_INVALID
    if not 0 <= args.port <= 65535:
        print(f"error: --port: {args.port} is not a port (allowed: 0 to 65535)", file=err)
        return EXIT_INVALID
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=err,
    )
    config = ServeConfig(
        address="127.0.0.1" if args.insecure else args.address,
        port=args.port,
        cert_file=None if args.insecure else args.cert_file,
        key_file=None if args.insecure else args.key_file,
        cert_check_interval_s=args.cert_check_interval,
    )
    run(config, lambda url: print(f"serving admission reviews at {url}", file=err, flush=True))
    return EXIT_OK


def _add_admission_parser(sub: Any) -> None:
    admission = sub.add_parser(
        "admission",
        help="serve the validating admission webhook of KimiDeployments (every rule of validate "
        "at kubectl apply)",
        description="AdmissionReview v1 for KimiDeployment CREATE and UPDATE: refused with every "
        "problem, one line each; the fast path's warnings as admission warnings. Needs no "
        "access to the cluster.",
    )
    admission.add_argument(
        "--port", type=int, default=8443, help="port to listen on; 0: any (default %(default)s)"
    )
    admission.add_argument(
        "--address",
        default="0.0.0.0",
        help="address to listen on with TLS (default %(default)s)",
    )
    admission.add_argument("--cert-file", metavar="PEM", help="the serving certificate (chain)")
    admission.add_argument("--key-file", metavar="PEM", help="its private key")
    admission.add_argument(
        "--cert-check-interval",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="read the certificate files again this often; changed ones (a renewal) are served "
        "from then on (default %(default)s)",
    )
    admission.add_argument(
        "--insecure",
        action="store_true",
        help="plain HTTP on 127.0.0.1 (local tries and tests: kube-apiserver calls HTTPS only)",
    )
    admission.add_argument("--verbose", action="store_true", help="debug logging")
    admission.set_defaults(run=cmd_admission)


def _add_operator_parsers(sub: Any) -> None:
    from kimi_operator.run_args import add_run_arguments  # noqa: PLC0415

    run = sub.add_parser(
        "run",
        help="run the operator (in-cluster config, or KUBECONFIG)",
        description="Reconcile KimiDeployments into LeaderWorkerSets, ComputeDomains, a Service, "
        "a PodMonitor and a PodDisruptionBudget.",
    )
    add_run_arguments(run)
    run.set_defaults(run=cmd_run)

    demo = sub.add_parser(
        "demo",
        help="run the operator live on an embedded API server with the sample deployments",
    )
    demo.add_argument(
        "--samples", default="crds/samples", help="folder of KimiDeployment YAML (%(default)s)"
    )
    demo.add_argument(
        "--serve",
        action="store_true",
        help="instead, an empty cluster of your own for helm and kubectl (the operator runs once "
        "the chart is installed), until Ctrl-C",
    )
    demo.add_argument(
        "--kubeconfig",
        default=".kube/sandbox.kubeconfig",
        metavar="FILE",
        help="with --serve: write the cluster's kubeconfig here (%(default)s)",
    )
    demo.set_defaults(run=cmd_demo)


Command = Callable[[argparse.Namespace, TextIO, TextIO], int]


class _VersionAction(argparse.Action):
    """`--version`, reading the installed version only when asked (importlib.metadata is slow)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **_kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, help="print the version and exit")

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        from importlib.metadata import version  # noqa: PLC0415

        sys.stdout.write(f"{parser.prog} {version('kimi-operator')}\n")
        parser.exit()


@functools.cache
def build_parser() -> argparse.ArgumentParser:
    """Built once a process: `main` reads nothing from it that a parse changes, and the fuzz
    harness and the tests call `main` thousands of times in one process (building it is about
    10 ms: a few hundred arguments, each formatted)."""
    parser = argparse.ArgumentParser(
        prog="kimi-operator",
        description="Run Kimi K3 on GB300 NVL72 with vLLM's latency-specialized decode path.",
    )
    parser.add_argument("--version", action=_VersionAction)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    validate = sub.add_parser(
        "validate",
        help="check KimiDeployment YAML and report every problem",
        description="Exit 0: all valid; 1: some invalid; 2: unreadable input.",
    )
    validate.add_argument("files", nargs="+", metavar="FILE", help="YAML file, or - for stdin")
    validate.set_defaults(run=cmd_validate)

    render = sub.add_parser(
        "render",
        help="print the children the operator creates for a spec (a Hugging Face source: its "
        "resolve Job and weights cache too, the revision shown as if it were the commit)",
    )
    render.add_argument("file", metavar="FILE", help="YAML file, or - for stdin")
    render.add_argument("--image", help="serving image when the spec leaves spec.image empty")
    render.set_defaults(run=cmd_render)

    crd = sub.add_parser("crd", help="print the CustomResourceDefinition")
    crd.set_defaults(run=cmd_crd)

    from kimi_operator.bench.cli import add_bench_parser  # noqa: PLC0415  (stdlib-only module)

    add_bench_parser(sub)
    from kimi_operator.plan.cli import add_plan_parser  # noqa: PLC0415  (stdlib-only module)

    add_plan_parser(sub)
    _add_operator_parsers(sub)
    _add_admission_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    run: Command = args.run
    try:
        return run(args, sys.stdout, sys.stderr)
    except BrokenPipeError:
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
