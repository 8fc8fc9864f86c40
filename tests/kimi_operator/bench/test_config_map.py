"""`export-calibration --config-map` against the embedded API server, as the ServiceAccount of a
scheduled calibration with the Role the operator renders for it (builders/calibration.py): the
ConfigMap created, then its key updated (its other keys kept); bad input, a document over a
ConfigMap's limit and a ConfigMap the Role does not name refused, each with one line."""

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kimi_operator.api.spec import KimiDeployment
from kimi_operator.builders import OperatorDefaults, build_children
from kimi_operator.embedded.harness import EmbeddedApiServer
from kimi_operator.k8s.client import Client, load_configuration
from kimi_operator.k8s.resources import CONFIG_MAP
from kimi_operator.plan.stored import load
from tests.kimi_operator.bench.test_deployment import NAMESPACE, kubeconfig
from tests.kimi_operator.plan.test_calibration import run_of, sweep
from tests.support.bench import Cli
from tests.support.corpus import SLO
from tests.support.specs import edited

MAP, KEY = "k3-cal", "tp16.json"
SCHEDULED = {"configMapName": MAP, "key": KEY, "schedule": "@weekly"}


def calibration_access() -> list[dict[str, Any]]:
    """The Role and RoleBinding the operator renders for k3's scheduled calibration."""
    slo = dict(SLO) | {"calibration": SCHEDULED}
    kd = KimiDeployment.model_validate(edited({"spec.autoscaling": {"maxReplicas": 4, "slo": slo}}))
    children = build_children(kd, OperatorDefaults())
    return [
        c
        for c in children
        if c["kind"] in ("Role", "RoleBinding") and c["metadata"]["name"] == "k3-calibrate-g"
    ]


@pytest.fixture
def api(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Callable[[], dict[str, str] | None], EmbeddedApiServer]]:
    with EmbeddedApiServer() as server:
        server.store(calibration_access())
        token = server.issue_token(NAMESPACE, "k3-calibrate-g")
        config = kubeconfig(tmp_path / "kubeconfig", server.url, token)
        monkeypatch.setenv("KUBECONFIG", str(config))
        admin = Client(load_configuration(server.url))

        def data() -> dict[str, str] | None:
            found = admin.get(CONFIG_MAP, NAMESPACE, MAP)
            return None if found is None else dict(found.get("data") or {})

        yield data, server
        admin.close()


def runs(tmp_path: Path, *names: str) -> list[str]:
    out = []
    for name in names:
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.json").write_text(run_of(sweep()).model_dump_json())
        out.append(str(tmp_path / name))
    return out


def test_created_then_its_key_updated(
    cli: Cli, api: tuple[Callable[[], dict[str, str] | None], Any], tmp_path: Path
) -> None:
    data, _ = api
    first, second = runs(tmp_path, "k3-calibrate-g-1", "k3-calibrate-g-2")
    target = f"{NAMESPACE}/{MAP}:{KEY}"
    assert data() is None
    done = cli("export-calibration", "--calibration", first, "--config-map", target)
    assert done.code == 0, done.err
    assert f"ConfigMap {NAMESPACE}/{MAP} created, key {KEY}, " in done.out
    stored = data()
    assert stored is not None
    assert set(stored) == {KEY}
    assert load(stored[KEY]).name == "k3-calibrate-g-1"
    again = cli("export-calibration", "--calibration", second, "--config-map", target)
    assert again.code == 0, again.err
    assert f"ConfigMap {NAMESPACE}/{MAP} updated, key {KEY}, " in again.out
    stored = data()
    assert stored is not None
    assert load(stored[KEY]).name == "k3-calibrate-g-2"
    # Another key of the ConfigMap is kept (a merge patch of the one key).
    other = cli("export-calibration", "--calibration", first, "--config-map", f"{target}.old")
    assert other.code == 0, other.err
    stored = data()
    assert stored is not None
    assert (load(stored[KEY]).name, load(stored[f"{KEY}.old"]).name) == (
        "k3-calibrate-g-2",
        "k3-calibrate-g-1",
    )


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (
            ["--config-map", "k3-cal"],
            "error: --config-map 'k3-cal': expected NAMESPACE/NAME[:KEY] (a namespace, a "
            "ConfigMap name and a key of letters, digits, '-', '_' or '.')\n",
        ),
        (
            ["--config-map", f"{NAMESPACE}/{MAP}:runs/cal.json"],
            f"error: --config-map '{NAMESPACE}/{MAP}:runs/cal.json': expected "
            "NAMESPACE/NAME[:KEY] (a namespace, a ConfigMap name and a key of letters, digits, "
            "'-', '_' or '.')\n",
        ),
        (["--config-map", f"{NAMESPACE}/{MAP}", "--force"], "error: --force goes with --output\n"),
        (
            ["--config-map", f"{NAMESPACE}/other"],
            f"error: not allowed to write ConfigMap {NAMESPACE}/other: HTTP 403\n",
        ),
    ],
)
def test_bad_input_and_a_configmap_not_its_own_are_refused(
    cli: Cli,
    api: tuple[Callable[[], dict[str, str] | None], Any],
    tmp_path: Path,
    argv: list[str],
    error: str,
) -> None:
    data, _ = api
    (run,) = runs(tmp_path, "cal")
    done = cli("export-calibration", "--calibration", run, *argv)
    assert (done.code, done.err) == (2, error)
    assert data() is None


def test_a_document_over_a_configmaps_limit_is_refused(
    cli: Cli,
    api: tuple[Callable[[], dict[str, str] | None], Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    data, _ = api
    monkeypatch.setattr("kimi_operator.bench.config_map.CONFIGMAP_LIMIT", 100)
    (run,) = runs(tmp_path, "cal")
    done = cli("export-calibration", "--calibration", run, "--config-map", f"{NAMESPACE}/{MAP}")
    assert done.code == 2
    assert done.err.startswith(f"error: --config-map {NAMESPACE}/{MAP}: the document is ")
    assert done.err.endswith(" bytes, over what a ConfigMap holds (100 bytes)\n")
    assert data() is None


def test_output_or_config_map_not_both(cli: Cli, tmp_path: Path) -> None:
    (run,) = runs(tmp_path, "cal")
    with pytest.raises(SystemExit):
        cli("export-calibration", "--calibration", run)
    with pytest.raises(SystemExit):
        cli("export-calibration", "--calibration", run, "--output", "x", "--config-map", "a/b")
