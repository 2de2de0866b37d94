"""Keep the book's notebooks in step with their one source, ``book/NN_name.md``.

Four things are generated from each chapter's MyST notebook (``make sync`` writes them, ``make check-sync`` and
``tests/test_notebooks.py`` fail when one is stale):

1. its **setup cell** (the first code cell, identical in every chapter): in Colab, ``pip install
   git+URL@vX.Y.Z``, the repository URL from ``_config.yml`` and the release ``vX.Y.Z`` from
   ``companion.__version__`` (read from ``companion/__init__.py``, not imported);
2. ``repository.branch`` in ``_config.yml``, set to the same release: the ref the launch buttons open;
3. its **reader notebook** ``book/NN_name.ipynb``, which the Colab and Binder buttons open: the chapter as the
   book reads, in Markdown that Jupyter and Colab render (:class:`Renderer`: listings instead of
   ``literalinclude``, "(Author, year)" citations and a reference list, formatted theorems and admonitions,
   links to the rendered pages); exercises become headed sections and each solution a folded ``<details>``
   block followed by its code cell, folded too; the cells the book hides (the setup cell, the asserts that check
   the prose's claims, the code of some figures) are folded under a title and still run. It is not a jupytext
   pair: nothing writes it but this script;
4. its **homework notebook** ``book/homework/NN_name.ipynb``: the chapter with every solution removed, the
   exercise directives turned into plain headings, and each exercise's stub derived from its solution cell
   (every block between a line ``# BEGIN SOLUTION`` and a line ``# END SOLUTION`` becomes
   ``raise NotImplementedError  # your code here``; a cell tagged ``exercise-stub`` is still accepted). The
   homework leaves out every listing and cell that defines what an exercise asks for (and the loop versions
   in ``GIVEAWAYS``), guards each stub with a snapshot cell before it and a restore cell after its checker so
   that a student's experiments cannot break later cells, renders the MyST as the reader notebook does, and
   opens with the number of exercises.

Usage::

    python tools/notebooks.py sync     # rewrite the release ref, setup cells, reader and homework notebooks
    python tools/notebooks.py check    # exit 1 and list what is stale (CI runs this through pytest)
"""

from __future__ import annotations

import ast
import copy
import functools
import os
import re
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import jupytext
import nbformat
import yaml
from docutils.nodes import make_id

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
HOMEWORK = BOOK / "homework"
CONFIG = ROOT / "_config.yml"

SETUP_TAG = "companion-setup"
STUB_TAG = "exercise-stub"

SETUP_TEMPLATE = """\
# Setup, the same in every chapter: in Google Colab, install the book's companion package
# at the release this book was built from ({ref}); anywhere else, do nothing.
import os
import subprocess
import sys

PACKAGE = "{name} @ git+{url}@{ref}"
if "google.colab" in sys.modules or os.environ.get("COMPANION_SOURCE"):
    source = os.environ.get("COMPANION_SOURCE") or PACKAGE
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", source], check=True)"""

NBVAL_CHECK_OUTPUT = "nbval-check-output"
_CHECKER_CALL = re.compile(r"^(check_\w+)\(\w+\)\s*$")
_CODE_CELL = re.compile(r"^```\{code-cell\}[^\n]*\n(?:.*?\n)?```[ \t]*$", re.MULTILINE | re.DOTALL)
_FENCE_OPEN = re.compile(r"^(`{3,})\{(exercise-start|exercise-end|solution-start|solution-end)\}(.*)$")


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
    return SETUP_TEMPLATE.format(name=distribution(), url=repository().url, ref=release())


_BRANCH = re.compile(r"^(repository:[ \t]*\n(?:[ \t]+.*\n|[ \t]*\n)*?[ \t]+branch:[ \t]*)(\S+)", re.MULTILINE)


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
    files = [c["file"] for part in toc.get("parts", []) if part.get("numbered") for c in part["chapters"]]
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
    return "{exercise-start}" in md.read_text()


# ----- setup cell ----------------------------------------------------------------------------------------


def with_setup_cell(text: str) -> str:
    """``text`` (a MyST notebook) with its first code cell replaced by the canonical setup cell."""
    match = _CODE_CELL.search(text)
    if match is None:
        raise ValueError("a chapter must contain at least one code cell: the setup cell")
    return text[: match.start()] + setup_cell_block() + text[match.end() :]


def first_code_cell(text: str) -> str | None:
    match = _CODE_CELL.search(text)
    return None if match is None else match.group(0)


# ----- reader notebook -----------------------------------------------------------------------------------

# Code cells the book hides or folds: in the reader notebook they are present (and run) but folded, under a title.
# Colab folds a cell whose metadata says cellView "form" and shows its first line "# @title …"; JupyterLab and
# Notebook 7 fold a cell whose metadata says jupyter.source_hidden.
FOLDED_TITLES = {
    SETUP_TAG: "Setup: in Colab, install the companion package ({release}); elsewhere, nothing",
    "remove-cell": "Check the claims of the text above (hidden in the book)",  # a cell with asserts; else:
    "remove-cell, no assert": "Code hidden in the book",
    "remove-input": "Code for the output below (hidden in the book)",
    "hide-input": "Code (folded in the book)",
}
SOLUTION_TITLE = "Solution to Exercise {number} (folded: later cells use it)"


def folded(cell: nbformat.NotebookNode, title: str) -> nbformat.NotebookNode:
    """``cell`` with its code folded under ``title`` in Colab, JupyterLab and Notebook 7 (it still runs)."""
    magic, rest = re.match(r"((?:%%[^\n]*\n)?)(.*)", cell.source, re.DOTALL).groups()
    cell.source = f"{magic}# @title {title}\n{rest}"  # a cell magic stays first (Colab then shows the code)
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
    nb = jupytext.read(md)
    chapter = _chapter_or_none(md)
    citations = Citations(BOOK / "references.bib")
    render = Renderer(md.parent, chapter=chapter, citations=citations)
    out = nbformat.v4.new_notebook()
    out.metadata = copy.deepcopy(nb.metadata)
    out.metadata.pop("jupytext", None)
    out.metadata["colab"] = {"toc_visible": True}  # Colab opens with the table of contents shown
    pending: list[str] = []
    solution: list[str] | None = None  # the solution's text and code, shown in its <details> block
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
        for piece in gated_pieces(cell.source):
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
                pending.append(exercise_heading(number, render.markdown(piece.argument)))
            elif piece.name == "solution-start":
                flush()
                solution, solution_code = [], []
                number = numbers.get(piece.argument, number)
            elif piece.name == "solution-end":
                if solution is None:
                    raise ValueError(f"{md.name}: a solution-end has no solution-start")
                body = "\n\n".join(part for part in solution if part.strip())
                summary = f"<summary><b>Solution to Exercise {number}</b> (click to show)</summary>"
                out.cells.append(nbformat.v4.new_markdown_cell(f"<details>\n{summary}\n\n{body}\n\n</details>"))
                for code in solution_code:
                    out.cells.append(folded(code, SOLUTION_TITLE.format(number=number)))
                solution = None
        if solution is None:
            flush()
    if solution is not None:
        raise ValueError(f"{md.name}: a solution-start has no matching solution-end")
    flush()
    references = citations.reference_list()
    if references:
        out.cells.append(nbformat.v4.new_markdown_cell("## References\n\n" + references))
    hides = sum(c.cell_type == "code" and c.metadata.get("cellView") == "form" for c in out.cells) > 1  # not the setup
    out.cells.insert(1, nbformat.v4.new_markdown_cell(_reader_introduction(md, chapter, hides)))
    for i, cell in enumerate(out.cells):  # stable ids, so regenerating an unchanged chapter changes nothing
        cell["id"] = f"cell-{i}"
    return nbformat.writes(out) + "\n"


def _reader_code_cell(cell: nbformat.NotebookNode) -> nbformat.NotebookNode:
    tags = list(cell.metadata.get("tags", []))
    new = nbformat.v4.new_code_cell(cell.source, metadata={"tags": tags} if tags else {})
    title = next((FOLDED_TITLES[tag] for tag in FOLDED_TITLES if tag in tags), None)
    if "remove-cell" in tags and SETUP_TAG not in tags and not re.search(r"^\s*assert\b", cell.source, re.M):
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
        homework = (
            f"https://colab.research.google.com/github/{slug}/blob/{repo.ref}/{homework_path(md).relative_to(ROOT)}"
        )
        text += (
            " Each exercise's solution is folded under it (click to show), and its code runs folded too, since "
            f"later cells may use it. To do the exercises yourself, open the [homework notebook]({homework}).*"
        )
    else:
        text += "*"
    return text


# ----- homework notebook ---------------------------------------------------------------------------------


SOLUTION_BEGIN = "# BEGIN SOLUTION"
SOLUTION_END = "# END SOLUTION"
STUB_LINE = "raise NotImplementedError  # your code here"

SNAPSHOT_CELL = """\
# Keeps the chapter's variables safe while you try your code out (see the note at the top).
import companion.exercises.checking as _homework

_homework_saved = _homework.snapshot(globals())"""
RESTORE_CELL = "_homework.restore(globals(), _homework_saved, keep={keep!r});"


def stub_from_solution(source: str) -> str | None:
    """The student's stub for a solution cell: every ``# BEGIN SOLUTION`` … ``# END SOLUTION`` block replaced by
    ``raise NotImplementedError`` at the marker's indentation; None if the cell has no markers."""
    if SOLUTION_BEGIN not in source and SOLUTION_END not in source:
        return None
    out: list[str] = []
    inside = False
    for number, line in enumerate(source.split("\n"), 1):
        marker = line.strip()
        if marker == SOLUTION_BEGIN:
            if inside:
                raise ValueError(f"line {number}: {SOLUTION_BEGIN} inside another solution block")
            inside = True
            out.append(line[: len(line) - len(line.lstrip())] + STUB_LINE)
        elif marker == SOLUTION_END:
            if not inside:
                raise ValueError(f"line {number}: {SOLUTION_END} without {SOLUTION_BEGIN}")
            inside = False
        elif not inside:
            out.append(line)
    if inside:
        raise ValueError(f"{SOLUTION_BEGIN} without {SOLUTION_END}")
    return "\n".join(out)


def without_markers(source: str) -> str:
    """A solution cell as the book's reader sees it (the markers are comments; this drops them)."""
    return "\n".join(line for line in source.split("\n") if line.strip() not in (SOLUTION_BEGIN, SOLUTION_END))


def top_level_definitions(source: str) -> set[str]:
    """The functions and classes a code cell defines at its top level."""
    import ast

    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    return {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}


# What a listing gives away besides the asked-for object itself: a loop version of it, or the companion's general
# version of a function an exercise asks for under a narrower name.
GIVEAWAYS = {
    "skipgram_pairs": {"skipgram_pairs_loop"},
    "scaled_dot_product_attention": {"attention_loop"},
    "gpt_forward": {"GPT"},  # chapter 6: the class holds the forward pass the exercise asks for
    "learn_merges": {"train_bpe_naive", "train_bpe"},  # chapter 6: the companion's BPE training
    "causal_band_mask": {"band_mask"},
    "banded_softmax": {"banded_attention"},
    "FMMAttention": {"fmmformer_attention", "far_field_attention"},  # chapter 9: the blend the module calls
    "pair_inputs": {"truncate_pair"},  # chapter 7: the truncation rule
    "span_head_loss": {"SpanHead", "span_loss"},  # chapter 7: the head and the unmasked loss
    "squad_f1": {"normalize_answer"},  # chapter 7: half of the answer
    "linear_attention_step": {"causal_linear_attention_recurrent"},  # chapter 8: the step inside its loop
    "linear_attention_rnn": {"causal_linear_attention_recurrent"},  # chapter 8: the recurrence itself
    # chapter 10: the features and the module that holds them
    "causal_performer_attention": {"positive_softmax_features", "PerformerFeatures"},
}


def asked_names(nb: nbformat.NotebookNode) -> set[str]:
    """The names the chapter's exercises ask the student to write (defined in stubs or marked solutions)."""
    names: set[str] = set()
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        stub = stub_from_solution(cell.source)
        if stub is not None:
            names |= top_level_definitions(stub)
        elif STUB_TAG in cell.metadata.get("tags", []):
            names |= top_level_definitions(cell.source)
    return names


def homework_notebook(md: Path) -> str:
    """The student notebook for chapter ``md``: solutions out, stubs in, exercises as headings.

    In the homework (not in the book), listings and code cells that define what an exercise asks for are left
    out; each exercise's stub is preceded by a cell that notes the chapter's variables and its checker followed
    by one that puts back any the student's experiments replaced; citations become "(Author, year)" with a
    reference list at the end.
    """
    nb = jupytext.read(md)
    chapter = chapter_number(md)
    title = _title(nb)
    out = nbformat.v4.new_notebook()
    out.metadata = copy.deepcopy(nb.metadata)
    out.metadata.pop("jupytext", None)
    asked = asked_names(nb)
    hidden = asked | {g for name in asked for g in GIVEAWAYS.get(name, ())}
    citations = Citations(BOOK / "references.bib")
    render = Renderer(md.parent, chapter=chapter, citations=citations, hide=hidden)
    in_solution = False
    exercise = 0
    skipped_title = False
    keep: list[str] = []
    pen_and_paper = False
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            pieces, pen_and_paper = _answer_points(cell.source, pen_and_paper)
            for piece, answer_after in pieces:
                text, in_solution, exercise = _strip_markdown(piece, in_solution, exercise, chapter)
                if not skipped_title:
                    text = re.sub(r"\A\s*# [^\n]*\n?", "", text)  # the homework has its own title
                    skipped_title = True
                text = render.markdown(text)
                if text.strip():
                    out.cells.append(nbformat.v4.new_markdown_cell(text.strip("\n")))
                if answer_after:
                    out.cells.append(nbformat.v4.new_markdown_cell(ANSWER_CELL, metadata={"tags": [ANSWER_TAG]}))
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
            out.cells.append(nbformat.v4.new_code_cell(SNAPSHOT_CELL, metadata={"tags": ["homework-snapshot"]}))
            out.cells.append(nbformat.v4.new_code_cell(stub, metadata={"tags": [STUB_TAG, *tags]}))
            continue
        if in_solution or top_level_definitions(cell.source) & hidden:
            continue
        new = nbformat.v4.new_code_cell(cell.source)
        checker = _CHECKER_CALL.match(cell.source)
        if checker:
            # Before the student starts, the checker must say so; nbval compares this output (CI).
            verdict = _checker(checker.group(1)).not_attempted_message()
            new.outputs = [nbformat.v4.new_output("stream", name="stdout", text=verdict + "\n")]
            new.execution_count = 1  # nbval only compares the outputs of cells that were run
            tags.append(NBVAL_CHECK_OUTPUT)
        if tags:
            new.metadata["tags"] = tags
        out.cells.append(new)
        if checker and keep:
            restore = RESTORE_CELL.format(keep=keep)
            out.cells.append(nbformat.v4.new_code_cell(restore, metadata={"tags": ["homework-restore"]}))
            keep = []
    if in_solution:
        raise ValueError(f"{md.name}: a solution-start has no matching solution-end")
    references = citations.reference_list()
    if references:
        out.cells.append(nbformat.v4.new_markdown_cell("## References\n\n" + references))
    checkers = sum(1 for c in out.cells if c.cell_type == "code" and _CHECKER_CALL.match(c.source))
    out.cells.insert(0, nbformat.v4.new_markdown_cell(_introduction(title, chapter, exercise, checkers)))
    for i, cell in enumerate(out.cells):  # stable ids, so regenerating an unchanged chapter changes nothing
        cell["id"] = f"cell-{i}"
    return nbformat.writes(out) + "\n"


# How the instructor's grader (companion-grade) reads an answer; see README, "Grading homework".
GRADING_NOTE = (
    "When your notebook is graded, each exercise is checked on its own: the grader takes your function or class, "
    "the helper functions and classes it uses, your imports, and constants set to a plain value (`D = 64`); "
    "nothing else of the notebook is run. Whatever your answer needs must therefore be inside it, not in a "
    "variable set by another cell (`W = torch.randn(3, 3)`)."
)

# A pen-and-paper question gets a markdown cell for the answer right after it; the grader collects the cells
# that start with "**Your answer" into the instructor's feedback.
ANSWER_CELL = (
    "**Your answer:**\n\n"
    "*(Double-click to write your answer here, in words and math between dollar signs: $\\partial L / \\partial E$.)*"
)
ANSWER_TAG = "homework-answer"
_PEN_AND_PAPER_START = re.compile(r"^(`{3,})\{exercise-start\}(.*)$")
_EXERCISE_END = re.compile(r"^(`{3,})\{exercise-end\}")


def _answer_points(source: str, pending: bool) -> tuple[list[tuple[str, bool]], bool]:
    """``source`` cut after the end of each pen-and-paper exercise: ``(piece, answer cell after it)`` pairs,
    and whether a pen-and-paper exercise is still open at the end (its end comes in a later cell)."""
    lines, pieces, start, i = source.split("\n"), [], 0, 0
    while i < len(lines):
        opened, ended = _PEN_AND_PAPER_START.match(lines[i]), _EXERCISE_END.match(lines[i])
        if opened:
            pending = "pen and paper" in opened.group(2).lower()
        elif ended and pending:
            fence, j = ended.group(1), i + 1
            while j < len(lines) and lines[j].strip() != fence:
                j += 1
            pieces.append(("\n".join(lines[start : j + 1]), True))
            start, i, pending = j + 1, j, False
        i += 1
    if start < len(lines) or not pieces:
        pieces.append(("\n".join(lines[start:]), False))
    return pieces, pending


def _introduction(title: str, chapter: int, exercises: int, checkers: int) -> str:
    repo = repository()
    plural = "s" if exercises != 1 else ""
    return (
        f"# Homework: {title}\n\n"
        f"This is the student version of chapter {chapter} of the book. It has **{exercises} exercise{plural}**; "
        f"{checkers} of them have a checker cell. Each starts from a stub that raises `NotImplementedError`: "
        "replace the stub with your code and run the checker cell below it. It says **PASSED**, **NOT ATTEMPTED "
        "YET**, or **WRONG** (with the input, what was expected, what came, and a hint). **You are done when "
        "every checker says PASSED.**\n\n"
        "Try your code out freely, in the exercise's cell or in new cells: the chapter's own cells use the "
        "companion's reference implementations, and the cell after each checker puts back any of the chapter's "
        "variables (`x`, `model`, `emb`, `torch`, …) that your experiments replaced, so the cells below still "
        "run. Keep the name the exercise asks for (`def one_hot(...)`, say): the checker looks for it.\n\n"
        f"{GRADING_NOTE}\n\n"
        f"The full chapter, with solutions, is at {repo.url}."
    )


def checker_call(source: str) -> str | None:
    """The checker's name if ``source`` is a checker cell (``check_x(x)``), else None."""
    m = _CHECKER_CALL.match(source)
    return m.group(1) if m else None


def _checker(name: str):
    """The :class:`~companion.exercises.checking.Checker` called ``name`` in a ``companion.exercises`` module."""
    import importlib
    import pkgutil

    import companion.exercises
    from companion.exercises.checking import Checker

    found = []
    for module in pkgutil.iter_modules(companion.exercises.__path__):
        obj = getattr(importlib.import_module(f"companion.exercises.{module.name}"), name, None)
        if isinstance(obj, Checker):
            found.append(obj)
    if len(found) != 1:
        raise ValueError(f"expected one checker called {name} in companion.exercises, found {len(found)}")
    return found[0]


def _title(nb: nbformat.NotebookNode) -> str:
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            m = re.search(r"^# (.+)$", cell.source, re.MULTILINE)
            if m:
                return m.group(1).strip()
    return "Chapter"


def _strip_markdown(source: str, in_solution: bool, exercise: int, chapter: int) -> tuple[str, bool, int]:
    """Remove solution blocks and turn gated exercise directives into headings."""
    out: list[str] = []
    for piece in gated_pieces(source):
        if isinstance(piece, str):
            if not in_solution:
                out.append(piece)
        elif piece.name == "exercise-start":
            exercise += 1
            if not in_solution:
                out.append(exercise_heading(f"{chapter}.{exercise}", piece.argument))
        elif piece.name in ("solution-start", "solution-end"):
            in_solution = piece.name == "solution-start"
    return "\n".join(out), in_solution, exercise


# ----- MyST → the Markdown that Jupyter and Colab render ------------------------------------------------

_DIRECTIVE = re.compile(r"^(?P<fence>`{3,}|:{3,})\{(?P<name>[\w:-]+)\}[ \t]*(?P<argument>.*)$")
_PLAIN_FENCE = re.compile(r"^(?P<fence>`{3,}|~{3,})")
_OPTION = re.compile(r"^:(?P<name>[\w-]+):[ \t]*(?P<value>.*)$")
_TARGET = re.compile(r"^\((?P<label>[^()\s]+)\)=[ \t]*$")
_MATH_LABEL = re.compile(r"^(?P<math>.*\$\$)[ \t]*\((?P<label>[^()\s]+)\)[ \t]*$")
_ROLE = re.compile(r"\{(?P<name>[\w:+-]+)\}`(?P<content>[^`]*)`")
_HEADING = re.compile(r"^#{1,6} +(?P<text>.+?)\s*$")
GATED = ("exercise-start", "exercise-end", "solution-start", "solution-end")
ADMONITIONS = {
    "admonition": "",
    "note": "Note",
    "tip": "Tip",
    "hint": "Hint",
    "important": "Important",
    "seealso": "See also",
    "attention": "Attention",
    "caution": "Caution",
    "warning": "Warning",
    "danger": "Danger",
    "error": "Error",
}


@dataclass(frozen=True)
class Directive:
    """A MyST directive: ```` ```{name} argument ````, its ``:option:`` lines, its body (not yet rendered)."""

    name: str
    argument: str
    options: dict[str, str]
    body: str


@dataclass(frozen=True)
class Verbatim:
    """A plain code fence (```` ```python ````), copied as it is."""

    text: str


def myst_blocks(text: str) -> list[str | Directive | Verbatim]:
    """``text`` cut into directives, plain code fences and runs of other lines (each run one string)."""
    lines = text.split("\n")
    out: list[str | Directive | Verbatim] = []
    run: list[str] = []
    i = 0
    while i < len(lines):
        directive = _DIRECTIVE.match(lines[i])
        plain = None if directive else _PLAIN_FENCE.match(lines[i])
        if directive is None and plain is None:
            run.append(lines[i])
            i += 1
            continue
        fence = (directive or plain)["fence"]
        closing = re.compile(rf"^{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
        j = next((k for k in range(i + 1, len(lines)) if closing.match(lines[k])), None)
        if j is None:
            raise ValueError(f"the fence {lines[i]!r} is never closed")
        if run:
            out.append("\n".join(run))
            run = []
        if directive is None:
            out.append(Verbatim("\n".join(lines[i : j + 1])))
        else:
            options, body = _options(lines[i + 1 : j])
            out.append(Directive(directive["name"], directive["argument"].strip(), options, "\n".join(body)))
        i = j + 1
    if run:
        out.append("\n".join(run))
    return out


def _options(lines: list[str]) -> tuple[dict[str, str], list[str]]:
    """A directive's options (``:name: value`` lines, or a YAML block between ``---`` lines) and its body."""
    options: dict[str, str] = {}
    k = 0
    if lines and lines[0].strip() == "---":
        end = next((n for n in range(1, len(lines)) if lines[n].strip() == "---"), None)
        if end is None:
            raise ValueError("a directive's YAML options (---) are never closed")
        options = {str(key): str(value) for key, value in (yaml.safe_load("\n".join(lines[1:end])) or {}).items()}
        k = end + 1
    while k < len(lines) and (m := _OPTION.match(lines[k])):
        options[m["name"]] = m["value"].strip()
        k += 1
    body = lines[k:]
    while body and not body[0].strip():
        body.pop(0)
    while body and not body[-1].strip():
        body.pop()
    return options, body


def gated_pieces(source: str) -> list[str | Directive]:
    """A markdown cell cut at sphinx-exercise's gated fences (``exercise-start`` … ``solution-end``): runs of
    other lines, and those fences as directives (options parsed, no body)."""
    out: list[str | Directive] = []
    run: list[str] = []
    lines = source.split("\n")
    i = 0
    while i < len(lines):
        m = _FENCE_OPEN.match(lines[i])
        if m is None:
            run.append(lines[i])
            i += 1
            continue
        fence, name, argument = m.groups()
        j = i + 1  # the directive block runs to its closing fence; its options (":label:", ":class:") go with it
        while j < len(lines) and lines[j].strip() != fence:
            j += 1
        if run:
            out.append("\n".join(run))
            run = []
        options, _ = _options(lines[i + 1 : j])
        out.append(Directive(name, argument.strip(), options, ""))
        i = j + 1
    if run:
        out.append("\n".join(run))
    return out


def exercise_heading(number: str, title: str) -> str:
    """The heading an exercise gets in a notebook, numbered as in the book."""
    return f"### Exercise {number}" + (f" ({title})" if title else "")


@dataclass(frozen=True)
class Target:
    """Where a label points in the rendered book: a page (``book/04_attention``), an anchor and a link text."""

    page: str
    anchor: str
    text: str


def site_url() -> str:
    """The address of the rendered book (``html.baseurl`` in ``_config.yml``), ending in ``/``."""
    config = yaml.safe_load(CONFIG.read_text())
    url = (config.get("html") or {}).get("baseurl")
    if not url:
        raise ValueError("_config.yml needs html.baseurl, the address of the rendered book (for notebook links)")
    return url.rstrip("/") + "/"


def page_url(target: Target) -> str:
    return f"{site_url()}{target.page}.html" + (f"#{target.anchor}" if target.anchor else "")


def _chapter_or_none(md: Path) -> int | None:
    """The chapter's number, or None for a page outside the numbered parts (the preface)."""
    try:
        return chapter_number(md)
    except ValueError:
        return None


def _number(chapter: int | None, k: int) -> str:
    return f"{chapter}.{k}" if chapter else str(k)


def targets() -> dict[str, Target]:
    """Every page of ``book/`` (``book/04_attention``) and every label in it, with its link text as the book
    shows it: a section's heading, "Theorem 10.2", "Exercise 4.1", "Figure 3.1", an equation's "(5.1)"."""
    files = tuple((p, p.stat().st_mtime_ns) for p in sorted(BOOK.glob("*.md")))
    return dict(_targets(files, ROOT))


@functools.lru_cache(maxsize=4)
def _targets(files: tuple[tuple[Path, int], ...], root: Path) -> tuple[tuple[str, Target], ...]:
    found: dict[str, Target] = {}
    for md, _ in files:
        text = md.read_text()
        page = md.relative_to(root if md.is_relative_to(root) else md.parents[1]).with_suffix("").as_posix()
        heading = next((m["text"] for line in text.split("\n") if (m := _HEADING.match(line))), md.stem)
        found[page] = Target(page, "", heading)
        chapter = _chapter_or_none(md)
        counts: dict[str, int] = {}

        def visit(blocks: list[str | Directive | Verbatim], page: str, chapter: int | None, counts: dict) -> None:
            for block in blocks:
                if isinstance(block, str):
                    lines = block.split("\n")
                    for n, line in enumerate(lines):
                        target = _TARGET.match(line)
                        after = [h["text"] for rest in lines[n + 1 :] if (h := _HEADING.match(rest))]
                        if target and after:
                            found[target["label"]] = Target(page, make_id(target["label"]), after[0])
                    continue
                if not isinstance(block, Directive):
                    continue
                kind = {"figure": "Figure", "exercise-start": "Exercise", "math": "equation"}.get(block.name)
                if block.name.startswith("prf:") and block.name != "prf:proof":
                    kind = block.name[4:].capitalize()
                if kind:
                    counts[kind] = counts.get(kind, 0) + 1
                    label = block.options.get("label") or block.options.get("name")
                    number = _number(chapter, counts[kind])
                    if label and kind == "equation":
                        found[label] = Target(page, f"equation-{make_id(label)}", f"({number})")
                    elif label:
                        found[label] = Target(page, make_id(label), f"{kind} {number}")
                if block.body and block.name != "code-cell":
                    visit(myst_blocks(block.body), page, chapter, counts)

        visit(myst_blocks(text), page, chapter, counts)
    return tuple(found.items())


class Renderer:
    """Rewrites the MyST of one chapter that Jupyter and Colab would show as raw text into plain Markdown.

    - ``literalinclude`` → a Python code block holding the listing, cut by Sphinx's own reader
      (``sphinx.directives.code.LiteralIncludeReader``: ``:pyobject:``, ``:start-at:``, ``:dedent:``, …), the
      Sphinx roles of its docstrings (``:class:`~a.B``` → ``B``) reduced to their text; or, for an object in
      ``hide`` (the homework), a line saying it is left out;
    - ``prf:`` directives → "**Theorem 10.2 (title).** body", proofs "*Proof.* body ∎"; admonitions → a quoted
      block with a bold title (a ``<details>`` block for a dropdown); figures and images → Markdown images with
      absolute addresses; ``math`` and ``code-block`` → ``$$`` and fenced code;
    - ``{cite}`` → "(Author, year)" (``{cite:t}`` → "Author (year)"), collected in ``citations`` for the
      reference list; ``{doc}``, ``{ref}``, ``{numref}``, ``{eq}``, ``{prf:ref}`` → links to the rendered book
      (``html.baseurl``), reading as the book reads; ``{math}`` → ``$…$``; other inline roles → their text;
    - ``(label)=`` targets and ``%`` comment lines disappear.

    Anything else (an unknown directive or role) is an error, so that no raw MyST reaches a notebook.
    """

    def __init__(
        self,
        base: Path,
        *,
        chapter: int | None = None,
        citations: Citations | None = None,
        hide: set[str] | frozenset[str] = frozenset(),
    ) -> None:
        self.base = base
        self.chapter = chapter
        self.citations = citations if citations is not None else Citations(None)
        self.hide = frozenset(hide)
        self.counts: dict[str, int] = {}
        self.page = base.resolve().relative_to(ROOT).as_posix() if base.resolve().is_relative_to(ROOT) else ""

    def markdown(self, text: str) -> str:
        parts = []
        for block in myst_blocks(text):
            if isinstance(block, Directive):
                parts.append(self.directive(block))
            elif isinstance(block, Verbatim):
                parts.append(block.text)
            else:
                parts.append(self.prose(block))
        return "\n".join(parts)

    def prose(self, text: str) -> str:
        lines = []
        for line in text.split("\n"):
            if _TARGET.match(line) or line.startswith("%"):
                continue
            labelled = _MATH_LABEL.match(line)
            lines.append(labelled["math"] if labelled else line)
        return _ROLE.sub(lambda m: self.role(m["name"], m["content"]), "\n".join(lines))

    # --- directives

    def directive(self, d: Directive) -> str:
        if d.name == "literalinclude":
            return self.listing(d)
        if d.name.startswith("prf:"):
            return self.proof(d)
        if d.name in ADMONITIONS or d.name == "dropdown":
            return self.admonition(d)
        if d.name in ("figure", "image"):
            return self.image(d)
        if d.name == "math":
            return f"$$\n{d.body}\n$$"
        if d.name in ("code-block", "code", "sourcecode"):
            return f"```{d.argument}\n{d.body}\n```"
        if d.name in ("margin", "sidebar", "epigraph", "div", "container"):
            return self.markdown(d.body)
        raise ValueError(f"no notebook rendering for the MyST directive {{{d.name}}}: add one to tools/notebooks.py")

    def listing(self, d: Directive) -> str:
        from sphinx.directives.code import LiteralIncludeReader

        name = d.options.get("pyobject")
        if name in self.hide:
            return f"*(The companion's `{name}` is left out of the homework: it gives an exercise away.)*"
        path = ROOT / d.argument[1:] if d.argument.startswith("/") else (self.base / d.argument).resolve()
        options: dict[str, object] = {k: v for k, v in d.options.items() if k not in ("caption", "name", "class")}
        if "dedent" in options:
            options["dedent"] = int(options["dedent"]) if options["dedent"] else None
        config = SimpleNamespace(source_encoding="utf-8-sig")
        code, _ = LiteralIncludeReader(str(path), options, config).read()
        code = _SPHINX_ROLE.sub(_role_text, code)
        shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name
        language = d.options.get("language", "python" if path.suffix == ".py" else "")
        origin = f"# from {shown}\n" if language == "python" else ""
        return f"```{language}\n{origin}{code.rstrip()}\n```"

    def proof(self, d: Directive) -> str:
        kind = d.name[4:]
        body = self.markdown(d.body)
        if kind == "proof":
            end = "\n\n∎" if body.rstrip().endswith("$$") else " ∎"
            return f"*Proof.* {body}{end}"
        self.counts[kind] = self.counts.get(kind, 0) + 1
        title = self.markdown(d.argument)
        head = f"**{kind.capitalize()} {_number(self.chapter, self.counts[kind])}"
        head += f" ({title}).**" if title else ".**"
        return head + ("\n\n" if body.startswith("$$") else " ") + body

    def admonition(self, d: Directive) -> str:
        title = self.markdown(d.argument) or ADMONITIONS.get(d.name, "") or d.name.capitalize()
        body = self.markdown(d.body)
        if d.name == "dropdown" or "dropdown" in d.options.get("class", "").split():
            return f"<details>\n<summary><b>{title}</b></summary>\n\n{body}\n\n</details>"
        text = f"**{title}.** {body}"
        if "$$" in body:  # display math cannot be quoted: Jupyter would hand the "> " to MathJax
            return text
        return "\n".join(f"> {line}".rstrip() for line in text.split("\n"))

    def image(self, d: Directive) -> str:
        source = d.argument
        if not re.match(r"https?://", source):
            path = ROOT / source[1:] if source.startswith("/") else (self.base / source).resolve()
            repo = repository()
            slug = repo.url.removeprefix("https://github.com/")
            source = f"https://raw.githubusercontent.com/{slug}/{release()}/{path.relative_to(ROOT).as_posix()}"
        caption = self.markdown(d.body) if d.name == "figure" else ""
        alt = d.options.get("alt") or caption.split("\n")[0] or Path(source).name
        return f"![{alt}]({source})" + (f"\n\n*{caption}*" if caption else "")

    # --- roles

    def role(self, name: str, content: str) -> str:
        if name in ("cite", "cite:p", "cite:ps", "cite:t", "cite:ts"):
            return self.citations.cite(content, textual=name.startswith("cite:t"))
        if name == "math":
            return f"${content}$"
        explicit = re.fullmatch(r"(?P<text>.*?)\s*<(?P<target>[^<>]*)>", content, re.DOTALL)
        text, target = (explicit["text"], explicit["target"]) if explicit else (None, content)
        if name == "doc":
            page = (
                target[1:]
                if target.startswith("/")
                else os.path.normpath(f"{self.page}/{target}" if self.page else target)
            )
            found = targets().get(page)
            return f"[{text or (found.text if found else target)}]({page_url(Target(page, '', ''))})"
        if name in ("ref", "numref", "eq", "prf:ref"):
            found = targets().get(target)
            if found is None:  # not a label of the book (a test's text): keep the words
                return text or target
            shown = text or found.text
            if name == "numref" and text and "%s" in text:
                shown = text.replace("%s", found.text.split()[-1])
            return f"[{shown}]({page_url(found)})"
        if name in ("term", "abbr", "sub", "sup", "code", "kbd", "samp", "file", "command", "guilabel"):
            plain = re.sub(r"\s*\([^)]*\)$", "", content) if name == "abbr" else content
            return {"sub": f"<sub>{plain}</sub>", "sup": f"<sup>{plain}</sup>"}.get(name) or (
                f"`{plain}`" if name in ("code", "kbd", "samp", "file", "command") else (text or plain)
            )
        raise ValueError(f"no notebook rendering for the MyST role {{{name}}}: add one to tools/notebooks.py")


def for_jupyter(
    text: str, base: Path, *, hide: set[str] | frozenset[str] = frozenset(), citations: Citations | None = None
) -> str:
    """``text`` (MyST) as plain Markdown: see :class:`Renderer`."""
    return Renderer(base, hide=hide, citations=citations).markdown(text)


_SPHINX_ROLE = re.compile(
    r":(?:py:)?(?:func|class|meth|attr|mod|obj|data|exc|const|ref|doc|term):`([^`<]*?)(?:\s*<[^>]*>)?`"
)


def _role_text(m: re.Match[str]) -> str:
    """``:class:`~a.b.C``` → ``C``, ``:func:`a.f``` → ``a.f``."""
    target = m.group(1)
    return target[1:].split(".")[-1] if target.startswith("~") else target


class Citations:
    """The book's bibliography (``references.bib``, read by pybtex): citations as "(Author, year)", and the
    list of the works cited, formatted by pybtex's ``unsrt`` style as on the book's bibliography page."""

    def __init__(self, bib: Path | None) -> None:
        from pybtex.database import parse_file

        self.entries = parse_file(str(bib)).entries if bib is not None and bib.exists() else {}
        self.used: list[str] = []

    def label(self, key: str) -> tuple[str, str]:
        """The authors' last names as the book cites them ("Vaswani et al.", "Rahimi and Recht") and the year."""
        entry = self.entries.get(key)
        if entry is None:
            return key, "n.d."
        people = entry.persons.get("author") or entry.persons.get("editor") or []
        last = [" ".join(part.render_as("text") for part in p.rich_last_names) for p in people]
        if len(last) == 1 or (len(last) == 2 and last[1] != "others"):
            names = " and ".join(last)
        else:
            names = f"{last[0]} et al." if last else key
        return names, entry.fields.get("year", "n.d.")

    def cite(self, keys: str, *, textual: bool = False) -> str:
        parts = []
        for key in (k.strip() for k in keys.split(",") if k.strip()):
            if key not in self.used:
                self.used.append(key)
            names, year = self.label(key)
            parts.append(f"{names} ({year})" if textual else f"{names}, {year}")
        return "; ".join(parts) if textual else f"({'; '.join(parts)})"

    def reference_list(self) -> str:
        """A Markdown list of the works cited so far, by author and year."""
        from pybtex.plugin import find_plugin

        style = find_plugin("pybtex.style.formatting", "unsrt")()
        known = [self.entries[k] for k in self.used if k in self.entries]
        for entry in known:  # pybtex does not read \url{...} in a note
            for field, value in entry.fields.items():
                entry.fields[field] = re.sub(r"\\url\{([^}]*)\}", r"\1", value)
        formatted = {e.key: _plain_html(e.text.render_as("html")) for e in style.format_entries(known)}
        lines = []
        for key in sorted(self.used, key=lambda k: (self.label(k)[0].lower(), self.label(k)[1], k)):
            lines.append(f"- {formatted[key]}" if key in formatted else f"- {key} (not in the bibliography)")
        return "\n".join(lines)


def _plain_html(html: str) -> str:
    """pybtex's HTML on one line, without its (nested) ``bibtex-protected`` spans, which only mark case."""
    while True:
        plain = re.sub(r'<span class="bibtex-protected">([^<]*)</span>', r"\1", html)
        if plain == html:
            return " ".join(plain.split())
        html = plain


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
    return [md for md in chapters() if first_code_cell(md.read_text()) != setup_cell_block()]


def stale_files() -> list[Path]:
    return [path for path, text in expected_files().items() if not path.exists() or path.read_text() != text]


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
    if config_with_release(config) != config:  # first: the notebooks link to the ref it names
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
        problems = [f"setup cell differs from the template: {p.relative_to(ROOT)}" for p in stale_setup_cells()]
        problems += [f"stale or missing: {p.relative_to(ROOT)}" for p in stale_files()]
        problems += [f"orphan (no chapter source): {p.relative_to(ROOT)}" for p in orphans()]
        for line in problems:
            print(line)
        if problems:
            print("Run `make sync` (python tools/notebooks.py sync) and commit the result.")
        return 1 if problems else 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
