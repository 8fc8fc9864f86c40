"""Gates of the slow image tests (minutes each): `make test-images` runs them, and .ci/run runs
that target. Without KIMI_IMAGE_TESTS=1 they are skipped with a reason; with it, missing tools are
a failure in CI (CI=true) and a skip elsewhere."""

import os
import shutil
import tempfile

import pytest

# A rootfs, buildah's storage and a venv with torch: below this the tests fail half-way with
# ENOSPC in a tool's output (a CI run did), so say it first.
FREE_GIB_NEEDED = 12


def require_image_tests(*tools: str, root: bool = False) -> None:
    if os.environ.get("KIMI_IMAGE_TESTS") != "1":
        pytest.skip("slow (minutes): run by `make test-images` (and .ci/run)")
    problems = [f"{tool} is not installed" for tool in tools if shutil.which(tool) is None]
    free_gib = shutil.disk_usage(tempfile.gettempdir()).free / 2**30
    if free_gib < FREE_GIB_NEEDED:
        problems.append(
            f"{free_gib:.1f} GiB free under {tempfile.gettempdir()}, the image tests need "
            f"{FREE_GIB_NEEDED} GiB"
        )
    if root and os.geteuid() != 0:
        problems.append("needs root (debootstrap, buildah with chroot isolation)")
    if problems:
        message = "; ".join(problems) + ": see scripts/install-image-tools.sh"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
