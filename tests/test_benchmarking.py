"""The measuring helpers behind the O(n²) figure and the benchmark."""

import torch

from companion.benchmarking import (
    AttentionMeasurement,
    MemoryTracker,
    format_table,
    measure_attention,
    peak_memory,
    time_call,
)


def test_memory_tracker_counts_new_tensors_not_inputs_or_views():
    x = torch.zeros(1000)  # 4000 bytes, made before: not counted
    with MemoryTracker() as tracker:
        y = x.view(10, 100)  # a view: no new memory
        z = torch.ones(500)  # 2000 bytes
        w = z * 2  # 2000 more
        del z, w
        u = torch.ones(250)  # 1000 bytes after the others were freed
    assert tracker.peak == 4000
    assert tracker.live == 1000
    del y, u


def test_peak_memory_of_attention_grows_like_n_squared():
    from companion.attention import scaled_dot_product_attention

    def peak(n):
        q = torch.randn(1, 2, n, 16)
        return peak_memory(scaled_dot_product_attention, q, q, q)

    small, large = peak(64), peak(128)
    assert small >= 2 * 64 * 64 * 4  # at least the (heads, n, n) float32 scores
    assert 3.5 < large / small < 4.5


def test_time_call_is_positive():
    assert 0 < time_call(torch.mm, torch.randn(32, 32), torch.randn(32, 32), min_run_time=0.01) < 1


def test_measure_attention_and_table():
    rows = measure_attention([32, 64], d=8, heads=2, min_run_time=0.01)
    assert [(r.name, r.n) for r in rows] == [
        ("companion", 32),
        ("pytorch", 32),
        ("companion", 64),
        ("pytorch", 64),
    ]
    assert all(isinstance(r, AttentionMeasurement) and r.seconds > 0 for r in rows)
    by = {(r.name, r.n): r for r in rows}
    assert by["companion", 64].peak_bytes > by["pytorch", 64].peak_bytes  # the n × n matrix is materialised
    table = format_table(rows)
    assert "companion/pytorch" in table and table.count("\n") == 3


def test_blocked_implementation_is_measured_when_asked():
    from companion.benchmarking import default_attention_implementations

    impls = default_attention_implementations(blocked=True)
    assert list(impls) == ["companion", "blocked", "pytorch"]
    rows = measure_attention([64], d=8, heads=2, min_run_time=0.01, implementations=impls)
    by = {r.name: r for r in rows}
    assert by["blocked"].peak_bytes < by["companion"].peak_bytes
    assert "blocked/pytorch" in format_table(rows)
