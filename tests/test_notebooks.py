"""The generated notebooks are fresh, and every chapter follows the book's conventions."""

import re

import jupytext
import nbformat
import pytest

from tools import notebooks

CHAPTERS = notebooks.chapters()
WITH_EXERCISES = [md for md in CHAPTERS if notebooks.has_exercises(md)]


def test_there_are_chapters():
    assert [md.name for md in CHAPTERS[:2]] == ["00_preface.md", "01_words_to_vectors.md"]


def test_every_chapter_is_in_the_table_of_contents():
    numbered = [p.resolve() for p in notebooks.numbered_chapters()]
    assert [md.resolve() for md in CHAPTERS if md.name != "00_preface.md"] == numbered
    assert all(p.exists() for p in numbered)


def test_setup_cells_match_the_template():
    assert notebooks.stale_setup_cells() == [], "run `make sync`"


def test_pairs_and_homework_are_fresh():
    assert notebooks.stale_files() == [], "run `make sync` and commit the regenerated notebooks"
    assert notebooks.orphans() == []


def test_repository_is_read_from_config(tmp_path, monkeypatch):
    config = tmp_path / "_config.yml"
    monkeypatch.setattr(notebooks, "CONFIG", config)
    config.write_text("title: x\nrepository:\n  url: https://github.com/someone/a-book/\n  branch: v2\n")
    assert notebooks.repository() == notebooks.Repository("https://github.com/someone/a-book", "v2")
    config.write_text("repository:\n  url: https://github.com/someone/a-book\n")
    assert notebooks.repository() == notebooks.Repository("https://github.com/someone/a-book", "main")


def test_the_real_config_names_a_github_repository():
    repo = notebooks.repository()
    assert re.fullmatch(r"https://github\.com/[\w.-]+/[\w.-]+", repo.url), repo.url
    assert repo.ref


# The setup cell as a reader sees it, written out by hand (not formatted from the template it checks).
SETUP_CELL_FOR_SOMEONE_A_BOOK_V2 = """\
# Setup, the same in every chapter: in Google Colab, install the book's companion package
# from its repository at a pinned ref; anywhere else, do nothing.
import os
import subprocess
import sys

PACKAGE = "git+https://github.com/someone/a-book@v2"
if "google.colab" in sys.modules or os.environ.get("COMPANION_SOURCE"):
    source = os.environ.get("COMPANION_SOURCE") or PACKAGE
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", source], check=True)"""


def test_setup_cell_text(monkeypatch):
    monkeypatch.setattr(
        notebooks, "repository", lambda: notebooks.Repository("https://github.com/someone/a-book", "v2")
    )
    assert notebooks.setup_cell_source() == SETUP_CELL_FOR_SOMEONE_A_BOOK_V2
    assert notebooks.setup_cell_block() == (
        "```{code-cell} ipython3\n:tags: [remove-cell, companion-setup]\n\n"
        + SETUP_CELL_FOR_SOMEONE_A_BOOK_V2
        + "\n```"
    )
    # sync puts it in place of whatever the first code cell was, and leaves the rest alone
    chapter = "# T\n\n```{code-cell} ipython3\nold = 1\n```\n\nText.\n\n```{code-cell} ipython3\ny = 2\n```\n"
    assert notebooks.with_setup_cell(chapter) == (
        "# T\n\n```{code-cell} ipython3\n:tags: [remove-cell, companion-setup]\n\n"
        + SETUP_CELL_FOR_SOMEONE_A_BOOK_V2
        + "\n```\n\nText.\n\n```{code-cell} ipython3\ny = 2\n```\n"
    )


def test_setup_cell_installs_in_colab_only(tmp_path, monkeypatch):
    """Run the real setup cell with pip replaced by a recorder: nothing happens outside Colab."""
    calls = []
    monkeypatch.setattr("subprocess.run", lambda argv, check: calls.append(argv))
    monkeypatch.delenv("COMPANION_SOURCE", raising=False)
    exec(notebooks.setup_cell_source(), {})
    assert calls == []
    monkeypatch.setenv("COMPANION_SOURCE", str(tmp_path))
    exec(notebooks.setup_cell_source(), {})
    assert len(calls) == 1 and calls[0][1:] == ["-m", "pip", "install", "-q", str(tmp_path)]


@pytest.mark.parametrize("md", CHAPTERS, ids=lambda p: p.name)
def test_first_code_cell_is_the_setup_cell(md):
    nb = jupytext.read(md)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code[0].source == notebooks.setup_cell_source()
    assert set(code[0].metadata["tags"]) == {"remove-cell", notebooks.SETUP_TAG}
    assert nb.metadata["kernelspec"]["name"] == "python3"


@pytest.mark.parametrize("md", CHAPTERS, ids=lambda p: p.name)
def test_paired_notebook_has_no_outputs(md):
    nb = nbformat.read(notebooks.pair_path(md), as_version=4)
    assert all(not c.get("outputs") and c.get("execution_count") is None for c in nb.cells if c.cell_type == "code")


def _blocks(md):
    """(exercise label, stub cells, solution cells, the first code cell after the solution) per exercise."""
    nb = jupytext.read(md)
    found, state, current = [], None, None
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for m in re.finditer(
                r"\{(exercise-start|exercise-end|solution-start|solution-end)\}([^\n]*)\n"
                r"(?::label: ([^\n]+))?",
                cell.source,
            ):
                kind, arg, label = m.group(1), m.group(2).strip(), m.group(3)
                if kind == "exercise-start":
                    current = {"label": label, "title": arg, "stubs": [], "solutions": [], "after": None}
                    found.append(current)
                    state = "exercise"
                elif kind == "solution-start":
                    assert current is not None and arg == current["label"], f"solution-start {arg} without exercise"
                    state = "solution"
                elif kind == "solution-end":
                    state = "after"
                elif kind == "exercise-end":
                    state = "between"
            continue
        if state == "exercise":
            current["stubs"].append(cell)
        elif state == "solution":
            current["solutions"].append(cell)
        elif state == "after" and current["after"] is None:
            current["after"] = cell
    return found


def _pen_and_paper(ex) -> bool:
    """A pen-and-paper question: no code to write (no stub), its answer in prose inside the dropdown."""
    return not ex["stubs"] and not ex["solutions"]


@pytest.mark.parametrize("md", WITH_EXERCISES, ids=lambda p: p.name)
def test_pen_and_paper_answers_stay_out_of_the_homework(md):
    hw = nbformat.read(notebooks.homework_path(md), as_version=4)
    text = "\n".join(c.source for c in hw.cells if c.cell_type == "markdown")
    source = md.read_text()
    for label in re.findall(r"\{solution-start\} (ex-\S+)", source):
        block = source.split(f"{{solution-start}} {label}", 1)[1].split("{solution-end}", 1)[0]
        if "{code-cell}" in block:
            continue
        answer = [line for line in block.splitlines()[2:] if len(line) > 40]
        assert answer, f"{label}: the answer of a pen-and-paper question is missing"
        assert not any(line in text for line in answer), f"the answer of {label} leaked into the homework"


@pytest.mark.parametrize("md", WITH_EXERCISES, ids=lambda p: p.name)
def test_every_exercise_has_stub_solution_and_checker(md):
    exercises = _blocks(md)
    assert len(exercises) >= 1
    for ex in exercises:
        label = ex["label"]
        assert label and label.startswith("ex-"), label
        if _pen_and_paper(ex):
            continue
        marked = [c for c in ex["solutions"] if notebooks.stub_from_solution(c.source) is not None]
        assert len(ex["stubs"]) + len(marked) == 1, f"{label}: exactly one stub cell or marked solution cell"
        for stub in ex["stubs"]:  # the older form: a hidden stub cell inside the exercise
            assert set(stub.metadata.get("tags", [])) >= {notebooks.STUB_TAG, "remove-cell"}, label
            assert "raise NotImplementedError" in stub.source, label
        assert ex["solutions"], f"{label}: the solution needs at least one code cell"
        assert ex["after"] is not None and re.match(r"check_\w+\(\w+\)\s*$", ex["after"].source), (
            f"{label}: the cell after the solution must call a checker"
        )


@pytest.mark.parametrize("md", WITH_EXERCISES, ids=lambda p: p.name)
def test_homework_keeps_stubs_and_drops_solutions(md):
    hw = nbformat.read(notebooks.homework_path(md), as_version=4)
    code = [c.source for c in hw.cells if c.cell_type == "code"]
    text = "\n".join(c.source for c in hw.cells if c.cell_type == "markdown")
    for ex in _blocks(md):
        if _pen_and_paper(ex):
            continue
        stubs = [c.source for c in ex["stubs"]]
        stubs += [notebooks.stub_from_solution(c.source) for c in ex["solutions"] if "# BEGIN SOLUTION" in c.source]
        assert stubs[0] in code
        for solution in ex["solutions"]:
            assert solution.source not in code, f"solution of {ex['label']} leaked into the homework"
        assert ex["after"].source in code
    assert "{solution-start}" not in text and "{exercise-start}" not in text and "{solution-end}" not in text
    number = notebooks.chapter_number(md)
    headings = re.findall(rf"^### Exercise {number}\.(\d+) \(", text, re.MULTILINE)
    assert [int(h) for h in headings] == list(range(1, len(_blocks(md)) + 1))
    assert code[0] == notebooks.setup_cell_source()


def test_homework_generator_on_a_synthetic_chapter(tmp_path, monkeypatch):
    from companion.checking import Checker

    monkeypatch.setattr(notebooks, "_checker", lambda name: Checker("double", lambda f: 1))
    monkeypatch.setattr(notebooks, "chapter_number", lambda md: 7)
    md = tmp_path / "07_sample.md"
    md.write_text(
        "---\njupytext:\n  text_representation:\n    extension: .md\n    format_name: myst\n"
        "kernelspec:\n  display_name: Python 3\n  language: python\n  name: python3\n---\n\n# Sample\n\n"
        "```{code-cell} ipython3\nx = 1\n```\n\nIntro.\n\n"
        "```{exercise-start} Double it\n:label: ex-double\n```\n\nWrite `double`.\n\n"
        "```{code-cell} ipython3\n:tags: [exercise-stub, remove-cell]\n\ndef double(x):\n"
        "    raise NotImplementedError\n```\n\n```{exercise-end}\n```\n\n"
        "```{solution-start} ex-double\n:class: dropdown\n```\n\nExplained.\n\n"
        "```{code-cell} ipython3\ndef double(x):\n    return 2 * x\n```\n\n```{solution-end}\n```\n\n"
        "```{code-cell} ipython3\ncheck_double(double)\n```\n\nAfter.\n"
    )
    hw = nbformat.reads(notebooks.homework_notebook(md), as_version=4)
    sources = [c.source for c in hw.cells]
    assert "def double(x):\n    raise NotImplementedError" in sources
    assert "def double(x):\n    return 2 * x" not in sources
    assert not any("Explained." in s for s in sources)
    assert any("### Exercise 7.1 (Double it)\n\nWrite `double`." in s for s in sources)
    assert "check_double(double)" in sources and any("After." in s for s in sources)
    stub = next(c for c in hw.cells if c.cell_type == "code" and "NotImplementedError" in c.source)
    assert stub.metadata["tags"] == ["exercise-stub"]
    check = next(c for c in hw.cells if c.source == "check_double(double)")
    assert check.outputs[0].text.startswith("NOT ATTEMPTED YET  double: ")
    assert check.metadata["tags"] == ["nbval-check-output"]


def test_unterminated_solution_is_an_error(tmp_path, monkeypatch):
    monkeypatch.setattr(notebooks, "chapter_number", lambda md: 8)
    md = tmp_path / "08_broken.md"
    md.write_text("# Broken\n\n```{solution-start} ex-x\n```\n\n```{code-cell} ipython3\nx = 1\n```\n")
    with pytest.raises(ValueError, match="no matching solution-end"):
        notebooks.homework_notebook(md)


SAMPLE_CHAPTER = """\
---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
kernelspec:
  display_name: Python 3
  language: python
  name: python3
---

# Sample

```{code-cell} ipython3
x = 1
```

Intro, as in {cite}`vaswani2017attention`.

```{exercise-start} Double it
:label: ex-double
```

Write `double`.

```{exercise-end}
```

```{solution-start} ex-double
:class: dropdown
```

Explained.

```{code-cell} ipython3
def double(x):
    \"\"\"Twice x.\"\"\"
    # BEGIN SOLUTION
    return 2 * x
    # END SOLUTION
```

```{solution-end}
```

```{code-cell} ipython3
check_double(double)
```

After.
"""

# What the student gets from SAMPLE_CHAPTER, written out by hand: (cell type, source, tags, stored output).
SAMPLE_HOMEWORK = [
    (
        "markdown",
        "# Homework: Sample\n\nThis is the student version of chapter 7 of the book. It has **1 exercise**; 1 of them "
        "have a checker cell. Each starts from a stub that raises `NotImplementedError`: replace the stub with your "
        "code and run the checker cell below it. It says **PASSED**, **NOT ATTEMPTED YET**, or **WRONG** (with the "
        "input, what was expected, what came, and a hint). **You are done when every checker says PASSED.**\n\n"
        "Try your code out freely, in the exercise's cell or in new cells: the chapter's own cells use the "
        "companion's reference implementations, and the cell after each checker puts back any of the chapter's "
        "variables (`x`, `model`, `emb`, `torch`, …) that your experiments replaced, so the cells below still run. "
        "Keep the name the exercise asks for (`def one_hot(...)`, say): the checker looks for it.\n\n"
        "When your notebook is graded, each exercise is checked on its own: the grader takes your function or class, "
        "the helper functions and classes it uses, your imports, and constants set to a plain value (`D = 64`); "
        "nothing else of the notebook is run. Whatever your answer needs must therefore be inside it, not in a "
        "variable set by another cell (`W = torch.randn(3, 3)`).\n\n"
        "The full chapter, with solutions, is at https://github.com/someone/a-book.",
        None,
        None,
    ),
    ("code", "x = 1", None, None),
    (
        "markdown",
        "Intro, as in (Vaswani et al., 2017).\n\n### Exercise 7.1 (Double it)\n\nWrite `double`.",
        None,
        None,
    ),
    (
        "code",
        "# Keeps the chapter's variables safe while you try your code out (see the note at the top).\n"
        "import companion.checking as _homework\n\n_homework_saved = _homework.snapshot(globals())",
        ["homework-snapshot"],
        None,
    ),
    # the solution cell with its marked block replaced: the signature and docstring stay, the answer goes
    (
        "code",
        'def double(x):\n    """Twice x."""\n    raise NotImplementedError  # your code here',
        ["exercise-stub"],
        None,
    ),
    (
        "code",
        "check_double(double)",
        ["nbval-check-output"],
        "NOT ATTEMPTED YET  double: your code still raises NotImplementedError. "
        "Replace the stub with your implementation and run the cell again.\n",
    ),
    ("code", "_homework.restore(globals(), _homework_saved, keep=['double']);", ["homework-restore"], None),
    ("markdown", "After.", None, None),
    (
        "markdown",
        "## References\n\n- Ashish Vaswani, Noam Shazeer, Niki Parmar, Jakob Uszkoreit, Llion Jones, Aidan N. Gomez, "
        "Łukasz Kaiser, Illia Polosukhin (2017). *Attention Is All You Need*. Advances in Neural Information "
        "Processing Systems.",
        None,
        None,
    ),
]


def test_homework_of_a_sample_chapter_is_exactly_as_written(tmp_path, monkeypatch):
    from companion.checking import Checker

    monkeypatch.setattr(notebooks, "_checker", lambda name: Checker("double", lambda f: 1))
    monkeypatch.setattr(notebooks, "chapter_number", lambda md: 7)
    monkeypatch.setattr(
        notebooks, "repository", lambda: notebooks.Repository("https://github.com/someone/a-book", "v2")
    )
    md = tmp_path / "07_sample.md"
    md.write_text(SAMPLE_CHAPTER)
    hw = nbformat.reads(notebooks.homework_notebook(md), as_version=4)
    got = []
    for cell in hw.cells:
        outputs = cell.get("outputs")
        output = "".join(o["text"] for o in outputs) if outputs else None
        got.append((cell.cell_type, cell.source, cell.metadata.get("tags"), output))
    assert got == SAMPLE_HOMEWORK
    assert hw.metadata["kernelspec"]["name"] == "python3" and "jupytext" not in hw.metadata
    runs = [c.get("execution_count") for c in hw.cells if c.cell_type == "code"]
    assert runs == [None, None, None, 1, None], "nbval compares only the outputs of cells that were run"


def test_myst_for_jupyter_is_exactly_as_written(tmp_path, monkeypatch):
    monkeypatch.setattr(notebooks, "ROOT", tmp_path)
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text(
        '"""Doc."""\n\nimport torch\n\n\ndef other():\n    pass\n\n\n@torch.no_grad()\ndef shown(x):\n'
        '    """One line, returning a :class:`~torch.Tensor`."""\n    return x + 1\n\n\nclass After:\n    pass\n'
    )
    text = (
        "See {cite}`a2020b` and {numref}`fig-x`.\n\n"
        "```{literalinclude} pkg/mod.py\n:pyobject: shown\n```\n\n"
        "```{literalinclude} pkg/mod.py\n:pyobject: other\n```\n\n"
        "```{prf:definition} Softmax\n:label: def-softmax\n\nIt is $e^x / \\sum e^x$.\n```"
    )
    assert notebooks.for_jupyter(text, tmp_path, hide={"other"}) == (
        "See (a2020b, n.d.) and fig-x.\n\n"
        '```python\n# from pkg/mod.py\n@torch.no_grad()\ndef shown(x):\n    """One line, returning a Tensor."""\n'
        "    return x + 1\n```\n\n"
        "*(The companion's `other` is left out of the homework: it gives an exercise away.)*\n\n"
        "**Definition (Softmax).** It is $e^x / \\sum e^x$."
    )
