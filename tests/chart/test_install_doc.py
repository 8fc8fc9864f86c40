"""docs/install.md's commands and manifests, tried where they can be: its `helm install` line as
`helm template`, its monitoring flags, its PersistentVolumeClaim against the Kubernetes schema, and
the samples it names."""

import re
import shlex
from pathlib import Path
from typing import Any

import kubernetes_validate
import yaml

from kimi_operator.api.validation import check_document
from tests.support.repo import ROOT

from .helm import documents, helm, of_kind

DOC = ROOT / "docs" / "install.md"
BLOCK = re.compile(r"```(\w+)\n(.*?)```", re.DOTALL)


def blocks(language: str) -> list[str]:
    return [body for lang, body in BLOCK.findall(DOC.read_text()) if lang == language]


def command(text: str) -> list[str]:
    """One shell command of a console block: `$ ` and continuation lines joined."""
    return shlex.split(text.replace("\\\n", " ").removeprefix("$ "), comments=True)


def rendered(extra: list[str]) -> list[dict[str, Any]]:
    (install,) = [b for b in blocks("console") if b.startswith("$ helm install")]
    args = command(install)
    assert args[:4] == ["helm", "install", "kimi-operator", "charts/kimi-operator"]
    result = helm("template", *args[2:3], str(ROOT / args[3]), *args[4:], *extra)
    return documents(result.stdout)


def test_the_install_command_points_the_chart_at_your_images() -> None:
    objects = rendered([])
    (deployment,) = of_kind(objects, "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"].startswith("registry.example.com/inference/kimi-operator:")
    assert "--serving-image=registry.example.com/inference/vllm-kimi:0.33.0" in container["args"]
    for kind in ("ServiceMonitor", "PrometheusRule"):
        assert of_kind(objects, kind) == []  # off by default, as the guide says


def test_the_monitoring_flags_render_what_the_guide_says() -> None:
    (flags,) = [b for b in blocks("console") if b.lstrip().startswith("--set metrics.")]
    objects = rendered(command(flags))
    assert len(of_kind(objects, "ServiceMonitor")) == 1
    assert len(of_kind(objects, "PrometheusRule")) == 1
    dashboards = [c for c in of_kind(objects, "ConfigMap") if "grafana_dashboard" in str(c)]
    assert len(dashboards) == 3


def test_the_weights_claim_is_a_valid_many_node_claim() -> None:
    (claim,) = [yaml.safe_load(b) for b in blocks("yaml") if "PersistentVolumeClaim" in b]
    kubernetes_validate.validate(claim, "1.34", strict=True)
    assert set(claim["spec"]["accessModes"]) <= {"ReadOnlyMany", "ReadWriteMany"}


def test_the_samples_it_names_are_valid() -> None:
    named = set(re.findall(r"crds/samples/[\w.-]+\.yaml", DOC.read_text()))
    assert named
    for path in named:
        report = check_document(yaml.safe_load(Path(ROOT / path).read_text()))
        assert report.problems == [], path
