"""Keep the book's notebooks in step with their one source, ``book/NN_name.md`` (a MyST notebook).

``sync`` writes, and ``check`` (CI's ``sync-check``) fails when one is stale:

1. each chapter's **setup cell** (its first code cell, the same in every chapter): in Colab, ``pip install``
   the companion package from the repository (``_config.yml``) at the release ``v`` + ``companion.__version__``;
2. ``repository.branch`` in ``_config.yml``, set to that release: the ref the launch buttons open;
3. the **reader notebook** ``book/NN_name.ipynb`` (what the Colab and Binder buttons open): the chapter as the
   book reads, its MyST rendered as the Markdown Jupyter and Colab show (:mod:`tools.myst`); exercises become
   headed sections, each solution a folded ``<details>`` block and a folded code cell that still runs; the cells
   the book hides (setup, the asserts that check the prose's claims, a figure's code) folded under a title;
4. the **homework notebook** ``book/homework/NN_name.ipynb``: solutions out, each exercise's stub made from its
   solution cell (:mod:`tools.homework_cells`), the listings and cells that give an exercise away left out, a
   snapshot cell before each stub and a restore cell after its checker, an answer cell after each pen-and-paper
   question.

Both notebooks are made from jupytext's cells; the MyST inside a markdown cell is read by the book's own parser
(myst-parser's markdown-it), so a directive, a role or a fence is found by its token, never by a pattern.

Usage::

    python tools/notebooks.py sync     # rewrite the release ref, setup cells, reader and homework notebooks
    python tools/notebooks.py check    # exit 1 and list what is stale (CI runs this through pytest)
"""

from __future__ import annotations

import ast
import copy
import functools
import re
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import jupytext
import nbformat
import yaml

# run as a script (python tools/notebooks.py): import tools.* from the root
if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tools.homework_cells import (
    ANSWER_CELL,
    ANSWER_TAG,
    GIVEAWAYS,
    NBVAL_CHECK_OUTPUT,
    RESTORE_CELL,
    SNAPSHOT_CELL,
    STUB_TAG,
    asked_names,
    checker_call,
    checkers,
    introduction,
    stub_from_solution,
    top_level_definitions,
    without_markers,
)
from tools.myst.citations import Citations
from tools.myst.parse import blocks, directive_name, headings, tokens
from tools.myst.render import Book, Renderer
from tools.myst.targets import Target, page_targets
from tools.myst.targets import number as _number

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
HOMEWORK = BOOK / "homework"
CONFIG = ROOT / "_config.yml"

SETUP_TAG = "companion-setup"

SETUP_TEMPLATE = """\
# Setup, the same in every chapter: in Google Colab, install the book's companion
# package at the release this book was built from ({ref}); anywhere else, do nothing.
import os
import subprocess
import sys

PACKAGE = (
    "{name} @ "
    "git+{url}@{ref}"
)
if "google.colab" in sys.modules or os.environ.get("COMPANION_SOURCE"):
    source = os.environ.get("COMPANION_SOURCE") or PACKAGE
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", source], check=True)"""

GATED = frozenset({"exercise-start", "exercise-end", "solution-start", "solution-end"})


@dataclass(frozen=True)
class Repository:
    url: str
    ref: str


def repository() -> Repository:
    """The repository URL and the ref the launch buttons open (``repository.branch``), from ``_config.yml``."""
    config = yaml.safe_load(CONFIG.read_text())
    repo = config["repository"]
    return Repository(url=repo["url"].rstrip("/"), ref=repo.get("branch", "main"))


def release() -> str:
    """The release the book is built from: ``v`` + ``companion.__version__``, read from the package's
    ``__init__.py`` without importing it (which would import torch)."""
    source = ROOT / "companion" / "__init__.py"
    for node in ast.parse(source.read_text()).body:
        if (
            isinstance(node, ast.Assign)
            and [getattr(t, "id", None) for t in node.targets] == ["__version__"]
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            return f"v{node.value.value}"
    raise ValueError(f'{source} sets no __version__ = "X.Y.Z"')


def distribution() -> str:
    """The package's distribution name (``pyproject.toml``'s ``project.name``; it is imported as ``companion``)."""
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["name"]


def setup_cell_source() -> str:
    """The first code cell of every chapter: in Colab, ``pip install "NAME @ git+URL@vX.Y.Z"`` (the release)."""
    return SETUP_TEMPLATE.format(
        name=distribution(), url=repository().url, ref=release()
    )


_BRANCH = re.compile(
    r"^(repository:[ \t]*\n(?:[ \t]+.*\n|[ \t]*\n)*?[ \t]+branch:[ \t]*)(\S+)",
    re.MULTILINE,
)


def config_with_release(text: str) -> str:
    """``_config.yml``'s text with ``repository.branch`` (the ref the Colab and Binder buttons open) set to the
    release, so that a launched notebook and the package its setup cell installs come from the same tag."""
    if not _BRANCH.search(text):
        raise ValueError("_config.yml has no repository.branch to set")
    return _BRANCH.sub(lambda m: m.group(1) + release(), text, count=1)


def setup_cell_block() -> str:
    """The setup cell as it stands in a MyST notebook."""
    return f"```{{code-cell}} ipython3\n:tags: [remove-cell, {SETUP_TAG}]\n\n{setup_cell_source()}\n```"


def numbered_chapters() -> list[Path]:
    """The chapters of the numbered parts of ``_toc.yml``, in order: chapter k of the book is item k - 1."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [
        c["file"]
        for part in toc.get("parts", [])
        if part.get("numbered")
        for c in part["chapters"]
    ]
    return [ROOT / f"{name}.md" for name in files]


def chapter_number(md: Path) -> int:
    """The number the book gives chapter ``md`` (its place in the numbered parts of the table of contents)."""
    listed = [p.resolve() for p in numbered_chapters()]
    if md.resolve() not in listed:
        raise ValueError(f"{md.name} is not in a numbered part of _toc.yml")
    return listed.index(md.resolve()) + 1


def chapters() -> list[Path]:
    """Every chapter source, ``book/NN_name.md``, in order."""
    return sorted(p for p in BOOK.glob("[0-9][0-9]_*.md"))


def homework_path(md: Path) -> Path:
    return HOMEWORK / md.with_suffix(".ipynb").name


def has_exercises(md: Path) -> bool:
    """Whether a chapter has exercises (and so a homework notebook)."""
    return any(
        directive_name(token) == "exercise-start"
        for token in tokens(md.read_text())
        if not token.level
    )


# ----- setup cell ----------------------------------------------------------------------------------------


def with_setup_cell(text: str) -> str:
    """``text`` (a MyST notebook) with its first code cell replaced by the canonical setup cell."""
    found = next(
        (
            t.map
            for t in tokens(text)
            if not t.level and directive_name(t) == "code-cell"
        ),
        None,
    )
    if found is None:
        raise ValueError(
            "a chapter must contain at least one code cell: the setup cell"
        )
    lines = text.split("\n")
    return "\n".join(lines[: found[0]] + [setup_cell_block()] + lines[found[1] :])


# ----- reader notebook -----------------------------------------------------------------------------------

# Code cells the book hides or folds: in the reader notebook they are present (and run) but folded, under a title.
# Colab folds a cell whose metadata says cellView "form" and shows its first line "# @title …"; JupyterLab and
# Notebook 7 fold a cell whose metadata says jupyter.source_hidden.
FOLDED_TITLES = {
    SETUP_TAG: "Setup: in Colab, install the companion package ({release}); elsewhere, nothing",
    # a cell with asserts; else:
    "remove-cell": "Check the claims of the text above (hidden in the book)",
    "remove-cell, no assert": "Code hidden in the book",
    "remove-input": "Code for the output below (hidden in the book)",
    "hide-input": "Code (folded in the book)",
}
SOLUTION_TITLE = "Solution to Exercise {number} (folded: later cells use it)"


def folded(cell: nbformat.NotebookNode, title: str) -> nbformat.NotebookNode:
    """``cell`` with its code folded under ``title`` in Colab, JupyterLab and Notebook 7 (it still runs)."""
    magic, rest = re.match(r"((?:%%[^\n]*\n)?)(.*)", cell.source, re.DOTALL).groups()
    # a cell magic stays first (Colab then shows the code)
    cell.source = f"{magic}# @title {title}\n{rest}"
    cell.metadata["cellView"] = "form"
    cell.metadata.setdefault("jupyter", {})["source_hidden"] = True
    return cell


def reader_path(md: Path) -> Path:
    """The notebook the Colab and Binder buttons of chapter ``md`` open: ``book/NN_name.ipynb``."""
    return md.with_suffix(".ipynb")


def reader_notebook(md: Path) -> str:
    """The notebook a reader runs (the launch buttons open it): chapter ``md`` as the book shows it.

    Code listings are in the text, citations read "(Author, year)" with a reference list at the end, exercises
    are headed sections, each solution is a folded ``<details>`` block followed by its code cell, folded too and
    still run (the cells after it may use what it defines); the cells the book hides (the setup cell, the asserts
    that check the prose's claims, the code of a figure) are there, folded under a title, and run.
    """
    nb, out, citations = _start(md)
    chapter = _chapter_or_none(md)
    render = Renderer(md.parent, _book(), chapter=chapter, citations=citations)
    # Colab opens with the table of contents shown
    out.metadata["colab"] = {"toc_visible": True}
    pending: list[str] = []
    # the solution's text and code, shown in its <details> block
    solution: list[str] | None = None
    solution_code: list[nbformat.NotebookNode] = []
    exercise, number = 0, ""
    numbers: dict[str, str] = {}

    def flush() -> None:
        text = "\n".join(pending).strip("\n")
        if text.strip():
            out.cells.append(nbformat.v4.new_markdown_cell(text))
        pending.clear()

    for cell in nb.cells:
        if cell.cell_type == "code":
            if solution is not None:
                code = without_markers(cell.source)
                solution.append(f"```python\n{code}\n```")
                solution_code.append(nbformat.v4.new_code_cell(code))
            else:
                out.cells.append(_reader_code_cell(cell))
            continue
        for piece in blocks(cell.source, GATED):
            if isinstance(piece, str):
                text = render.markdown(piece)
                if solution is not None:
                    solution.append(text.strip("\n"))
                else:
                    pending.append(text)
            elif piece.name == "exercise-start":
                exercise += 1
                number = _number(chapter, exercise)
                numbers[piece.options.get("label", "")] = number
                pending.append(
                    exercise_heading(number, render.markdown(piece.argument))
                )
            elif piece.name == "solution-start":
                flush()
                solution, solution_code = [], []
                number = numbers.get(piece.argument, number)
            elif piece.name == "solution-end":
                if solution is None:
                    raise ValueError(f"{md.name}: a solution-end has no solution-start")
                body = "\n\n".join(part for part in solution if part.strip())
                summary = f"<summary><b>Solution to Exercise {number}</b> (click to show)</summary>"
                out.cells.append(
                    nbformat.v4.new_markdown_cell(
                        f"<details>\n{summary}\n\n{body}\n\n</details>"
                    )
                )
                for code in solution_code:
                    out.cells.append(folded(code, SOLUTION_TITLE.format(number=number)))
                solution = None
        if solution is None:
            flush()
    if solution is not None:
        raise ValueError(f"{md.name}: a solution-start has no matching solution-end")
    flush()
    # not the setup
    hides = (
        sum(
            c.cell_type == "code" and c.metadata.get("cellView") == "form"
            for c in out.cells
        )
        > 1
    )
    out.cells.insert(
        1, nbformat.v4.new_markdown_cell(_reader_introduction(md, chapter, hides))
    )
    return _finish(out, citations)


def _reader_code_cell(cell: nbformat.NotebookNode) -> nbformat.NotebookNode:
    tags = list(cell.metadata.get("tags", []))
    new = nbformat.v4.new_code_cell(
        cell.source, metadata={"tags": tags} if tags else {}
    )
    title = next((FOLDED_TITLES[tag] for tag in FOLDED_TITLES if tag in tags), None)
    if (
        "remove-cell" in tags
        and SETUP_TAG not in tags
        and not re.search(r"^\s*assert\b", cell.source, re.M)
    ):
        title = FOLDED_TITLES["remove-cell, no assert"]
    if title:
        folded(new, title.format(release=release()))
    if {"hide-output", "remove-output"} & set(tags):
        new.metadata.setdefault("jupyter", {})["outputs_hidden"] = True
    return new


def _reader_introduction(md: Path, chapter: int | None, hides: bool) -> str:
    book = yaml.safe_load(CONFIG.read_text())["title"]
    page = page_url(Target(md.relative_to(ROOT).with_suffix("").as_posix(), "", ""))
    what = f"Chapter {chapter}" if chapter else "This page"
    text = (
        f"*{what} of [{book}]({page}), as a notebook made from the same source. Run it from the top (in Colab: "
        f"Runtime → Run all): the first code cell installs the book's companion package, release {release()}, "
        "in Colab and does nothing elsewhere."
    )
    if hides:
        text += " The code the book hides is folded here and runs: the checks of the text's claims, for instance."
    if has_exercises(md):
        repo = repository()
        slug = repo.url.removeprefix("https://github.com/")
        homework = f"https://colab.research.google.com/github/{slug}/blob/{repo.ref}/{homework_path(md).relative_to(ROOT)}"
        text += (
            " Each exercise's solution is folded under it (click to show), and its code runs folded too, since "
            f"later cells may use it. To do the exercises yourself, open the [homework notebook]({homework}).*"
        )
    else:
        text += "*"
    return text


def homework_notebook(md: Path) -> str:
    """The student notebook for chapter ``md``: solutions out, stubs in, exercises as headings.

    In the homework (not in the book), listings and code cells that define what an exercise asks for are left
    out; each exercise's stub is preceded by a cell that notes the chapter's variables and its checker followed
    by one that puts back any the student's experiments replaced; citations become "(Author, year)" with a
    reference list at the end.
    """
    nb, out, citations = _start(md)
    chapter = chapter_number(md)
    asked = asked_names(nb)
    hidden = asked | {g for name in asked for g in GIVEAWAYS.get(name, ())}
    render = Renderer(
        md.parent, _book(), chapter=chapter, citations=citations, hide=hidden
    )
    in_solution = pen_and_paper = False
    exercise = 0
    keep: list[str] = []
    first = True

    def add_markdown(runs: list[str]) -> None:
        nonlocal first
        # the homework has its own title
        text = _without_title("\n".join(runs)) if first else "\n".join(runs)
        first = False
        text = render.markdown(text)
        if text.strip():
            out.cells.append(nbformat.v4.new_markdown_cell(text.strip("\n")))

    for cell in nb.cells:
        if cell.cell_type == "markdown":
            runs: list[str] = []
            for piece in blocks(cell.source, GATED):
                if isinstance(piece, str):
                    runs += [] if in_solution else [piece]
                elif piece.name == "exercise-start":
                    exercise += 1
                    pen_and_paper = "pen and paper" in piece.argument.lower()
                    runs += (
                        []
                        if in_solution
                        else [exercise_heading(f"{chapter}.{exercise}", piece.argument)]
                    )
                elif piece.name != "exercise-end":
                    in_solution = piece.name == "solution-start"
                # a pen-and-paper question ends: a cell for the answer right after it
                elif pen_and_paper:
                    add_markdown(runs)
                    runs, pen_and_paper = [], False
                    out.cells.append(
                        nbformat.v4.new_markdown_cell(
                            ANSWER_CELL, metadata={"tags": [ANSWER_TAG]}
                        )
                    )
            add_markdown(runs)
            continue
        tags = list(cell.metadata.get("tags", []))
        stub = stub_from_solution(cell.source)
        if stub is None and STUB_TAG in tags:
            stub = cell.source
            tags.remove(STUB_TAG)
            if "remove-cell" in tags:  # the book hides the stub; the homework shows it
                tags.remove("remove-cell")
        if stub is not None:
            keep = sorted(top_level_definitions(stub))
            out.cells.append(
                nbformat.v4.new_code_cell(
                    SNAPSHOT_CELL, metadata={"tags": ["homework-snapshot"]}
                )
            )
            out.cells.append(
                nbformat.v4.new_code_cell(stub, metadata={"tags": [STUB_TAG, *tags]})
            )
            continue
        if in_solution or top_level_definitions(cell.source) & hidden:
            continue
        new = nbformat.v4.new_code_cell(cell.source)
        checker = checker_call(cell.source)
        if checker:
            # Before the student starts, the checker must say so; nbval compares this output (CI).
            verdict = _checker(checker).not_attempted_message()
            new.outputs = [
                nbformat.v4.new_output("stream", name="stdout", text=verdict + "\n")
            ]
            # nbval only compares the outputs of cells that were run
            new.execution_count = 1
            tags.append(NBVAL_CHECK_OUTPUT)
        if tags:
            new.metadata["tags"] = tags
        out.cells.append(new)
        if checker and keep:
            restore = RESTORE_CELL.format(keep=keep)
            out.cells.append(
                nbformat.v4.new_code_cell(
                    restore, metadata={"tags": ["homework-restore"]}
                )
            )
            keep = []
    if in_solution:
        raise ValueError(f"{md.name}: a solution-start has no matching solution-end")
    intro = introduction(
        _title(nb), chapter, exercise, checkers(out.cells), repository().url
    )
    out.cells.insert(0, nbformat.v4.new_markdown_cell(intro))
    return _finish(out, citations)


def _checker(name: str):
    """The :class:`~companion.exercises.checking.Checker` called ``name`` in a ``companion.exercises`` module."""
    import importlib
    import pkgutil

    import companion.exercises
    from companion.exercises.checking import Checker

    found = []
    for module in pkgutil.iter_modules(companion.exercises.__path__):
        obj = getattr(
            importlib.import_module(f"companion.exercises.{module.name}"), name, None
        )
        # a checker re-exported by a second module is found once
        if isinstance(obj, Checker) and all(obj is not f for f in found):
            found.append(obj)
    if len(found) != 1:
        raise ValueError(
            f"expected one checker called {name} in companion.exercises, found {len(found)}"
        )
    return found[0]


def _title(nb: nbformat.NotebookNode) -> str:
    """The chapter's title: its first top-level heading (``# Title``)."""
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            stream = tokens(cell.source)
            found = next(
                (text for i, text in headings(stream) if stream[i].tag == "h1"), None
            )
            if found:
                return found
    return "Chapter"


def _without_title(text: str) -> str:
    """``text`` without the heading it opens with, if that is the chapter's title (``# Title``)."""
    stream = tokens(text)
    if stream and stream[0].type == "heading_open" and stream[0].tag == "h1":
        return "\n".join(text.split("\n")[stream[0].map[1] :])
    return text


def exercise_heading(number: str, title: str) -> str:
    """The heading an exercise gets in a notebook, numbered as in the book."""
    return f"### Exercise {number}" + (f" ({title})" if title else "")


def site_url() -> str:
    """The address of the rendered book (``html.baseurl`` in ``_config.yml``), ending in ``/``."""
    config = yaml.safe_load(CONFIG.read_text())
    url = (config.get("html") or {}).get("baseurl")
    if not url:
        raise ValueError(
            "_config.yml needs html.baseurl, the address of the rendered book (for notebook links)"
        )
    return url.rstrip("/") + "/"


def page_url(target: Target) -> str:
    return f"{site_url()}{target.page}.html" + (
        f"#{target.anchor}" if target.anchor else ""
    )


def _chapter_or_none(md: Path) -> int | None:
    """The chapter's number, or None for a page outside the numbered parts (the preface)."""
    try:
        return chapter_number(md)
    except ValueError:
        return None


def targets() -> dict[str, Target]:
    """Every page of ``book/`` (``book/04_attention``) and every label in it, with its link text as the book
    shows it: a section's heading, "Theorem 10.2", "Exercise 4.1", "Figure 3.1", an equation's "(5.1)"."""
    files = tuple((p, p.stat().st_mtime_ns) for p in sorted(BOOK.glob("*.md")))
    return dict(_targets(files, ROOT))


@functools.lru_cache(maxsize=4)
def _targets(
    files: tuple[tuple[Path, int], ...], root: Path
) -> tuple[tuple[str, Target], ...]:
    found: dict[str, Target] = {}
    for md, _ in files:
        page = (
            md.relative_to(root if md.is_relative_to(root) else md.parents[1])
            .with_suffix("")
            .as_posix()
        )
        found |= page_targets(md.read_text(), page, _chapter_or_none(md))
    return tuple(found.items())


def _book() -> Book:
    """The book as the renderer sees it: its root, its labels, the addresses of its pages and of its files."""
    repo = repository()
    slug = repo.url.removeprefix("https://github.com/")
    return Book(
        root=ROOT,
        targets=targets,
        page_url=page_url,
        file_url=lambda path: (
            f"https://raw.githubusercontent.com/{slug}/{release()}/{path}"
        ),
    )


def for_jupyter(
    text: str,
    base: Path,
    *,
    hide: set[str] | frozenset[str] = frozenset(),
    citations: Citations | None = None,
) -> str:
    """``text`` (MyST) as plain Markdown: see :class:`~tools.myst.render.Renderer`."""
    return Renderer(base, _book(), hide=hide, citations=citations).markdown(text)


def _start(md: Path) -> tuple[nbformat.NotebookNode, nbformat.NotebookNode, Citations]:
    """Chapter ``md`` read by jupytext, an empty notebook with its metadata (not jupytext's), the bibliography."""
    nb = jupytext.read(md)
    out = nbformat.v4.new_notebook()
    out.metadata = copy.deepcopy(nb.metadata)
    out.metadata.pop("jupytext", None)
    return nb, out, Citations(BOOK / "references.bib")


def _finish(out: nbformat.NotebookNode, citations: Citations) -> str:
    """``out`` with the list of the works it cites at the end and stable cell ids (an unchanged chapter gives an
    unchanged file), as the text of an ``.ipynb``."""
    references = citations.reference_list()
    if references:
        out.cells.append(
            nbformat.v4.new_markdown_cell("## References\n\n" + references)
        )
    for i, cell in enumerate(out.cells):
        cell["id"] = f"cell-{i}"
    return nbformat.writes(out) + "\n"


# ----- sync and check ------------------------------------------------------------------------------------


def expected_files() -> dict[Path, str]:
    """Every generated file and the text it should have."""
    files: dict[Path, str] = {CONFIG: config_with_release(CONFIG.read_text())}
    for md in chapters():
        files[reader_path(md)] = reader_notebook(md)
        if has_exercises(md):
            files[homework_path(md)] = homework_notebook(md)
    return files


def stale_setup_cells() -> list[Path]:
    return [
        md for md in chapters() if with_setup_cell(md.read_text()) != md.read_text()
    ]


def stale_files() -> list[Path]:
    return [
        path
        for path, text in expected_files().items()
        if not path.exists() or path.read_text() != text
    ]


def orphans() -> list[Path]:
    """Generated notebooks whose chapter source no longer exists."""
    readers = {md.stem for md in chapters()}
    homework = {md.stem for md in chapters() if has_exercises(md)}
    found = [p for p in BOOK.glob("[0-9][0-9]_*.ipynb") if p.stem not in readers]
    found += [p for p in HOMEWORK.glob("*.ipynb") if p.stem not in homework]
    return sorted(found)


def sync() -> list[Path]:
    """Set the launch ref to the release, rewrite setup cells, reader and homework notebooks; remove orphans.
    Returns the files changed."""
    changed: list[Path] = []
    config = CONFIG.read_text()
    # first: the notebooks link to the ref it names
    if config_with_release(config) != config:
        CONFIG.write_text(config_with_release(config))
        changed.append(CONFIG)
    for md in chapters():
        text = md.read_text()
        new = with_setup_cell(text)
        if new != text:
            md.write_text(new)
            changed.append(md)
    HOMEWORK.mkdir(exist_ok=True)
    for path, text in expected_files().items():
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
            changed.append(path)
    for path in orphans():
        path.unlink()
        changed.append(path)
    return changed


def main(argv: list[str]) -> int:
    command = argv[1] if len(argv) > 1 else "check"
    if command == "sync":
        for path in sync():
            print(f"updated {path.relative_to(ROOT)}")
        return 0
    if command == "check":
        problems = [
            f"setup cell differs from the template: {p.relative_to(ROOT)}"
            for p in stale_setup_cells()
        ]
        problems += [f"stale or missing: {p.relative_to(ROOT)}" for p in stale_files()]
        problems += [
            f"orphan (no chapter source): {p.relative_to(ROOT)}" for p in orphans()
        ]
        for line in problems:
            print(line)
        if problems:
            print(
                "Run `make sync` (python tools/notebooks.py sync) and commit the result."
            )
        return 1 if problems else 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
