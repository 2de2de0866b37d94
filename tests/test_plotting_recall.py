"""The recall sweep's figure: every run a dot at N / r, the bound N = r, min(1, r/N) and the no-lookup bars."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pytest
from raising import raises

from companion.plotting.recall import exact_readout_fraction, plot_recall_bound

RUNS = [
    {"kind": "softmax", "r": 2, "n_pairs": 1, "seed": 0, "accuracy": 1.0},
    {"kind": "softmax", "r": 2, "n_pairs": 8, "seed": 0, "accuracy": 0.99},
    {"kind": "softmax", "r": 2, "n_pairs": 8, "seed": 1, "accuracy": 0.97},
    {"kind": "linear", "r": 2, "n_pairs": 1, "seed": 0, "accuracy": 1.0},
    {"kind": "linear", "r": 2, "n_pairs": 8, "seed": 0, "accuracy": 0.2},
    {"kind": "linear", "r": 8, "n_pairs": 8, "seed": 0, "accuracy": 0.6},
]
NO_LOOKUP = {1: (1.0, 1.0), 8: (0.16, 0.26)}


def test_exact_readout_fraction_is_r_over_n_past_the_bound():
    # k exact one-hot rows are independent, so at most r of N: a loop over N at r = 4
    for n in range(1, 20):
        assert exact_readout_fraction([n / 4])[0] == pytest.approx(min(4, n) / n)


def test_plot_recall_bound_draws_every_run_the_bound_and_the_bands():
    axes = plot_recall_bound(RUNS, NO_LOOKUP)
    assert [ax.get_title() for ax in axes] == ["softmax", "linear"]
    for ax, kind in zip(axes, ("softmax", "linear"), strict=True):
        mine = [run for run in RUNS if run["kind"] == kind]
        dots = np.concatenate([c.get_offsets() for c in ax.collections])
        assert len(dots) == len(mine)  # each seed a dot
        assert sorted(dots[:, 1]) == sorted(run["accuracy"] for run in mine)
        expected_x = sorted(run["n_pairs"] / run["r"] for run in mine)
        # jittered by < 8 %
        np.testing.assert_allclose(sorted(dots[:, 0]), expected_x, rtol=0.15)
        lines = {line.get_label(): line for line in ax.get_lines()}
        assert list(lines["the bound N = r"].get_xdata()) == [1, 1]
        curve = lines["exact read-out of rank r: min(1, r/N)"]
        np.testing.assert_allclose(
            curve.get_ydata(), np.minimum(1, 1 / curve.get_xdata())
        )
        bars = [line for line in ax.get_lines() if line.get_label().startswith("_")]
        tops = sorted(max(bar.get_ydata()) for bar in bars)
        cells = sorted({(run["r"], run["n_pairs"]) for run in mine})
        assert tops == sorted(NO_LOOKUP[n][1] for _, n in cells)
        assert ax.get_xscale() == "log"
    dot_colours = {tuple(c.get_facecolor()[0]) for ax in axes for c in ax.collections}
    # not the kinds' colours
    assert not dot_colours & {matplotlib.colors.to_rgba(f"C{i}") for i in range(10)}
    plt.close("all")


def test_plot_recall_bound_rejects_inconsistent_input():
    with raises(TypeError, "runs must be"):
        plot_recall_bound([], NO_LOOKUP)
    with raises(ValueError, "fields"):
        plot_recall_bound([{"kind": "a", "r": 2}], NO_LOOKUP)
    with raises(ValueError, "in [0, 1]"):
        plot_recall_bound([dict(RUNS[0], accuracy=1.5)], NO_LOOKUP)
    with raises(ValueError, "no_lookup must be"):
        plot_recall_bound(RUNS, {8: (0.2, 0.3)})
    plt.close("all")


def test_plot_recall_bound_draws_the_runs_it_is_told_to_as_open_circles():
    axes = plot_recall_bound(RUNS, NO_LOOKUP, hollow=lambda run: run["r"] == 8)
    linear = axes[1]
    open_dots = [
        c.get_offsets()
        for c in linear.collections
        if c.get_facecolor().size == 0 or c.get_facecolor()[0][3] == 0
    ]
    assert len(open_dots) == 1 and list(open_dots[0][:, 1]) == [0.6]  # the r = 8 run
    filled = [c for c in axes[0].collections if c.get_facecolor()[0][3] > 0]
    assert sum(len(c.get_offsets()) for c in filled) == 3  # softmax: no r = 8 run
    labels = [text.get_text() for text in axes[0].figure.legends[0].get_texts()]
    assert "r = 8, another training budget" in labels  # from the second panel
    plt.close("all")
