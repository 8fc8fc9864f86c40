"""The repository stands on its own: no tracked file reads or cites anything outside it, and the
vendored upstream files in third_party/ are the ones its README and refresh script name."""

import subprocess
from pathlib import Path
from types import ModuleType

import pytest

from kimi_operator.embedded.upstream import CRD_FILES, EPP_RELEASE, THIRD_PARTY, VLLM_METRICS
from tests.support.repo import ROOT, load_script

# Split so that this file does not match itself.
OUTSIDE = ("../" + "shared", "DESIGN" + " §", '"shared" / ' + '"schemas"')


def tracked_files() -> list[Path]:
    names = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.split(b"\0")
    return [ROOT / name.decode() for name in names if name]


def refresh_script() -> ModuleType:
    return load_script(THIRD_PARTY / "refresh.py")


def test_no_tracked_file_refers_outside_the_repository() -> None:
    found = []
    for path in tracked_files():
        if not path.is_file():  # deleted in the work tree, not yet committed
            continue
        lines = path.read_bytes().decode(errors="replace").splitlines()
        found += [
            f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
            for number, line in enumerate(lines, 1)
            if any(needle in line for needle in OUTSIDE)
        ]
    assert not found, "references to files outside the repository:\n" + "\n".join(found)


@pytest.mark.parametrize("name", [*CRD_FILES.values(), VLLM_METRICS, EPP_RELEASE])
def test_each_vendored_file_is_recorded_in_the_readme(name: str) -> None:
    blob = refresh_script().git_blob_hash((THIRD_PARTY / name).read_bytes())
    row = [line for line in (THIRD_PARTY / "README.md").read_text().splitlines() if name in line]
    assert row, f"third_party/README.md has no row for {name}"
    assert f"`{blob[:8]}`" in row[0], f"{name}: README.md records another version than blob {blob}"


def test_the_refresh_script_pins_every_vendored_crd() -> None:
    assert set(refresh_script().PINS) == set(CRD_FILES.values())
    vendored = {p.name for p in THIRD_PARTY.iterdir()} - {"README.md", "refresh.py", "__pycache__"}
    assert vendored == {*CRD_FILES.values(), VLLM_METRICS, EPP_RELEASE}
