"""Time and peak memory of a call, attention measured over lengths, and power-law fits (re-exported by
:mod:`companion.benchmarking`)."""

from __future__ import annotations

import math
import tracemalloc
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch.utils import benchmark
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from ..attention import blocked_attention, scaled_dot_product_attention
from ..validation import (
    describe,
    require_entries,
    require_int,
    require_number,
    require_positive_ints,
)

__all__ = [
    "MemoryTracker",
    "measured_call",
    "peak_memory",
    "time_call",
    "AttentionMeasurement",
    "measure_attention",
    "default_attention_implementations",
    "format_table",
    "LogLogFit",
    "fit_loglog_slope",
]


class MemoryTracker(TorchDispatchMode):
    """Count the bytes of the tensors created inside a ``with`` block; ``peak`` is the largest live total.

    Every PyTorch operation run inside the block passes through ``__torch_dispatch__``; each output whose
    storage is new (not a view of an input) adds its size to ``live`` until that storage is freed. This sees
    what PyTorch allocates for tensors (the ``n × n`` scores, the softmax, the output), not the small scratch
    buffers a fused kernel keeps to itself. Use it on CPU, where PyTorch has no allocator statistics.

    Example::

        with MemoryTracker() as tracker:
            out = scaled_dot_product_attention(q, k, v)
        tracker.peak  # bytes
    """

    def __init__(self) -> None:
        super().__init__()
        self.live = 0
        self.peak = 0
        self._seen: set[int] = set()
        # While tracemalloc traces, the Python bytes this tracker keeps for itself (``own``, at most ``own_max``)
        # and the largest traced total less them seen between two operations (``python_peak``), for measured_call.
        self.own = self.own_max = self.python_peak = 0
        self._own: dict[int, int] = {}

    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None
    ) -> Any:
        tracing = tracemalloc.is_tracing()
        entry = tracemalloc.get_traced_memory()[0] if tracing else 0
        if tracing:
            self.python_peak = max(self.python_peak, entry - self.own)
        kwargs = kwargs or {}
        inputs = {
            t.untyped_storage().data_ptr()
            for t in tree_flatten((args, kwargs))[0]
            if isinstance(t, torch.Tensor) and t.device.type != "meta"
        }
        out = func(*args, **kwargs)
        new = []
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor) or t.device.type == "meta":
                continue
            storage = t.untyped_storage()
            key, size = storage.data_ptr(), storage.nbytes()
            if size == 0 or key in inputs or key in self._seen:
                continue
            self._seen.add(key)
            self.live += size
            self.peak = max(self.peak, self.live)
            weakref.finalize(storage, self._release, key, size)
            new.append(key)
        # a view's share is released with the storage it views
        owner = (
            new[0] if new else next((key for key in inputs if key in self._seen), None)
        )
        del inputs
        if tracing:
            # What Python holds now that it did not before the operation is this tracker's: the Python objects
            # that dispatching gives every intermediate tensor, and the bookkeeping above.
            grown = tracemalloc.get_traced_memory()[0] - entry
            self._own[owner] = self._own.get(owner, 0) + grown
            self.own += grown
            self.own_max = max(self.own_max, self.own)
        return out

    def _release(self, key: int, size: int) -> None:
        if key in self._seen:
            self._seen.discard(key)
            self.live -= size
            self.own -= self._own.pop(key, 0)


def measured_call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, int]:
    """``(fn(*args, **kwargs), peak bytes it allocated)``: PyTorch's tensors (:class:`MemoryTracker`) plus what
    ``tracemalloc`` sees (NumPy arrays, Python lists), added up, so that an n × n matrix built in either counts."""
    # the first use of a dispatch mode imports and caches (megabytes): not fn's
    with MemoryTracker():
        torch.zeros(1).add_(1)
    running = tracemalloc.is_tracing()
    if not running:
        tracemalloc.start()
    try:
        with MemoryTracker() as tracker:  # entered first: its own setup is not counted
            tracemalloc.reset_peak()
            start = tracemalloc.get_traced_memory()[0]
            result = fn(*args, **kwargs)
            peak = tracemalloc.get_traced_memory()[1]
    finally:
        if not running:
            tracemalloc.stop()
    # Python's peak less the tracker's own bookkeeping (a few hundred bytes per live tensor): at most the true peak,
    # and as large as the true total at any moment between two PyTorch operations.
    python = max(peak - tracker.own_max, tracker.python_peak) - start
    return result, tracker.peak + max(python, 0)


def peak_memory(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> int:
    """Peak bytes allocated while running ``fn(*args, **kwargs)`` without gradients, the inputs excluded:
    :func:`measured_call`'s number."""
    with torch.no_grad():
        return measured_call(fn, *args, **kwargs)[1]


def time_call(
    fn: Callable[..., Any],
    *args: Any,
    min_run_time: float = 0.2,
    num_threads: int | None = None,
) -> float:
    """Median seconds per call of ``fn(*args)``, measured with :class:`torch.utils.benchmark.Timer`.

    ``blocked_autorange`` repeats the call in blocks until ``min_run_time`` seconds have passed, and
    synchronises CUDA. ``num_threads`` defaults to ``torch.get_num_threads``.
    """
    require_number(min_run_time, "min_run_time", low=0, low_open=True)
    timer = benchmark.Timer(
        stmt="fn(*args)",
        globals={"fn": fn, "args": args},
        num_threads=num_threads or torch.get_num_threads(),
    )
    with torch.no_grad():
        fn(*args)  # warm-up
        return timer.blocked_autorange(min_run_time=min_run_time).median


@dataclass(frozen=True)
class AttentionMeasurement:
    """One row of :func:`measure_attention`: an implementation at one sequence length.

    ``error`` is ``‖out − out_ref‖ / ‖out_ref‖`` against the output of the ``reference`` implementation, or
    ``None`` when no reference was given.
    """

    name: str
    n: int
    seconds: float
    peak_bytes: int
    error: float | None = None

    @property
    def milliseconds(self) -> float:
        return 1e3 * self.seconds

    @property
    def peak_mib(self) -> float:
        return self.peak_bytes / 2**20


def _companion(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return scaled_dot_product_attention(q, k, v)


def _pytorch(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v)


Implementation = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], Any]


def _companion_blocked(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
) -> torch.Tensor:
    return blocked_attention(q, k, v)


def default_attention_implementations(
    *, blocked: bool = False
) -> dict[str, Implementation]:
    """The implementations :func:`measure_attention` compares by default.

    ``"companion"`` is :func:`companion.attention.scaled_dot_product_attention` (the matrix form, which
    stores the ``n × n`` scores), ``"pytorch"`` is ``torch.nn.functional.scaled_dot_product_attention`` (a
    fused kernel); with ``blocked=True`` also ``"blocked"``, :func:`companion.attention.blocked_attention`.
    """
    impls: dict[str, Implementation] = {"companion": _companion}
    if blocked:
        impls["blocked"] = _companion_blocked
    impls["pytorch"] = _pytorch
    return impls


def measure_attention(
    ns: Iterable[int] = (256, 512, 1024, 2048, 4096),
    *,
    implementations: Mapping[str, Implementation] | None = None,
    d: int = 64,
    batch: int = 1,
    heads: int = 8,
    max_n: Mapping[str, int] | None = None,
    qk_std: float = 1.0,
    reference: str | None = None,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
    min_run_time: float = 0.5,
    rounds: int = 1,
    memory: bool = True,
    seed: int = 0,
    progress: bool = False,
) -> list[AttentionMeasurement]:
    """Time and peak memory of each named attention function on random ``(batch, heads, n, d)`` inputs, each n.

    For every ``n`` one generator seeded with ``seed`` draws q, k and v (in that order; q and k scaled by
    ``qk_std``), the implementations are timed one after another, ``rounds`` times in turn, and the fastest
    round's median is kept: interleaving makes a busy machine slow all of them alike. Then each is called once
    more under :func:`measured_call` for its peak memory (and its output, for ``error``).

    Args:
        ns: sequence lengths.
        implementations: ``name → fn(q, k, v)``; default :func:`default_attention_implementations`.
        d: width of a head (the paper's ``d_k = 64``).
        batch, heads: leading dimensions of q, k, v.
        max_n: ``name → longest n`` for the slow ones (an implementation is skipped past its limit).
        qk_std: standard deviation of the entries of q and k (v's is 1).
        reference: the name of the implementation the others' outputs are compared with
            (the ``error`` field of :class:`AttentionMeasurement`); default none.
        dtype, device: of the random inputs.
        min_run_time: seconds of repetitions per timing (see :func:`time_call`).
        rounds: how many times to time every implementation, in turn.
        memory: also measure the peak memory (otherwise 0 is recorded).
        seed: seed of the random inputs.
        progress: print each measurement as it is made.

    Returns:
        One :class:`AttentionMeasurement` per n and per implementation that ran, in that order.
    """
    require_positive_ints(d=d, batch=batch, heads=heads, rounds=rounds)
    ns = list(ns)
    impls = (
        default_attention_implementations()
        if implementations is None
        else implementations
    )
    limits = {} if max_n is None else max_n
    for n in ns:
        require_int(n, "each n", low=1)
    if (
        not isinstance(impls, Mapping)
        or not impls
        or not all(callable(f) for f in impls.values())
    ):
        raise TypeError(
            f"implementations must map names to functions (q, k, v) -> out, got {describe(impls)}"
        )
    if not isinstance(limits, Mapping):
        raise TypeError(
            f"max_n must map implementation names to the longest n, got {describe(limits)}"
        )
    for name, limit in limits.items():
        require_int(limit, f"max_n[{name!r}]", low=1)
    if reference is not None and reference not in impls:
        raise ValueError(
            f"reference must be one of the implementations {list(impls)}, got {reference!r}"
        )
    require_number(qk_std, "qk_std", low=0, low_open=True)
    generator = torch.Generator().manual_seed(seed)
    rows: list[AttentionMeasurement] = []
    for n in ns:
        q, k, v = (
            torch.randn(batch, heads, n, d, generator=generator, dtype=dtype).to(device)
            for _ in range(3)
        )
        q, k = qk_std * q, qk_std * k
        running = {name: fn for name, fn in impls.items() if n <= limits.get(name, n)}
        best = dict.fromkeys(running, math.inf)
        for _ in range(rounds):
            for name, fn in running.items():
                best[name] = min(
                    best[name], time_call(fn, q, k, v, min_run_time=min_run_time)
                )
        with torch.no_grad():
            ref = None if reference is None else impls[reference](q, k, v)
            for name, fn in running.items():
                out, peak = (
                    measured_call(fn, q, k, v)
                    if memory
                    else (fn(q, k, v) if ref is not None else None, 0)
                )
                error = None if ref is None else float((out - ref).norm() / ref.norm())
                del out
                rows.append(AttentionMeasurement(name, n, best[name], peak, error))
                if progress:
                    print(
                        f"n={n:>6}  {name:<12} {1e3 * best[name]:10.2f} ms  {peak / 2**20:10.1f} MiB",
                        flush=True,
                    )
        del q, k, v, ref
    return rows


def format_table(
    rows: Sequence[AttentionMeasurement], *, baseline: str = "pytorch"
) -> str:
    """A text table: one line per n, each implementation's time and peak memory, and time / ``baseline``."""
    names = list(dict.fromkeys(r.name for r in rows))
    by_key = {(r.name, r.n): r for r in rows}
    ns = sorted({r.n for r in rows})
    head = f"{'n':>6}" + "".join(
        f" | {name + ' ms':>14} {name + ' MiB':>14}" for name in names
    )
    others = [name for name in names if name != baseline]
    if baseline in names:
        head += "".join(f" | {name + '/' + baseline:>20}" for name in others)
    lines = [head, "-" * len(head)]
    for n in ns:
        line = f"{n:>6}"
        for name in names:
            r = by_key.get((name, n))
            line += (
                f" | {r.milliseconds:14.2f} {r.peak_mib:14.1f}"
                if r
                else f" | {'-':>14} {'-':>14}"
            )
        if baseline in names:
            base = by_key.get((baseline, n))
            for name in others:
                r = by_key.get((name, n))
                ratio = f"{r.seconds / base.seconds:.2f}x" if r and base else "-"
                line += f" | {ratio:>20}"
        lines.append(line)
    return "\n".join(lines)


class LogLogFit(NamedTuple):
    """The least-squares line log y = intercept + slope · log x, and the slope's standard error."""

    slope: float
    intercept: float
    slope_se: float


def fit_loglog_slope(
    xs: Sequence[float], ys: Sequence[float] | torch.Tensor
) -> LogLogFit:
    """Fit y ∝ x^p: least squares log y = a + p log x over every point; ``ys`` is (len(xs),) or (len(xs), seeds).

    p = 1 is linear growth, p = 2 quadratic, p = -1/2 a Monte Carlo error. With several seeds per x every
    (x, seed) is a point. ``slope_se`` is the slope's standard error (NaN with only two points).
    """
    y = torch.as_tensor(ys, dtype=torch.float64)
    y = y[:, None] if y.ndim == 1 else y
    x = torch.as_tensor(xs, dtype=torch.float64)
    rule = f"need at least 2 positive x and positive y of shape (len(xs), seeds), got {list(xs)} and {describe(ys)}"
    if x.ndim != 1 or y.ndim != 2 or y.shape[0] != len(x) or len(x) < 2:
        raise ValueError(rule)
    # the logarithms need positive numbers
    require_entries(x, "xs", low=0, low_open=True)
    require_entries(y, "ys", low=0, low_open=True)
    log_x = x.log()[:, None].expand_as(y).reshape(-1)
    log_y = y.log().reshape(-1)
    a = torch.stack([torch.ones_like(log_x), log_x], dim=1)  # design matrix (points, 2)
    coef = torch.linalg.lstsq(a, log_y[:, None]).solution[:, 0]
    residual = log_y - a @ coef
    dof = len(log_y) - 2
    se = (
        math.sqrt(
            float(residual @ residual) / dof * float(torch.linalg.inv(a.T @ a)[1, 1])
        )
        if dof
        else math.nan
    )
    return LogLogFit(float(coef[1]), float(coef[0]), se)
