"""tools/pdf.py's check of the PDF edition, on PDFs made here with a known content (the book's own PDF is made and
checked by `make pdf`, a stage of `make test`)."""

import collections
import importlib.util
from pathlib import Path

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from raising import raises

pytest.importorskip("pypdf")
ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("pdf_tool", ROOT / "tools" / "pdf.py")
pdf_tool = importlib.util.module_from_spec(spec)
spec.loader.exec_module(pdf_tool)


def make_pdf(
    path: Path, image_sizes: list[tuple[int, int]], text: str, pages: int = 1
) -> Path:
    """A PDF with `text` on its first page, then one page per image (embedded at its own pixel size), then blank
    pages up to `pages`."""
    from matplotlib.backends.backend_pdf import PdfPages

    with PdfPages(path) as pdf:
        fig = plt.figure(figsize=(6, 8))
        fig.text(0.1, 0.9, text, usetex=False, parse_math=False)
        pdf.savefig(fig)
        for i, (w, h) in enumerate(image_sizes):
            fig = plt.figure(figsize=(6, 8))
            fig.figimage(np.random.default_rng(i).random((h, w)), xo=10, yo=10)
            pdf.savefig(fig)
        for _ in range(pages - 1 - len(image_sizes)):
            pdf.savefig(plt.figure(figsize=(6, 8)))
        plt.close("all")
    return path


def test_png_size_reads_the_header(tmp_path):
    path = tmp_path / "x.png"
    plt.imsave(path, np.zeros((23, 37)))
    assert pdf_tool.png_size(path.read_bytes()) == (37, 23)
    with raises(ValueError, "not a PNG"):
        pdf_tool.png_size(b"GIF89a" + bytes(30))


def test_a_pdf_with_every_figure_and_title_passes(tmp_path):
    pdf = make_pdf(tmp_path / "ok.pdf", [(37, 23), (40, 30)], "Chapter One", pages=4)
    pages, images, text = pdf_tool.read_pdf(pdf)
    assert pages == 4 and images == collections.Counter({(37, 23): 1, (40, 30): 1})
    figures = collections.Counter({(37, 23): 1, (40, 30): 1})
    assert (
        pdf_tool.problems(
            pages, images, text, figures, {"book/01": "Chapter One"}, min_pages=4
        )
        == []
    )


def test_each_defect_is_named(tmp_path):
    pdf = make_pdf(tmp_path / "bad.pdf", [(37, 23)], r"Chapter One $$\frac{a}{b}$$")
    pages, images, text = pdf_tool.read_pdf(pdf)
    found = pdf_tool.problems(
        pages,
        images,
        text,
        collections.Counter({(37, 23): 1, (64, 48): 2}),
        {"a": "Chapter One", "b": "Two"},
        4,
    )
    assert len(found) == 4, found
    assert "2 pages, expected at least 4" in found[0]
    assert "2 of 3 figures are not in the PDF" in found[1] and "(64, 48): 2" in found[1]
    assert "TeX source left" in found[2]
    assert "the title of b ('Two')" in found[3]
    assert pdf_tool.problems(pages, images, text, collections.Counter(), {}, 1) == [
        "the executed notebooks hold no figures at all",
        found[2],
    ]
