"""images/vllm/check_fast_path.py, the check that fails the serving image's build: each finding."""

from collections.abc import Callable
from importlib import metadata

import pytest
from packaging.requirements import Requirement

from tests.support.repo import load_script

from .dockerfiles import CHECK

check = load_script(CHECK)
TOKENSPEED = 'tokenspeed-mla==2.0.3; platform_system == "Linux"'  # vLLM 0.33.0's, as it wrote it
LINUX = {"platform_system": "Linux"}


def versions(**installed: str) -> Callable[[str], str]:
    def version(distribution: str) -> str:
        if distribution not in installed:
            raise metadata.PackageNotFoundError(distribution)
        return installed[distribution]

    return version


def this_venv(**override: str | None) -> Callable[[str], str]:
    """The versions installed here, some replaced (None: not installed)."""

    def version(distribution: str) -> str:
        key = distribution.replace("_", "-").lower()
        if key in override:
            found = override[key]
            if found is None:
                raise metadata.PackageNotFoundError(distribution)
            return found
        return metadata.version(distribution)

    return version


@pytest.mark.parametrize(
    ("line", "environment", "applies"),
    [
        ("torch==2.14.0", None, True),
        (TOKENSPEED, LINUX, True),
        (TOKENSPEED, {"platform_system": "Darwin"}, False),
        ('zentorch; extra == "zen"', LINUX, False),
        ('six>=1.16.0; python_version > "3.11"', {"python_version": "3.12"}, True),
        ('six>=1.16.0; python_version > "3.11"', {"python_version": "3.11"}, False),
    ],
)
def test_markers_are_evaluated(
    line: str, environment: dict[str, str] | None, applies: bool
) -> None:
    assert check.applies(Requirement(line), environment) is applies


def test_vllms_marked_requirement_is_checked() -> None:
    """On vLLM 0.33.0's own metadata: tokenspeed-mla, which has a marker, is required on Linux
    (the old check skipped every requirement with a marker), and nowhere else."""
    lines = metadata.requires("vllm") or []
    assert TOKENSPEED in lines

    def problems(tokenspeed: str | None, system: str = "Linux") -> set[str]:
        version = this_venv(**{"tokenspeed-mla": tokenspeed})
        env = {"platform_system": system}
        return set(check.check_requirements("vllm", version, environment=env))

    present = problems("2.0.3")
    assert problems(None) - present == {f"vllm needs {TOKENSPEED}, which is not installed"}
    assert problems("2.0.4") - present == {f"vllm needs {TOKENSPEED}; 2.0.4 is installed"}
    assert problems(None, "Darwin") == problems("2.0.3", "Darwin")
    assert not [p for p in present if "tokenspeed" in p or "extra ==" in p]


def test_requirements_of_a_distribution() -> None:
    requires = [
        "vllm>=0.33.0",
        'cuda-bindings>=13; platform_system == "Linux"',
        'pywin32; sys_platform == "win32"',
        'pytest; extra == "test"',
    ]
    installed = versions(vllm="0.33.0", **{"cuda-bindings": "13.1.0"})
    assert check.check_requirements("kimi-kernels", installed, requires, LINUX) == []
    assert check.check_requirements("kimi-kernels", versions(vllm="0.32.0"), requires, LINUX) == [
        "kimi-kernels needs vllm>=0.33.0; 0.32.0 is installed",
        'kimi-kernels needs cuda-bindings>=13; platform_system == "Linux", which is not installed',
    ]
    (unreadable,) = check.check_requirements("kimi-kernels", installed, ["not a requirement ("])
    assert unreadable.startswith("kimi-kernels declares a requirement pip cannot read: Expected ")
    assert "\n" not in unreadable


def test_a_backends_own_requirements() -> None:
    """tokenspeed_mla's __init__ swallows its ImportError (a missing tokenspeed-triton leaves
    `get_num_sm` a stub that raises at the first decode): its distribution's requirements are
    checked. These are tokenspeed-mla 2.0.3's."""
    requires = [
        "apache-tvm-ffi<0.2,>=0.1.11",
        "nvidia-cutlass-dsl>=4.8.0",
        "tokenspeed-triton>=3.9.10.post20261008",
        "torch",
    ]
    installed = versions(
        **{"apache-tvm-ffi": "0.1.15.post2", "nvidia-cutlass-dsl": "4.8.0", "torch": "2.14.0"}
    )
    assert check.check_requirements("tokenspeed-mla", installed, requires) == [
        "tokenspeed-mla needs tokenspeed-triton>=3.9.10.post20261008, which is not installed"
    ]
    assert check.backend_distributions(["flashinfer", "tvm_ffi", "kimi_no_such_module"]) == [
        "apache-tvm-ffi",
        "flashinfer-python",
    ]


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


def test_tracing_needs_vllms_opentelemetry_backend() -> None:
    """vllm.tracing's own verdict: available, or the last line of the import that failed."""
    error = "Traceback (most recent call last):\n  ...\nImportError: no grpc\n"
    assert check.check_tracing(lambda: False, error) == [
        "vLLM cannot export traces (spec.observability.tracing): ImportError: no grpc"
    ]
    assert check.check_tracing(lambda: True, None) == []


def test_main_reports_each_problem_and_fails(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(check.metadata, "version", versions(vllm="0.30.0"))
    assert check.main() == 1
    assert capsys.readouterr().err == (
        "fast path check: vllm 0.30.0 is too old: the Kimi K3 specialized decode needs "
        "vllm >= 0.33.0\n"
    )


def test_the_whole_check_in_this_venv() -> None:
    """This venv has vLLM 0.33.0 without most of its requirements, without tokenspeed-mla, with
    flashinfer-python installed without its own, and the kimi-kernels distribution installed
    (editable, by `make setup`) with its requirements met: the check names each missing piece and
    each fast path import that fails with vLLM's source line, and finds nothing wrong with
    kimi-kernels or its entry points."""
    found = check.problems({"VLLM_USE_V2_MODEL_RUNNER": "1"})
    source = "vllm/models/kimi_k3/nvidia/specialized_decode/cutedsl/mla/dcp.py"
    assert f"vllm needs {TOKENSPEED}, which is not installed" in found
    assert (
        f"from tokenspeed_mla import mla_decode ({source}:303) fails: "
        "ModuleNotFoundError: No module named 'tokenspeed_mla'"
    ) in found
    assert any(p.startswith("flashinfer-python needs ") for p in found)
    assert not [p for p in found if "kimi-kernels" in p or "entry point" in p]
    assert not any("VLLM_USE_V2_MODEL_RUNNER" in p for p in found)
    # vLLM's OpenTelemetry backend: this venv has the SDK and the OTLP/HTTP exporter (the
    # operator's own spans), not the gRPC exporter vllm/tracing/otel.py imports.
    assert (
        "vLLM cannot export traces (spec.observability.tracing): ModuleNotFoundError: No module "
        "named 'opentelemetry.exporter.otlp.proto.grpc'"
    ) in found
