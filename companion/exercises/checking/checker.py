"""The checker: :class:`Checker` runs a checker's cases on the student's object and turns whatever happens
into a :class:`~companion.exercises.checking.verdicts.Verdict`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from torch import nn

from .active import ActiveCheck
from .calling import FORWARD_HINT, lacks_forward
from .printing import safe_str, show
from .random_state import forked_random_state, known_torch_state
from .verdicts import (
    ERROR,
    NOT_ATTEMPTED,
    PASSED,
    WRONG,
    Abort,
    Mismatch,
    NotAttempted,
    Verdict,
    not_attempted_message,
    own_base_exception_hint,
    raised_by_student,
    raised_verdict,
    student_line,
)
from .withholding import (
    OneCall,
    caller_namespace,
    delegation,
    namespace_of,
    one_calls,
    resolve,
)

if TYPE_CHECKING:
    from .memory import RemoteMemory


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
            An answer that subclasses a withheld class (or the class of a withheld method), or holds a withheld
            object in a default argument or closure cell (which replacing names cannot reach), is WRONG at once.
        one_call: PyTorch's calls that compute the whole exercise by themselves, where the exercise asks the
            student to build that computation (``"torch.nn.functional.layer_norm"``, or a
            :class:`~companion.exercises.checking.withholding.OneCall`, withheld only with a keyword argument if
            need be): withheld like ``withhold`` (and by the grader in the answer's process), with a verdict that
            names the call and says that the exercise asks to build it.

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
        one_call: Sequence[str | OneCall] = (),
    ) -> None:
        self.exercise = exercise
        self._cases = cases
        self._seed = seed
        self.kind = kind or ("class" if exercise[:1].isupper() else "function")
        self.withhold = tuple(withhold)
        self.one_call = one_calls(one_call)
        self.__doc__ = f"Check the student's ``{exercise}``: prints passed / not attempted yet / wrong."

    def verdict(self, student: Any, *, memory: RemoteMemory | None = None) -> Verdict:
        """Run every case on ``student`` and return the :class:`Verdict` (nothing is printed; never raises).

        ``memory``: for a harness that runs the student's code in another process (a grader), where that process
        reports the peaks it measures while a memory check runs (see :class:`RemoteMemory`)."""
        try:
            return self._verdict(student, caller_namespace(), memory)
        except (KeyboardInterrupt, Abort):
            raise
        # a bug of the checker's own, or something no case anticipated
        except BaseException as e:
            # the student's own exception class, raised where no case expected code
            if raised_by_student(e):
                name = type(e).__name__
                hint = (
                    own_base_exception_hint(name)
                    if not isinstance(e, Exception)
                    else None
                )
                return Verdict(
                    self.exercise,
                    WRONG,
                    f"Your code raised {name}: {safe_str(e)}{student_line(e)}",
                    hint=hint or "Run your code yourself and read the traceback.",
                )
            return Verdict(
                self.exercise,
                ERROR,
                f"The checker itself failed ({type(e).__name__}: {safe_str(e)}).",
                hint="This is not a verdict on your code; tell your instructor, with the code you checked.",
            )

    def _verdict(
        self, student: Any, caller: dict[str, Any] | None, memory: RemoteMemory | None
    ) -> Verdict:
        wrong = self._wrong_object(student)
        if wrong is not None:
            return wrong
        always = [c.name for c in self.one_call if c.keyword is None]
        for name, original in resolve([*self.withhold, *always]):
            if student is original or getattr(student, "__func__", None) is original:
                return Verdict(
                    self.exercise,
                    WRONG,
                    f"That is {_whose(name)} own `{name}`, not your code.",
                    hint=_write_it(self.exercise, name),
                )
        delegate = delegation(student, self.withhold, self.one_call)
        if delegate is not None:
            return Verdict(
                self.exercise,
                WRONG,
                f"Your {self.exercise} hands the work to {_whose(delegate)} own `{delegate}` (by subclassing it, "
                "or by holding it from the moment your code was defined).",
                hint=_write_it(self.exercise, delegate),
            )
        namespaces = [ns for ns in (caller, namespace_of(student)) if ns is not None]
        check = ActiveCheck(self.withhold, namespaces, memory, self.one_call)
        with (
            check,
            check.interrupts,
            forked_random_state(self._seed),
            known_torch_state(),
        ):
            try:
                count = self._cases(student)
            except NotAttempted:
                return Verdict(self.exercise, NOT_ATTEMPTED)
            except Mismatch as m:
                return Verdict(
                    self.exercise, WRONG, m.problem, m.input, m.expected, m.got, m.hint
                )
            except KeyboardInterrupt:
                if check.interrupts.pressed:
                    raise
                return raised_verdict(self.exercise, "KeyboardInterrupt")
            except (SystemExit, GeneratorExit) as e:
                return raised_verdict(self.exercise, type(e).__name__)
        checks, hidden = (
            count
            if isinstance(count, tuple)
            else (count if isinstance(count, int) else 1, 0)
        )
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
        if (
            isinstance(student, type)
            and issubclass(student, nn.Module)
            and lacks_forward(student)
        ):
            return Verdict(
                name,
                WRONG,
                f"Your class {student.__name__} has no method `forward`.",
                hint=FORWARD_HINT,
            )
        return None

    def __call__(self, student: Any) -> None:
        print(self.verdict(student))

    def not_attempted_message(self) -> str:
        """What this checker prints for a stub that still raises ``NotImplementedError``."""
        return not_attempted_message(self.exercise)

    def __repr__(self) -> str:
        return f"Checker({self.exercise!r})"


def _whose(name: str) -> str:
    """``"PyTorch's"`` for a name of PyTorch's (a one-call answer), ``"the companion's"`` otherwise."""
    return "PyTorch's" if name.split(".")[0] == "torch" else "the companion's"


def _write_it(exercise: str, name: str) -> str:
    if name.split(".")[0] == "torch":
        return (
            f"Write {exercise} yourself, from smaller torch operations: `{name}` computes the whole exercise, "
            "which asks you to build that computation."
        )
    return f"Write {exercise} yourself, from torch operations; the checker compares it with the companion's."
