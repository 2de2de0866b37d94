"""Telling the stop button from a ``KeyboardInterrupt`` that the student's code raises itself."""

from __future__ import annotations

import signal
import threading
from typing import Any


class Interrupts:
    """Notes whether SIGINT arrived (the stop button, or the grader's time limit) while a checker ran.

    Used as a context manager around the checker's cases: ``pressed`` says whether SIGINT arrived inside (the
    handler in place before is called as usual, and put back on leaving). Only the main thread receives SIGINT;
    elsewhere nothing is installed.
    """

    def __init__(self) -> None:
        self.pressed = False
        self._previous: Any = None

    def __enter__(self) -> Interrupts:
        self.pressed = False
        self._previous = None
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
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
