"""Every relative link in README.md resolves: the file exists, and a `#anchor` names one of its
headings (as GitHub makes anchors of them)."""

import re
from pathlib import Path

from tests.support.repo import ROOT

LINK = re.compile(r"\]\(([^)\s]+)\)")


def anchors(markdown: str) -> set[str]:
    """GitHub's anchors of `markdown`'s headings: lower case, punctuation dropped, spaces as
    hyphens."""
    headings = re.findall(r"^#+ (.+)$", markdown, flags=re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def broken_links(document: Path) -> list[str]:
    broken = []
    for target in LINK.findall(document.read_text()):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        resolved = (document.parent / path) if path else document
        if not resolved.exists():
            broken.append(f"{target}: no such file")
        elif anchor and anchor not in anchors(resolved.read_text()):
            broken.append(f"{target}: no heading #{anchor}")
    return broken


def test_every_relative_link_in_the_readme_resolves() -> None:
    readme = ROOT / "README.md"
    assert len(LINK.findall(readme.read_text())) > 20  # the links were found
    assert broken_links(readme) == []


def test_a_broken_link_is_found(tmp_path: Path) -> None:
    (tmp_path / "there.md").write_text("# Title\n\n## 2. The images\n")
    doc = tmp_path / "README.md"
    doc.write_text(
        "[a](there.md) [b](there.md#2-the-images) [c](https://example.com) "
        "[d](gone.md) [e](there.md#nowhere)\n"
    )
    assert broken_links(doc) == ["gone.md: no such file", "there.md#nowhere: no heading #nowhere"]
