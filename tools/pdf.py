"""The book as one PDF, printed from the pages the HTML build made.

    python tools/pdf.py build    # after `jupyter-book build .`: writes _build/pdf/book.pdf
    python tools/pdf.py check    # page count, every figure, rendered mathematics, every chapter

`make pdf` runs both. Nothing is executed or built a second time: headless Chromium prints each page of
_build/html that _toc.yml lists (the theme's print style drops the navigation), after MathJax has typeset it, and
pypdf joins the pages into one PDF with a bookmark per chapter.

`check` reads the PDF with pypdf and fails when
- it has fewer pages than the chapters need (MIN_PAGES_PER_CHAPTER for each chapter of _toc.yml);
- a figure is missing: every PNG figure of the executed notebooks (_build/jupyter_execute) must be an image of
  the PDF, matched by its pixel size (Chromium embeds a page's PNG at its own resolution);
- mathematics is left as TeX source (a ``\\frac`` or ``$$`` in the PDF's text) or a chapter's title is absent.
"""

from __future__ import annotations

import argparse
import base64
import collections
import html
import re
import shutil
import struct
import subprocess
import sys
import unicodedata
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "_build"
HTML = BUILD / "html"
EXECUTED = BUILD / "jupyter_execute" / "book"
OUT = BUILD / "pdf"
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
    return [
        f for f in toc_files() if "jupytext:" in (ROOT / f"{f}.md").read_text()[:400]
    ]


def executed_notebook(doc: str) -> Path:
    return EXECUTED / f"{Path(doc).name}.ipynb"


def fail(message: str) -> None:
    print(f"pdf: {message}", file=sys.stderr)
    raise SystemExit(1)


def built_pages() -> list[Path]:
    """The HTML page of every document of _toc.yml, in reading order; each must be newer than its source."""
    pages = [HTML / f"{doc}.html" for doc in toc_files()]
    missing = [p.name for p in pages if not p.exists()]
    stale = [
        p.name
        for p in pages
        if p.exists()
        and p.stat().st_mtime
        < (ROOT / p.relative_to(HTML)).with_suffix(".md").stat().st_mtime
    ]
    stale += [
        f"{Path(d).name}.ipynb" for d in chapters() if not executed_notebook(d).exists()
    ]
    if missing or stale:
        fail(
            f"the HTML build is missing or older than its sources ({', '.join(missing + stale)}); "
            "run `jupyter-book build .` (make book) first"
        )
    return pages


def chromium() -> str:
    for name in CHROMIUM_NAMES:
        if found := shutil.which(name):
            return found
    fail("headless Chromium is needed to print the PDF (make chromium)")
    raise AssertionError


def print_page(page: Path, out: Path) -> None:
    """Print one HTML page to `out` with headless Chromium (--virtual-time-budget lets MathJax finish first)."""
    command = [
        chromium(),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-pdf-header-footer",
        "--run-all-compositor-stages-before-draw",
        "--virtual-time-budget=60000",
        f"--print-to-pdf={out}",
        page.as_uri(),
    ]
    subprocess.run(command, check=True, capture_output=True, timeout=600)
    if not out.exists():
        fail(f"Chromium printed no PDF for {page}")


def build() -> None:
    from pypdf import PdfWriter

    pages = built_pages()
    parts = OUT / "pages"
    shutil.rmtree(parts, ignore_errors=True)
    parts.mkdir(parents=True)
    writer = PdfWriter()
    cover = parts / "cover.html"
    cover.write_text(cover_page())
    print_page(cover, parts / "00_cover.pdf")
    writer.append(parts / "00_cover.pdf")
    for page in pages:
        part = parts / page.with_suffix(".pdf").name
        print_page(page, part)
        start = len(writer.pages)
        writer.append(part)
        writer.add_outline_item(title=page_title(page), page_number=start)
    PDF.unlink(missing_ok=True)
    with PDF.open("wb") as f:
        writer.write(f)
    print(f"The PDF is at {PDF} ({len(writer.pages)} pages)")


def cover_page() -> str:
    """The title page: the book's title and author (_config.yml), the release, the licences and the address."""
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    version = re.search(
        r'__version__ = "([^"]+)"', (ROOT / "companion" / "__init__.py").read_text()
    )
    release = f"v{version.group(1)}" if version else ""
    site = config.get("html", {}).get("baseurl", "")
    return f"""<!doctype html><html><head><meta charset="utf-8"><style>
body {{ font-family: sans-serif; text-align: center; margin-top: 30%; }}
h1 {{ font-size: 2.6em; }} p {{ font-size: 1.1em; color: #333; }}</style></head><body>
<h1>{html.escape(config["title"])}</h1><p>{html.escape(config.get("author", ""))}</p>
<p>Release {release}, printed from {html.escape(site)}</p>
<p>Text and figures: CC BY 4.0. Code: MIT.</p></body></html>"""


def page_title(page: Path) -> str:
    """The <title> of a built page, without the book's name after the last ' — '."""
    match = re.search(r"<title>(.*?)</title>", page.read_text(), re.DOTALL)
    title = html.unescape(match.group(1)).strip() if match else page.stem
    return title.rsplit(" — ", 1)[0]


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
    # image object number -> size (pages may share one resource dict)
    sizes: dict[int, tuple[int, int]] = {}
    text = []
    for page in reader.pages:
        text.append(page.extract_text() or "")
        xobjects = (page.get("/Resources") or {}).get("/XObject") or {}
        for ref in xobjects.values():
            obj = ref.get_object()
            if obj.get("/Subtype") == "/Image":
                sizes[getattr(ref, "idnum", id(obj))] = (
                    int(obj["/Width"]),
                    int(obj["/Height"]),
                )
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
        found.append(
            f"{lost} figures are not in the PDF (width, height: count): {dict(missing)}"
        )
    if tex := sorted(set(re.findall(r"\\(?:frac|sum|mathbb|begin)\b|\$\$", text))):
        found.append(f"TeX source left in the text (MathJax did not finish?): {tex}")
    # NFKC: the ligature "ﬁ" reads "fi"
    letters = re.sub(r"\W+", "", unicodedata.normalize("NFKC", text))
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
    found = problems(
        pages, images, text, figures, titles, MIN_PAGES_PER_CHAPTER * len(titles)
    )
    print(
        f"{PDF}: {pages} pages, {sum(images.values())} images; {sum(figures.values())} chapter figures"
    )
    if found:
        fail("; ".join(found))
    print("every figure and chapter title is in it, and no TeX was left unrendered")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["build", "check"])
    {"build": build, "check": check}[parser.parse_args().command]()


if __name__ == "__main__":
    main()
