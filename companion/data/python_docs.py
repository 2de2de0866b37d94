"""Python's documentation as a corpus (machinery): the help topics of CPython 3.11.7, shipped with the package.

Chapters 6, 8 and 9 train on this text. Every Python installation has its own copy in ``pydoc_data.topics``,
but that copy changes with every Python release (Colab's 3.12 has other topics, another character set and other
lengths), so the book reads this snapshot instead and gets the same text on any interpreter. The snapshot is
``python_docs.json.xz``: the topics of ``Lib/pydoc_data/topics.py`` of CPython 3.11.7 as a JSON object
``{name: text}`` sorted by name, xz-compressed (97 kB for 465,000 characters). Its SHA-256 is checked on every
load. The text is part of Python's documentation, distributed under the PSF License Agreement
(``PYTHON_DOCS_LICENSE.txt`` beside it).
"""

from __future__ import annotations

import functools
import hashlib
import json
import lzma
from pathlib import Path

__all__ = ["PATH", "SHA256", "SOURCE", "topics", "text"]

#: The shipped snapshot.
PATH = Path(__file__).with_name("python_docs.json.xz")
#: SHA-256 of :data:`PATH`, checked on load.
SHA256 = "00cd729de8406210fa9746b150851489cf11d5e122db4d1ca8a626f17b4be639"
#: Where the text comes from.
SOURCE = "CPython 3.11.7, Lib/pydoc_data/topics.py"


@functools.cache
def topics() -> dict[str, str]:
    """The help topics, ``{name: text}`` sorted by name (79 topics, 464,970 characters)."""
    blob = PATH.read_bytes()
    digest = hashlib.sha256(blob).hexdigest()
    if digest != SHA256:
        raise ValueError(
            f"{PATH}: SHA-256 mismatch, expected {SHA256}, got {digest}; reinstall the package"
        )
    return json.loads(lzma.decompress(blob).decode("utf-8"))


def text(separator: str = "\n\n") -> str:
    """All topics, sorted by name and joined by ``separator``."""
    found = topics()
    return separator.join(found[name] for name in sorted(found))
