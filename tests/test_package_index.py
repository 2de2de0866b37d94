"""The package docstring's chapter index agrees with the book: chapter N, as ``_toc.yml`` numbers it, uses every
concept module the index lists under chapter N (so renumbering the chapters, or moving a module to another
chapter, cannot leave the index stale)."""

import re

import companion
from tools import notebooks


def index() -> dict[int, list[str]]:
    concepts = companion.__doc__.split("**Concepts**")[1].split("**Machinery**")[0]
    entries = re.split(r"\n- (?=chapter \d+)", concepts)
    found = {}
    for entry in entries:
        m = re.match(r"chapter (\d+)", entry)
        if m:
            found[int(m.group(1))] = re.findall(r":mod:`companion\.(\w+)`", entry)
    return found


def uses(text: str, module: str) -> bool:
    imported = re.findall(r"^from companion import ([^\n]+)$", text, re.MULTILINE)
    return f"companion.{module}" in text or any(
        module in re.split(r"[,\s()]+", line) for line in imported
    )


def test_every_chapter_is_indexed_with_the_modules_it_uses():
    chapters = notebooks.numbered_chapters()
    found = index()
    assert sorted(found) == list(range(1, len(chapters) + 1)), sorted(found)
    for number, modules in found.items():
        text = chapters[number - 1].read_text()
        assert modules, number
        missing = [m for m in modules if not uses(text, m)]
        assert not missing, (
            f"the index lists {missing} under chapter {number} ({chapters[number - 1].name}; "
            f"CONTRIBUTING.md#adding-a-chapter)"
        )


def test_the_check_fails_on_a_module_under_the_wrong_chapter():
    chapter_1 = notebooks.numbered_chapters()[0].read_text()
    assert uses(chapter_1, "embeddings") and not uses(chapter_1, "fmmformer")
