"""Measuring attention: time and peak memory as the sequence length n grows.

Softmax attention builds the ``n × n`` matrix of scores, so its time and memory grow like ``n²``; linear,
banded and FMMformer attention grow like ``n``. One harness, :func:`measure_attention`, measures any set of
named attention functions over a list of lengths: chapter 4's O(n²) figure, chapters 8–10's comparisons and
the scripts in ``benchmarks/`` all call it, and :func:`companion.plotting.attention.plot_attention_cost` draws
its rows.

- time: :class:`torch.utils.benchmark.Timer` (``blocked_autorange``: enough repetitions to fill
  ``min_run_time`` seconds, median per call);
- peak memory: :func:`measured_call`, the one memory measurement of the package (the grader uses it too):
  :class:`MemoryTracker` adds up the bytes of every tensor created during the call and subtracts them when
  they are freed, ``tracemalloc`` adds what Python and NumPy allocate, and the largest total is reported (the
  inputs, made before, do not count); :func:`peak_memory` is the same number without gradients;
- growth: :func:`fit_loglog_slope`, the exponent p of a power law y ∝ x^p fitted to the measurements.

Sub-modules: :mod:`companion.benchmarking.linear_attention` (chapter 8: the forms of linear attention to
measure, and generation per token) and :mod:`companion.benchmarking.nbody` (chapter 9: the direct and the
cell sum).
"""

from .measuring import (
    AttentionMeasurement,
    LogLogFit,
    MemoryTracker,
    default_attention_implementations,
    fit_loglog_slope,
    format_table,
    measure_attention,
    measured_call,
    peak_memory,
    time_call,
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
