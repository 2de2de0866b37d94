"""The standard checker, :func:`compare`: the student's function must return what the reference returns on
every case, shown and hidden, leave its arguments as they were, and (where asked) keep the dtype and the
gradients."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

import torch

from .arguments import changed
from .checker import Checker
from .differences import safe_difference
from .expectations import RAISED, confirmed, expect, expect_long
from .gradients import expect_gradient_kept, expect_gradients, trainable
from .printing import agree, show
from .trials import Case, Trial, copies, draw_trials, run_student
from .verdicts import Mismatch
from .withholding import OneCall, own_name

_REDRAW = object()


def compare(
    exercise: str,
    reference: Callable[..., Any],
    cases: Sequence[Case] | Callable[[], Sequence[Case]],
    *,
    mistakes: Sequence[tuple[Callable[..., Any], str]] = (),
    hint: str | None = None,
    what: str = "The result",
    atol: float = 1e-5,
    rtol: float = 1e-4,
    seed: int = 0,
    hidden: Callable[[], Sequence[Case]] | None | object = _REDRAW,
    withhold: Sequence[str] = (),
    one_call: Sequence[str | OneCall] = (),
    same_dtype: bool = False,
    differentiable: bool = False,
    ids: bool = False,
) -> Checker:
    """The standard checker: the student's function must return what ``reference`` returns on every case.

    Args:
        exercise: the name of the function the student writes.
        reference: the right answer, called with each case's arguments.
        cases: :func:`case` objects, or a function returning them (so that random inputs are drawn under the
            checker's seed): the shown cases, the same on every run.
        mistakes: ``(wrong_function, hint)`` pairs: a typical wrong implementation, with the reference's
            signature, and the hint shown when the student's output matches it on every case (and differs from
            the right one on the failing case).
        hint: the hint shown when no named mistake matches.
        what: how the verdict names the result (``"The mask"``, ``"The logits"``: the verb agrees).
        atol, rtol: the tolerance of the comparison; ``atol=rtol=0`` for exact results.
        hidden: a function drawing hidden random cases, run after the shown ones under a seed drawn afresh
            from ``os.urandom`` on every run (a failing one is shown with its seed); by default ``cases``
            drawn again when it is a function; ``None`` for none.
        withhold: the dotted names of the companion's own answer, unavailable while the student's code runs
            (``reference`` itself is withheld when it is a function of the companion).
        one_call: PyTorch's calls that compute the whole exercise by themselves (see :class:`Checker`).
        same_dtype: the result must have the reference's dtype exactly (float32 in, float32 out).
        ids: the result holds ids (or is a tuple with some): wherever the reference returns an int64 tensor,
            the student's must be int64 too, not int32 (``expect_long``).
        differentiable: the result is a loss to train with: it must carry gradients, and the gradients it
            gives the parameters of every model argument and every floating-point tensor argument (each made a
            leaf that requires grad) must be the reference's.

    The expected answers are computed first, on deep copies of every argument; the student gets other
    copies, and a student who changes an argument in place (a tensor, a list, a model's parameters or
    buffers) is told so.
    """
    extra = (cases if callable(cases) else None) if hidden is _REDRAW else hidden
    withhold = (*own_name(reference), *withhold)

    def run(student: Callable[..., Any]) -> tuple[int, int]:
        trials = draw_trials(reference, _trainable(cases) if differentiable else cases,
                             _trainable(extra) if differentiable and extra is not None else extra)  # fmt: skip
        run_student(student, reference, trials)
        judge(trials)
        return len(trials), sum(t.hidden_seed is not None for t in trials)

    def judge(trials: Sequence[Trial]) -> None:
        for i, t in enumerate(trials):
            label = t.label(reference, full=True)
            if t.error is not None:
                raise t.error
            for name, before, after in _arguments(reference, t.case, *t.student_args):
                if changed(before, after):
                    raise Mismatch(
                        f"Your function changed its argument `{name}` in place.",
                        input=label,
                        expected=f"{name} unchanged: {show(before, 200)}",
                        got=show(after, 200),
                        hint="The caller still needs its argument: use out-of-place operations (x / n, not x /= n "
                        "or x.div_(n)), or work on x.clone(); leave a model's parameters as they are.",
                    )
            if same_dtype:
                expect_dtype(t.got, t.expected, label, what)
            if ids:
                expect_long(t.got, t.expected, input=label, what=what)
            if differentiable:
                expect_gradient_kept(t.got, label, what)
            if safe_difference(t.got, t.expected, atol, rtol) is not None:
                values = _mistake_answers(trials)
                named = confirmed(
                    [
                        (RAISED if u.error else u.got, u.expected, values[j])
                        for j, u in enumerate(trials)
                    ],
                    [h for _, h in mistakes],
                    atol=atol,
                    rtol=rtol,
                )
                here = [
                    (lambda v=values[i][k]: v, h)
                    for k, (_, h) in enumerate(mistakes)
                    if h in named
                ]
                expect(
                    t.got,
                    t.expected,
                    input=label,
                    what=what,
                    hint=hint,
                    atol=atol,
                    rtol=rtol,
                    mistakes=here,
                )
            if differentiable:
                expect_gradients(t, label, atol, rtol, _names(reference))

    def _mistake_answers(trials: Sequence[Trial]) -> list[list[Any]]:
        out = []
        for u in trials:
            answers = []
            for wrong, _ in mistakes:
                args, kwargs = copies(u.case)
                try:
                    answers.append(wrong(*args, **kwargs))
                except Exception:
                    answers.append(RAISED)
            out.append(answers)
        return out

    return Checker(
        exercise, run, seed=seed, kind="function", withhold=withhold, one_call=one_call
    )


def _trainable(
    cases: Sequence[Case] | Callable[[], Sequence[Case]],
) -> Callable[[], Sequence[Case]]:
    """``cases`` with every floating-point tensor argument a leaf that requires grad (a loss must reach each)."""

    def draw() -> list[Case]:
        drawn = cases() if callable(cases) else cases
        return [Case(tuple(trainable(a) for a in c.args), {k: trainable(v) for k, v in c.kwargs.items()}, c.why)
                for c in drawn]  # fmt: skip

    return draw


def expect_dtype(got: Any, expected: Any, label: str, what: str) -> None:
    if (
        isinstance(expected, (tuple, list))
        and isinstance(got, (tuple, list))
        and len(got) == len(expected)
    ):
        # each output of a tuple keeps the input's dtype
        for g, e in zip(got, expected, strict=True):
            expect_dtype(g, e, label, what)
        return
    if (
        isinstance(expected, torch.Tensor)
        and isinstance(got, torch.Tensor)
        and got.dtype != expected.dtype
    ):
        raise Mismatch(
            f"{what} {agree(what, 'has the wrong dtype')}: the task asks for the input's dtype.",
            input=label,
            expected=f"dtype {expected.dtype}",
            got=f"dtype {got.dtype}",
            hint="Build every tensor from the input (torch.zeros_like(x), x.new_tensor(...), ...) or convert at the "
            "end with .to(x.dtype).",
        )


def _names(reference: Callable[..., Any]) -> list[str]:
    try:
        return list(inspect.signature(reference).parameters)
    except (TypeError, ValueError):
        return []


def _arguments(
    reference: Callable[..., Any], c: Case, args: list[Any], kwargs: dict[str, Any]
):
    """``(name, original, student's copy)`` for every argument."""
    try:
        names = list(inspect.signature(reference).parameters)
    except (TypeError, ValueError):
        names = []
    for i, (before, after) in enumerate(zip(c.args, args, strict=True)):
        yield (names[i] if i < len(names) else f"#{i + 1}"), before, after
    for k, before in c.kwargs.items():
        yield k, before, kwargs[k]
