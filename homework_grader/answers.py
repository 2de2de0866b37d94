"""The answer to one exercise, read out of a notebook's code by parsing it (nothing of the notebook is run).

For an exercise ``name`` the answer is the last top-level ``def name``/``class name`` of the notebook's code
cells, with what it needs from the rest of the notebook: the helper functions and classes it uses, the imports
that bind names it uses, and constants assigned a literal value (``D = 64``, ``EPS = 1e-9``, ``NAMES = ("a",
"b")``), followed name by name to a fixed point. Every other top-level statement (``x = torch.randn(3)``, a
loop, a call) is left out: the grader does not run it. Names the answer uses that only such a statement binds
are reported, so that a verdict can say why the answer met a ``NameError``.

:func:`normalised` is how two answers are compared for being the same code (the book's solution, say): the
syntax tree without docstrings, type annotations or position information, with the local names (arguments and
variables) renamed in the order they appear.
"""

from __future__ import annotations

import ast
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_MAGIC = re.compile(r"^\s*[%!]")
_LITERAL_NODES = (
    ast.Constant,
    ast.UnaryOp,
    ast.BinOp,
    ast.Tuple,
    ast.List,
    ast.Set,
    ast.Dict,
)
_LITERAL_OPS = (ast.operator, ast.unaryop, ast.expr_context)


@dataclass
class Answer:
    """The code the grader runs for one exercise, and what it left out that the code refers to."""

    name: str
    # imports, constants and definitions, in the notebook's order; "" when not found
    code: str = ""
    # the code cell (0-based) holding the definition of ``name``
    cell: int | None = None
    definition: ast.AST | None = None
    # names used, bound only by statements not run
    skipped: list[str] = field(default_factory=list)
    # code cells with a syntax error (left out)
    unparsable: list[int] = field(default_factory=list)
    # ``name`` is bound only by statements the grader does not run (``name = f(...)``)
    assigned: bool = False

    @property
    def found(self) -> bool:
        return bool(self.code)


_AST_LOCK = threading.Lock()


def parse(source: str) -> ast.Module:
    """``ast.parse`` under one lock. The grader grades several notebooks in threads (``--jobs``), and CPython 3.11
    keeps the AST constructor's recursion depth per interpreter, not per thread: two threads parsing at once can
    fail with "SystemError: AST constructor recursion depth mismatch" (CPython issue 106905)."""
    # and, should a thread outside the grader's code parse at the same moment, again
    for attempt in range(3):
        try:
            with _AST_LOCK:
                return ast.parse(source)
        except SystemError as e:
            if "recursion depth mismatch" not in str(e) or attempt == 2:
                raise
    raise AssertionError("unreachable")


def _parse_cell(source: str) -> ast.Module | None:
    """A code cell's syntax tree, IPython magics and shell lines (``%time``, ``!pip``) blanked; None if invalid."""
    if source.lstrip().startswith("%%"):
        return None
    lines = ["" if _MAGIC.match(line) else line for line in source.splitlines()]
    try:
        return parse("\n".join(lines))
    except (SyntaxError, ValueError):
        return None


def _is_literal(node: ast.AST) -> bool:
    return all(isinstance(n, _LITERAL_NODES + _LITERAL_OPS) for n in ast.walk(node))


def _bound(stmt: ast.stmt) -> set[str]:
    """The names a top-level statement binds."""
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {stmt.name}
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name).split(".")[0] for a in stmt.names if a.name != "*"}
    names = set()
    for node in ast.walk(stmt):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
    return names


def _used(stmt: ast.stmt) -> set[str]:
    """The global names a statement reads (anywhere inside it: bodies, decorators, defaults, bases), less the
    names bound inside a definition (its arguments, variables, nested definitions and imports)."""
    loads = {
        n.id
        for n in ast.walk(stmt)
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
    }
    if not isinstance(stmt, DEFINITIONS):
        return loads
    inner: set[str] = set()
    for node in ast.walk(stmt):
        if isinstance(node, ast.arg):
            inner.add(node.arg)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            inner.add(node.id)
        elif isinstance(node, DEFINITIONS) and node is not stmt:
            inner.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            inner |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.ExceptHandler) and node.name:
            inner.add(node.name)
    declared = {
        n for node in ast.walk(stmt) if isinstance(node, ast.Global) for n in node.names
    }
    return loads - (inner - declared)


def _kind(stmt: ast.stmt) -> str | None:
    """``"def"``, ``"import"``, ``"constant"`` for the statements the grader takes, else None."""
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return "def"
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        return "import"
    if (
        isinstance(stmt, ast.Assign)
        and stmt.value is not None
        and _is_literal(stmt.value)
    ):
        if all(isinstance(t, ast.Name) for t in stmt.targets):
            return "constant"
    if (
        isinstance(stmt, ast.AnnAssign)
        and stmt.value is not None
        and isinstance(stmt.target, ast.Name)
    ):
        if _is_literal(stmt.value):
            return "constant"
    return None


def statements(cells: list[str]) -> tuple[list[tuple[int, ast.stmt]], list[int]]:
    """Every top-level statement of the code cells, in order, with its cell; and the cells that do not parse."""
    out, bad = [], []
    for i, source in enumerate(cells):
        if not source.strip():
            continue
        tree = _parse_cell(source)
        if tree is None:
            bad.append(i)
            continue
        out.extend((i, stmt) for stmt in tree.body)
    return out, bad


def extract(cells: list[str], name: str) -> Answer:
    """The answer to the exercise ``name`` in a notebook whose code cells are ``cells``."""
    stmts, bad = statements(cells)
    answer = Answer(name, unparsable=bad)
    # name -> index (in stmts) of the statement the answer takes for it
    taken: dict[str, int] = {}
    other: set[str] = set()  # names bound by statements the grader does not run
    for k, (_, stmt) in enumerate(stmts):
        kind = _kind(stmt)
        for bound in _bound(stmt):
            if kind is None:
                other.add(bound)
            else:
                # the last one wins, as it would in a notebook run top to bottom
                taken[bound] = k
    if name not in taken:
        answer.assigned = name in other
        return answer
    keep: set[int] = set()
    todo = [name]
    seen: set[str] = set()
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        if current not in taken:
            if current in other:
                answer.skipped.append(current)
            continue
        k = taken[current]
        keep.add(k)
        todo.extend(_used(stmts[k][1]) - seen)
    future = [
        k
        for k in sorted(keep)
        if isinstance(stmts[k][1], ast.ImportFrom)
        and stmts[k][1].module == "__future__"
    ]
    # the imports first: the one taken may be a later cell's (``import torch`` again), and a default argument
    # or a class body uses it when the answer is defined
    imports = [
        k
        for k in sorted(keep)
        if k not in future and isinstance(stmts[k][1], (ast.Import, ast.ImportFrom))
    ]
    order = future + imports + [k for k in sorted(keep) if k not in future + imports]
    answer.code = "\n".join(ast.unparse(stmts[k][1]) for k in order) + "\n"
    answer.cell, answer.definition = stmts[taken[name]]
    answer.skipped.sort()
    return answer


def is_stub(answer: Answer) -> bool:
    """Whether the answer is a function whose body only raises ``NotImplementedError`` (the untouched stub)."""
    node = answer.definition
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    body = [
        s
        for s in node.body
        if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))
    ]
    if len(body) != 1 or not isinstance(body[0], ast.Raise) or body[0].exc is None:
        return False
    exc = body[0].exc.func if isinstance(body[0].exc, ast.Call) else body[0].exc
    return isinstance(exc, ast.Name) and exc.id == "NotImplementedError"


def imported_modules(answer: Answer) -> list[str]:
    """The modules the answer's imports load (to load them before the answer's limits are set)."""
    found = []
    for node in ast.walk(parse(answer.code)):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names]
        elif (
            isinstance(node, ast.ImportFrom)
            and node.module
            and node.level == 0
            and node.module != "__future__"
        ):
            found.append(node.module)
    return sorted(set(found))


def mentions(answer: Answer, name: str) -> bool:
    """Whether the answer's code takes ``name`` from the companion (``from companion.x import name``,
    ``companion.x.name``, ``alias.name`` for a module imported from ``companion``): the reference, not written."""
    tree = parse(answer.code)
    aliases = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            aliases |= {
                (a.asname or a.name).split(".")[0]
                for a in node.names
                if a.name.split(".")[0] == "companion"
            }
        elif (
            isinstance(node, ast.ImportFrom)
            and (node.module or "").split(".")[0] == "companion"
        ):
            if any(a.name == name for a in node.names):
                return True
            aliases |= {a.asname or a.name for a in node.names}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == name:
            root = node.value
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name) and root.id in aliases:
                return True
    return False


class _Normalise(ast.NodeTransformer):
    """Drops docstrings and annotations and renames local names in order of appearance."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}

    def _local(self, name: str) -> str:
        return self.names.setdefault(name, f"v{len(self.names)}")

    def _body(self, body: list[ast.stmt]) -> list[ast.stmt]:
        if (
            body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
        ):
            if isinstance(body[0].value.value, str):
                body = body[1:] or [ast.Pass()]
        return body

    def visit_FunctionDef(self, node: ast.FunctionDef) -> Any:
        node.body = self._body(node.body)
        node.returns = None
        return self.generic_visit(node)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node: ast.ClassDef) -> Any:
        node.body = self._body(node.body)
        return self.generic_visit(node)

    def visit_arg(self, node: ast.arg) -> Any:
        node.annotation = None
        node.arg = self._local(node.arg)
        return node

    def visit_AnnAssign(self, node: ast.AnnAssign) -> Any:
        if node.value is None:
            return None
        return self.visit(ast.Assign(targets=[node.target], value=node.value, lineno=0))

    def visit_Name(self, node: ast.Name) -> Any:
        if isinstance(node.ctx, ast.Store) or node.id in self.names:
            node.id = self._local(node.id)
        return node


def normalised(node: ast.AST) -> str:
    """A text that two definitions share when they differ only in comments, docstrings, annotations, layout and
    the names of their local variables."""
    copy = parse(ast.unparse(node)).body[0]
    return ast.dump(
        _Normalise().visit(copy), annotate_fields=False, include_attributes=False
    )


_CODE_CELL = re.compile(r"^```\{code-cell\}[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)


def book_solutions(chapter_md: Path) -> dict[str, str]:
    """The normalised definitions of every solution cell (``# BEGIN SOLUTION``) of a chapter's MyST source."""
    if not chapter_md.is_file():
        return {}
    found = {}
    for m in _CODE_CELL.finditer(chapter_md.read_text(encoding="utf-8")):
        body = m.group(1)
        if "# BEGIN SOLUTION" not in body:
            continue
        lines = body.splitlines()
        # a cell's option block: --- :tags: [...] ---
        if lines and lines[0].strip() == "---":
            end = next(
                (i for i in range(1, len(lines)) if lines[i].strip() == "---"), 0
            )
            lines = lines[end + 1 :]
        lines = [line for line in lines if not line.startswith(":")]
        tree = _parse_cell("\n".join(lines))
        for stmt in tree.body if tree else []:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                found[stmt.name] = normalised(stmt)
    return found


_ANSWER_MARK = re.compile(r"^\s*\*\*your answer", re.IGNORECASE)
_HEADING = re.compile(r"^#{1,6}\s+(.+)$", re.MULTILINE)


def pen_and_paper(nb: dict[str, Any]) -> list[dict[str, str]]:
    """The student's written answers: every markdown cell whose first line starts with ``**Your answer``, with
    the last heading above it (the exercise's)."""
    found, heading = [], ""
    for cell in nb.get("cells", []):
        if not isinstance(cell, dict) or cell.get("cell_type") != "markdown":
            continue
        source = cell.get("source", "")
        text = "".join(source) if isinstance(source, list) else str(source)
        first = text.lstrip("\n").split("\n", 1)[0]
        if _ANSWER_MARK.match(first):
            found.append({"exercise": heading, "answer": text.strip()})
            continue
        headings = _HEADING.findall(text)
        if headings:
            heading = headings[-1].strip()
    return found
