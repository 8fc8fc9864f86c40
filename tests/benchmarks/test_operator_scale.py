"""benchmarks/operator_scale.py without helm: one line saying how to install it, no traceback."""

import sys
from pathlib import Path

import pytest

from kimi_operator.embedded import clients
from tests.support.repo import load_script


def test_without_helm_it_says_make_tools(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    script = load_script(Path("benchmarks/operator_scale.py"))
    monkeypatch.setattr(clients, "ROOT", tmp_path)  # no .tools/bin/helm there
    monkeypatch.setenv("PATH", str(tmp_path))  # nor on the PATH
    monkeypatch.setattr(sys, "argv", ["operator_scale.py"])
    with pytest.raises(SystemExit) as exited:
        script.main()
    assert exited.value.code == (
        "operator_scale: helm is not installed: run `make tools` (scripts/install-helm.sh)"
    )
    assert capsys.readouterr() == ("", "")  # nothing started, nothing else said
