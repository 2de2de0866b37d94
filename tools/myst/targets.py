"""Where the book's labels point, and the words a link to them reads as (a section's heading, "Theorem 10.2",
"Exercise 4.1", "Figure 3.1", an equation's "(5.1)"), found by token type in each page's source."""

from __future__ import annotations

from dataclasses import dataclass

from docutils.nodes import make_id

from tools.myst.parse import (
    FENCES,
    blocks,
    directive_name,
    directive_options,
    headings,
    tokens,
)

# What the book numbers, by directive: the word it shows before the number.
NUMBERED = {"figure": "Figure", "exercise-start": "Exercise", "math": "equation"}


@dataclass(frozen=True)
class Target:
    """Where a label points in the rendered book: a page (``book/04_attention``), an anchor and a link text."""

    page: str
    anchor: str
    text: str


def number(chapter: int | None, k: int) -> str:
    """The k-th numbered thing of a chapter as the book numbers it: ``7.2``, or ``2`` outside the chapters."""
    return f"{chapter}.{k}" if chapter else str(k)


def page_targets(text: str, page: str, chapter: int | None) -> dict[str, Target]:
    """The page itself (its first heading) and every label in it: ``(label)=`` before a heading, and the
    ``:label:`` (or ``:name:``) of a figure, an exercise, a ``{math}`` equation or a ``prf:`` block."""
    stream = tokens(text)
    title = next((heading for _, heading in headings(stream)), page.rsplit("/", 1)[-1])
    found = {page: Target(page, "", title)}
    counts: dict[str, int] = {}

    def visit(text: str) -> None:
        stream = tokens(text)
        fences = [
            i for i, t in enumerate(stream) if t.type in FENCES and not t.level
        ] + [len(stream)]
        for i, token in enumerate(stream):
            # names the next heading before the next fence
            if token.type == "myst_target":
                end = next(f for f in fences if f > i)
                heading = next((h for j, h in headings(stream) if i < j < end), None)
                if heading is not None:
                    found[token.content] = Target(page, make_id(token.content), heading)
            name = directive_name(token) if not token.level else None
            if name is None:
                continue
            kind = NUMBERED.get(name) or (
                name[4:].capitalize()
                if name.startswith("prf:") and name != "prf:proof"
                else None
            )
            options, body = directive_options(token.content)
            if kind:
                counts[kind] = counts.get(kind, 0) + 1
                label = options.get("label") or options.get("name")
                shown = number(chapter, counts[kind])
                if label and kind == "equation":
                    found[label] = Target(
                        page, f"equation-{make_id(label)}", f"({shown})"
                    )
                elif label:
                    found[label] = Target(page, make_id(label), f"{kind} {shown}")
            if body and name != "code-cell":
                visit(body)

    blocks(text)  # an unclosed fence is an error here too
    visit(text)
    return found
