"""Smoke test of chapter 7's log-log figure, and its guide lines."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pytest

from companion.benchmarking import AttentionMeasurement
from companion.plotting.linear_attention import plot_linear_attention_cost


def test_plot_linear_attention_cost_draws_each_implementation_with_its_slope():
    ns = [512, 1024, 2048, 4096]
    rows = [AttentionMeasurement("sdpa", n, 1e-9 * n**2, 100 * n) for n in ns]
    rows += [AttentionMeasurement("chunked", n, 1e-6 * n, 0) for n in ns]  # no memory: not drawn there
    time_ax, memory_ax = plot_linear_attention_cost(rows)
    labels = [line.get_label() for line in time_ax.get_lines()]
    assert labels == ["sdpa, slope 2.00", "chunked, slope 1.00", "∝ n", "∝ n²"]
    assert [line.get_label() for line in memory_ax.get_lines()] == ["sdpa, slope 1.00", "∝ n", "∝ n²"]
    np.testing.assert_allclose(time_ax.get_lines()[0].get_ydata(), [1e-6 * n**2 for n in ns])  # milliseconds
    assert time_ax.get_xscale() == "log" and time_ax.get_yscale() == "log"
    assert time_ax.get_xlabel() == memory_ax.get_xlabel() == "sequence length n"
    plt.close("all")


def test_plot_linear_attention_cost_rejects_other_input():
    with pytest.raises(TypeError, match="AttentionMeasurement"):
        plot_linear_attention_cost([(512, 1.0)])
    with pytest.raises(TypeError, match="AttentionMeasurement"):
        plot_linear_attention_cost([])
