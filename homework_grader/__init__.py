"""The instructors' grader, a package of its own beside ``companion`` (which never imports it): grade a folder of
submitted homework notebooks with ``companion-grade SUBMISSIONS --out RESULTS`` or ``python -m homework_grader``.

Nothing of a notebook is executed as a notebook. For each exercise, ``answers`` parses the student's code cells
and takes the function or class the exercise names with the helpers, imports and literal constants it uses;
``remote`` runs that code alone in a fresh process (``sandbox``: forked from a server that imported torch once,
a session of its own, limits on time, memory and output, an audit hook, the companion's reference replaced by a
stand-in) and calls it from the checker running in the grader's own process, the arguments and results going
both ways as data (``wire``, never a pickle; a class through a mirror module; a model the checker hands the
answer as its classes' names, attributes and weights, rebuilt there from torch's and the companion's own classes
and sent back as the answer left it; a loss's gradients on demand). Nothing is checked in the answer's process.
``worker`` grades one notebook, ``cli`` a folder (``--jobs`` notebooks at once), ``report`` writes
``gradebook.csv``, ``feedback/STUDENT.md``, ``summary.md``/``.png`` and ``results.json`` once every answer's
process has ended.

Which exercises a chapter has is read from the homework notebooks (``book/homework``, ``chapters``); an answer
equal to the book's published solution (``book/NN_name.md``) is flagged. The grader needs the ``grade`` extra
(``pip install -e ".[grade]"``: nbformat, safetensors); ``import companion`` never imports any of it (the
checkers it runs are ``companion.exercises``). See README, "Grading homework", for the threat model and a
container recipe.
"""

from __future__ import annotations

__all__ = ["grade", "main"]


def grade(*args, **kwargs):
    """See :func:`homework_grader.cli.grade`."""
    from .cli import grade as _grade

    return _grade(*args, **kwargs)


def main(argv=None) -> int:
    from .cli import main as _main

    return _main(argv)
