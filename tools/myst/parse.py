"""A MyST page cut into blocks by the book's own parser (myst-parser's markdown-it, with the book's extensions).

The notebooks keep the page's text as written except where MyST would show as raw text in Jupyter, so the
blocks are slices of the page's lines: a fenced directive (```` ```{name} ```` or ``:::{name}``) becomes a
:class:`Directive`, a plain code fence a :class:`Verbatim`, and the lines between them a run of prose (a
``str``), whose targets, comments, equation labels and roles the renderer finds by token type (:func:`walk`).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass

import yaml
from markdown_it import MarkdownIt
from markdown_it.token import Token

# The book's parse.myst_enable_extensions (_config.yml; tests/test_myst.py keeps them equal).
EXTENSIONS = frozenset(
    {"amsmath", "dollarmath", "colon_fence", "deflist", "substitution"}
)
FENCES = ("fence", "colon_fence")
_OPTION = re.compile(r"^:(?P<name>[\w-]+):[ \t]*(?P<value>.*)$")


@dataclass(frozen=True)
class Directive:
    """A MyST directive: ```` ```{name} argument ````, its options, its body (MyST, not yet rendered)."""

    name: str
    argument: str
    options: dict[str, str]
    body: str


@dataclass(frozen=True)
class Verbatim:
    """A plain code fence (```` ```python ````), copied as it is."""

    text: str


@functools.cache
def parser() -> MarkdownIt:
    """myst-parser's markdown-it parser with the book's extensions."""
    from markdown_it.renderer import RendererHTML
    from myst_parser.config.main import MdParserConfig
    from myst_parser.parsers.mdit import create_md_parser

    return create_md_parser(
        MdParserConfig(enable_extensions=set(EXTENSIONS)), RendererHTML
    )


def tokens(text: str) -> list[Token]:
    return parser().parse(text)


def directive_name(token: Token) -> str | None:
    """The name of the directive a fence token opens (``{note}`` → ``note``), or None for a plain fence."""
    if (
        token.type not in FENCES
        or not token.info.startswith("{")
        or "}" not in token.info
    ):
        return None
    return token.info[1 : token.info.index("}")]


def blocks(
    text: str, names: set[str] | frozenset[str] | None = None
) -> list[str | Directive | Verbatim]:
    """``text`` cut into its top-level fences and the runs of lines between them (each run one string).

    With ``names``, only the directives of those names are cut out; every other line stays in the runs.
    """
    lines = text.split("\n")
    out: list[str | Directive | Verbatim] = []
    start = 0
    for token in tokens(text):
        if token.level or token.type not in FENCES:
            continue
        name = directive_name(token)
        if names is not None and name not in names:
            continue
        first, end = token.map
        _check_closed(token, lines)
        if first > start:
            out.append("\n".join(lines[start:first]))
        if name is None:
            out.append(Verbatim("\n".join(lines[first:end])))
        else:
            options, body = directive_options(token.content)
            out.append(
                Directive(name, token.info[len(name) + 2 :].strip(), options, body)
            )
        start = end
    if start < len(lines):
        out.append("\n".join(lines[start:]))
    return out


def _check_closed(token: Token, lines: list[str]) -> None:
    """markdown-it runs an unclosed fence to the end of the page; the book would lose the rest: an error."""
    first, end = token.map
    closing = lines[end - 1].strip()
    if end - 1 == first or not (
        closing
        and set(closing) == {token.markup[0]}
        and len(closing) >= len(token.markup)
    ):
        raise ValueError(f"the fence {lines[first]!r} is never closed")


def directive_options(content: str) -> tuple[dict[str, str], str]:
    """A directive's options (a YAML block between ``---`` lines, then ``:name: value`` lines) and its body,
    without blank lines around it."""
    lines = content.split("\n")
    options: dict[str, str] = {}
    k = 0
    if lines and lines[0].strip() == "---":
        end = next((n for n in range(1, len(lines)) if lines[n].strip() == "---"), None)
        if end is None:
            raise ValueError("a directive's YAML options (---) are never closed")
        options = {
            str(key): str(value)
            for key, value in (yaml.safe_load("\n".join(lines[1:end])) or {}).items()
        }
        k = end + 1
    while k < len(lines) and (option := _OPTION.match(lines[k])):
        options[option["name"]] = option["value"].strip()
        k += 1
    body = lines[k:]
    while body and not body[0].strip():
        body.pop(0)
    while body and not body[-1].strip():
        body.pop()
    return options, "\n".join(body)


def walk(stream: list[Token]) -> Iterator[Token]:
    """Every token, inline ones included, in the order of the page."""
    for token in stream:
        yield token
        yield from walk(token.children or [])


def headings(stream: list[Token]) -> Iterator[tuple[int, str]]:
    """``(index, text)`` of each ATX heading (``## Text``) at the top level of a token stream."""
    for i, token in enumerate(stream):
        if (
            token.type == "heading_open"
            and not token.level
            and token.markup.startswith("#")
        ):
            yield i, stream[i + 1].content
