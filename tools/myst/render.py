"""Each MyST directive and role of a chapter as the Markdown that Jupyter and Colab render."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

from tools.myst.citations import Citations
from tools.myst.parse import Directive, Verbatim, blocks, tokens, walk
from tools.myst.targets import Target, number

# Admonitions and the title each shows when the directive gives none.
ADMONITIONS = {
    name: name.capitalize()
    for name in ("note", "tip", "hint", "important", "attention", "caution")
}
ADMONITIONS |= {
    "warning": "Warning",
    "danger": "Danger",
    "error": "Error",
    "seealso": "See also",
    "admonition": "",
}
CITE_ROLES = ("cite", "cite:p", "cite:ps", "cite:t", "cite:ts")
LINK_ROLES = ("ref", "numref", "eq", "prf:ref")
TEXT_ROLES = {
    "term": "{}",
    "abbr": "{}",
    "sub": "<sub>{}</sub>",
    "sup": "<sup>{}</sup>",
    "guilabel": "{}",
}
TEXT_ROLES |= {name: "`{}`" for name in ("code", "kbd", "samp", "file", "command")}
# The Sphinx roles of a listing's docstrings (reStructuredText in Python source), reduced to their text.
_SPHINX_ROLE = re.compile(
    r":(?:py:)?(?:func|class|meth|attr|mod|obj|data|exc|const|ref|doc|term):`([^`<]*?)(?:\s*<[^>]*>)?`"
)


@dataclass(frozen=True)
class Book:
    """What rendering needs to know of the book: its folder, its labels, the address of a rendered page and of a
    file of the repository at the release."""

    root: Path
    targets: Callable[[], dict[str, Target]]
    page_url: Callable[[Target], str]
    file_url: Callable[[str], str]


class Renderer:
    """Rewrites the MyST of one chapter that Jupyter and Colab would show as raw text into plain Markdown.

    - ``literalinclude`` → a Python code block holding the listing, cut by Sphinx's own reader
      (``sphinx.directives.code.LiteralIncludeReader``: ``:pyobject:``, ``:start-at:``, ``:dedent:``, …), the
      Sphinx roles of its docstrings (``:class:`~a.B``` → ``B``) reduced to their text; or, for an object in
      ``hide`` (the homework), a line saying it is left out;
    - ``prf:`` directives → "**Theorem 10.2 (title).** body", proofs "*Proof.* body ∎"; admonitions → a quoted
      block with a bold title (a ``<details>`` block for a dropdown); figures and images → Markdown images with
      absolute addresses; ``math`` and ``code-block`` → ``$$`` and fenced code;
    - ``{cite}`` → "(Author, year)" (``{cite:t}`` → "Author (year)"), collected in ``citations`` for the
      reference list; ``{doc}``, ``{ref}``, ``{numref}``, ``{eq}``, ``{prf:ref}`` → links to the rendered book,
      reading as the book reads; ``{math}`` → ``$…$``; other inline roles → their text;
    - ``(label)=`` targets, ``%`` comments and the labels of ``$$`` equations disappear.

    Anything else (an unknown directive or role) is an error, so that no raw MyST reaches a notebook.
    """

    def __init__(
        self,
        base: Path,
        book: Book,
        *,
        chapter: int | None = None,
        citations: Citations | None = None,
        hide: set[str] | frozenset[str] = frozenset(),
    ) -> None:
        self.base = base
        self.book = book
        self.chapter = chapter
        self.citations = citations if citations is not None else Citations(None)
        self.hide = frozenset(hide)
        self.counts: dict[str, int] = {}
        inside = base.resolve().is_relative_to(book.root)
        self.page = base.resolve().relative_to(book.root).as_posix() if inside else ""

    def markdown(self, text: str) -> str:
        """``text`` with each directive rendered, plain code fences as they are, and the prose between them."""
        parts = []
        for block in blocks(text):
            if isinstance(block, Directive):
                parts.append(self.directive(block))
            elif isinstance(block, Verbatim):
                parts.append(block.text)
            else:
                parts.append(self.prose(block))
        return "\n".join(parts)

    def prose(self, text: str) -> str:
        """The lines of ``text`` the book shows (not its targets ``(label)=``, comments ``% …``, nor the labels
        of its ``$$`` equations), each role replaced by what it reads as."""
        hidden, labelled, roles = set(), set(), []
        for token in walk(tokens(text)):
            if token.type in ("myst_target", "myst_line_comment"):
                hidden.update(range(*token.map))
            elif token.type == "math_block_label":
                labelled.add(token.map[1] - 1)
            elif token.type == "myst_role":
                roles.append((token.meta["name"], token.content))
        lines = [
            (n, line) for n, line in enumerate(text.split("\n")) if n not in hidden
        ]
        text = "\n".join(
            line[: line.rindex("$$") + 2] if n in labelled else line
            for n, line in lines
        )
        out, at = [], 0
        # in the order of the text: {name}`content` (``content`` around a `)
        for name, content in roles:
            written = [
                f"{{{name}}}{ticks}{content}{ticks}" for ticks in ("`", "``", "```")
            ]
            found, written = min(
                (text.find(w, at), w) for w in written if text.find(w, at) >= 0
            )
            out += [text[at:found], self.role(name, content)]
            at = found + len(written)
        return "".join(out) + text[at:]

    # --- directives

    def directive(self, d: Directive) -> str:
        if d.name == "literalinclude":
            return self.listing(d)
        if d.name.startswith("prf:"):
            return self.proof(d)
        if d.name in ADMONITIONS or d.name == "dropdown":
            return self.admonition(d)
        if d.name in ("figure", "image"):
            return self.image(d)
        if d.name == "math":
            return f"$$\n{d.body}\n$$"
        if d.name in ("code-block", "code", "sourcecode"):
            return f"```{d.argument}\n{d.body}\n```"
        if d.name in ("margin", "sidebar", "epigraph", "div", "container"):
            return self.markdown(d.body)
        raise ValueError(
            f"no notebook rendering for the MyST directive {{{d.name}}}: add one to tools/myst/render.py"
        )

    def path(self, name: str) -> Path:
        """A file a directive names: from the repository's root if it starts with ``/``, else from the page."""
        return (
            self.book.root / name[1:]
            if name.startswith("/")
            else (self.base / name).resolve()
        )

    def listing(self, d: Directive) -> str:
        from sphinx.directives.code import LiteralIncludeReader

        name = d.options.get("pyobject")
        if name in self.hide:
            return f"*(The companion's `{name}` is left out of the homework: it gives an exercise away.)*"
        path = self.path(d.argument)
        options: dict[str, object] = {
            k: v for k, v in d.options.items() if k not in ("caption", "name", "class")
        }
        if "dedent" in options:
            options["dedent"] = int(options["dedent"]) if options["dedent"] else None
        config = SimpleNamespace(source_encoding="utf-8-sig")
        code, _ = LiteralIncludeReader(str(path), options, config).read()
        code = _SPHINX_ROLE.sub(_role_text, code)
        shown = (
            path.relative_to(self.book.root)
            if path.is_relative_to(self.book.root)
            else path.name
        )
        language = d.options.get("language", "python" if path.suffix == ".py" else "")
        origin = f"# from {shown}\n" if language == "python" else ""
        return f"```{language}\n{origin}{code.rstrip()}\n```"

    def proof(self, d: Directive) -> str:
        kind = d.name[4:]
        body = self.markdown(d.body)
        if kind == "proof":
            end = "\n\n∎" if body.rstrip().endswith("$$") else " ∎"
            return f"*Proof.* {body}{end}"
        self.counts[kind] = self.counts.get(kind, 0) + 1
        title = self.markdown(d.argument)
        head = f"**{kind.capitalize()} {number(self.chapter, self.counts[kind])}"
        head += f" ({title}).**" if title else ".**"
        return head + ("\n\n" if body.startswith("$$") else " ") + body

    def admonition(self, d: Directive) -> str:
        title = (
            self.markdown(d.argument)
            or ADMONITIONS.get(d.name, "")
            or d.name.capitalize()
        )
        body = self.markdown(d.body)
        if d.name == "dropdown" or "dropdown" in d.options.get("class", "").split():
            return (
                f"<details>\n<summary><b>{title}</b></summary>\n\n{body}\n\n</details>"
            )
        text = f"**{title}.** {body}"
        # display math cannot be quoted: Jupyter would hand the "> " to MathJax
        if "$$" in body:
            return text
        return "\n".join(f"> {line}".rstrip() for line in text.split("\n"))

    def image(self, d: Directive) -> str:
        source = d.argument
        if not source.startswith(("http://", "https://")):
            source = self.book.file_url(
                self.path(source).relative_to(self.book.root).as_posix()
            )
        caption = self.markdown(d.body) if d.name == "figure" else ""
        alt = d.options.get("alt") or caption.split("\n")[0] or Path(source).name
        return f"![{alt}]({source})" + (f"\n\n*{caption}*" if caption else "")

    # --- roles

    def role(self, name: str, content: str) -> str:
        if name in CITE_ROLES:
            return self.citations.cite(content, textual=name.startswith("cite:t"))
        if name == "math":
            return f"${content}$"
        text, target = _explicit(content)
        if name == "doc":
            if target.startswith("/"):
                page = target[1:]
            else:
                page = os.path.normpath(
                    f"{self.page}/{target}" if self.page else target
                )
            found = self.book.targets().get(page)
            return f"[{text or (found.text if found else target)}]({self.book.page_url(Target(page, '', ''))})"
        if name in LINK_ROLES:
            found = self.book.targets().get(target)
            if found is None:  # not a label of the book (a test's text): keep the words
                return text or target
            shown = text or found.text
            if name == "numref" and text and "%s" in text:
                shown = text.replace("%s", found.text.split()[-1])
            return f"[{shown}]({self.book.page_url(found)})"
        if name in TEXT_ROLES:
            plain = re.sub(r"\s*\([^)]*\)$", "", content) if name == "abbr" else content
            shown = text if name in ("term", "abbr", "guilabel") and text else plain
            return TEXT_ROLES[name].format(shown)
        raise ValueError(
            f"no notebook rendering for the MyST role {{{name}}}: add one to tools/myst/render.py"
        )


def _explicit(content: str) -> tuple[str | None, str]:
    """A role's link text and target: ``text <target>`` → both, ``target`` → no text."""
    if content.endswith(">") and "<" in content:
        text, target = content[:-1].rsplit("<", 1)
        if ">" not in target:
            return text.rstrip(), target
    return None, content


def _role_text(m: re.Match[str]) -> str:
    """``:class:`~a.b.C``` → ``C``, ``:func:`a.f``` → ``a.f``."""
    target = m.group(1)
    return target[1:].split(".")[-1] if target.startswith("~") else target
