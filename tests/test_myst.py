"""tools/myst: MyST read by the book's own parser (markdown-it with myst-parser's plugins) and rendered as the
Markdown that Jupyter and Colab show. Each test pins one conversion on a small snippet."""

import nbformat
import yaml

from tools import notebooks
from tools.myst.parse import EXTENSIONS, Directive, Verbatim, blocks
from tools.myst.render import Book, Renderer
from tools.myst.targets import Target, page_targets


def render(text, tmp_path, **labels):
    book = Book(
        root=tmp_path,
        targets=lambda: labels,
        page_url=lambda t: (
            f"https://book/{t.page}.html" + (f"#{t.anchor}" if t.anchor else "")
        ),
        file_url=lambda path: f"https://raw/{path}",
    )
    return Renderer(tmp_path, book, chapter=3).markdown(text)


def test_the_parser_has_the_books_extensions():
    config = yaml.safe_load(notebooks.CONFIG.read_text())
    assert set(config["parse"]["myst_enable_extensions"]) == EXTENSIONS


def test_a_directive_with_options():
    text = "Before.\n\n```{figure} a.png\n:alt: A cat\n:name: fig-cat\n\nThe *cat*.\n```\n\nAfter."
    assert blocks(text) == [
        "Before.\n",
        Directive("figure", "a.png", {"alt": "A cat", "name": "fig-cat"}, "The *cat*."),
        "\nAfter.",
    ]
    yaml_options = "```{image} b.png\n---\nalt: A dog\nwidth: 50%\n---\n```"
    assert blocks(yaml_options) == [
        Directive("image", "b.png", {"alt": "A dog", "width": "50%"}, "")
    ]


def test_a_figure_links_to_the_repository_file(tmp_path):
    text = "```{figure} a.png\n:alt: A cat\n:name: fig-cat\n\nThe *cat*.\n```"
    assert render(text, tmp_path) == "![A cat](https://raw/a.png)\n\n*The *cat*.*"


def test_a_nested_fence_stays_inside_its_directive(tmp_path):
    text = "````{note} Code\nRun:\n\n```python\nx = 1\n```\n````\n\n````markdown\n```{note}\nraw\n```\n````"
    first, gap, shown = blocks(text)
    assert (
        first == Directive("note", "Code", {}, "Run:\n\n```python\nx = 1\n```")
        and gap == ""
    )
    # MyST quoted in a plain fence: as is
    assert shown == Verbatim("````markdown\n```{note}\nraw\n```\n````")
    assert (
        render(text, tmp_path)
        == "> **Code.** Run:\n>\n> ```python\n> x = 1\n> ```\n\n" + shown.text
    )


def test_math_targets_and_comments(tmp_path):
    text = (
        "(sec-a)=\n## A\n% not shown\nWith {math}`x^2`:\n\n$$\nx^2 = 4\n$$ (eq-sq)\n\n"
        "```{math}\n:label: eq-b\ny\n```"
    )
    assert render(text, tmp_path) == "## A\nWith $x^2$:\n\n$$\nx^2 = 4\n$$\n\n$$\ny\n$$"


def test_roles_are_found_by_the_parser_not_in_code(tmp_path):
    text = "Write `{term}` before {term}`a word <glossary-word>`; see {ref}`sec-a` and {numref}`Fig. %s <fig-a>`."
    # a ` inside: two around
    assert render("{math}``a`b`` and {math}`c`.", tmp_path) == "$a`b$ and $c$."
    labels = {
        "sec-a": Target("book/02_x", "sec-a", "Attention"),
        "fig-a": Target("book/02_x", "fig-a", "Figure 2.1"),
    }
    assert render(text, tmp_path, **labels) == (
        "Write `{term}` before a word; see [Attention](https://book/book/02_x.html#sec-a) and "
        "[Fig. 2.1](https://book/book/02_x.html#fig-a)."
    )


def test_a_theorem_and_its_proof_are_numbered_in_the_chapter(tmp_path):
    text = ":::{prf:theorem} Sums\n:label: thm-s\n$1 + 1 = 2$.\n:::\n\n```{prf:proof}\nCount.\n```"
    assert (
        render(text, tmp_path)
        == "**Theorem 3.1 (Sums).** $1 + 1 = 2$.\n\n*Proof.* Count. ∎"
    )


def test_an_unclosed_fence_is_an_error():
    import pytest

    with pytest.raises(ValueError, match="never closed"):
        blocks("```{note}\nNo end.")


def test_a_solution_block_is_cut_at_its_fences_only():
    text = (
        "```{solution-start} ex-a\n:class: dropdown\n```\n\n"
        "The answer, with a {note} word.\n\n```{solution-end}\n```"
    )
    assert blocks(text, notebooks.GATED) == [
        Directive("solution-start", "ex-a", {"class": "dropdown"}, ""),
        "\nThe answer, with a {note} word.\n",
        Directive("solution-end", "", {}, ""),
    ]


def test_labels_and_the_words_a_link_to_them_reads_as():
    text = (
        "# Title\n\n(sec-x)=\n## Section\n\n```{prf:theorem} T\n:label: thm-a\nbody\n```\n\n"
        "```{math}\n:label: eq-a\nx\n```\n\n```{exercise-start} E\n:label: ex-a\n```\n\n```{exercise-end}\n```"
    )
    assert page_targets(text, "book/03_x", 3) == {
        "book/03_x": Target("book/03_x", "", "Title"),
        "sec-x": Target("book/03_x", "sec-x", "Section"),
        "thm-a": Target("book/03_x", "thm-a", "Theorem 3.1"),
        "eq-a": Target("book/03_x", "equation-eq-a", "(3.1)"),
        "ex-a": Target("book/03_x", "ex-a", "Exercise 3.1"),
    }


def test_a_remove_cell_is_folded_under_what_it_does():
    checks = notebooks._reader_code_cell(
        nbformat.v4.new_code_cell("assert x == 1", metadata={"tags": ["remove-cell"]})
    )
    hidden = notebooks._reader_code_cell(
        nbformat.v4.new_code_cell("y = 2", metadata={"tags": ["remove-cell"]})
    )
    assert (
        checks.source
        == "# @title Check the claims of the text above (hidden in the book)\nassert x == 1"
    )
    assert hidden.source == "# @title Code hidden in the book\ny = 2"
    assert checks.metadata == {
        "tags": ["remove-cell"],
        "cellView": "form",
        "jupyter": {"source_hidden": True},
    }


def test_the_setup_cell_replaces_the_first_code_cell_not_one_quoted_in_a_fence(
    monkeypatch,
):
    monkeypatch.setattr(notebooks, "setup_cell_block", lambda: "SETUP")
    quoted = "````markdown\n```{code-cell} ipython3\nquoted = 1\n```\n````"
    text = f"# T\n\n{quoted}\n\n```{{code-cell}} ipython3\nold = 1\n```\n\nText."
    assert notebooks.with_setup_cell(text) == f"# T\n\n{quoted}\n\nSETUP\n\nText."
