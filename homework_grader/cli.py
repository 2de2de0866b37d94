"""The command line: find the submissions, grade them side by side, write the reports."""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from companion._validate import require_number

from .chapters import Chapter, default_homework_dir, load_chapters

GENERIC = {"homework", "submission", "notebook", "untitled", "assignment"}


class UsageError(Exception):
    """Bad input from the command line: the message says what was expected and what came."""


def find_submissions(root: Path) -> tuple[list[tuple[str, Path]], list[str]]:
    """``(student, path)`` for every student under ``root`` (checkpoints skipped), in a stable order; and notes.

    The student is the first folder under ``root`` for a notebook in a folder (``alice/01_words.ipynb``), else
    the file's name without ``.ipynb``. A student with several notebooks is one student: the newest (by
    modification time, then name) is graded, and a note names the others.
    """
    if root.is_file():
        return [(root.stem, root)], []
    paths = sorted(
        p for p in root.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts and not p.name.startswith(".")
    )
    by_student: dict[str, list[Path]] = {}
    for p in paths:
        parts = p.relative_to(root).parts
        by_student.setdefault(parts[0] if len(parts) > 1 else p.stem, []).append(p)
    found, notes = [], []
    for student, mine in sorted(by_student.items()):
        newest = max(mine, key=lambda p: (p.stat().st_mtime, str(p)))
        found.append((student, newest))
        if len(mine) > 1:
            others = ", ".join(str(p.relative_to(root)) for p in mine if p != newest)
            notes.append(
                f"{len(mine)} notebooks for this student: graded the newest, {newest.relative_to(root)}; "
                f"not graded: {others}"
            )
    return found, notes


def _failed(spec: dict[str, Any], why: str, start: float) -> dict[str, Any]:
    return {
        "path": spec["path"],
        "chapter": None,
        "exercises": {},
        "problems": [why],
        "cells": 0,
        "seconds": time.monotonic() - start if start else 0.0,
    }


def grade(
    submissions: Path,
    out: Path,
    *,
    chapter: str | None = None,
    homework: Path | None = None,
    jobs: int = 2,
    timeout: float = 60.0,
    memory_gb: float = 4.0,
    output_mb: float = 10.0,
    progress: bool = True,
) -> dict[str, Path]:
    """Grade every notebook under ``submissions``; write the gradebook and reports into ``out``.

    Raises :class:`UsageError` (before anything is graded) for a missing or empty folder, a homework folder with
    no homework notebooks, an ``out`` that is an existing file, or a limit that is not positive.
    """
    from tqdm.auto import tqdm

    from . import report
    from .answers import book_solutions
    from .chapters import detect_chapter
    from .sandbox import defining_modules

    if not submissions.exists():
        raise UsageError(f"the submissions folder {submissions} does not exist")
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is an existing file; it must be a folder (new or existing)")
    for what, value in (
        ("--jobs", jobs),
        ("--timeout", timeout),
        ("--memory-gb", memory_gb),
        ("--output-mb", output_mb),
    ):
        try:
            require_number(value, what, low=0, low_open=True)
        except (TypeError, ValueError) as e:
            raise UsageError(str(e)) from None
    try:
        chapters = load_chapters(homework)
    except (FileNotFoundError, NotADirectoryError, ValueError) as e:
        raise UsageError(str(e)) from None
    found, notes = find_submissions(submissions)
    if not found:
        raise UsageError(f"no .ipynb files under {submissions}")
    assignment = _assignment(chapter, chapters, [p for _, p in found], detect_chapter)
    book = (homework or default_homework_dir()).resolve().parent
    limits = {"seconds": timeout, "memory_bytes": int(memory_gb * 2**30), "output_bytes": int(output_mb * 2**20)}
    limits["private"] = (str(submissions.resolve()), str(out.resolve()))
    base = {
        "chapters": [c.to_json() for c in chapters],
        "assignment": assignment.key,
        "limits": limits,
        "solutions": {c.key: book_solutions(book / f"{c.key}.md") for c in chapters},
    }
    results: list[dict[str, Any] | None] = [None] * len(found)
    names = {e.name for c in chapters for e in c.exercises}
    preload = [
        "torch._dynamo",
        "companion.exercises.checking",
        *sorted({m for n in names for m in defining_modules(n)}),
    ]
    # Processes, not threads: each grading process has its own random generator for the checkers' cases and its
    # own fork server; none of them ever runs a student's code (the answers' processes do).
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(jobs, mp_context=context, initializer=_start_worker, initargs=(preload,)) as pool:
        futures = {pool.submit(_grade_one, base, str(p)): i for i, (_, p) in enumerate(found)}
        bar = tqdm(total=len(found), desc="grading", unit="notebook", disable=not progress)
        for future in as_completed(futures):
            i = futures[future]
            try:
                results[i] = json.loads(future.result())
            except Exception as e:  # the grading process itself died
                results[i] = _failed({"path": str(found[i][1])}, f"the grader failed ({type(e).__name__}: {e})", 0.0)
            bar.update(1)
        bar.close()
    # here every grading process has ended, each after its fork server and every answer's process
    root = submissions if submissions.is_dir() else submissions.parent
    for (student, path), result in zip(found, results, strict=True):
        result["student"] = student
        result["file"] = str(path.relative_to(root))
        result["problems"] = [n for n in notes if _note_student(n, root, path)] + result["problems"]
    return report.write_all(out, results, chapters, assignment)


def _start_worker(preload: list[str]) -> None:
    """In each grading process: the fork server's preloads, and its end when this process ends."""
    from multiprocessing.util import Finalize

    from . import remote

    remote.ZYGOTE.preload = preload
    Finalize(remote.ZYGOTE, remote.ZYGOTE.stop, exitpriority=100)


def _grade_one(base: dict[str, Any], path: str) -> str:
    """Grade one notebook (in a grading process); the result as JSON text."""
    from . import worker

    start = time.monotonic()
    try:
        result = worker.grade({**base, "path": path})
    except Exception as e:  # a failure of the grader itself: that notebook's row says so
        result = _failed({"path": path}, f"the grader failed on this notebook ({type(e).__name__}: {e})", start)
    return json.dumps(result, default=str)


def _note_student(note: str, root: Path, path: Path) -> bool:
    return f"graded the newest, {path.relative_to(root)};" in note


def _assignment(chosen: str | None, chapters: list[Chapter], paths: list[Path], detect) -> Chapter:
    """The chapter the gradebook's columns come from: ``--chapter`` (number or key), else the most common one."""
    if chosen:
        for c in chapters:
            if chosen in (c.key, str(c.number), f"{c.number:02d}"):
                return c
        raise UsageError(f"--chapter {chosen}: no such chapter; there are {', '.join(c.key for c in chapters)}")
    votes = Counter()
    for p in paths:
        try:
            c = detect(json.loads(p.read_text(encoding="utf-8-sig")), chapters)
        except Exception:
            continue
        if c is not None:
            votes[c.key] += 1
    if not votes:
        raise UsageError("no submission is recognisably a homework notebook of the book: say --chapter N")
    key = votes.most_common(1)[0][0]
    return next(c for c in chapters if c.key == key)


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _positive(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="companion-grade",
        description="Grade a folder of submitted homework notebooks: a gradebook CSV, feedback per student, "
        "and a summary table and chart. Each exercise's answer is taken out of the notebook and checked in a "
        "process of its own; nothing else of the notebook runs.",
    )
    parser.add_argument("submissions", type=Path, help="a folder of .ipynb files (any layout), or one notebook")
    parser.add_argument("--out", type=Path, required=True, help="the folder for gradebook.csv, feedback/, summary")
    parser.add_argument(
        "--chapter",
        help="the assignment's chapter (1 or 01_words_to_vectors); default: the most "
        "common chapter among the submissions",
    )
    parser.add_argument("--homework", type=Path, help="the book's book/homework folder (default: this checkout's)")
    parser.add_argument(
        "--jobs", type=_positive_int, default=max(1, (os.cpu_count() or 2) // 2), help="notebooks at once"
    )
    parser.add_argument(
        "--timeout", type=_positive, default=60.0, help="seconds per exercise (wall clock, and CPU time)"
    )
    parser.add_argument("--memory-gb", type=_positive, default=4.0, help="memory per exercise's process")
    parser.add_argument("--output-mb", type=_positive, default=10.0, help="output an exercise's process may print")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    start = time.monotonic()
    try:
        paths = grade(
            args.submissions,
            args.out,
            chapter=args.chapter,
            homework=args.homework,
            jobs=args.jobs,
            timeout=args.timeout,
            memory_gb=args.memory_gb,
            output_mb=args.output_mb,
            progress=not args.no_progress,
        )
    except UsageError as e:
        parser.error(str(e))
    print(f"graded in {time.monotonic() - start:.1f} s")
    for what, path in paths.items():
        print(f"{what:>10}: {path}")
    return 0
