"""The machinery behind the homework checkers.

A checker takes the student's function (or class), runs it on a few inputs and prints one of three
verdicts:

- **passed**: every case agreed with the reference;
- **not attempted yet**: the stub still raises :class:`NotImplementedError`;
- **wrong**: the first case that disagreed, with its input, what was expected, what came, and a hint.

Whatever the student's code does (raise, even ``SystemExit``; return the wrong type or shape, a meta or sparse
tensor, an object whose ``repr`` raises; produce NaN; change an argument in place, a model's weights included),
the checker returns a verdict and never lets the exception escape into the notebook (only a real
``KeyboardInterrupt``, the stop button, stops it). The student's random state is untouched: the cases run in a
forked generator with a fixed seed.

The standard checker works in two steps, kept apart so that the calls can run elsewhere: it computes every
expected answer first, on deep copies of the arguments (``draw_trials``), then calls the student's function
on other copies (``run_student``, with the companion's own answer withheld: see :func:`withheld`), and only
then compares (naming a typical mistake only when no case contradicts it). After the shown cases come hidden
random ones, drawn under a seed taken from ``os.urandom`` on every run, so that a table of the shown answers
cannot pass.

The standard checker compares the student's function with the reference on listed cases and names typical
mistakes (each a wrong implementation: if the student's output matches it, its hint is shown)::

    check_glove_weight = compare(
        "glove_weight",
        glove.glove_weight,
        lambda: [case(x, 100.0, 0.75, why="the paper's x_max = 100, alpha = 3/4"), case(x, 10.0, 0.75)],
        mistakes=[(lambda x, x_max, alpha: (x / x_max) ** alpha, "Cap the weight at 1: f(x) = 1 for x >= x_max.")],
        hint="f(x) = (x / x_max)^alpha if x < x_max, else 1.",
    )

For anything else (classes, several outputs, gradients), write the cases by hand: a function that receives
the student's object, calls it with :func:`call` and compares with :func:`expect`, raising :class:`Mismatch`
at the first disagreement; ``Checker("name", cases)`` turns it into a checker.

``check(f)`` prints the verdict; ``check.verdict(f)`` returns it (for tests).
"""

from __future__ import annotations

import copy
import importlib
import inspect
import math
import numbers
import os
import random
import signal
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

__all__ = [
    "Verdict",
    "Checker",
    "Case",
    "Mismatch",
    "NotAttempted",
    "call",
    "case",
    "compare",
    "expect",
    "same",
    "expect_close",
    "expect_raises",
    "show",
    "snapshot",
    "restore",
    "withheld",
    "WithheldReference",
    "peak_bytes",
    "expect_memory",
]

PASSED = "passed"
NOT_ATTEMPTED = "not attempted"
WRONG = "wrong"
ERROR = "error"
NAN_HINT = "Look for a division by zero, a log of 0, or an exp() of a large number."


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
            extra = f", {self.hidden} of them on hidden random inputs" if self.hidden else ""
            return f"PASSED  {self.exercise}: your code agrees with the reference ({self.cases} checks{extra})."
        if self.status == NOT_ATTEMPTED:
            return _not_attempted(self.exercise)
        lines = [f"{'ERROR' if self.status == ERROR else 'WRONG'}  {self.exercise}: {self.problem}"]
        for label, value in (("input", self.input), ("expected", self.expected), ("got", self.got)):
            if value is not None:
                lines.append(_field(label, value))
        if self.hint:
            lines.append(_field("hint", self.hint))
        return "\n".join(lines)


def _not_attempted(exercise: str) -> str:
    return (
        f"NOT ATTEMPTED YET  {exercise}: your code still raises NotImplementedError. "
        "Replace the stub with your implementation and run the cell again."
    )


def _field(label: str, value: str) -> str:
    head = f"   {label + ':':<10}"
    body = textwrap.indent(value, " " * len(head)).lstrip(" ")
    return head + body


class Checker:
    """One homework checker: ``checker(student)`` prints the verdict, ``checker.verdict(student)`` returns it.

    Args:
        exercise: the name the verdict shows, the function or class the student writes.
        cases: a function that receives the student's object and runs every case, raising
            :class:`Mismatch` at the first disagreement; it returns the number of checks made (or a pair
            ``(checks, hidden checks)``).
        seed: the random seed set (in a forked RNG, so the student's own random state is untouched)
            before the cases run, so that the shown cases are the same on every run (hidden ones are drawn
            under ``hidden_inputs``, seeded afresh).
        kind: ``"class"`` when the student writes a class (then an instance, or a class without
            ``forward``, gets a verdict saying so) or ``"function"``; by default a capitalised name is a class.
        withhold: dotted names of the companion's own answer (``"companion.bpe.merge"``,
            ``"companion.gpt.GPT.forward"``): while the student's code runs (inside :func:`call`, which
            ``cases`` uses), each is a stand-in that raises "write this one yourself", and so is every global
            of the companion's modules and of the student's and the caller's namespaces bound to the same object.

    Whatever the student's code does, ``verdict`` returns a :class:`Verdict`: exceptions (``SystemExit`` and
    ``GeneratorExit`` included) become WRONG with the input that caused them. ``KeyboardInterrupt`` is the one
    exception let through, and only when the process received SIGINT while the checker ran: that is the
    notebook's stop button (or the grader's time limit), which must stop the cell as usual; a
    ``KeyboardInterrupt`` the student's code raises itself is WRONG like any other exception.
    """

    def __init__(
        self,
        exercise: str,
        cases: Callable[[Any], int | tuple[int, int] | None],
        *,
        seed: int = 0,
        kind: str | None = None,
        withhold: Sequence[str] = (),
    ) -> None:
        self.exercise = exercise
        self._cases = cases
        self._seed = seed
        self.kind = kind or ("class" if exercise[:1].isupper() else "function")
        self.withhold = tuple(withhold)
        self.__doc__ = f"Check the student's ``{exercise}``: prints passed / not attempted yet / wrong."

    def verdict(self, student: Any) -> Verdict:
        """Run every case on ``student`` and return the :class:`Verdict` (nothing is printed; never raises)."""
        try:
            return self._verdict(student, _caller_namespace())
        except (KeyboardInterrupt, Abort):
            raise
        except BaseException as e:  # a bug of the checker's own, or something no case anticipated
            return Verdict(
                self.exercise,
                ERROR,
                f"The checker itself failed ({type(e).__name__}: {_safe_str(e)}).",
                hint="This is not a verdict on your code; tell your instructor, with the code you checked.",
            )

    def _verdict(self, student: Any, caller: dict[str, Any] | None) -> Verdict:
        wrong = self._wrong_object(student)
        if wrong is not None:
            return wrong
        for name, original in _resolve(self.withhold):
            if student is original or getattr(student, "__func__", None) is original:
                return Verdict(
                    self.exercise,
                    WRONG,
                    f"That is the companion's own `{name}`, not your code.",
                    hint=f"Write {self.exercise} yourself; the checker compares it with the companion's.",
                )
        namespaces = [ns for ns in (caller, _namespace_of(student)) if ns is not None]
        token = _ACTIVE.push(self.withhold, namespaces)
        try:
            with _Interrupts() as interrupts, torch.random.fork_rng(devices=[]), _other_random_states():
                torch.manual_seed(self._seed)
                random.seed(self._seed)
                np.random.seed(self._seed)
                try:
                    count = self._cases(student)
                except NotAttempted:
                    return Verdict(self.exercise, NOT_ATTEMPTED)
                except Mismatch as m:
                    return Verdict(self.exercise, WRONG, m.problem, m.input, m.expected, m.got, m.hint)
                except KeyboardInterrupt:
                    if interrupts.pressed:
                        raise
                    return _raised_verdict(self.exercise, "KeyboardInterrupt")
                except (SystemExit, GeneratorExit) as e:
                    return _raised_verdict(self.exercise, type(e).__name__)
        finally:
            _ACTIVE.pop(token)
        checks, hidden = count if isinstance(count, tuple) else (count if isinstance(count, int) else 1, 0)
        return Verdict(self.exercise, PASSED, cases=checks, hidden=hidden)

    def _wrong_object(self, student: Any) -> Verdict | None:
        """A verdict for an object that cannot be what the exercise asks for, else None."""
        name = self.exercise
        if self.kind == "class" and not isinstance(student, type):
            made = isinstance(student, nn.Module)
            return Verdict(
                name,
                WRONG,
                f"Expected the class {name} itself, got {show(student, 120)}.",
                hint=f"Pass the class, not an object made from it: {name}, not {name}(...)."
                if made
                else f"The exercise asks for a class, `class {name}(nn.Module):`, and the checker takes the class.",
            )
        if not callable(student):
            return Verdict(
                name,
                WRONG,
                f"Expected a function or class to check, got {show(student, 120)}.",
                hint=f"Pass the object itself, e.g. check({name}), not the result of calling it.",
            )
        if isinstance(student, type) and issubclass(student, nn.Module) and _lacks_forward(student):
            return Verdict(name, WRONG, f"Your class {student.__name__} has no method `forward`.", hint=_FORWARD_HINT)
        return None

    def __call__(self, student: Any) -> None:
        print(self.verdict(student))

    def not_attempted_message(self) -> str:
        """What this checker prints for a stub that still raises ``NotImplementedError``."""
        return _not_attempted(self.exercise)

    def __repr__(self) -> str:
        return f"Checker({self.exercise!r})"


_FORWARD_HINT = (
    "nn.Module calls a method spelt exactly `forward`, defined inside the class (indented at the level of "
    "__init__); a misspelt or mis-indented forward leaves nn.Module's own, which raises."
)


def _lacks_forward(cls: type) -> bool:
    return getattr(cls, "forward", None) is nn.Module.forward


def _raised_verdict(exercise: str, name: str) -> Verdict:
    return Verdict(exercise, WRONG, f"Your code raised {name}.", hint=_BASE_EXCEPTION_HINTS[name])


_BASE_EXCEPTION_HINTS = {
    "SystemExit": "sys.exit() and exit() end the whole program: return the result instead.",
    "KeyboardInterrupt": "Raise an ordinary exception (ValueError, say) for bad input, never KeyboardInterrupt.",
    "GeneratorExit": "GeneratorExit belongs to generators being closed: return the result instead.",
}


def _safe_str(value: Any, limit: int = 300) -> str:
    try:
        text = str(value)
    except BaseException:  # noqa: BLE001 -- a student's object may raise anything from __str__
        text = f"<a {type(value).__name__} whose str() raises>"
    return text if len(text) <= limit else text[: limit - 4] + " ..."


class _Interrupts:
    """Notes whether SIGINT arrived (the stop button, or the grader's time limit) while a checker ran."""

    _active: list[_Interrupts] = []

    @classmethod
    def pressed_now(cls) -> bool:
        """Whether the innermost running checker received SIGINT (True when no checker is running)."""
        return cls._active[-1].pressed if cls._active else True

    def __enter__(self) -> _Interrupts:
        self.pressed = False
        _Interrupts._active.append(self)
        self._previous: Any = None
        if threading.current_thread() is not threading.main_thread():
            return self  # KeyboardInterrupt from SIGINT only reaches the main thread
        try:
            previous = signal.getsignal(signal.SIGINT)
        except (ValueError, OSError):
            return self
        if not callable(previous):
            return self

        def note(signum: int, frame: Any) -> None:
            self.pressed = True
            previous(signum, frame)

        try:
            signal.signal(signal.SIGINT, note)
        except (ValueError, OSError):
            return self
        self._previous = previous
        return self

    def __exit__(self, *exc: Any) -> None:
        _Interrupts._active.remove(self)
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)


@contextmanager
def _other_random_states() -> Iterator[None]:
    """Python's and NumPy's global random states, put back after the checker (as fork_rng does for torch)."""
    python, numpy = random.getstate(), np.random.get_state()
    try:
        yield
    finally:
        random.setstate(python)
        np.random.set_state(numpy)


# ----- hidden random inputs ---------------------------------------------------------------------------------


@contextmanager
def hidden_inputs() -> Iterator[int]:
    """Seed torch, NumPy and ``random`` afresh from ``os.urandom`` (inside a checker's forked state) and yield
    the seed: the cases drawn inside are new on every run, so no table of shown answers can pass them."""
    seed = int.from_bytes(os.urandom(4), "little")
    with torch.random.fork_rng(devices=[]), _other_random_states():
        torch.manual_seed(seed)
        random.seed(seed)
        np.random.seed(seed % 2**32)
        yield seed


# ----- the companion's own answer, withheld while the student's code runs -------------------------------------


RAISED = object()
"""Stands for the answer on a case where the code (the student's, or a mistake's) raised."""


class WithheldReference(Exception):
    """Raised by the stand-in of the companion's answer when a student's code calls it during a check."""


def _resolve(names: Sequence[str]) -> list[tuple[str, Any]]:
    """``(dotted name, object)`` for each name: a module attribute, or an attribute of a class in a module."""
    out = []
    for dotted in names:
        parts = dotted.split(".")
        for i in range(len(parts) - 1, 0, -1):
            try:
                obj: Any = importlib.import_module(".".join(parts[:i]))
            except ImportError:
                continue
            for attr in parts[i:]:
                obj = inspect.getattr_static(obj, attr) if isinstance(obj, type) else getattr(obj, attr)
            out.append((dotted, obj))
            break
        else:
            raise ValueError(f"cannot find {dotted!r} to withhold")
    return out


def _stand_in(name: str) -> Callable[..., Any]:
    short = name.rsplit(".", 1)[-1]

    def stand_in(*args: Any, **kwargs: Any) -> Any:
        raise WithheldReference(
            f"the companion's `{name}` is not available while the checker runs your code: write this one yourself."
        )

    stand_in.__name__ = stand_in.__qualname__ = short
    return stand_in


@contextmanager
def withheld(names: Sequence[str], namespaces: Sequence[dict[str, Any]] = ()) -> Iterator[None]:
    """Replace each dotted name (``"companion.bpe.merge"``) by a stand-in raising :class:`WithheldReference`.

    The same object bound under another name is replaced too, found by identity: in every loaded
    ``companion`` module (``from .bpe import merge``) and in ``namespaces`` (the notebook's globals, where
    ``from companion.bpe import merge as m`` put it). Everything is put back on leaving, whatever happened.
    """
    targets = _resolve(names)
    by_id = {id(obj): (name, obj) for name, obj in targets}
    patches: list[tuple[Any, str, Any]] = []
    try:
        for name, obj in targets:  # the attribute itself (a method of a class included)
            owner_name, attr = name.rsplit(".", 1)
            owner = _resolve([owner_name])[0][1] if "." in owner_name else importlib.import_module(owner_name)
            patches.append((owner, attr, obj))
            setattr(owner, attr, _stand_in(name))
        modules = [m for k, m in list(sys.modules.items()) if k.split(".")[0] == "companion" and m is not None]
        spaces = [vars(m) for m in modules] + list(namespaces)
        for space in spaces:
            for key, value in list(space.items()):
                hit = by_id.get(id(value))
                if hit is not None and hit[1] is value:
                    patches.append((space, key, value))
                    space[key] = _stand_in(hit[0])
        yield
    finally:
        for owner, key, value in reversed(patches):
            if isinstance(owner, dict):
                owner[key] = value
            else:
                setattr(owner, key, value)


class _ActiveChecks:
    """What the running checker withholds, and where, so that :func:`call` can withhold it around each call."""

    def __init__(self) -> None:
        self.stack: list[tuple[tuple[str, ...], list[dict[str, Any]]]] = []

    def push(self, names: tuple[str, ...], namespaces: list[dict[str, Any]]) -> int:
        self.stack.append((names, namespaces))
        return len(self.stack)

    def pop(self, token: int) -> None:
        del self.stack[token - 1 :]

    def current(self) -> tuple[tuple[str, ...], list[dict[str, Any]]]:
        return self.stack[-1] if self.stack else ((), [])


_ACTIVE = _ActiveChecks()


def _caller_namespace() -> dict[str, Any] | None:
    """The globals of the first frame outside ``companion.exercises`` and its checking module (the notebook)."""
    frame = inspect.currentframe()
    try:
        while frame is not None:
            name = frame.f_globals.get("__name__", "")
            if not (name == __name__ or name.startswith("companion.exercises")):
                return frame.f_globals
            frame = frame.f_back
        return None
    finally:
        del frame


def _namespace_of(student: Any) -> dict[str, Any] | None:
    space = getattr(student, "__globals__", None)
    if isinstance(space, dict):
        return space
    module = sys.modules.get(getattr(student, "__module__", None) or "")
    return vars(module) if module is not None else None


# ----- showing values ----------------------------------------------------------------------------------------


def show(value: Any, limit: int = 400) -> str:
    """A compact, readable rendering of ``value`` for a verdict (shape and dtype first for tensors); never raises."""
    try:
        if isinstance(value, torch.Tensor):
            head = f"tensor of shape {tuple(value.shape)}, dtype {value.dtype}"
            if value.is_meta:
                text = f"{head} on the meta device (it has no values)"
            elif value.layout != torch.strided:
                text = f"{head}, layout {value.layout}"
            else:
                with torch.no_grad():
                    text = f"{head}:\n{value.detach().cpu()!r}"
        else:
            text = f"{type(value).__name__}: {value!r}"
    except BaseException:  # noqa: BLE001 -- a student's object may raise anything from __repr__
        text = f"a {type(value).__name__} object whose repr() raises"
    if len(text) > limit:
        text = text[: limit - 4] + " ..."
    return text


def _brief(value: Any) -> str:
    """One short line for an argument in a case's description."""
    if isinstance(value, torch.Tensor):
        if value.numel() <= 12 and value.ndim <= 2:
            values = value.tolist()
            if value.dtype.is_floating_point:
                values = _round(values)
            return f"tensor({values})" + ("" if value.dtype in (torch.float32, torch.long) else f", {value.dtype}")
        return f"tensor of shape {tuple(value.shape)}, dtype {value.dtype}"
    if isinstance(value, nn.Module):
        return f"a {type(value).__name__} model"
    if isinstance(value, float):
        return repr(value)
    try:
        text = repr(value)
    except BaseException:  # noqa: BLE001
        text = f"a {type(value).__name__} object whose repr() raises"
    return text if len(text) <= 120 else text[:116] + " ..."


def _round(values: Any) -> Any:
    if isinstance(values, list):
        return [_round(v) for v in values]
    return float(f"{values:.4g}")


def _plural(what: str) -> bool:
    """Whether a verdict's subject ("The logits", "(inputs, labels)") takes a plural verb."""
    if what.startswith("(") and "," in what:
        return True
    word = what.rstrip(" .)").split(" ")[-1]
    return word.endswith("s") and not word.endswith("ss")


_PLURAL_VERBS = {"is": "are", "has": "have", "contains": "contain", "was": "were"}


def _agree(what: str, problem: str) -> str:
    """``problem`` with its first verb made plural when ``what`` is plural: "has the wrong shape" → "have ..."."""
    if not _plural(what):
        return problem
    first, _, rest = problem.partition(" ")
    return f"{_PLURAL_VERBS.get(first, first)} {rest}".rstrip() if first in _PLURAL_VERBS else problem


# ----- comparing --------------------------------------------------------------------------------------------


def _kind(dtype: torch.dtype) -> str:
    if dtype == torch.bool:
        return "boolean"
    if dtype.is_floating_point:
        return "floating-point"
    return "complex" if dtype.is_complex else "integer"


def _number(value: Any) -> float | None:
    """``value`` as a float if it is a single real number (Python, NumPy, or a one-element tensor)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, np.ndarray):
        return float(value.reshape(())) if value.size == 1 and value.dtype.kind in "iuf" else None
    if isinstance(value, torch.Tensor) and value.numel() == 1 and not value.dtype.is_complex:
        return float(value.detach().reshape(()))
    return None


def _difference(got: Any, expected: Any, atol: float, rtol: float) -> tuple[str, str, str, str | None] | None:
    """None when ``got`` matches ``expected``, else ``(problem, expected, got, hint)`` describing the difference.

    Tensors must agree in shape, kind of dtype (boolean, integer, floating) and values (within
    ``atol + rtol·|expected|``; float64 for float32 is fine); numbers may come as Python or NumPy scalars or
    one-element tensors; a tuple and a list with the same items are the same answer.
    """
    if isinstance(expected, torch.Tensor) and (expected.ndim > 0 or isinstance(got, torch.Tensor) and got.numel() != 1):
        return _tensor_difference(got, expected, atol, rtol)
    if isinstance(expected, (numbers.Real, torch.Tensor)) and not isinstance(expected, bool):
        e = float(expected.detach() if isinstance(expected, torch.Tensor) else expected)
        g = _number(got)
        if g is None:
            return "should be a single number", f"{e:.6g}", show(got), None
        if math.isnan(g) and not math.isnan(e):
            return "is NaN", f"{e:.6g}", f"{g}", NAN_HINT
        if not math.isfinite(g) and math.isfinite(e):
            return "is infinite", f"{e:.6g}", f"{g}", INF_HINT
        close = abs(g - e) <= atol + rtol * abs(e) if math.isfinite(e) else g == e or math.isnan(g) and math.isnan(e)
        if not close:
            return "is wrong", f"{e:.6g}", f"{g:.6g}", None
        return None
    if isinstance(expected, (list, tuple)):
        if not isinstance(got, (list, tuple)) or len(got) != len(expected):
            return f"should be a list or tuple of {len(expected)} items", show(expected), show(got), None
        for i, (g, e) in enumerate(zip(got, expected, strict=True)):
            diff = _difference(g, e, atol, rtol)
            if diff is not None and isinstance(e, torch.Tensor):
                return f"has a wrong item {i} (it {diff[0]})", diff[1], diff[2], diff[3]
            if diff is not None:
                return f"is wrong (item {i} differs)", show(expected), show(got), diff[3]
        return None
    try:
        equal = bool(got == expected) and type(got) is type(expected)
    except Exception:
        equal = False
    return None if equal else ("is wrong", show(expected), show(got), None)


def _tensor_difference(got: Any, expected: torch.Tensor, atol: float, rtol: float):
    shape = tuple(expected.shape)
    if not isinstance(got, torch.Tensor):
        hint = (
            "Convert at the end with torch.from_numpy(...) or torch.tensor(...)."
            if isinstance(got, np.ndarray)
            else None
        )
        return "should be a torch.Tensor", f"a tensor of shape {shape}", show(got), hint
    if got.is_meta:
        return "is a tensor on the meta device, which has no values", f"a tensor of shape {shape}", show(got), None
    if got.layout != torch.strided:
        return "should be a dense tensor", f"a dense tensor of shape {shape}", show(got), "Convert with .to_dense()."
    if tuple(got.shape) != shape:
        return "has the wrong shape", f"shape {shape}", f"shape {tuple(got.shape)}", None
    if _kind(got.dtype) != _kind(expected.dtype):
        kind = _kind(expected.dtype)
        article = "an" if kind[0] in "aeiou" else "a"
        hint = f"Build the tensor with dtype={expected.dtype}, or convert it with .to({expected.dtype})."
        return (
            f"should be {article} {kind} tensor",
            f"{article} {kind} dtype such as {expected.dtype}",
            f"dtype {got.dtype}",
            hint,
        )
    g = got.detach().cpu().to(torch.float64 if not expected.dtype.is_complex else torch.complex128)
    e = expected.detach().cpu().to(g.dtype)
    finite = torch.isfinite(e)
    if torch.isnan(g[~torch.isnan(e)]).any():
        return "contains NaN", show(expected), show(got), NAN_HINT
    if not torch.isfinite(g[finite]).all():
        index = _first_index(finite & ~torch.isfinite(g), shape)
        return (
            f"contains an infinity where a finite value is expected (first at index {index})",
            show(expected),
            show(got),
            INF_HINT,
        )
    if not torch.allclose(g, e, atol=atol, rtol=rtol, equal_nan=True):
        infinite = ~finite & ~torch.isnan(e) & (g != e)
        if infinite.any():
            index = _first_index(infinite, shape)
            value = e[index] if expected.ndim else e
            return f"should be {float(value)} at index {index}", show(expected), show(got), None
        worst = (g - e).abs().nan_to_num(math.inf).argmax().item()
        index = tuple(int(i) for i in np.unravel_index(worst, shape)) if expected.ndim else ()
        return f"has the wrong values (largest difference at index {index})", show(expected), show(got), None
    return None


def _first_index(where: torch.Tensor, shape: tuple[int, ...]) -> tuple[int, ...]:
    flat = int(where.reshape(-1).nonzero()[0, 0])
    return tuple(int(i) for i in np.unravel_index(flat, shape)) if shape else ()


INF_HINT = (
    "An infinity (or -inf) appears where the reference has an ordinary number: look for an exp() of a large "
    "number, a division by zero, or a mask that removes too much."
)


def same(got: Any, candidate: Any, *, atol: float = 1e-5, rtol: float = 1e-4) -> bool:
    """Whether ``got`` matches ``candidate`` as :func:`expect` would accept it; never raises."""
    try:
        return _difference(got, candidate, atol, rtol) is None
    except BaseException as e:  # noqa: BLE001
        if isinstance(e, (KeyboardInterrupt, Abort)):
            raise
        return False


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
    diff = _safe_difference(got, expected, atol, rtol)
    if diff is None:
        return
    problem, expected_text, got_text, own_hint = diff
    named = _diagnose(got, expected, mistakes, atol, rtol)
    raise Mismatch(
        f"{what} {_agree(what, problem)}.",
        input=input,
        expected=expected_text,
        got=got_text,
        hint=named or own_hint or hint,
    )


def _safe_difference(got: Any, expected: Any, atol: float, rtol: float) -> tuple[str, str, str, str | None] | None:
    """:func:`_difference`, turning anything a strange answer raises while being compared into a difference."""
    try:
        return _difference(got, expected, atol, rtol)
    except BaseException as e:  # noqa: BLE001 -- a student's object may raise anything from __eq__ or __len__
        if isinstance(e, (KeyboardInterrupt, Abort)):
            raise
        return f"could not be compared ({type(e).__name__}: {_safe_str(e)})", show(expected), show(got), None


def _diagnose(got: Any, expected: Any, mistakes: Mistakes, atol: float, rtol: float) -> str | None:
    for wrong, hint in mistakes:
        try:
            candidate = wrong()
        except Exception:
            continue
        if same(got, candidate, atol=atol, rtol=rtol) and not same(expected, candidate, atol=atol, rtol=rtol):
            return hint
    return None


def confirmed(
    rows: Sequence[tuple[Any, Any, Sequence[Any]]], hints: Sequence[str], *, atol: float = 1e-5, rtol: float = 1e-4
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

    return [hint for i, hint in enumerate(hints) if all(agrees(g, e, a[i]) for g, e, a in rows)]


def expect_close(
    got: Any, expected: float, *, input: str, what: str = "The result", tol: float = 1e-5, hint: str | None = None
) -> None:
    """:func:`expect` for a single number, within ``tol·max(1, |expected|)`` (kept for older checkers)."""
    expect(got, float(expected), input=input, what=what, hint=hint, atol=tol, rtol=tol)


# ----- calling student code ---------------------------------------------------------------------------------


def call(student: Callable[..., Any], *args: Any, input: str, **kwargs: Any) -> Any:
    """Call student code, turning whatever it raises into a verdict-friendly exception.

    ``NotImplementedError`` becomes :class:`NotAttempted` (unless it is nn.Module's complaint about a missing
    ``forward``); any other exception (``SystemExit`` and ``GeneratorExit`` included, and a
    ``KeyboardInterrupt`` that no SIGINT caused) becomes a :class:`Mismatch` that names the input and the
    exception. ``input`` describes the arguments. While the student's code runs, the running checker's
    reference is withheld (see :class:`Checker`).
    """
    names, namespaces = _ACTIVE.current()
    try:
        with withheld(names, namespaces):
            return student(*args, **kwargs)
    except NotImplementedError as e:
        if isinstance(student, nn.Module) and _lacks_forward(type(student)):
            raise Mismatch(
                f"Your class {type(student).__name__} has no method `forward`.", input=input, hint=_FORWARD_HINT
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
        if _Interrupts.pressed_now():
            raise
        raise Mismatch(
            "Your code raised KeyboardInterrupt.", input=input, hint=_BASE_EXCEPTION_HINTS["KeyboardInterrupt"]
        ) from None
    except (SystemExit, GeneratorExit) as e:
        name = type(e).__name__
        raise Mismatch(f"Your code raised {name}.", input=input, hint=_BASE_EXCEPTION_HINTS[name]) from None
    except Exception as e:
        raise Mismatch(
            f"Your code raised {type(e).__name__}: {_safe_str(e)}",
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


# ----- memory -------------------------------------------------------------------------------------------------


def peak_bytes(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> int:
    """Peak bytes that ``fn(*args, **kwargs)`` allocates: PyTorch's tensors (``benchmarking.MemoryTracker``) plus what
    ``tracemalloc`` sees (NumPy arrays, Python lists), added up, so that an n × n matrix built in either
    counts. The result is dropped before the measurement ends. The smaller of two runs is returned: the first
    may import modules and fill caches (tens of MiB of Python objects that have nothing to do with ``fn``)."""
    return min(_peak_bytes_once(fn, *args, **kwargs) for _ in range(2))


#: peaks measured in the answer's own process while :func:`peak_bytes` runs (the grader's calls report them)
_remote_peaks: list[int] | None = None


def measuring_memory() -> bool:
    """Whether :func:`peak_bytes` is measuring now (a grader then asks the answer's process for its own peak)."""
    return _remote_peaks is not None


def record_remote_peak(peak: int) -> None:
    """Count a peak that the answer's process measured for a call made during :func:`peak_bytes`."""
    if _remote_peaks is not None:
        _remote_peaks.append(int(peak))


def _peak_bytes_once(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> int:
    from ..benchmarking import measured_call

    def run() -> None:
        fn(*args, **kwargs)  # the result is dropped before the measurement ends

    global _remote_peaks
    _remote_peaks = []
    try:
        with torch.no_grad():
            _, peak = measured_call(run)
        remote = _remote_peaks
    finally:
        _remote_peaks = None
    # Called through a grader, the student's code ran in its own process, which measured each call (one after
    # another: the largest is the peak); what this process allocated was sending and receiving the data.
    return max(remote) if remote else peak


def expect_memory(
    student: Callable[..., Any],
    reference: Callable[..., Any],
    args: Sequence[Any],
    *,
    input: str,
    limit: int,
    problem: str,
    hint: str,
    what: str = "The output",
) -> int:
    """Run ``student(*args)`` on a large input: its answer must be the reference's, and the bytes it allocates
    (:func:`peak_bytes`: PyTorch's tensors and NumPy's arrays alike) at most ``limit``. ``problem`` names what
    would take that much (``"an n × n score matrix takes 16 MiB"``). Returns the peak, for further checks."""
    expected = reference(*[_copy(a) for a in args])
    got = call(student, *[_copy(a) for a in args], input=input)
    expect(
        got,
        expected,
        input=input,
        what=what,
        atol=1e-4,
        rtol=1e-3,
        hint="The short cases passed: look for something that depends on the length (padding, block edges).",
    )
    peak = call(peak_bytes, student, *[_copy(a) for a in args], input=input)
    if peak > limit:
        raise Mismatch(
            f"Your function allocated {peak / 2**20:.1f} MiB: {problem}.",
            input=input,
            expected=f"at most {limit / 2**20:.1f} MiB",
            got=f"{peak / 2**20:.1f} MiB",
            hint=hint,
        )
    return peak


# ----- the standard checker ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """The arguments of one call, and why the case is there (shown with the input when it fails)."""

    args: tuple[Any, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)
    why: str = ""


def case(*args: Any, why: str = "", **kwargs: Any) -> Case:
    """One case of a :func:`compare` checker: ``case(x, 100.0, alpha=0.75, why="the paper's values")``."""
    return Case(args, kwargs, why)


def _copy(value: Any) -> Any:
    """A deep copy that shares nothing with ``value`` (tensors, models, lists of them), for one caller."""
    if isinstance(value, torch.Tensor):
        out = value.detach().clone()
        return out.requires_grad_() if value.requires_grad and out.dtype.is_floating_point else out
    try:
        return copy.deepcopy(value)
    except Exception:  # an object that cannot be copied is passed as it is
        return value


def _changed(before: Any, after: Any) -> bool:
    """Whether ``after`` (the student's copy) differs from ``before`` (the original), models included."""
    if isinstance(before, torch.Tensor):
        if not isinstance(after, torch.Tensor) or before.shape != after.shape or before.dtype != after.dtype:
            return True
        return not torch.equal(before.detach(), after.detach())
    if isinstance(before, nn.Module):
        if not isinstance(after, nn.Module):
            return True
        b, a = before.state_dict(), after.state_dict()
        return b.keys() != a.keys() or any(_changed(b[k], a[k]) for k in b)
    if isinstance(before, (list, tuple)):
        return (
            not isinstance(after, type(before))
            or len(before) != len(after)
            or any(_changed(x, y) for x, y in zip(before, after, strict=True))
        )
    if isinstance(before, dict):
        return (
            not isinstance(after, dict)
            or before.keys() != after.keys()
            or any(_changed(before[k], after[k]) for k in before)
        )
    try:
        return bool(before != after)
    except Exception:
        return False


def describe(reference: Callable[..., Any], c: Case, *, full: bool = False) -> str:
    """``name=value, ...`` for the arguments of ``c``, named after ``reference``'s parameters.

    With ``full``, tensors too long for one line (up to 32 values) follow in full, one per line, so that a
    student can rerun the failing case.
    """
    bound = _bound(reference, c)
    text = ", ".join(f"{k}={_brief(v)}" for k, v in bound)
    text = f"{text}  ({c.why})" if c.why else text
    if full:
        for k, v in bound:
            if isinstance(v, torch.Tensor) and not (v.numel() <= 12 and v.ndim <= 2) and 0 < v.numel() <= 32:
                text += f"\n{k} = {show(v, 2000).split(chr(10), 1)[-1]}"
    return text


def _bound(reference: Callable[..., Any], c: Case) -> list[tuple[str, Any]]:
    try:
        return list(inspect.signature(reference).bind_partial(*c.args, **c.kwargs).arguments.items())
    except (TypeError, ValueError):
        return [(f"#{i + 1}", a) for i, a in enumerate(c.args)] + list(c.kwargs.items())


_REDRAW = object()


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
        return text if self.hidden_seed is None else f"{text}  [a hidden random case, seed {self.hidden_seed}]"


def _copies(c: Case) -> tuple[list[Any], dict[str, Any]]:
    return [_copy(a) for a in c.args], {k: _copy(v) for k, v in c.kwargs.items()}


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
                if not any(same((c.args, c.kwargs), (s.args, s.kwargs), atol=0, rtol=0) for s in shown):
                    trials.append(Trial(c, hidden_seed=seed))
    for t in trials:
        t.reference_args = _copies(t.case)
        t.expected = reference(*t.reference_args[0], **t.reference_args[1])
    return trials


def run_student(student: Callable[..., Any], reference: Callable[..., Any], trials: Sequence[Trial]) -> None:
    """Call the student's function on each trial (on copies of its arguments, the reference withheld),
    keeping the answer or the :class:`Mismatch` raised; :class:`NotAttempted` stops everything."""
    for t in trials:
        t.student_args = _copies(t.case)
        try:
            t.got = call(student, *t.student_args[0], input=t.label(reference, full=True), **t.student_args[1])
        except Mismatch as m:
            t.error = m


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
    same_dtype: bool = False,
    differentiable: bool = False,
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
        same_dtype: the result must have the reference's dtype exactly (float32 in, float32 out).
        differentiable: the result is a loss to train with: it must carry gradients, and the gradients it
            gives the parameters of every model argument must be the reference's.

    The expected answers are computed first, on deep copies of every argument; the student gets other
    copies, and a student who changes an argument in place (a tensor, a list, a model's parameters or
    buffers) is told so.
    """
    extra = (cases if callable(cases) else None) if hidden is _REDRAW else hidden
    withhold = (*_own_name(reference), *withhold)

    def run(student: Callable[..., Any]) -> tuple[int, int]:
        trials = draw_trials(reference, cases, extra)
        run_student(student, reference, trials)
        judge(trials)
        return len(trials), sum(t.hidden_seed is not None for t in trials)

    def judge(trials: Sequence[Trial]) -> None:
        for i, t in enumerate(trials):
            label = t.label(reference, full=True)
            if t.error is not None:
                raise t.error
            for name, before, after in _arguments(reference, t.case, *t.student_args):
                if _changed(before, after):
                    raise Mismatch(
                        f"Your function changed its argument `{name}` in place.",
                        input=label,
                        expected=f"{name} unchanged: {show(before, 200)}",
                        got=show(after, 200),
                        hint="The caller still needs its argument: use out-of-place operations (x / n, not x /= n "
                        "or x.div_(n)), or work on x.clone(); leave a model's parameters as they are.",
                    )
            if same_dtype:
                _expect_dtype(t.got, t.expected, label, what)
            if differentiable:
                _expect_gradient_kept(t.got, label, what)
            if _safe_difference(t.got, t.expected, atol, rtol) is not None:
                values = _mistake_answers(trials)
                named = confirmed(
                    [(RAISED if u.error else u.got, u.expected, values[j]) for j, u in enumerate(trials)],
                    [h for _, h in mistakes],
                    atol=atol,
                    rtol=rtol,
                )
                here = [(lambda v=values[i][k]: v, h) for k, (_, h) in enumerate(mistakes) if h in named]
                expect(t.got, t.expected, input=label, what=what, hint=hint, atol=atol, rtol=rtol, mistakes=here)
            if differentiable:
                _expect_gradients(t, label, atol, rtol)

    def _mistake_answers(trials: Sequence[Trial]) -> list[list[Any]]:
        out = []
        for u in trials:
            answers = []
            for wrong, _ in mistakes:
                args, kwargs = _copies(u.case)
                try:
                    answers.append(wrong(*args, **kwargs))
                except Exception:
                    answers.append(RAISED)
            out.append(answers)
        return out

    return Checker(exercise, run, seed=seed, kind="function", withhold=withhold)


def _own_name(reference: Callable[..., Any]) -> tuple[str, ...]:
    """``("companion.module.name",)`` when ``reference`` is a top-level function of the companion, else ``()``."""
    module, name = getattr(reference, "__module__", "") or "", getattr(reference, "__qualname__", "")
    public = module.startswith("companion.") and not module.startswith("companion.exercises") and "." not in name
    return (f"{module}.{name}",) if public and "<" not in name else ()


def _expect_dtype(got: Any, expected: Any, label: str, what: str) -> None:
    if isinstance(expected, (tuple, list)) and isinstance(got, (tuple, list)) and len(got) == len(expected):
        for g, e in zip(got, expected, strict=True):  # each output of a tuple keeps the input's dtype
            _expect_dtype(g, e, label, what)
        return
    if isinstance(expected, torch.Tensor) and isinstance(got, torch.Tensor) and got.dtype != expected.dtype:
        raise Mismatch(
            f"{what} {_agree(what, 'has the wrong dtype')}: the task asks for the input's dtype.",
            input=label,
            expected=f"dtype {expected.dtype}",
            got=f"dtype {got.dtype}",
            hint="Build every tensor from the input (torch.zeros_like(x), x.new_tensor(...), ...) or convert at the "
            "end with .to(x.dtype).",
        )


_NO_GRADIENT_HINT = (
    "The loss is what training calls .backward() on: keep it a tensor connected to the model's parameters (no "
    ".item(), float(), .detach(), .numpy() or torch.no_grad())."
)


def _expect_gradient_kept(got: Any, label: str, what: str) -> None:
    """A loss to train with must be a tensor that carries gradient: not a number, not computed under no_grad."""
    if not isinstance(got, torch.Tensor):
        if _number(got) is not None:
            problem = _agree(what, "is a plain number")
            raise Mismatch(f"{what} {problem}, with no gradient.", input=label, got=show(got), hint=_NO_GRADIENT_HINT)
        return  # the comparison of values says what is wrong
    if got.numel() == 1 and (not got.requires_grad or got.grad_fn is None):
        problem = _agree(what, "carries no gradient")
        raise Mismatch(f"{what} {problem}.", input=label, got=show(got), hint=_NO_GRADIENT_HINT)


def _expect_gradients(t: Trial, label: str, atol: float, rtol: float) -> None:
    """Backpropagate the student's result and the reference's: every model argument gets the same gradients."""
    theirs = [a for a in (*t.student_args[0], *t.student_args[1].values()) if isinstance(a, nn.Module)]
    ours = [a for a in (*t.reference_args[0], *t.reference_args[1].values()) if isinstance(a, nn.Module)]
    try:
        t.got.backward()
    except Exception as e:
        raise Mismatch(
            f"Calling .backward() on your result raised {type(e).__name__}: {_safe_str(e)}",
            input=label,
            hint=_NO_GRADIENT_HINT,
        ) from e
    t.expected.backward()
    for mine, model in zip(theirs, ours, strict=True):
        for (name, p), (_, q) in zip(mine.named_parameters(), model.named_parameters(), strict=True):
            gp = p.grad if p.grad is not None else torch.zeros_like(p)
            gq = q.grad if q.grad is not None else torch.zeros_like(q)
            if not torch.allclose(gp, gq, atol=max(atol, 1e-5), rtol=max(rtol, 1e-4)):
                raise Mismatch(
                    f"The gradient of your result with respect to `{name}` is not the reference loss's.",
                    input=label,
                    hint="The value is right but the computation graph is not: compute the loss from the model's "
                    "output with differentiable operations only.",
                )


def _arguments(reference: Callable[..., Any], c: Case, args: list[Any], kwargs: dict[str, Any]):
    """``(name, original, student's copy)`` for every argument."""
    try:
        names = list(inspect.signature(reference).parameters)
    except (TypeError, ValueError):
        names = []
    for i, (before, after) in enumerate(zip(c.args, args, strict=True)):
        yield (names[i] if i < len(names) else f"#{i + 1}"), before, after
    for k, before in c.kwargs.items():
        yield k, before, kwargs[k]


# ----- keeping a homework notebook's variables safe ---------------------------------------------------------

_IPYTHON_NAMES = {"In", "Out", "get_ipython", "exit", "quit", "open"}


def snapshot(namespace: dict[str, Any]) -> dict[str, Any]:
    """The notebook's public variables (name → object) before an exercise, for :func:`restore`."""
    return {k: v for k, v in namespace.items() if not k.startswith("_") and k not in _IPYTHON_NAMES}


def restore(namespace: dict[str, Any], saved: dict[str, Any], keep: Sequence[str] = ()) -> list[str]:
    """Put back every variable of ``saved`` that the student's cells replaced or deleted, except ``keep``.

    The homework calls this after each checker, so that ``emb = Embedding(10, 4)`` or ``x = ...`` written while
    trying an answer out does not break the chapter's cells below. Names the student added stay. Returns the
    names put back (and says which, when there are any).
    """
    back = [k for k, v in saved.items() if k not in keep and (k not in namespace or namespace[k] is not v)]
    for k in back:
        namespace[k] = saved[k]
    if back:
        names = ", ".join(f"`{k}`" for k in back)
        print(
            f"(The chapter's {names} {'is' if len(back) == 1 else 'are'} back as before your exercise cells, "
            "so that the cells below run as written; your own new names are kept.)"
        )
    return back
