"""`--disable-custom-all-reduce` goes only to TP groups across nodes on an image whose vLLM is older
than 0.33.0 or not declared (docs/custom-all-reduce.md)."""

from typing import Any

import pytest

from kimi_operator.builders import (
    VLLM_VERSION_ANNOTATION,
    OperatorDefaults,
    build_children,
    custom_all_reduce_disabled,
)
from tests.kimi_operator.builders.cases import deployment
from tests.support.specs import edited

FLAG = "--disable-custom-all-reduce"
DEFAULTS = OperatorDefaults()


def _args(doc: dict[str, Any], defaults: OperatorDefaults) -> list[list[str]]:
    children = build_children(deployment(doc), defaults)
    lws = next(c for c in children if c["kind"] == "LeaderWorkerSet")
    templates = lws["spec"]["leaderWorkerTemplate"]
    return [templates[r]["spec"]["containers"][0]["args"] for r in templates if r.endswith("plate")]


def _annotated(version: str | None, **edits: Any) -> dict[str, Any]:
    doc = edited({"spec.image": "example.com/vllm:custom", **edits})
    if version is not None:
        doc["metadata"]["annotations"] = {VLLM_VERSION_ANNOTATION: version}
    return doc


@pytest.mark.parametrize(
    ("doc", "defaults", "disabled"),
    [
        (edited({}), OperatorDefaults(), False),  # the chart's image, vLLM 0.33.0
        (edited({}), OperatorDefaults(serving_image_vllm_version="0.32.1"), True),
        (edited({}), OperatorDefaults(serving_image_vllm_version="0.34.0rc1"), False),
        (edited({}), OperatorDefaults(serving_image_vllm_version="nightly"), True),
        (_annotated(None), OperatorDefaults(), True),  # spec.image, version not declared
        (_annotated("0.33.0"), OperatorDefaults(), False),
        (_annotated("v0.35.2"), OperatorDefaults(), False),
        (_annotated("0.32.0"), OperatorDefaults(), True),
        (
            _annotated("0.32.0", **{"spec.gpus": 8, "spec.gpusPerNode": 8}),
            OperatorDefaults(),
            False,
        ),
    ],
)
def test_decided_by_the_images_vllm_version(
    doc: dict[str, Any], defaults: OperatorDefaults, disabled: bool
) -> None:
    assert custom_all_reduce_disabled(deployment(doc), defaults) is disabled
    for args in _args(doc, defaults):  # leader and workers alike
        assert (FLAG in args) is disabled
