"""The measuring helpers behind the cost figures of chapters 4 and 8-10 and the benchmarks."""

import tracemalloc

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from raising import raises

from companion.benchmarking import (
    AttentionMeasurement,
    MemoryTracker,
    format_table,
    measure_attention,
    measured_call,
    peak_memory,
    time_call,
)
from companion.benchmarking.linear_attention import linear_attention_implementations


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

    small, large = peak(128), peak(256)
    assert small >= 2 * 128 * 128 * 4  # at least the (heads, n, n) float32 scores
    assert 3.5 < large / small < 4.5


def test_time_call_is_positive():
    assert (
        0
        < time_call(
            torch.mm, torch.randn(32, 32), torch.randn(32, 32), min_run_time=0.01
        )
        < 1
    )


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
    # the n × n matrix is materialised
    assert by["companion", 64].peak_bytes > by["pytorch", 64].peak_bytes
    table = format_table(rows)
    assert "companion/pytorch" in table and table.count("\n") == 3


def test_blocked_implementation_is_measured_when_asked():
    from companion.benchmarking import default_attention_implementations

    impls = default_attention_implementations(blocked=True)
    assert list(impls) == ["companion", "blocked", "pytorch"]
    rows = measure_attention(
        [64], d=8, heads=2, min_run_time=0.01, implementations=impls
    )
    by = {r.name: r for r in rows}
    assert by["blocked"].peak_bytes < by["companion"].peak_bytes
    assert "blocked/pytorch" in format_table(rows)


def test_peak_memory_is_measured_calls_number_and_sees_numpy_too():
    def numpy_matrix():
        return np.ones((100, 1000))  # 800,000 bytes that no torch tensor holds

    assert peak_memory(numpy_matrix) >= 100 * 1000 * 8
    assert measured_call(numpy_matrix)[1] >= 100 * 1000 * 8
    x = torch.ones(100_000, requires_grad=True)  # 400 kB

    def chain(x):
        return x.mul(2).sin().cos().sum()

    # without gradients at most two 400 kB intermediates are alive at once; with them, the three are kept for backward
    assert (
        2 * 400_000
        <= peak_memory(chain, x)
        < 1_000_000
        < 3 * 400_000
        <= measured_call(chain, x)[1]
    )


def test_measure_attention_skips_implementations_past_their_max_n():
    impls = linear_attention_implementations(causal=True)
    rows = measure_attention(
        [16, 64],
        implementations=impls,
        d=8,
        heads=2,
        min_run_time=0.01,
        max_n={"quadratic": 16, "cumsum": 16},
    )
    assert [(r.name, r.n) for r in rows] == [
        ("sdpa", 16),
        ("chunked", 16),
        ("cumsum", 16),
        ("recurrent", 16),
        ("quadratic", 16),
        ("sdpa", 64),
        ("chunked", 64),
        ("recurrent", 64),
    ]
    assert all(r.seconds > 0 and r.error is None for r in rows)
    by = {(r.name, r.n): r.peak_bytes for r in rows}
    # the quadratic form stores the 2 × 16 × 16 kernel matrix (float32) at least; the cumsum form 2·16·8·8 numbers
    assert (
        by["quadratic", 16] >= 2 * 16 * 16 * 4
        and by["cumsum", 16] >= 2 * 16 * 8 * 8 * 4
    )
    non_causal = linear_attention_implementations(causal=False)
    names = [
        r.name
        for r in measure_attention(
            [16], implementations=non_causal, d=8, heads=1, min_run_time=0.01
        )
    ]
    assert names == ["sdpa", "linear", "quadratic"]


def test_measure_attention_draws_q_k_v_from_its_seed_and_measures_the_error_against_the_reference():
    seen = []

    def record(q, k, v):
        seen.append((q.clone(), k.clone(), v.clone()))
        return F.scaled_dot_product_attention(q, k, v)

    impls = {
        "exact": lambda q, k, v: F.scaled_dot_product_attention(q, k, v),
        "half": lambda q, k, v: 0.5 * F.scaled_dot_product_attention(q, k, v),
        "values": lambda q, k, v: v,
        "recorded": record,
    }
    rows = measure_attention(
        [8, 12],
        implementations=impls,
        d=4,
        heads=3,
        batch=2,
        qk_std=0.5,
        reference="exact",
        min_run_time=0.01,
        seed=3,
    )
    g = torch.Generator().manual_seed(3)
    for n in (8, 12):
        q, k, v = (torch.randn(2, 3, n, 4, generator=g) for _ in range(3))
        q, k = 0.5 * q, 0.5 * k
        assert any(
            torch.equal(q, a) and torch.equal(k, b) and torch.equal(v, c)
            for a, b, c in seen
        )
        error = {r.name: r.error for r in rows if r.n == n}
        exact = F.scaled_dot_product_attention(q, k, v)
        assert error["exact"] == 0 and error["recorded"] == 0
        assert error["half"] == pytest.approx(0.5, rel=1e-6)  # ‖0.5 out − out‖ / ‖out‖
        assert error["values"] == pytest.approx(
            float((v - exact).norm() / exact.norm()), rel=1e-6
        )
    without_memory = measure_attention(
        [8],
        implementations=impls,
        d=4,
        reference="half",
        memory=False,
        min_run_time=0.01,
    )
    assert all(r.peak_bytes == 0 for r in without_memory)
    # ‖out − out/2‖ / ‖out/2‖
    assert {r.name: r.error for r in without_memory}["exact"] == pytest.approx(
        1.0, rel=1e-6
    )


def test_measure_attention_rejects_bad_input():
    impls = {"exact": lambda q, k, v: F.scaled_dot_product_attention(q, k, v)}
    with raises(ValueError, "each n", ">= 1", "got 0"):
        measure_attention([8, 0], implementations=impls)
    with raises(TypeError, "implementations"):
        measure_attention([8], implementations={})
    with raises(TypeError, "implementations must map names to functions"):
        measure_attention([8], implementations=[F.scaled_dot_product_attention])
    with raises(TypeError, "max_n", "got a list"):
        measure_attention([8], implementations=impls, max_n=[8])
    with raises(ValueError, "max_n['exact']", ">= 1", "got -1"):
        measure_attention([8], implementations=impls, max_n={"exact": -1})
    with raises(ValueError, "reference", "got 'pytorch'"):
        measure_attention([8], implementations=impls, reference="pytorch")
    with raises(ValueError, "qk_std", "> 0", "got 0"):
        measure_attention([8], implementations=impls, qk_std=0)
    with raises(TypeError, "heads", ">= 1"):
        measure_attention([8], implementations=impls, heads=2.0)


def _python_peak(fn, *args) -> int:
    """The peak of Python's own allocations (tracemalloc, no tracker) while ``fn(*args)`` runs."""
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        fn(*args)
        return tracemalloc.get_traced_memory()[1] - start
    finally:
        tracemalloc.stop()


def test_measured_call_leaves_out_the_trackers_own_python_objects():
    """Under the tracker every intermediate tensor gets a Python object and bookkeeping (hundreds of bytes each):
    they are the measurement's, not the function's, and must not swamp a function that keeps many small tensors."""
    from companion.linear_attention import linear_attention

    q, k, v = (torch.randn(1, 2, 256, 8) for _ in range(3))
    with torch.no_grad():
        with MemoryTracker() as tracker:  # the tensors alone
            linear_attention.recurrent(q, k, v)
        python = min(
            _python_peak(linear_attention.recurrent, q, k, v) for _ in range(3)
        )
        measured = min(
            measured_call(linear_attention.recurrent, q, k, v)[1] for _ in range(3)
        )
    # 24 kB of Python and 66 kB of tensors. The tracker's own objects added some 300 kB before they were left out;
    # what is left of them depends on when Python's garbage collector runs during the call: 20 to 90 kB over
    # tensors + Python in our runs (one CI run: 82 kB), so the bound is tensors + Python + 128 kB, the smallest
    # of three calls (the collector's timing only ever adds).
    assert tracker.peak <= measured < tracker.peak + python + 128 * 1024, (
        tracker.peak,
        python,
        measured,
    )
