"""Fail the serving image's build unless it has what vLLM's latency-specialized decode needs.

Run inside the image, after the kimi-kernels wheel is installed (`python3 check_fast_path.py`):
- vLLM 0.33.0 or newer, with every requirement that applies to this platform installed in a
  version it accepts. Environment markers are evaluated, not skipped: vLLM 0.33.0 requires
  `tokenspeed-mla==2.0.3; platform_system == "Linux"`, the MLA attention core of its fast path.
- Every module of the Kimi K3 fast path and everything it imports inside its functions (its
  attention backends tokenspeed_mla, flashinfer, tvm_ffi; kimi_kernels.preflight.imports reads
  the list from vLLM's source), and the requirements of those backends' distributions:
  tokenspeed_mla's `__init__` swallows its own ImportError, so importing it proves little.
- The kimi-kernels wheel with its requirements met and every entry point loadable, and the V2
  model runner not switched off.
- vLLM's OpenTelemetry backend (vllm/tracing/otel.py: the SDK and both OTLP exporters), without
  which a deployment with spec.observability.tracing exports nothing and says nothing: vLLM
  0.33.0's own check (`is_tracing_available`) is always true, and its tracer quietly stays unset.
Prints one line per problem and exits 1, or one summary line and exits 0.
"""

import os
import sys
from collections.abc import Callable, Iterable
from importlib import metadata

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import Version
from vllm.tracing import otel

from kimi_kernels.preflight import imports

MIN_VLLM = Version("0.33.0")
KERNELS = "kimi-kernels"
V2_RUNNER = "VLLM_USE_V2_MODEL_RUNNER"

VersionOf = Callable[[str], str]  # distribution -> installed version (PackageNotFoundError if none)


def applies(requirement: Requirement, environment: dict[str, str] | None = None) -> bool:
    """Whether `requirement` applies here: its marker, if any, true for this interpreter and
    platform (`environment` overrides some of their values). No extra is installed, so a
    requirement that only an extra brings never applies."""
    if requirement.marker is None:
        return True
    return requirement.marker.evaluate({**(environment or {}), "extra": ""})


def check_vllm(version: VersionOf) -> list[str]:
    try:
        found = Version(version("vllm"))
    except metadata.PackageNotFoundError:
        return ["vllm is not installed"]
    if found < MIN_VLLM:
        return [f"vllm {found} is too old: the Kimi K3 specialized decode needs vllm >= {MIN_VLLM}"]
    return []


def check_requirements(
    distribution: str,
    version: VersionOf,
    requires: Iterable[str] | None = None,
    environment: dict[str, str] | None = None,
) -> list[str]:
    """Every requirement of `distribution` (default: its installed metadata) that applies here,
    installed in a version it accepts."""
    if requires is None:
        try:
            requires = metadata.requires(distribution) or []
        except metadata.PackageNotFoundError:
            return [f"{distribution} is not installed"]
    problems = []
    for line in requires:
        try:
            requirement = Requirement(line)
        except InvalidRequirement as error:
            reason = str(error).splitlines()[0]
            problems.append(f"{distribution} declares a requirement pip cannot read: {reason}")
            continue
        if not applies(requirement, environment):
            continue
        try:
            found = version(requirement.name)
        except metadata.PackageNotFoundError:
            problems.append(f"{distribution} needs {requirement}, which is not installed")
            continue
        if not requirement.specifier.contains(found, prereleases=True):
            problems.append(f"{distribution} needs {requirement}; {found} is installed")
    return problems


def backend_distributions(modules: Iterable[str]) -> list[str]:
    """The installed distributions that provide these top-level modules."""
    provided = metadata.packages_distributions()
    return sorted({name for module in modules for name in provided.get(module, [])})


def check_fast_path() -> list[str]:
    """The fast path's modules and lazy imports, and its backends' requirements."""
    found, problems = imports.check()
    for distribution in backend_distributions(imports.backends(found)):
        problems.extend(check_requirements(distribution, metadata.version))
    return problems


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


def check_tracing(available: Callable[[], bool], error: str | None) -> list[str]:
    """`available`, `error`: vllm/tracing/otel.py's is_otel_available and the traceback of its
    failed import."""
    if available():
        return []
    last = (error or "").strip().splitlines()[-1:] or ["no reason given"]
    return [f"vLLM cannot export traces (spec.observability.tracing): {last[0]}"]


def check_environment(environ: dict[str, str]) -> list[str]:
    value = environ.get(V2_RUNNER)
    if value != "1":
        return [f"{V2_RUNNER} must be 1 (the specialized decode refuses the V1 runner): {value!r}"]
    return []


def problems(environ: dict[str, str]) -> list[str]:
    found = check_vllm(metadata.version)
    if found:
        return found  # nothing else means anything without the right vLLM
    found = [
        *check_requirements("vllm", metadata.version),
        *check_fast_path(),
        *check_requirements(KERNELS, metadata.version),
        *check_entry_points(KERNELS),
        *check_tracing(otel.is_otel_available, otel.otel_import_error_traceback),
        *check_environment(environ),
    ]
    return list(dict.fromkeys(found))  # a cause found by two checks is said once


def main() -> int:
    found = problems(dict(os.environ))
    for problem in found:
        print(f"fast path check: {problem}", file=sys.stderr)
    if found:
        return 1
    versions = ", ".join(f"{d} {metadata.version(d)}" for d in ("vllm", "tokenspeed-mla", KERNELS))
    print(f"fast path check: ok ({versions})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
