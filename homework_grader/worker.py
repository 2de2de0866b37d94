"""Grade one submitted notebook: read it, take each exercise's answer out of it, check each answer on its own.

Nothing of the notebook is run as a notebook. The file is read (an empty file, malformed JSON or a non-notebook
is reported), normalised (any nbformat 4.x or 3, Colab and JupyterLab metadata; stored outputs are never read)
and its chapter found from its content. For each exercise of that chapter, :func:`answers.extract` takes the
student's definition and what it uses; it is checked in a fresh process of its own
(:func:`remote.check_exercise`) under the per-exercise limits. A definition equal to the book's published
solution is flagged; the written (pen-and-paper) answers are collected for the instructor.
"""

from __future__ import annotations

import importlib
import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import answers
from .chapters import Chapter, Exercise, detect_chapter
from .remote import Limits, check_exercise

PASSED, WRONG, NOT_ATTEMPTED, ERROR, TIMEOUT = (
    "passed",
    "wrong",
    "not attempted",
    "error",
    "timeout",
)
STATUSES = (PASSED, WRONG, NOT_ATTEMPTED, ERROR, TIMEOUT)
_DEFINES = re.compile(
    r"^(?:def|class)\s+(\w+)|^(\w+)\s*(?::[^=]*)?=(?!=)", re.MULTILINE
)
SKIPPED_NOTE = (
    "The grader runs only your answer's functions, classes, imports and constants with a literal value; "
    "{names} {verb} set by other statements of the notebook, which it does not run: define {them} inside "
    "your function, or as a constant."
)


@dataclass
class Notebook:
    """A submission, read and normalised."""

    cells: list[str]  # code cells' sources, in the notebook's order
    raw: dict[str, Any] = field(default_factory=dict)


class Unreadable(Exception):
    """The submission cannot be read as a notebook; the message says why."""


def read_notebook(path: Path) -> Notebook:
    """The code cells of the notebook at ``path``, or :class:`Unreadable` saying what is wrong with the file."""
    data = path.read_bytes()
    if not data.strip():
        raise Unreadable("empty file")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise Unreadable(f"not UTF-8 text ({e.reason} at byte {e.start})") from None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:
        raise Unreadable(
            f"malformed JSON (line {e.lineno}, column {e.colno}: {e.msg})"
        ) from None
    if not isinstance(raw, dict) or not isinstance(
        raw.get("cells", raw.get("worksheets")), list
    ):
        raise Unreadable("JSON, but not a Jupyter notebook (no list of cells)")
    import nbformat

    try:
        # upgrades nbformat 3; any 4.x minor version reads as it is
        nb = nbformat.reads(text, as_version=4)
    except Exception as e:
        raise Unreadable(
            f"not a readable notebook ({type(e).__name__}: {str(e).splitlines()[0][:200]})"
        ) from None
    cells = []
    for cell in nb.cells:
        if cell.get("cell_type") == "code":
            source = cell.get("source", "")
            cells.append("".join(source) if isinstance(source, list) else str(source))
    return Notebook(cells, nbformat.from_dict(nb))


def defined_names(source: str) -> set[str]:
    """Names a cell defines at its top level (``def``, ``class``, ``name =``), read without parsing the cell."""
    return {a or b for a, b in _DEFINES.findall(source)}


def grade(spec: dict[str, Any]) -> dict[str, Any]:
    """Grade the notebook ``spec["path"]``; the result is plain JSON (see :mod:`homework_grader`)."""
    start = time.monotonic()
    path = Path(spec["path"])
    chapters = [Chapter.from_json(c) for c in spec["chapters"]]
    result: dict[str, Any] = {
        "path": str(path),
        "chapter": None,
        "problems": [],
        "exercises": {},
        "cells": 0,
    }
    try:
        nb = read_notebook(path)
    except Unreadable as e:
        result["problems"].append(str(e))
        result["unreadable"] = True
        result["seconds"] = time.monotonic() - start
        return result
    chapter = detect_chapter(nb.raw, chapters)
    assigned = next((c for c in chapters if c.key == spec.get("assignment")), None)
    if chapter is None:
        chapter = assigned or (chapters[0] if chapters else None)
        result["problems"].append(
            "no chapter's homework recognised in this notebook (title, imports and checker cells all missing)"
            + (f"; graded as chapter {chapter.number}" if chapter else "")
        )
    result["written"] = answers.pen_and_paper(nb.raw)
    if chapter is None:
        result["seconds"] = time.monotonic() - start
        return result
    result["chapter"] = chapter.key
    result["cells"] = len(nb.cells)
    limits = Limits(**spec["limits"])
    solutions = spec.get("solutions", {}).get(chapter.key, {})
    for exercise in chapter.exercises:
        result["exercises"][exercise.name] = grade_exercise(
            nb, exercise, limits, solutions
        )
    printed = sum(e.get("output_bytes", 0) for e in result["exercises"].values())
    if printed > 10_000_000:
        result["problems"].append(
            f"the answers printed {printed / 1e6:.0f} MB of output (discarded)"
        )
    for i in sorted(
        {i for e in result["exercises"].values() for i in e.pop("unparsable", [])}
    ):
        result["problems"].append(
            f"code cell {i + 1} has a syntax error; it was left out"
        )
    result["seconds"] = time.monotonic() - start
    return result


def _checker(exercise: Exercise):
    return getattr(importlib.import_module(exercise.module), exercise.checker)


def grade_exercise(
    nb: Notebook, exercise: Exercise, limits: Limits, solutions: dict[str, str]
) -> dict[str, Any]:
    """The gradebook entry for one exercise: status, the message for the student, and how it was checked."""
    name = exercise.name
    answer = answers.extract(nb.cells, name)
    entry = _grade_answer(answer, exercise, limits, nb)
    if answer.found and entry.get("status") != NOT_ATTEMPTED:
        entry["code"] = answer.code  # for the similarity table (grading.similarity)
    if answer.unparsable:
        entry["unparsable"] = answer.unparsable
    if answer.cell is not None:
        entry["cell"] = answer.cell + 1
    if isinstance(answer.definition, answers.DEFINITIONS) and name in solutions:
        if answers.normalised(answer.definition) == solutions[name]:
            entry["flag"] = (
                f"`{name}` is the book's published solution (the same code after normalisation)"
            )
    return entry


def _grade_answer(
    answer: answers.Answer, exercise: Exercise, limits: Limits, nb: Notebook
) -> dict[str, Any]:
    name = exercise.name
    if not answer.found:
        for i in answer.unparsable:
            if name in defined_names(nb.cells[i]):
                return {
                    "status": ERROR,
                    "problem": f"code cell {i + 1}, which defines `{name}`, has a syntax error",
                }
        if answer.assigned:
            return {
                "status": NOT_ATTEMPTED,
                "problem": f"`{name}` is set by an assignment, which the grader does not run: write `def {name}` "
                f"(or `class {name}`)",
            }
        return {"status": NOT_ATTEMPTED, "problem": f"the notebook defines no `{name}`"}
    checker = _checker(exercise)
    if answers.is_stub(answer):
        return {
            "status": NOT_ATTEMPTED,
            "problem": "",
            "text": checker.not_attempted_message(),
            "how": "stub",
        }
    if answers.mentions(answer, name):
        return _imported(name, "companion")
    result = check_exercise(
        exercise, answer.code, limits, answers.imported_modules(answer)
    )
    entry = _entry(name, result, answer, limits)
    entry["output_bytes"] = result.get("output_bytes", 0)
    entry["seconds"] = result.get("seconds", 0.0)
    return entry


def _imported(name: str, module: str) -> dict[str, Any]:
    problem = f"`{name}` is the companion's own, taken from `{module}` instead of written (imported instead of written)"
    hint = "The exercise asks you to write it yourself; the checker compares it with the companion's."
    return {
        "status": WRONG,
        "problem": problem,
        "hint": hint,
        "text": f"WRONG  {name}: {problem}.\n{hint}",
    }


def _skipped_note(answer: answers.Answer) -> str:
    if not answer.skipped:
        return ""
    names = ", ".join(f"`{n}`" for n in answer.skipped)
    one = len(answer.skipped) == 1
    return SKIPPED_NOTE.format(
        names=names, verb="is" if one else "are", them="it" if one else "them"
    )


def _entry(
    name: str, result: dict[str, Any], answer: answers.Answer, limits: Limits
) -> dict[str, Any]:
    status = result.get("status")
    note = _skipped_note(answer)
    if status == "defining":
        problem = f"defining `{name}` raised {result['error']}"
        return {
            "status": ERROR,
            "problem": problem + (f". {note}" if note else ""),
            "text": problem,
        }
    if status == "timeout":
        return {
            "status": TIMEOUT,
            "problem": f"checking `{name}` did not finish: {result['why']}",
        }
    if status == "stopped":
        return {
            "status": ERROR,
            "problem": f"checking `{name}` stopped its process: {result['why']}",
        }
    if status == "unportable":
        problem = f"the grader cannot send the checker's arguments for `{name}` as data ({result['why']})"
        hint = "This is not a verdict on your code: tell your instructor (the checker needs a change)."
        return {
            "status": ERROR,
            "problem": problem,
            "hint": hint,
            "text": f"ERROR  {name}: {problem}.\n{hint}",
        }
    if status == "crash" or status not in (PASSED, WRONG, NOT_ATTEMPTED):
        return {
            "status": ERROR,
            "problem": f"the checker could not run: {result.get('problem')}",
        }
    module = str(result.get("module") or "")
    ours = [
        m
        for m in [module, *result.get("mro", [])]
        if m == "companion" or m.startswith("companion.")
    ]
    if status == PASSED and ours:
        return _imported(name, ours[0])
    entry = {
        k: result.get(k)
        for k in (
            "status",
            "problem",
            "input",
            "expected",
            "got",
            "hint",
            "cases",
            "text",
        )
    }
    if status != PASSED and note:
        entry["problem"] = f"{entry.get('problem') or ''} {note}".strip()
        entry["text"] = f"{entry.get('text') or ''}\n{note}".strip()
    return entry
