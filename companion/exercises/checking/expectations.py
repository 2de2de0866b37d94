"""Comparing the student's answer with the expected one inside a checker's cases: :func:`expect` raises
:class:`~companion.exercises.checking.verdicts.Mismatch` with the words of the difference, and names a typical
mistake only when the answer reproduces it (:func:`confirmed`: when no case contradicts it)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from .differences import safe_difference, same
from .printing import agree
from .verdicts import Mismatch

RAISED = object()
"""Stands for the answer on a case where the code (the student's, or a mistake's) raised."""

Mistakes = Sequence[tuple[Callable[[], Any], str]]


def expect(
    got: Any,
    expected: Any,
    *,
    input: str,
    what: str = "The result",
    hint: str | None = None,
    mistakes: Mistakes = (),
    atol: float = 1e-5,
    rtol: float = 1e-4,
) -> None:
    """Raise :class:`Mismatch` unless ``got`` matches ``expected`` (a tensor, a number, a list/tuple, or any value).

    ``mistakes`` pairs a function computing a typical wrong answer (called only when ``got`` is wrong) with the
    hint that names that mistake; the hint of the first one that ``got`` reproduces is shown, else the
    comparison's own hint (for NaN, say), else ``hint``. (:func:`compare` names a mistake only when the
    student's answers reproduce it on every case; a hand-written checker that calls ``expect`` per case
    should pass mistakes it has confirmed the same way, with ``confirmed``.)
    """
    diff = safe_difference(got, expected, atol, rtol)
    if diff is None:
        return
    problem, expected_text, got_text, own_hint = diff
    named = _diagnose(got, expected, mistakes, atol, rtol)
    raise Mismatch(
        f"{what} {agree(what, problem)}.",
        input=input,
        expected=expected_text,
        got=got_text,
        hint=named or own_hint or hint,
    )


def _diagnose(
    got: Any, expected: Any, mistakes: Mistakes, atol: float, rtol: float
) -> str | None:
    for wrong, hint in mistakes:
        try:
            candidate = wrong()
        except Exception:
            continue
        if same(got, candidate, atol=atol, rtol=rtol) and not same(
            expected, candidate, atol=atol, rtol=rtol
        ):
            return hint
    return None


def confirmed(
    rows: Sequence[tuple[Any, Any, Sequence[Any]]],
    hints: Sequence[str],
    *,
    atol: float = 1e-5,
    rtol: float = 1e-4,
) -> list[str]:
    """The hints of the mistakes that no case contradicts.

    ``rows`` holds, per case, the student's answer (:data:`RAISED` where the student's code raised), the
    expected one, and each mistake's answer (in the order of ``hints``; :data:`RAISED` where the mistake
    raised: it does not apply to that case). A case contradicts a mistake when the student's answer there is
    wrong and is not the mistake's; a right answer contradicts nothing (a student may handle some cases
    correctly), and a mistake that raised agrees only with an answer that is right or raised too. The caller
    names a confirmed mistake only if the failing case reproduces it.
    """

    def agrees(got: Any, expected: Any, answer: Any) -> bool:
        if got is RAISED:
            return answer is RAISED
        return same(got, expected, atol=atol, rtol=rtol) or (
            answer is not RAISED and same(got, answer, atol=atol, rtol=rtol)
        )

    return [
        hint
        for i, hint in enumerate(hints)
        if all(agrees(g, e, a[i]) for g, e, a in rows)
    ]


def expect_close(
    got: Any,
    expected: float,
    *,
    input: str,
    what: str = "The result",
    tol: float = 1e-5,
    hint: str | None = None,
) -> None:
    """:func:`expect` for a single number, within ``tol·max(1, |expected|)`` (kept for older checkers)."""
    expect(got, float(expected), input=input, what=what, hint=hint, atol=tol, rtol=tol)


LONG_HINT = (
    "Ids index embedding tables and go to cross-entropy as targets, both of which take torch.long: build the "
    "tensor with dtype=torch.long (torch.tensor of Python ints gives it), or convert it at the end with .long()."
)


def expect_long(
    got: Any, expected: Any, *, input: str, what: str = "The result"
) -> None:
    """Raise :class:`Mismatch` where ``expected`` holds an int64 tensor (ids, as the task states) and ``got``
    has another integer dtype there (int32, uint8...): PyTorch's embeddings and losses take torch.long.
    Lists and tuples are looked at item by item; anything else is left to :func:`expect`."""
    if (
        isinstance(expected, (tuple, list))
        and isinstance(got, (tuple, list))
        and len(got) == len(expected)
    ):
        for i, (g, e) in enumerate(zip(got, expected, strict=True)):
            expect_long(
                g,
                e,
                input=input,
                what=f"{what} (item {i})" if len(expected) > 1 else what,
            )
        return
    if not (
        isinstance(expected, torch.Tensor)
        and expected.dtype == torch.long
        and isinstance(got, torch.Tensor)
    ):
        return
    if (
        got.dtype != torch.long
        and not got.dtype.is_floating_point
        and not got.dtype.is_complex
    ):
        dtype = str(got.dtype).removeprefix("torch.")
        raise Mismatch(
            f"{what} {agree(what, 'has the wrong dtype')}: expected int64, got {dtype}.",
            input=input,
            expected="dtype torch.int64 (torch.long)",
            got=f"dtype {got.dtype}",
            hint=LONG_HINT,
        )
