"""The conventions of a published open book: its licences, how to cite it, the workflows that test and publish it,
and alt text on every figure. The workflows cannot run here; their YAML is read and checked for what they must do."""

import ast
from pathlib import Path

import yaml

CFF_REQUIRED = ("cff-version", "message", "title", "authors", "version", "license", "repository-code", "type")


def package_version(root: Path) -> str:
    """companion.__version__, read from the source (the installed package may be another checkout's)."""
    tree = ast.parse((root / "companion" / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__version__" for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError("companion/__init__.py sets no __version__")


def book_config(root: Path) -> dict:
    return yaml.safe_load((root / "_config.yml").read_text())


def test_licence_files_name_their_licences(root):
    assert "MIT License" in (root / "LICENSE").read_text()
    text_licence = (root / "LICENSE-text").read_text()
    assert text_licence.startswith("Attribution 4.0 International")
    for section in range(1, 9):  # the legal code in full: Sections 1 to 8
        assert f"Section {section} -- " in text_licence, section
    assert (root / "companion" / "data" / "PYTHON_DOCS_LICENSE.txt").is_file()


def test_licences_are_stated_where_readers_look(root):
    readme = (root / "README.md").read_text()
    assert "## Licence" in readme and "LICENSE-text" in readme and "PYTHON_DOCS_LICENSE.txt" in readme
    assert "creativecommons.org/licenses/by/4.0" in (root / "book" / "00_preface.md").read_text()
    footer = book_config(root)["html"]["extra_footer"]
    assert "creativecommons.org/licenses/by/4.0" in footer and "MIT" in footer


def test_citation_file(root):
    citation = yaml.safe_load((root / "CITATION.cff").read_text())
    missing = [key for key in CFF_REQUIRED if not citation.get(key)]
    assert not missing, f"CITATION.cff lacks {missing}"
    assert citation["cff-version"] == "1.2.0"
    assert citation["type"] in ("software", "dataset")
    assert citation["title"] == book_config(root)["title"]
    assert all(author.get("name") or author.get("family-names") for author in citation["authors"])
    assert str(citation["version"]) == package_version(root)
    assert citation["repository-code"] == book_config(root)["repository"]["url"]
    licences = citation["license"] if isinstance(citation["license"], list) else [citation["license"]]
    assert "MIT" in licences and "CC-BY-4.0" in licences
