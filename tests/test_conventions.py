"""The conventions of a published open book: its licences, how to cite it, the workflows that test and publish it,
and alt text on every figure. The workflows cannot run here; their YAML is read and checked for what they must do."""

import ast
import re
from pathlib import Path

import jupytext
import pytest
import yaml

CFF_REQUIRED = (
    "cff-version",
    "message",
    "title",
    "authors",
    "version",
    "license",
    "repository-code",
    "type",
)


def package_version(root: Path) -> str:
    """companion.__version__, read from the source (the installed package may be another checkout's)."""
    tree = ast.parse((root / "companion" / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            getattr(t, "id", None) == "__version__" for t in node.targets
        ):
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
    assert (
        "## Licence" in readme
        and "LICENSE-text" in readme
        and "PYTHON_DOCS_LICENSE.txt" in readme
    )
    assert (
        "creativecommons.org/licenses/by/4.0"
        in (root / "book" / "00_preface.md").read_text()
    )
    footer = book_config(root)["html"]["extra_footer"]
    assert "creativecommons.org/licenses/by/4.0" in footer and "MIT" in footer


def test_citation_file(root):
    citation = yaml.safe_load((root / "CITATION.cff").read_text())
    missing = [key for key in CFF_REQUIRED if not citation.get(key)]
    assert not missing, f"CITATION.cff lacks {missing}"
    assert citation["cff-version"] == "1.2.0"
    assert citation["type"] in ("software", "dataset")
    assert citation["title"] == book_config(root)["title"]
    assert all(
        author.get("name") or author.get("family-names")
        for author in citation["authors"]
    )
    assert str(citation["version"]) == package_version(root)
    assert citation["repository-code"] == book_config(root)["repository"]["url"]
    licences = (
        citation["license"]
        if isinstance(citation["license"], list)
        else [citation["license"]]
    )
    assert "MIT" in licences and "CC-BY-4.0" in licences


def workflow(root: Path, name: str) -> dict:
    parsed = yaml.safe_load((root / ".github" / "workflows" / name).read_text())
    # YAML 1.1 (PyYAML) reads the key `on` as the boolean True; GitHub reads it as "on".
    parsed["on"] = parsed.pop(True, parsed.get("on"))
    return parsed


def steps(job: dict) -> list[dict]:
    return job["steps"]


def uses(job: dict, action: str) -> list[dict]:
    return [step for step in steps(job) if step.get("uses", "").split("@")[0] == action]


def test_ci_workflow_runs_ci_run_on_every_push_and_pull_request(root):
    ci = workflow(root, "ci.yml")
    assert "push" in ci["on"] and "pull_request" in ci["on"]
    (job,) = ci["jobs"].values()
    assert uses(job, "actions/checkout")
    (python,) = uses(job, "actions/setup-python")
    assert str(python["with"]["python-version"]) == "3.11"
    runs = [step["run"] for step in steps(job) if "run" in step]
    assert runs[-1].strip() == "bash .ci/run", runs
    assert "make test" in (root / ".ci" / "run").read_text()


def test_pages_workflow_publishes_release_tags(root):
    pages = workflow(root, "pages.yml")
    assert pages["on"]["push"] == {"tags": ["v*"]}, (
        "the book is published from release tags only"
    )
    assert "workflow_dispatch" in pages["on"]
    assert (
        pages["permissions"]["pages"] == "write"
        and pages["permissions"]["id-token"] == "write"
    )
    build, deploy = pages["jobs"]["build"], pages["jobs"]["deploy"]
    assert uses(build, "actions/checkout")
    runs = [step["run"].strip() for step in steps(build) if "run" in step]
    assert "make book" in runs, runs
    (upload,) = uses(build, "actions/upload-pages-artifact")
    assert upload["with"]["path"] == "_build/html"
    assert steps(build).index(upload) > max(
        i for i, step in enumerate(steps(build)) if "run" in step
    )
    assert (
        deploy["needs"] == "build" and deploy["environment"]["name"] == "github-pages"
    )
    assert uses(deploy, "actions/deploy-pages")
    makefile = (root / "Makefile").read_text()
    assert "HTML   := _build/html" in makefile, "make book no longer writes _build/html"


@pytest.mark.parametrize("name", ["ci.yml", "pages.yml"])
def test_every_action_is_pinned_to_a_version(root, name):
    actions = [
        step["uses"]
        for job in workflow(root, name)["jobs"].values()
        for step in steps(job)
        if "uses" in step
    ]
    assert actions
    for action in actions:
        assert re.fullmatch(r"[\w.-]+/[\w./-]+@v\d+(\.\d+)*", action), (
            f"{name}: {action!r} names no version tag"
        )


MIN_ALT = 20  # characters: a sentence saying what the figure shows, not a placeholder


def figure_cells(root: Path) -> list[tuple[str, int, dict]]:
    """(chapter, cell index, metadata) of every chapter code cell that draws a figure (calls plt.show())."""
    cells = []
    for chapter in sorted((root / "book").glob("[0-9][0-9]_*.md")):
        for index, cell in enumerate(jupytext.read(chapter).cells):
            if cell.cell_type == "code" and "plt.show()" in cell.source:
                cells.append((chapter.name, index, cell.metadata))
    return cells


def alt_text(metadata: dict) -> str:
    """MyST-NB's alt text of a cell's image output: metadata mystnb.image.alt."""
    return str(
        ((metadata.get("mystnb") or {}).get("image") or {}).get("alt") or ""
    ).strip()


def test_every_figure_has_alt_text(root):
    cells = figure_cells(root)
    assert len(cells) >= 10, "no figure cells found: has plt.show() gone?"
    missing = [
        f"{chapter} cell {index}"
        for chapter, index, metadata in cells
        if len(alt_text(metadata)) < MIN_ALT
    ]
    assert not missing, (
        f"figure cells without alt text of at least {MIN_ALT} characters (add ':mystnb:' / ':  image:' / "
        f"':    alt: \"...\"' to the cell's options; CONTRIBUTING.md#adding-a-chapter): {missing}"
    )
    alts = [alt_text(metadata) for _, _, metadata in cells]
    assert len(set(alts)) == len(alts), "two figures share one alt text"


@pytest.mark.parametrize(
    ("metadata", "expected"),
    [
        ({}, ""),
        ({"tags": ["hide-input"]}, ""),
        ({"mystnb": {"image": {"width": "50%"}}}, ""),
        (
            {"mystnb": {"image": {"alt": "  A plot of y against x.  "}}},
            "A plot of y against x.",
        ),
    ],
)
def test_alt_text_reads_mystnb_image_alt(metadata, expected):
    assert alt_text(metadata) == expected


def test_companion_is_imported_from_this_distribution(root):
    """The distribution is named in pyproject.toml, not `companion` (an unrelated project's name on the package
    index); what `import companion` finds must come from it, at the version of the source."""
    import importlib.metadata
    import tomllib

    import companion

    name = tomllib.loads((root / "pyproject.toml").read_text())["project"]["name"]
    assert name != "companion", (
        "`companion` on the package index is another project (README: The package's names)"
    )
    assert name in importlib.metadata.packages_distributions().get("companion", []), (
        f"`import companion` does not come from the distribution {name!r} (is another `companion` installed?)"
    )
    assert (
        importlib.metadata.version(name)
        == companion.__version__
        == package_version(root)
    )


def test_no_pretence_of_static_typing(root):
    """The annotations document arguments for readers and the API page; no type checker runs (README: Typing), so the
    package ships no py.typed marker and its code carries no `# type: ignore` pragmas addressed to one."""
    assert not (root / "companion" / "py.typed").exists()
    pragmas = [
        f"{path.relative_to(root)}:{number}"
        for folder in (
            "companion",
            "book",
        )  # the package and the chapters (tools/shown_code.py names the pragma)
        for path in sorted((root / folder).rglob("*"))
        if path.suffix in {".py", ".md"} and ".venv" not in path.parts
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if "type: ignore" in line
    ]
    assert not pragmas, (
        f"type-checker pragmas (CONTRIBUTING.md#signatures-and-line-width): {pragmas}"
    )
