"""What vLLM's fast path imports, read from the installed vLLM 0.33.0 wheel, and the check that
runs those imports (kimi_kernels.preflight.imports)."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from kimi_kernels.preflight import imports
from kimi_kernels.preflight.imports import Import, fast_path_imports, import_problems

# The lazy imports of vLLM 0.33.0's fast path outside vLLM itself, with the source line of each.
# Pinned: when a vLLM upgrade changes them, this fails and the docs (kernels/NOTES.md) follow.
SOURCE = imports.FAST_PATH.replace(".", "/")
VLLM_0_33_0_BACKENDS = {
    ("import tvm_ffi", f"{SOURCE}/cutedsl/mla/dcp.py:302"),
    ("from tokenspeed_mla import mla_decode", f"{SOURCE}/cutedsl/mla/dcp.py:303"),
    ("from tokenspeed_mla import get_num_sm", f"{SOURCE}/cutedsl/mla/dcp.py:371"),
    (
        "from flashinfer.decode import trtllm_batch_decode_with_kv_cache_mla",
        f"{SOURCE}/cutedsl/mla/prepared.py:102",
    ),
    (
        "from flashinfer.utils import get_trtllm_gen_multi_ctas_kv_counter_bytes",
        f"{SOURCE}/cutedsl/mla/prepared.py:103",
    ),
    ("import torch", f"{SOURCE}/runtime/__init__.py:56"),
}


@pytest.fixture(scope="module")
def wheel() -> tuple[Path, tuple[Import, ...]]:
    root = imports.package_dir()
    assert root is not None, "vLLM 0.33.0 (make setup) has no Kimi K3 specialized decode"
    return root, fast_path_imports(root)


def test_the_wheels_lazy_backends_are_found(wheel: tuple[Path, tuple[Import, ...]]) -> None:
    _, found = wheel
    outside = {
        (i.statement, i.where) for i in found if i.lazy and i.module.partition(".")[0] != "vllm"
    }
    assert outside == VLLM_0_33_0_BACKENDS
    assert imports.backends(found) == ["flashinfer", "tokenspeed_mla", "torch", "tvm_ffi"]


def test_every_module_of_the_package_is_imported(wheel: tuple[Path, tuple[Import, ...]]) -> None:
    root, found = wheel
    modules = [i for i in found if not i.lazy]
    assert len(modules) == len(list(root.rglob("*.py")))
    names = {i.module for i in modules}
    assert f"{imports.FAST_PATH}.cutedsl.mla.dcp" in names
    assert f"{imports.FAST_PATH}.runtime.decode" in names
    assert imports.FAST_PATH in names  # the package's own __init__


def test_vllms_own_lazy_imports_are_resolved(wheel: tuple[Path, tuple[Import, ...]]) -> None:
    _, found = wheel
    assert (
        Import(
            "vllm.distributed", ("get_dcp_group",), f"{SOURCE}/runtime/providers.py:153", lazy=True
        )
        in found
    )


def test_not_installed() -> None:
    assert imports.package_dir("kimi_no_such_package.sub") is None
    assert imports.package_dir("json.no_such_sub") is None  # a module, not a package


@pytest.fixture
def package(tmp_path: Path) -> Iterator[Path]:
    """A package with top-level, class-level, nested and relative imports, importable."""
    root = tmp_path / "kimi_probe_pkg"
    files = {
        "__init__.py": "import json\n",
        "common/__init__.py": "VALUE = 1\n",
        "common/util.py": "def helper():\n    return 2\n",
        "common/broken.py": "import kimi_no_such_dependency\n",
        "core/__init__.py": "",
        "core/run.py": """
            import os

            class Box:
                import math

            def lazy():
                from ..common import VALUE, util
                from ..common.util import helper
                import kimi_no_such_backend
                from ..common import broken

                def inner():
                    from json import no_such_name
                return inner

            async def later():
                from . import missing_sibling
            """,
    }
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    sys.path.insert(0, str(tmp_path))
    yield root
    sys.path.remove(str(tmp_path))
    for name in [m for m in sys.modules if m.startswith("kimi_probe_pkg")]:
        del sys.modules[name]


def test_lazy_imports_of_a_package(package: Path) -> None:
    found = fast_path_imports(package, "kimi_probe_pkg")
    assert [(i.statement, i.where) for i in found if i.lazy] == [
        ("from kimi_probe_pkg.common import VALUE, util", "kimi_probe_pkg/core/run.py:8"),
        ("from kimi_probe_pkg.common.util import helper", "kimi_probe_pkg/core/run.py:9"),
        ("import kimi_no_such_backend", "kimi_probe_pkg/core/run.py:10"),
        ("from kimi_probe_pkg.common import broken", "kimi_probe_pkg/core/run.py:11"),
        ("from json import no_such_name", "kimi_probe_pkg/core/run.py:14"),
        ("from kimi_probe_pkg.core import missing_sibling", "kimi_probe_pkg/core/run.py:18"),
    ]
    assert [i.module for i in found if not i.lazy] == [
        "kimi_probe_pkg",
        "kimi_probe_pkg.common",
        "kimi_probe_pkg.common.broken",
        "kimi_probe_pkg.common.util",
        "kimi_probe_pkg.core",
        "kimi_probe_pkg.core.run",
    ]
    assert imports.backends(found, "kimi_probe_pkg") == ["json", "kimi_no_such_backend"]


def test_each_failing_import_is_one_line(package: Path) -> None:
    """A name that is a submodule not imported yet imports (`util`), as in Python; a submodule
    whose own imports fail names what it misses."""
    found = fast_path_imports(package, "kimi_probe_pkg")
    assert import_problems(found) == [
        "import kimi_probe_pkg.common.broken (kimi_probe_pkg/common/broken.py) fails: "
        "ModuleNotFoundError: No module named 'kimi_no_such_dependency'",
        "import kimi_no_such_backend (kimi_probe_pkg/core/run.py:10) fails: "
        "ModuleNotFoundError: No module named 'kimi_no_such_backend'",
        "from kimi_probe_pkg.common import broken (kimi_probe_pkg/core/run.py:11) fails: "
        "ModuleNotFoundError: No module named 'kimi_no_such_dependency'",
        "from json import no_such_name (kimi_probe_pkg/core/run.py:14) fails: "
        "ImportError: cannot import name 'no_such_name' from 'json'",
        "from kimi_probe_pkg.core import missing_sibling (kimi_probe_pkg/core/run.py:18) fails: "
        "ImportError: cannot import name 'missing_sibling' from 'kimi_probe_pkg.core'",
    ]
