"""The gate of the slow image tests: skipped outside `make test-images`, never silently in CI."""

import pytest

from .slow import require_image_tests

MISSING = "kimi-no-such-tool"


def test_skipped_outside_make_test_images(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KIMI_IMAGE_TESTS", raising=False)
    with pytest.raises(pytest.skip.Exception, match="make test-images"):
        require_image_tests()


def test_missing_tool_fails_in_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KIMI_IMAGE_TESTS", "1")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match=f"{MISSING} is not installed"):
        require_image_tests(MISSING)


def test_missing_tool_skips_elsewhere(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KIMI_IMAGE_TESTS", "1")
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match=r"install-image-tools\.sh"):
        require_image_tests(MISSING)


def test_present_tools_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KIMI_IMAGE_TESTS", "1")
    monkeypatch.setenv("CI", "true")
    require_image_tests("sh")
