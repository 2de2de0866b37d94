"""Memory checks: the peak bytes a call allocates (PyTorch's tensors and what ``tracemalloc`` sees, NumPy's
arrays and Python's lists alike), and a case that requires an answer to stay under a limit.

Where the student's code runs in another process (a grader), that process measures each call itself and reports
its peak: the grader passes a :class:`RemoteMemory` to the checker (``checker.verdict(student, memory=...)``),
asks it whether a measurement is running before each call, and hands it the peaks that come back."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch

from . import active
from .arguments import copy_value
from .calling import call
from .expectations import expect
from .verdicts import Mismatch


class RemoteMemory:
    """The peaks that another process measured for the student's calls made while :func:`peak_bytes` runs.

    A harness that runs the student's code elsewhere makes one per checker run and passes it to
    ``Checker.verdict``; before each call it reads :attr:`measuring`
    (then the other process measures the call's own peak) and hands the peak back with :meth:`record`.
    """

    def __init__(self) -> None:
        self._peaks: list[int] | None = None

    @property
    def measuring(self) -> bool:
        """Whether :func:`peak_bytes` is measuring now."""
        return self._peaks is not None

    def record(self, peak: int) -> None:
        """Count a peak that the other process measured for a call made while :func:`peak_bytes` runs."""
        if self._peaks is not None:
            self._peaks.append(int(peak))

    @contextmanager
    def measure(self) -> Iterator[list[int]]:
        """A measurement: the list of the peaks recorded until it ends."""
        self._peaks = []
        try:
            yield self._peaks
        finally:
            self._peaks = None


def peak_bytes(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> int:
    """Peak bytes that ``fn(*args, **kwargs)`` allocates: PyTorch's tensors (``benchmarking.MemoryTracker``) plus what
    ``tracemalloc`` sees (NumPy arrays, Python lists), added up, so that an n × n matrix built in either
    counts. The result is dropped before the measurement ends. The smaller of two runs is returned: the first
    may import modules and fill caches (tens of MiB of Python objects that have nothing to do with ``fn``)."""
    return min(_peak_bytes_once(fn, *args, **kwargs) for _ in range(2))


def _peak_bytes_once(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> int:
    from ...benchmarking import measured_call

    def run() -> None:
        fn(*args, **kwargs)  # the result is dropped before the measurement ends

    check = active.current()
    remote = check.memory if check is not None else None
    if remote is None:
        with torch.no_grad():
            return measured_call(run)[1]
    with remote.measure() as peaks, torch.no_grad():
        _, peak = measured_call(run)
    # Called through a grader, the student's code ran in its own process, which measured each call (one after
    # another: the largest is the peak); what this process allocated was sending and receiving the data.
    return max(peaks) if peaks else peak


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
    expected = reference(*[copy_value(a) for a in args])
    got = call(student, *[copy_value(a) for a in args], input=input)
    expect(
        got,
        expected,
        input=input,
        what=what,
        atol=1e-4,
        rtol=1e-3,
        hint="The short cases passed: look for something that depends on the length (padding, block edges).",
    )
    peak = call(peak_bytes, student, *[copy_value(a) for a in args], input=input)
    if peak > limit:
        raise Mismatch(
            f"Your function allocated {peak / 2**20:.1f} MiB: {problem}.",
            input=input,
            expected=f"at most {limit / 2**20:.1f} MiB",
            got=f"{peak / 2**20:.1f} MiB",
            hint=hint,
        )
    return peak
