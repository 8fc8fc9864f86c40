"""The repository's root, and its scripts (benchmarks/, scripts/, images/, third_party/) loaded as
modules so that tests can call their functions without running them."""

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def load_script(path: Path) -> ModuleType:
    """`path` (absolute, or relative to the repository) imported under its file name's stem."""
    path = ROOT / path
    spec = importlib.util.spec_from_file_location(path.stem, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
