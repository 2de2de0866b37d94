"""Calling the student's code from a checker's cases: whatever it raises becomes a verdict-friendly exception,
with the running check's reference withheld around the call."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import nn

from . import active
from .printing import safe_str, show
from .verdicts import BASE_EXCEPTION_HINTS, Mismatch, NotAttempted
from .withholding import WithheldReference, withheld

FORWARD_HINT = (
    "nn.Module calls a method spelt exactly `forward`, defined inside the class (indented at the level of "
    "__init__); a misspelt or mis-indented forward leaves nn.Module's own, which raises."
)


def lacks_forward(cls: type) -> bool:
    """Whether the module class ``cls`` leaves ``forward`` to nn.Module (which raises)."""
    return getattr(cls, "forward", None) is nn.Module.forward


def call(student: Callable[..., Any], *args: Any, input: str, **kwargs: Any) -> Any:
    """Call student code, turning whatever it raises into a verdict-friendly exception.

    ``NotImplementedError`` becomes :class:`NotAttempted` (unless it is nn.Module's complaint about a missing
    ``forward``); any other exception (``SystemExit`` and ``GeneratorExit`` included, and a
    ``KeyboardInterrupt`` that no SIGINT caused) becomes a :class:`Mismatch` that names the input and the
    exception. ``input`` describes the arguments. While the student's code runs, the running checker's
    reference is withheld (see :class:`~companion.exercises.checking.checker.Checker`).
    """
    check = active.current()
    names, namespaces = (check.withhold, check.namespaces) if check is not None else ((), [])
    try:
        with withheld(names, namespaces):
            return student(*args, **kwargs)
    except NotImplementedError as e:
        if isinstance(student, nn.Module) and lacks_forward(type(student)):
            raise Mismatch(
                f"Your class {type(student).__name__} has no method `forward`.", input=input, hint=FORWARD_HINT
            ) from e
        raise NotAttempted() from e
    except WithheldReference as e:
        raise Mismatch(
            f"Your code called the companion's own answer: {e}",
            input=input,
            hint="The exercise asks you to build this from the parts it names; the companion's version is what "
            "the checker compares yours with.",
        ) from e
    except KeyboardInterrupt:
        if check is None or check.interrupts.pressed:  # the stop button (or no checker running): stop
            raise
        raise Mismatch(
            "Your code raised KeyboardInterrupt.", input=input, hint=BASE_EXCEPTION_HINTS["KeyboardInterrupt"]
        ) from None
    except (SystemExit, GeneratorExit) as e:
        name = type(e).__name__
        raise Mismatch(f"Your code raised {name}.", input=input, hint=BASE_EXCEPTION_HINTS[name]) from None
    except Exception as e:
        raise Mismatch(
            f"Your code raised {type(e).__name__}: {safe_str(e)}",
            input=input,
            hint="Run your code on this input yourself and read the traceback.",
        ) from e


def expect_raises(
    student: Callable[..., Any],
    *args: Any,
    exceptions: tuple[type[BaseException], ...],
    input: str,
    hint: str,
    **kwargs: Any,
) -> BaseException:
    """Raise :class:`Mismatch` unless calling ``student(*args)`` raises one of ``exceptions``.

    Returns the exception raised, so a case can inspect its message.
    """
    names = " or ".join(e.__name__ for e in exceptions)
    try:
        result = call(student, *args, input=input, **kwargs)
    except Mismatch as m:
        cause = m.__cause__
        if isinstance(cause, exceptions):
            return cause
        raise Mismatch(
            "Bad input should raise a clear error of the right type.",
            input=input,
            expected=f"{names}",
            got=m.problem.removeprefix("Your code raised "),
            hint=hint,
        ) from cause
    raise Mismatch(
        "Bad input should raise an error, but your code returned normally.",
        input=input,
        expected=f"{names}",
        got=show(result),
        hint=hint,
    )
