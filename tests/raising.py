"""``raises``: what a test of an argument error asserts (CONTRIBUTING.md#validation-at-the-door).

A test of an error asserts its type and the fragments that matter, the argument's name, what was expected and
what came, as plain text, not the whole sentence: the wording around them may improve without touching the
tests.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest


@contextlib.contextmanager
def raises(
    error: type[BaseException] | tuple[type[BaseException], ...], *fragments: str
) -> Iterator[pytest.ExceptionInfo]:
    """``pytest.raises(error)`` whose message holds every one of ``fragments`` (plain text, any order)."""
    with pytest.raises(error) as info:
        yield info
    message = str(info.value)
    missing = [f for f in fragments if f not in message]
    assert not missing, f"the message {message!r} lacks {missing}"
