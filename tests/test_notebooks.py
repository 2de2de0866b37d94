"""Every chapter follows the book's conventions, and the notebook generator writes what it should.

That the committed notebooks are fresh (setup cells, reader and homework notebooks, no orphans) is the
``sync-check`` stage of ``make test`` (``python tools/notebooks.py check``), not a test here."""

import re

import jupytext
import nbformat
import pytest
import yaml

from tools import notebooks

CHAPTERS = notebooks.chapters()
WITH_EXERCISES = [md for md in CHAPTERS if notebooks.has_exercises(md)]


def test_there_are_chapters():
    assert [md.name for md in CHAPTERS[:2]] == [
        "00_preface.md",
        "01_words_to_vectors.md",
    ]


def test_every_chapter_is_in_the_table_of_contents():
    numbered = [p.resolve() for p in notebooks.numbered_chapters()]
    assert [md.resolve() for md in CHAPTERS if md.name != "00_preface.md"] == numbered
    assert all(p.exists() for p in numbered)


def test_repository_is_read_from_config(tmp_path, monkeypatch):
    config = tmp_path / "_config.yml"
    monkeypatch.setattr(notebooks, "CONFIG", config)
    config.write_text(
        "title: x\nrepository:\n  url: https://github.com/someone/a-book/\n  branch: v2\n"
    )
    assert notebooks.repository() == notebooks.Repository(
        "https://github.com/someone/a-book", "v2"
    )
    config.write_text("repository:\n  url: https://github.com/someone/a-book\n")
    assert notebooks.repository() == notebooks.Repository(
        "https://github.com/someone/a-book", "main"
    )


def test_the_real_config_names_a_github_repository():
    repo = notebooks.repository()
    assert re.fullmatch(r"https://github\.com/[\w.-]+/[\w.-]+", repo.url), repo.url
    assert repo.ref


# The setup cell as a reader sees it, written out by hand (not formatted from the template it checks).
SETUP_CELL_FOR_SOMEONE_A_BOOK_V2 = """\
# Setup, the same in every chapter: in Google Colab, install the book's companion
# package at the release this book was built from (v2.5.1); anywhere else, do nothing.
import os
import subprocess
import sys

PACKAGE = (
    "a-book-code @ "
    "git+https://github.com/someone/a-book@v2.5.1"
)
if "google.colab" in sys.modules or os.environ.get("COMPANION_SOURCE"):
    source = os.environ.get("COMPANION_SOURCE") or PACKAGE
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", source], check=True)"""


def test_setup_cell_text(monkeypatch):
    monkeypatch.setattr(
        notebooks,
        "repository",
        lambda: notebooks.Repository("https://github.com/someone/a-book", "v2"),
    )
    monkeypatch.setattr(notebooks, "release", lambda: "v2.5.1")
    monkeypatch.setattr(notebooks, "distribution", lambda: "a-book-code")
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


def test_the_setup_cell_installs_the_release_and_the_buttons_open_it():
    """The page, the notebook the buttons open and the package its setup cell installs come from one tag:
    v + companion.__version__ (imported here; the generator reads it from the source without importing)."""
    import companion

    release = f"v{companion.__version__}"
    package = re.search(
        r'^PACKAGE = \(\n    "(\S+) @ "\n    "git\+(\S+)@(\S+)"\n\)$',
        notebooks.setup_cell_source(),
        re.MULTILINE,
    )
    assert package and package.groups() == (
        "one-hot-to-transformers",
        notebooks.repository().url,
        release,
    )
    assert f"({release})" in notebooks.setup_cell_source().split("\n")[1]
    assert (
        yaml.safe_load(notebooks.CONFIG.read_text())["repository"]["branch"] == release
    )


def test_release_is_read_from_the_package_source(tmp_path, monkeypatch):
    monkeypatch.setattr(notebooks, "ROOT", tmp_path)
    (tmp_path / "companion").mkdir()
    init = tmp_path / "companion" / "__init__.py"
    init.write_text(
        '"""Doc."""\n\nimport torch\n\n__all__ = ["x"]\n__version__ = "3.10.2"\n'
    )
    # without importing (torch is not importable from there)
    assert notebooks.release() == "v3.10.2"
    init.write_text("VERSION = '1'\n")
    with pytest.raises(ValueError, match="__version__"):
        notebooks.release()


def test_sync_moves_the_launch_ref_to_the_release(monkeypatch):
    monkeypatch.setattr(notebooks, "release", lambda: "v1.2.3")
    config = (
        "title: x\nrepository:\n  url: https://github.com/someone/a-book\n\n  branch: main  \n"
        "  path_to_book: ''\nlaunch_buttons:\n  branch: keep\n"
    )
    assert notebooks.config_with_release(config) == config.replace(
        "branch: main", "branch: v1.2.3"
    )
    with pytest.raises(ValueError, match="repository.branch"):
        notebooks.config_with_release("repository:\n  url: u\nbranch: main\n")


def test_the_book_build_ignores_the_notebooks_and_nothing_pairs_them():
    """book/NN_name.ipynb is generated from the .md by tools/notebooks.py only: the book build reads the .md
    (the .ipynb files are excluded), and no jupytext pairing would let Jupyter overwrite the notebook."""
    config = yaml.safe_load(notebooks.CONFIG.read_text())
    assert (
        "**/*.ipynb" in config["exclude_patterns"]
        and config["only_build_toc_files"] is True
    )
    for md in CHAPTERS:
        assert "formats" not in jupytext.read(md).metadata.get("jupytext", {}), md.name
    for name in (
        "jupytext.toml",
        ".jupytext.toml",
        ".jupytext",
        "jupytext.yml",
        ".jupytext.yml",
    ):
        assert (
            not (notebooks.ROOT / name).exists()
            and not (notebooks.BOOK / name).exists()
        ), name
    assert "tool.jupytext" not in (notebooks.ROOT / "pyproject.toml").read_text()
    for md in CHAPTERS:
        assert (
            "jupytext"
            not in nbformat.read(notebooks.reader_path(md), as_version=4).metadata
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
    assert len(calls) == 1 and calls[0][1:] == [
        "-m",
        "pip",
        "install",
        "-q",
        str(tmp_path),
    ]


@pytest.mark.parametrize("md", CHAPTERS, ids=lambda p: p.name)
def test_first_code_cell_is_the_setup_cell(md):
    nb = jupytext.read(md)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code[0].source == notebooks.setup_cell_source()
    assert set(code[0].metadata["tags"]) == {"remove-cell", notebooks.SETUP_TAG}
    assert nb.metadata["kernelspec"]["name"] == "python3"


@pytest.mark.parametrize("md", CHAPTERS, ids=lambda p: p.name)
def test_reader_notebook_has_no_outputs(md):
    nb = nbformat.read(notebooks.reader_path(md), as_version=4)
    assert all(
        not c.get("outputs") and c.get("execution_count") is None
        for c in nb.cells
        if c.cell_type == "code"
    )


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
                    current = {
                        "label": label,
                        "title": arg,
                        "stubs": [],
                        "solutions": [],
                        "after": None,
                    }
                    found.append(current)
                    state = "exercise"
                elif kind == "solution-start":
                    assert current is not None and arg == current["label"], (
                        f"solution-start {arg} without exercise"
                    )
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
    """A pen-and-paper question: no code to write (no stub), its answer in prose inside the dropdown, with at
    most hidden cells there that check the answer's numbers."""
    hidden = all("remove-cell" in c.metadata.get("tags", []) for c in ex["solutions"])
    return not ex["stubs"] and hidden


@pytest.mark.parametrize("md", WITH_EXERCISES, ids=lambda p: p.name)
def test_pen_and_paper_answers_stay_out_of_the_homework(md):
    hw = nbformat.read(notebooks.homework_path(md), as_version=4)
    text = "\n".join(c.source for c in hw.cells if c.cell_type == "markdown")
    source = md.read_text()
    for label in re.findall(r"\{solution-start\} (ex-\S+)", source):
        block = source.split(f"{{solution-start}} {label}", 1)[1].split(
            "{solution-end}", 1
        )[0]
        if "{code-cell}" in block:
            continue
        answer = [line for line in block.splitlines()[2:] if len(line) > 40]
        assert answer, f"{label}: the answer of a pen-and-paper question is missing"
        assert not any(line in text for line in answer), (
            f"the answer of {label} leaked into the homework"
        )


@pytest.mark.parametrize("md", WITH_EXERCISES, ids=lambda p: p.name)
def test_every_exercise_has_stub_solution_and_checker(md):
    exercises = _blocks(md)
    assert len(exercises) >= 1
    for ex in exercises:
        label = ex["label"]
        assert label and label.startswith("ex-"), label
        if _pen_and_paper(ex):
            continue
        marked = [
            c
            for c in ex["solutions"]
            if notebooks.stub_from_solution(c.source) is not None
        ]
        assert len(ex["stubs"]) + len(marked) == 1, (
            f"{label}: exactly one stub cell or marked solution cell"
        )
        # the older form: a hidden stub cell inside the exercise
        for stub in ex["stubs"]:
            assert set(stub.metadata.get("tags", [])) >= {
                notebooks.STUB_TAG,
                "remove-cell",
            }, label
            assert "raise NotImplementedError" in stub.source, label
        assert ex["solutions"], f"{label}: the solution needs at least one code cell"
        assert ex["after"] is not None and re.match(
            r"check_\w+\(\w+\)\s*$", ex["after"].source
        ), (
            f"{label}: the cell after the solution must call a checker (CONTRIBUTING.md#adding-an-exercise)"
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
        stubs += [
            notebooks.stub_from_solution(c.source)
            for c in ex["solutions"]
            if "# BEGIN SOLUTION" in c.source
        ]
        assert stubs[0] in code
        for solution in ex["solutions"]:
            assert solution.source not in code, (
                f"solution of {ex['label']} leaked into the homework"
            )
        assert ex["after"].source in code
    assert (
        "{solution-start}" not in text
        and "{exercise-start}" not in text
        and "{solution-end}" not in text
    )
    number = notebooks.chapter_number(md)
    headings = re.findall(rf"^### Exercise {number}\.(\d+) \(", text, re.MULTILINE)
    assert [int(h) for h in headings] == list(range(1, len(_blocks(md)) + 1))
    assert code[0] == notebooks.setup_cell_source()


def test_homework_generator_on_a_synthetic_chapter(tmp_path, monkeypatch):
    from companion.exercises.checking import Checker

    monkeypatch.setattr(
        notebooks, "_checker", lambda name: Checker("double", lambda f: 1)
    )
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
    stub = next(
        c
        for c in hw.cells
        if c.cell_type == "code" and "NotImplementedError" in c.source
    )
    assert stub.metadata["tags"] == ["exercise-stub"]
    check = next(c for c in hw.cells if c.source == "check_double(double)")
    assert check.outputs[0].text.startswith("NOT ATTEMPTED YET  double: ")
    assert check.metadata["tags"] == ["nbval-check-output"]


def test_unterminated_solution_is_an_error(tmp_path, monkeypatch):
    monkeypatch.setattr(notebooks, "chapter_number", lambda md: 8)
    md = tmp_path / "08_broken.md"
    md.write_text(
        "# Broken\n\n```{solution-start} ex-x\n```\n\n```{code-cell} ipython3\nx = 1\n```\n"
    )
    with pytest.raises(ValueError, match="no matching solution-end"):
        notebooks.homework_notebook(md)


# The front matter every chapter source starts with (the two sample chapters below share it).
FRONT_MATTER = """\
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
"""

SAMPLE_CHAPTER = (
    FRONT_MATTER
    + """\

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
)

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
        "import companion.exercises.checking as _homework\n\n_homework_saved = _homework.snapshot(globals())",
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
    (
        "code",
        "_homework.restore(globals(), _homework_saved, keep=['double']);",
        ["homework-restore"],
        None,
    ),
    ("markdown", "After.", None, None),
    (
        "markdown",
        "## References\n\n- Ashish Vaswani, Noam Shazeer, Niki Parmar, Jakob Uszkoreit, Llion Jones, Aidan&nbsp;N. "
        "Gomez, Łukasz Kaiser, and Illia Polosukhin. Attention is all you need. In <em>Advances in Neural "
        "Information Processing Systems</em>, volume&nbsp;30. 2017.",
        None,
        None,
    ),
]


def test_homework_of_a_sample_chapter_is_exactly_as_written(tmp_path, monkeypatch):
    from companion.exercises.checking import Checker

    monkeypatch.setattr(
        notebooks, "_checker", lambda name: Checker("double", lambda f: 1)
    )
    monkeypatch.setattr(notebooks, "chapter_number", lambda md: 7)
    monkeypatch.setattr(
        notebooks,
        "repository",
        lambda: notebooks.Repository("https://github.com/someone/a-book", "v2"),
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
    assert (
        hw.metadata["kernelspec"]["name"] == "python3" and "jupytext" not in hw.metadata
    )
    runs = [c.get("execution_count") for c in hw.cells if c.cell_type == "code"]
    assert runs == [None, None, None, 1, None], (
        "nbval compares only the outputs of cells that were run"
    )


def test_myst_for_jupyter_is_exactly_as_written(tmp_path, monkeypatch):
    monkeypatch.setattr(notebooks, "ROOT", tmp_path)
    # a book without pages: no label is known
    monkeypatch.setattr(notebooks, "BOOK", tmp_path / "book")
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
        "**Definition 1 (Softmax).** It is $e^x / \\sum e^x$."
    )


# --- the generated notebooks carry no raw MyST ---------------------------------------------------------------

GENERATED = [notebooks.reader_path(md) for md in CHAPTERS] + [
    notebooks.homework_path(md) for md in WITH_EXERCISES
]

# What Jupyter and Colab would show as raw text: each pattern written from MyST's syntax, not from the generator.
RAW_MYST = {
    "directive fence": re.compile(
        r"^[ \t>]*(?:`{3,}|~{3,}|:{3,})[ \t]*\{[^}\n]*\}", re.MULTILINE
    ),
    "colon fence": re.compile(r"^[ \t>]*:{3,}", re.MULTILINE),
    "role": re.compile(r"\{[\w:+.-]+\}`"),
    "target": re.compile(r"^[ \t>]*\([^()\s]+\)=[ \t]*$", re.MULTILINE),
    "directive option": re.compile(
        r"^[ \t>]*:(?:label|class|name|tags|pyobject|dedent|start-at|end-before):", re.M
    ),
    "comment": re.compile(r"^%", re.MULTILINE),
    "exercise or solution": re.compile(
        r"\{(?:exercise|solution)[-}]|(?:exercise|solution)-(?:start|end)\b"
    ),
}


def raw_myst(text: str) -> list[str]:
    """Every raw MyST construct in ``text``, named."""
    return [
        f"{name}: {m.group(0).strip()!r}"
        for name, pattern in RAW_MYST.items()
        for m in pattern.finditer(text)
    ]


def test_raw_myst_is_recognised():
    """Each pattern catches what it names, and leaves rendered Markdown alone."""
    for text in (
        "```{literalinclude} ../x.py\n```",
        "````{prf:theorem} T",
        "> ```{note}",
        "::: {note}",
        ":::{dropdown} More",
        "As {cite}`vaswani2017attention` showed.",
        "See {prf:ref}`thm-x` and {doc}`04_attention`.",
        "(sec-mask)=",
        ":label: ex-one",
        ":class: dropdown",
        "% a comment",
        "The {exercise} directive",
        "exercise-start",
    ):
        assert raw_myst(text), text
    rendered = (
        "# Title\n\nAs (Vaswani et al., 2017) showed; see [Theorem 10.1](https://x.io/b.html#thm-x).\n\n"
        "```python\n# from companion/x.py\ndef f(x: dict[str, int]) -> str:\n    return f\"{x}: {x['a']:>4}\"\n```\n\n"
        "$$\n\\frac{a}{b} \\quad 50\\%\n$$\n\n"
        "<details>\n<summary><b>Solution to Exercise 4.1</b></summary>\n\n</details>"
    )
    assert raw_myst(rendered) == []


@pytest.mark.parametrize(
    "path", GENERATED, ids=lambda p: p.relative_to(notebooks.BOOK).as_posix()
)
def test_generated_notebooks_have_no_raw_myst(path):
    nb = nbformat.read(path, as_version=4)
    found = [
        f"cell {i}: {what}"
        for i, cell in enumerate(nb.cells)
        for what in (raw_myst(cell.source) if cell.cell_type == "markdown" else [])
    ]
    assert not found, "\n".join(found)


def _reader_code(cell) -> str:
    """A reader notebook's code cell as the chapter has it: without the title line of a folded cell."""
    return re.sub(r"^# @title [^\n]*\n", "", cell.source, count=1, flags=re.MULTILINE)


@pytest.mark.parametrize("md", CHAPTERS, ids=lambda p: p.name)
def test_reader_notebook_runs_every_cell_of_the_chapter_and_folds_what_the_book_hides(
    md,
):
    """Every code cell of the chapter is in the reader notebook, in order (so the hidden asserts run when it is
    executed); the cells the book hides, and the solutions, are folded for Colab and JupyterLab alike."""
    chapter = [c for c in jupytext.read(md).cells if c.cell_type == "code"]
    reader = nbformat.read(notebooks.reader_path(md), as_version=4)
    code = [c for c in reader.cells if c.cell_type == "code"]
    assert [_reader_code(c) for c in code] == [
        notebooks.without_markers(c.source) for c in chapter
    ], (
        "the reader notebook is stale: run python tools/notebooks.py sync (CONTRIBUTING.md#the-two-commands)"
    )
    solutions = md.read_text().count("{solution-start}")
    details = [
        c
        for c in reader.cells
        if c.cell_type == "markdown" and c.source.startswith("<details>")
    ]
    assert len(details) == solutions
    for ours, theirs in zip(code, chapter, strict=True):
        tags = set(theirs.metadata.get("tags", []))
        in_solution = (
            notebooks.SOLUTION_TITLE.split("{")[0] in ours.source.split("\n")[0]
        )
        hidden = (
            bool(tags & {"remove-cell", "remove-input", "hide-input"}) or in_solution
        )
        assert (ours.metadata.get("cellView") == "form") == hidden, ours.source[:80]
        assert ours.metadata.get("jupyter", {}).get("source_hidden", False) == hidden
        assert bool(re.match(r"# @title \S", ours.source)) == hidden
        # a solution's hidden check is folded under the solution's title
        if in_solution:
            continue
        if (
            "remove-cell" in tags
            and notebooks.SETUP_TAG not in tags
            and "assert " in theirs.source
        ):
            assert ours.source.startswith(
                "# @title Check the claims of the text above (hidden in the book)\n"
            )
        elif "remove-cell" in tags and notebooks.SETUP_TAG not in tags:
            assert ours.source.startswith("# @title Code hidden in the book\n")
    if notebooks.has_exercises(md):
        number = notebooks.chapter_number(md)
        headings = re.findall(
            rf"^### Exercise {number}\.(\d+)",
            "\n".join(c.source for c in reader.cells),
            re.M,
        )
        assert [int(h) for h in headings] == list(range(1, solutions + 1))


SAMPLE_BOOK = {
    "_config.yml": (
        "title: A Book\nrepository:\n  url: https://github.com/someone/a-book\n  branch: v2.5.1\n"
        "html:\n  baseurl: https://someone.github.io/a-book/\n"
    ),
    "_toc.yml": "root: intro\nparts:\n  - caption: C\n    numbered: true\n    chapters:\n"
    + "".join(f"      - file: book/0{k}_c{k}\n" for k in range(1, 7))
    + "      - file: book/07_sample\n",
    "companion/__init__.py": '__version__ = "2.5.1"\n',
    "pkg/mod.py": 'import torch\n\n\ndef shown(x):\n    """One :class:`~torch.Tensor`."""\n    return x + 1\n',
    "book/06_other.md": "# Other chapter\n\nText.\n",
    "book/references.bib": (
        "@article{doe2020,\n  author = {Doe, Jane and Roe, Richard},\n  title = {A Title},\n"
        "  journal = {Journal of Stuff},\n  year = {2020}\n}\n"
    ),
    "book/07_sample.md": FRONT_MATTER
    + """\

# Sample

```{code-cell} ipython3
:tags: [remove-cell, companion-setup]

print("setup")
```

(sec-intro)=
## Intro

% a comment the book does not show
As {cite}`doe2020` showed in {doc}`06_other`, $x$ and {math}`y^2` agree.

```{literalinclude} ../pkg/mod.py
:pyobject: shown
```

```{prf:theorem} Sums
:label: thm-sums

$1 + 1 = 2$.
```

```{prf:proof}
Count.
```

:::{note}
See {prf:ref}`thm-sums`.
:::

```{code-cell} ipython3
x = 1
```

```{code-cell} ipython3
:tags: [remove-cell]

assert x == 1
```

```{exercise-start} Double it
:label: ex-double
```

Write `double`.

```{exercise-end}
```

```{solution-start} ex-double
:class: dropdown
```

Multiply by two.

```{code-cell} ipython3
def double(x):
    # BEGIN SOLUTION
    return 2 * x
    # END SOLUTION
```

```{solution-end}
```

```{code-cell} ipython3
:tags: [remove-input]

print(double(x))
```

After {ref}`the intro <sec-intro>`.
""",
}

FOLDED = {"cellView": "form", "jupyter": {"source_hidden": True}}
PAGE = "https://someone.github.io/a-book/book/07_sample.html"

# The reader notebook of SAMPLE_BOOK's chapter 7, written out by hand: (cell type, source, metadata).
SAMPLE_READER = [
    ("markdown", "# Sample", {}),
    (
        "markdown",
        f"*Chapter 7 of [A Book]({PAGE}), as a notebook made from the same source. Run it from the top (in Colab: "
        "Runtime → Run all): the first code cell installs the book's companion package, release v2.5.1, in Colab "
        "and does nothing elsewhere. The code the book hides is folded here and runs: the checks of the text's "
        "claims, for instance. Each exercise's solution is folded under it (click to show), and "
        "its code runs folded too, since later cells may use it. To do the exercises yourself, open the "
        "[homework notebook](https://colab.research.google.com/github/someone/a-book/blob/v2.5.1/book/homework/"
        "07_sample.ipynb).*",
        {},
    ),
    (
        "code",
        '# @title Setup: in Colab, install the companion package (v2.5.1); elsewhere, nothing\nprint("setup")',
        {**FOLDED, "tags": ["remove-cell", "companion-setup"]},
    ),
    (
        "markdown",
        "## Intro\n\nAs (Doe and Roe, 2020) showed in [Other chapter](https://someone.github.io/a-book/book/"
        "06_other.html), $x$ and $y^2$ agree.\n\n"
        '```python\n# from pkg/mod.py\ndef shown(x):\n    """One Tensor."""\n    return x + 1\n```\n\n'
        "**Theorem 7.1 (Sums).** $1 + 1 = 2$.\n\n*Proof.* Count. ∎\n\n"
        f"> **Note.** See [Theorem 7.1]({PAGE}#thm-sums).",
        {},
    ),
    ("code", "x = 1", {}),
    (
        "code",
        "# @title Check the claims of the text above (hidden in the book)\nassert x == 1",
        {**FOLDED, "tags": ["remove-cell"]},
    ),
    ("markdown", "### Exercise 7.1 (Double it)\n\nWrite `double`.", {}),
    (
        "markdown",
        "<details>\n<summary><b>Solution to Exercise 7.1</b> (click to show)</summary>\n\nMultiply by two.\n\n"
        "```python\ndef double(x):\n    return 2 * x\n```\n\n</details>",
        {},
    ),
    (
        "code",
        "# @title Solution to Exercise 7.1 (folded: later cells use it)\ndef double(x):\n    return 2 * x",
        FOLDED,
    ),
    (
        "code",
        "# @title Code for the output below (hidden in the book)\nprint(double(x))",
        {**FOLDED, "tags": ["remove-input"]},
    ),
    ("markdown", f"After [the intro]({PAGE}#sec-intro).", {}),
    (
        "markdown",
        "## References\n\n- Jane Doe and Richard Roe. A title. <em>Journal of Stuff</em>, 2020.",
        {},
    ),
]


@pytest.fixture
def sample_book(tmp_path, monkeypatch):
    for name, text in SAMPLE_BOOK.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    monkeypatch.setattr(notebooks, "ROOT", tmp_path)
    monkeypatch.setattr(notebooks, "BOOK", tmp_path / "book")
    monkeypatch.setattr(notebooks, "HOMEWORK", tmp_path / "book" / "homework")
    monkeypatch.setattr(notebooks, "CONFIG", tmp_path / "_config.yml")
    return tmp_path


def test_reader_notebook_of_a_sample_chapter_is_exactly_as_written(sample_book):
    nb = nbformat.reads(
        notebooks.reader_notebook(sample_book / "book" / "07_sample.md"), as_version=4
    )
    got = [(c.cell_type, c.source, dict(c.metadata)) for c in nb.cells]
    assert got == SAMPLE_READER
    assert (
        "jupytext" not in nb.metadata and nb.metadata["kernelspec"]["name"] == "python3"
    )
    assert [c.id for c in nb.cells] == [f"cell-{i}" for i in range(len(SAMPLE_READER))]


def test_a_folded_cell_keeps_its_cell_magic_first():
    cell = notebooks.folded(nbformat.v4.new_code_cell("%%time\nx = 1"), "Timed")
    assert cell.source == "%%time\n# @title Timed\nx = 1"
    assert cell.metadata == {"cellView": "form", "jupyter": {"source_hidden": True}}


def test_myst_without_a_notebook_rendering_is_an_error(tmp_path):
    with pytest.raises(ValueError, match=r"directive \{eval-rst\}"):
        notebooks.for_jupyter("```{eval-rst}\n.. automodule:: x\n```", tmp_path)
    with pytest.raises(ValueError, match=r"role \{download\}"):
        notebooks.for_jupyter("Get {download}`this <x.zip>`.", tmp_path)
    with pytest.raises(ValueError, match="never closed"):
        notebooks.for_jupyter("```{note}\nOpen.", tmp_path)


def test_figures_numbered_references_equations_dropdowns_and_code_blocks(sample_book):
    text = (
        "# Other chapter\n\n"
        "```{figure} ../img/plot.png\n:name: fig-plot\n:alt: A plot\n\nThe caption, with $x$.\n```\n\n"
        "See {numref}`fig-plot` and {numref}`Fig. %s <fig-plot>`.\n\n"
        "```{math}\n:label: eq-one\n\na = b\n```\n\n"
        "By {eq}`eq-one`, {term}`softmax` and {abbr}`MLM (masked language modelling)`.\n\n"
        "````{dropdown} More\nHidden, as {cite:t}`doe2020` say.\n````\n\n"
        "```{code-block} bash\nmake test\n```"
    )
    (sample_book / "book" / "06_other.md").write_text(text)
    # 06_other is in no numbered part: no chapter
    page = "https://someone.github.io/a-book/book/06_other.html"
    citations = notebooks.Citations(sample_book / "book" / "references.bib")
    assert notebooks.for_jupyter(text, sample_book / "book", citations=citations) == (
        "# Other chapter\n\n"
        "![A plot](https://raw.githubusercontent.com/someone/a-book/v2.5.1/img/plot.png)\n\n"
        "*The caption, with $x$.*\n\n"
        f"See [Figure 1]({page}#fig-plot) and [Fig. 1]({page}#fig-plot).\n\n"
        "$$\na = b\n$$\n\n"
        f"By [(1)]({page}#equation-eq-one), softmax and MLM.\n\n"
        "<details>\n<summary><b>More</b></summary>\n\nHidden, as Doe and Roe (2020) say.\n\n</details>\n\n"
        "```bash\nmake test\n```"
    )
