"""The two distributions, built as wheels (offline, with the hatchling of the dev venv):
`kimi-operator` carries the operator and its CLI and needs only what `kimi-operator run` imports;
`kimi-kernels` carries kimi_kernels and is the only one that declares the vLLM plugin entry
points. docs/architecture.md, "Distributions"."""

import ast
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from email.parser import Parser
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.support.repo import ROOT

# Left out of the operator's wheel: they need a clone (the chart, third_party/, helm) or dev tools.
# observability/rules.py stays: the autoscalers' queries (builders/autoscaling.py) name its rules.
LEFT_OUT = (
    "embedded/",
    "dev/",
    "observability/__main__.py",
    "observability/dashboards.py",
    "observability/generate.py",
    "bench/stub.py",
)
# The imports of left-out modules, guarded: `kimi-operator demo` says what to install.
GUARDED = {
    ("kimi_operator/cli.py", "kimi_operator.embedded.demo"),
    ("kimi_operator/cli.py", "kimi_operator.embedded.sandbox"),
}
# What may import the bench extra: bench/, and plan's plot (skipped with a line without it).
BENCH_EXTRA_USERS = ("kimi_operator/bench/", "kimi_operator/plan/report.py")
# What may import the plan extra: the GB300 data's one module (the built-ins fall back without it).
PLAN_EXTRA_USERS = ("kimi_operator/plan/gb300_data.py",)
PLUGIN_GROUPS = {"vllm.general_plugins", "vllm.stat_logger_plugins"}
# pydantic pins its core to the exact version; pydantic_core's types are part of pydantic's API.
PART_OF = {canonicalize_name("pydantic-core"): canonicalize_name("pydantic")}


def _wheel(source: Path, out: Path) -> zipfile.ZipFile:
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation"]
    result = subprocess.run(
        [*command, "--quiet", str(source), "-w", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    (wheel,) = out.glob("*.whl")
    return zipfile.ZipFile(wheel)


@pytest.fixture(scope="module")
def operator_wheel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[zipfile.ZipFile]:
    with _wheel(ROOT, tmp_path_factory.mktemp("operator")) as wheel:
        yield wheel


@pytest.fixture(scope="module")
def kernels_wheel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[zipfile.ZipFile]:
    with _wheel(ROOT / "kernels", tmp_path_factory.mktemp("kernels")) as wheel:
        yield wheel


def _dist_info(wheel: zipfile.ZipFile, name: str) -> str:
    (path,) = [n for n in wheel.namelist() if n.endswith(f".dist-info/{name}")]
    return wheel.read(path).decode()


def _entry_point_groups(wheel: zipfile.ZipFile) -> dict[str, set[str]]:
    """group -> its `name = target` lines."""
    groups: dict[str, set[str]] = {}
    group = ""
    for line in _dist_info(wheel, "entry_points.txt").splitlines():
        if line.startswith("["):
            group = line.strip("[]")
            groups[group] = set()
        elif line.strip():
            groups[group].add(line.replace(" ", ""))
    return groups


def _requirements(wheel: zipfile.ZipFile) -> list[Requirement]:
    metadata = Parser().parsestr(_dist_info(wheel, "METADATA"))
    return [Requirement(line) for line in metadata.get_all("Requires-Dist") or []]


def _needed(requirements: list[Requirement], extra: str = "") -> set[str]:
    """The distributions needed without extras (""), or with `extra` on top."""
    return {
        canonicalize_name(r.name)
        for r in requirements
        if r.marker is None or (extra and r.marker.evaluate({"extra": extra}))
    }


def _modules(wheel: zipfile.ZipFile) -> list[str]:
    return [n for n in wheel.namelist() if n.endswith(".py")]


def _imports(source: str) -> Iterator[str]:
    """Every module an absolute import names, inside functions too."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module


def test_operator_wheel_carries_the_operator_only(operator_wheel: zipfile.ZipFile) -> None:
    modules = _modules(operator_wheel)
    assert "kimi_operator/runner.py" in modules
    assert "kimi_operator/bench/job.py" in modules
    assert all(m.startswith("kimi_operator/") for m in modules), "only kimi_operator"
    stray = [m for m in modules if m.removeprefix("kimi_operator/").startswith(LEFT_OUT)]
    assert stray == []


def test_operator_wheel_declares_no_vllm_plugin(operator_wheel: zipfile.ZipFile) -> None:
    assert _entry_point_groups(operator_wheel) == {
        "console_scripts": {"kimi-operator=kimi_operator.cli:main"}
    }


def test_operator_wheel_needs_only_what_run_needs(operator_wheel: zipfile.ZipFile) -> None:
    requirements = _requirements(operator_wheel)
    runtime = _needed(requirements)
    assert runtime == {
        "pydantic",
        "pyyaml",
        "kubernetes",
        "urllib3",
        "prometheus-client",
        "kopf",
        "opentelemetry-sdk",  # the operator's own spans (kimi_operator/spans.py)
        "opentelemetry-exporter-otlp-proto-http",
    }
    assert _needed(requirements, "bench") - runtime == {"aiohttp", "matplotlib"}
    assert _needed(requirements, "plan") - runtime == {"aiconfigurator-core"}
    assert {"kmock", "cel-python"} <= _needed(requirements, "demo") - runtime


def test_operator_wheel_imports_only_its_requirements(operator_wheel: zipfile.ZipFile) -> None:
    """Every import in the wheel is the standard library, the wheel itself, or a distribution it
    requires (aiohttp and matplotlib, the bench extra, in BENCH_EXTRA_USERS only;
    aiconfigurator-core, the plan extra, in PLAN_EXTRA_USERS only), as this venv maps import
    names."""
    paths = _modules(operator_wheel)
    modules = {p.removesuffix(".py").removesuffix("/__init__").replace("/", ".") for p in paths}
    distributions = packages_distributions()
    requirements = _requirements(operator_wheel)
    problems = []
    for path in paths:
        extra = "bench" if path.startswith(BENCH_EXTRA_USERS) else ""
        extra = "plan" if path.startswith(PLAN_EXTRA_USERS) else extra
        allowed = _needed(requirements, extra)
        for name in _imports(operator_wheel.read(path).decode()):
            top = name.split(".")[0]
            if top in sys.stdlib_module_names or (path, name) in GUARDED:
                continue
            if top == "kimi_operator":
                if name not in modules and name.rsplit(".", 1)[0] not in modules:
                    problems.append(f"{path}: {name} is not in the wheel")
                continue
            found = {canonicalize_name(d) for d in distributions.get(top, [])}
            found |= {PART_OF[d] for d in found if d in PART_OF}
            if not found & allowed:
                problems.append(f"{path}: {name} comes from {sorted(found) or 'nothing installed'}")
    assert problems == [], "\n".join(problems)


def test_kernels_wheel_declares_the_vllm_plugins(kernels_wheel: zipfile.ZipFile) -> None:
    modules = _modules(kernels_wheel)
    assert all(m.startswith("kimi_kernels/") for m in modules), "only kimi_kernels"
    groups = _entry_point_groups(kernels_wheel)
    assert set(groups) == PLUGIN_GROUPS
    for group in PLUGIN_GROUPS:
        for point in groups[group]:
            target = point.split("=", 1)[1].split(":")[0]
            assert f"{target.replace('.', '/')}.py" in modules, f"{group}: {point}"


def test_both_wheels_carry_the_license(
    operator_wheel: zipfile.ZipFile, kernels_wheel: zipfile.ZipFile
) -> None:
    for wheel in (operator_wheel, kernels_wheel):
        assert "Apache License" in _dist_info(wheel, "licenses/LICENSE")
        assert "License-Expression: Apache-2.0" in _dist_info(wheel, "METADATA")
