"""Keep the book's notebooks in step with their one source, ``book/NN_name.md``.

Three things are generated from each chapter's MyST notebook:

1. its **setup cell** (the first code cell, identical in every chapter), written from the repository URL and
   ref in ``_config.yml``, the one place they are set;
2. its **paired notebook** ``book/NN_name.ipynb`` (jupytext, no outputs), which Colab and Binder open;
3. its **homework notebook** ``book/homework/NN_name.ipynb``: the chapter with every solution removed, the
   exercise directives turned into plain headings, and each exercise's stub derived from its solution cell
   (every block between a line ``# BEGIN SOLUTION`` and a line ``# END SOLUTION`` becomes
   ``raise NotImplementedError  # your code here``; a cell tagged ``exercise-stub`` is still accepted). The
   homework leaves out every listing and cell that defines what an exercise asks for (and the loop versions
   in ``GIVEAWAYS``), guards each stub with a snapshot cell before it and a restore cell after its checker so
   that a student's experiments cannot break later cells, renders citations as "(Author, year)" with a
   reference list at the end, and opens with the number of exercises.

Usage::

    python tools/notebooks.py sync     # rewrite setup cells, pairs and homework notebooks
    python tools/notebooks.py check    # exit 1 and list what is stale (CI runs this through pytest)
"""

from __future__ import annotations

import copy
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import jupytext
import nbformat
import yaml

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
HOMEWORK = BOOK / "homework"
CONFIG = ROOT / "_config.yml"

SETUP_TAG = "companion-setup"
STUB_TAG = "exercise-stub"

SETUP_TEMPLATE = """\
# Setup, the same in every chapter: in Google Colab, install the book's companion package
# from its repository at a pinned ref; anywhere else, do nothing.
import os
import subprocess
import sys

PACKAGE = "git+{url}@{ref}"
if "google.colab" in sys.modules or os.environ.get("COMPANION_SOURCE"):
    source = os.environ.get("COMPANION_SOURCE") or PACKAGE
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", source], check=True)"""

NBVAL_CHECK_OUTPUT = "nbval-check-output"
_CHECKER_CALL = re.compile(r"^(check_\w+)\(\w+\)\s*$")
_CODE_CELL = re.compile(r"^```\{code-cell\}[^\n]*\n(?:.*?\n)?```[ \t]*$", re.MULTILINE | re.DOTALL)
_FENCE_OPEN = re.compile(r"^(`{3,})\{(exercise-start|exercise-end|solution-start|solution-end)\}(.*)$")


@dataclass(frozen=True)
class Repository:
    url: str
    ref: str


def repository() -> Repository:
    """The repository URL and the ref the setup cell installs from, read from ``_config.yml``."""
    config = yaml.safe_load(CONFIG.read_text())
    repo = config["repository"]
    return Repository(url=repo["url"].rstrip("/"), ref=repo.get("branch", "main"))


def setup_cell_source() -> str:
    repo = repository()
    return SETUP_TEMPLATE.format(url=repo.url, ref=repo.ref)


def setup_cell_block() -> str:
    """The setup cell as it stands in a MyST notebook."""
    return f"```{{code-cell}} ipython3\n:tags: [remove-cell, {SETUP_TAG}]\n\n{setup_cell_source()}\n```"


def numbered_chapters() -> list[Path]:
    """The chapters of the numbered parts of ``_toc.yml``, in order: chapter k of the book is item k - 1."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [c["file"] for part in toc.get("parts", []) if part.get("numbered") for c in part["chapters"]]
    return [ROOT / f"{name}.md" for name in files]


def chapter_number(md: Path) -> int:
    """The number the book gives chapter ``md`` (its place in the numbered parts of the table of contents)."""
    listed = [p.resolve() for p in numbered_chapters()]
    if md.resolve() not in listed:
        raise ValueError(f"{md.name} is not in a numbered part of _toc.yml")
    return listed.index(md.resolve()) + 1


def chapters() -> list[Path]:
    """Every chapter source, ``book/NN_name.md``, in order."""
    return sorted(p for p in BOOK.glob("[0-9][0-9]_*.md"))


def pair_path(md: Path) -> Path:
    return md.with_suffix(".ipynb")


def homework_path(md: Path) -> Path:
    return HOMEWORK / md.with_suffix(".ipynb").name


def has_exercises(md: Path) -> bool:
    """Whether a chapter has exercises (and so a homework notebook)."""
    return "{exercise-start}" in md.read_text()


# ----- setup cell ----------------------------------------------------------------------------------------


def with_setup_cell(text: str) -> str:
    """``text`` (a MyST notebook) with its first code cell replaced by the canonical setup cell."""
    match = _CODE_CELL.search(text)
    if match is None:
        raise ValueError("a chapter must contain at least one code cell: the setup cell")
    return text[: match.start()] + setup_cell_block() + text[match.end() :]


def first_code_cell(text: str) -> str | None:
    match = _CODE_CELL.search(text)
    return None if match is None else match.group(0)


# ----- paired notebook -----------------------------------------------------------------------------------


def paired_notebook(md: Path) -> str:
    """The output-free ``.ipynb`` text that pairs with ``md``."""
    nb = jupytext.read(md)
    for i, cell in enumerate(nb.cells):  # stable ids, so regenerating an unchanged chapter changes nothing
        cell["id"] = f"cell-{i}"
    return jupytext.writes(nb, fmt="ipynb")


# ----- homework notebook ---------------------------------------------------------------------------------


SOLUTION_BEGIN = "# BEGIN SOLUTION"
SOLUTION_END = "# END SOLUTION"
STUB_LINE = "raise NotImplementedError  # your code here"

SNAPSHOT_CELL = """\
# Keeps the chapter's variables safe while you try your code out (see the note at the top).
import companion.checking as _homework

_homework_saved = _homework.snapshot(globals())"""
RESTORE_CELL = "_homework.restore(globals(), _homework_saved, keep={keep!r});"


def stub_from_solution(source: str) -> str | None:
    """The student's stub for a solution cell: every ``# BEGIN SOLUTION`` … ``# END SOLUTION`` block replaced by
    ``raise NotImplementedError`` at the marker's indentation; None if the cell has no markers."""
    if SOLUTION_BEGIN not in source and SOLUTION_END not in source:
        return None
    out: list[str] = []
    inside = False
    for number, line in enumerate(source.split("\n"), 1):
        marker = line.strip()
        if marker == SOLUTION_BEGIN:
            if inside:
                raise ValueError(f"line {number}: {SOLUTION_BEGIN} inside another solution block")
            inside = True
            out.append(line[: len(line) - len(line.lstrip())] + STUB_LINE)
        elif marker == SOLUTION_END:
            if not inside:
                raise ValueError(f"line {number}: {SOLUTION_END} without {SOLUTION_BEGIN}")
            inside = False
        elif not inside:
            out.append(line)
    if inside:
        raise ValueError(f"{SOLUTION_BEGIN} without {SOLUTION_END}")
    return "\n".join(out)


def without_markers(source: str) -> str:
    """A solution cell as the book's reader sees it (the markers are comments; this drops them)."""
    return "\n".join(line for line in source.split("\n") if line.strip() not in (SOLUTION_BEGIN, SOLUTION_END))


def top_level_definitions(source: str) -> set[str]:
    """The functions and classes a code cell defines at its top level."""
    import ast

    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    return {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}


# What a listing gives away besides the asked-for object itself: a loop version of it, or the companion's general
# version of a function an exercise asks for under a narrower name.
GIVEAWAYS = {
    "skipgram_pairs": {"skipgram_pairs_loop"},
    "scaled_dot_product_attention": {"attention_loop"},
    "gpt_forward": {"GPT"},  # chapter 6: the class holds the forward pass the exercise asks for
    "causal_band_mask": {"band_mask"},
    "banded_softmax": {"banded_attention"},
    "fmm_blend": {"fmmformer_attention", "FMMAttention"},  # chapter 9: the function and the module that calls it
    "bert_embeddings": {"BertEmbeddings"},  # chapter 7: the answer as a module
    "squad_f1": {"normalize_answer"},  # chapter 7: half of the answer
    "linear_attention_step": {"causal_linear_attention_recurrent"},  # chapter 8: the step inside its loop
}


def asked_names(nb: nbformat.NotebookNode) -> set[str]:
    """The names the chapter's exercises ask the student to write (defined in stubs or marked solutions)."""
    names: set[str] = set()
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        stub = stub_from_solution(cell.source)
        if stub is not None:
            names |= top_level_definitions(stub)
        elif STUB_TAG in cell.metadata.get("tags", []):
            names |= top_level_definitions(cell.source)
    return names


def homework_notebook(md: Path) -> str:
    """The student notebook for chapter ``md``: solutions out, stubs in, exercises as headings.

    In the homework (not in the book), listings and code cells that define what an exercise asks for are left
    out; each exercise's stub is preceded by a cell that notes the chapter's variables and its checker followed
    by one that puts back any the student's experiments replaced; citations become "(Author, year)" with a
    reference list at the end.
    """
    nb = jupytext.read(md)
    chapter = chapter_number(md)
    title = _title(nb)
    out = nbformat.v4.new_notebook()
    out.metadata = copy.deepcopy(nb.metadata)
    out.metadata.pop("jupytext", None)
    asked = asked_names(nb)
    hidden = asked | {g for name in asked for g in GIVEAWAYS.get(name, ())}
    citations = Citations(BOOK / "references.bib")
    in_solution = False
    exercise = 0
    skipped_title = False
    keep: list[str] = []
    pen_and_paper = False
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            pieces, pen_and_paper = _answer_points(cell.source, pen_and_paper)
            for piece, answer_after in pieces:
                text, in_solution, exercise = _strip_markdown(piece, in_solution, exercise, chapter)
                if not skipped_title:
                    text = re.sub(r"\A\s*# [^\n]*\n?", "", text)  # the homework has its own title
                    skipped_title = True
                text = for_jupyter(text, md.parent, hide=hidden, citations=citations)
                if text.strip():
                    out.cells.append(nbformat.v4.new_markdown_cell(text.strip("\n")))
                if answer_after:
                    out.cells.append(nbformat.v4.new_markdown_cell(ANSWER_CELL, metadata={"tags": [ANSWER_TAG]}))
            continue
        tags = list(cell.metadata.get("tags", []))
        stub = stub_from_solution(cell.source)
        if stub is None and STUB_TAG in tags:
            stub = cell.source
            tags.remove(STUB_TAG)
            if "remove-cell" in tags:  # the book hides the stub; the homework shows it
                tags.remove("remove-cell")
        if stub is not None:
            keep = sorted(top_level_definitions(stub))
            out.cells.append(nbformat.v4.new_code_cell(SNAPSHOT_CELL, metadata={"tags": ["homework-snapshot"]}))
            out.cells.append(nbformat.v4.new_code_cell(stub, metadata={"tags": [STUB_TAG, *tags]}))
            continue
        if in_solution or top_level_definitions(cell.source) & hidden:
            continue
        new = nbformat.v4.new_code_cell(cell.source)
        checker = _CHECKER_CALL.match(cell.source)
        if checker:
            # Before the student starts, the checker must say so; nbval compares this output (CI).
            verdict = _checker(checker.group(1)).not_attempted_message()
            new.outputs = [nbformat.v4.new_output("stream", name="stdout", text=verdict + "\n")]
            new.execution_count = 1  # nbval only compares the outputs of cells that were run
            tags.append(NBVAL_CHECK_OUTPUT)
        if tags:
            new.metadata["tags"] = tags
        out.cells.append(new)
        if checker and keep:
            restore = RESTORE_CELL.format(keep=keep)
            out.cells.append(nbformat.v4.new_code_cell(restore, metadata={"tags": ["homework-restore"]}))
            keep = []
    if in_solution:
        raise ValueError(f"{md.name}: a solution-start has no matching solution-end")
    references = citations.reference_list()
    if references:
        out.cells.append(nbformat.v4.new_markdown_cell("## References\n\n" + references))
    checkers = sum(1 for c in out.cells if c.cell_type == "code" and _CHECKER_CALL.match(c.source))
    out.cells.insert(0, nbformat.v4.new_markdown_cell(_introduction(title, chapter, exercise, checkers)))
    for i, cell in enumerate(out.cells):  # stable ids, so regenerating an unchanged chapter changes nothing
        cell["id"] = f"cell-{i}"
    return nbformat.writes(out) + "\n"


# A pen-and-paper question gets a markdown cell for the answer right after it; the grader collects the cells
# that start with "**Your answer" into the instructor's feedback.
ANSWER_CELL = (
    "**Your answer:**\n\n"
    "*(Double-click to write your answer here, in words and math between dollar signs: $\\partial L / \\partial E$.)*"
)
ANSWER_TAG = "homework-answer"
_PEN_AND_PAPER_START = re.compile(r"^(`{3,})\{exercise-start\}(.*)$")
_EXERCISE_END = re.compile(r"^(`{3,})\{exercise-end\}")


def _answer_points(source: str, pending: bool) -> tuple[list[tuple[str, bool]], bool]:
    """``source`` cut after the end of each pen-and-paper exercise: ``(piece, answer cell after it)`` pairs,
    and whether a pen-and-paper exercise is still open at the end (its end comes in a later cell)."""
    lines, pieces, start, i = source.split("\n"), [], 0, 0
    while i < len(lines):
        opened, ended = _PEN_AND_PAPER_START.match(lines[i]), _EXERCISE_END.match(lines[i])
        if opened:
            pending = "pen and paper" in opened.group(2).lower()
        elif ended and pending:
            fence, j = ended.group(1), i + 1
            while j < len(lines) and lines[j].strip() != fence:
                j += 1
            pieces.append(("\n".join(lines[start : j + 1]), True))
            start, i, pending = j + 1, j, False
        i += 1
    if start < len(lines) or not pieces:
        pieces.append(("\n".join(lines[start:]), False))
    return pieces, pending


def _introduction(title: str, chapter: int, exercises: int, checkers: int) -> str:
    repo = repository()
    plural = "s" if exercises != 1 else ""
    return (
        f"# Homework: {title}\n\n"
        f"This is the student version of chapter {chapter} of the book. It has **{exercises} exercise{plural}**; "
        f"{checkers} of them have a checker cell. Each starts from a stub that raises `NotImplementedError`: "
        "replace the stub with your code and run the checker cell below it. It says **PASSED**, **NOT ATTEMPTED "
        "YET**, or **WRONG** (with the input, what was expected, what came, and a hint). **You are done when "
        "every checker says PASSED.**\n\n"
        "Try your code out freely, in the exercise's cell or in new cells: the chapter's own cells use the "
        "companion's reference implementations, and the cell after each checker puts back any of the chapter's "
        "variables (`x`, `model`, `emb`, `torch`, …) that your experiments replaced, so the cells below still "
        "run. Keep the name the exercise asks for (`def one_hot(...)`, say): the checker looks for it.\n\n"
        f"The full chapter, with solutions, is at {repo.url}."
    )


def checker_call(source: str) -> str | None:
    """The checker's name if ``source`` is a checker cell (``check_x(x)``), else None."""
    m = _CHECKER_CALL.match(source)
    return m.group(1) if m else None


def _checker(name: str):
    """The :class:`companion.checking.Checker` called ``name`` in one of the ``companion.exercises`` modules."""
    import importlib
    import pkgutil

    import companion.exercises
    from companion.checking import Checker

    found = []
    for module in pkgutil.iter_modules(companion.exercises.__path__):
        obj = getattr(importlib.import_module(f"companion.exercises.{module.name}"), name, None)
        if isinstance(obj, Checker):
            found.append(obj)
    if len(found) != 1:
        raise ValueError(f"expected one checker called {name} in companion.exercises, found {len(found)}")
    return found[0]


def _title(nb: nbformat.NotebookNode) -> str:
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            m = re.search(r"^# (.+)$", cell.source, re.MULTILINE)
            if m:
                return m.group(1).strip()
    return "Chapter"


def _strip_markdown(source: str, in_solution: bool, exercise: int, chapter: int) -> tuple[str, bool, int]:
    """Remove solution blocks and turn gated exercise directives into headings, line by line."""
    lines = source.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        m = _FENCE_OPEN.match(lines[i])
        if m:
            fence, name, argument = m.groups()
            # the directive block runs to its closing fence; its options (":label:", ":class:") go with it
            j = i + 1
            while j < len(lines) and lines[j].strip() != fence:
                j += 1
            if name == "exercise-start":
                exercise += 1
                heading = f"### Exercise {chapter}.{exercise}"  # numbered as in the book
                if argument.strip():
                    heading += f" ({argument.strip()})"
                if not in_solution:
                    out.append(heading)
            elif name == "solution-start":
                in_solution = True
            elif name == "solution-end":
                in_solution = False
            i = j + 1
            continue
        if not in_solution:
            out.append(lines[i])
        i += 1
    return "\n".join(out), in_solution, exercise


# ----- MyST that Jupyter cannot render ------------------------------------------------------------------

_LITERALINCLUDE = re.compile(r"^```\{literalinclude\} (\S+)\n((?::[\w-]+:[^\n]*\n)*)```$", re.MULTILINE)
_PROOF = re.compile(r"^```\{prf:(\w+)\} ?([^\n]*)\n((?::[\w-]+:[^\n]*\n)*)\n?(.*?)\n```$", re.MULTILINE | re.DOTALL)
_ROLE = re.compile(r"\{(cite|cite:p|cite:t|ref|numref|doc|eq|math|term)\}`([^`]*)`")


def for_jupyter(
    text: str, base: Path, *, hide: set[str] | frozenset[str] = frozenset(), citations: Citations | None = None
) -> str:
    """Rewrite the MyST constructs that Jupyter and Colab show as raw text into plain markdown.

    ``literalinclude`` of a ``:pyobject:`` becomes a Python code block holding that object's source, with the
    Sphinx roles of its docstring (``:class:`~a.B``` → ``B``) reduced to their text, or nothing when the object
    is in ``hide``; ``prf:`` directives (definitions, theorems) become a bold title and their body;
    ``{cite}`key``` becomes "(Author, year)" (with ``citations``) and other roles their text.
    """

    def include(m: re.Match[str]) -> str:
        options = dict(re.findall(r":([\w-]+):\s*([^\n]*)", m.group(2)))
        if options.get("pyobject") in hide:
            return (
                f"*(The companion's `{options['pyobject']}` is left out of the homework: it gives an exercise away.)*"
            )
        source = (base / m.group(1)).resolve()
        code = source.read_text()
        if "pyobject" in options:
            code = _pyobject_source(code, options["pyobject"], source)
        code = _SPHINX_ROLE.sub(_role_text, _cut(code, options, source))
        shown = source.relative_to(ROOT) if source.is_relative_to(ROOT) else source.name
        return f"```python\n# from {shown}\n{code.rstrip()}\n```"

    def proof(m: re.Match[str]) -> str:
        kind, title, body = m.group(1), m.group(2).strip(), m.group(4).strip()
        head = f"**{kind.capitalize()}" + (f" ({title})" if title else "") + ".**"
        return f"{head} {body}"

    def role(m: re.Match[str]) -> str:
        name, content = m.group(1), m.group(2)
        if name.startswith("cite"):
            return (citations or Citations(None)).cite(content, textual=name == "cite:t")
        if name == "math":
            return f"${content}$"
        target = re.fullmatch(r"(.*?)\s*<([^>]*)>", content, re.DOTALL)
        return target.group(1) if target else content

    text = _LITERALINCLUDE.sub(include, text)
    text = _PROOF.sub(proof, text)
    return _ROLE.sub(role, text)


_SPHINX_ROLE = re.compile(
    r":(?:py:)?(?:func|class|meth|attr|mod|obj|data|exc|const|ref|doc|term):`([^`<]*?)(?:\s*<[^>]*>)?`"
)


def _role_text(m: re.Match[str]) -> str:
    """``:class:`~a.b.C``` → ``C``, ``:func:`a.f``` → ``a.f``."""
    target = m.group(1)
    return target[1:].split(".")[-1] if target.startswith("~") else target


class Citations:
    """The book's bibliography (``references.bib``), rendering citations as "(Author, year)" in order of use."""

    def __init__(self, bib: Path | None) -> None:
        self.entries = _parse_bib(bib.read_text()) if bib is not None and bib.exists() else {}
        self.used: list[str] = []

    def _names(self, key: str) -> tuple[str, str]:
        entry = self.entries.get(key)
        if entry is None:
            return key, "n.d."
        authors = [a.strip() for a in entry.get("author", "").split(" and ") if a.strip()]
        last = [a.split(",")[0].strip() if "," in a else a.split()[-1] for a in authors]
        if len(last) == 1 or (len(last) == 2 and last[1] != "others"):
            names = " and ".join(last)
        else:
            names = f"{last[0]} et al." if last else key
        return names, entry.get("year", "n.d.")

    def cite(self, keys: str, *, textual: bool = False) -> str:
        parts = []
        for key in (k.strip() for k in keys.split(",") if k.strip()):
            if key not in self.used:
                self.used.append(key)
            names, year = self._names(key)
            parts.append(f"{names} ({year})" if textual else f"{names}, {year}")
        return "; ".join(parts) if textual else f"({'; '.join(parts)})"

    def reference_list(self) -> str:
        lines = []
        for key in self.used:
            entry = self.entries.get(key, {})
            names, year = self._names(key)
            people = [a.strip() for a in entry.get("author", names).split(" and ")]
            people = ["et al." if a == "others" else " ".join(reversed(a.split(", ", 1))) for a in people]
            authors = ", ".join(people).replace(", et al.", " et al.")
            venue = entry.get("booktitle") or entry.get("journal") or entry.get("publisher") or entry.get("note", "")
            title = entry.get("title", key)
            line = f"- {authors} ({year}). *{title}*." + (f" {venue}." if venue else "")
            if entry.get("url"):
                line += f" <{entry['url']}>"
            lines.append(line)
        return "\n".join(lines)


def _parse_bib(text: str) -> dict[str, dict[str, str]]:
    """``{key: {field: value}}`` from a BibTeX file (braces removed from values, LaTeX accents simplified)."""
    entries: dict[str, dict[str, str]] = {}
    for m in re.finditer(r"@\w+\s*\{\s*([^,\s]+)\s*,", text):
        key, i, depth = m.group(1), m.end(), 1
        start = i
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        body = text[start : i - 1]
        fields: dict[str, str] = {}
        for f in re.finditer(r"(\w+)\s*=\s*", body):
            j = f.end()
            if j < len(body) and body[j] == "{":
                depth, k = 0, j
                while k < len(body):
                    depth += {"{": 1, "}": -1}.get(body[k], 0)
                    k += 1
                    if depth == 0:
                        break
                value = body[j + 1 : k - 1]
            else:
                value = re.match(r'"?([^",\n]*)', body[j:]).group(1)
            fields.setdefault(f.group(1).lower(), _latex_text(value))
        entries[key] = fields
    return entries


def _latex_text(value: str) -> str:
    value = re.sub(r"\\L\b|\{\\L\}", "Ł", value)
    value = re.sub(r"\\[`'^\"~]\{?(\w)\}?", r"\1", value)
    value = value.replace("--", "–")
    return " ".join(value.replace("{", "").replace("}", "").split())


def _cut(code: str, options: dict[str, str], path: Path) -> str:
    """Apply literalinclude's ``start-at``/``start-after``/``end-before``/``end-at`` and ``dedent`` options."""
    lines = code.splitlines()
    for key in ("start-at", "start-after"):
        if key in options:
            hits = [i for i, line in enumerate(lines) if options[key] in line]
            if not hits:
                raise ValueError(f"{path.name}: no line contains {options[key]!r} ({key})")
            lines = lines[hits[0] + (key == "start-after") :]
    for key in ("end-before", "end-at"):
        if key in options:
            hits = [i for i, line in enumerate(lines) if options[key] in line]
            if not hits:
                raise ValueError(f"{path.name}: no line contains {options[key]!r} ({key})")
            lines = lines[: hits[0] + (key == "end-at")]
    if "dedent" in options:
        width = int(options["dedent"])
        lines = [line[width:] if line[:width].isspace() else line.lstrip() for line in lines]
    return "\n".join(lines)


def _pyobject_source(code: str, name: str, path: Path) -> str:
    import ast

    tree = ast.parse(code)
    lines = code.splitlines()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)) and node.name == name:
            start = min([node.lineno] + [d.lineno for d in node.decorator_list])
            return "\n".join(lines[start - 1 : node.end_lineno])
    raise ValueError(f"{path.name} has no function or class {name!r} to include")


# ----- sync and check ------------------------------------------------------------------------------------


def expected_files() -> dict[Path, str]:
    """Every generated file and the text it should have."""
    files: dict[Path, str] = {}
    for md in chapters():
        files[pair_path(md)] = paired_notebook(md)
        if has_exercises(md):
            files[homework_path(md)] = homework_notebook(md)
    return files


def stale_setup_cells() -> list[Path]:
    return [md for md in chapters() if first_code_cell(md.read_text()) != setup_cell_block()]


def stale_files() -> list[Path]:
    return [path for path, text in expected_files().items() if not path.exists() or path.read_text() != text]


def orphans() -> list[Path]:
    """Generated notebooks whose chapter source no longer exists."""
    pairs = {md.stem for md in chapters()}
    homework = {md.stem for md in chapters() if has_exercises(md)}
    found = [p for p in BOOK.glob("[0-9][0-9]_*.ipynb") if p.stem not in pairs]
    found += [p for p in HOMEWORK.glob("*.ipynb") if p.stem not in homework]
    return sorted(found)


def sync() -> list[Path]:
    """Rewrite setup cells, pairs and homework notebooks; remove orphans. Returns the files changed."""
    changed: list[Path] = []
    for md in chapters():
        text = md.read_text()
        new = with_setup_cell(text)
        if new != text:
            md.write_text(new)
            changed.append(md)
    HOMEWORK.mkdir(exist_ok=True)
    for path, text in expected_files().items():
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
            changed.append(path)
    for path in orphans():
        path.unlink()
        changed.append(path)
    return changed


def main(argv: list[str]) -> int:
    command = argv[1] if len(argv) > 1 else "check"
    if command == "sync":
        for path in sync():
            print(f"updated {path.relative_to(ROOT)}")
        return 0
    if command == "check":
        problems = [f"setup cell differs from the template: {p.relative_to(ROOT)}" for p in stale_setup_cells()]
        problems += [f"stale or missing: {p.relative_to(ROOT)}" for p in stale_files()]
        problems += [f"orphan (no chapter source): {p.relative_to(ROOT)}" for p in orphans()]
        for line in problems:
            print(line)
        if problems:
            print("Run `make sync` (python tools/notebooks.py sync) and commit the result.")
        return 1 if problems else 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
