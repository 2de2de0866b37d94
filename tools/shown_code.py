"""Measure the code the book shows: how much of each listing is the computation.

Every ``literalinclude`` of a Python object in ``book/*.md`` (``:pyobject:``, with any ``:start-at:``,
``:end-before:``, ``:lines:`` or ``:dedent:`` the directive also carries) is cut exactly as Sphinx cuts it
(``sphinx.directives.code.LiteralIncludeReader``), parsed, and each shown line is put in one class:

- **docstring**: the docstring of the object or of one of its methods or nested classes;
- **signature**: a ``def``/``class`` header with its decorators, up to the first line of the body;
- **validation**: a ``raise`` or ``assert`` statement, an ``if`` block whose body ends by raising, and a
  statement that calls a checking helper (a name starting ``require_``, ``check_``, ``_check``, ``_require``, or
  ``describe``), whole statement counted;
- **comment** (a line that is only a comment) and **blank**;
- **computation**: every other line.

The **share** of an object is computation / (lines − blank): the part of what the reader reads that is the
mathematics (blank lines are not read). ``problems()`` lists what breaks the book's rule for shown code (see
``CONTRIBUTING.md``, section Shown code): a total share under ``MIN_SHARE``, an object over ``MAX_LINES``
lines, a line wider than ``MAX_COLUMNS``, a tool pragma. ``tests/test_shown_code.py`` fails on any of them.

Usage::

    python tools/shown_code.py           # the per-object table, in Markdown
"""

from __future__ import annotations

import ast
import re
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"

MIN_SHARE = 0.65
MAX_LINES = 40
MAX_COLUMNS = 88
GUIDE = "The rules and why: CONTRIBUTING.md#shown-code"
PRAGMAS = ("# type: ignore", "# fmt: skip", "# fmt: off", "# noqa", "# pragma")
CLASSES = ("docstring", "signature", "validation", "comment", "blank", "computation")

_DIRECTIVE = re.compile(r"^(`{3,}|:{3,})\{literalinclude\}\s+(?P<path>\S+)\s*$")
_OPTION = re.compile(r"^:(?P<key>[\w-]+):\s*(?P<value>.*)$")
_CHECK_NAME = re.compile(r"^(require_|check_|_check|_require|describe$)")


@dataclass
class Listing:
    """One ``literalinclude`` of a Python object and its shown lines, classified."""

    page: str
    line: int
    path: Path
    options: dict[str, str]
    lines: list[str] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        sliced = any(
            k in self.options
            for k in ("start-at", "start-after", "end-before", "end-at", "lines")
        )
        return f"{self.path.name}:{self.options['pyobject']}" + (
            " (slice)" if sliced else ""
        )

    def count(self, kind: str) -> int:
        return self.kinds.count(kind)

    @property
    def share(self) -> float:
        read = len(self.lines) - self.count("blank")
        return self.count("computation") / read if read else 0.0


def listings(book: Path = BOOK) -> list[Listing]:
    """Every ``literalinclude`` with ``:pyobject:`` in the chapters under ``book``, in reading order."""
    found = []
    for page in sorted(book.glob("*.md")):
        text = page.read_text(encoding="utf-8").split("\n")
        for i, line in enumerate(text):
            m = _DIRECTIVE.match(line.strip())
            if not m:
                continue
            options = {}
            for option in text[i + 1 :]:
                o = _OPTION.match(option.strip())
                if not o:
                    break
                options[o["key"]] = o["value"].strip()
            if "pyobject" in options:
                path = (page.parent / m["path"]).resolve()
                found.append(Listing(page.name, i + 1, path, options))
    for listing in found:
        listing.lines = _read(listing)
        listing.kinds = classify("\n".join(listing.lines))
    return found


def _read(listing: Listing) -> list[str]:
    from sphinx.directives.code import LiteralIncludeReader

    keep = (
        "pyobject",
        "start-at",
        "start-after",
        "end-before",
        "end-at",
        "lines",
        "dedent",
    )
    options: dict[str, object] = {k: v for k, v in listing.options.items() if k in keep}
    if "dedent" in options:
        options["dedent"] = int(str(options["dedent"])) if options["dedent"] else None
    config = SimpleNamespace(source_encoding="utf-8-sig")
    code, _ = LiteralIncludeReader(str(listing.path), options, config).read()
    return code.rstrip("\n").split("\n")


def _calls_checker(node: ast.AST) -> bool:
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call):
            f = sub.func
            name = (
                f.id
                if isinstance(f, ast.Name)
                else f.attr
                if isinstance(f, ast.Attribute)
                else ""
            )
            if _CHECK_NAME.match(name):
                return True
    return False


def _is_validation(stmt: ast.stmt) -> bool:
    if isinstance(stmt, ast.Raise | ast.Assert):
        return True
    if (
        isinstance(stmt, ast.If)
        and not stmt.orelse
        and isinstance(stmt.body[-1], ast.Raise)
    ):
        return True
    if isinstance(stmt, ast.Expr | ast.Assign | ast.AnnAssign | ast.For):
        return _calls_checker(stmt)
    return False


def classify(code: str) -> list[str]:
    """The class of each line of ``code`` (a listing as Sphinx cuts it), one of ``CLASSES``."""
    lines = code.split("\n")
    kinds = ["computation"] * len(lines)
    tree = ast.parse(textwrap.dedent(code))

    def mark(first: int, last: int, kind: str) -> None:
        for n in range(first - 1, last):
            if kinds[n] == "computation":
                kinds[n] = kind

    def visit(body: list[ast.stmt]) -> None:
        for stmt in body:
            if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                start = min([stmt.lineno] + [d.lineno for d in stmt.decorator_list])
                mark(start, stmt.body[0].lineno - 1, "signature")
                inner = stmt.body
                first = inner[0]
                if isinstance(first, ast.Expr) and isinstance(
                    first.value, ast.Constant
                ):
                    if isinstance(first.value.value, str):
                        mark(
                            first.lineno, first.end_lineno or first.lineno, "docstring"
                        )
                        inner = inner[1:]
                visit(inner)
            elif _is_validation(stmt):
                mark(stmt.lineno, stmt.end_lineno or stmt.lineno, "validation")
            else:
                for child in ("body", "orelse", "finalbody"):
                    visit(getattr(stmt, child, []) or [])
                for handler in getattr(stmt, "handlers", []) or []:
                    visit(handler.body)

    visit(tree.body)
    for n, line in enumerate(lines):
        if kinds[n] != "computation":
            continue
        if not line.strip():
            kinds[n] = "blank"
        elif line.strip().startswith("#"):
            kinds[n] = "comment"
    return kinds


def unannotated(listing: Listing) -> list[str]:
    """The functions of ``listing`` whose signature lacks an annotation, as ``name(arg, ..., return)``: every
    argument but ``self``/``cls``, and the return value, carry one (CONTRIBUTING.md#signatures-and-line-width).
    """
    found = []
    for node in ast.walk(ast.parse(textwrap.dedent("\n".join(listing.lines)))):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            a = node.args
            args = [*a.posonlyargs, *a.args, *a.kwonlyargs]
            args += [x for x in (a.vararg, a.kwarg) if x is not None]
            missing = [
                x.arg
                for x in args
                if x.annotation is None and x.arg not in ("self", "cls")
            ]
            if node.returns is None:
                missing.append("return")
            if missing:
                found.append(f"{node.name}({', '.join(missing)})")
    return found


def problems(found: list[Listing]) -> list[str]:
    """What breaks the rule for shown code, one sentence each; empty when the book keeps it."""
    out = []
    read = sum(len(x.lines) - x.count("blank") for x in found)
    computation = sum(x.count("computation") for x in found)
    if not read or computation / read < MIN_SHARE:
        share = computation / read if read else 0.0
        out.append(
            f"the computation is {share:.0%} of the shown lines, under {MIN_SHARE:.0%}"
        )
    for x in found:
        where = f"{x.page}:{x.line} {x.name}"
        if len(x.lines) > MAX_LINES:
            out.append(f"{where} shows {len(x.lines)} lines, over {MAX_LINES}")
        for n, line in enumerate(x.lines, 1):
            if len(line) > MAX_COLUMNS:
                out.append(
                    f"{where} line {n} is {len(line)} columns wide, over {MAX_COLUMNS}"
                )
            if any(p in line for p in PRAGMAS):
                out.append(f"{where} line {n} carries a tool pragma: {line.strip()}")
    return out


def table(found: list[Listing]) -> str:
    """The per-object table in Markdown, with a total row."""
    head = "| chapter:line | object | lines | " + " | ".join(CLASSES) + " | share |"
    rows = [head, "|" + "---|" * (len(CLASSES) + 4)]
    for x in found:
        counts = " | ".join(str(x.count(k)) for k in CLASSES)
        rows.append(
            f"| {x.page}:{x.line} | `{x.name}` | {len(x.lines)} | {counts} | {x.share:.0%} |"
        )
    total = sum(len(x.lines) for x in found)
    sums = {k: sum(x.count(k) for x in found) for k in CLASSES}
    read = total - sums["blank"]
    share = sums["computation"] / read if read else 0.0
    counts = " | ".join(str(sums[k]) for k in CLASSES)
    rows.append(f"| total | {len(found)} objects | {total} | {counts} | {share:.0%} |")
    return "\n".join(rows)


def main() -> int:
    found = listings()
    print(table(found))
    issues = problems(found)
    wide = sum(len(line) > MAX_COLUMNS for x in found for line in x.lines)
    print(
        f"\n{wide} of {sum(len(x.lines) for x in found)} shown lines are wider than {MAX_COLUMNS} columns"
    )
    if issues:
        print(f"\n{len(issues)} problems:")
        print("\n".join(f"- {p}" for p in issues))
    return 1 if issues else 0


if __name__ == "__main__":
    sys.exit(main())
