"""What a reader sees: each built chapter page, loaded in headless Chromium.

Runs when BOOK_HTML points at a built book (``make test`` builds it first and sets it); skipped otherwise.
For every chapter page it checks that MathJax (served locally) typeset the math, that every code cell of the
chapter source that calls ``plt.show()`` has a figure under it on the page, that the solutions are folded
away, that every checker printed PASSED, and that the Colab and Binder buttons open a notebook that exists in
git. Every expectation comes from the chapter source (``book/NN_name.md``), never from the executed output
being checked: a build whose kernels draw nothing (e.g. with ``MPLBACKEND=Agg`` inherited) fails here.
"""

import os
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import jupytext
import pytest

from tools import notebooks

HTML = os.environ.get("BOOK_HTML")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not HTML, reason="set BOOK_HTML to a built book (make test does)"
    ),
]
CHAPTERS = notebooks.chapters()


def _chromium() -> str:
    for name in (
        os.environ.get("CHROMIUM"),
        "chromium",
        "chromium-browser",
        "google-chrome",
    ):
        if name and shutil.which(name):
            return shutil.which(name)
    pytest.fail(
        "headless Chromium is needed: install Debian's 'chromium' (tools/ensure-chromium.sh)"
    )


def _dom(page: Path, tmp_path: Path, *options: str) -> str:
    """The page's DOM after its scripts ran (MathJax typesetting, toggle buttons)."""
    result = subprocess.run(
        [
            _chromium(),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--virtual-time-budget=20000",
            *options,
            "--dump-dom",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


@pytest.fixture(scope="module")
def html() -> Path:
    path = Path(HTML)
    assert (path / "index.html").exists(), f"no built book at {path}: run `make book`"
    return path


def figure_cells(md: Path) -> list[bool]:
    """For each code cell the page shows (not tagged ``remove-cell``), in order: must it show a figure?

    A cell must when its source calls ``plt.show()`` and its output is not removed (``remove-output``).
    """
    shown = []
    for cell in jupytext.read(md).cells:
        tags = cell.metadata.get("tags", [])
        if cell.cell_type == "code" and "remove-cell" not in tags:
            shown.append("plt.show()" in cell.source and "remove-output" not in tags)
    return shown


class _Cells(HTMLParser):
    """The images under each code cell of a built page: ``images[i]`` lists the ``_images/`` sources of cell i."""

    def __init__(self):
        super().__init__()
        self.images: list[list[str]] = []
        self._depth = 0  # div nesting depth inside the current cell, 0 outside any cell

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "div":
            classes = (attrs.get("class") or "").split()
            if self._depth:
                self._depth += 1
            elif "cell" in classes and "container" in classes:
                self._depth = 1
                self.images.append([])
        elif tag == "img" and self._depth and "_images/" in (attrs.get("src") or ""):
            self.images[-1].append(attrs["src"])

    def handle_endtag(self, tag):
        if tag == "div" and self._depth:
            self._depth -= 1


def page_cells(raw: str) -> list[list[str]]:
    parser = _Cells()
    parser.feed(raw)
    return parser.images


def _tracked(root: Path, relative: str) -> bool:
    return (
        subprocess.run(
            ["git", "ls-files", "--error-unmatch", relative],
            cwd=root,
            capture_output=True,
        ).returncode
        == 0
    )


@pytest.mark.parametrize("md", CHAPTERS, ids=lambda p: p.stem)
def test_chapter_page_renders(md, html, tmp_path, root):
    page = html / "book" / f"{md.stem}.html"
    assert page.exists(), f"{page} was not built"
    raw = page.read_text()
    dom = _dom(page, tmp_path)

    # Math: MathJax is loaded from the book itself (no network), and typeset every formula without error.
    scripts = re.findall(
        r'<script[^>]+src="([^"]*mathjax[^"]*)"', raw, flags=re.IGNORECASE
    )
    assert scripts and all(not s.startswith("http") for s in scripts), scripts
    assert (page.parent / scripts[0].split("?")[0]).exists()
    if "$" in md.read_text():
        assert "<mjx-container" in dom, "MathJax did not typeset the page"
        assert "<mjx-merror" not in dom, "MathJax reported an error in a formula"

    # Figures: under every cell of the source that calls plt.show() the page has an image, and its file is there.
    expected, cells = figure_cells(md), page_cells(raw)
    assert len(cells) == len(expected), (
        f"{len(expected)} code cells in {md.name}, {len(cells)} on the page"
    )
    missing = [
        i
        for i, (want, images) in enumerate(zip(expected, cells, strict=True))
        if want and not images
    ]
    assert not missing, (
        f"{len(missing)} of {sum(expected)} figures are missing from {page.name} (shown code cells {missing}): "
        "did the kernel inherit a non-inline MPLBACKEND?"
    )
    for src in (src for images in cells for src in images):
        assert (page.parent / src).stat().st_size > 1000, src

    # Solutions: folded away behind a dropdown.
    solutions = re.findall(r'<div class="(solution[^"]*)"', dom)
    assert len(solutions) == md.read_text().count("{solution-start}")
    assert all("dropdown" in s and "toggle-hidden" in s for s in solutions), solutions

    # Checkers: in the book every exercise has its solution, so every checker cell of the source prints PASSED
    # (pen-and-paper exercises have no checker).
    checker_cells = [
        c
        for c in jupytext.read(md).cells
        if c.cell_type == "code" and notebooks.checker_call(c.source)
    ]
    verdicts = re.findall(r"(PASSED|NOT ATTEMPTED YET|WRONG)  \w+:", raw)
    assert verdicts.count("PASSED") == len(verdicts) == len(checker_cells)

    # Launch buttons: Colab and Binder open the reader notebook at the release tag (repository.branch, which
    # `make sync` sets to v + companion.__version__); the notebook exists and is tracked in git.
    repo = notebooks.repository()
    slug = repo.url.removeprefix("https://github.com/")
    notebook = f"book/{md.stem}.ipynb"
    assert (
        f"https://colab.research.google.com/github/{slug}/blob/{repo.ref}/{notebook}"
        in raw
    )
    assert (
        f"https://mybinder.org/v2/gh/{slug}/{repo.ref}?urlpath=tree/{notebook}" in raw
    )
    assert (root / notebook).exists() and _tracked(root, notebook), (
        f"{notebook} is not in git"
    )


_MEASURE = """<script>window.addEventListener("load", () => {
  const pres = [...document.querySelectorAll("div.highlight pre")];
  const rows = pres.map(p => {
    const longest = Math.max(...p.textContent.split("\\n").map(line => line.length));
    return [longest, p.scrollWidth > p.clientWidth + 1 ? 1 : 0].join(":");
  });
  document.body.setAttribute("data-code-fit", rows.join(","));
});</script>"""


def code_blocks(page: Path, tmp_path: Path, width: int) -> list[tuple[int, bool]]:
    """(longest line, scrolls sideways?) for each code block of ``page`` in a window ``width`` px wide."""
    copy = tmp_path / f"measure-{width}.html"
    base = f'<base href="{page.parent.as_uri()}/">'
    copy.write_text(
        page.read_text()
        .replace("<head>", "<head>" + base, 1)
        .replace("</head>", _MEASURE + "</head>")
    )
    dom = _dom(copy, tmp_path, f"--window-size={width},900")
    found = re.search(r'data-code-fit="([^"]*)"', dom)
    assert found, "the measuring script did not run"
    rows = [row.split(":") for row in found.group(1).split(",") if row]
    return [(int(longest), scrolls == "1") for longest, scrolls in rows]


@pytest.mark.parametrize("width", [1024, 1280])
@pytest.mark.parametrize("md", CHAPTERS, ids=lambda p: p.stem)
def test_code_of_88_columns_fits_a_laptop_screen(md, width, html, tmp_path):
    """The chapters keep code within 88 columns, the formatter's width (CONTRIBUTING.md#signatures-and-line-width):
    none of it scrolls sideways."""
    page = html / "book" / f"{md.stem}.html"
    blocks = code_blocks(page, tmp_path, width)
    assert len(blocks) == page.read_text().count('<div class="highlight"><pre>') > 0, (
        "not every code block measured"
    )
    scrolling = [longest for longest, scrolls in blocks if scrolls and longest <= 88]
    assert not scrolling, (
        f"{len(scrolling)} code blocks of at most 88 columns scroll at {width} px: {scrolling}"
    )


def test_reference_pages_exist(html):
    api = (html / "book" / "api.html").read_text()
    assert (
        "companion.embeddings.Embedding" in api
        and "companion.exercises.checking.Checker" in api
    )
    bibliography = (html / "book" / "bibliography.html").read_text()
    assert "attention is all you need" in bibliography.lower()


@pytest.mark.parametrize("md", CHAPTERS, ids=lambda p: p.stem)
def test_markdown_tables_a_cell_prints_are_tables(md, html):
    """A cell's ``display(Markdown(...))`` table renders as a table (myst-nb's ``gfm`` format), not as lines of
    pipes (its default, CommonMark, has no tables)."""
    page = (html / "book" / f"{md.stem}.html").read_text()
    raw = re.findall(r"<p>\|[^<]*\|", page)
    assert not raw, f"{len(raw)} tables printed as text: {raw[0][:120]}"
