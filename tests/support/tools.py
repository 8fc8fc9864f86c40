"""External binaries of the tests: Debian's `prometheus` and `promtool`, `helm` and `kubectl`.

A missing tool fails the test under CI (`CI=true`, set by .ci/run, which installs them) so the
proof can never be skipped there; on a developer machine it skips with the install hint.
"""

import os
import shutil

import pytest

from tests.support.repo import ROOT

HINTS = {
    "prometheus": "apt-get install prometheus (Debian)",
    "promtool": "apt-get install prometheus (Debian)",
    "helm": "scripts/install-helm.sh",
    "kubectl": "scripts/install-helm.sh (make tools)",
}


def require_tool(name: str) -> str:
    local = ROOT / ".tools" / "bin" / name
    found = str(local) if local.exists() else shutil.which(name)
    if found is not None:
        return found
    message = f"{name} is not installed: {HINTS[name]}"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)
