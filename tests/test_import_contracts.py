"""The layers hold: `lint-imports` checks the contracts in .importlinter (docs/architecture.md)."""

import subprocess
import sys
from pathlib import Path

from tests.support.repo import ROOT


def test_import_contracts_are_kept() -> None:
    lint_imports = Path(sys.executable).parent / "lint-imports"
    result = subprocess.run(
        [str(lint_imports), "--no-cache"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout
