"""What the grader writes: the gradebook CSV, one feedback file per student, the summary table and chart."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from .chapters import Chapter
from .worker import ERROR, NOT_ATTEMPTED, PASSED, STATUSES, TIMEOUT, WRONG

FIXED = ("student", "file", "chapter")
TAIL = ("total", "out_of", "problems", "flags", "seconds")
BOOK_SOLUTION = "passed (book's solution)"
_FORMULA = ("=", "+", "-", "@", "\t", "\r")


def exercise_columns(chapter: Chapter) -> list[str]:
    return [e.name for e in chapter.exercises]


def row(result: dict[str, Any], chapter: Chapter) -> dict[str, Any]:
    """One gradebook row: a status per exercise of the assignment ``chapter``, the total and the problems."""
    problems = list(result.get("problems", []))
    graded = result.get("chapter")
    own = graded == chapter.key
    statuses, flags = {}, []
    entries = result.get("exercises", {}) if own else {}
    copied = [n for n, x in entries.items() if x.get("flag") and x["status"] == PASSED]
    # one short answer may coincide with the book's; most of a notebook's cannot
    notebook_copied = len(copied) >= 2 and 2 * len(copied) >= len(chapter.exercises)
    for e in chapter.exercises:
        entry = entries.get(e.name)
        if entry is not None:
            statuses[e.name] = entry["status"]
            if entry.get("flag"):
                flags.append(entry["flag"])
                if notebook_copied and entry["status"] == PASSED:
                    # for the instructor to judge; not counted in the total
                    statuses[e.name] = BOOK_SOLUTION
        elif result.get("unreadable") or (not own and graded is None):
            statuses[e.name] = ERROR  # nothing could be run
        else:
            statuses[e.name] = NOT_ATTEMPTED
    if graded is not None and not own:
        theirs = result.get("exercises", {})
        passed = sum(1 for v in theirs.values() if v["status"] == PASSED)
        problems.insert(
            0,
            f"this is the notebook of chapter {graded}, not of the assignment ({chapter.key}); graded against its "
            f"own chapter in the feedback file: {passed}/{len(theirs)} passed",
        )
    for name, entry in (result.get("exercises", {}) if own else {}).items():
        if entry["status"] in (ERROR, TIMEOUT):
            problems.append(f"{name}: {entry.get('problem')}")
    total = sum(1 for s in statuses.values() if s == PASSED)
    return {
        "student": result["student"],
        "file": result["file"],
        "chapter": graded or "",
        **statuses,
        "total": total,
        "out_of": len(chapter.exercises),
        "problems": "; ".join(problems),
        "flags": "; ".join(flags),
        "seconds": f"{result.get('seconds', 0.0):.1f}",
    }


def cell(value: Any) -> Any:
    """A value safe in a spreadsheet: text that would start a formula (``=``, ``+``, ``-``, ``@``) gets a ``'``."""
    if isinstance(value, str) and value.startswith(_FORMULA):
        return "'" + value
    return value


def write_atomically(path: Path, data: str | bytes, encoding: str = "utf-8") -> None:
    """Write ``path`` whole or not at all: a new file in the same folder, then renamed over the old one."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data if isinstance(data, bytes) else data.encode(encoding))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_gradebook(path: Path, rows: list[dict[str, Any]], chapter: Chapter) -> None:
    """The gradebook: UTF-8 with a byte-order mark (Excel reads accents right), comma-separated, one header row."""
    columns = [*FIXED, *exercise_columns(chapter), *TAIL]
    text = io.StringIO(newline="")
    writer = csv.DictWriter(text, fieldnames=columns)
    writer.writeheader()
    for r in rows:
        writer.writerow({k: cell(v) for k, v in r.items()})
    write_atomically(path, text.getvalue(), encoding="utf-8-sig")


def read_gradebook(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8-sig") as f:
        return list(csv.DictReader(f))


def safe_name(student: str) -> str:
    return re.sub(r"[^\w.-]+", "_", student).strip("._") or "student"


def feedback_names(students: list[str]) -> dict[str, str]:
    """A feedback file name per student, unique whatever the names (``a b`` and ``a_b`` map to one safe name,
    ``Ann`` and ``ann`` to one file on a case-insensitive disk): the first in order keeps it, the others get
    ``-2``, ``-3``, …"""
    taken: set[str] = set()
    names: dict[str, str] = {}
    for student in sorted(set(students)):
        base = safe_name(student)[:100]
        name, n = base, 1
        while name.casefold() in taken:
            n += 1
            name = f"{base}-{n}"
        taken.add(name.casefold())
        names[student] = f"{name}.md"
    return names


def fenced(text: str, info: str = "text") -> list[str]:
    """``text`` in a code fence longer than any run of backticks in it: nothing in it can close the fence."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return [fence + info, text, fence]


def one_line(text: Any) -> str:
    """Text of an answer's (a problem, a name) on one line of Markdown: no line break that could start a heading,
    and the characters Markdown would read escaped."""
    flat = " ".join(str(text).split())
    return re.sub(r"([\\`*_{}\[\]<>()#+!|~])", r"\\\1", flat)


def feedback(
    result: dict[str, Any], chapters: dict[str, Chapter], assignment: Chapter
) -> str:
    """The feedback file of one student (markdown): every exercise's verdict, as the checker words it."""
    lines = [
        f"# Feedback: {one_line(result['student'])}",
        "",
        f"File: {one_line(result['file'])}",
    ]
    graded = chapters.get(result.get("chapter") or "")
    if graded is not None:
        lines.append(f"Chapter {graded.number}: {graded.title}")
    exercises = result.get("exercises", {})
    if exercises:
        passed = sum(1 for v in exercises.values() if v["status"] == PASSED)
        lines += ["", f"**{passed} of {len(exercises)} exercises passed.**"]
    if result.get("problems"):
        lines += ["", "## Problems with the notebook", ""] + [
            f"- {one_line(p)}" for p in result["problems"]
        ]
    if graded is not None and graded.key != assignment.key:
        lines += [
            "",
            f"This notebook is not the assignment's (chapter {assignment.number}: {assignment.title}).",
        ]
    for e in graded.exercises if graded is not None else ():
        entry = exercises.get(e.name, {"status": ERROR, "problem": "not checked"})
        lines += ["", f"## `{e.name}`: {entry['status']}", ""]
        text = entry.get("text") or entry.get("problem") or ""
        if text:
            lines += fenced(str(text))
        if entry.get("flag"):
            lines += ["", f"Flagged for the instructor: {entry['flag']}."]
    if result.get("written"):
        lines += ["", "## Written answers (for the instructor to read)"]
        for w in result["written"]:
            lines += [
                "",
                f"### {one_line(w['exercise'] or '(before any heading)')}",
                "",
                *fenced(str(w["answer"])),
            ]
    return "\n".join(lines) + "\n"


def summary(
    rows: list[dict[str, Any]], results: list[dict[str, Any]], chapter: Chapter
) -> dict[str, Any]:
    """Per exercise: how many students got each status, and the most common named mistake (hint) among the wrong."""
    per: dict[str, Any] = {}
    for e in chapter.exercises:
        counts = Counter(
            PASSED if r[e.name] == BOOK_SOLUTION else r[e.name] for r in rows
        )
        mistakes = Counter()
        for res in results:
            entry = (
                res.get("exercises", {}).get(e.name)
                if res.get("chapter") == chapter.key
                else None
            )
            if entry and entry["status"] == WRONG:
                mistakes[entry.get("hint") or entry.get("problem") or "?"] += 1
        common = mistakes.most_common(1)
        per[e.name] = {
            "counts": {s: counts.get(s, 0) for s in STATUSES},
            "mistake": common[0][0] if common else "",
            "mistake_count": common[0][1] if common else 0,
        }
    return per


def summary_markdown(
    per: dict[str, Any],
    rows: list[dict[str, Any]],
    chapter: Chapter,
    times: list[float],
    flagged: int = 0,
) -> str:
    head = "| exercise | passed | wrong | not attempted | error | timeout | most common mistake (students) |"
    lines = [
        f"# Summary: chapter {chapter.number}, {chapter.title}",
        "",
        f"{len(rows)} notebooks graded.",
        "",
        head,
        "| --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for name, p in per.items():
        c = p["counts"]
        mistake = p["mistake"].replace("|", "\\|").replace("\n", " ")
        if mistake:
            mistake = f"{mistake} ({p['mistake_count']})"
        counts = " | ".join(str(c[s]) for s in STATUSES)
        lines.append(f"| `{name}` | {counts} | {mistake} |")
    if flagged:
        lines += [
            "",
            f"Answers equal to the book's published solution (flagged, not counted): {flagged}.",
        ]
    if times:
        mean = sum(times) / len(times)
        lines += ["", f"Time per notebook: mean {mean:.1f} s, max {max(times):.1f} s."]
    troubled = [r for r in rows if r["problems"]]
    if troubled:
        lines += ["", "## Notebooks with problems", ""]
        for r in troubled:
            lines.append(
                f"- **{one_line(r['student'])}** ({one_line(r['file'])}): {one_line(r['problems'])}"
            )
    return "\n".join(lines) + "\n"


def write_similarity(
    path: Path, results: list[dict[str, Any]], chapter: Chapter, book: dict[str, str]
) -> list[dict[str, Any]]:
    """``similarity.csv``: the pairs of answers (two students', or a student's and the book's solution) most
    alike (:mod:`homework_grader.similarity`), for the instructor to judge; the rows, most alike first."""
    from .similarity import closest_pairs

    answers = {
        r["student"]: {
            n: e["code"] for n, e in r.get("exercises", {}).items() if e.get("code")
        }
        for r in results
        if r.get("chapter") == chapter.key
    }
    rows = closest_pairs(answers, book)
    text = io.StringIO(newline="")
    writer = csv.DictWriter(
        text, fieldnames=["exercise", "student", "other", "similarity"]
    )
    writer.writeheader()
    for r in rows:
        writer.writerow({k: cell(v) for k, v in r.items()})
    write_atomically(path, text.getvalue(), encoding="utf-8-sig")
    return rows


def similarity_markdown(rows: list[dict[str, Any]], most: int = 10) -> str:
    if not rows:
        return (
            "\nNo two answers are alike (similarity 0.5 or more, `similarity.csv`).\n"
        )
    lines = [
        "",
        "## Most alike answers",
        "",
        "Similarity of the normalised token streams (1 = the same code up to ",
    ]
    lines[-1] += "names, comments and layout); all pairs from 0.5 in `similarity.csv`."
    lines += [
        "",
        "| exercise | student | other | similarity |",
        "| --- | --- | --- | ---: |",
    ]
    for r in rows[:most]:
        names = [one_line(r[k]) for k in ("exercise", "student", "other")]
        lines.append(
            f"| {names[0]} | {names[1]} | {names[2]} | {r['similarity']:.2f} |"
        )
    return "\n".join(lines) + "\n"


COLOURS = {
    PASSED: "#2e7d32",
    WRONG: "#c62828",
    NOT_ATTEMPTED: "#9e9e9e",
    ERROR: "#6a1b9a",
    TIMEOUT: "#ef6c00",
}


def summary_chart(path: Path, per: dict[str, Any], chapter: Chapter) -> None:
    """A horizontal stacked bar per exercise: how many students passed, were wrong, … (Agg, in this process only)."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    names = list(per)
    fig, ax = plt.subplots(figsize=(8, 0.6 * len(names) + 1.6))
    left = [0] * len(names)
    for status in STATUSES:
        values = [per[n]["counts"][status] for n in names]
        ax.barh(names, values, left=left, color=COLOURS[status], label=status)
        for i, v in enumerate(values):
            if v:
                ax.text(
                    left[i] + v / 2,
                    i,
                    str(v),
                    ha="center",
                    va="center",
                    color="white",
                    fontsize=9,
                )
        left = [a + b for a, b in zip(left, values, strict=True)]
    ax.invert_yaxis()
    ax.set_xlabel("students")
    ax.set_title(f"Chapter {chapter.number}: {chapter.title}")
    ax.legend(
        ncols=5,
        loc="upper center",
        bbox_to_anchor=(0.5, -0.18 if len(names) > 3 else -0.3),
        fontsize=8,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_all(
    out: Path,
    results: list[dict[str, Any]],
    chapters: list[Chapter],
    assignment: Chapter,
    isolation: str = "",
    solutions: dict[str, dict[str, str]] | None = None,
) -> dict[str, Path]:
    """Write every output into ``out``; return their paths."""
    out.mkdir(parents=True, exist_ok=True)
    by_key = {c.key: c for c in chapters}
    rows = [row(r, assignment) for r in results]
    paths = {
        "gradebook": out / "gradebook.csv",
        "summary": out / "summary.md",
        "chart": out / "summary.png",
        "results": out / "results.json",
        "similarity": out / "similarity.csv",
        "feedback": out / "feedback",
    }
    paths["feedback"].mkdir(exist_ok=True)
    # a previous run's feedback, of students perhaps not here now
    for stale in paths["feedback"].glob("*.md"):
        stale.unlink()
    files = feedback_names([r["student"] for r in results])
    for r in results:
        r["feedback"] = files[r["student"]]
        write_atomically(
            paths["feedback"] / files[r["student"]], feedback(r, by_key, assignment)
        )
    per = summary(rows, results, assignment)
    times = [r.get("seconds", 0.0) for r in results if not r.get("unreadable")]
    flagged = sum(
        1 for r in rows for e in assignment.exercises if r[e.name] == BOOK_SOLUTION
    )
    text = summary_markdown(per, rows, assignment, times, flagged)
    alike = write_similarity(
        paths["similarity"],
        results,
        assignment,
        (solutions or {}).get(assignment.key, {}),
    )
    text += similarity_markdown(alike)
    if isolation:
        text += f"\nThe answers ran in a sandbox: {isolation}.\n"
    write_atomically(paths["summary"], text)
    chart = paths["chart"].with_name(f".{paths['chart'].name}.tmp.png")
    summary_chart(chart, per, assignment)
    os.replace(chart, paths["chart"])
    body = {"assignment": assignment.key, "isolation": isolation, "results": results}
    results_json = json.dumps(body, indent=1, default=str)
    write_atomically(paths["results"], results_json)
    # last: its presence says the run finished
    write_gradebook(paths["gradebook"], rows, assignment)
    return paths


__all__ = ["write_all", "read_gradebook", "row", "summary", "TIMEOUT"]
