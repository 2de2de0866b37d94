"""What a checker says: the four statuses, the :class:`Verdict` it returns, and the exceptions its cases raise
(:class:`Mismatch`, :class:`NotAttempted`) or let through (``Abort``)."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass

PASSED = "passed"
NOT_ATTEMPTED = "not attempted"
WRONG = "wrong"
ERROR = "error"


class Abort(BaseException):
    """Raised by a harness around the student's code (a grader's time limit, an argument it cannot send as data):
    it passes through every checker untouched, where anything the student's code raises becomes a verdict."""


class Mismatch(Exception):
    """Raised inside a checker's cases when the student's answer disagrees with the reference."""

    def __init__(
        self,
        problem: str,
        *,
        input: str | None = None,
        expected: str | None = None,
        got: str | None = None,
        hint: str | None = None,
    ) -> None:
        super().__init__(problem)
        self.problem = problem
        self.input = input
        self.expected = expected
        self.got = got
        self.hint = hint


class NotAttempted(Exception):
    """Raised inside a checker's cases when the student's code still raises ``NotImplementedError``."""


@dataclass(frozen=True)
class Verdict:
    """The outcome of one checker run.

    ``status`` is ``"passed"``, ``"not attempted"``, ``"wrong"`` or ``"error"`` (the checker itself failed: a bug
    to report, not the student's); the other fields describe the first failing case when the status is
    ``"wrong"``. ``hidden`` counts the checks made on hidden random inputs, drawn afresh on every run.
    """

    exercise: str
    status: str
    problem: str = ""
    input: str | None = None
    expected: str | None = None
    got: str | None = None
    hint: str | None = None
    cases: int = 0
    hidden: int = 0

    @property
    def passed(self) -> bool:
        return self.status == PASSED

    def __bool__(self) -> bool:
        return self.passed

    def __str__(self) -> str:
        if self.status == PASSED:
            extra = (
                f", {self.hidden} of them on hidden random inputs"
                if self.hidden
                else ""
            )
            return f"PASSED  {self.exercise}: your code agrees with the reference ({self.cases} checks{extra})."
        if self.status == NOT_ATTEMPTED:
            return not_attempted_message(self.exercise)
        lines = [
            f"{'ERROR' if self.status == ERROR else 'WRONG'}  {self.exercise}: {self.problem}"
        ]
        for label, value in (
            ("input", self.input),
            ("expected", self.expected),
            ("got", self.got),
        ):
            if value is not None:
                lines.append(_field(label, value))
        if self.hint:
            lines.append(_field("hint", self.hint))
        return "\n".join(lines)


def not_attempted_message(exercise: str) -> str:
    """What a checker prints for a stub that still raises ``NotImplementedError``."""
    return (
        f"NOT ATTEMPTED YET  {exercise}: your code still raises NotImplementedError. "
        "Replace the stub with your implementation and run the cell again."
    )


def _field(label: str, value: str) -> str:
    head = f"   {label + ':':<10}"
    body = textwrap.indent(value, " " * len(head)).lstrip(" ")
    return head + body


#: the hint for each exception that is not an ``Exception`` (it would end the notebook's cell, or the program)
BASE_EXCEPTION_HINTS = {
    "SystemExit": "sys.exit() and exit() end the whole program: return the result instead.",
    "KeyboardInterrupt": "Raise an ordinary exception (ValueError, say) for bad input, never KeyboardInterrupt.",
    "GeneratorExit": "GeneratorExit belongs to generators being closed: return the result instead.",
}


def raised_verdict(exercise: str, name: str) -> Verdict:
    """WRONG: the student's code raised ``name``, one of :data:`BASE_EXCEPTION_HINTS`."""
    return Verdict(
        exercise, WRONG, f"Your code raised {name}.", hint=BASE_EXCEPTION_HINTS[name]
    )


def student_line(e: BaseException) -> str:
    """Where in the student's code ``e`` was raised (the innermost frame outside the companion and PyTorch),
    as " (at line N of FILE: CODE)", or "" when no such frame is known."""
    import traceback

    frames = [
        f
        for f in traceback.extract_tb(e.__traceback__)
        if not any(p in f.filename for p in _LIBRARY)
    ]
    if not frames:
        return ""
    f = frames[-1]
    return f" (at line {f.lineno} of {f.filename}: {(f.line or '').strip()})"


_LIBRARY = ("/companion/", "/torch/", "/numpy/", "/lib/python3")


def own_base_exception_hint(name: str) -> str:
    """The hint for an exception of the student's own that derives from ``BaseException`` but not ``Exception``."""
    return (
        f"{name} derives from BaseException, which ends a notebook cell like the stop button; derive your "
        "exceptions from Exception (or ValueError...) and run your code on this input to read the traceback."
    )


def raised_by_student(e: BaseException) -> bool:
    """Whether ``e``, which reached the checker outside :func:`call`, must come from the student's code: an
    exception whose class derives from ``BaseException`` but not ``Exception`` (no checker raises one), or
    whose class is defined outside Python, PyTorch, NumPy and the companion (in a notebook, say)."""
    if not isinstance(e, Exception):
        return True
    return type(e).__module__.split(".")[0] not in {
        "builtins",
        "torch",
        "numpy",
        "companion",
        "math",
        "_operator",
    }
