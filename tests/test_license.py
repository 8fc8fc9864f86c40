"""The project's license: Apache-2.0, its text in LICENSE, named by both distributions and the
chart."""

import tomllib

import yaml

from tests.support.repo import ROOT


def test_license_text_is_apache_2() -> None:
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text
    assert "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text


def test_both_distributions_ship_the_license() -> None:
    for folder in (ROOT, ROOT / "kernels"):
        project = tomllib.loads((folder / "pyproject.toml").read_text())["project"]
        assert project["license"] == "Apache-2.0"
        assert project["license-files"] == ["LICENSE"]
        assert (folder / "LICENSE").read_text() == (ROOT / "LICENSE").read_text()


def test_chart_names_the_license() -> None:
    chart = yaml.safe_load((ROOT / "charts" / "kimi-operator" / "Chart.yaml").read_text())
    assert chart["annotations"]["artifacthub.io/license"] == "Apache-2.0"
