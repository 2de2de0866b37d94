"""The homework notebooks as a student meets them: they never contain the code they ask for, a student's
experiments do not break the chapter's later cells, stubs come from the solutions' markers, citations read
"(Author, year)" with a reference list, and the first cell counts the exercises."""

import ast
import re

import nbformat
import pytest
from nbclient import NotebookClient

from tools import notebooks

HOMEWORK = [
    notebooks.homework_path(md)
    for md in notebooks.chapters()
    if notebooks.has_exercises(md)
]


def _real_definitions(source: str) -> dict[str, bool]:
    """Top-level def/class names of ``source``, each with whether it is more than a NotImplementedError stub."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return {}
    out: dict[str, bool] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            segment = ast.get_source_segment(source, node) or ""
            out[node.name] = (
                out.get(node.name, False) or "NotImplementedError" not in segment
            )
    return out


def _fenced_code(markdown: str) -> list[str]:
    """The bodies of the code fences of a markdown cell (listings included from the companion)."""
    return [
        block.split("\n", 1)[1] if "\n" in block else ""
        for block in markdown.split("```")[1::2]
    ]


def leaks(nb: nbformat.NotebookNode) -> set[str]:
    """Names a stub asks for that some cell (code, or a listing in markdown) defines for real."""
    asked = set()
    for cell in nb.cells:
        if cell.cell_type == "code" and "NotImplementedError" in cell.source:
            asked |= {
                name
                for name, real in _real_definitions(cell.source).items()
                if not real
            }
    found = set()
    for cell in nb.cells:
        sources = (
            [cell.source] if cell.cell_type == "code" else _fenced_code(cell.source)
        )
        for source in sources:
            found |= {
                name
                for name, real in _real_definitions(source).items()
                if real and name in asked
            }
    return found


@pytest.mark.parametrize("path", HOMEWORK, ids=lambda p: p.stem)
def test_no_homework_contains_the_code_it_asks_for(path):
    nb = nbformat.read(path, as_version=4)
    assert leaks(nb) == set()
    # nor a loop version of it that gives most of it away
    asked = {
        n
        for c in nb.cells
        if c.cell_type == "code"
        for n in _real_definitions(c.source)
        if "Not" in c.source
    }
    everything = "\n".join(c.source for c in nb.cells)
    for name in asked:
        for giveaway in notebooks.GIVEAWAYS.get(name, ()):
            assert f"def {giveaway}(" not in everything


def _withheld_names(nb: nbformat.NotebookNode) -> set[str]:
    """The short names of what the notebook's checkers withhold (the companion's own answers)."""
    names = set()
    for cell in nb.cells:
        call = notebooks.checker_call(cell.source) if cell.cell_type == "code" else None
        if call:
            for dotted in notebooks._checker(call).withhold:
                parts = dotted.split(".")
                # a method: its class
                names.add(parts[-2] if parts[-2][:1].isupper() else parts[-1])
    return names


@pytest.mark.parametrize("path", HOMEWORK, ids=lambda p: p.stem)
def test_no_homework_lists_the_companions_own_answer(path):
    """What a checker withholds while the student's code runs is not listed in the homework either."""
    nb = nbformat.read(path, as_version=4)
    listed = set()
    for cell in nb.cells:
        for source in (
            [cell.source] if cell.cell_type == "code" else _fenced_code(cell.source)
        ):
            listed |= {name for name, real in _real_definitions(source).items() if real}
    assert listed & _withheld_names(nb) == set()


def test_the_leak_detector_finds_a_listing_and_a_cell():
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell(
            "The companion's:\n\n```python\ndef one_hot(ids, n):\n    return ids\n```"
        ),
        nbformat.v4.new_code_cell(
            "def one_hot(ids, n):\n    raise NotImplementedError  # your code here"
        ),
        nbformat.v4.new_code_cell("class Embedding:\n    pass"),
        nbformat.v4.new_code_cell(
            "class Embedding:\n    def __init__(self):\n        raise NotImplementedError"
        ),
    ]
    assert leaks(nb) == {"one_hot", "Embedding"}


@pytest.mark.parametrize("path", HOMEWORK, ids=lambda p: p.stem)
def test_the_first_cell_counts_the_exercises(path):
    md = notebooks.BOOK / f"{path.stem}.md"
    exercises = md.read_text().count("{exercise-start}")
    intro = nbformat.read(path, as_version=4).cells[0].source
    assert f"**{exercises} exercise" in intro
    assert "You are done when every checker says PASSED." in intro


@pytest.mark.parametrize("path", HOMEWORK, ids=lambda p: p.stem)
def test_no_raw_citation_keys_or_roles(path):
    nb = nbformat.read(path, as_version=4)
    keys = set(
        re.findall(
            r"@\w+\s*\{\s*([^,\s]+)", (notebooks.BOOK / "references.bib").read_text()
        )
    )
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    assert not re.search(r"\{(cite|ref|numref|doc|eq)[:\w]*\}`", text)
    assert not re.search(r":(func|class|meth|attr|mod):`", text)
    assert not {k for k in keys if f"[{k}]" in text or f"({k}" in text}
    if "et al., " in text or re.search(r"\(\w+, \d{4}\)", text):
        assert nb.cells[-1].source.startswith("## References")


# --- golden expectations for the generator ------------------------------------------------------------------


SOLUTION = '''\
from torch import nn


class Scale(nn.Module):
    """y = a x."""

    def __init__(self, a: float):
        super().__init__()
        # BEGIN SOLUTION
        self.a = a
        # END SOLUTION

    def forward(self, x):
        # BEGIN SOLUTION
        return self.a * x
        # END SOLUTION'''

STUB = '''\
from torch import nn


class Scale(nn.Module):
    """y = a x."""

    def __init__(self, a: float):
        super().__init__()
        raise NotImplementedError  # your code here

    def forward(self, x):
        raise NotImplementedError  # your code here'''


def test_the_stub_comes_from_the_solution():
    assert notebooks.stub_from_solution(SOLUTION) == STUB
    assert notebooks.stub_from_solution("x = 1") is None
    assert "BEGIN" not in notebooks.without_markers(SOLUTION)
    for broken in (
        "# BEGIN SOLUTION\nx = 1",
        "x = 1\n# END SOLUTION",
        "# BEGIN SOLUTION\n# BEGIN SOLUTION",
    ):
        with pytest.raises(ValueError, match="SOLUTION"):
            notebooks.stub_from_solution(broken)


def test_citations_read_author_and_year_with_a_reference_list():
    citations = notebooks.Citations(notebooks.BOOK / "references.bib")
    text = notebooks.for_jupyter(
        "As {cite}`vaswani2017attention` showed, and {cite:t}`mikolov2013efficient` before; "
        "see {cite:p}`pennington2014glove,mikolov2013efficient` and {ref}`the mask <sec-mask>`.",
        notebooks.BOOK,
        citations=citations,
    )
    assert text == (
        "As (Vaswani et al., 2017) showed, and Mikolov et al. (2013) before; "
        "see (Pennington et al., 2014; Mikolov et al., 2013) and the mask."
    )
    references = citations.reference_list().split("\n")
    assert len(references) == 3  # by author: Mikolov, Pennington, Vaswani
    assert references[0].startswith(
        "- Tomas Mikolov, Kai Chen, Greg Corrado, and Jeffrey Dean."
    )
    assert references[2].startswith("- Ashish Vaswani, Noam Shazeer,")
    assert "Łukasz Kaiser" in references[2] and " 2017." in references[2]
    assert (
        "Attention is all you need. In <em>Advances in Neural Information Processing Systems</em>"
        in references[2]
    )


def test_listings_lose_their_roles_and_asked_objects_disappear(tmp_path):
    source = tmp_path / "mod.py"
    source.write_text(
        'def f(x):\n    """Like :func:`torch.exp`, returns a :class:`~companion.x.Y`."""\n    return x\n'
    )
    # relative to the page, as in Sphinx
    listing = "```{literalinclude} mod.py\n:pyobject: f\n```"
    shown = notebooks.for_jupyter(listing, tmp_path)
    assert "Like torch.exp, returns a Y." in shown and ":func:" not in shown
    hidden = notebooks.for_jupyter(listing, tmp_path, hide={"f"})
    assert "def f" not in hidden and "`f` is left out of the homework" in hidden


@pytest.mark.parametrize("path", HOMEWORK, ids=lambda p: p.stem)
def test_every_stub_is_guarded_by_a_snapshot_and_a_restore(path):
    cells = nbformat.read(path, as_version=4).cells
    for i, cell in enumerate(cells):
        if notebooks.STUB_TAG in cell.metadata.get("tags", []):
            assert cells[i - 1].source == notebooks.SNAPSHOT_CELL
            names = sorted(notebooks.top_level_definitions(cell.source))
            restore = next(
                c for c in cells[i:] if "homework-restore" in c.metadata.get("tags", [])
            )
            assert restore.source == notebooks.RESTORE_CELL.format(keep=names)


# --- a student who tries things out does not break the notebook ---------------------------------------------

HOSTILE = """\
# what a student might write while trying an answer out
emb = ids = attention = x = model = F = torch = nn = np = plt = vocab = text = lm = masks = 0
globals().pop("sentence", None)"""


@pytest.mark.slow  # runs two homework notebooks in a kernel
@pytest.mark.parametrize("chapter", ["01_words_to_vectors", "04_attention"])
def test_a_students_experiments_do_not_break_later_cells(chapter):
    nb = nbformat.read(notebooks.HOMEWORK / f"{chapter}.ipynb", as_version=4)
    cells = []
    for cell in nb.cells:
        cells.append(cell)
        if notebooks.STUB_TAG in cell.metadata.get("tags", []):
            cell.source += "\n\n" + HOSTILE  # in the exercise's cell
            # and in a new cell
            cells.append(nbformat.v4.new_code_cell("x = model = attention = 'mine'"))
    nb.cells = cells
    NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": "book"}}
    ).execute()
    restores = [c for c in nb.cells if "homework-restore" in c.metadata.get("tags", [])]
    assert restores and all(
        "is back" in o.text or "are back" in o.text for c in restores for o in c.outputs
    )


def test_a_synthetic_chapter_with_markers(tmp_path, monkeypatch):
    from companion.exercises.checking import Checker

    monkeypatch.setattr(
        notebooks, "_checker", lambda name: Checker("double", lambda f: 1)
    )
    monkeypatch.setattr(notebooks, "chapter_number", lambda md: 7)
    md = tmp_path / "07_sample.md"
    md.write_text(
        "---\njupytext:\n  text_representation:\n    extension: .md\n    format_name: myst\n"
        "kernelspec:\n  display_name: Python 3\n  language: python\n  name: python3\n---\n\n# Sample\n\n"
        "```{code-cell} ipython3\nx = 1\n```\n\nAs {cite}`vaswani2017attention` wrote.\n\n"
        "```{code-cell} ipython3\ndef double(x):\n    return x + x\n```\n\n"
        "```{exercise-start} Double it\n:label: ex-double\n```\n\nWrite `double`.\n\n```{exercise-end}\n```\n\n"
        "```{solution-start} ex-double\n:class: dropdown\n```\n\nExplained.\n\n"
        "```{code-cell} ipython3\ndef double(x):\n    # BEGIN SOLUTION\n    return 2 * x\n    # END SOLUTION\n```"
        "\n\n```{solution-end}\n```\n\n```{code-cell} ipython3\ncheck_double(double)\n```\n\nAfter.\n"
    )
    hw = nbformat.reads(notebooks.homework_notebook(md), as_version=4)
    sources = [c.source for c in hw.cells]
    stub = sources.index(
        "def double(x):\n    raise NotImplementedError  # your code here"
    )
    assert sources[stub - 1] == notebooks.SNAPSHOT_CELL
    assert sources[stub + 1] == "check_double(double)"
    assert sources[stub + 2] == notebooks.RESTORE_CELL.format(keep=["double"])
    assert not any(
        "return 2 * x" in s or "return x + x" in s or "Explained." in s for s in sources
    )
    assert "**1 exercise**" in sources[0]
    assert any("As (Vaswani et al., 2017) wrote." in s for s in sources)
    assert sources[-1].startswith("## References\n\n- Ashish Vaswani")


@pytest.mark.parametrize("path", HOMEWORK, ids=lambda p: p.stem)
def test_every_pen_and_paper_question_has_an_answer_cell_right_after_it(path):
    md = notebooks.BOOK / f"{path.stem}.md"
    questions = len(
        re.findall(
            r"^`{3,}\{exercise-start\}.*pen and paper", md.read_text(), re.M | re.I
        )
    )
    nb = nbformat.read(path, as_version=4)
    answers = [
        i
        for i, c in enumerate(nb.cells)
        if c.cell_type == "markdown" and c.source.startswith("**Your answer")
    ]
    assert len(answers) == questions
    for i in answers:
        assert nb.cells[i].source.split("\n", 1)[0] == "**Your answer:**"
        before = "\n".join(c.source for c in nb.cells[:i] if c.cell_type == "markdown")
        heading = before.rsplit("### Exercise", 1)[1].split("\n", 1)[0]
        # the question is the last exercise above
        assert "pen and paper" in heading.lower(), heading


def test_an_answer_cell_follows_a_question_that_ends_in_a_later_cell(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(notebooks, "chapter_number", lambda md: 7)
    md = tmp_path / "07_sample.md"
    md.write_text(
        "---\njupytext:\n  text_representation:\n    extension: .md\n    format_name: myst\n"
        "kernelspec:\n  display_name: Python 3\n  language: python\n  name: python3\n---\n\n"
        "# Title\n\n```{exercise-start} Pen and paper: a proof\n:label: ex-a\n```\n\nProve it.\n\n"
        "```{code-cell} ipython3\nx = 1\n```\n\nStill the question.\n\n```{exercise-end}\n```\n\n"
        "```{solution-start} ex-a\n:class: dropdown\n```\n\nThe proof.\n\n```{solution-end}\n```\n\n## Next\n\n"
        "```{exercise-start} Code\n:label: ex-b\n```\n\nWrite it.\n\n```{exercise-end}\n```\n"
    )
    # after the introduction
    cells = nbformat.reads(notebooks.homework_notebook(md), as_version=4).cells[1:]
    assert [c.source for c in cells] == [
        "### Exercise 7.1 (Pen and paper: a proof)\n\nProve it.",
        "x = 1",
        # the question ends here, in a later cell than it began: the answer goes here
        "Still the question.",
        notebooks.ANSWER_CELL,
        # a code exercise: no answer cell
        "## Next\n\n### Exercise 7.2 (Code)\n\nWrite it.",
    ]
    assert cells[3].metadata["tags"] == [notebooks.ANSWER_TAG]
