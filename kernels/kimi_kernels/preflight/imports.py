"""What vLLM's Kimi K3 fast path imports, read from the installed vLLM's source, and whether it
imports here.

vLLM 0.33.0 imports the fast path lazily: ``vllm/models/kimi_k3/nvidia/model.py`` imports
``specialized_decode.runtime.decode`` only when it builds the decode, and the MLA core imports its
attention backends inside the functions that run them (``cutedsl/mla/dcp.py``: ``tvm_ffi`` and
``tokenspeed_mla`` in ``stock_decode``; ``cutedsl/mla/prepared.py``: ``flashinfer`` in
``trtllm_decode``). A missing backend shows only at the first decode step, after the weights are
loaded. The list is an AST walk of the package's source, so it follows the vLLM that is installed
instead of a copy that could go stale.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

FAST_PATH = "vllm.models.kimi_k3.nvidia.specialized_decode"


@dataclass(frozen=True)
class Import:
    """One import the fast path executes: a module of the package itself (``names`` empty), or an
    import statement inside one of its functions (``from module import names``)."""

    module: str  # absolute
    names: tuple[str, ...]
    where: str  # e.g. "vllm/models/.../specialized_decode/cutedsl/mla/dcp.py:303"
    lazy: bool  # inside a function: runs on first use, not when the module is imported

    @property
    def statement(self) -> str:
        if not self.names:
            return f"import {self.module}"
        return f"from {self.module} import {', '.join(self.names)}"


def package_dir(package: str = FAST_PATH) -> Path | None:
    """Where ``package``'s source is, found without importing any of it (None: not installed)."""
    top, _, rest = package.partition(".")
    spec = importlib.util.find_spec(top)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))).joinpath(*rest.split("."))
    return path if (path / "__init__.py").is_file() else None


def _module_name(root: Path, path: Path, package: str) -> tuple[str, str]:
    """(module, the package its relative imports are resolved against) of a source file."""
    parts = path.relative_to(root).with_suffix("").parts
    if parts[-1] == "__init__":
        module = ".".join((package, *parts[:-1]))
        return module, module
    module = ".".join((package, *parts))
    return module, module.rpartition(".")[0]


def _lazy(tree: ast.Module) -> Iterator[ast.Import | ast.ImportFrom]:
    """Import statements that run when a function runs, not when the module is imported."""
    seen: set[int] = set()
    for func in ast.walk(tree):
        if isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
            for node in ast.walk(func):
                if isinstance(node, ast.Import | ast.ImportFrom) and id(node) not in seen:
                    seen.add(id(node))
                    yield node


def fast_path_imports(root: Path, package: str = FAST_PATH) -> tuple[Import, ...]:
    """Every module of the package (importing it runs its top-level imports) and every import
    inside its functions, in file and line order."""
    found: list[Import] = []
    for path in sorted(root.rglob("*.py")):
        module, base = _module_name(root, path, package)
        rel = "/".join((*package.split("."), *path.relative_to(root).parts))
        found.append(Import(module, (), rel, lazy=False))
        lazy = sorted(_lazy(ast.parse(path.read_text(), str(path))), key=lambda n: n.lineno)
        for node in lazy:
            where = f"{rel}:{node.lineno}"
            if isinstance(node, ast.Import):
                found.extend(Import(alias.name, (), where, lazy=True) for alias in node.names)
            else:
                target = "." * node.level + (node.module or "")
                absolute = importlib.util.resolve_name(target, base) if node.level else target
                names = tuple(a.name for a in node.names)
                found.append(Import(absolute, names, where, lazy=True))
    return tuple(found)


def backends(imports: tuple[Import, ...], package: str = FAST_PATH) -> list[str]:
    """The top-level packages outside vLLM that the fast path imports inside its functions."""
    own = package.partition(".")[0]
    return sorted({i.module.partition(".")[0] for i in imports if i.lazy} - {own})


def _run(item: Import) -> None:
    """Python's own semantics: ``from m import n`` takes m's attribute n, else submodule m.n."""
    module = importlib.import_module(item.module)
    for name in item.names:
        if name == "*" or hasattr(module, name):
            continue
        try:
            importlib.import_module(f"{item.module}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{item.module}.{name}":
                raise  # the submodule is there, something it imports is not
            raise ImportError(f"cannot import name {name!r} from {item.module!r}") from None


def import_problems(imports: tuple[Import, ...]) -> list[str]:
    """One line per import that fails here, naming the vLLM source line that would fail."""
    problems = []
    for item in imports:
        try:
            _run(item)
        except Exception as exc:
            reason = f"{type(exc).__name__}: {exc}".splitlines()[0]
            problems.append(f"{item.statement} ({item.where}) fails: {reason}")
    return problems


def check() -> tuple[tuple[Import, ...], list[str]]:
    """(the imports tried, one line per failure) for the installed vLLM's fast path."""
    root = package_dir()
    if root is None:
        return (), [f"{FAST_PATH} is not installed: the image needs vLLM 0.33.0 or newer"]
    imports = fast_path_imports(root)
    return imports, import_problems(imports)
