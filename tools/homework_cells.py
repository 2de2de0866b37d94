"""The cells a homework notebook adds or changes: each exercise's stub (from the markers in its solution), the
snapshot and restore cells around it, the answer cell of a pen-and-paper question, the introduction."""

from __future__ import annotations

import ast
import re

import nbformat

STUB_TAG = "exercise-stub"
NBVAL_CHECK_OUTPUT = "nbval-check-output"
_CHECKER_CALL = re.compile(r"^(check_\w+)\(\w+\)\s*$")

SOLUTION_BEGIN = "# BEGIN SOLUTION"
SOLUTION_END = "# END SOLUTION"
STUB_LINE = "raise NotImplementedError  # your code here"

SNAPSHOT_CELL = """\
# Keeps the chapter's variables safe while you try your code out (see the note at the top).
import companion.exercises.checking as _homework

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
                raise ValueError(
                    f"line {number}: {SOLUTION_BEGIN} inside another solution block"
                )
            inside = True
            out.append(line[: len(line) - len(line.lstrip())] + STUB_LINE)
        elif marker == SOLUTION_END:
            if not inside:
                raise ValueError(
                    f"line {number}: {SOLUTION_END} without {SOLUTION_BEGIN}"
                )
            inside = False
        elif not inside:
            out.append(line)
    if inside:
        raise ValueError(f"{SOLUTION_BEGIN} without {SOLUTION_END}")
    return "\n".join(out)


def without_markers(source: str) -> str:
    """A solution cell as the book's reader sees it (the markers are comments; this drops them)."""
    return "\n".join(
        line
        for line in source.split("\n")
        if line.strip() not in (SOLUTION_BEGIN, SOLUTION_END)
    )


def top_level_definitions(source: str) -> set[str]:
    """The functions and classes a code cell defines at its top level."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    return {
        n.name
        for n in tree.body
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
    }


# What a listing gives away besides the asked-for object itself: a loop version of it, or the companion's general
# version of a function an exercise asks for under a narrower name.
GIVEAWAYS = {
    "skipgram_pairs": {"skipgram_pairs_loop"},
    "scaled_dot_product_attention": {"attention_loop"},
    # chapter 6: the class holds the forward pass the exercise asks for
    "gpt_forward": {"GPT"},
    # chapter 6: the companion's BPE training
    "learn_merges": {"train_bpe_naive", "train_bpe"},
    "near_far_split": {"band_mask"},  # chapter 9: the band the near field keeps
    "banded_softmax": {"BandedAttention", "BandedAttention.attend"},
    # chapter 9: the blend the module calls
    "FMMAttention": {"FMMAttention.attend", "far_field_attention"},
    "pair_inputs": {"truncate_pair"},  # chapter 7: the truncation rule
    # chapter 7: the head and the unmasked loss
    "span_head_loss": {"SpanHead", "span_loss"},
    "squad_f1": {"normalize_answer"},  # chapter 7: half of the answer
    # chapter 8: the step inside its loop
    "linear_attention_step": {"LinearAttention.step", "LinearAttention.recurrent"},
    # chapter 8: the recurrence itself
    "linear_attention_rnn": {"LinearAttention.recurrent"},
    # chapter 8: the companion's versions of the other forms the exercises ask for
    "linear_attention": {"LinearAttention", "LinearAttention.attend"},
    "causal_linear_attention_chunked": {
        "LinearAttention.chunked",
        "LinearAttention.cumsum",
    },
    # chapter 10: the features and the module that holds them
    "causal_performer_attention": {"positive_softmax_features", "PerformerFeatures"},
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


# How the instructor's grader (companion-grade) reads an answer; see README, "Grading homework".
GRADING_NOTE = (
    "When your notebook is graded, each exercise is checked on its own: the grader takes your function or class, "
    "the helper functions and classes it uses, your imports, and constants set to a plain value (`D = 64`); "
    "nothing else of the notebook is run. Whatever your answer needs must therefore be inside it, not in a "
    "variable set by another cell (`W = torch.randn(3, 3)`)."
)

# A pen-and-paper question gets a markdown cell for the answer right after it; the grader collects the cells
# that start with "**Your answer" into the instructor's feedback.
ANSWER_CELL = (
    "**Your answer:**\n\n"
    "*(Double-click to write your answer here, in words and math between dollar signs: $\\partial L / \\partial E$.)*"
)
ANSWER_TAG = "homework-answer"


def introduction(
    title: str, chapter: int, exercises: int, checkers: int, url: str
) -> str:
    """The homework's first cell: what the student does, how the checkers answer, how the grader reads it."""
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
        f"{GRADING_NOTE}\n\n"
        f"The full chapter, with solutions, is at {url}."
    )


def checkers(cells: list[nbformat.NotebookNode]) -> int:
    """How many of ``cells`` are checker cells."""
    return sum(1 for c in cells if c.cell_type == "code" and checker_call(c.source))


def checker_call(source: str) -> str | None:
    """The checker's name if ``source`` is a checker cell (``check_x(x)``), else None."""
    m = _CHECKER_CALL.match(source)
    return m.group(1) if m else None
