"""The generated rules and dashboards are fresh; promtool checks and unit-tests the rules; the
chart renders them as a PrometheusRule the Prometheus Operator's CRD accepts."""

import json
import shutil
import subprocess
from pathlib import Path

import jsonschema
import pytest
import yaml

from kimi_operator.embedded.upstream import upstream_crd
from kimi_operator.observability import generate
from kimi_operator.observability.rules import DEFAULT_DECODE_FLOOR, FLOOR_MARKER
from tests.support.catalog import CHART, RULES
from tests.support.tools import require_tool

HERE = Path(__file__).parent


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)


def test_generated_files_are_fresh() -> None:
    assert generate.main(["--check"]) == 0, "run `python -m kimi_operator.observability`"


def test_staleness_check_catches_a_drift(tmp_path: Path) -> None:
    assert generate.main([], chart=tmp_path) == 0
    assert generate.main(["--check"], chart=tmp_path) == 0
    dashboard = tmp_path / "dashboards" / "kimi-k3-decode.json"
    dashboard.write_text(dashboard.read_text().replace("Kimi K3 decode", "Kimi K3 edited"))
    assert generate.main(["--check"], chart=tmp_path) == 1
    (tmp_path / generate.RULES_PATH).unlink()
    assert generate.main(["--check"], chart=tmp_path) == 1


def test_promtool_check_rules() -> None:
    result = run(require_tool("promtool"), "check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 29 rules found" in result.stdout


def test_promtool_check_rules_rejects_a_broken_rule(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text(RULES.read_text().replace("rate(vllm:generation_tokens_total[5m])", "rate("))
    assert run(require_tool("promtool"), "check", "rules", str(broken)).returncode != 0


def test_promtool_unit_tests() -> None:
    result = run(require_tool("promtool"), "test", "rules", str(HERE / "kimi-k3.rules.test.yaml"))
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_unit_tests_catch_a_wrong_threshold(tmp_path: Path) -> None:
    """The unit tests depend on the thresholds: a floor of 10 tok/s must fail them."""
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / RULES.name).write_text(
        RULES.read_text().replace(f"{FLOOR_MARKER}{DEFAULT_DECODE_FLOOR}", f"{FLOOR_MARKER}10")
    )
    tests = (HERE / "kimi-k3.rules.test.yaml").read_text()
    tests = tests.replace("../../charts/kimi-operator/rules/", "rules/")
    (tmp_path / "t.yaml").write_text(tests)
    result = run(require_tool("promtool"), "test", "rules", str(tmp_path / "t.yaml"))
    assert result.returncode != 0
    assert "KimiDecodeRateBelowFloor" in result.stdout + result.stderr


def _render(chart: Path, *values: str) -> dict[str, object]:
    args = ["template", "t", str(chart), "--show-only", "templates/prometheusrule.yaml"]
    args += ["--set", "prometheusRule.enabled=true", *(a for v in values for a in ("--set", v))]
    result = run(require_tool("helm"), *args)
    assert result.returncode == 0, result.stderr
    rendered: dict[str, object] = yaml.safe_load(result.stdout)
    return rendered


def _crd_schema() -> dict[str, object]:
    crd = upstream_crd("PrometheusRule")
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")
    schema: dict[str, object] = version["schema"]["openAPIV3Schema"]
    return schema


def test_chart_prometheusrule_is_valid_and_carries_every_rule() -> None:
    rule = _render(CHART)
    # No check_schema: the CRD's Go regexes (`^(?i)...`) are not Python's.
    jsonschema.Draft7Validator(_crd_schema()).validate(rule)
    assert rule["kind"] == "PrometheusRule"
    assert rule["spec"] == yaml.safe_load(RULES.read_text())


def test_crd_schema_rejects_a_malformed_rule() -> None:
    rule = _render(CHART)
    rule["spec"]["groups"][0]["rules"][0]["expr"] = ["not", "a", "string"]  # type: ignore[index]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft7Validator(_crd_schema()).validate(rule)


def test_chart_decode_floor_comes_from_the_values(tmp_path: Path) -> None:
    """`prometheusRule.decodeRateFloor` (the chart's values schema must admit it)."""
    chart = tmp_path / "kimi-operator"
    shutil.copytree(CHART, chart)
    schema = yaml.safe_load((chart / "values.schema.json").read_text())
    schema["properties"]["prometheusRule"]["properties"]["decodeRateFloor"] = {"type": "number"}
    (chart / "values.schema.json").write_text(json.dumps(schema))
    spec = _render(chart, "prometheusRule.decodeRateFloor=50")["spec"]
    alerts = {r["alert"]: r for g in spec["groups"] for r in g["rules"] if "alert" in r}  # type: ignore[index]
    floor = alerts["KimiDecodeRateBelowFloor"]
    assert floor["expr"] == f"{FLOOR_MARKER}50"
    assert "the floor of 50 tok/s" in floor["annotations"]["description"]


@pytest.mark.parametrize(
    "anchor", [f"{FLOOR_MARKER}{DEFAULT_DECODE_FLOOR}", "the floor of 20 tok/s"]
)
def test_the_template_anchors_exist_once(anchor: str) -> None:
    """The template replaces these exact texts; a rules change must keep them."""
    assert RULES.read_text().count(anchor) == 1
    assert anchor in (CHART / "templates" / "prometheusrule.yaml").read_text()
