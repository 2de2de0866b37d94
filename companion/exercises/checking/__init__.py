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

The package holds one concern per module, and this file only gathers their names:

- ``verdicts``: the statuses, :class:`Verdict`, and the exceptions of the cases (:class:`Mismatch`,
  :class:`NotAttempted`, ``Abort``);
- ``checker``: :class:`Checker`, which runs the cases and turns whatever happens into a verdict;
- ``active``: the running check (what it withholds, the stop button, where memory is measured), found by
  :func:`call` and :func:`peak_bytes`;
- ``interrupts``: the stop button told apart from a ``KeyboardInterrupt`` the student's code raises;
- ``random_state``: the forked, seeded random generators, the hidden cases' fresh seed, and the known torch
  state (grad mode on, float32 default dtype) every check runs under;
- ``withholding``: the companion's own answer replaced by a stand-in while the student's code runs (and PyTorch's
  calls that compute a whole exercise the student is asked to build, :class:`OneCall`), and an answer that merely
  delegates to one (a subclass, the answer held since definition time) told apart;
- ``calling``: :func:`call` and :func:`expect_raises`, the student's code called from a case (its tensor and
  module arguments checked for changes in place);
- ``printing``: how values are shown in a verdict;
- ``differences`` and ``expectations``: how an answer differs from the expected one, :func:`expect`, and the
  typical mistakes named only when confirmed;
- ``arguments`` and ``trials``: the cases, their copied arguments, and the standard checker's two steps;
- ``standard``: :func:`compare`, the standard checker;
- ``gradients`` and ``memory``: a loss's gradients; :func:`peak_bytes` and :func:`expect_memory` (with
  :class:`RemoteMemory` for a grader that runs the student's code in another process);
- ``training``: a module answer trained one step beside the reference;
- ``snapshots``: the homework notebook's variables saved and put back around an exercise.
"""

# Besides __all__, what the exercise modules, the grader and the tests import from here (so that none of them
# changes): the statuses, the exception a harness passes through, the standard checker's parts.
from .arguments import changed as _changed  # noqa: F401
from .calling import call, expect_module, expect_raises
from .checker import Checker
from .differences import INF_HINT, NAN_HINT, same  # noqa: F401
from .differences import safe_difference as _safe_difference  # noqa: F401
from .expectations import RAISED, Mistakes, confirmed, expect, expect_close, expect_long  # noqa: F401
from .memory import RemoteMemory, expect_memory, peak_bytes
from .printing import round_values as _round  # noqa: F401
from .printing import show
from .random_state import hidden_inputs  # noqa: F401
from .snapshots import restore, snapshot
from .standard import compare
from .standard import expect_dtype as _expect_dtype  # noqa: F401
from .trials import Case, Trial, case, describe, draw_trials, run_student  # noqa: F401
from .trials import copies as _copies  # noqa: F401
from .verdicts import (  # noqa: F401
    ERROR,
    NOT_ATTEMPTED,
    PASSED,
    WRONG,
    Abort,
    Mismatch,
    NotAttempted,
    Verdict,
)
from .withholding import OneCall, WithheldReference, withheld

__all__ = [
    "Verdict",
    "Checker",
    "Case",
    "Mismatch",
    "NotAttempted",
    "call",
    "expect_module",
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
    "OneCall",
    "peak_bytes",
    "expect_memory",
    "RemoteMemory",
]
