"""`python -m kimi_operator.embedded`: the benchmark's API server, in a process of its own.

It serves on 127.0.0.1 with the KimiDeployment CRD and the vendored CRDs of its children
installed and the chart's RBAC stored; prints the URL, then the operator's ServiceAccount token;
runs until SIGTERM or SIGINT. (For a cluster of your own to drive with helm and kubectl, empty:
`kimi-operator demo --serve`.)"""

import signal
import threading

from kimi_operator.api.crd import crd
from kimi_operator.embedded.chart import operator_identity
from kimi_operator.embedded.harness import EmbeddedApiServer
from kimi_operator.embedded.upstream import child_crds


def main() -> None:
    crds = child_crds()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    with EmbeddedApiServer() as api:
        api.install_crds([crd(), *crds])
        token = operator_identity(api)
        print(api.url, token, sep="\n", flush=True)
        stop.wait()


if __name__ == "__main__":
    main()
