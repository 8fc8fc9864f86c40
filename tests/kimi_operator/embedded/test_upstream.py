"""The vendored CRDs are parsed once per process, and each caller gets its own copy."""

import yaml

from kimi_operator.embedded.upstream import CRD_FILES, upstream_crd, upstream_file


def test_a_caller_s_changes_do_not_reach_the_next_caller() -> None:
    first = upstream_crd("LeaderWorkerSet")
    first["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"].clear()
    first["metadata"]["name"] = "changed"
    again = upstream_crd("LeaderWorkerSet")
    assert again == yaml.safe_load(upstream_file(CRD_FILES["LeaderWorkerSet"]).read_text())
    assert again["metadata"]["name"] == "leaderworkersets.leaderworkerset.x-k8s.io"
