"""Sphinx extension of the book: a chapter's "Download notebook" button gives its reader notebook.

The book's theme offers each chapter's executed notebook for download (it copies
``_build/jupyter_execute/book/NN_name.ipynb`` to ``_build/html/_sources/book/NN_name.ipynb``). That notebook is
what the build ran: MyST directives that Jupyter shows as raw text, the hidden checks unfolded, every progress
bar and warning the page hides (stderr), and the printed text of some cells twice (the build merges a cell's
streams into its first one in place and keeps the others). When the build has finished, this extension puts the
reader notebook ``book/NN_name.ipynb`` (the one the Colab and Binder buttons open, written by
``tools/notebooks.py``) in its place, so that the button and the launch buttons hand out the same notebook.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from sphinx.application import Sphinx


def use_reader_notebooks(app: Sphinx, exception: Exception | None) -> None:
    """Replace every downloadable executed notebook by the reader notebook beside its source."""
    if exception is not None or app.builder.format != "html":
        return
    sources = Path(app.outdir) / "_sources"
    for docname in sorted(app.env.found_docs):
        reader = Path(app.srcdir) / f"{docname}.ipynb"
        download = sources / f"{docname}.ipynb"
        if reader.is_file() and download.is_file():
            shutil.copyfile(reader, download)


def setup(app: Sphinx) -> dict[str, bool]:
    app.connect("build-finished", use_reader_notebooks)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
