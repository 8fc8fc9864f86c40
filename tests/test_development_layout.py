"""docs/development.md's "Layout" names only paths that exist: each line's first column from the
repository's root, and each file or folder its description names from that entry's folder
(`exists_from`); and no file in operator/ is over 800 lines but generated data."""

import re
from pathlib import Path

from tests.support.repo import ROOT

# A path-like word: with a slash (`decode_metrics/`, `bench/stub.py`) or a file's extension.
PATH_WORD = re.compile(r"(?<![\w./-])[\w.-]+(?:/[\w.-]+)*(?:/|\.(?:py|md|yaml|toml))(?![\w/-])")


def layout_block(readme: str) -> list[str]:
    section = readme.split("\n## Layout\n", 1)[1]
    return section.split("```", 2)[1].strip("\n").splitlines()


def layout_paths(lines: list[str]) -> list[tuple[Path, str]]:
    """(the folder a name is read from, the name) for every path the block names."""
    named: list[tuple[Path, str]] = []
    entry = ROOT
    for line in lines:
        words = line.split()
        if not line.startswith(" "):
            first = words[0]
            named.append((ROOT, first))
            entry = (ROOT / first).parent if first.endswith(".py") else ROOT / first
            words = words[1:]
        named += [(entry, word) for word in PATH_WORD.findall(" ".join(words))]
    return named


def exists_from(folder: Path, name: str) -> bool:
    """A file named alone is in the entry's folder; a name with a folder in it, there, beside it
    or from the root (`bench/stub.py` beside `embedded/`, `docs/...`)."""
    bases = (folder, folder.parent, ROOT) if "/" in name else (folder,)
    return any((base / name).exists() for base in bases)


def test_every_path_the_layout_names_exists() -> None:
    named = layout_paths(layout_block((ROOT / "docs" / "development.md").read_text()))
    assert len(named) > 30  # the block was found and read
    missing = [
        f"{name} (from {folder.relative_to(ROOT)})"
        for folder, name in named
        if not exists_from(folder, name)
    ]
    assert missing == []


def test_a_path_that_does_not_exist_is_caught() -> None:
    lines = [
        "operator/kimi_operator/controller/ the loop; reconcile.py: one reconcile",
        "tests/ unit/",
    ]
    named = layout_paths(lines)
    assert [name for folder, name in named if not exists_from(folder, name)] == [
        "reconcile.py",
        "unit/",
    ]


# No module in operator/ grows past a size a newcomer can read; generated data is exempt.
MAX_LINES = 800
GENERATED = {Path("operator/kimi_operator/api/vllm_flags.py")}


def too_long(root: Path) -> list[str]:
    """The Python files under `root/operator` over MAX_LINES lines, but the generated ones."""
    return sorted(
        f"{path.relative_to(root)}: {lines} lines"
        for path in (root / "operator").rglob("*.py")
        if path.relative_to(root) not in GENERATED
        and (lines := len(path.read_text().splitlines())) > MAX_LINES
    )


def test_no_file_in_operator_is_over_800_lines() -> None:
    assert too_long(ROOT) == []


def test_a_long_file_is_caught(tmp_path: Path) -> None:
    package = tmp_path / "operator" / "kimi_operator"
    package.mkdir(parents=True)
    (package / "long.py").write_text("x = 1\n" * (MAX_LINES + 1))
    (package / "short.py").write_text("x = 1\n" * MAX_LINES)
    generated = tmp_path / next(iter(GENERATED))
    generated.parent.mkdir(parents=True)
    generated.write_text("x = 1\n" * (MAX_LINES + 1))
    assert too_long(tmp_path) == [f"operator/kimi_operator/long.py: {MAX_LINES + 1} lines"]
