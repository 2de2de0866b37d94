"""The rules are written down: every CONTRIBUTING.md section that a test's failure message names exists, every test
that enforces a rule names one, and the README links to the guide."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "CONTRIBUTING.md"
REFERENCE = re.compile(r"CONTRIBUTING\.md#([a-z0-9-]+)")
ENFORCING = (  # the tests that hold a rule of the guide
    "tests/test_shown_code.py",
    "tools/shown_code.py",
    "tests/test_architecture.py",
    "tests/test_conventions.py",
    "tests/test_notebooks.py",
    "tests/test_package_index.py",
)


def anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, spaces to hyphens, punctuation dropped."""
    return re.sub(r"[^a-z0-9 -]", "", heading.lower()).replace(" ", "-")


def sections() -> set[str]:
    return {
        anchor(line[3:].strip())
        for line in GUIDE.read_text().splitlines()
        if line.startswith("## ")
    }


def references(text: str) -> set[str]:
    return set(REFERENCE.findall(text))


def test_every_section_a_message_names_exists():
    named = {
        (path.relative_to(ROOT).as_posix(), ref)
        for folder in ("tests", "tools")
        for path in sorted((ROOT / folder).glob("*.py"))
        for ref in references(path.read_text())
    }
    assert len(named) >= 10, named
    missing = sorted((path, ref) for path, ref in named if ref not in sections())
    assert not missing, (
        f"failure messages name CONTRIBUTING.md sections that do not exist: {missing}"
    )
    own = GUIDE.read_text()
    assert references(own.replace("](#", "](CONTRIBUTING.md#")) <= sections(), (
        "a link inside the guide is broken"
    )


def test_every_enforcing_test_names_its_section():
    silent = [name for name in ENFORCING if not references((ROOT / name).read_text())]
    assert not silent, (
        f"tests that enforce a rule but name no CONTRIBUTING.md section: {silent}"
    )


def test_the_guide_covers_what_a_contributor_needs():
    for section in ("where-a-thing-lives", "shown-code", "validation-at-the-door", "adding-an-exercise",
                    "adding-a-benchmark", "hidden-asserts", "the-two-commands"):  # fmt: skip
        assert section in sections(), section


def test_the_readme_links_the_guide():
    assert "](CONTRIBUTING.md)" in (ROOT / "README.md").read_text()


def test_anchor_is_githubs():
    assert anchor("Signatures and line width") == "signatures-and-line-width"
    assert anchor("The two commands") == "the-two-commands"
    assert references("see CONTRIBUTING.md#shown-code.") == {"shown-code"}
