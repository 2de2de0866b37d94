"""Copies found, not just equal copies: how alike two answers are, whatever their names, comments and layout.

As MOSS does (Schleimer, Wilkerson and Aiken, "Winnowing: local algorithms for document fingerprinting", 2003),
each answer becomes a stream of tokens with what a copier changes for free normalised away: comments, blank lines
and indentation dropped, every name the answer chose (variables, parameters, helpers) written ``N``, every string
``S`` and every number ``0``; keywords, operators, builtins and attribute names (``.softmax``, ``.transpose``:
the library calls that carry the method) kept. The hashes of its ``k``-grams (runs of ``k`` tokens) are winnowed:
in every window of ``w`` consecutive hashes the smallest is kept, so that any run of ``k + w - 1`` tokens shared by
two answers gives them a shared fingerprint. Two answers' similarity is the Jaccard index of their fingerprint
sets, ``|A ∩ B| / |A ∪ B|``: 1 for the same token stream (a renamed, recommented copy), lower as edits accumulate.
"""

from __future__ import annotations

import builtins
import io
import keyword
import token
import tokenize
import zlib
from itertools import combinations
from typing import Any

K, W = 5, 4
_KEPT = (
    set(keyword.kwlist)
    | set(dir(builtins))
    | {"torch", "nn", "F", "np", "numpy", "math", "self"}
)


def tokens(code: str) -> list[str]:
    """The normalised token stream of ``code`` (empty when it does not tokenize)."""
    out: list[str] = []
    try:
        for t in tokenize.generate_tokens(io.StringIO(code).readline):
            if t.type in (
                token.COMMENT,
                token.NL,
                token.NEWLINE,
                token.INDENT,
                token.DEDENT,
                token.ENDMARKER,
            ):
                continue
            if t.type == token.NAME:
                out.append(
                    t.string if t.string in _KEPT or (out and out[-1] == ".") else "N"
                )
            elif t.type == token.STRING:
                out.append("S")
            elif t.type == token.NUMBER:
                out.append("0")
            else:
                out.append(t.string)
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return []
    return _without_docstrings(out)


def _without_docstrings(stream: list[str]) -> list[str]:
    """A string standing alone after ``:`` (a docstring) says nothing about the code: dropped."""
    return [
        t
        for i, t in enumerate(stream)
        if not (t == "S" and i > 0 and stream[i - 1] == ":")
    ]


def fingerprints(code: str, k: int = K, w: int = W) -> set[int]:
    """The winnowed hashes of the ``k``-grams of ``code``'s normalised tokens."""
    stream = tokens(code)
    grams = [
        zlib.crc32(" ".join(stream[i : i + k]).encode())
        for i in range(len(stream) - k + 1)
    ]
    if len(grams) <= w:
        return set(grams)
    return {min(grams[i : i + w]) for i in range(len(grams) - w + 1)}


def similarity(a: set[int], b: set[int]) -> float:
    """The Jaccard index of two fingerprint sets (0 when either is empty)."""
    if not a or not b:
        return 0.0
    return len(a & b) / len(a | b)


BOOK = "(the book's solution)"


def closest_pairs(
    answers: dict[str, dict[str, str]],
    book: dict[str, str],
    threshold: float = 0.5,
    most: int = 50,
) -> list[dict[str, Any]]:
    """``answers[student][exercise]`` = code, ``book[exercise]`` = the book's solution: for each exercise, every
    pair of students (and each student with the book) at least ``threshold`` alike, most alike first."""
    rows = []
    exercises = sorted({e for per in answers.values() for e in per})
    for exercise in exercises:
        prints = {
            s: fingerprints(per[exercise])
            for s, per in answers.items()
            if per.get(exercise)
        }
        if exercise in book:
            prints[BOOK] = fingerprints(book[exercise])
        for a, b in combinations(sorted(prints), 2):
            value = similarity(prints[a], prints[b])
            if value >= threshold:
                first, second = (b, a) if a == BOOK else (a, b)
                rows.append(
                    {
                        "exercise": exercise,
                        "student": first,
                        "other": second,
                        "similarity": round(value, 3),
                    }
                )
    rows.sort(key=lambda r: (-r["similarity"], r["exercise"], r["student"], r["other"]))
    return rows[:most]
