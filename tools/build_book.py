"""Build the book as ``jupyter-book build . -W -n --keep-going`` does, executing chapters side by side.

    python tools/build_book.py [--jobs N] [jupyter-book build options]

Executing the chapters is most of the build, and ``jupyter-book build`` reads (and so executes) one document
after another. Sphinx can read documents in parallel worker processes (``sphinx-build -j N``); Jupyter Book's
``build_sphinx`` takes ``jobs`` but its command line does not pass it. This script runs that command line with
``jobs`` set and with two adjustments, both pinned by constraints.txt's versions:

- Sphinx hands each worker a batch of documents (``make_chunks``: here two batches of six chapters, the
  expensive ones together). Batches of one document let a free worker take the next chapter.
- ``sphinx_multitoc_numbering`` (continuous chapter numbers across the table of contents' parts) does not
  declare whether it is safe for parallel reading, so Sphinx would fall back to reading serially. It only
  replaces ``TocTreeCollector.assign_section_numbers``, which Sphinx calls in the main process after the
  workers' environments are merged, so it is declared safe here.

Everything else (configuration, warnings as errors, the executed notebooks, the output folder) is
``jupyter-book build``'s own.
"""

from __future__ import annotations

import functools
import os
import sys

import jupyter_book.cli.main as jupyter_book_cli
import sphinx.builders
import sphinx_multitoc_numbering
from jupyter_book.sphinx import build_sphinx

_multitoc_setup = sphinx_multitoc_numbering.setup


def _multitoc_parallel_safe(app):
    _multitoc_setup(app)
    return {"parallel_read_safe": True, "parallel_write_safe": True}


def _one_document_per_batch(arguments, nproc, maxbatch=10):
    return [[name] for name in arguments]


def main(argv: list[str]) -> None:
    jobs = 2
    if argv[:1] == ["--jobs"]:
        jobs, argv = int(argv[1]), argv[2:]
    sphinx_multitoc_numbering.setup = _multitoc_parallel_safe
    sphinx.builders.make_chunks = _one_document_per_batch
    jupyter_book_cli.build_sphinx = functools.partial(build_sphinx, jobs=jobs)
    print(f"building with {jobs} worker processes (of {os.cpu_count()} CPUs)")
    jupyter_book_cli.main(["build", *argv], prog_name="jupyter-book")


if __name__ == "__main__":
    main(sys.argv[1:])
