"""The book as one PDF, printed from the notebooks the HTML build executed.

    python tools/pdf.py build    # after `jupyter-book build .`: writes _build/pdf/book.pdf
    python tools/pdf.py check    # page count, every figure, rendered mathematics

`make pdf` runs both. Nothing is executed a second time: `jupyter-book build .` leaves every chapter's executed
notebook in _build/jupyter_execute/book/. `build` copies the book's sources into _build/pdf/src with those
executed notebooks in place of the MyST chapters, builds them with Sphinx's single-page builder (execution off),
and prints that page with headless Chromium, after MathJax has typeset it.

`check` reads the PDF with pypdf and fails when
- it has fewer pages than the chapters need (MIN_PAGES_PER_CHAPTER for each chapter of _toc.yml);
- a figure is missing: every PNG figure of the executed notebooks must be an image of the PDF, matched by its
  pixel size (Chromium embeds a page's PNG at its own resolution);
- mathematics is left as TeX source (a ``\\frac`` or ``$$`` in the PDF's text) or a chapter's title is absent.
"""

from __future__ import annotations

import argparse
import base64
import collections
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "_build"
EXECUTED = BUILD / "jupyter_execute" / "book"
OUT = BUILD / "pdf"
SRC = OUT / "src"
PDF = OUT / "book.pdf"
MIN_PAGES_PER_CHAPTER = 4
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")


def toc_files() -> list[str]:
    """The documents of _toc.yml in reading order, e.g. ['book/00_preface', 'book/01_words_to_vectors', ...]."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]]
    for part in toc.get("parts", []):
        files += [chapter["file"] for chapter in part.get("chapters", [])]
    return files


def chapters() -> list[str]:
    """The documents that are notebooks (a MyST source with a jupytext header), in reading order."""
    return [f for f in toc_files() if "jupytext:" in (ROOT / f"{f}.md").read_text()[:400]]


def executed_notebook(doc: str) -> Path:
    return EXECUTED / f"{Path(doc).name}.ipynb"


def fail(message: str) -> None:
    print(f"pdf: {message}", file=sys.stderr)
    raise SystemExit(1)


def stage_sources() -> None:
    """_build/pdf/src: the book's sources with each chapter replaced by its executed notebook."""
    missing = [d for d in chapters() if not executed_notebook(d).exists()]
    stale = [
        d
        for d in chapters()
        if d not in missing and executed_notebook(d).stat().st_mtime < (ROOT / f"{d}.md").stat().st_mtime
    ]
    if missing or stale:
        fail(
            "the executed notebooks of the last HTML build are missing or older than their sources "
            f"({', '.join(missing + stale)}); run `jupyter-book build .` (make book) first"
        )
    if SRC.exists():
        shutil.rmtree(SRC)
    (SRC / "book").mkdir(parents=True)
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    config["execute"]["execute_notebooks"] = "off"
    config["exclude_patterns"] = [p for p in config["exclude_patterns"] if p != "**/*.ipynb"] + ["book/homework"]
    config["only_build_toc_files"] = True
    (SRC / "_config.yml").write_text(yaml.safe_dump(config, sort_keys=False))
    shutil.copy(ROOT / "_toc.yml", SRC / "_toc.yml")
    shutil.copytree(ROOT / "_static", SRC / "_static")
    (SRC / "companion").symlink_to(ROOT / "companion")  # the chapters' {literalinclude} paths
    notebooks = set(chapters())
    for path in (ROOT / "book").iterdir():
        doc = f"book/{path.stem}"
        if path.is_file() and path.suffix != ".ipynb" and not (path.suffix == ".md" and doc in notebooks):
            shutil.copy(path, SRC / "book" / path.name)
    for doc in notebooks:
        shutil.copy(executed_notebook(doc), SRC / f"{doc}.ipynb")


def chromium() -> str:
    for name in CHROMIUM_NAMES:
        if found := shutil.which(name):
            return found
    fail("headless Chromium is needed to print the PDF (make chromium)")
    raise AssertionError


def build() -> None:
    stage_sources()
    jb = Path(sys.executable).with_name("jupyter-book")
    command = [str(jb), "build", str(SRC), "--builder", "singlehtml", "-W", "-n", "--keep-going", "-q"]
    subprocess.run(command, check=True)
    page = SRC / "_build" / "singlehtml" / "index.html"
    PDF.unlink(missing_ok=True)
    # --virtual-time-budget lets MathJax finish typesetting before the page is printed.
    subprocess.run(
        [
            chromium(),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-pdf-header-footer",
            "--run-all-compositor-stages-before-draw",
            "--virtual-time-budget=120000",
            f"--print-to-pdf={PDF}",
            page.as_uri(),
        ],
        check=True,
        capture_output=True,
    )
    if not PDF.exists():
        fail("Chromium printed no PDF")
    print(f"The PDF is at {PDF}")


def png_size(data: bytes) -> tuple[int, int]:
    """(width, height) from a PNG's IHDR chunk."""
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    return struct.unpack(">II", data[16:24])


def notebook_figures() -> collections.Counter:
    """(width, height) of every PNG figure the executed chapters show (outputs of cells the book does not remove)."""
    import nbformat

    sizes: collections.Counter = collections.Counter()
    for doc in chapters():
        nb = nbformat.read(executed_notebook(doc), as_version=4)
        for cell in nb.cells:
            tags = set(cell.get("metadata", {}).get("tags", []))
            if cell.cell_type != "code" or tags & {"remove-cell", "remove-output"}:
                continue
            for output in cell.get("outputs", []):
                png = output.get("data", {}).get("image/png")
                if png:
                    sizes[png_size(base64.b64decode(png))] += 1
    return sizes


def chapter_title(doc: str) -> str:
    """The first level-1 heading of a chapter's MyST source."""
    for line in (ROOT / f"{doc}.md").read_text().splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    raise ValueError(f"{doc}.md has no level-1 heading")


def read_pdf(path: Path) -> tuple[int, collections.Counter, str]:
    """(pages, Counter of (width, height) of its images, its text) of a PDF."""
    from pypdf import PdfReader

    reader = PdfReader(path)
    sizes: dict[int, tuple[int, int]] = {}  # image object number -> size (pages may share one resource dict)
    text = []
    for page in reader.pages:
        text.append(page.extract_text() or "")
        xobjects = (page.get("/Resources") or {}).get("/XObject") or {}
        for ref in xobjects.values():
            obj = ref.get_object()
            if obj.get("/Subtype") == "/Image":
                sizes[getattr(ref, "idnum", id(obj))] = (int(obj["/Width"]), int(obj["/Height"]))
    return len(reader.pages), collections.Counter(sizes.values()), "\n".join(text)


def problems(
    pages: int,
    images: collections.Counter,
    text: str,
    figures: collections.Counter,
    titles: dict[str, str],
    min_pages: int,
) -> list[str]:
    """What is wrong with a PDF of `pages` pages holding `images` and `text`, given the chapters' figure sizes and
    titles: too few pages, a figure missing, TeX left unrendered, a chapter's title absent."""
    found = []
    if pages < min_pages:
        found.append(f"{pages} pages, expected at least {min_pages}")
    if not figures:
        found.append("the executed notebooks hold no figures at all")
    if missing := figures - images:
        lost = f"{sum(missing.values())} of {sum(figures.values())}"
        found.append(f"{lost} figures are not in the PDF (width, height: count): {dict(missing)}")
    if tex := sorted(set(re.findall(r"\\(?:frac|sum|mathbb|begin)\b|\$\$", text))):
        found.append(f"TeX source left in the text (MathJax did not finish?): {tex}")
    letters = re.sub(r"\W+", "", text)
    for doc, title in titles.items():
        if re.sub(r"\W+", "", title) not in letters:
            found.append(f"the title of {doc} ({title!r}) is not in the PDF's text")
    return found


def check() -> None:
    if not PDF.exists():
        fail(f"no PDF at {PDF}; run `python tools/pdf.py build` (make pdf)")
    pages, images, text = read_pdf(PDF)
    figures = notebook_figures()
    titles = {doc: chapter_title(doc) for doc in chapters()}
    found = problems(pages, images, text, figures, titles, MIN_PAGES_PER_CHAPTER * len(titles))
    print(f"{PDF}: {pages} pages, {sum(images.values())} images; {sum(figures.values())} chapter figures")
    if found:
        fail("; ".join(found))
    print("every figure and chapter title is in it, and no TeX was left unrendered")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["build", "check"])
    {"build": build, "check": check}[parser.parse_args().command]()


if __name__ == "__main__":
    main()
