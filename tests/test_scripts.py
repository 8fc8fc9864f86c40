"""The shell scripts CI runs: under `set -o pipefail`, no pipeline ends in a reader that stops
early (`head`, `grep -q`, `grep -m`). Such a reader exits while the writer may still be writing;
the writer dies of SIGPIPE (exit 141) and pipefail fails the whole pipeline, at random. A
clean-clone `.ci/run` failed so on `kubectl version --client | head -n 1` in
scripts/install-helm.sh."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted([*ROOT.glob("scripts/*.sh"), ROOT / ".ci" / "run"])
EARLY_READER = re.compile(r"\|\s*(head\b|grep\s+(-\w*[qm]\w*\b|--quiet|--max-count))")


def early_readers(text: str) -> list[str]:
    if "pipefail" not in text:
        return []
    code = (
        line.split(" #", 1)[0] for line in text.splitlines() if not line.lstrip().startswith("#")
    )
    return [line.strip() for line in code if EARLY_READER.search(line)]


def test_the_check_finds_the_pipelines_that_failed_ci() -> None:
    text = "set -euo pipefail\n" + '"$DEST/kubectl" version --client | head -n 1\n'
    assert early_readers(text) == ['"$DEST/kubectl" version --client | head -n 1']
    assert early_readers("set -euo pipefail\nhelm version | grep -q '^v4'\n")
    assert not early_readers("set -euo pipefail\n# a comment | head\nfind . -print -quit\n")
    assert not early_readers("set -eu\nkubectl version | head -n 1\n")  # no pipefail: harmless


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda path: str(path.relative_to(ROOT)))
def test_no_pipeline_ends_in_a_reader_that_stops_early(script: Path) -> None:
    assert early_readers(script.read_text()) == []
