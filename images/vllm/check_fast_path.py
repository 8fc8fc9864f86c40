"""Fail the serving image's build unless it has what vLLM's latency-specialized decode needs.

Run inside the image (`python3 check_fast_path.py`): vLLM 0.33.0 or newer with the Kimi K3
specialized decode module importable, the nvidia-cutlass-dsl version vLLM pins, the kimi-kernels
wheel with its requirements met and every entry point loadable, and the V2 model runner not
switched off. Prints one line per
problem and exits 1, or one summary line and exits 0.
"""

import importlib
import os
import sys
from collections.abc import Callable, Iterable
from importlib import metadata

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

MIN_VLLM = Version("0.33.0")
SPECIALIZED_DECODE = "vllm.models.kimi_k3.nvidia.specialized_decode"
CUTLASS_DSL = "nvidia-cutlass-dsl"
KERNELS = "kimi-kernels"
V2_RUNNER = "VLLM_USE_V2_MODEL_RUNNER"

VersionOf = Callable[[str], str]  # distribution -> installed version (PackageNotFoundError if none)


def pinned(requirements: Iterable[str], name: str) -> Requirement | None:
    """vLLM's unconditional requirement on `name` (extras such as `[cu13]` allowed)."""
    for line in requirements:
        try:
            requirement = Requirement(line)
        except InvalidRequirement:
            continue
        if canonicalize_name(requirement.name) == name and requirement.marker is None:
            return requirement
    return None


def check_vllm(version: VersionOf) -> list[str]:
    try:
        found = Version(version("vllm"))
    except metadata.PackageNotFoundError:
        return ["vllm is not installed"]
    if found < MIN_VLLM:
        return [f"vllm {found} is too old: the Kimi K3 specialized decode needs vllm >= {MIN_VLLM}"]
    return []


def check_cutlass(version: VersionOf, vllm_requires: Iterable[str]) -> list[str]:
    requirement = pinned(vllm_requires, CUTLASS_DSL)
    if requirement is None:
        return [f"vllm does not pin {CUTLASS_DSL}: not the vLLM this image is built for"]
    try:
        found = version(CUTLASS_DSL)
    except metadata.PackageNotFoundError:
        return [f"{CUTLASS_DSL} is not installed; vllm needs {requirement}"]
    if not requirement.specifier.contains(found, prereleases=True):
        return [f"{CUTLASS_DSL} {found} is installed; vllm needs {requirement}"]
    return []


def check_requirements(distribution: str, version: VersionOf) -> list[str]:
    """Every unconditional requirement of `distribution` installed in a version it accepts (it is
    installed with --no-deps: the base image's vLLM environment must already satisfy it)."""
    problems = []
    for line in metadata.requires(distribution) or []:
        requirement = Requirement(line)
        if requirement.marker is not None:
            continue
        try:
            found = version(requirement.name)
        except metadata.PackageNotFoundError:
            problems.append(f"{distribution} needs {requirement}, which is not installed")
            continue
        if not requirement.specifier.contains(found, prereleases=True):
            problems.append(f"{distribution} needs {requirement}; {found} is installed")
    return problems


def check_import(module: str) -> list[str]:
    try:
        importlib.import_module(module)
    except Exception as error:
        return [f"{module} does not import: {type(error).__name__}: {error}"]
    return []


def check_entry_points(distribution: str) -> list[str]:
    try:
        points = metadata.distribution(distribution).entry_points
    except metadata.PackageNotFoundError:
        return [f"{distribution} is not installed"]
    problems = []
    for point in points:
        try:
            point.load()
        except Exception as error:
            problems.append(
                f"entry point {point.group}:{point.name} = {point.value} does not load: "
                f"{type(error).__name__}: {error}"
            )
    return problems


def check_environment(environ: dict[str, str]) -> list[str]:
    value = environ.get(V2_RUNNER)
    if value != "1":
        return [f"{V2_RUNNER} must be 1 (the specialized decode refuses the V1 runner): {value!r}"]
    return []


def problems(environ: dict[str, str]) -> list[str]:
    found = check_vllm(metadata.version)
    if found:
        return found  # nothing else means anything without the right vLLM
    return [
        *check_import(SPECIALIZED_DECODE),
        *check_cutlass(metadata.version, metadata.requires("vllm") or []),
        *check_requirements(KERNELS, metadata.version),
        *check_entry_points(KERNELS),
        *check_environment(environ),
    ]


def main() -> int:
    found = problems(dict(os.environ))
    for problem in found:
        print(f"fast path check: {problem}", file=sys.stderr)
    if found:
        return 1
    versions = ", ".join(f"{d} {metadata.version(d)}" for d in ("vllm", CUTLASS_DSL, KERNELS))
    print(f"fast path check: ok ({versions})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
