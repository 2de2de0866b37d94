"""The check that is running: what it withholds and where, whether the stop button was pressed, and where the
student's calls measure memory. :func:`~companion.exercises.checking.calling.call` and
:func:`~companion.exercises.checking.memory.peak_bytes` are called from inside a checker's cases, which receive
only the student's object; they find the running check here.

A check is an object (:class:`ActiveCheck`) that the checker makes and enters; entering makes it the current one
of this thread (a context variable), leaving puts back the one before, so checks nest."""

from __future__ import annotations

from contextvars import ContextVar, Token
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .interrupts import Interrupts
from .withholding import OneCall

if TYPE_CHECKING:
    from .memory import RemoteMemory


@dataclass(eq=False)
class ActiveCheck:
    """One checker's run.

    Args:
        withhold: the dotted names of the companion's own answer, withheld around each call of the student's
            code.
        namespaces: where else the answer may be bound (the notebook's globals, the student's module).
        one_call: PyTorch's calls that compute the whole exercise (see
            :class:`~companion.exercises.checking.withholding.OneCall`), withheld around each call too.
        memory: for a harness that runs the student's code in another process, where that process reports the
            peaks it measured (see :class:`~companion.exercises.checking.memory.RemoteMemory`); ``None`` when
            the student's code runs here.
    """

    withhold: tuple[str, ...] = ()
    namespaces: list[dict[str, Any]] = field(default_factory=list)
    memory: RemoteMemory | None = None
    one_call: tuple[OneCall, ...] = ()
    interrupts: Interrupts = field(default_factory=Interrupts)
    _token: Token | None = field(default=None, repr=False)

    def __enter__(self) -> ActiveCheck:
        self._token = _CURRENT.set(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        _CURRENT.reset(self._token)
        self._token = None


_CURRENT: ContextVar[ActiveCheck | None] = ContextVar("active_check", default=None)


def current() -> ActiveCheck | None:
    """The innermost running check, or ``None`` outside every checker."""
    return _CURRENT.get()
