"""The real `helm` binary, driven from the tests (scripts/install-helm.sh puts it in .tools/bin)."""

import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from kimi_operator.embedded.upstream import SAFE_LOADER
from tests.support.repo import ROOT

CHART = ROOT / "charts" / "kimi-operator"


def helm_binary() -> str:
    local = ROOT / ".tools" / "bin" / "helm"
    found = str(local) if local.exists() else shutil.which("helm")
    if found is None:
        pytest.fail("helm is not installed: run scripts/install-helm.sh (make tools)")
    return found


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [helm_binary(), *args], capture_output=True, text=True, timeout=120, check=False
    )
    if check and result.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed:\n{result.stderr}")
    return result


def write_values(directory: Path, values: Mapping[str, Any]) -> Path:
    path = directory / "values.yaml"
    path.write_text(yaml.safe_dump(dict(values)))
    return path


def template(
    values: Mapping[str, Any],
    tmp_path: Path,
    *,
    chart: Path = CHART,
) -> list[dict[str, Any]]:
    """Every object `helm template` renders with `values`."""
    result = helm(
        "template",
        "kimi",
        str(chart),
        "--namespace",
        "kimi-system",
        "--values",
        str(write_values(tmp_path, values)),
    )
    return documents(result.stdout)


def documents(rendered: str) -> list[dict[str, Any]]:
    """The objects of a render, read by libyaml (a render is 300 KB, the CRD's CEL patterns
    mostly: PyYAML's own parser took half a second of CPU for each)."""
    return [doc for doc in yaml.load_all(rendered, Loader=SAFE_LOADER) if doc]


WEBHOOK_COMPONENT = "admission-webhook"


def of_kind(
    objects: Sequence[dict[str, Any]], kind: str, *, webhook: bool = False
) -> list[dict[str, Any]]:
    """The objects of `kind`: the operator's, or with `webhook` the admission webhook's."""
    return [o for o in objects if o["kind"] == kind and is_webhooks(o) == webhook]


def is_webhooks(obj: dict[str, Any]) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return bool(labels.get("app.kubernetes.io/component") == WEBHOOK_COMPONENT)
