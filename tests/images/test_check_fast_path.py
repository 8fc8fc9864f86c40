"""images/vllm/check_fast_path.py, the check that fails the serving image's build: each finding."""

import importlib.util
from collections.abc import Callable
from importlib import metadata
from types import ModuleType

import pytest

from .dockerfiles import CHECK


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_fast_path", CHECK)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


check = _load()
VLLM_REQUIRES = ["torch==2.14.0", "nvidia-cutlass-dsl[cu13]==4.8.0", 'zentorch; extra == "zen"']


def versions(**installed: str) -> Callable[[str], str]:
    def version(distribution: str) -> str:
        if distribution not in installed:
            raise metadata.PackageNotFoundError(distribution)
        return installed[distribution]

    return version


def test_pinned_reads_vllms_requirement() -> None:
    requirement = check.pinned(VLLM_REQUIRES, "nvidia-cutlass-dsl")
    assert str(requirement.specifier) == "==4.8.0"
    assert check.pinned(['zentorch==1; extra == "zen"', "not a requirement ("], "zentorch") is None


@pytest.mark.parametrize(
    ("installed", "problem"),
    [
        ({}, "vllm is not installed"),
        (
            {"vllm": "0.32.0"},
            "vllm 0.32.0 is too old: the Kimi K3 specialized decode needs vllm >= 0.33.0",
        ),
    ],
)
def test_vllm(installed: dict[str, str], problem: str) -> None:
    assert check.check_vllm(versions(**installed)) == [problem]


def test_vllm_newer_is_fine() -> None:
    assert check.check_vllm(versions(vllm="0.33.0")) == []
    assert check.check_vllm(versions(vllm="0.34.1")) == []


def test_cutlass() -> None:
    pin = "nvidia-cutlass-dsl[cu13]==4.8.0"
    assert check.check_cutlass(versions(**{"nvidia-cutlass-dsl": "4.8.0"}), VLLM_REQUIRES) == []
    assert check.check_cutlass(versions(), VLLM_REQUIRES) == [
        f"nvidia-cutlass-dsl is not installed; vllm needs {pin}"
    ]
    assert check.check_cutlass(versions(**{"nvidia-cutlass-dsl": "4.7.1"}), VLLM_REQUIRES) == [
        f"nvidia-cutlass-dsl 4.7.1 is installed; vllm needs {pin}"
    ]
    assert check.check_cutlass(versions(), ["torch==2.14.0"]) == [
        "vllm does not pin nvidia-cutlass-dsl: not the vLLM this image is built for"
    ]


def test_import() -> None:
    assert check.check_import("json") == []
    (problem,) = check.check_import("vllm_kimi_no_such_module")
    assert problem.startswith("vllm_kimi_no_such_module does not import: ModuleNotFoundError")


def test_entry_points_of_a_missing_distribution() -> None:
    assert check.check_entry_points("kimi-no-such-distribution") == [
        "kimi-no-such-distribution is not installed"
    ]


def test_entry_points_that_do_not_load(monkeypatch: pytest.MonkeyPatch) -> None:
    broken = metadata.EntryPoint("broken", "kimi_no_such_module:thing", "vllm.general_plugins")

    class Distribution:
        entry_points = metadata.EntryPoints([broken])

    monkeypatch.setattr(check.metadata, "distribution", lambda _: Distribution())
    (problem,) = check.check_entry_points("kimi-kernels")
    assert problem.startswith(
        "entry point vllm.general_plugins:broken = kimi_no_such_module:thing does not load: "
        "ModuleNotFoundError"
    )


@pytest.mark.parametrize("value", [None, "0", "false"])
def test_v1_runner_is_refused(value: str | None) -> None:
    environ = {} if value is None else {"VLLM_USE_V2_MODEL_RUNNER": value}
    assert check.check_environment(environ) == [
        f"VLLM_USE_V2_MODEL_RUNNER must be 1 (the specialized decode refuses the V1 runner): "
        f"{value!r}"
    ]
    assert check.check_environment({"VLLM_USE_V2_MODEL_RUNNER": "1"}) == []


def test_main_reports_each_problem_and_fails(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(check.metadata, "version", versions(vllm="0.30.0"))
    assert check.main() == 1
    assert capsys.readouterr().err == (
        "fast path check: vllm 0.30.0 is too old: the Kimi K3 specialized decode needs "
        "vllm >= 0.33.0\n"
    )


def test_requirements_of_the_wheel(monkeypatch: pytest.MonkeyPatch) -> None:
    requires = ["vllm>=0.33.0", "cuda-bindings>=13", 'pytest; extra == "test"']
    monkeypatch.setattr(check.metadata, "requires", lambda _: requires)
    installed = versions(vllm="0.33.0", **{"cuda-bindings": "13.1.0"})
    assert check.check_requirements("kimi-kernels", installed) == []
    assert check.check_requirements("kimi-kernels", versions(vllm="0.32.0")) == [
        "kimi-kernels needs vllm>=0.33.0; 0.32.0 is installed",
        "kimi-kernels needs cuda-bindings>=13, which is not installed",
    ]
