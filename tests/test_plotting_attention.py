"""Attention maps, and the cost figure of chapters 4 and 8-10, draw what they are given, with labelled axes."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import torch
from raising import raises

from companion.benchmarking import AttentionMeasurement
from companion.plotting.attention import (
    plot_attention,
    plot_attention_cost,
    plot_attention_heads,
)


def test_plot_attention_labels():
    w = torch.softmax(torch.randn(3, 4), dim=-1)
    ax = plot_attention(
        w, ["the", "cat", "sat"], ["a", "b", "c", "d"], title="Cross-attention"
    )
    assert ax.get_title() == "Cross-attention"
    assert ax.get_xlabel() and ax.get_ylabel()
    assert [t.get_text() for t in ax.get_yticklabels()] == ["the", "cat", "sat"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["a", "b", "c", "d"]
    assert len(ax.texts) == 12  # annotated
    plt.close("all")


def test_plot_attention_square_reuses_query_labels():
    ax = plot_attention(torch.eye(2), ["x", "y"], colorbar=False)
    assert [t.get_text() for t in ax.get_xticklabels()] == ["x", "y"]
    plt.close("all")


def test_plot_heads():
    axes = plot_attention_heads(
        torch.softmax(torch.randn(3, 4, 4), -1), list("abcd"), ncols=2
    )
    assert len(axes) == 3 and axes[2].get_title() == "head 2"
    plt.close("all")


NS = [512, 1024, 2048, 4096]


def cost_rows():
    """Exact power laws: sdpa's time grows like n², chunked's like n; chunked's memory was not measured (0)."""
    rows = [AttentionMeasurement("sdpa", n, 1e-9 * n**2, 100 * n) for n in NS]
    return rows + [AttentionMeasurement("chunked", n, 1e-6 * n, 0) for n in NS]


def test_plot_attention_cost_draws_each_implementation_with_its_slope_and_guides():
    time_ax, memory_ax = plot_attention_cost(cost_rows())
    labels = [line.get_label() for line in time_ax.get_lines()]
    assert labels == ["sdpa, slope 2.00", "chunked, slope 1.00", "∝ n", "∝ n²"]
    assert [line.get_label() for line in memory_ax.get_lines()] == [
        "sdpa, slope 1.00",
        "∝ n",
        "∝ n²",
    ]
    # milliseconds
    np.testing.assert_allclose(
        time_ax.get_lines()[0].get_ydata(), [1e-6 * n**2 for n in NS]
    )
    # MiB
    np.testing.assert_allclose(
        memory_ax.get_lines()[0].get_ydata(), [100 * n / 2**20 for n in NS]
    )
    # the guides pass through the geometric middle of the values drawn, at the geometric middle of n
    times_ms = [1e-6 * n**2 for n in NS] + [1e-3 * n for n in NS]
    middle, n_mid = (min(times_ms) * max(times_ms)) ** 0.5, (512 * 4096) ** 0.5
    for line, power in zip(time_ax.get_lines()[2:], (1, 2), strict=True):
        np.testing.assert_allclose(
            line.get_ydata(), [middle * (n / n_mid) ** power for n in NS]
        )
    assert time_ax.get_xscale() == "log" and time_ax.get_yscale() == "log"
    assert (
        time_ax.get_xlabel() == "sequence length n"
        and "memory" in memory_ax.get_ylabel()
    )
    assert [t.get_text() for t in time_ax.get_xticklabels()] == [str(n) for n in NS]
    plt.close("all")


def test_plot_attention_cost_draws_the_names_asked_for_in_their_order_with_the_guides_asked_for():
    time_ax, _ = plot_attention_cost(
        cost_rows(), names=["chunked", "sdpa"], guides=[2], slopes=False, title="T"
    )
    assert [line.get_label() for line in time_ax.get_lines()] == [
        "chunked",
        "sdpa",
        "∝ n²",
    ]
    assert time_ax.figure._suptitle.get_text() == "T"
    time_ax, memory_ax = plot_attention_cost(cost_rows(), names=["chunked"], guides=[])
    assert [line.get_label() for line in time_ax.get_lines()] == ["chunked, slope 1.00"]
    assert memory_ax.get_lines() == []  # chunked's memory was not measured
    _, given = plt.subplots(1, 2)
    assert list(plot_attention_cost(cost_rows(), axes=given)) == list(given)
    plt.close("all")


def test_plot_attention_cost_rejects_bad_input():
    with raises(TypeError, "rows", "empty", "got a list"):
        plot_attention_cost([(512, 1.0)])
    with raises(TypeError, "rows", "empty"):
        plot_attention_cost([])
    with raises(ValueError, "names", "got ['flash']"):
        plot_attention_cost(cost_rows(), names=["flash"])
    with raises(TypeError, "guide", "got a float"):
        plot_attention_cost(cost_rows(), guides=[1.5])
    with raises(ValueError, "axes must be two axes"):
        plot_attention_cost(cost_rows(), axes=plt.subplots(1, 3)[1])
    plt.close("all")


def test_bad_input():
    with raises(ValueError, "got shape (2, 2, 2)"):
        plot_attention(torch.ones(2, 2, 2))
    with raises(ValueError, "query_tokens", "(2, 3)", "got 3"):
        plot_attention(torch.ones(2, 3), ["a", "b", "c"])
    with raises(TypeError, "got a list"):
        plot_attention([[1.0]])
