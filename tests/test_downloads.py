"""What the "Download notebook" button of each built chapter page hands a reader.

Runs when BOOK_HTML points at a built book (``make test`` builds it first and sets it); skipped otherwise.
The button links ``_sources/book/NN_name.ipynb``. It must be the chapter's reader notebook (the one the Colab
and Binder buttons open), not the executed notebook of the build, which carries every progress bar and warning
the page hides (stderr) and prints some cells' text twice (the build merges streams into the first in place).
"""

import os
from pathlib import Path

import nbformat
import pytest

from tools import notebooks

HTML = os.environ.get("BOOK_HTML")
CHAPTERS = notebooks.chapters()


def stream_defects(nb: nbformat.NotebookNode) -> list[str]:
    """Each stderr output, and each cell whose printed text appears twice (a later stdout output repeated in
    an earlier one), as 'cell N: what'."""
    defects = []
    for index, cell in enumerate(nb.cells):
        streams = [
            out for out in cell.get("outputs", []) if out.output_type == "stream"
        ]
        if any(out.name == "stderr" for out in streams):
            defects.append(f"cell {index}: stderr output")
        texts = [
            "".join(out.text)
            for out in streams
            if out.name == "stdout" and "".join(out.text)
        ]
        if any(
            later in text for i, text in enumerate(texts) for later in texts[i + 1 :]
        ):
            defects.append(f"cell {index}: stdout printed twice")
    return defects


def test_stream_defects_are_found() -> None:
    """The check itself: an executed cell as the build saves it (stdout merged into the first output in place,
    the second kept, a progress bar on stderr) is flagged; a clean one is not."""
    cell = nbformat.v4.new_code_cell("print('a'); print('b')")
    cell.outputs = [
        nbformat.v4.new_output("stream", name="stdout", text="a\nb\n"),
        nbformat.v4.new_output(
            "stream", name="stderr", text="100%|##########| 10/10\n"
        ),
        nbformat.v4.new_output("stream", name="stdout", text="b\n"),
    ]
    nb = nbformat.v4.new_notebook(cells=[cell])
    assert stream_defects(nb) == [
        "cell 0: stderr output",
        "cell 0: stdout printed twice",
    ]
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="a\nb\n")]
    assert stream_defects(nb) == []
    # print, figure, print
    cell.outputs.append(nbformat.v4.new_output("stream", name="stdout", text="c\n"))
    assert stream_defects(nb) == []


@pytest.mark.skipif(not HTML, reason="set BOOK_HTML to a built book (make test does)")
@pytest.mark.parametrize("md", CHAPTERS, ids=lambda p: p.stem)
def test_download_is_the_reader_notebook(md: Path) -> None:
    download = Path(HTML) / "_sources" / "book" / f"{md.stem}.ipynb"
    assert download.is_file(), (
        f"no downloadable notebook at {download}: was the book built?"
    )
    nb = nbformat.read(download, as_version=4)
    assert stream_defects(nb) == [], f"{download.name}: {stream_defects(nb)}"
    assert download.read_text() == notebooks.reader_path(md).read_text(), (
        f"{download.name} is not the reader notebook {notebooks.reader_path(md).name}"
    )
