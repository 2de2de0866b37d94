"""The cases of a checker: :func:`case` lists one call's arguments; the standard checker turns each into a
:class:`Trial`, computes every expected answer first (:func:`draw_trials`, hidden random cases included), then
calls the student's function on other copies (:func:`run_student`), so that the calls can run elsewhere."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from .arguments import copy_value
from .calling import call
from .differences import same
from .printing import brief, show
from .random_state import hidden_inputs
from .verdicts import Mismatch


@dataclass(frozen=True)
class Case:
    """The arguments of one call, and why the case is there (shown with the input when it fails)."""

    args: tuple[Any, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)
    why: str = ""


def case(*args: Any, why: str = "", **kwargs: Any) -> Case:
    """One case of a :func:`compare` checker: ``case(x, 100.0, alpha=0.75, why="the paper's values")``."""
    return Case(args, kwargs, why)


def describe(reference: Callable[..., Any], c: Case, *, full: bool = False) -> str:
    """``name=value, ...`` for the arguments of ``c``, named after ``reference``'s parameters.

    With ``full``, tensors too long for one line (up to 32 values) follow in full, one per line, so that a
    student can rerun the failing case.
    """
    bound = _bound(reference, c)
    text = ", ".join(f"{k}={brief(v)}" for k, v in bound)
    text = f"{text}  ({c.why})" if c.why else text
    if full:
        for k, v in bound:
            if (
                isinstance(v, torch.Tensor)
                and not (v.numel() <= 12 and v.ndim <= 2)
                and 0 < v.numel() <= 32
            ):
                text += f"\n{k} = {show(v, 2000).split(chr(10), 1)[-1]}"
    return text


def _bound(reference: Callable[..., Any], c: Case) -> list[tuple[str, Any]]:
    try:
        return list(
            inspect.signature(reference)
            .bind_partial(*c.args, **c.kwargs)
            .arguments.items()
        )
    except (TypeError, ValueError):
        return [(f"#{i + 1}", a) for i, a in enumerate(c.args)] + list(c.kwargs.items())


@dataclass(eq=False)
class Trial:
    """One case as the standard checker runs it: the expected answer (computed first, on copies), the
    student's answer or the :class:`Mismatch` its call raised, and the student's copies of the arguments."""

    case: Case
    hidden_seed: int | None = None
    expected: Any = None
    reference_args: tuple[list[Any], dict[str, Any]] = ([], {})
    student_args: tuple[list[Any], dict[str, Any]] = ([], {})
    got: Any = None
    error: Mismatch | None = None

    def label(self, reference: Callable[..., Any], *, full: bool = False) -> str:
        text = describe(reference, self.case, full=full)
        return (
            text
            if self.hidden_seed is None
            else f"{text}  [a hidden random case, seed {self.hidden_seed}]"
        )


def copies(c: Case) -> tuple[list[Any], dict[str, Any]]:
    """Copies of the arguments of ``c`` (positional, keyword), sharing nothing with them."""
    return [copy_value(a) for a in c.args], {
        k: copy_value(v) for k, v in c.kwargs.items()
    }


def draw_trials(
    reference: Callable[..., Any],
    cases: Sequence[Case] | Callable[[], Sequence[Case]],
    hidden: Callable[[], Sequence[Case]] | None,
) -> list[Trial]:
    """The shown cases, then the hidden random ones (drawn under a fresh seed, duplicates of shown ones
    dropped), each with its expected answer computed before any student code runs, on copies."""
    shown = list(cases() if callable(cases) else cases)
    trials = [Trial(c) for c in shown]
    if hidden is not None:
        with hidden_inputs() as seed:
            for c in hidden():
                if not any(
                    same((c.args, c.kwargs), (s.args, s.kwargs), atol=0, rtol=0)
                    for s in shown
                ):
                    trials.append(Trial(c, hidden_seed=seed))
    for t in trials:
        t.reference_args = copies(t.case)
        t.expected = reference(*t.reference_args[0], **t.reference_args[1])
    return trials


def run_student(
    student: Callable[..., Any], reference: Callable[..., Any], trials: Sequence[Trial]
) -> None:
    """Call the student's function on each trial (on copies of its arguments, the reference withheld),
    keeping the answer or the :class:`Mismatch` raised; :class:`NotAttempted` stops everything."""
    for t in trials:
        t.student_args = copies(t.case)
        try:
            t.got = call(
                student,
                *t.student_args[0],
                input=t.label(reference, full=True),
                **t.student_args[1],
            )
        except Mismatch as m:
            t.error = m
