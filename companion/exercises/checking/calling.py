"""Calling the student's code from a checker's cases: whatever it raises becomes a verdict-friendly exception,
with the running check's reference withheld around the call."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from . import active
from .arguments import changed, copy_value
from .printing import safe_str, show
from .verdicts import (
    BASE_EXCEPTION_HINTS,
    Abort,
    Mismatch,
    NotAttempted,
    own_base_exception_hint,
    student_line,
)
from .withholding import WithheldReference, withheld

FORWARD_HINT = (
    "nn.Module calls a method spelt exactly `forward`, defined inside the class (indented at the level of "
    "__init__); a misspelt or mis-indented forward leaves nn.Module's own, which raises."
)


def lacks_forward(cls: type) -> bool:
    """Whether the module class ``cls`` leaves ``forward`` to nn.Module (which raises)."""
    return getattr(cls, "forward", None) is nn.Module.forward


def _snapshots(
    student: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> list[tuple[str, Any, Any]]:
    """``(name, object, copy)`` for every tensor and module argument (lists and tuples of them too) and for the
    module ``student`` itself, so that :func:`call` can tell whether the student's code changed one in place."""
    try:
        signature = inspect.signature(
            student.forward if isinstance(student, nn.Module) else student
        )
        names = [
            k
            for k, p in signature.parameters.items()
            if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        ]
    except (TypeError, ValueError):
        names = []
    named = [
        (f"`{names[i]}`" if i < len(names) else f"#{i + 1}", a)
        for i, a in enumerate(args)
    ]
    named += [(f"`{k}`", v) for k, v in kwargs.items()]
    out = [(f"its argument {n}", a, copy_value(a)) for n, a in named if _watched(a)]
    if isinstance(student, nn.Module):
        out.append(
            ("the module's parameters", student, copy_value(student.state_dict()))
        )
    return out


def _watched(value: Any) -> bool:
    if isinstance(value, (torch.Tensor, nn.Module)):
        return True
    return isinstance(value, (list, tuple)) and any(
        isinstance(v, (torch.Tensor, nn.Module)) for v in value
    )


def _expect_unchanged(snapshots: list[tuple[str, Any, Any]], input: str) -> None:
    for name, value, before in snapshots:
        if name == "the module's parameters":
            after = value.state_dict()
            keys = [k for k in before if k not in after or changed(before[k], after[k])]
            name = f"the parameter `{keys[0]}`" if keys else name
        else:
            after = value
        if changed(before, after):
            raise Mismatch(
                f"Your code changed {name} in place.",
                input=input,
                hint="The caller still needs what it passed in: use out-of-place operations (x / n, not x /= n "
                "or x.div_(n); x = x + y, not x += y), or work on x.clone(); a forward pass leaves the module's "
                "parameters as they are.",
            )


def call(
    student: Callable[..., Any],
    *args: Any,
    input: str,
    _changes_arguments: bool = False,
    **kwargs: Any,
) -> Any:
    """Call student code, turning whatever it raises into a verdict-friendly exception.

    ``NotImplementedError`` becomes :class:`NotAttempted` (unless it is nn.Module's complaint about a missing
    ``forward``); any other exception (``SystemExit``, ``GeneratorExit`` and the student's own
    ``BaseException`` subclasses included, and a ``KeyboardInterrupt`` that no SIGINT caused; only a harness's
    ``Abort`` passes through) becomes a :class:`Mismatch` that names the input and the
    exception. ``input`` describes the arguments. While the student's code runs, the running checker's
    reference is withheld (see :class:`~companion.exercises.checking.checker.Checker`).

    Every tensor and module argument (and the module ``student`` itself) is copied before the call: an answer
    that changes one in place is a :class:`Mismatch` naming it, unless ``_changes_arguments`` (an exercise
    that trains a model it is given).
    """
    check = active.current()
    names, namespaces, one_call = (
        (check.withhold, check.namespaces, check.one_call)
        if check is not None
        else ((), [], ())
    )
    snapshots = [] if _changes_arguments else _snapshots(student, args, kwargs)
    try:
        with withheld(names, namespaces, one_call):
            result = student(*args, **kwargs)
    except NotImplementedError as e:
        if isinstance(student, nn.Module) and lacks_forward(type(student)):
            raise Mismatch(
                f"Your class {type(student).__name__} has no method `forward`.",
                input=input,
                hint=FORWARD_HINT,
            ) from e
        raise NotAttempted() from e
    except WithheldReference as e:
        raise Mismatch(e.problem, input=input, hint=e.hint) from e
    except KeyboardInterrupt:
        # the stop button (or no checker running): stop
        if check is None or check.interrupts.pressed:
            raise
        raise Mismatch(
            "Your code raised KeyboardInterrupt.",
            input=input,
            hint=BASE_EXCEPTION_HINTS["KeyboardInterrupt"],
        ) from None
    except (SystemExit, GeneratorExit) as e:
        name = type(e).__name__
        raise Mismatch(
            f"Your code raised {name}.", input=input, hint=BASE_EXCEPTION_HINTS[name]
        ) from None
    except Exception as e:
        raise Mismatch(
            f"Your code raised {type(e).__name__}: {safe_str(e)}{student_line(e)}",
            input=input,
            hint="Run your code on this input yourself and read the traceback.",
        ) from e
    except Abort:
        raise
    except BaseException as e:  # noqa: BLE001 -- a student's own BaseException subclass is the student's error
        raise Mismatch(
            f"Your code raised {type(e).__name__}: {safe_str(e)}{student_line(e)}",
            input=input,
            hint=own_base_exception_hint(type(e).__name__),
        ) from e
    _expect_unchanged(snapshots, input)
    return result


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


def expect_module(obj: object, label: str) -> nn.Module:
    """``obj``, if it is an ``nn.Module`` (what ``label`` made), else a Mismatch that says how to make one."""
    if not isinstance(obj, nn.Module):
        raise Mismatch(
            f"{label} should create an nn.Module.",
            input=label,
            got=show(obj),
            hint="Subclass torch.nn.Module and call super().__init__() first.",
        )
    return obj
