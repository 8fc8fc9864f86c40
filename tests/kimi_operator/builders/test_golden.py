"""The rendered children of every case, compared with reviewed YAML.

After a deliberate change to the builders: `pytest tests/kimi_operator/builders --update-golden`,
then review the diff of tests/kimi_operator/builders/golden/ like code.
"""

from pathlib import Path

import pytest
import yaml

from kimi_operator.builders import build_children
from tests.kimi_operator.builders.cases import CASES, SAMPLES, deployment

GOLDEN = Path(__file__).parent / "golden"


@pytest.mark.parametrize("case", sorted(CASES))
def test_children_match_golden(case: str, request: pytest.FixtureRequest) -> None:
    doc, defaults = CASES[case]
    rendered = yaml.safe_dump_all(
        build_children(deployment(doc), defaults), sort_keys=False, width=100
    )
    path = GOLDEN / f"{case}.yaml"
    if request.config.getoption("--update-golden"):
        path.write_text(rendered)
    assert path.exists(), f"no golden file {path.name}: run pytest with --update-golden"
    assert rendered == path.read_text(), f"{case}: rerun with --update-golden and review the diff"


def test_every_golden_file_has_a_case() -> None:
    assert {p.stem for p in GOLDEN.glob("*.yaml")} == set(CASES)


def test_there_are_samples() -> None:
    assert len(SAMPLES) >= 3


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_scraped_series_is_labelled_with_its_deployment(case: str) -> None:
    """Rules and dashboards group by `deployment`: the PodMonitor puts it on every series."""
    doc, defaults = CASES[case]
    kd = deployment(doc)
    monitors = [c for c in build_children(kd, defaults) if c["kind"] == "PodMonitor"]
    for monitor in monitors:
        for endpoint in monitor["spec"]["podMetricsEndpoints"]:
            relabel = {r["targetLabel"]: r["sourceLabels"] for r in endpoint["relabelings"]}
            assert relabel["deployment"] == [
                "__meta_kubernetes_pod_label_app_kubernetes_io_instance"
            ]
    pod_labels = next(c for c in build_children(kd, defaults) if c["kind"] == "LeaderWorkerSet")[
        "spec"
    ]["leaderWorkerTemplate"]["workerTemplate"]["metadata"]["labels"]
    assert pod_labels["app.kubernetes.io/instance"] == kd.metadata.name
