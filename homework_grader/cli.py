"""The command line: find the submissions, grade them side by side, write the reports."""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import tempfile
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from companion.validation import require_number

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
        p
        for p in root.rglob("*.ipynb")
        if ".ipynb_checkpoints" not in p.parts and not p.name.startswith(".")
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
    isolation: bool = True,
) -> dict[str, Path]:
    """Grade every notebook under ``submissions``; write the gradebook and reports into ``out``.

    Each notebook's answers run in a sandbox of the kernel's (``homework_grader.walls``); ``isolation``
    ``False`` (``--no-isolation``) runs them without one, for submissions the instructor trusts.

    Raises :class:`UsageError` (before anything is graded) for a missing or empty folder, a homework folder with
    no homework notebooks, an ``out`` that is an existing file, a limit that is not positive, or a machine where
    no sandbox starts (unless ``isolation`` is ``False``).
    """
    from . import report
    from .answers import book_solutions
    from .chapters import detect_chapter
    from .sandbox import defining_modules

    if not submissions.exists():
        raise UsageError(f"the submissions folder {submissions} does not exist")
    if out.exists() and not out.is_dir():
        raise UsageError(
            f"--out {out} is an existing file; it must be a folder (new or existing)"
        )
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
    limits = {
        "seconds": timeout,
        "memory_bytes": int(memory_gb * 2**30),
        "output_bytes": int(output_mb * 2**20),
    }
    limits["private"] = (str(submissions.resolve()), str(out.resolve()))
    base = {
        "chapters": [c.to_json() for c in chapters],
        "assignment": assignment.key,
        "limits": limits,
        "solutions": {c.key: book_solutions(book / f"{c.key}.md") for c in chapters},
    }
    names = {e.name for c in chapters for e in c.exercises}
    preload = [
        "torch._dynamo",
        "companion.exercises.checking",
        *sorted({m for n in names for m in defining_modules(n)}),
    ]
    with tempfile.TemporaryDirectory(prefix="companion-grader-") as scratch:
        sandbox = _walls(Path(scratch), chapters, names) if isolation else None
        base["isolation"] = (
            _isolation()
            if isolation
            else "none (--no-isolation: the submissions are trusted)"
        )
        memory = int(memory_gb * 2**30)
        if sandbox is not None:
            # the control group's limit: the answer's, plus the fork server's
            sandbox["memory_bytes"] = memory
        results = _grade_all(found, base, jobs, progress, (preload, sandbox, memory))
    # here every grading process has ended, each after its fork server and every answer's process
    root = submissions if submissions.is_dir() else submissions.parent
    for (student, path), result in zip(found, results, strict=True):
        result["student"] = student
        result["file"] = str(path.relative_to(root))
        result["problems"] = [
            n for n in notes if _note_student(n, root, path)
        ] + result["problems"]
    return report.write_all(
        out,
        results,
        chapters,
        assignment,
        isolation=base["isolation"],
        solutions=base["solutions"],
    )


def _walls(scratch: Path, chapters: list[Chapter], names: set[str]) -> dict[str, Any]:
    """The answers' sandbox: the package's copy (no checkers, no references' sources), the references' sources
    for the fork server; :class:`UsageError` where no sandbox starts."""
    import importlib.util

    from . import walls
    from .sandbox import defining_modules

    secret = {m for n in names for m in defining_modules(n)}
    for c in chapters:
        for e in c.exercises:
            checker = getattr(importlib.import_module(e.module), e.checker)
            for dotted in getattr(checker, "withhold", ()):
                parts = dotted.split(".")
                for i in range(len(parts) - 1, 0, -1):
                    try:
                        if importlib.util.find_spec(".".join(parts[:i])) is not None:
                            secret.add(".".join(parts[:i]))
                            break
                    except (ImportError, ValueError):
                        continue
    sources = walls.package_copy(scratch, sorted(secret))
    why = walls.probe(str(scratch))
    if why is not None:
        raise UsageError(
            f"{why}: the answers cannot be walled off by the kernel on this machine. Install bubblewrap "
            "(tools/ensure-bubblewrap.sh; Debian/Ubuntu: apt-get install bubblewrap), or, only for submissions you "
            "trust, pass --no-isolation"
        )
    return {"copy": str(scratch), "sources": sources}


def _isolation() -> str:
    """What the summary says of the sandbox: bubblewrap, and whether each has a control group (see
    :mod:`homework_grader.cgroup`)."""
    from . import cgroup

    group, why = cgroup.create(2**30)
    if group is None:
        return (
            f"bubblewrap; no control group ({why}): a memory check reads the answer's own process (which could "
            "reset it), and its processes are not counted"
        )
    group.remove()
    return f"bubblewrap and a control group per notebook (memory measured and limited, at most {cgroup.PIDS} tasks)"


def _grade_all(
    found: list, base: dict[str, Any], jobs: int, progress: bool, initargs: tuple
) -> list:
    from tqdm.auto import tqdm

    results: list[dict[str, Any] | None] = [None] * len(found)
    # Processes, not threads: each grading process has its own random generator for the checkers' cases and its
    # own fork server; none of them ever runs a student's code (the answers' processes do).
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(
        jobs, mp_context=context, initializer=_start_worker, initargs=initargs
    ) as pool:
        futures = {
            pool.submit(_grade_one, base, str(p)): i for i, (_, p) in enumerate(found)
        }
        bar = tqdm(
            total=len(found), desc="grading", unit="notebook", disable=not progress
        )
        for future in as_completed(futures):
            i = futures[future]
            try:
                results[i] = json.loads(future.result())
            except Exception as e:  # the grading process itself died
                results[i] = _failed(
                    {"path": str(found[i][1])},
                    f"the grader failed ({type(e).__name__}: {e})",
                    0.0,
                )
            bar.update(1)
        bar.close()
    return results


#: the grading process's own address space beyond the answers' limit (torch's libraries and the replies)
GRADER_MEMORY = 8 * 2**30


def _start_worker(
    preload: list[str], sandbox: dict[str, Any] | None = None, memory: int = 0
) -> None:
    """In each grading process: the fork server's preloads and sandbox, its end when this process ends, and a
    limit on this process's memory (what the answers send cannot grow it past that: that notebook fails)."""
    from multiprocessing.util import Finalize

    from . import remote

    remote.ZYGOTE.preload = preload
    remote.ZYGOTE.walls = sandbox
    Finalize(remote.ZYGOTE, remote.ZYGOTE.stop, exitpriority=100)
    try:
        import resource

        limit = GRADER_MEMORY + 2 * memory
        resource.setrlimit(
            resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1])
        )
    except (ImportError, ValueError, OSError):
        pass


def _grade_one(base: dict[str, Any], path: str) -> str:
    """Grade one notebook (in a grading process, with a fork server and sandbox of its own); the result as JSON
    text."""
    from . import remote, worker

    start = time.monotonic()
    try:
        result = worker.grade({**base, "path": path})
    # a failure of the grader itself (its memory limit too): that notebook's row says so
    except Exception as e:
        result = _failed(
            {"path": path},
            f"the grader failed on this notebook ({type(e).__name__}: {e})",
            start,
        )
    finally:
        if remote.ZYGOTE.walls is not None:
            # the next notebook gets a fresh sandbox: nothing of this one is left in it
            remote.ZYGOTE.stop()
    return json.dumps(result, default=str)


def _note_student(note: str, root: Path, path: Path) -> bool:
    return f"graded the newest, {path.relative_to(root)};" in note


def _assignment(
    chosen: str | None, chapters: list[Chapter], paths: list[Path], detect
) -> Chapter:
    """The chapter the gradebook's columns come from: ``--chapter`` (number or key), else the most common one."""
    if chosen:
        for c in chapters:
            if chosen in (c.key, str(c.number), f"{c.number:02d}"):
                return c
        raise UsageError(
            f"--chapter {chosen}: no such chapter; there are {', '.join(c.key for c in chapters)}"
        )
    votes = Counter()
    for p in paths:
        try:
            c = detect(json.loads(p.read_text(encoding="utf-8-sig")), chapters)
        except Exception:
            continue
        if c is not None:
            votes[c.key] += 1
    if not votes:
        raise UsageError(
            "no submission is recognisably a homework notebook of the book: say --chapter N"
        )
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
    parser.add_argument(
        "submissions",
        type=Path,
        help="a folder of .ipynb files (any layout), or one notebook",
    )
    parser.add_argument(
        "--out",
        type=Path,
        required=True,
        help="the folder for gradebook.csv, feedback/, summary",
    )
    parser.add_argument(
        "--chapter",
        help="the assignment's chapter (1 or 01_words_to_vectors); default: the most "
        "common chapter among the submissions",
    )
    parser.add_argument(
        "--homework",
        type=Path,
        help="the book's book/homework folder (default: this checkout's)",
    )
    parser.add_argument(
        "--jobs",
        type=_positive_int,
        default=max(1, (os.cpu_count() or 2) // 2),
        help="notebooks at once",
    )
    parser.add_argument(
        "--timeout",
        type=_positive,
        default=60.0,
        help="seconds per exercise (wall clock, and CPU time)",
    )
    parser.add_argument(
        "--memory-gb", type=_positive, default=4.0, help="memory per exercise's process"
    )
    parser.add_argument(
        "--output-mb",
        type=_positive,
        default=10.0,
        help="output an exercise's process may print",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument(
        "--no-isolation",
        action="store_true",
        help="run the answers without the kernel's sandbox (bubblewrap): only for submissions you trust",
    )
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
            isolation=not args.no_isolation,
        )
    except UsageError as e:
        parser.error(str(e))
    print(f"graded in {time.monotonic() - start:.1f} s")
    for what, path in paths.items():
        print(f"{what:>10}: {path}")
    return 0
